"""One planning episode as a plain class: state, actions, masks and rewards, without gymnasium.

The environment (:mod:`gpu_env.env`) wraps an :class:`Episode`; the learned
allocator drives one directly. An episode walks a clock through the horizon:

* at clock t, an action places one pending job to start at t: on a block chosen
  by one of a few placement rules (``ActionMode.FIT``) or on any allowed first
  GPU (``ActionMode.BLOCK``);
* ADVANCE moves the clock to the next slot at which some pending job can start,
  and ends the episode when there is none.

Every plan is reachable in ``BLOCK`` mode (start the jobs in the order of their
starts); ``FIT`` mode keeps the action space independent of the cluster size
(see ``docs/environment.md`` for the trade-off, measured).

Masks come from :meth:`gpu_env.occupancy.Occupancy.next_feasible_mask` and
:meth:`~gpu_env.occupancy.Occupancy.narrow_masks` (rules 1, 3, 4, 5 and 7: the
bitmask forms of ``feasible_at`` and ``narrow_feasible``, one int per job row).
With ``trade_realtime`` the capacity a job may use is what the apps' ramp
floors leave (rules 6 and 7): a placement that needs real-time capacity takes
it, and the real-time curves are recomputed as the least-shortfall curves under
the new load (:func:`gpu_env.objective.realtime_curves`). The reward of a step is the change in
the plan's objective (SPEC section 3), so the rewards of an episode add up to
the final plan's objective.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from gpu_env import rules
from gpu_env.metrics import compute_metrics
from gpu_env.objective import (
    placement_value,
    ramp_floors,
    realtime_curves,
    serving_order,
    shortfall_penalty,
    start_values,
)
from gpu_env.occupancy import Occupancy
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario

_STARTS: dict[tuple, Episode | None] = {}  # recent starts: (scenario id, layout, trading, base) -> a copy
_STARTS_KEPT = 8


class ActionMode(StrEnum):
    """What one placement action names besides the job."""

    FIT = "fit"  # one of FIT_RULES: the action space does not depend on the cluster size
    BLOCK = "block"  # the first GPU of the block: every plan is reachable


FIT_RULES: tuple[str, ...] = ("first", "best", "last")
"""Placement rules of ``ActionMode.FIT``, among the blocks free at the clock.

``first``: the lowest-index block (FIFO's rule). ``best``: the block whose run of
free GPUs inside its node is shortest (best fit; ties to the lowest index).
``last``: the highest-index block.
"""


class InvalidActionError(ValueError):
    """An action that the mask forbids (or an episode that has ended)."""


@dataclass(frozen=True)
class ActionLayout:
    """How a flat ``Discrete`` action decodes into (job row, option) or ADVANCE.

    Action ``row * width + option`` places the job of that row (the row-th job
    to place, in file order) with that option; the last action, ``n - 1``, is
    ADVANCE.

    Attributes:
        mode: FIT (options are ``FIT_RULES``) or BLOCK (options are first GPUs).
        max_jobs: Job rows, padding included.
        width: Options per row: ``len(FIT_RULES)`` or the padded GPU count.
    """

    mode: ActionMode
    max_jobs: int
    width: int

    @classmethod
    def make(cls, mode: ActionMode | str, max_jobs: int, max_gpus: int) -> ActionLayout:
        """The layout of a mode for the given padded sizes."""
        mode = ActionMode(mode)
        return cls(mode, max_jobs, len(FIT_RULES) if mode == ActionMode.FIT else max_gpus)

    @property
    def n(self) -> int:
        """Number of actions."""
        return self.max_jobs * self.width + 1

    @property
    def advance(self) -> int:
        """The ADVANCE action."""
        return self.max_jobs * self.width

    def encode(self, row: int, option: int) -> int:
        """The action that places row ``row`` with option ``option``."""
        return row * self.width + option

    def decode(self, action: int) -> tuple[int, int] | None:
        """(row, option) of a placement action, or None for ADVANCE."""
        if action == self.advance:
            return None
        return divmod(int(action), self.width)


class Episode:
    """The state of one planning episode and its transitions.

    Attributes:
        scenario: The scenario being planned.
        layout: The action layout.
        occupancy: The grid (inherited work placed at the start).
        rows: (R,) scenario job index of each row: the jobs to place, in file order.
        clock: The slot at which placement actions start their job.
        earliest: (R,) earliest feasible start >= clock of each unplaced row, -1 when it has none.
        at_masks: (R,) first GPUs on which each row's job may start at ``earliest``, one bitmask per row
            (bit g for first GPU g).
        placed: (R,) whether each row's job is placed (``start``, ``first_gpu``: where).
        curves: (apps, T) the real-time curves of the plan so far.
        objective: The objective of the plan so far (SPEC section 3).
        log: (row, start, first GPU) of each placement, in order.
        done: Whether the episode has ended.
    """

    def __init__(
        self,
        scenario: Scenario,
        layout: ActionLayout,
        *,
        trade_realtime: bool = True,
        base_curves: np.ndarray | None = None,
    ) -> None:
        """Start an episode: inherited work placed, clock at the first slot where a job can start.

        Args:
            scenario: The scenario to plan.
            layout: The action layout (its padded sizes must hold the scenario).
            trade_realtime: Whether a placement may lower real-time curves below
                their base to make room (paying the shortfall penalty).
            base_curves: (apps, T) base real-time curves that keep rule 6 (for example
                FIFO's peak reservation); default: each app's demand.

        Raises:
            ValueError: The scenario has more jobs to place than ``layout.max_jobs``
                or, in BLOCK mode, more GPUs than ``layout.width``; or ``base_curves``
                has the wrong shape or breaks rule 6.
        """
        base = None if base_curves is None else np.asarray(base_curves, dtype=np.int64)
        key = (id(scenario), layout, bool(trade_realtime), None if base is None else (base.shape, base.tobytes()))
        template = _STARTS.get(key)
        if template is not None and template.scenario is scenario and template.trade_realtime == trade_realtime:
            self.__dict__.update(template.copy().__dict__)  # the same start as last time, without the work
            return
        self._start(scenario, layout, trade_realtime, base_curves)
        # Keep the start of a scenario met twice (an env that resets on a fixed scenario), a few at a time.
        if key in _STARTS:
            _STARTS[key] = self.copy()
        else:
            if len(_STARTS) >= _STARTS_KEPT:
                del _STARTS[next(iter(_STARTS))]
            _STARTS[key] = None

    def _start(
        self, scenario: Scenario, layout: ActionLayout, trade_realtime: bool, base_curves: np.ndarray | None
    ) -> None:
        sc = scenario
        self.scenario = sc
        self.layout = layout
        self.trade_realtime = trade_realtime
        self.rows = np.array([i for i, job in enumerate(sc.jobs) if job.running_on is None], dtype=np.intp)
        if self.rows.size > layout.max_jobs:
            raise ValueError(
                f"scenario {sc.name!r} has {self.rows.size} jobs to place, more than max_jobs={layout.max_jobs}"
            )
        if layout.mode == ActionMode.BLOCK and sc.gpus > layout.width:
            raise ValueError(f"scenario {sc.name!r} has {sc.gpus} GPUs, more than max_gpus={layout.width}")
        jobs = [sc.jobs[i] for i in self.rows]
        self.k = np.array([job.gpus for job in jobs], dtype=np.int64)
        self.d = np.array([job.duration for job in jobs], dtype=np.int64)
        self.weight = np.array([job.weight for job in jobs], dtype=np.float64)
        windows = [rules.start_window(job, sc.slots) for job in jobs]
        self.lo = np.array([w.start for w in windows], dtype=np.int64)
        self.hi = np.array([max(w.start, w.stop) for w in windows], dtype=np.int64)

        # Real-time: base curves, ramp floors and the serving order (highest penalty first).
        self.demand = sc.demand
        self.penalty = np.array([app.penalty for app in sc.apps], dtype=np.float64)
        self.floors = ramp_floors(sc)
        self.order = serving_order(sc.apps)
        self.base = self.demand.copy() if base_curves is None else _checked_reference(sc, base_curves)
        self._static_tables()

        self.occupancy = Occupancy(sc)
        self.occupancy.place_inherited()
        self.curves = realtime_curves(self.base, sc.apps, self.order, self.floors, sc.gpus, self.occupancy.job_load)
        self._sync_curves()
        self.job_value = sum(placement_value(sc.jobs[i], 0, sc) for i in self.occupancy.placed)
        self.shortfall_cost = self._shortfall_cost()
        self.objective = self.job_value - self.shortfall_cost
        self._unpaid = self.objective  # what the plan is worth before any action: paid with the first step

        R = self.rows.size
        self.placed = np.zeros(R, dtype=bool)
        self.start = np.full(R, -1, dtype=np.int64)
        self.first_gpu = np.full(R, -1, dtype=np.int64)
        self.earliest = np.where(self.lo < self.hi, self.lo, -1)
        self._at: list[int] = [0] * R  # first GPUs at each row's earliest start, as bitmasks (at_masks)
        self.touched: list[int] = []  # rows whose earliest start changed, in order (for the observation)
        self._rows_list = self.rows.tolist()
        self._hi_list = self.hi.tolist()
        self.log: list[tuple[int, int, int]] = []
        self.clock = 0
        self.steps = 0
        self.done = False
        self._clear_caches()
        self._settle(np.flatnonzero(self.earliest >= 0))
        first = self.earliest[self.earliest >= 0]
        self.clock = int(first.min()) if first.size else 0  # with nothing to place, ADVANCE ends the episode

    def _static_tables(self) -> None:
        """Facts that do not change during the episode (values per start, features for the observation)."""
        sc = self.scenario
        T = sc.slots
        jobs = [sc.jobs[i] for i in self.rows]
        self.w_max = max((job.weight for job in sc.jobs), default=1.0)
        self.slot_index = np.arange(T, dtype=np.int64)[None, :]  # (1, T)
        # values[row, s]: what the row's job earns when it starts at s (placement_value); column T is 0.
        self.values = start_values(sc, self.rows)
        self.n_blocks = np.array(
            [rules.allowed_block_starts(job.gpus, sc.gpus, sc.node_size).size for job in jobs], dtype=np.int64
        )
        # k/G, k/node, d/T, w/w_max, release/T, last start/T, has deadline: the static job features
        self.row_table = np.array(
            [
                [
                    job.gpus / sc.gpus,
                    job.gpus / sc.node_size,
                    job.duration / T,
                    job.weight / self.w_max,
                    job.release / T,
                    (hi - 1) / T,
                    float(job.deadline is not None),
                ]
                for job, hi in zip(jobs, self.hi, strict=True)
            ],
            dtype=np.float64,
        ).reshape(len(jobs), 7)
        self.app_table = np.array(
            [[1.0, app.penalty / self.w_max, app.ramp / sc.gpus, app.initial / sc.gpus] for app in sc.apps],
            dtype=np.float64,
        ).reshape(len(sc.apps), 4)
        self.cheapest_penalty = float(self.penalty.min()) if self.penalty.size else 0.0
        self.floor_total = self.floors.sum(axis=0)
        self.k_list = self.k.tolist()  # k of each row as plain ints
        self.d_list = self.d.tolist()  # d of each row as plain ints

    def _clear_caches(self) -> None:
        self._runs: np.ndarray | None = None
        self._free_now: np.ndarray | None = None
        self._slack: np.ndarray | None = None
        self._mask: np.ndarray | None = None
        self._fit_rows: list[tuple[int, tuple[int, ...], int]] | None = None
        self._fit_table: np.ndarray | None = None

    # ------------------------------------------------------------------ copies

    def copy(self) -> Episode:
        """An independent copy (for search and tests)."""
        other = Episode.__new__(Episode)
        other.__dict__.update(self.__dict__)
        other.occupancy = self.occupancy.copy()
        for name in ("curves", "placed", "start", "first_gpu", "earliest"):
            setattr(other, name, getattr(self, name).copy())
        other._at = list(self._at)
        other.touched = list(self.touched)
        other.log = list(self.log)
        other._clear_caches()
        return other

    # ------------------------------------------------------------------ capacity

    def job_slack(self) -> np.ndarray:
        """(T,) GPUs a new job may use in each slot: above the ramp floors when trading, else above the curves."""
        if self._slack is None:
            occ = self.occupancy
            if self.trade_realtime:
                self._slack = rules.free_capacity(self.scenario.gpus, occ.job_load, self.floor_total)
            else:
                self._slack = occ.slack()
        return self._slack

    def free_runs(self) -> np.ndarray:
        """:meth:`Occupancy.free_runs` of the current grid, (width, G) (cached until the next placement)."""
        if self._runs is None:
            self._runs = self.occupancy.free_runs()
        return self._runs

    def free_at_clock(self) -> np.ndarray:
        """(G,) consecutive free slots of each GPU from the clock on (cached until the next step)."""
        if self._free_now is None:
            if self._runs is not None:
                self._free_now = self._runs[min(self.clock, self._runs.shape[0] - 1)]
            else:
                self._free_now = self.occupancy.free_run_at(self.clock)
        return self._free_now

    def _shortfall_cost(self) -> float:
        return shortfall_penalty(self.curves, self.demand, self.penalty)

    def _sync_curves(self) -> None:
        for a in range(self.curves.shape[0]):
            self.occupancy.set_curve(a, self.curves[a])
        self._curve_total = self.curves.sum(axis=0)

    # ------------------------------------------------------------------ feasibility bookkeeping

    def _settle(self, rows: np.ndarray | list[int], retry: bool = True) -> None:
        """Move each row's earliest start forward to its first feasible slot (-1 when none is left).

        Placements only take cells and capacity away, so a start that was
        infeasible stays infeasible: the search starts at the row's last answer
        (``retry``) or just after it (:meth:`Occupancy.next_feasible_mask`).
        """
        if not len(rows):
            return
        occ = self.occupancy
        room = self.job_slack().tolist()
        earliest, hi, at_rows, jobs = self.earliest, self._hi_list, self._at, self._rows_list
        for r in rows.tolist() if isinstance(rows, np.ndarray) else rows:
            start = int(earliest[r]) + (0 if retry else 1)
            earliest[r], at_rows[r] = occ.next_feasible_mask(jobs[r], start, hi[r], room)
            self.touched.append(r)

    def _move_clock(self) -> None:
        """Set the clock to the next slot where an unplaced row can start, or end the episode."""
        e = [s for s in self.earliest.tolist() if s >= 0]  # placed rows hold -1
        if e:
            self.clock = min(e)
        else:
            self.done = True

    @property
    def at_masks(self) -> list[int]:
        """(R,) first GPUs on which each row's job may start at its earliest start, as bitmasks (a new list)."""
        return list(self._at)

    @property
    def unpaid(self) -> float:
        """What the plan is worth before any action, paid with the first step's reward (0 from then on)."""
        return self._unpaid

    @property
    def now(self) -> np.ndarray:
        """(R,) rows whose job can start at the clock."""
        return self.earliest == self.clock  # placed rows hold -1

    @property
    def pending(self) -> np.ndarray:
        """(R,) rows whose job is not placed and can still start at some slot >= clock."""
        return self.earliest >= 0

    def options(self) -> np.ndarray:
        """(R, len(FIT_RULES)) first GPU each fit rule picks at the clock; -1 where the row cannot start now."""
        return self.fit_table()[:, 0::2]

    def fit_rows(self) -> list[tuple[int, tuple[int, ...], int]]:
        """(row, :meth:`fit_table` row as ints, its number of feasible first GPUs) for each row that can start now."""
        if self._fit_rows is None:
            node = self.scenario.node_size
            at_rows, k_of = self._at, self.k_list
            now = (self.earliest == self.clock).nonzero()[0].tolist() if not self.done else []  # placed rows hold -1
            self._fit_rows = [(r, _fit_choices(at_rows[r], k_of[r] > node, node), at_rows[r].bit_count()) for r in now]
        return self._fit_rows

    def fit_table(self) -> np.ndarray:
        """(R, 2 * len(FIT_RULES)): :meth:`options` and each one's waste interleaved, rule by rule.

        A block's waste is the number of free GPUs left beside it in its node's run of GPUs free over the row's
        span (:func:`_fit_choices`); -1 where the row cannot start now.
        """
        if self._fit_table is None:
            table = np.full((self.rows.size, 2 * len(FIT_RULES)), -1, dtype=np.int64)
            rows = self.fit_rows()
            if rows:
                table[[r for r, _, _ in rows]] = [found for _, found, _ in rows]
            self._fit_table = table
        return self._fit_table

    def action_mask(self) -> np.ndarray:
        """(n_actions,) bool: True exactly for the actions that keep the plan valid and completable (a fresh array)."""
        if self._mask is None:
            layout = self.layout
            mask = np.zeros(layout.n, dtype=bool)
            if not self.done:
                mask[layout.advance] = True
                now = self.now
                grid = mask[: layout.advance].reshape(layout.max_jobs, layout.width)
                if layout.mode == ActionMode.FIT:
                    grid[: self.rows.size] = now[:, None]
                else:
                    rows = np.flatnonzero(now)
                    grid[rows, : self.scenario.gpus] = _unpack([self._at[r] for r in rows.tolist()], self.scenario.gpus)
            self._mask = mask
        return self._mask.copy()

    # ------------------------------------------------------------------ transitions

    def step(self, action: int) -> float:
        """Take an action.

        Args:
            action: A placement action or ADVANCE (see :class:`ActionLayout`).

        Returns:
            The change in the plan's objective (plus, on the first step, what the
            plan was worth before any action), so that the returns of an episode
            add up to the final plan's objective.

        Raises:
            InvalidActionError: The episode has ended or the mask forbids the action.
        """
        problem = self.action_problem(action)
        if problem is not None:
            raise InvalidActionError(problem)
        return self.apply(action)

    def apply(self, action: int) -> float:
        """:meth:`step` without checking the action: for callers that asked :meth:`action_problem` already."""
        before = self.objective
        decoded = self.layout.decode(action)
        if decoded is None:
            self._advance()
            self._free_now = None
        else:
            row, option = decoded
            if self.layout.mode == ActionMode.BLOCK:
                first = option
            elif self.earliest[row] != self.clock:  # only reachable through apply() with a forbidden action
                first = int(self.options()[row, option])
            else:
                node = self.scenario.node_size
                first = _fit_choices(self._at[row], self.k_list[row] > node, node)[2 * option]
            self._place(row, first)
        self._mask = self._fit_rows = self._fit_table = None
        reward = self.objective - before + self._unpaid
        self._unpaid = 0.0
        self.steps += 1
        return reward

    def action_problem(self, action: int) -> str | None:
        """Why an action is not allowed now, or None when it is."""
        layout = self.layout
        if self.done:
            return "the episode has ended"
        if not 0 <= action < layout.n:
            return f"action {action} is outside 0..{layout.n - 1}"
        if action == layout.advance:
            return None
        row, option = divmod(int(action), layout.width)
        if row >= self.rows.size:
            return f"action {action} names job row {row}, but the scenario has {self.rows.size} jobs to place"
        e = self.earliest[row]
        if e == self.clock and (layout.mode == ActionMode.FIT or self._block_free(row, option)):
            return None
        job = self.scenario.jobs[self.rows[row]]
        if self.placed[row]:
            return f"job {job.id!r} is already placed"
        if e != self.clock:
            when = "no slot any more" if e < 0 else f"slot {int(e)} at the earliest"
            return f"job {job.id!r} cannot start at slot {self.clock} ({when})"
        return f"job {job.id!r} cannot start at slot {self.clock} on GPUs {option}..{option + job.gpus - 1}"

    def _block_free(self, row: int, first: int) -> bool:
        return 0 <= first < self.scenario.gpus and bool(self._at[row] >> first & 1)

    def _place(self, row: int, first: int) -> None:
        sc = self.scenario
        occ = self.occupancy
        t = self.clock
        d = int(self.d[row])
        occ.place(int(self.rows[row]), t, first)
        self._runs = self._slack = None
        self.placed[row] = True
        self.start[row] = t
        self.first_gpu[row] = first
        self.earliest[row] = -1
        self._at[row] = 0
        self.touched.append(row)
        self.log.append((row, t, first))
        if self._free_now is not None:  # the block's GPUs are busy from the clock on; no other GPU changes
            free_now = self._free_now.copy()
            free_now[first : first + self.k_list[row]] = 0
            self._free_now = free_now
        self.job_value += float(self.values[row, t])
        if self.trade_realtime:
            end = min(t + d, sc.slots)
            if (occ.job_load[t:end] + self._curve_total[t:end] > sc.gpus).any():
                # Real-time gives way: the least-shortfall curves under the new load.
                self.curves = realtime_curves(self.base, sc.apps, self.order, self.floors, sc.gpus, occ.job_load)
                self._sync_curves()
                self.shortfall_cost = self._shortfall_cost()
        self.objective = self.job_value - self.shortfall_cost
        # Rows whose span at their earliest start overlaps the new job's may have lost blocks there;
        # rows left with none search on from the next slot.
        e = self.earliest.tolist()
        end, d_of = t + d, self.d_list
        hit = [r for r, s in enumerate(e) if 0 <= s < end and s + d_of[r] > t]
        if hit:
            kept = occ.narrow_masks(
                [self._at[r] for r in hit],
                [self._rows_list[r] for r in hit],
                [e[r] for r in hit],
                self._rows_list[row],
                self.job_slack(),
            )
            lost = []
            for r, bits in zip(hit, kept, strict=True):
                self._at[r] = bits
                if not bits:
                    lost.append(r)
            if lost:
                self._settle(lost, retry=False)
        self._move_clock()
        if self.clock != t:
            self._free_now = None

    def _advance(self) -> None:
        rows = np.flatnonzero(self.now)
        for r in rows.tolist():
            self._at[r] = 0
        self._settle(rows, retry=False)
        self._move_clock()

    # ------------------------------------------------------------------ results

    def plan(self, scheduler: str = "env") -> Plan:
        """The plan so far (valid at every step), with its metrics."""
        plan = Plan.from_occupancy(self.occupancy, scheduler)
        plan.metrics = compute_metrics(self.scenario, plan)
        return plan


def _checked_reference(scenario: Scenario, base_curves: np.ndarray) -> np.ndarray:
    """Reference curves as an int array after checking their shape and rule 6."""
    curves = np.asarray(base_curves, dtype=np.int64)
    shape = (len(scenario.apps), scenario.slots)
    if curves.shape != shape:
        raise ValueError(f"base_curves: expected curves of shape {shape}, got {curves.shape}")
    for a, app in enumerate(scenario.apps):
        if (curves[a] < 0).any() or rules.ramp_problems(curves[a], app.initial, app.ramp):
            raise ValueError(f"base_curves: the curve of {app.name!r} breaks its ramp {app.ramp} or is negative")
    return curves


def _unpack(masks: list[int], gpus: int) -> np.ndarray:
    """Bitmasks (bit g for column g) as an (n, gpus) bool array."""
    width = (gpus + 7) // 8
    raw = np.frombuffer(b"".join(m.to_bytes(width, "little") for m in masks), dtype=np.uint8)
    bits = np.unpackbits(raw.reshape(len(masks), width), axis=1, count=gpus, bitorder="little")
    return bits.astype(bool)


_FIT_CACHE: dict[tuple[int, bool, int], tuple[int, ...]] = {}


def _fit_choices(at: int, wide: bool, node: int) -> tuple[int, ...]:
    """(first GPU, waste) of each fit rule in turn, from a row's feasible first GPUs at the clock (a bitmask).

    The feasible first GPUs come in groups: a run of free GPUs of length L inside a
    node holds L - k + 1 consecutive feasible first GPUs, so the waste of a
    block (the free GPUs left beside it in its node's run) is its group's length less one, for
    k <= node_size (``wide`` False); it is 0 above. ``best`` is the first GPU of
    the first shortest group. Answers are cached: most rows keep their mask from
    one step to the next.
    """
    key = (at, wide, node)
    found = _FIT_CACHE.get(key)
    if found is not None:
        return found
    first, last = (at & -at).bit_length() - 1, at.bit_length() - 1
    if wide:
        found = (first, 0, first, 0, last, 0)
    else:
        best = best_length = first_length = last_length = 0
        while at:
            low = at & -at
            group = at & ~(at + low)
            at ^= group
            a = low.bit_length() - 1
            end = a + group.bit_count()
            while a < end:  # a group that spans nodes is one per node
                stop = min(end, (a // node + 1) * node)
                length = stop - a
                if not best_length or length < best_length:
                    best_length, best = length, a
                if not first_length:
                    first_length = length
                last_length = length
                a = stop
        found = (first, first_length - 1, best, best_length - 1, last, last_length - 1)
    if len(_FIT_CACHE) >= 1 << 16:
        _FIT_CACHE.clear()
    _FIT_CACHE[key] = found
    return found
