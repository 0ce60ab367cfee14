"""The grid a planner fills: which job holds which GPU in which slot, and real-time capacity.

:class:`Occupancy` answers "where may this job start?" for every block and every
start at once with numpy, under rules 1, 3, 4, 5 and 7 of SPEC section 2. FIFO,
the heuristic and the environment's action masks all place jobs through it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from gpu_env import rules
from gpu_env.scenario import Job, Scenario

FREE = -1  # sentinel in Occupancy.owner


class OverlapError(ValueError):
    """A job placed on GPU-slots that another job already holds (rule 1: one job per GPU per slot)."""


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
        curves: (apps, T) GPUs reserved for each real-time app.
    """

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        longest = max((job.duration for job in scenario.jobs), default=0)
        self.width = scenario.slots + longest
        self.owner = np.full((scenario.gpus, self.width), FREE, dtype=np.int32)
        self.job_load = np.zeros(scenario.slots, dtype=np.int64)
        self.curves = np.zeros((len(scenario.apps), scenario.slots), dtype=np.int64)
        self.placed: dict[int, Slotting] = {}
        self._busy_csum: np.ndarray | None = None  # cache of _busy_cumsum(); place/remove reset it
        self._bits: list[int] | None = [0] * self.width  # busy GPUs per slot as bitmasks; see busy_bits()

    def copy(self) -> Occupancy:
        """An independent copy."""
        other = Occupancy.__new__(Occupancy)
        other.scenario = self.scenario
        other.width = self.width
        other.owner = self.owner.copy()
        other.job_load = self.job_load.copy()
        other.curves = self.curves.copy()
        other.placed = dict(self.placed)
        other._busy_csum = self._busy_csum  # never written in place, so it may be shared
        other._bits = None if self._bits is None else list(self._bits)
        if "_table" in self.__dict__:
            other._table = self._table  # static, never written
        return other

    # ------------------------------------------------------------------ capacity (rule 7)

    def slack(self) -> np.ndarray:
        """GPUs neither held by jobs nor reserved for real-time, per slot, shape (T,) (``rules.free_capacity``)."""
        return rules.free_capacity(self.scenario.gpus, self.job_load, self.curves.sum(axis=0))

    def set_curve(self, app: int, curve: np.ndarray) -> None:
        """Reserve a real-time curve for one app (the caller keeps rule 6)."""
        self.curves[app] = np.asarray(curve, dtype=np.int64)

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
        # Capacity: no slot of the span inside the horizon is short of k GPUs (rule 7).
        short = np.zeros(sc.slots + d + 1, dtype=np.int32)
        np.cumsum(rules.short_slots(self.slack(), k), out=short[1 : sc.slots + 1])
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
        """FIFO's choice: the earliest feasible start, then the lowest-index block.

        The first True of :meth:`feasible` in row-major order, found without building
        the whole mask: a scan over per-slot bitmasks of busy GPUs that stops at the
        first fit.

        Returns:
            (start, first GPU), or None when the job fits nowhere.
        """
        sc = self.scenario
        window = rules.start_window(job, sc.slots)
        search = block_search(job.gpus, sc.gpus, sc.node_size)
        if not len(window) or not search.allowed:
            return None
        d, k, T = job.duration, job.gpus, sc.slots
        bits = self.busy_bits()
        # short[t]: slots before t short of k GPUs (rule 7 holds for a span when none lies in it).
        short = [0, *itertools.accumulate(rules.short_slots(self.slack(), k).tolist())]
        for t in window:
            if short[min(t + d, T)] != short[t]:
                continue
            run = free_block_starts(bits, t, d, search)
            if run:
                return t, (run & -run).bit_length() - 1
        return None

    def busy_bits(self) -> list[int]:
        """Busy GPUs of each slot as a bitmask (bit g for GPU g), shape (width,), kept up to date by place/remove."""
        if self._bits is None:
            packed = np.packbits(self.owner != FREE, axis=0, bitorder="little")  # (ceil(G / 8), width)
            self._bits = [int.from_bytes(column.tobytes(), "little") for column in packed.T]
        return self._bits

    def place(self, job_index: int, start: int, first_gpu: int) -> None:
        """Put a job on ``first_gpu..first_gpu+k-1`` from ``start`` for its duration.

        Raises:
            OverlapError: When the GPUs are not free (the caller asks ``feasible`` first).
        """
        job = self.scenario.jobs[job_index]
        cells = self.owner[first_gpu : first_gpu + job.gpus, start : start + job.duration]
        bits = self._bits if first_gpu >= 0 and start >= 0 else None
        if bits is not None:  # the bitmasks mirror `owner != FREE`; cheaper than asking numpy
            mask = ((1 << job.gpus) - 1) << first_gpu
            span = range(start, min(start + job.duration, self.width))
            overlap = any(bits[s] & mask for s in span)
        else:
            self._bits = None  # an odd (negative) index: drop the bitmasks rather than mirror numpy's slicing
            overlap = bool((cells != FREE).any())
        if overlap:
            raise OverlapError(f"job {job.id!r} overlaps another job at start {start} on GPU {first_gpu}")
        cells[...] = job_index
        self._busy_csum = None
        if bits is not None:
            for s in span:
                bits[s] |= mask
        self.job_load[start : min(start + job.duration, self.scenario.slots)] += job.gpus
        self.placed[job_index] = Slotting(job_index, start, first_gpu)

    def remove(self, job_index: int) -> None:
        """Undo ``place``."""
        s = self.placed.pop(job_index)
        job = self.scenario.jobs[job_index]
        self.owner[s.first_gpu : s.first_gpu + job.gpus, s.start : s.start + job.duration] = FREE
        self._busy_csum = None
        if s.first_gpu < 0 or s.start < 0:
            self._bits = None  # rebuilt from `owner` when next needed
        if self._bits is not None:
            mask = ~(((1 << job.gpus) - 1) << s.first_gpu)
            for slot in range(s.start, min(s.start + job.duration, self.width)):
                self._bits[slot] &= mask
        self.job_load[s.start : min(s.start + job.duration, self.scenario.slots)] -= job.gpus

    def place_inherited(self) -> None:
        """Place every ``running_on`` job at slot 0 on its GPUs (rule 5)."""
        for i, job in enumerate(self.scenario.jobs):
            if job.running_on is not None and i not in self.placed:
                self.place(i, 0, job.running_on[0])

    # ------------------------------------------------------------------ batched queries (the environment's masks)

    def free_runs(self) -> np.ndarray:
        """How many consecutive free slots begin at each cell, slot-major.

        Returns:
            Int array of shape (width, G): entry [u, g] counts the slots u, u+1, ...
            in a row in which GPU g holds no job (0 where it is busy at u). Past
            its last busy cell a GPU is free for ever: the count there exceeds any
            duration.
        """
        cols = np.arange(self.width, dtype=np.int64)[:, None]
        nxt = np.where(self.owner.T != FREE, cols, _FAR)
        return np.minimum.accumulate(nxt[::-1], axis=0)[::-1] - cols

    def free_run_at(self, slot: int) -> np.ndarray:
        """Row ``slot`` of :meth:`free_runs`, shape (G,), without computing the others."""
        busy = self.owner[:, slot:] != FREE
        return np.where(busy.any(axis=1), busy.argmax(axis=1), _FAR - slot)

    def feasible_at(
        self,
        job_indices: np.ndarray | list[int],
        starts: np.ndarray | list[int] | int,
        slack: np.ndarray | None = None,
        runs: np.ndarray | None = None,
    ) -> np.ndarray:
        """Which first GPUs let each of several jobs start at one given slot each.

        The batched form of :meth:`feasible` for one start per job, indexed by
        first GPU instead of by block: ``feasible_at([j], [t])[0, a]`` equals
        ``feasible(job)[t, b]`` where ``a`` is the b-th allowed block start, and is
        False for every ``a`` that is not an allowed block start. A job may be
        asked about several starts at once by repeating its index.

        Args:
            job_indices: Indices into ``scenario.jobs``, shape (n,).
            starts: The start slot asked for each job, shape (n,), or one int for all.
            slack: Free capacity per slot, shape (T,), for rule 7; default :meth:`slack`.
                A planner that may lower real-time curves passes the capacity left
                above the apps' ramp floors instead.
            runs: :meth:`free_runs` of the current grid, when the caller has it already.

        Returns:
            Bool array of shape (n, G): entry [i, a] is True when job ``job_indices[i]``
            may start at ``starts[i]`` on GPUs ``a..a+k-1``: the block is allowed
            (rule 4), the start lies in the job's window (rules 3 and 5), the GPUs
            are free over ``[start, start + d)`` (rule 1, past the horizon too) and
            the slack covers k GPUs in every slot of the span inside the horizon (rule 7).
        """
        table = self._job_table()
        index, start = _jobs_and_starts(job_indices, starts)
        k = table.k[index][:, None]
        d = table.d[index]
        if runs is None:
            runs = self.free_runs()
        # GPU g is free over [start, start + d) when its free run at the start lasts d slots.
        free = runs[start % self.width] >= d[:, None]  # (n, G); starts outside the window are masked below
        # Free GPUs in a row from each GPU on: a block fits where that run covers k GPUs.
        gpus = table.gpu_index
        nxt = np.where(free, self.scenario.gpus, gpus)
        ok = np.minimum.accumulate(nxt[:, ::-1], axis=1)[:, ::-1] - gpus >= k
        ok &= table.allowed[index]
        # Capacity in every slot of the span inside the horizon, and the start window.
        if slack is None:
            slack = self.slack()
        offset = (table.slot_index - start[:, None]).view(np.uint64)  # negative: huge, outside every span
        short = ((offset < d[:, None]) & rules.short_slots(slack, k)).any(axis=1)
        outside = (start - table.lo[index]).view(np.uint64) >= table.window[index]
        ok[short | outside] = False
        return ok

    def narrow_feasible(
        self,
        previous: np.ndarray,
        job_indices: np.ndarray | list[int],
        starts: np.ndarray | list[int] | int,
        placed_job: int,
        slack: np.ndarray | None = None,
    ) -> np.ndarray:
        """Bring :meth:`feasible_at` answers up to date after one more job was placed.

        A placement only takes cells and capacity away, so a block that was
        feasible stays feasible unless it meets the new job's GPUs while both
        run, or the slack over its span no longer covers k. The result equals a
        fresh ``feasible_at(job_indices, starts, slack)``, for less work.

        Args:
            previous: (n, G) ``feasible_at(job_indices, starts, ...)`` from just before
                ``place(placed_job, ...)``.
            job_indices: Indices into ``scenario.jobs``, shape (n,).
            starts: The start slot of each answer, shape (n,), or one int for all.
            placed_job: The job placed since ``previous`` was computed.
            slack: Free capacity per slot after the placement; default :meth:`slack`.

        Returns:
            Bool array of shape (n, G), a new array.
        """
        table = self._job_table()
        index, start = _jobs_and_starts(job_indices, starts)
        spot = self.placed[placed_job]
        first, k_new, d_new = spot.first_gpu, table.k[placed_job], table.d[placed_job]
        k = table.k[index][:, None]
        d = table.d[index]
        both_run = (start < spot.start + d_new) & (start + d > spot.start)
        gpus = table.gpu_index
        meets = (gpus > first - k) & (gpus < first + k_new) & both_run[:, None]
        out = previous & ~meets
        if slack is None:
            slack = self.slack()
        offset = (table.slot_index - start[:, None]).view(np.uint64)
        out[((offset < d[:, None]) & rules.short_slots(slack, k)).any(axis=1)] = False
        return out

    def next_feasible_mask(self, job_index: int, first: int, stop: int, room: list[int]) -> tuple[int, int]:
        """The first start in ``first..stop-1`` at which a job fits, and where, as a bitmask.

        Args:
            job_index: Index into ``scenario.jobs``.
            first: The first start to try.
            stop: One past the last start to try (starts outside the job's window never fit).
            room: Free capacity per slot (T,) as plain ints, for rule 7 (see :meth:`feasible_at`'s ``slack``).

        Returns:
            (start, mask): bit a of ``mask`` is set exactly where ``feasible_at([job_index], [start], room)[0, a]``
            is True; (-1, 0) when no start in the range has any.
        """
        table = self._job_table()
        k, d = table.k_list[job_index], table.d_list[job_index]
        search = block_search(k, self.scenario.gpus, self.scenario.node_size)
        bits = self.busy_bits()
        for start in range(max(first, table.lo_list[job_index]), min(stop, table.hi_list[job_index])):
            if not rules.fits_capacity(room, k, start, d):
                continue
            run = free_block_starts(bits, start, d, search)
            if run:
                return start, run
        return -1, 0

    def narrow_masks(
        self,
        previous: list[int],
        job_indices: list[int],
        starts: list[int],
        placed_job: int,
        slack: np.ndarray | None = None,
    ) -> list[int]:
        """:meth:`narrow_feasible` on bitmasks: bit a of ``previous[i]`` stands for column a of its row.

        Same answers as :meth:`narrow_feasible` (one int per row, bit g for first GPU g),
        with plain ints: cheaper for the few rows a placement touches. Starts must lie
        in ``0..T-1``.
        """
        table = self._job_table()
        k_of, d_of = table.k_list, table.d_list
        spot = self.placed[placed_job]
        first, begin = spot.first_gpu, spot.start
        k_new, finish = k_of[placed_job], spot.start + d_of[placed_job]
        room = (self.slack() if slack is None else slack).tolist()
        out = []
        for bits, j, start in zip(previous, job_indices, starts, strict=True):
            k, d = k_of[j], d_of[j]
            if start < finish and start + d > begin:  # both run: the block may not meet the new job's GPUs
                lo = max(first - k + 1, 0)
                bits &= ~(((1 << (first + k_new)) - 1) ^ ((1 << lo) - 1))
            if bits and not rules.fits_capacity(room, k, start, d):
                bits = 0
            out.append(bits)
        return out

    def _job_table(self) -> _JobTable:
        """Per-job sizes, start windows and allowed first GPUs, built once per instance."""
        table = self.__dict__.get("_table")
        if table is None:
            table = _JobTable.build(self.scenario)
            self._table = table
        return table


def _jobs_and_starts(
    job_indices: np.ndarray | list[int], starts: np.ndarray | list[int] | int
) -> tuple[np.ndarray, np.ndarray]:
    """The job indices, shape (n,), and their start slots, shape (n,): one int start is every job's."""
    index = np.asarray(job_indices, dtype=np.intp).reshape(-1)
    if np.ndim(starts) == 0:
        return index, np.full(index.size, int(starts), dtype=np.int64)
    return index, np.asarray(starts, dtype=np.int64).reshape(-1)


def block_shifts(k: int) -> tuple[int, ...]:
    """Shifts such that ``run &= run >> shift`` for each turns "GPU a is free" into "GPUs a..a+k-1 are free".

    Runs of 1, 2, 4, ... GPUs, then one overlapping step to k (none for k = 1).
    """
    shifts, have = [], 1
    while 2 * have <= k:
        shifts.append(have)
        have *= 2
    if have < k:
        shifts.append(k - have)
    return tuple(shifts)


class BlockSearch(NamedTuple):
    """What a search for free blocks of k GPUs in bitmasks of busy GPUs needs (:func:`free_block_starts`)."""

    everyone: int  # the mask of all G GPUs
    allowed: int  # the mask of allowed first GPUs (rule 4: rules.allowed_block_mask)
    shifts: tuple[int, ...]  # block_shifts(k)


@lru_cache(maxsize=4096)
def block_search(k: int, gpus: int, node_size: int) -> BlockSearch:
    """The :class:`BlockSearch` of blocks of k GPUs on a cluster of ``gpus`` GPUs in nodes of ``node_size``."""
    return BlockSearch((1 << gpus) - 1, rules.allowed_block_mask(k, gpus, node_size), block_shifts(k))


def free_block_starts(bits: list[int], start: int, d: int, search: BlockSearch) -> int:
    """Bitmask of allowed first GPUs a whose block a..a+k-1 is free in every slot of ``[start, start + d)``.

    ``bits`` are the per-slot busy bitmasks (:meth:`Occupancy.busy_bits`); ``search`` is :func:`block_search`'s.
    """
    span = 0
    for s in range(start, start + d):
        span |= bits[s]
    run = search.everyone & ~span  # bit a: GPU a free over the span; the shifts grow runs of free GPUs to k
    for shift in search.shifts:
        run &= run >> shift
    return run & search.allowed


_FAR = 1 << 40  # "free for ever" in Occupancy.free_runs


@dataclass(frozen=True)
class _JobTable:
    """Static facts about a scenario's jobs that the batched queries read (rules 3, 4, 5)."""

    k: np.ndarray  # (J,) GPUs per job
    d: np.ndarray  # (J,) duration
    lo: np.ndarray  # (J,) first allowed start
    window: np.ndarray  # (J,) uint64 number of allowed starts
    allowed: np.ndarray  # (J, G) bool: allowed first GPUs of the job's block
    gpu_index: np.ndarray  # (1, G) 0..G-1
    slot_index: np.ndarray  # (1, T) 0..T-1
    k_list: tuple[int, ...]  # k as plain ints
    lo_list: tuple[int, ...]  # lo as plain ints
    hi_list: tuple[int, ...]  # one past the last allowed start, as plain ints
    d_list: tuple[int, ...]  # d as plain ints

    @classmethod
    def build(cls, scenario: Scenario) -> _JobTable:
        jobs = scenario.jobs
        allowed = np.zeros((len(jobs), scenario.gpus), dtype=bool)
        lo = np.zeros(len(jobs), dtype=np.int64)
        hi = np.zeros(len(jobs), dtype=np.int64)
        for i, job in enumerate(jobs):
            allowed[i, rules.allowed_block_starts(job.gpus, scenario.gpus, scenario.node_size)] = True
            window = rules.start_window(job, scenario.slots)
            lo[i], hi[i] = window.start, max(window.start, window.stop)
        return cls(
            k=np.array([job.gpus for job in jobs], dtype=np.int64),
            d=np.array([job.duration for job in jobs], dtype=np.int64),
            lo=lo,
            window=(hi - lo).astype(np.uint64),
            allowed=allowed,
            gpu_index=np.arange(scenario.gpus, dtype=np.int64)[None, :],
            slot_index=np.arange(scenario.slots, dtype=np.int64)[None, :],
            k_list=tuple(job.gpus for job in jobs),
            lo_list=tuple(lo.tolist()),
            hi_list=tuple(hi.tolist()),
            d_list=tuple(job.duration for job in jobs),
        )
