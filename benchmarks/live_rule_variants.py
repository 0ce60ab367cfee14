"""Variants of the live planner side by side with rolling greedy, day by day: how its rule was chosen.

Every family at its seed size, days ``--seeds``, each played at every ``--sigmas`` and ``--runtimes`` (the
realized day, the history of 8 past days and the hindsight optimum exactly as ``online_benchmark.py`` makes
them). Each variant is the live planner ``anticipate`` with fields replaced (``--variants`` is JSON: name ->
fields of :class:`agents.rolling.anticipate.AnticipatingPlanner`, plus ``"history": false`` to play without the
history, ``"planner": "anticipate-consensus"`` for another named planner, ``"forecast": "history"`` for the
forecaster fitted from the history, ``"margin": Z`` for the corrected forecast's margin in error SDs and
``"prior_weight": W`` for the slots the demand model's prior level counts as, ``"history_from": "another
family"`` for the past days of the next family in alphabetical order, drawn at this cluster's size: a
history of another cluster).
Prints, per cell, each variant's mean ratio to the hindsight optimum, its worst family, the days it lost
(or won) against rolling greedy by more than 0.02 of the hindsight optimum, the worst such day, the cycle
time, and how often the expectation rule departed from the base decision.

Run (docs/rolling.md's table; 140 days, about 5 min on 2 cores)::

    PYTHONPATH=. .venv/bin/python benchmarks/live_rule_variants.py --seeds 93000-93004 \\
        --variants '{"expectation": {}, "without history": {"history": false},
                     "consensus": {"planner": "anticipate-consensus"},
                     "fill within ramp": {"fill_within_ramp": true}}'
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import agents.rolling.anticipate as anticipate  # noqa: E402
from agents.arguments import parse_floats, parse_names  # noqa: E402
from agents.options import PlanOptions  # noqa: E402
from agents.rolling.drawn_history import past_days  # noqa: E402
from agents.rolling.forecast import Corrector, NoiseModel  # noqa: E402
from agents.rolling.live_arms import Settings, hindsight  # noqa: E402
from agents.rolling.runtimes import draw_runtimes  # noqa: E402
from agents.rolling.simulation import realized_day, rolling  # noqa: E402
from gpu_env.generators import FAMILIES, generate  # noqa: E402

FAMILIES_ORDER = sorted(FAMILIES)
LOSS = 0.02
"""A day lost against rolling greedy: more than this share of the hindsight optimum below it."""
_COUNT = {"calls": 0, "departures": 0}
_choose = anticipate.choose


def _counting_choose(*args: Any, **kwargs: Any) -> tuple[int, float, float]:
    """The rule's pick, counted (departures from the base decision over cycles that weighed candidates)."""
    picked = _choose(*args, **kwargs)
    _COUNT["calls"] += 1
    _COUNT["departures"] += picked[0] != 0
    return picked


def planner_for(spec: Mapping[str, Any], day: Any, past: Sequence[Any], seed: int) -> Any:
    """The live planner a variant describes."""
    fields = dict(spec)
    name = fields.pop("planner", "anticipate")
    history = past if fields.pop("history", True) else ()
    forecast = fields.pop("forecast", "corrector")
    margin = fields.pop("margin", None)
    planner = anticipate.live_planner(name, history=history, day=day, seed=seed, forecast=forecast)
    if margin is not None:
        fields["forecaster"] = replace(planner.forecaster, margin=float(margin))
    weight = fields.pop("prior_weight", None)
    if weight is not None and planner.errors is not None:
        fields["errors"] = replace(planner.errors, prior_weight=float(weight))
    if "headroom" in fields:
        fields["headroom"] = tuple(fields["headroom"])
    return replace(planner, **fields)


def play_day(task: tuple[str, int, float, str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Rolling greedy and every variant on one realized day: ratio, cycle ms, departures."""
    anticipate.choose = _counting_choose  # in the worker process
    family, seed, sigma, model, variants = task
    day = generate(family, seed)
    settings = Settings(sigmas=(sigma,), runtimes=(model,), planners=("greedy",))
    past = past_days(family, day.gpus, seed, settings.history_days, sigma)
    runtimes = draw_runtimes(day, model, seed)
    realized = realized_day(day, NoiseModel(sigma).draw(day, seed), runtimes)
    reference = hindsight(realized, settings)["reference"]
    out: dict[str, Any] = {"family": family, "seed": seed, "sigma": sigma, "runtime": model, "planners": {}}
    for name in ("rolling greedy", *variants):
        spec = variants.get(name, {})
        history = past
        if spec.get("history_from") == "another family":  # the model wrong: the history of another cluster
            other = FAMILIES_ORDER[(FAMILIES_ORDER.index(family) + 1) % len(FAMILIES_ORDER)]
            history = past_days(other, day.gpus, seed, settings.history_days, sigma)
            spec = {k: v for k, v in spec.items() if k != "history_from"}
        scheduler: Any = "greedy" if name == "rolling greedy" else planner_for(spec, day, history, seed)
        corrector = Corrector() if name == "rolling greedy" else None
        _COUNT.update(calls=0, departures=0)
        started = time.perf_counter()
        sim = rolling(day, scheduler, realized, options=PlanOptions(seed=0), corrector=corrector, runtimes=runtimes)
        out["planners"][name] = {
            "ratio": sim.metrics.objective / reference,
            "ms_per_slot": (time.perf_counter() - started) * 1000.0 / day.slots,
            "max_cycle_ms": max(sim.solve_ms),
            **_COUNT,
        }
    return out


def summary(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[str]:
    """One line per variant per (sigma, runtime) cell."""
    lines = []
    for sigma, model in sorted({(r["sigma"], r["runtime"]) for r in rows}):
        cell = [r for r in rows if r["sigma"] == sigma and r["runtime"] == model]
        lines.append(f"== sigma {sigma:g}, {model} runtimes: {len(cell)} days")
        greedy = np.array([r["planners"]["rolling greedy"]["ratio"] for r in cell])
        for name in names:
            v = np.array([r["planners"][name]["ratio"] for r in cell])
            d = v - greedy
            fams = {
                f: float(np.mean([r["planners"][name]["ratio"] for r in cell if r["family"] == f])) for f in FAMILIES
            }
            worst_family = min(fams, key=lambda f: fams[f])
            worst = cell[int(np.argmin(d))]
            ms = np.mean([r["planners"][name]["ms_per_slot"] for r in cell])
            top = max(r["planners"][name]["max_cycle_ms"] for r in cell)
            calls = sum(r["planners"][name]["calls"] for r in cell)
            departures = sum(r["planners"][name]["departures"] for r in cell)
            lines.append(
                f"{name:20s} mean {v.mean():.4f}  worst family {worst_family} {fams[worst_family]:.3f}  "
                f"vs rolling greedy: lost {(d < -LOSS).sum()} won {(d > LOSS).sum()} "
                f"worst {d.min():+.3f} ({worst['family']} {worst['seed']})  "
                f"{ms:.1f} ms/slot, max cycle {top:.0f} ms  departures {departures}/{calls}"
            )
    return lines


def parse_seeds(text: str) -> list[int]:
    """``93000-93004`` or ``1,2,3``."""
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-", 1))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",")]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("93000-93004"), help="days' seeds")
    parser.add_argument("--sigmas", type=parse_floats, default=(0.0, 0.3), help="forecast errors (0,0.3)")
    parser.add_argument("--runtimes", type=parse_names, default=("exact", "trace"), help="runtime models")
    parser.add_argument("--variants", type=json.loads, default={"expectation": {}}, help="JSON: name -> fields")
    parser.add_argument("--parallel", type=int, default=2, metavar="N", help="processes (2)")
    args = parser.parse_args(argv)
    tasks = [
        (family, seed, sigma, model, args.variants)
        for family in FAMILIES
        for seed in args.seeds
        for sigma in args.sigmas
        for model in args.runtimes
    ]
    with ProcessPoolExecutor(args.parallel) as pool:
        rows = list(pool.map(play_day, tasks))
    print("\n".join(summary(rows, ["rolling greedy", *args.variants])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
