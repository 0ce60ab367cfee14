"""Greedy: the seed's fast mode, a hand-written heuristic that sees the whole queue first.

It plans in sweeps over the queue and keeps the best plan by objective. A sweep is the compiled list-scheduling
decoder (:func:`gpu_env.listsched.decode`) run on one of greedy's orderings: greedy chooses the orderings, the
decoder places them, all of them and the promotions after in one compiled call.

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
   job's load as a cap (the decoder's compiled :func:`gpu_env.objective.realtime_curves`,
   which keeps the ramp); the job takes that start when its extra value beats the
   penalty of the extra shortfall. A cheap bound prunes the starts where this cannot pay.
4. **Multi-start and promotion.** Sweeps run for several orderings (by default
   priority and realisable value), each with trades inline and with trades
   deferred to the jobs the sweep left out; one more start takes FIFO's own
   placements on these curves and adds the jobs FIFO left out. Then the most
   valuable jobs the best sweep left out are promoted, one at a time, to the
   front of its ordering and the sweep is redone, kept when the objective
   rises.
5. **Guard.** Should FIFO's plan still score higher, it is returned (the last
   resort; it has not fired on any scenario measured, see ``docs/greedy.md``).

Blocks go to the lowest-index free block by default: best-fit (touching
perimeter) and node-fit rules are implemented and were measured, and did not
beat it on the seven families (``benchmarks/results/greedy_variants.md``).

Every plan keeps the rules of SPEC section 2 (the decoder places by them; the tests validate its plans).
Everything is deterministic: nothing is drawn at random, ties break by position in the file. :data:`FAST` is a
one-sweep configuration for callers that need close to FIFO's speed.

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

from agents.options import PlanOptions
from gpu_env import listsched
from gpu_env.listsched import MODE_AFTER, MODES, ListInstance, decode, fifo_replay
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario

BLOCK_RULES = tuple(listsched.BLOCK_RULES)
START_RULES = listsched.START_RULES


class TradeMode(StrEnum):
    """When a sweep lets jobs take real-time capacity (their value beating the extra penalty)."""

    OFF = "off"  # never
    INLINE = "inline"  # each job as it comes
    AFTER = "after"  # the jobs left out, once every job had its turn without trading


TRADE_MODES = tuple(TradeMode)
_EPS = 1e-9


@dataclass(frozen=True)
class JobKeys:
    """What the orderings sort pending jobs by (one entry per job of the scenario, file order).

    Attributes:
        weight: Priority: value per GPU-slot.
        area: GPUs times duration.
        release: First allowed start.
        deadline: The deadline, or ``T + duration`` without one.
        has_deadline: Whether the job has a deadline.
        first_value: What the job earns at the first start of its window (0 without one).
        pending: Indices of the jobs not inherited, file order.
    """

    weight: list[float]
    area: list[int]
    release: list[int]
    deadline: list[int]
    has_deadline: list[bool]
    first_value: list[float]
    pending: list[int]

    @classmethod
    def of(cls, scenario: Scenario, first_value: np.ndarray | None = None) -> JobKeys:
        """A scenario's keys; ``first_value`` when the caller has it (:attr:`ListInstance.first_value`)."""
        jobs, T = scenario.jobs, scenario.slots
        if first_value is None:
            first_value = ListInstance.build(scenario).first_value
        return cls(
            weight=[job.weight for job in jobs],
            area=[job.area for job in jobs],
            release=[job.release for job in jobs],
            deadline=[job.deadline if job.deadline is not None else T + job.duration for job in jobs],
            has_deadline=[job.deadline is not None for job in jobs],
            first_value=[float(v) for v in first_value],
            pending=[i for i, job in enumerate(jobs) if job.running_on is None],
        )


# ----------------------------------------------------------------------------- orderings


def _order_weight(keys: JobKeys) -> list[int]:
    """Priority (weight per GPU-slot) first; within a priority, jobs with a deadline, then the larger value."""
    return sorted(
        keys.pending,
        key=lambda i: (-keys.weight[i], not keys.has_deadline[i], -keys.first_value[i], keys.release[i], i),
    )


def _order_value(keys: JobKeys) -> list[int]:
    """Realisable value (at the release, decay and horizon included), largest first."""
    return sorted(keys.pending, key=lambda i: (-keys.first_value[i], i))


def _order_density(keys: JobKeys) -> list[int]:
    """Realisable value per GPU-slot of the job (weight times decay, truncation included)."""
    return sorted(keys.pending, key=lambda i: (-keys.first_value[i] / keys.area[i], -keys.area[i], i))


def _order_deadline(keys: JobKeys) -> list[int]:
    """Earliest deadline first, jobs without one after; then by priority."""
    return sorted(keys.pending, key=lambda i: (keys.deadline[i], -keys.weight[i], -keys.first_value[i], i))


def _order_arrival(keys: JobKeys) -> list[int]:
    """FIFO's order: release, then position in the file."""
    return sorted(keys.pending, key=lambda i: (keys.release[i], i))


def _order_size(keys: JobKeys) -> list[int]:
    """Largest area first (bin packing's order), then by priority."""
    return sorted(keys.pending, key=lambda i: (-keys.area[i], -keys.weight[i], i))


ORDERINGS: dict[str, Callable[[JobKeys], list[int]]] = {
    "weight": _order_weight,
    "value": _order_value,
    "density": _order_density,
    "deadline": _order_deadline,
    "arrival": _order_arrival,
    "size": _order_size,
}


@dataclass(frozen=True)
class GreedyConfig:
    """How the heuristic plans; :data:`DEFAULT` is the measured best (``benchmarks/results/greedy_variants.md``).

    Attributes:
        orderings: Job orderings to sweep (keys of :data:`ORDERINGS`); the best plan wins.
        block_rule: ``"lowest"`` (lowest-index free block), ``"best_fit"`` (largest touching
            perimeter: busy cells and edges around the block), ``"node_fit"`` (the node
            busiest over the job's span, keeping emptier nodes whole) or ``"highest"``
            (highest-index free block).
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
            last resort; ``benchmarks/results/greedy_variants.md`` counts how often it fired).
        restarts: Noisy orders added to the sweeps (:func:`noisy_orders`: greedy's priority key plus Gumbel
            noise, seeded by :func:`solve`'s ``seed``), their trade modes alternating. They form a promotion group of
            their own, so restarts never give a worse plan than none (:func:`gpu_env.listsched.decode`).
        restart_temperature: Scale of the restarts' Gumbel noise against the key's spread (ranks over the queue
            size: 1 between the first job and the last).
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
    restarts: int = 0
    restart_temperature: float = 0.3

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
        if self.restarts < 0 or not self.restart_temperature > 0:
            raise ValueError("restarts must not be negative and restart_temperature must be positive")


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
        sweeps: Orders decoded (the FIFO seed and promotion's included).
        guard_fired: Whether FIFO's plan scored higher and was returned instead.
    """

    plan: Plan
    objective: float
    ordering: str
    sweeps: int
    guard_fired: bool = False


def orderings(scenario: Scenario, names: tuple[str, ...] | list[str]) -> list[list[int]]:
    """Greedy's job orders of a scenario by name (:data:`ORDERINGS`): pending jobs, each order once."""
    keys = JobKeys.of(scenario)
    return [ORDERINGS[name](keys) for name in names]


def noisy_orders(keys: JobKeys, count: int, seed: int, temperature: float) -> np.ndarray:
    """``count`` orders of the pending jobs by greedy's priority key plus Gumbel noise (Plackett-Luce draws).

    The key is each job's rank in the priority ordering (:func:`_order_weight`), scaled to 0 (first) .. -1 (last);
    a job's sort key is that plus ``temperature`` times a standard Gumbel draw, so low temperatures perturb
    neighbours and high ones shuffle the queue.

    Returns:
        (count, m) job indices, m the pending jobs.
    """
    base = np.array(_order_weight(keys), dtype=np.int64)
    m = base.size
    rank = -np.arange(m, dtype=np.float64) / max(m - 1, 1)
    rng = np.random.default_rng(seed)
    gumbel = -np.log(-np.log(rng.random((count, m)) + 1e-300) + 1e-300)
    return base[np.argsort(-(rank[None, :] + temperature * gumbel), axis=1, kind="stable")]


def solve(scenario: Scenario, config: GreedyConfig = DEFAULT, seed: int = 0) -> GreedyResult:
    """Plan with the heuristic under a configuration, and say how the plan was found.

    One compiled call decodes every sweep (each ordering under each trade mode, modes first), the restarts
    (``config.restarts``), the FIFO seed last, keeps the first best (a later sweep must beat it by more than 1e-9)
    and promotes on it, and on the best restart in a group of their own (:func:`gpu_env.listsched.decode`).

    Args:
        scenario: The problem.
        config: Orderings, block and start rules, trade modes, restarts, promotion and guard.
        seed: Seed of the restarts' noise (unused without restarts).

    Returns:
        The best plan found, with its objective.
    """
    inst = ListInstance.build(scenario)
    keys = JobKeys.of(scenario, inst.first_value)
    modes = config.trades if scenario.apps else (TradeMode.OFF,)  # without apps there is nothing to trade
    names: list[str] = []
    rows: list[list[int]] = []
    row_modes: list[int] = []
    for mode in dict.fromkeys(modes):
        for name in config.orderings:
            names.append(f"{name}/{mode}")
            rows.append(ORDERINGS[name](keys))
            row_modes.append(MODES[mode])
    groups = [0] * len(rows)
    if config.restarts:
        cycle = list(dict.fromkeys(modes))
        for r, order in enumerate(noisy_orders(keys, config.restarts, seed, config.restart_temperature)):
            mode = cycle[r % len(cycle)]
            names.append(f"restart-{r}/{mode}")
            rows.append(order.tolist())
            row_modes.append(MODES[mode])
            groups.append(1)
    fifo_run = fifo_replay(scenario, inst) if config.fifo_seed or config.fifo_guard else None
    fifo_placements = None
    if config.fifo_seed and fifo_run is not None:
        # FIFO's placements on greedy's curves, then the jobs FIFO left out; promotion redoes it in mode "after".
        names.append("fifo-seeded/after")
        rows.append(_order_arrival(keys))
        row_modes.append(MODE_AFTER)
        groups.append(0)
        fifo_placements = (fifo_run.start[0], fifo_run.first[0])
    found = decode(
        inst,
        np.array(rows, dtype=np.int64).reshape(len(rows), len(keys.pending)),
        np.array(row_modes, dtype=np.int64),
        config.trade_candidates,
        config.promote_rounds,
        config.promote_limit,
        block_rule=config.block_rule,
        start_rule=config.start_rule,
        pack_tolerance=config.pack_tolerance,
        seed=fifo_placements,
        margin=_EPS,
        groups=np.array(groups, dtype=np.int64),
    )
    best = found.chosen
    name = names[best]
    if found.promoted is not None and found.promoted[best]:
        ordering, mode = name.split("/")
        name = f"{ordering}+promoted/{mode}"
    sweeps = len(rows) + found.promotion_decodes
    result = GreedyResult(found.plan(best, scenario, "greedy"), float(found.objective[best]), name, sweeps)
    if config.fifo_guard and fifo_run is not None:
        score = float(fifo_run.objective[0])
        if score > result.objective + 1e-6:  # the last resort: FIFO's own plan
            return GreedyResult(fifo_run.plan(0, scenario, "greedy"), score, "fifo", sweeps, guard_fired=True)
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
