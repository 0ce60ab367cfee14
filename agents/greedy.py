"""Greedy: the seed's fast mode, a hand-written heuristic that sees the whole queue first.

It plans in sweeps over the queue and keeps the best plan by objective:

1. **Real-time capacity follows demand.** Each app gets the least ramp-feasible
   curve that covers its demand (:func:`gpu_env.rules.cover_curve`): it ramps
   up early enough for each peak and comes down after it, instead of FIFO's
   reservation at the daily peak. Where inherited work leaves too little room,
   apps with a higher penalty are served first.
2. **Jobs by priority across the whole horizon.** A sweep takes the jobs in a
   priority order; each takes its most valuable start (the earliest feasible
   one: decay makes early slots worth more, and a late start loses the slots
   past the horizon) on a block chosen by the block rule.
3. **Jobs against the penalty.** When a job can start earlier, or only, by
   taking capacity from the real-time curves, the curves are recomputed with the
   job's load as a cap (``cover_curve(..., cap=...)``, which keeps the ramp); the
   job takes that start when its extra value beats the penalty of the extra
   shortfall. A cheap bound prunes the starts where this cannot pay.
4. **Multi-start and promotion.** Sweeps run for several orderings (by default
   priority and realisable value), each with trades inline and with trades
   deferred to the jobs the sweep left out; one more start takes FIFO's own
   placements on these curves and adds the jobs FIFO left out. Then the most
   valuable jobs the best sweep left out are promoted, one at a time, to the
   front of its ordering and the sweep is redone, kept when the objective
   rises. Sweeps that share a prefix of their ordering replay its decisions
   instead of recomputing them.
5. **Guard.** Should FIFO's plan still score higher, it is returned (the last
   resort; it has not fired on any scenario measured, see ``docs/greedy.md``).

Blocks go to the lowest-index free block by default: best-fit (touching
perimeter) and node-fit rules are implemented and were measured, and did not
beat it on the seven families (``benchmarks/results/greedy_variants.md``).

Every sweep places through :class:`gpu_env.occupancy.Occupancy`, so every plan
keeps the rules of SPEC section 2. Everything is deterministic: nothing is drawn
at random, ties break by position in the file. :data:`FAST` is a one-sweep
configuration for callers that need close to FIFO's speed.

>>> from gpu_env.generators import generate
>>> from agents.greedy import plan
>>> plan(generate("training-heavy", seed=0)).scheduler
'greedy'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from agents import fifo
from agents.options import PlanOptions
from gpu_env import rules
from gpu_env.objective import ramp_floors, realtime_curves, serving_order, shortfall_penalty, start_values
from gpu_env.occupancy import FREE, Occupancy, OverlapError
from gpu_env.plan import Plan
from gpu_env.scenario import Job, Scenario

BLOCK_RULES = ("lowest", "best_fit", "node_fit")
START_RULES = ("earliest", "packed")


class TradeMode(StrEnum):
    """When a sweep lets jobs take real-time capacity (their value beating the extra penalty)."""

    OFF = "off"  # never
    INLINE = "inline"  # each job as it comes
    AFTER = "after"  # the jobs left out, once every job had its turn without trading


TRADE_MODES = tuple(TradeMode)
_EPS = 1e-9

# A decision of a sweep: (job, start, first GPU, real-time curves after a trade or None, penalty after it),
# or None when the job stays unplaced.
_Decision = tuple[int, int, int, "np.ndarray | None", float] | None


# ----------------------------------------------------------------------------- orderings


def _order_weight(ctx: _Context) -> list[int]:
    """Priority (weight per GPU-slot) first; within a priority, jobs with a deadline, then the larger value."""
    return sorted(
        ctx.pending, key=lambda i: (-ctx.weight[i], not ctx.has_deadline[i], -ctx.first_value[i], ctx.release[i], i)
    )


def _order_value(ctx: _Context) -> list[int]:
    """Realisable value (at the release, decay and horizon included), largest first."""
    return sorted(ctx.pending, key=lambda i: (-ctx.first_value[i], i))


def _order_density(ctx: _Context) -> list[int]:
    """Realisable value per GPU-slot of the job (weight times decay, truncation included)."""
    return sorted(ctx.pending, key=lambda i: (-ctx.first_value[i] / ctx.area[i], -ctx.area[i], i))


def _order_deadline(ctx: _Context) -> list[int]:
    """Earliest deadline first, jobs without one after; then by priority."""
    return sorted(ctx.pending, key=lambda i: (ctx.deadline[i], -ctx.weight[i], -ctx.first_value[i], i))


def _order_arrival(ctx: _Context) -> list[int]:
    """FIFO's order: release, then position in the file."""
    return sorted(ctx.pending, key=lambda i: (ctx.release[i], i))


def _order_size(ctx: _Context) -> list[int]:
    """Largest area first (bin packing's order), then by priority."""
    return sorted(ctx.pending, key=lambda i: (-ctx.area[i], -ctx.weight[i], i))


ORDERINGS: dict[str, Callable[[_Context], list[int]]] = {
    "weight": _order_weight,
    "value": _order_value,
    "density": _order_density,
    "deadline": _order_deadline,
    "arrival": _order_arrival,
    "size": _order_size,
}


@dataclass(frozen=True)
class GreedyConfig:
    """How the heuristic plans; :data:`DEFAULT` is the measured best (``benchmarks/greedy_variants.py``).

    Attributes:
        orderings: Job orderings to sweep (keys of :data:`ORDERINGS`); the best plan wins.
        block_rule: ``"lowest"`` (lowest-index free block), ``"best_fit"`` (largest touching
            perimeter: busy cells and edges around the block) or ``"node_fit"`` (the node
            busiest over the job's span, keeping emptier nodes whole).
        start_rule: ``"earliest"`` (the most valuable start) or ``"packed"`` (a start at most
            ``pack_tolerance`` less valuable may win when its block touches more).
        pack_tolerance: Fraction of a job's value the ``"packed"`` rule may give up for a better fit.
        trades: When jobs may take real-time capacity (their value beating the extra
            penalty), one sweep per ordering and mode: ``"inline"`` (each job as it
            comes), ``"after"`` (jobs the sweep left out, once every job had its turn
            without trading) or ``"off"``.
        trade_candidates: Starts per job whose trade is evaluated exactly.
        promote_rounds: Rounds of promoting unplaced jobs to the front of the best ordering.
        promote_limit: Most promotions tried per round (most valuable unplaced jobs first).
        fifo_seed: One more start from FIFO's plan: its placements on greedy's real-time
            curves (which leave at least as much room as FIFO's peak reservation), then the
            jobs FIFO left out, as they are and then with trades.
        fifo_guard: Return FIFO's own plan when it scores higher than everything found (the
            last resort; ``benchmarks/greedy_variants.py`` counts how often it fires).
    """

    orderings: tuple[str, ...] = ("weight", "value")
    block_rule: str = "lowest"
    start_rule: str = "earliest"
    pack_tolerance: float = 0.03
    trades: tuple[str, ...] = ("inline", "after")
    trade_candidates: int = 8
    promote_rounds: int = 2
    promote_limit: int = 4
    fifo_seed: bool = True
    fifo_guard: bool = True

    def __post_init__(self) -> None:
        unknown = [name for name in self.orderings if name not in ORDERINGS]
        if unknown or not self.orderings:
            raise ValueError(f"orderings: expected names among {', '.join(ORDERINGS)}, got {list(self.orderings)}")
        if self.block_rule not in BLOCK_RULES:
            raise ValueError(f"block_rule: expected one of {', '.join(BLOCK_RULES)}, got {self.block_rule!r}")
        if self.start_rule not in START_RULES:
            raise ValueError(f"start_rule: expected one of {', '.join(START_RULES)}, got {self.start_rule!r}")
        if not self.trades or any(mode not in TRADE_MODES for mode in self.trades):
            raise ValueError(f"trades: expected modes among {', '.join(TRADE_MODES)}, got {list(self.trades)}")
        object.__setattr__(self, "trades", tuple(TradeMode(mode) for mode in self.trades))
        if self.trade_candidates < 1 or self.promote_rounds < 0 or self.promote_limit < 0:
            raise ValueError("trade_candidates must be positive; promote_rounds and promote_limit not negative")


DEFAULT = GreedyConfig()
"""The default: priority and value orderings, each with inline and deferred trades, then promotion."""

FAST = GreedyConfig(orderings=("weight",), trades=("inline",), promote_rounds=0, fifo_seed=False)
"""One sweep (priority order, inline trades) and the FIFO guard: about twice FIFO's time, below the default's value."""


@dataclass(frozen=True)
class GreedyResult:
    """A greedy plan with how it was found.

    Attributes:
        plan: The plan (metrics not filled; ``agents.registry.run_scheduler`` fills them).
        objective: Its objective as the heuristic computed it.
        ordering: The sweep that won, as ``"ordering/trade mode"`` (``"+promoted"`` when
            promotion improved it, ``"fifo-seeded/after"`` for the FIFO start), or ``"fifo"``
            when the guard fired.
        sweeps: Sweeps run (sweeps skipped as repeats not counted).
        guard_fired: Whether FIFO's plan scored higher and was returned instead.
    """

    plan: Plan
    objective: float
    ordering: str
    sweeps: int
    guard_fired: bool = False


# ----------------------------------------------------------------------------- shared per scenario


class _Context:
    """What every sweep shares: job values by start, real-time data, the grid with inherited work."""

    def __init__(self, scenario: Scenario) -> None:
        sc = scenario
        T = sc.slots
        self.scenario = sc
        jobs = sc.jobs
        self.weight = [job.weight for job in jobs]
        self.area = [job.area for job in jobs]
        # values[i, t]: what job i earns when it starts at t (its slots inside the horizon, decayed).
        self.values = start_values(sc)
        self.release = [job.release for job in jobs]
        self.deadline = [job.deadline if job.deadline is not None else T + job.duration for job in jobs]
        self.has_deadline = [job.deadline is not None for job in jobs]
        self.window = [rules.start_window(job, T) for job in jobs]
        # The most a job can earn: at the first start of its window (values fall with the start).
        self.first_value = [float(self.values[i, w.start]) if len(w) else 0.0 for i, w in enumerate(self.window)]
        self.pending = [i for i, job in enumerate(jobs) if job.running_on is None]
        self.block_starts = {k: rules.allowed_block_starts(k, sc.gpus, sc.node_size) for k in {j.gpus for j in jobs}}

        # Real-time: demand, penalties, the ramp floors; apps served in order of penalty.
        apps = sc.apps
        self.demand = sc.demand
        self.penalty = np.array([app.penalty for app in apps], dtype=np.float64)
        self.floors = ramp_floors(sc)
        self.app_order = serving_order(apps)
        self.min_penalty = float(self.penalty.min()) if apps else float("inf")

        self._curve_cache: dict[bytes, tuple[np.ndarray, float]] = {}

        # The grid every sweep starts from: inherited work and demand-following curves.
        grid = Occupancy(sc)
        grid.place_inherited()
        self.base_curves = self.curves(grid.job_load)
        for i, curve in enumerate(self.base_curves):
            grid.set_curve(i, curve)
        self.base_grid = grid
        self.base_value = float(sum(self.values[i, 0] for i in grid.placed))
        self.base_penalty = self.penalty_of(self.base_curves)

    def curves(self, load: np.ndarray) -> np.ndarray:
        """Real-time curves that serve the most demand next to a job load, shape (apps, T).

        :func:`gpu_env.objective.realtime_curves` of the demand: apps in order of
        penalty, each under what the load and the apps before it leave.
        """
        sc = self.scenario
        return realtime_curves(self.demand, sc.apps, self.app_order, self.floors, sc.gpus, load)

    def curves_and_penalty(self, load: np.ndarray) -> tuple[np.ndarray, float]:
        """:meth:`curves` and their penalty, remembered by load (sweeps often ask the same)."""
        key = load.tobytes()
        hit = self._curve_cache.get(key)
        if hit is None:
            curves = self.curves(load)
            hit = self._curve_cache[key] = (curves, self.penalty_of(curves))
        return hit

    def objective_of(self, plan: Plan) -> float:
        """A valid plan's objective, by the formula of :func:`gpu_env.metrics.compute_metrics` (SPEC section 3)."""
        sc = self.scenario
        value = sum(float(self.values[sc.job_index(p.job), p.start]) for p in plan.placements)
        curves = np.array([plan.curve(app.name, sc.slots) for app in sc.apps], dtype=np.int64)
        return value - self.penalty_of(curves.reshape(len(sc.apps), sc.slots))

    def penalty_of(self, curves: np.ndarray) -> float:
        """Sum over apps of penalty times shortfall (:func:`gpu_env.objective.shortfall_penalty`)."""
        return shortfall_penalty(curves, self.demand, self.penalty)


# ----------------------------------------------------------------------------- one sweep


class _Sweep:
    """One greedy sweep over an ordering under one trade mode, on its own copy of the grid."""

    def __init__(self, ctx: _Context, config: GreedyConfig, mode: str) -> None:
        self.ctx = ctx
        self.config = config
        self.mode = mode
        self.grid = ctx.base_grid.copy()
        self.job_value = ctx.base_value
        self.set_curves(ctx.base_curves, ctx.base_penalty)
        self.order: list[int] = []
        self.log: list[_Decision] = []  # the decision at each position of the order, in the first pass
        self.second: dict[int, _Decision] = {}  # position -> decision of a second turn

    @property
    def objective(self) -> float:
        """Job value minus real-time penalty of the grid."""
        return self.job_value - self.penalty

    @property
    def unplaced(self) -> list[int]:
        """Jobs of the ordering this sweep left out."""
        return [
            j for p, (j, d) in enumerate(zip(self.order, self.log, strict=True)) if d is None and p not in self.second
        ]

    def first_trade(self) -> int:
        """Position of the first trade in the first pass (the order's length when there is none)."""
        return next((p for p, d in enumerate(self.log) if d is not None and d[3] is not None), len(self.log))

    def run(self, order: list[int], replay: _Sweep | None = None, prefix: int = 0) -> _Sweep:
        """Place the jobs in this order; the first ``prefix`` decisions are copied from ``replay``.

        In mode ``"after"`` the jobs left out then get a second turn, most valuable
        first, in which they may take real-time capacity.
        """
        self.order = order
        trade = self.mode == "inline"
        for position, j in enumerate(order):
            decision = replay.log[position] if replay is not None and position < prefix else self.decide(j, trade)
            if decision is not None:
                self.apply(decision)
            self.log.append(decision)
        if self.mode == "after":
            self.second_turn(trade=True)
        return self

    def second_turn(self, trade: bool) -> None:
        """Give the jobs left out another turn, most valuable first (with ``trade``, taking real-time capacity)."""
        order = self.order
        left = [p for p, decision in enumerate(self.log) if decision is None and p not in self.second]
        for position in sorted(left, key=lambda p: (-self.ctx.first_value[order[p]], order[p])):
            decision = self.decide(order[position], trade)
            if decision is not None:
                self.apply(decision)
                self.second[position] = decision

    def start_from(self, plan: Plan) -> bool:
        """Take another plan's placements (on this sweep's real-time curves), then place the jobs it left out.

        The placements go in arrival order; the jobs the plan left out then get a
        turn as they are and one in which they may trade. Returns False (and the
        sweep must be dropped) when the placements do not fit next to the curves.
        """
        ctx = self.ctx
        spots = {}
        for placement in plan.placements:
            j = ctx.scenario.job_index(placement.job)
            if ctx.scenario.jobs[j].running_on is None:
                spots[j] = (placement.start, placement.gpus[0])
        self.order = _order_arrival(ctx)
        try:
            for j in self.order:
                decision = (j, *spots[j], None, self.penalty) if j in spots else None
                if decision is not None:
                    self.apply(decision)
                self.log.append(decision)
        except OverlapError:  # cells taken twice: not a plan this grid can hold; any other error is a bug
            return False
        if (self.grid.slack() < 0).any():
            return False
        self.second_turn(trade=False)
        self.second_turn(trade=True)
        return True

    def apply(self, decision: tuple[int, int, int, np.ndarray | None, float]) -> None:
        """Place a job and, after a trade, install the lowered real-time curves."""
        j, t, first, curves, penalty = decision
        self.grid.place(j, t, first)
        self.job_value += float(self.ctx.values[j, t])
        if curves is not None:
            for i, curve in enumerate(curves):
                self.grid.set_curve(i, curve)
            self.set_curves(curves, penalty)

    def set_curves(self, curves: np.ndarray, penalty: float) -> None:
        """Record the real-time curves, their penalty, their total and their releasable excess per slot."""
        self.curves = curves
        self.penalty = penalty
        self.rt_total = curves.sum(axis=0)
        # GPUs the curves hold above both demand and ramp floor: a trade may take them without shortfall.
        self.excess = np.maximum(0, curves - np.maximum(self.ctx.demand, self.ctx.floors)).sum(axis=0)

    # -------------------------------------------------------------- one job

    def decide(self, j: int, trade: bool) -> _Decision:
        """Job j's best start and block; with ``trade``, taking real-time capacity where that pays."""
        ctx = self.ctx
        job = ctx.scenario.jobs[j]
        values = ctx.values[j]
        best: _Decision = None
        base = 0.0
        if self.config.block_rule == "lowest" and self.config.start_rule == "earliest":
            spot = self.grid.earliest(job)  # a scan that stops at the first fit: the fast path
            if spot is not None:
                base = float(values[spot[0]])
                best = (j, spot[0], spot[1], None, self.penalty)
        else:
            feasible = self.grid.feasible(job)
            fits = feasible.any(axis=1)
            t = int(fits.argmax())
            if fits[t]:
                t, b = self.choose(job, feasible, t, values)
                base = float(values[t])
                best = (j, t, int(ctx.block_starts[job.gpus][b]), None, self.penalty)
        if trade and ctx.first_value[j] > base + ctx.min_penalty:
            traded = self.trade(j, base)
            if traded is not None:
                best = traded
        return best

    def choose(self, job: Job, feasible: np.ndarray, t0: int, values: np.ndarray) -> tuple[int, int]:
        """The start and block index among feasible ones, by the start and block rules."""
        if self.config.start_rule == "packed":
            floor = values[t0] * (1.0 - self.config.pack_tolerance)
            rows = np.flatnonzero(feasible[t0:].any(axis=1))[:4] + t0
            best_score, best = -1.0, (t0, int(feasible[t0].argmax()))
            for t in rows:
                t = int(t)
                if values[t] < floor:
                    break
                blocks = np.flatnonzero(feasible[t])
                score = self.contact(job, t, blocks)
                b = int(score.argmax())
                if score[b] > best_score + _EPS:
                    best_score, best = float(score[b]), (t, int(blocks[b]))
            return best
        return t0, self.block(job, t0, feasible[t0])

    def block(self, job: Job, t: int, free: np.ndarray) -> int:
        """Index of the block to use at start t among the free ones (``free`` is a (B,) mask)."""
        if self.config.block_rule == "lowest":
            return int(free.argmax())
        blocks = np.flatnonzero(free)
        if blocks.size == 1:
            return int(blocks[0])
        score = self.contact(job, t, blocks) if self.config.block_rule == "best_fit" else self.node_load(job, t, blocks)
        return int(blocks[int(score.argmax())])

    def contact(self, job: Job, t: int, blocks: np.ndarray) -> np.ndarray:
        """Touching perimeter of each block at start t: busy or edge cells around it, shape (len(blocks),).

        Left and right count the slots of the span in which the neighbouring GPU
        is busy (a node or cluster edge counts as busy); before and after count
        the GPUs of the block busy in the slot before the start and the slot after
        the end (the horizon's start and end count as busy).
        """
        sc = self.ctx.scenario
        k, d = job.gpus, job.duration
        G, ns, T = sc.gpus, sc.node_size, sc.slots
        a = self.ctx.block_starts[k][blocks]
        busy = self.grid.owner[:, t : t + d] != FREE  # (G, d)
        side = busy.sum(axis=1)
        left = np.where(a % ns == 0, d, side[a - 1])
        b = a + k
        right = np.where((b % ns == 0) | (b >= G), d, side[np.minimum(b, G - 1)])
        score = left + right
        for slot, edge in ((t - 1, t == 0), (t + d, t + d >= T)):
            if edge:
                score = score + k
            else:
                col = np.concatenate(([0], np.cumsum(self.grid.owner[:, slot] != FREE)))
                score = score + col[b] - col[a]
        return score

    def node_load(self, job: Job, t: int, blocks: np.ndarray) -> np.ndarray:
        """Busy GPU-slots over the job's span in the node(s) of each block; the busiest node wins."""
        sc = self.ctx.scenario
        a = self.ctx.block_starts[job.gpus][blocks]
        busy = np.concatenate(([0], np.cumsum((self.grid.owner[:, t : t + job.duration] != FREE).sum(axis=1))))
        ns = sc.node_size
        lo = (a // ns) * ns
        hi = np.minimum(((a + job.gpus - 1) // ns + 1) * ns, sc.gpus)
        return busy[hi] - busy[lo]

    # -------------------------------------------------------------- trading real-time capacity

    def trade(self, j: int, base: float) -> _Decision:
        """The best start that takes real-time capacity, when its value beats the extra penalty.

        A cheap bound on each start's extra shortfall (the GPUs the job needs
        beyond the slack and the curves' excess over demand and ramp floor, at
        the least penalty; it ignores the ramp) prunes the starts first; the grid
        is then asked where the block is free with the curves at their ramp
        floors, and the best few starts are evaluated exactly by recomputing the
        curves with the job's load as a cap.

        Args:
            j: The job.
            base: Value of the job's best start without a trade (0 when it has none).

        Returns:
            The decision, or None when no trade beats ``base``.
        """
        ctx = self.ctx
        job = ctx.scenario.jobs[j]
        values = ctx.values[j]
        window = ctx.window[j]
        T, k, d = ctx.scenario.slots, job.gpus, job.duration
        slack = ctx.scenario.gpus - self.grid.job_load - self.rt_total
        need = np.concatenate(([0], np.cumsum(np.maximum(0, k - slack - self.excess))))
        starts = np.arange(window.start, window.stop)
        bound = values[starts] - ctx.min_penalty * (need[np.minimum(starts + d, T)] - need[starts])
        keep = bound > base + _EPS
        if not keep.any():
            return None
        saved = self.grid.curves
        self.grid.curves = ctx.floors  # the least real-time allocation the ramps allow
        try:
            free = self.grid.feasible(job)
        finally:
            self.grid.curves = saved
        keep &= free[window.start : window.stop].any(axis=1)
        rows, bound = starts[keep], bound[keep]
        best = None
        for r in np.argsort(-bound, kind="stable")[: self.config.trade_candidates]:
            t = int(rows[r])
            if best is not None and bound[r] <= best[0] + _EPS:
                break  # no later candidate can beat the best found
            load = self.grid.job_load.copy()
            load[t : min(t + d, T)] += k
            curves, penalty = ctx.curves_and_penalty(load)
            gain = float(values[t]) - (penalty - self.penalty)
            if gain > base + _EPS and (best is None or gain > best[0] + _EPS):
                best = (gain, t, curves, penalty)
        if best is None:
            return None
        _, t, curves, penalty = best
        first = int(ctx.block_starts[k][self.block(job, t, free[t])])
        return (j, t, first, curves, penalty)


# ----------------------------------------------------------------------------- the search


class _Search:
    """Runs sweeps, replaying the longest shared prefix of an earlier sweep, and keeps the best."""

    def __init__(self, ctx: _Context, config: GreedyConfig) -> None:
        self.ctx = ctx
        self.config = config
        self.done: list[_Sweep] = []
        self.best: _Sweep | None = None
        self.best_name = ""

    def sweep(self, order: list[int], mode: str, name: str) -> bool:
        """Run one sweep; True when it beats the best so far.

        A sweep's first pass is a function of its order and trade mode, so an
        earlier sweep's first-pass decisions are replayed over their shared prefix:
        from a sweep of the same mode, or, for modes that do not trade in the first
        pass, from an inline sweep up to its first trade (until then the two agree).
        A "fifo" sweep is never replayed: its decisions are FIFO's.
        """
        replay, prefix = None, 0
        for other in self.done:
            if other.mode == mode:
                n = _common_prefix(order, other.order)
            elif mode in ("off", "after") and other.mode == "inline":
                n = min(_common_prefix(order, other.order), other.first_trade())
            else:
                continue
            if n > prefix:
                replay, prefix = other, n
        if replay is not None and prefix == len(order) == len(replay.order):
            if replay.mode == mode or not replay.unplaced:
                return False  # the same sweep again, or one that would repeat an inline sweep that traded nothing
        result = _Sweep(self.ctx, self.config, mode).run(order, replay, prefix)
        self.done.append(result)
        if self.best is None or result.objective > self.best.objective + _EPS:
            self.best, self.best_name = result, f"{name}/{mode}"
            return True
        return False

    def promote(self) -> None:
        """Move each unplaced job of the best sweep to the front of its ordering; keep improvements."""
        for _ in range(self.config.promote_rounds):
            assert self.best is not None
            improved = False
            candidates = sorted(self.best.unplaced, key=lambda i: (-self.ctx.first_value[i], i))
            for u in candidates[: self.config.promote_limit]:
                best = self.best
                if u not in best.unplaced:
                    continue
                order = [u, *(j for j in best.order if j != u)]
                name = self.best_name.split("/")[0].removesuffix("+promoted") + "+promoted"
                if self.sweep(order, "after" if best.mode == "fifo" else best.mode, name):
                    improved = True
            if not improved:
                return

    def fifo_start(self, fifo_plan: Plan) -> None:
        """One more start: FIFO's placements on greedy's curves, then the jobs FIFO left out."""
        result = _Sweep(self.ctx, self.config, "fifo")
        if not result.start_from(fifo_plan):
            return
        self.done.append(result)
        if self.best is None or result.objective > self.best.objective + _EPS:
            self.best, self.best_name = result, "fifo-seeded/after"


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def solve(scenario: Scenario, config: GreedyConfig = DEFAULT) -> GreedyResult:
    """Plan with the heuristic under a configuration, and say how the plan was found.

    Args:
        scenario: The problem.
        config: Orderings, block and start rules, trade modes, promotion and guard.

    Returns:
        The best plan found, with its objective.
    """
    ctx = _Context(scenario)
    search = _Search(ctx, config)
    modes = config.trades if scenario.apps else ("off",)  # without apps there is nothing to trade
    for mode in dict.fromkeys(modes):
        for name in config.orderings:
            search.sweep(ORDERINGS[name](ctx), mode, name)
    fifo_plan = fifo.plan(scenario) if config.fifo_seed or config.fifo_guard else None
    if config.fifo_seed and fifo_plan is not None:
        search.fifo_start(fifo_plan)
    search.promote()
    best = search.best
    assert best is not None  # GreedyConfig requires at least one ordering and mode
    result = GreedyResult(Plan.from_occupancy(best.grid, "greedy"), best.objective, search.best_name, len(search.done))
    if config.fifo_guard and fifo_plan is not None:
        score = ctx.objective_of(fifo_plan)
        if score > result.objective + 1e-6:  # the last resort: FIFO's own plan
            fifo_plan.scheduler = "greedy"
            return GreedyResult(fifo_plan, score, "fifo", result.sweeps, guard_fired=True)
    return result


def plan(scenario: Scenario, options: PlanOptions | None = None) -> Plan:
    """The greedy heuristic's plan: every scheduler's face.

    Args:
        scenario: The problem.
        options: Unused: the heuristic draws nothing at random and needs no time limit.

    Returns:
        A valid plan (metrics and timing are filled by ``agents.registry.run_scheduler``).
    """
    return solve(scenario, DEFAULT).plan
