"""The arrays of B episodes, batch axis first, and the start of one scenario as arrays.

:class:`Sizes` fixes the padded shapes. :class:`BatchState` holds every field
of B episodes (a shape comment per field; ``B`` episodes, ``R`` job rows,
``G`` GPUs, ``NW`` words of 64 GPUs, ``T`` slots, ``W = T + D`` grid columns
for a longest duration ``D``, ``A`` apps, ``H`` observed slots). A
:class:`Start` is one scenario's first state, taken from the reference
:class:`gpu_env.episode.Episode` (so both start exactly alike) and padded to
the sizes; resetting an episode copies a start into its slot of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from gpu_env import rules
from gpu_env.batch import bits
from gpu_env.episode import ActionLayout, ActionMode, Episode
from gpu_env.observation import Limits
from gpu_env.scenario import Scenario


@dataclass(frozen=True)
class Sizes:
    """Padded sizes of a batch.

    Attributes:
        jobs: R, job rows (jobs to place).
        gpus: G.
        slots: T, slots of the longest horizon (also H, the observation's ``max_slots``).
        apps: A.
        duration: D, the longest duration of any job (inherited ones included).
    """

    jobs: int
    gpus: int
    slots: int
    apps: int
    duration: int

    @classmethod
    def from_limits(cls, limits: Limits, duration: int) -> Sizes:
        """The sizes of an observation's limits (so observations match :class:`~gpu_env.observation.Encoder`'s)."""
        return cls(limits.max_jobs, limits.max_gpus, limits.max_slots, limits.max_apps, duration)

    def limits(self) -> Limits:
        """The observation limits of these sizes."""
        return Limits(max_gpus=self.gpus, max_jobs=self.jobs, max_slots=self.slots, max_apps=self.apps)

    @property
    def words(self) -> int:
        """NW."""
        return bits.words_for(self.gpus)

    @property
    def width(self) -> int:
        """W: grid columns, enough for a job started in the last slot."""
        return self.slots + self.duration

    @property
    def levels(self) -> int:
        """Shifts a block search needs for the widest job (``bits.shift_levels``)."""
        return bits.shift_levels(self.gpus)

    def fits(self, scenario: Scenario) -> str | None:
        """Why a scenario does not fit these sizes, or None when it does."""
        rows = sum(job.running_on is None for job in scenario.jobs)
        longest = max((job.duration for job in scenario.jobs), default=0)
        for name, value, limit in (
            ("jobs", rows, self.jobs),
            ("gpus", scenario.gpus, self.gpus),
            ("slots", scenario.slots, self.slots),
            ("apps", len(scenario.apps), self.apps),
            ("duration", longest, self.duration),
        ):
            if value > limit:
                return f"scenario {scenario.name!r} needs {name} >= {value}, the batch has {limit}"
        return None


class BatchState(NamedTuple):
    """Every field of B episodes; static fields are set at reset, the others move with each step.

    A named tuple of arrays, so that the compiled kernels (:mod:`gpu_env.batch.kernels`) take the
    whole state as one argument; every array is updated in place (a field is never rebound).
    """

    # ---- static per episode (set at reset)
    gpus: np.ndarray  # (B,) int64 G of each scenario
    slots: np.ndarray  # (B,) int64 T of each scenario
    node: np.ndarray  # (B,) int64 node size
    n_rows: np.ndarray  # (B,) int64 job rows of each scenario
    valid: np.ndarray  # (B, R) bool row holds a job
    k: np.ndarray  # (B, R) int64 GPUs per job (1 in padding)
    d: np.ndarray  # (B, R) int64 duration (1 in padding)
    lo: np.ndarray  # (B, R) int64 first allowed start
    hi: np.ndarray  # (B, R) int64 one past the last allowed start (lo in padding)
    wide: np.ndarray  # (B, R) bool k > node size
    allowed: np.ndarray  # (B, R, NW) uint64 allowed first GPUs (rule 4)
    shifts: np.ndarray  # (B, R, L) int64 block-search shifts (bits.shift_table)
    values: np.ndarray  # (B, R, T + 1) float64 value of each start; 0 from each scenario's T on
    row_table: np.ndarray  # (B, R, 7) float64 static job features (Episode.row_table)
    per_area: np.ndarray  # (B, R) float64 1 / (k d)
    per_block: np.ndarray  # (B, R) float64 1 / max(allowed blocks, 1)
    demand: np.ndarray  # (B, A, T) int64
    floors: np.ndarray  # (B, A, T) int64 ramp floors
    base: np.ndarray  # (B, A, T) int64 base curves the apps are served from
    floor_total: np.ndarray  # (B, T) int64
    penalty: np.ndarray  # (B, A) float64
    order: np.ndarray  # (B, A) int64 serving order, padded apps last
    initial: np.ndarray  # (B, A) int64
    ramp: np.ndarray  # (B, A) int64
    app_table: np.ndarray  # (B, A, 4) float64 static app features
    cheapest: np.ndarray  # (B,) float64 lowest app penalty (0 without apps)
    decay: np.ndarray  # (B,) float64
    decay_weights: np.ndarray  # (B, T) float64 decay ** t, 0 past each T
    everyone: np.ndarray  # (B, NW) uint64 GPUs 0..G-1
    reward_scale: np.ndarray  # (B,) float64
    # ---- dynamic
    busy: np.ndarray  # (B, W, NW) uint64 busy GPUs of each grid column
    load: np.ndarray  # (B, T) int64 GPUs held by jobs
    curves: np.ndarray  # (B, A, T) int64 real-time curves
    earliest: np.ndarray  # (B, R) int64 earliest feasible start >= clock, -1 when none (or placed, or padding)
    at: np.ndarray  # (B, R, NW) uint64 first GPUs feasible at the earliest start
    placed: np.ndarray  # (B, R) bool
    start: np.ndarray  # (B, R) int64 -1 until placed
    first: np.ndarray  # (B, R) int64 first GPU, -1 until placed
    clock: np.ndarray  # (B,) int64
    done: np.ndarray  # (B,) bool
    steps: np.ndarray  # (B,) int64 actions taken (forbidden ones included)
    job_value: np.ndarray  # (B,) float64
    shortfall_cost: np.ndarray  # (B,) float64
    objective: np.ndarray  # (B,) float64
    unpaid: np.ndarray  # (B,) float64 value before any action, paid with the first step
    free_now: np.ndarray  # (B, G) int64 consecutive free slots of each GPU from the clock (capped at T + 1)
    grid: np.ndarray  # (B, G, T, 2) float32 the observation's grid: placed / inherited work

    @classmethod
    def empty(cls, batch: int, sizes: Sizes) -> BatchState:
        """Zeroed arrays for ``batch`` episodes of the given sizes (every episode done)."""
        B, R, G, T, A, NW = batch, sizes.jobs, sizes.gpus, sizes.slots, sizes.apps, sizes.words
        shapes = {
            "valid": ((B, R), bool),
            "wide": ((B, R), bool),
            "allowed": ((B, R, NW), np.uint64),
            "shifts": ((B, R, sizes.levels), np.int64),
            "values": ((B, R, T + 1), np.float64),
            "row_table": ((B, R, 7), np.float64),
            "per_area": ((B, R), np.float64),
            "per_block": ((B, R), np.float64),
            "demand": ((B, A, T), np.int64),
            "floors": ((B, A, T), np.int64),
            "base": ((B, A, T), np.int64),
            "floor_total": ((B, T), np.int64),
            "penalty": ((B, A), np.float64),
            "order": ((B, A), np.int64),
            "initial": ((B, A), np.int64),
            "ramp": ((B, A), np.int64),
            "app_table": ((B, A, 4), np.float64),
            "cheapest": ((B,), np.float64),
            "decay": ((B,), np.float64),
            "decay_weights": ((B, T), np.float64),
            "everyone": ((B, NW), np.uint64),
            "reward_scale": ((B,), np.float64),
            "busy": ((B, sizes.width, NW), np.uint64),
            "load": ((B, T), np.int64),
            "curves": ((B, A, T), np.int64),
            "at": ((B, R, NW), np.uint64),
            "placed": ((B, R), bool),
            "done": ((B,), bool),
            "job_value": ((B,), np.float64),
            "shortfall_cost": ((B,), np.float64),
            "objective": ((B,), np.float64),
            "unpaid": ((B,), np.float64),
            "free_now": ((B, G), np.int64),
            "grid": ((B, G, T, 2), np.float32),
        }
        arrays = {}
        for name in cls._fields:
            shape, dtype = shapes.get(name, (None, np.int64))
            if shape is None:
                shape = (B, R) if name in ("k", "d", "lo", "hi", "earliest", "start", "first") else (B,)
            arrays[name] = np.zeros(shape, dtype=dtype)
        state = cls(**arrays)
        state.done[:] = True
        state.earliest[:] = -1
        return state

    def assign(self, index: np.ndarray, start: Start) -> None:
        """Copy one scenario's start into the episodes ``index`` (all fields)."""
        for name, value in start.arrays.items():
            getattr(self, name)[index] = value


@dataclass
class Start:
    """One scenario's first state, padded to a batch's sizes: :class:`BatchState` fields of one episode.

    Attributes:
        scenario: The scenario.
        rows: (R_s,) scenario job index of each row.
        arrays: Field name -> the episode's value (no batch axis).
    """

    scenario: Scenario
    rows: np.ndarray
    arrays: dict[str, np.ndarray]

    @classmethod
    def build(
        cls, scenario: Scenario, sizes: Sizes, *, trade_realtime: bool = True, reward_scale: float | None = None
    ) -> Start:
        """The start of a scenario, read off the reference episode.

        Raises:
            ValueError: The scenario does not fit ``sizes``.
        """
        problem = sizes.fits(scenario)
        if problem is not None:
            raise ValueError(problem)
        sc = scenario
        layout = ActionLayout.make(ActionMode.FIT, max(sizes.jobs, 1), sizes.gpus)
        ep = Episode(sc, layout, trade_realtime=trade_realtime)
        R, G, T, A, NW = sizes.jobs, sizes.gpus, sizes.slots, sizes.apps, sizes.words
        r, g, t, a = ep.rows.size, sc.gpus, sc.slots, len(sc.apps)
        out: dict[str, np.ndarray] = {}

        def padded(value: np.ndarray, shape: tuple[int, ...], fill: float = 0) -> np.ndarray:
            arr = np.full(shape, fill, dtype=value.dtype)
            arr[tuple(slice(0, n) for n in value.shape)] = value
            return arr

        out["gpus"], out["slots"], out["node"] = np.int64(g), np.int64(t), np.int64(sc.node_size)
        out["n_rows"] = np.int64(r)
        out["valid"] = np.arange(R) < r
        out["k"] = padded(ep.k, (R,), 1)
        out["d"] = padded(ep.d, (R,), 1)
        out["lo"] = padded(ep.lo, (R,))
        out["hi"] = padded(ep.hi, (R,))
        out["wide"] = out["k"] > sc.node_size
        allowed = np.zeros((R, NW), dtype=np.uint64)
        shifts = np.zeros((R, sizes.levels), dtype=np.int64)
        for i, k in enumerate(ep.k.tolist()):
            allowed[i] = bits.from_int(rules.allowed_block_mask(k, g, sc.node_size), NW)
            shifts[i] = bits.shift_table(k, sizes.levels)
        out["allowed"], out["shifts"] = allowed, shifts
        out["values"] = padded(ep.values, (R, T + 1))
        out["row_table"] = padded(ep.row_table, (R, 7))
        out["per_area"] = padded(1.0 / (ep.k * ep.d), (R,))
        out["per_block"] = padded(1.0 / np.maximum(ep.n_blocks, 1), (R,))
        out["demand"] = padded(ep.demand.reshape(a, t), (A, T))
        out["floors"] = padded(ep.floors.reshape(a, t), (A, T))
        out["base"] = padded(ep.base.reshape(a, t), (A, T))
        out["floor_total"] = padded(ep.floor_total.reshape(t), (T,))
        out["penalty"] = padded(ep.penalty, (A,))
        out["order"] = np.concatenate([ep.order, np.arange(a, A)]).astype(np.int64)
        out["initial"] = padded(np.array([app.initial for app in sc.apps], dtype=np.int64), (A,))
        out["ramp"] = padded(np.array([app.ramp for app in sc.apps], dtype=np.int64), (A,))
        out["app_table"] = padded(ep.app_table, (A, 4))
        out["cheapest"] = np.float64(ep.cheapest_penalty)
        out["decay"] = np.float64(sc.decay)
        out["decay_weights"] = padded(sc.decay_weights, (T,))
        out["everyone"] = bits.from_int((1 << g) - 1, NW)
        out["reward_scale"] = np.float64(reward_scale or float(g * t * ep.w_max))
        busy = np.zeros((sizes.width, NW), dtype=np.uint64)
        for s, mask in enumerate(ep.occupancy.busy_bits()):
            if mask:
                busy[s] = bits.from_int(mask, NW)
        out["busy"] = busy
        out["load"] = padded(ep.occupancy.job_load, (T,))
        out["curves"] = padded(ep.curves.reshape(a, t), (A, T))
        out["earliest"] = padded(ep.earliest, (R,), -1)
        out["at"] = np.stack([bits.from_int(m, NW) for m in ep.at_masks] + [np.zeros(NW, np.uint64)] * (R - r))
        out["placed"] = np.zeros(R, dtype=bool)
        out["start"] = np.full(R, -1, dtype=np.int64)
        out["first"] = np.full(R, -1, dtype=np.int64)
        out["clock"], out["done"], out["steps"] = np.int64(ep.clock), np.bool_(ep.done), np.int64(0)
        out["job_value"] = np.float64(ep.job_value)
        out["shortfall_cost"] = np.float64(ep.shortfall_cost)
        out["objective"] = np.float64(ep.objective)
        out["unpaid"] = np.float64(ep.unpaid)
        out["free_now"] = padded(np.minimum(ep.free_at_clock(), T + 1), (G,))
        grid = np.zeros((G, T, 2), dtype=np.float32)
        for job in sc.jobs:
            if job.running_on is not None:
                grid[job.running_on[0] : job.running_on[0] + job.gpus, : min(job.duration, T), 1] = 1.0
        out["grid"] = grid
        return cls(sc, ep.rows.copy(), out)
