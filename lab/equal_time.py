"""Greedy with restarts as the learned planner's fair baseline: at its decode count and at its plan time.

Greedy gains restarts (``GreedyConfig(restarts=R)``: R orders drawn from its own priority key plus Gumbel noise,
seeded, a promotion group of their own, so never below plain greedy). At the decode count R is
:data:`DECODE_RESTARTS`; at equal time R is calibrated in the run (:func:`calibrate_restarts`). Used by
``benchmarks/ppo_benchmarks.py`` and ``benchmarks/ppo_equal_time.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from agents import greedy, ppo
from agents.options import DEFAULT_SAMPLES, Guard, PlanOptions
from gpu_env.scenario import Scenario
from lab.benchmarking import table

__all__ = [
    "CALIBRATION_ROUNDS",
    "DECODE_RESTARTS",
    "GREEDY_ORDERS",
    "RESTART_GRID",
    "Calibration",
    "calibrate_restarts",
    "calibration_table",
    "one_options",
    "restarts_config",
    "shipped_options",
]


def shipped_options(policy: Path) -> PlanOptions:
    """Ppo as shipped: the default candidates and guard."""
    return PlanOptions(policy=policy)


def one_options(policy: Path) -> PlanOptions:
    """The policy alone: one candidate (the argmax order, promoted), no guard."""
    return PlanOptions(policy=policy, samples=1, guard=Guard.NONE)


GREEDY_ORDERS = len(greedy.DEFAULT.orderings) * len(greedy.DEFAULT.trades) + int(greedy.DEFAULT.fifo_seed)
"""Orders plain greedy decodes before promotion: each ordering in each trade mode, and the FIFO seed (5)."""
DECODE_RESTARTS = DEFAULT_SAMPLES - GREEDY_ORDERS
"""Restarts that give greedy the shipped learned planner's decode count: 5 + 7 = 12 orders."""
RESTART_GRID = (0, 1, 2, 4, 7, 10, 14, 20, 28, 40, 56, 80)
"""Restart counts the equal-time calibration (:func:`calibrate_restarts`) times."""
CALIBRATION_ROUNDS = 5


def restarts_config(restarts: int, temperature: float) -> greedy.GreedyConfig:
    """Greedy as shipped (:data:`agents.greedy.DEFAULT`) plus ``restarts`` Gumbel restarts of its own key."""
    return replace(greedy.DEFAULT, restarts=restarts, restart_temperature=temperature)


@dataclass
class Calibration:
    """The equal-time restarts of one size class: the most whose median plan time is at most the shipped planner's.

    Attributes:
        label: The size class.
        instances: Instances timed.
        rounds: Timed rounds per instance (after one warm-up call of each planner).
        shipped_ms: The shipped learned planner's median plan time (ms) over every instance and round.
        greedy_ms: Greedy's median plan time with each restart count of the grid.
        chosen: The largest restart count whose median is at most ``shipped_ms`` (the grid's least when none is).
    """

    label: str
    instances: int
    rounds: int
    shipped_ms: float
    greedy_ms: dict[int, float]
    chosen: int


def calibrate_restarts(
    instances: list[Scenario],
    policy: Path,
    label: str,
    temperature: float,
    rounds: int = CALIBRATION_ROUNDS,
    grid: tuple[int, ...] = RESTART_GRID,
) -> Calibration:
    """Time greedy with each restart count of ``grid`` (at ``temperature``) against ppo as shipped, per instance.

    Each instance: one warm-up call of every planner, then ``rounds`` rounds (round r: seed r, the planners in
    an order rotated by r), each call timed with ``time.perf_counter`` around the planner (``ppo.plan``,
    ``greedy.solve``). Medians over every instance and round. The caller warms the policy up and pins the process.
    """
    options = shipped_options(policy)
    calls: list[tuple[str | int, Callable[[Scenario, int], object]]] = [
        ("shipped", lambda sc, s: ppo.plan(sc, replace(options, seed=s)))
    ]
    for restarts in grid:
        config = restarts_config(restarts, temperature)
        calls.append((restarts, lambda sc, s, c=config: greedy.solve(sc, c, seed=s)))
    times: dict[str | int, list[float]] = {key: [] for key, _ in calls}
    for sc in instances:
        for _, call in calls:
            call(sc, 0)
        for r in range(rounds):
            k = r % len(calls)
            for key, call in calls[k:] + calls[:k]:
                started = time.perf_counter()
                call(sc, r)
                times[key].append((time.perf_counter() - started) * 1000.0)
    shipped = float(np.median(times["shipped"]))
    medians = {restarts: float(np.median(times[restarts])) for restarts in grid}
    chosen = max((restarts for restarts in grid if medians[restarts] <= shipped), default=min(grid))
    return Calibration(label, len(instances), rounds, shipped, medians, chosen)


def calibration_table(calibrations: list[Calibration]) -> list[str]:
    """One row per size class: the shipped planner's median, greedy's at each restart count, the chosen count."""
    grid = list(dict.fromkeys(r for c in calibrations for r in c.greedy_ms))
    head = [
        "size class",
        "instances x rounds",
        "shipped ms",
        *(f"greedy + {r} ms" for r in grid),
        "**chosen restarts**",
    ]
    rows = [
        [
            c.label,
            f"{c.instances} x {c.rounds}",
            f"{c.shipped_ms:.2f}",
            *(
                (f"**{c.greedy_ms[r]:.2f}**" if r == c.chosen else f"{c.greedy_ms[r]:.2f}") if r in c.greedy_ms else "–"
                for r in grid
            ),
            f"**{c.chosen}**",
        ]
        for c in calibrations
    ]
    return table(head, rows).splitlines()
