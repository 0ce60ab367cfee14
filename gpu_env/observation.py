"""The observation of an :class:`~gpu_env.episode.Episode` as fixed-shape numpy arrays.

:class:`Encoder` (and :func:`encode`) work on a plain episode, without
gymnasium, so that a policy exported to ONNX can be rolled out with numpy
alone. Every array is float32 except the action mask (int8); rows beyond the
scenario's sizes are zero and their ``valid`` column is 0. Time-indexed arrays
are indexed by slot (column t is slot t); ``globals`` holds the clock, and job
features are relative to it.

Keys and shapes (``Limits`` gives the padded sizes):

* ``jobs`` (max_jobs, len(JOB_FEATURES)): one row per job to place, file order;
  the row index is the job part of the action.
* ``grid`` (max_gpus, max_slots, 2): channel 0 a job placed by this episode
  holds the GPU-slot, channel 1 inherited work holds it.
* ``gpus`` (max_gpus, len(GPU_FEATURES)).
* ``slots`` (max_slots, len(SLOT_FEATURES)): capacity, load and real-time per slot.
* ``apps`` (max_apps, max_slots, len(APP_CURVES)): each app's demand, allocation and ramp floor.
* ``app_info`` (max_apps, len(APP_FEATURES)).
* ``globals`` (len(GLOBAL_FEATURES),).
* ``action_mask`` (n_actions,): 1 where the action is allowed.

Scales: GPU counts are divided by G, times by T, job weights and penalties by
the scenario's largest job weight ``w_max``, values and costs by the episode's
reward scale (so ``value_now`` is the reward the placement would earn before
any real-time cost).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu_env.episode import FIT_RULES, Episode

JOB_FEATURES: tuple[str, ...] = (
    "valid",  # 1 for a row that holds a job
    "pending",  # not placed and can still start at some slot >= clock
    "placed",
    "now",  # can start at the clock: its placement actions are allowed
    "gpus",  # k / G
    "gpus_per_node",  # k / node_size
    "duration",  # d / T
    "weight",  # w / w_max
    "release",  # (release - clock) / T
    "last_start",  # (last allowed start - clock) / T: negative once it can no longer start
    "deadline",  # 1 when the job has a deadline
    "earliest",  # (earliest feasible start - clock) / T; 1 when it cannot start any more
    "value_now",  # job value if started at the clock, in reward units
    "value_earliest",  # job value if started at its earliest feasible start, in reward units
    "realtime_take",  # real-time GPU-slots a start at the clock would take from the curves, / (k * d)
    "realtime_cost",  # those GPU-slots times the lowest app penalty, in reward units (before ramp effects)
    "blocks_now",  # share of its allowed blocks that are free at the clock
    *(f"{rule}_{what}" for rule in FIT_RULES for what in ("gpu", "waste")),  # per fit rule: first GPU / G, waste / node
)

GPU_FEATURES: tuple[str, ...] = (
    "valid",
    "node_position",  # (g mod node_size) / node_size
    "free_now",  # consecutive free slots from the clock on, / max_slots (capped at 1)
)

SLOT_FEATURES: tuple[str, ...] = (
    "inside",  # 1 for slots inside the scenario's horizon
    "past",  # 1 for slots before the clock (no job can start there any more)
    "job_load",  # GPUs held by jobs / G
    "realtime",  # GPUs of all real-time curves / G
    "demand",  # real-time demand of all apps / G
    "shortfall",  # unserved demand / G
    "slack",  # GPUs neither held by jobs nor reserved for real-time / G
    "room",  # GPUs a new job may use (above the ramp floors when trading real-time) / G
    "decay",  # decay ** slot
)

APP_CURVES: tuple[str, ...] = ("demand", "allocation", "floor")  # each / G

APP_FEATURES: tuple[str, ...] = (
    "valid",
    "penalty",  # P / w_max: above 1 a GPU-slot served is worth more than any job's GPU-slot
    "ramp",  # R / G
    "initial",  # initial allocation / G
)

GLOBAL_FEATURES: tuple[str, ...] = (
    "clock",  # clock / T
    "remaining",  # (T - clock) / max_slots
    "horizon",  # T / max_slots
    "gpus",  # G / max_gpus
    "node_size",  # node_size / G
    "pending",  # pending jobs / max_jobs
    "objective",  # objective of the plan so far, in reward units
    "decay",  # the scenario's decay per slot
    "trade_realtime",  # 1 when placements may lower real-time curves
)

# The column of each feature, by name: every reader indexes through these (the Encoder here, the batched
# engine's kernels in gpu_env/batch/_kernels.py), never through a number written beside the names.
JOB_COLUMN: dict[str, int] = {name: i for i, name in enumerate(JOB_FEATURES)}
GPU_COLUMN: dict[str, int] = {name: i for i, name in enumerate(GPU_FEATURES)}
SLOT_COLUMN: dict[str, int] = {name: i for i, name in enumerate(SLOT_FEATURES)}
APP_CURVE_COLUMN: dict[str, int] = {name: i for i, name in enumerate(APP_CURVES)}
GLOBAL_COLUMN: dict[str, int] = {name: i for i, name in enumerate(GLOBAL_FEATURES)}
JOB_STATIC = slice(JOB_COLUMN["gpus"], JOB_COLUMN["deadline"] + 1)
"""The job columns of ``Episode.row_table``, in its order (k/G, k/node, d/T, w/w_max, release, last start, deadline)."""
JOB_TIMES = slice(JOB_COLUMN["release"], JOB_COLUMN["last_start"] + 1)
"""``release`` and ``last_start``: row-table times less the clock."""
JOB_NOW = slice(JOB_COLUMN["realtime_take"], len(JOB_FEATURES))
"""The columns only rows that can start at the clock have (real-time take and cost, blocks, the fit rules)."""
OBSERVE_BITS: dict[str, int] = {"jobs": 1, "gpus": 2, "slots": 4, "apps": 8, "globals": 16, "action_mask": 32}
"""The observation keys the batched engine's kernel ``observe_into`` fills, as bits of its ``which`` argument
(:mod:`gpu_env.batch.kernels`)."""

_J_VALID, _J_PENDING, _J_PLACED, _J_NOW = (JOB_COLUMN[n] for n in ("valid", "pending", "placed", "now"))
_J_FLAGS = slice(_J_PENDING, _J_NOW + 1)  # pending, placed, now
_J_EARLIEST, _J_VALUE_NOW, _J_VALUE_EARLIEST = (JOB_COLUMN[n] for n in ("earliest", "value_now", "value_earliest"))
_J_VALUES = slice(_J_EARLIEST, _J_VALUE_EARLIEST + 1)  # earliest, value_now, value_earliest
_ROW_TIMES = slice(JOB_TIMES.start - JOB_STATIC.start, JOB_TIMES.stop - JOB_STATIC.start)  # in Episode.row_table
_G_VALID, _G_POSITION, _G_FREE = (GPU_COLUMN[n] for n in ("valid", "node_position", "free_now"))
_S_INSIDE, _S_PAST, _S_LOAD, _S_REALTIME, _S_DEMAND, _S_SHORTFALL, _S_SLACK, _S_ROOM, _S_DECAY = (
    SLOT_COLUMN[n] for n in ("inside", "past", "job_load", "realtime", "demand", "shortfall", "slack", "room", "decay")
)
_A_DEMAND, _A_ALLOCATION, _A_FLOOR = (APP_CURVE_COLUMN[n] for n in ("demand", "allocation", "floor"))
_PLACED, _INHERITED = 0, 1  # the grid's channels: jobs placed by this episode, inherited work


@dataclass(frozen=True)
class Limits:
    """The padded sizes of an observation: the largest scenario it can hold."""

    max_gpus: int
    max_jobs: int
    max_slots: int
    max_apps: int

    def check(self, episode: Episode) -> None:
        """Raise ValueError naming the size when an episode's scenario does not fit."""
        sc = episode.scenario
        for name, value, limit in (
            ("max_gpus", sc.gpus, self.max_gpus),
            ("max_jobs", episode.rows.size, self.max_jobs),
            ("max_slots", sc.slots, self.max_slots),
            ("max_apps", len(sc.apps), self.max_apps),
        ):
            if value > limit:
                raise ValueError(f"scenario {sc.name!r} needs {name} >= {value}, the environment has {limit}")


def shapes(limits: Limits, n_actions: int) -> dict[str, tuple[int, ...]]:
    """The shape of each observation array."""
    return {
        "jobs": (limits.max_jobs, len(JOB_FEATURES)),
        "grid": (limits.max_gpus, limits.max_slots, 2),
        "gpus": (limits.max_gpus, len(GPU_FEATURES)),
        "slots": (limits.max_slots, len(SLOT_FEATURES)),
        "apps": (limits.max_apps, limits.max_slots, len(APP_CURVES)),
        "app_info": (limits.max_apps, len(APP_FEATURES)),
        "globals": (len(GLOBAL_FEATURES),),
        "action_mask": (n_actions,),
    }


class Encoder:
    """Observation buffers for one episode, brought up to date from its placement log.

    Static columns are filled once; each call to :meth:`observe` applies the
    placements made since the last call and recomputes the columns that move
    with the clock.
    """

    def __init__(self, episode: Episode, limits: Limits, reward_scale: float) -> None:
        """Allocate and fill the static parts.

        Raises:
            ValueError: The episode's scenario does not fit ``limits``.
        """
        limits.check(episode)
        ep = episode
        sc = ep.scenario
        G, T, H = sc.gpus, sc.slots, limits.max_slots
        self.episode = ep
        self.limits = limits
        self.reward_scale = reward_scale
        R = ep.rows.size
        n_apps = len(sc.apps)

        self.jobs = np.zeros((limits.max_jobs, len(JOB_FEATURES)), dtype=np.float32)
        self.jobs[:R, _J_VALID] = 1.0
        self.jobs[:R, JOB_STATIC] = ep.row_table
        self._times = ep.row_table[:, _ROW_TIMES].copy()  # release / T and last start / T
        self._values = ep.values / reward_scale  # (R, T + 1) value of each start, in reward units
        self._per_area = 1.0 / (ep.k * ep.d)
        self._per_block = 1.0 / np.maximum(ep.n_blocks, 1)
        self._cut_cost = ep.cheapest_penalty / reward_scale
        self._rows = np.arange(R)
        # Plain-number copies for the rows updated one by one (same float64 arithmetic as numpy's).
        self._per_area_list = self._per_area.tolist()
        self._per_block_list = self._per_block.tolist()
        self._fit_scale = (1.0 / G, 1.0 / sc.node_size) * len(FIT_RULES)
        self._curves_seen: np.ndarray | None = None
        self._touched_seen = 0
        self._realtime_slack_list: list[int] = []

        self.grid = np.zeros((limits.max_gpus, H, 2), dtype=np.float32)
        for job in sc.jobs:
            if job.running_on is not None:
                self.grid[job.running_on[0] : job.running_on[0] + job.gpus, : min(job.duration, H), _INHERITED] = 1.0
        self.gpus = np.zeros((limits.max_gpus, len(GPU_FEATURES)), dtype=np.float32)
        self.gpus[:G, _G_VALID] = 1.0
        self.gpus[:G, _G_POSITION] = (np.arange(G) % sc.node_size) / sc.node_size

        self.slots = np.zeros((H, len(SLOT_FEATURES)), dtype=np.float32)
        self.slots[:T, _S_INSIDE] = 1.0
        self.slots[:T, _S_DEMAND] = ep.demand.sum(axis=0) / G
        self.slots[:T, _S_DECAY] = sc.decay_weights
        self.apps = np.zeros((limits.max_apps, H, len(APP_CURVES)), dtype=np.float32)
        self.apps[:n_apps, :T, _A_DEMAND] = ep.demand / G
        self.apps[:n_apps, :T, _A_FLOOR] = ep.floors / G
        self.app_info = np.zeros((limits.max_apps, len(APP_FEATURES)), dtype=np.float32)
        self.app_info[:n_apps] = ep.app_table

        self._placed_seen = 0
        self._loads_seen = -1
        self._clock_seen = -1
        self._realtime_slack = np.zeros(T)

    def observe(self, copy: bool = True) -> dict[str, np.ndarray]:
        """The observation of the episode's current state.

        Args:
            copy: Return fresh arrays (Gymnasium's contract); False returns the
                buffers themselves, valid until the next step.
        """
        ep = self.episode
        clock = ep.clock
        moved = clock != self._clock_seen
        if self._placed_seen < len(ep.log) or self._loads_seen < 0:
            self._apply_placements(moved)
        if moved:
            self._move_clock(clock)
        pending_count = self._update_jobs(clock, moved) if ep.rows.size else 0
        self._clock_seen = clock
        glob = self._globals(clock, pending_count)
        mask = ep.action_mask().view(np.int8)
        if copy:
            return {
                "jobs": self.jobs.copy(),
                "grid": self.grid.copy(),
                "gpus": self.gpus.copy(),
                "slots": self.slots.copy(),
                "apps": self.apps.copy(),
                "app_info": self.app_info.copy(),
                "globals": glob,
                "action_mask": mask,
            }
        return {
            "jobs": self.jobs,
            "grid": self.grid,
            "gpus": self.gpus,
            "slots": self.slots,
            "apps": self.apps,
            "app_info": self.app_info,
            "globals": glob,
            "action_mask": mask,
        }

    def _apply_placements(self, moved: bool) -> None:
        """Mark the placements logged since the last call on the grid, and refresh the per-slot loads.

        Args:
            moved: Whether the clock moved since the last call; when it did not, the new
                placements start at the clock and their GPUs stop being free from it on.
        """
        ep = self.episode
        sc = ep.scenario
        G, T, H = sc.gpus, sc.slots, self.limits.max_slots
        for row, start, first in ep.log[self._placed_seen :]:
            self.grid[first : first + ep.k[row], start : min(start + ep.d[row], H), _PLACED] = 1.0
            if not moved:  # placed at the clock: its GPUs are no longer free from the clock on
                self.gpus[first : first + ep.k[row], _G_FREE] = 0.0
        self._placed_seen = len(ep.log)
        self._loads_seen = 0
        load = ep.occupancy.job_load
        if ep.curves is not self._curves_seen:  # the episode replaces its curves when they change
            self._curves_seen = ep.curves
            self._realtime = ep.curves.sum(axis=0)
            self.slots[:T, _S_REALTIME] = self._realtime / G
            self.slots[:T, _S_SHORTFALL] = np.maximum(0, ep.demand - ep.curves).sum(axis=0) / G
            self.apps[: ep.curves.shape[0], :T, _A_ALLOCATION] = ep.curves / G
        self._realtime_slack = G - load - self._realtime
        self._realtime_slack_list = self._realtime_slack.tolist()
        slots = self.slots[:T]
        slots[:, _S_LOAD] = load / G
        slots[:, _S_SLACK] = self._realtime_slack / G
        slots[:, _S_ROOM] = ep.job_slack() / G

    def _move_clock(self, clock: int) -> None:
        """Refresh the slot and GPU columns that depend on the clock alone.

        Args:
            clock: The episode's clock.
        """
        ep = self.episode
        G, H = ep.scenario.gpus, self.limits.max_slots
        self.slots[: ep.scenario.slots, _S_PAST] = ep.slot_index[0] < clock
        self.gpus[:G, _G_FREE] = np.minimum(ep.free_at_clock(), H) * (1.0 / H)

    def _update_jobs(self, clock: int, moved: bool) -> int:
        """Bring the job rows up to date (the episode has at least one row).

        Args:
            clock: The episode's clock.
            moved: Whether the clock moved since the last call: all rows are rewritten
                then, else only the rows whose earliest start moved.

        Returns:
            The number of pending jobs.
        """
        ep = self.episode
        T = ep.scenario.slots
        jobs = self.jobs[: ep.rows.size]
        e = ep.earliest
        e_list = e.tolist()
        pending_count = sum(1 for s in e_list if s >= 0)
        values = self._values
        column = min(clock, T)
        if moved:
            now = e == clock
            pending = e >= 0
            jobs[:, _J_PENDING] = pending
            jobs[:, _J_PLACED] = ep.placed
            jobs[:, _J_NOW] = now
            jobs[:, JOB_TIMES] = self._times - clock / T
            jobs[:, _J_EARLIEST] = np.where(pending, (e - clock) / T, 1.0)
            jobs[:, _J_VALUE_NOW] = values[:, column] * now
            jobs[:, _J_VALUE_EARLIEST] = values[self._rows, e]  # e = -1 reads column T, which is 0
            jobs[:, JOB_NOW] = 0.0
        else:  # only rows whose earliest start moved changed (rows that can start now: below)
            for r in set(ep.touched[self._touched_seen :]):
                s = e_list[r]
                jobs[r, _J_FLAGS] = (s >= 0, ep.placed[r], s == clock)
                jobs[r, _J_VALUES] = (
                    (s - clock) / T if s >= 0 else 1.0,
                    values[r, column] * (s == clock),
                    values[r, s],
                )
                jobs[r, JOB_NOW] = 0.0
        self._touched_seen = len(ep.touched)
        self._fill_now_rows(jobs, clock)
        return pending_count

    def _fill_now_rows(self, jobs: np.ndarray, clock: int) -> None:
        """Fill the :data:`JOB_NOW` columns of the rows that can start at the clock.

        For each such row: the real-time GPU-slots a start takes (k beyond the slack in
        each slot of its span), the blocks free now, and each fit rule's block and waste.

        Args:
            jobs: The job rows of the episode (a view of ``self.jobs``).
            clock: The episode's clock.
        """
        ep = self.episode
        T = ep.scenario.slots
        slack = self._realtime_slack_list
        per_area, per_block = self._per_area_list, self._per_block_list
        gpu_scale, waste_scale = self._fit_scale[:2]
        cut = self._cut_cost
        k_of, d_of = ep.k_list, ep.d_list
        for r, (first, first_waste, best, best_waste, last, last_waste), count in ep.fit_rows():
            k = k_of[r]
            take = 0
            for t in range(clock, min(clock + d_of[r], T)):
                if k > slack[t]:
                    take += k - slack[t]
            jobs[r, JOB_NOW] = (
                take * per_area[r],
                take * cut,
                count * per_block[r],
                first * gpu_scale,
                first_waste * waste_scale,
                best * gpu_scale,
                best_waste * waste_scale,
                last * gpu_scale,
                last_waste * waste_scale,
            )

    def _globals(self, clock: int, pending_count: int) -> np.ndarray:
        """The ``globals`` array (see :data:`GLOBAL_FEATURES`).

        Args:
            clock: The episode's clock.
            pending_count: The number of pending jobs.
        """
        ep = self.episode
        sc = ep.scenario
        G, T, H = sc.gpus, sc.slots, self.limits.max_slots
        return np.array(
            [
                clock / T,
                (T - clock) / H,
                T / H,
                G / self.limits.max_gpus,
                sc.node_size / G,
                pending_count / self.limits.max_jobs,
                ep.objective / self.reward_scale,
                sc.decay,
                float(ep.trade_realtime),
            ],
            dtype=np.float32,
        )


def encode(episode: Episode, limits: Limits, reward_scale: float) -> dict[str, np.ndarray]:
    """The observation of an episode's current state, from scratch (fresh arrays).

    The same arrays as :meth:`Encoder.observe`; keep an :class:`Encoder` per
    episode to update them step by step instead.

    Args:
        episode: The episode.
        limits: Padded sizes (``limits.check(episode)`` must pass).
        reward_scale: What rewards are divided by; value features use the same unit.

    Returns:
        A dict of arrays with the shapes of :func:`shapes`.
    """
    return Encoder(episode, limits, reward_scale).observe(copy=False)
