"""Greedy's plans as recorded before it became the compiled decoder run on its orderings (issue 26).

``tests/data/greedy_plans.json`` holds, for every case of :func:`cases`, the plan of each configuration of
:data:`CONFIGS` (placements, a hash of the real-time curves, the objective, the winning sweep's name and whether
the FIFO guard fired) and, for the first cases, single sweeps of fixed random orders in each trade mode. It was
written by the Python sweep (``agents/greedy.py``'s ``_Sweep`` as of commit f26cfa3), the reference that
``tests/test_greedy_reference.py`` holds today's greedy and the decoder to.

Regenerate (only when a change to the plans is intended, and say so in the commit)::

    PYTHONPATH=. .venv/bin/python tests/greedy_reference.py
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.greedy import DEFAULT, FAST, GreedyConfig, GreedyResult  # noqa: E402
from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, generate  # noqa: E402
from gpu_env.plan import Plan  # noqa: E402
from gpu_env.scenario import Scenario  # noqa: E402
from gpu_env.traces import TRACE_FAMILIES  # noqa: E402

FIXTURE = ROOT / "tests" / "data" / "greedy_plans.json"
SIZES = (8, 16, 32, 64)
"""Cluster sizes every family is drawn at (seed 1), beside its benchmark scenario."""
LARGE = (("scale-64x30", 128), ("mixed-control", 256))
"""Larger draws (seed 2)."""

CONFIGS: dict[str, GreedyConfig] = {
    "default": DEFAULT,
    "fast": FAST,
    "best_fit": replace(DEFAULT, block_rule="best_fit"),
    "node_fit": replace(DEFAULT, block_rule="node_fit"),
    "packed": replace(DEFAULT, block_rule="best_fit", start_rule="packed"),
    "all": replace(DEFAULT, orderings=("weight", "value", "density", "deadline", "arrival", "size"),
                   trades=("off", "inline", "after")),
}  # fmt: skip
"""The default on every case; the others on the cases :func:`cases` marks ``variants``."""

SWEEP_CASES = 12
"""Cases (the first of :func:`cases`) whose single sweeps of random orders are recorded."""
SWEEP_ORDERS = 2
"""Random orders per such case (each decoded in every trade mode)."""


def cases() -> list[tuple[str, Scenario, bool]]:
    """(name, scenario, whether every configuration is recorded) for each case, in a fixed order."""
    out: list[tuple[str, Scenario, bool]] = []
    for family in FAMILIES:
        out.append((f"{family}/benchmark", generate(family, BENCHMARK_SEEDS[family]), True))
    for family in FAMILIES:
        for gpus in SIZES:
            out.append((f"{family}/{gpus}", generate(family, 1, gpus=gpus), gpus == 16))
        out.append((f"{family}/12-node6", generate(replace(FAMILIES[family], gpus=12, node_size=6), 1), False))
    for family, gpus in LARGE:
        out.append((f"{family}/{gpus}", generate(family, 2, gpus=gpus), False))
    for family in TRACE_FAMILIES:
        out.append((f"{family}/benchmark", generate(family, 2026), False))
    return out


def curves_hash(plan: Plan, scenario: Scenario) -> str:
    """SHA-256 (first 16 hex digits) of the plan's real-time curves, apps in file order, as int64."""
    curves = np.array([plan.curve(app.name, scenario.slots) for app in scenario.apps], dtype=np.int64)
    return hashlib.sha256(curves.tobytes()).hexdigest()[:16]


def placements(plan: Plan, scenario: Scenario) -> list[list[int]]:
    """The plan's placements as [job index, start, first GPU], by job index."""
    return sorted([scenario.job_index(p.job), p.start, p.gpus[0]] for p in plan.placements)


def record(result: GreedyResult, scenario: Scenario) -> dict[str, Any]:
    """One plan as the fixture holds it."""
    return {
        "placements": placements(result.plan, scenario),
        "curves": curves_hash(result.plan, scenario),
        "objective": result.objective,
        "ordering": result.ordering,
        "guard_fired": result.guard_fired,
    }


def sweep_orders(scenario: Scenario, case: int) -> list[list[int]]:
    """The fixed random orders of a case's recorded sweeps (pending jobs, permuted by seed ``case``)."""
    pending = [i for i, job in enumerate(scenario.jobs) if job.running_on is None]
    rng = np.random.default_rng(case)
    return [[int(j) for j in rng.permutation(pending)] for _ in range(SWEEP_ORDERS)]


def main() -> None:
    """Write the fixture from the Python sweep (the version of ``agents/greedy.py`` that still has ``_Sweep``)."""
    from agents import greedy

    out: dict[str, Any] = {"cases": {}, "sweeps": {}}
    for c, (name, scenario, variants) in enumerate(cases()):
        plans = {}
        for config_name, config in CONFIGS.items():
            if config_name == "default" or variants:
                plans[config_name] = record(greedy.solve(scenario, config), scenario)
        out["cases"][name] = plans
        if c < SWEEP_CASES:
            rows = []
            modes = ("off", "inline", "after") if scenario.apps else ("off",)
            for order in sweep_orders(scenario, c):
                for mode in modes:
                    sweep = greedy._Sweep(greedy._Context(scenario), DEFAULT, mode).run(order)
                    spots = sorted([j, s.start, s.first_gpu] for j, s in sweep.grid.placed.items())
                    rows.append({"mode": mode, "placements": spots, "objective": sweep.objective})
            out["sweeps"][name] = rows
        print(name, plans["default"]["objective"], flush=True)
    FIXTURE.write_text(json.dumps(out, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
