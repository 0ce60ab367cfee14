"""The grid a planner fills: which job holds which GPU in which slot, and real-time capacity.

:class:`Occupancy` answers "where may this job start?" for every block and every
start at once with numpy, under rules 1, 3, 4, 5 and 7 of SPEC section 2. FIFO,
the heuristic and the environment's action masks all place jobs through it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu_env import rules
from gpu_env.scenario import Job, Scenario

FREE = -1  # sentinel in Occupancy.owner


@dataclass(frozen=True)
class Slotting:
    """One placement of a job: its start slot and first GPU."""

    job: int  # index into scenario.jobs
    start: int
    first_gpu: int


class Occupancy:
    """GPUs x slots ownership (past the horizon too) and per-slot capacity use.

    Attributes:
        owner: (G, T + max duration) job index holding each GPU-slot, or FREE.
        job_load: (T,) GPUs held by jobs in each slot inside the horizon.
        realtime: (apps, T) GPUs reserved for each real-time app.
    """

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        longest = max((job.duration for job in scenario.jobs), default=0)
        self.width = scenario.slots + longest
        self.owner = np.full((scenario.gpus, self.width), FREE, dtype=np.int32)
        self.job_load = np.zeros(scenario.slots, dtype=np.int64)
        self.realtime = np.zeros((len(scenario.realtime), scenario.slots), dtype=np.int64)
        self.placed: dict[int, Slotting] = {}
        self._busy_csum: np.ndarray | None = None  # cache of _busy_cumsum(); place/remove reset it

    def copy(self) -> Occupancy:
        """An independent copy."""
        other = Occupancy.__new__(Occupancy)
        other.scenario = self.scenario
        other.width = self.width
        other.owner = self.owner.copy()
        other.job_load = self.job_load.copy()
        other.realtime = self.realtime.copy()
        other.placed = dict(self.placed)
        other._busy_csum = self._busy_csum  # never written in place, so it may be shared
        return other

    # ------------------------------------------------------------------ capacity (rule 7)

    def slack(self) -> np.ndarray:
        """GPUs neither held by jobs nor reserved for real-time, per slot, shape (T,)."""
        return self.scenario.gpus - self.job_load - self.realtime.sum(axis=0)

    def set_realtime(self, app: int, curve: np.ndarray) -> None:
        """Reserve a real-time curve for one app (the caller keeps rule 6)."""
        self.realtime[app] = np.asarray(curve, dtype=np.int64)

    # ------------------------------------------------------------------ where a job may go

    def feasible(self, job: Job) -> np.ndarray:
        """Which (start, block) pairs keep the plan valid for this job.

        Returns:
            Boolean array of shape (T, B): entry [t, b] is True when the job may
            start at slot t on the b-th allowed block
            (``rules.allowed_block_starts``): t lies in its start window, the
            block is free over ``[t, t + d)`` (past the horizon too), and the
            slack covers k GPUs in every slot of the span inside the horizon.
        """
        sc = self.scenario
        starts = rules.allowed_block_starts(job.gpus, sc.gpus, sc.node_size)
        out = np.zeros((sc.slots, starts.size), dtype=bool)
        window = rules.start_window(job, sc.slots)
        if not len(window) or not starts.size:
            return out
        t0, t1 = window.start, window.stop
        d, k = job.duration, job.gpus
        # Busy GPU-slots per GPU over [t, t + d) for every t, via a cumulative sum over time.
        csum = self._busy_cumsum()
        span_busy = csum[:, t0 + d : t1 + d] - csum[:, t0:t1]  # (G, n_t)
        # Busy GPUs inside each block, via a cumulative sum over GPUs.
        gsum = np.zeros((sc.gpus + 1, t1 - t0), dtype=np.int32)
        np.cumsum(span_busy > 0, axis=0, out=gsum[1:])
        block_busy = gsum.take(starts + k, axis=0) - gsum.take(starts, axis=0)  # (B, n_t)
        # Capacity: no slot of the span inside the horizon has less than k GPUs of slack.
        short = np.zeros(sc.slots + d + 1, dtype=np.int32)
        np.cumsum(self.slack() < k, out=short[1 : sc.slots + 1])
        short[sc.slots + 1 :] = short[sc.slots]
        fits = short[t0 + d : t1 + d] == short[t0:t1]  # (n_t,)
        out[t0:t1] = (block_busy == 0).T & fits[:, None]
        return out

    def _busy_cumsum(self) -> np.ndarray:
        """Busy slots of each GPU before each slot, shape (G, width + 1), cached until the next place/remove."""
        if self._busy_csum is None:
            csum = np.zeros((self.scenario.gpus, self.width + 1), dtype=np.int32)
            np.cumsum(self.owner != FREE, axis=1, out=csum[:, 1:])
            self._busy_csum = csum
        return self._busy_csum

    def earliest(self, job: Job) -> tuple[int, int] | None:
        """FIFO's choice: the earliest feasible start, then the lowest-index block."""
        feasible = self.feasible(job)
        rows = np.flatnonzero(feasible.any(axis=1))
        if not rows.size:
            return None
        t = int(rows[0])
        b = int(np.argmax(feasible[t]))
        first = int(rules.allowed_block_starts(job.gpus, self.scenario.gpus, self.scenario.node_size)[b])
        return t, first

    def place(self, job_index: int, start: int, first_gpu: int) -> None:
        """Put a job on ``first_gpu..first_gpu+k-1`` from ``start`` for its duration.

        Raises:
            ValueError: When the GPUs are not free (the caller asks ``feasible`` first).
        """
        job = self.scenario.jobs[job_index]
        cells = self.owner[first_gpu : first_gpu + job.gpus, start : start + job.duration]
        if (cells != FREE).any():
            raise ValueError(f"job {job.id!r} overlaps another job at start {start} on GPU {first_gpu}")
        cells[...] = job_index
        self._busy_csum = None
        self.job_load[start : min(start + job.duration, self.scenario.slots)] += job.gpus
        self.placed[job_index] = Slotting(job_index, start, first_gpu)

    def remove(self, job_index: int) -> None:
        """Undo ``place``."""
        s = self.placed.pop(job_index)
        job = self.scenario.jobs[job_index]
        self.owner[s.first_gpu : s.first_gpu + job.gpus, s.start : s.start + job.duration] = FREE
        self._busy_csum = None
        self.job_load[s.start : min(s.start + job.duration, self.scenario.slots)] -= job.gpus

    def place_inherited(self) -> None:
        """Place every ``running_on`` job at slot 0 on its GPUs (rule 5)."""
        for i, job in enumerate(self.scenario.jobs):
            if job.running_on is not None and i not in self.placed:
                self.place(i, 0, job.running_on[0])
