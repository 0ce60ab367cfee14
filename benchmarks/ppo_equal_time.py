"""The equal-time table (issue 34): greedy with Gumbel restarts of its own key beside the learned planner.

    PYTHONPATH=. .venv/bin/python benchmarks/ppo_equal_time.py            # full run, ~10 min: results/ppo_equal_time.md
        [--seeds 20] [--large-seeds N] [--per-family 3] [--large-sizes 128,1024] [--families ...]
        [--best-time-limit 10] [--large-time-limit 30] [--deterministic-time D]
        [--temperatures 0.05,0.1,0.2,0.3,0.4,0.8 | --temperature T] [--tuning-seeds 5]
        [--restarts-at-time R | seed=R,128=R,1024=R] [--calibration-rounds 10]
        [--policy agents/policies/default.onnx] [--out PATH] [--json PATH]
    PYTHONPATH=. .venv/bin/python benchmarks/ppo_equal_time.py --quick    # ~1 min: results/ppo_equal_time_quick.md

Greedy gains restarts (``GreedyConfig(restarts=R)``: R orders drawn from its own priority key plus Gumbel noise,
seeded, a promotion group of their own, so never below plain greedy). Is the learned planner better than that
cheap baseline given the same budget? Two budgets: the planner's decode count (12 orders: greedy's 5 sweeps + 7
restarts, :data:`lab.equal_time.DECODE_RESTARTS`) and its time (the most restarts whose median plan time
is at most the shipped planner's, calibrated per size class in the same run).

**Instances.** (i) The seed's sizes: ``--per-family`` fresh instances of every family of
:data:`gpu_env.generators.FAMILIES` at the family's own size (``fresh(family, seed)``, seeds 20000...); best known:
full mode (:func:`agents.full.solve`) with ``--best-time-limit`` seconds, the proven optimum where CP-SAT proves it.
(ii) Large clusters: one fresh instance per family and size of ``--large-sizes`` (``fresh(family, 20000, gpus=G)``);
best known: the best of every arm's runs and of full mode with ``--large-time-limit`` seconds (0: the arms only).
Every instance is checked against training's draws (:func:`lab.training.fresh_draws.check_fresh`).

**Arms.** greedy (deterministic); greedy + 7 restarts (the decode count); greedy + R restarts (equal time); the
learned planner alone, one decode (``samples=1, guard="none"``); 12 candidates unguarded (``guard="none"``); as
shipped (12 candidates, FIFO guard); and, when ``ppo-stepwise`` is registered in :data:`agents.registry.SCHEDULERS`,
its one decode (``samples=1, guard="none"``) and its defaults (``PlanOptions()``). Every arm runs with planner seeds
0..``--seeds``-1 on every instance (the deterministic ones too: their times), seed by seed, the arms' order rotated
by the seed, after one warm-up call of each; each plan timed with ``time.perf_counter`` around the planner call
(``greedy.solve``, ``ppo.plan``, the registered function), in one process pinned to one CPU core, validated and
scored outside the timing.

**Tuning.** ``restart_temperature`` is chosen on a separate set of fresh draws (seeds 21000..., never the evaluation
instances): greedy + 7 restarts at each temperature of ``--temperatures`` with seeds 0..``--tuning-seeds``-1, the
best mean objective over plain greedy's. The equal-time calibration times the same tuning instances.

**Counts.** "More candidates gave a worse plan than fewer": runs where 12 candidates (unguarded, and as shipped) are
below one decode on the same instance and seed, and runs where greedy + restarts is below plain greedy. Both are 0
by construction (promotion groups); the counts check it.

Times are wall clock on a shared machine: noisy; medians, and the report's header gives the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import greedy, ppo  # noqa: E402
from agents.options import DEFAULT_GUARD, DEFAULT_SAMPLES, Guard, PlanOptions  # noqa: E402
from agents.registry import SCHEDULERS, SchedulerUnavailableError, get_scheduler  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import FAMILIES  # noqa: E402
from gpu_env.metrics import compute_metrics  # noqa: E402
from gpu_env.plan import Plan  # noqa: E402
from gpu_env.scenario import Scenario  # noqa: E402
from gpu_env.validation import validate  # noqa: E402
from lab.benchmarking import EPS, best_known, machine, one_core, table  # noqa: E402
from lab.equal_time import (  # noqa: E402
    CALIBRATION_ROUNDS,
    DECODE_RESTARTS,
    GREEDY_ORDERS,
    RESTART_GRID,
    Calibration,
    calibrate_restarts,
    calibration_table,
    one_options,
    restarts_config,
    shipped_options,
)
from lab.training.fresh_draws import FRESH_SEED, check_fresh, fresh  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "ppo_equal_time.md"
QUICK_RESULTS = ROOT / "benchmarks" / "results" / "ppo_equal_time_quick.md"
EVAL_SEED = FRESH_SEED  # 20000...: the evaluation instances, both size classes
TUNING_SEED = 21_000  # the tuning instances (temperature, equal-time calibration)
SEED_CLASS = "seed"
STEPWISE = "ppo-stepwise"
TEMPERATURES = (0.05, 0.1, 0.2, 0.3, 0.4, 0.8)
ROUNDS = 2 * CALIBRATION_ROUNDS
"""Timed rounds per tuning instance of the equal-time calibration (10: its medians steadier than (b)'s)."""
QUICK_FAMILIES = ("training-heavy", "realtime-diurnal", "scale-64x30")
QUICK_LARGE_FAMILIES = ("realtime-diurnal", "scale-64x30")


def class_label(size_class: str) -> str:
    """A size class as the report names it: the seed's sizes, or a GPU count."""
    return "the seed's sizes (8-64 GPUs)" if size_class == SEED_CLASS else f"{size_class} GPUs"


# ----------------------------------------------------------------------------- instances


@dataclass(frozen=True)
class Instance:
    """A benchmark instance and its size class (:data:`SEED_CLASS` or the GPU count as text)."""

    scenario: Scenario
    size_class: str


def instances(
    families: list[str], per_family: int, large_families: list[str], large_sizes: list[int], seed: int
) -> list[Instance]:
    """``per_family`` instances per family at its own size (seeds ``seed``...), one per large family and size."""
    out = [Instance(fresh(f, seed + i), SEED_CLASS) for f in families for i in range(per_family)]
    return out + [Instance(fresh(f, seed, gpus), str(gpus)) for gpus in large_sizes for f in large_families]


# ----------------------------------------------------------------------------- arms


@dataclass(frozen=True)
class Arm:
    """A planner as timed: ``call(scenario, seed)`` is the planner call itself (no metrics, no validation)."""

    key: str
    label: str
    orders: str  # orders decoded before promotion
    call: Callable[[Scenario, int], Plan]


def stepwise_scheduler() -> tuple[Callable[[Scenario, PlanOptions], Plan] | None, str]:
    """``ppo-stepwise``'s plan function when it is registered and imports here, else None; and why."""
    if STEPWISE not in SCHEDULERS:
        return None, f"`{STEPWISE}` is not registered in `agents.registry.SCHEDULERS`: its arms are left out"
    try:
        return get_scheduler(STEPWISE), f"`{STEPWISE}` is registered: its arms are in"
    except SchedulerUnavailableError as exc:
        return None, f"`{STEPWISE}` is registered but does not import here ({exc}): its arms are left out"


def make_arms(
    policy: Path,
    restarts_time: int,
    temperature: float,
    stepwise: Callable[[Scenario, PlanOptions], Plan] | None = None,
) -> list[Arm]:
    """Every arm, greedy's restarts at ``temperature`` and ``restarts_time`` restarts for the equal-time arm."""
    decode_count = restarts_config(DECODE_RESTARTS, temperature)
    at_time = restarts_config(restarts_time, temperature)
    one, shipped = one_options(policy), shipped_options(policy)
    unguarded = replace(shipped, guard=Guard.NONE)
    arms = [
        Arm("greedy", "greedy", str(GREEDY_ORDERS), lambda sc, s: greedy.solve(sc, greedy.DEFAULT).plan),
        Arm(
            "restarts",
            f"greedy + {DECODE_RESTARTS} restarts (decode count)",
            f"{GREEDY_ORDERS} + {DECODE_RESTARTS}",
            lambda sc, s: greedy.solve(sc, decode_count, seed=s).plan,
        ),
        Arm(
            "restarts_time",
            f"greedy + {restarts_time} restarts (equal time)",
            f"{GREEDY_ORDERS} + {restarts_time}",
            lambda sc, s: greedy.solve(sc, at_time, seed=s).plan,
        ),
        Arm("one", "learned, one decode", "1", lambda sc, s: ppo.plan(sc, replace(one, seed=s))),
        Arm(
            "unguarded",
            f"learned, {DEFAULT_SAMPLES} candidates, guard none",
            str(DEFAULT_SAMPLES),
            lambda sc, s: ppo.plan(sc, replace(unguarded, seed=s)),
        ),
        Arm(
            "shipped",
            f"learned as shipped ({DEFAULT_SAMPLES} candidates, guard {DEFAULT_GUARD.value})",
            f"{DEFAULT_SAMPLES} + FIFO",
            lambda sc, s: ppo.plan(sc, replace(shipped, seed=s)),
        ),
    ]
    if stepwise is not None:
        arms += [
            Arm(
                "stepwise_one",
                f"{STEPWISE}, one decode",
                "1",
                lambda sc, s: stepwise(sc, PlanOptions(samples=1, guard=Guard.NONE, seed=s)),
            ),
            Arm(
                "stepwise",
                f"{STEPWISE} as shipped (`PlanOptions()`: {DEFAULT_SAMPLES} candidates, guard {DEFAULT_GUARD.value})",
                f"{DEFAULT_SAMPLES} + FIFO",
                lambda sc, s: stepwise(sc, PlanOptions(seed=s)),
            ),
        ]
    return arms


def _objective(sc: Scenario, plan: Plan, arm: str) -> float:
    problems = validate(sc, plan)
    if problems:
        raise RuntimeError(f"{arm} plan invalid on {sc.name}: {problems[0]}")
    return compute_metrics(sc, plan).objective


def timed_runs(sc: Scenario, arms: list[Arm], seeds: list[int]) -> list[dict[str, Any]]:
    """Every arm with every seed on one instance, interleaved: one warm-up call each, then seed by seed.

    Seed i runs the arms in their order rotated by i; each call timed with ``time.perf_counter`` around it, the plan
    validated and scored after. One row per run: ``arm``, ``seed``, ``objective``, ``ms``.
    """
    for arm in arms:
        arm.call(sc, seeds[0])
    runs = []
    for i, seed in enumerate(seeds):
        k = i % len(arms)
        for arm in arms[k:] + arms[:k]:
            started = time.perf_counter()
            plan = arm.call(sc, seed)
            ms = (time.perf_counter() - started) * 1000.0
            runs.append({"arm": arm.key, "seed": seed, "objective": _objective(sc, plan, arm.key), "ms": ms})
    return runs


# ----------------------------------------------------------------------------- tuning


def restart_arm(temperature: float) -> Arm:
    """Greedy + :data:`DECODE_RESTARTS` restarts at ``temperature``, keyed by the temperature."""
    config = restarts_config(DECODE_RESTARTS, temperature)
    return Arm(f"{temperature:g}", f"{temperature:g}", "", lambda sc, s: greedy.solve(sc, config, seed=s).plan)


def tune(
    tuning: list[Instance], temperatures: list[float], seeds: list[int], progress: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Greedy + :data:`DECODE_RESTARTS` restarts at every temperature, every seed, on every tuning instance.

    One row per run: ``instance``, ``size_class``, ``temperature``, ``seed``, ``objective``, ``greedy`` (plain
    greedy's objective on the instance) and ``ms``. Temperatures interleaved per seed, rotated.
    """
    rows = []
    for n, inst in enumerate(tuning, 1):
        sc = inst.scenario
        plain = _objective(sc, greedy.solve(sc, greedy.DEFAULT).plan, "greedy")
        arms = [restart_arm(t) for t in temperatures]
        for run, t in ((r, float(r["arm"])) for r in timed_runs(sc, arms, seeds)):
            rows.append(
                {"instance": sc.name, "size_class": inst.size_class, "temperature": t, "seed": run["seed"],
                 "objective": run["objective"], "greedy": plain, "ms": run["ms"]}
            )  # fmt: skip
        progress(f"tuning {n}/{len(tuning)}: {sc.name}")
    return rows


def chosen_temperature(rows: list[dict[str, Any]], temperatures: list[float]) -> float:
    """The temperature with the best mean objective over plain greedy's (the first on a tie)."""
    means = {t: np.mean([r["objective"] / r["greedy"] for r in rows if r["temperature"] == t]) for t in temperatures}
    return max(temperatures, key=lambda t: (means[t], -temperatures.index(t)))


def tuning_table(rows: list[dict[str, Any]], temperatures: list[float], chosen: float) -> list[str]:
    """Per temperature: mean objective / plain greedy's per size class and over all, runs above greedy, median ms."""
    classes = list(dict.fromkeys(r["size_class"] for r in rows))
    head = [
        "temperature",
        *(f"{class_label(c)}: mean / greedy" for c in classes),
        "**all: mean / greedy**",
        "runs above greedy",
        "runs below greedy",
        "median ms",
    ]
    body = []
    for t in temperatures:
        rs = [r for r in rows if r["temperature"] == t]
        body.append([
            f"**{t:g}** (chosen)" if t == chosen else f"{t:g}",
            *(f"{np.mean([r['objective'] / r['greedy'] for r in rs if r['size_class'] == c]):.4f}" for c in classes),
            f"**{np.mean([r['objective'] / r['greedy'] for r in rs]):.4f}**",
            f"{sum(r['objective'] > r['greedy'] + EPS for r in rs)} of {len(rs)}",
            sum(r["objective"] < r["greedy"] - EPS for r in rs),
            f"{np.median([r['ms'] for r in rs]):.2f}",
        ])  # fmt: skip
    return table(head, body, right=0).splitlines()


# ----------------------------------------------------------------------------- tables


def _runs(runs: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in runs if all(r[k] == v for k, v in match.items())]


def _paired(runs: list[dict[str, Any]], arm: str, other: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(run of ``arm``, run of ``other``) on the same instance and seed."""
    index = {(r["instance"], r["seed"]): r for r in runs if r["arm"] == other}
    return [(r, index[(r["instance"], r["seed"])]) for r in runs if r["arm"] == arm]


def arm_table(runs: list[dict[str, Any]], arms: list[Arm], best: dict[str, float]) -> list[str]:
    """One size class: per arm, quality (ratios to best known and to greedy) and time side by side."""
    lines = [
        "| arm | orders decoded | runs | **mean / best known** | min / best known | mean / greedy | below greedy "
        "| above greedy | **median ms** | p90 ms | median ms / greedy's | median ms / shipped's |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for arm in arms:
        rs = _runs(runs, arm=arm.key)
        if not rs:
            continue
        ratio = [r["objective"] / best[r["instance"]] for r in rs]
        vs_greedy = _paired(runs, arm.key, "greedy")
        vs_shipped = _paired(runs, arm.key, "shipped")
        ms = [r["ms"] for r in rs]
        lines.append(
            f"| {arm.label} | {arm.orders} | {len(rs)} | **{np.mean(ratio):.4f}** | {np.min(ratio):.4f} "
            f"| {np.mean([a['objective'] / g['objective'] for a, g in vs_greedy]):.4f} "
            f"| {sum(a['objective'] < g['objective'] - EPS for a, g in vs_greedy)} "
            f"| {sum(a['objective'] > g['objective'] + EPS for a, g in vs_greedy)} "
            f"| **{np.median(ms):.2f}** | {np.percentile(ms, 90):.2f} "
            f"| {np.median([a['ms'] / g['ms'] for a, g in vs_greedy]):.2f} "
            f"| {np.median([a['ms'] / s['ms'] for a, s in vs_shipped]):.2f} |"
        )
    return lines


def family_table(runs: list[dict[str, Any]], arms: list[Arm], info: list[dict[str, Any]]) -> list[str]:
    """One size class: per family, each arm's mean objective / best known, and how the best known was found."""
    lines = [
        "| family | GPUs x jobs | n | best known | " + " | ".join(a.label for a in arms) + " |",
        "| --- | --- | ---: | --- | " + " | ".join("---:" for _ in arms) + " |",
    ]
    best = {i["name"]: i["best"] for i in info}
    for family in dict.fromkeys(i["family"] for i in info):
        fi = [i for i in info if i["family"] == family]
        names = {i["name"] for i in fi}
        status = ", ".join(f"{s} {sum(i['status'] == s for i in fi)}" for s in dict.fromkeys(i["status"] for i in fi))
        cells = []
        for arm in arms:
            rs = [r for r in runs if r["arm"] == arm.key and r["instance"] in names]
            cells.append(f"{np.mean([r['objective'] / best[r['instance']] for r in rs]):.4f}" if rs else "–")
        jobs = "/".join(str(j) for j in dict.fromkeys(i["jobs"] for i in fi))
        lines.append(
            f"| {family} | {fi[0]['gpus']} x {jobs} | {len(fi)} | {sum(i['proven'] for i in fi)} proven ({status}) "
            f"| " + " | ".join(cells) + " |"
        )
    return lines


COUNTS = (
    ("unguarded", "one", f"{DEFAULT_SAMPLES} candidates (guard none) below one decode"),
    ("shipped", "one", f"as shipped ({DEFAULT_SAMPLES} candidates, guard {DEFAULT_GUARD.value}) below one decode"),
    ("restarts", "greedy", f"greedy + {DECODE_RESTARTS} restarts below plain greedy"),
    ("restarts_time", "greedy", "greedy + equal-time restarts below plain greedy"),
    ("stepwise", "stepwise_one", f"{STEPWISE} as shipped below its one decode"),
)


def count_table(runs: list[dict[str, Any]], classes: list[str]) -> tuple[list[str], dict[str, int]]:
    """Runs where more candidates gave a worse plan than fewer, per size class and over all; the totals by arm."""
    lines = [
        "| more candidates below fewer | " + " | ".join(class_label(c) for c in classes) + " | all |",
        "| --- | " + " | ".join("---:" for _ in classes) + " | ---: |",
    ]
    totals: dict[str, int] = {}
    for arm, other, text in COUNTS:
        pairs = _paired(runs, arm, other)
        if not pairs:
            continue
        cells = []
        for c in classes:
            ps = [(a, b) for a, b in pairs if a["size_class"] == c]
            cells.append(f"{sum(a['objective'] < b['objective'] - EPS for a, b in ps)} of {len(ps)}")
        totals[arm] = sum(a["objective"] < b["objective"] - EPS for a, b in pairs)
        lines.append(f"| {text} | " + " | ".join(cells) + f" | **{totals[arm]} of {len(pairs)}** |")
    return lines, totals


HEAD_TO_HEAD = (
    ("shipped", "restarts", "as shipped vs greedy + 7 restarts (decode count)"),
    ("shipped", "restarts_time", "as shipped vs greedy + equal-time restarts"),
    ("one", "greedy", "one decode vs plain greedy"),
    ("stepwise", "restarts_time", f"{STEPWISE} as shipped vs greedy + equal-time restarts"),
    ("stepwise", "shipped", f"{STEPWISE} as shipped vs the learned planner (ppo) as shipped"),
    ("stepwise_one", "one", f"{STEPWISE}, one decode vs ppo, one decode"),
)


def head_to_head(runs: list[dict[str, Any]], classes: list[str]) -> list[str]:
    """Paired runs (same instance and seed): wins, ties and losses, and the mean ratio, per size class."""
    lines = [
        "| pair (A vs B) | size class | runs | A better | tie | B better | mean A / B | median ms A / B |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for arm, other, text in HEAD_TO_HEAD:
        for c in classes:
            ps = [(a, b) for a, b in _paired(runs, arm, other) if a["size_class"] == c]
            if not ps:
                continue
            win = sum(a["objective"] > b["objective"] + EPS for a, b in ps)
            loss = sum(a["objective"] < b["objective"] - EPS for a, b in ps)
            lines.append(
                f"| {text} | {class_label(c)} | {len(ps)} | {win} | {len(ps) - win - loss} | {loss} "
                f"| {np.mean([a['objective'] / b['objective'] for a, b in ps]):.4f} "
                f"| {np.median([a['ms'] / b['ms'] for a, b in ps]):.2f} |"
            )
    return lines


# ----------------------------------------------------------------------------- main


def _floats(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive numbers, got {text!r}")
    return values


def _restarts(text: str) -> dict[str, int]:
    """``R`` (every size class) or ``class=R,...`` (classes ``seed`` and GPU counts; the others calibrated)."""
    try:
        if "=" not in text:
            return {"*": int(text)}
        pairs = [item.split("=") for item in text.split(",") if item]
        out = {key.strip(): int(value) for key, value in pairs}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected R or class=R,... (e.g. seed=20,128=14), got {text!r}") from None
    if min(out.values()) < 0:
        raise argparse.ArgumentTypeError(f"restarts must not be negative, got {text!r}")
    return out


def build_parser() -> argparse.ArgumentParser:
    from agents.arguments import family_names, gpu_counts, int_at_least, positive_float

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few instances and seeds: a smoke run (~1 min)")
    parser.add_argument("--policy", type=Path, default=ppo.DEFAULT_POLICY)
    parser.add_argument("--seeds", type=int_at_least(1), help="planner seeds 0..N-1 per instance (20; quick 3)")
    parser.add_argument("--large-seeds", type=int_at_least(1), help="planner seeds on large clusters (--seeds)")
    parser.add_argument("--families", type=family_names, help="families (all; quick: 3 small ones)")
    parser.add_argument("--per-family", type=int_at_least(0), help="instances per family at its size (3; quick 1)")
    parser.add_argument("--large-sizes", type=gpu_counts, help="large GPU counts, one instance per family (128,1024)")
    parser.add_argument("--best-time-limit", type=float, help="full-mode seconds at the seed's sizes (10; quick 2)")
    parser.add_argument("--large-time-limit", type=float, help="full-mode seconds on large clusters, 0: none (30)")
    parser.add_argument(
        "--deterministic-time",
        type=positive_float,
        metavar="D",
        help="also stop full mode after D units of CP-SAT's deterministic time (repeatable best known)",
    )
    parser.add_argument("--temperatures", type=_floats, help=f"restart temperatures tuned ({TEMPERATURES})")
    parser.add_argument("--temperature", type=positive_float, help="the restart temperature, fixed: no tuning")
    parser.add_argument("--tuning-seeds", type=int_at_least(1), help="planner seeds per tuning instance (5; quick 2)")
    parser.add_argument(
        "--restarts-at-time",
        type=_restarts,
        metavar="R|CLASS=R,...",
        help="greedy's equal-time restarts, fixed (all classes, or per class: seed=R,128=R); default: calibrated",
    )
    parser.add_argument(
        "--calibration-rounds", type=int_at_least(1), help=f"timed rounds per tuning instance ({ROUNDS}; quick 2)"
    )
    parser.add_argument("--out", type=Path, help="report (results/ppo_equal_time.md; quick: ppo_equal_time_quick.md)")
    parser.add_argument("--json", type=Path, help="raw rows (every run, the tuning, the calibration) as JSON")
    return parser


def _dumps(document: dict[str, Any]) -> str:
    """JSON with one top-level key a line, and one item a line in its lists (the runs: one line each)."""
    parts = []
    for key, value in document.items():
        if isinstance(value, list) and value:
            items = ",\n".join(f"  {json.dumps(v)}" for v in value)
            parts.append(f" {json.dumps(key)}: [\n{items}\n ]")
        else:
            parts.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _progress(started: float) -> Callable[[str], None]:
    def say(text: str) -> None:
        print(f"[{time.perf_counter() - started:6.0f} s] {text}", file=sys.stderr, flush=True)

    return say


@dataclass
class Study:
    """One run's settings (the command line's, with the quick run's defaults) and what it measured."""

    argv: list[str]
    quick: bool
    seeds: list[int]
    large_seeds: list[int]
    per_family: int
    large_sizes: list[int]
    best_time: float
    large_time: float
    temperatures: list[float]
    tuning_seeds: list[int]
    rounds: int
    dtime: float | None
    policy: Path
    evaluation: list[Instance]
    tuning: list[Instance]
    classes: list[str]
    fixed: dict[str, int]
    say: Callable[[str], None]
    started: float
    temperature: float = 0.0
    tuning_rows: list[dict[str, Any]] = field(default_factory=list)
    calibrations: list[Calibration] = field(default_factory=list)
    restarts_time: dict[str, int] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    arms_of: dict[str, list[Arm]] = field(default_factory=dict)
    info: list[dict[str, Any]] = field(default_factory=list)


def _study(argv: list[str], args: argparse.Namespace) -> Study:
    """The run's settings and its instances (evaluation and tuning, checked fresh and apart)."""
    quick = args.quick
    seeds = list(range(args.seeds or (3 if quick else 20)))
    families = args.families or list(QUICK_FAMILIES if quick else FAMILIES)
    large_families = args.families or list(QUICK_LARGE_FAMILIES if quick else FAMILIES)
    per_family = args.per_family if args.per_family is not None else (1 if quick else 3)
    large_sizes = args.large_sizes or ([128] if quick else [128, 1024])
    started = time.perf_counter()
    evaluation = instances(families, per_family, large_families, large_sizes, EVAL_SEED)
    tuning = instances(families, 1 if quick else 2, large_families, large_sizes, TUNING_SEED)
    clash = {i.scenario.name for i in evaluation} & {i.scenario.name for i in tuning}
    assert not clash, clash  # distinct seeds by construction
    check_fresh([i.scenario for i in evaluation + tuning])
    return Study(
        argv=argv,
        quick=quick,
        seeds=seeds,
        large_seeds=list(range(args.large_seeds)) if args.large_seeds else seeds,
        per_family=per_family,
        large_sizes=large_sizes,
        best_time=args.best_time_limit if args.best_time_limit is not None else (2.0 if quick else 10.0),
        large_time=args.large_time_limit if args.large_time_limit is not None else (2.0 if quick else 30.0),
        temperatures=args.temperatures or ([0.1, 0.4] if quick else list(TEMPERATURES)),
        tuning_seeds=list(range(args.tuning_seeds or (2 if quick else 5))),
        rounds=args.calibration_rounds or (2 if quick else ROUNDS),
        dtime=args.deterministic_time,
        policy=args.policy.resolve(),
        evaluation=evaluation,
        tuning=tuning,
        classes=list(dict.fromkeys(i.size_class for i in evaluation)),
        fixed=args.restarts_at_time or {},
        say=_progress(started),
        started=started,
    )


def _warm_stepwise() -> tuple[Any, str]:
    """``ppo-stepwise``'s plan function (None where it is not registered or fails to plan) and the report's note."""
    stepwise, stepwise_note = stepwise_scheduler()
    if stepwise is not None:
        try:
            from gpu_env.generators import generate

            stepwise(generate("mixed-control", seed=0), PlanOptions())  # its warm-up, and whether it plans here
        except Exception as exc:  # another engineer's planner: a failure leaves its arms out, named in the report
            stepwise, stepwise_note = None, f"`{STEPWISE}` is registered but failed to plan ({exc!r}): left out"
    return stepwise, stepwise_note


def _timed(st: Study, temperature: float | None, stepwise: Any) -> None:
    """Pinned to one core: the restart temperature (``temperature``, or tuned), the equal-time restarts per size
    class (``--restarts-at-time``, or calibrated), then every arm's runs on the evaluation instances."""
    say = st.say
    with one_core():
        # the restart temperature, on the tuning instances
        if temperature is None:
            st.tuning_rows = tune(st.tuning, st.temperatures, st.tuning_seeds, say)
            temperature = chosen_temperature(st.tuning_rows, st.temperatures)
        st.temperature = temperature
        say(f"restart temperature {temperature:g}")
        # the equal-time restarts per size class, on the same tuning instances
        for c in st.classes:
            if c in st.fixed or "*" in st.fixed:
                st.restarts_time[c] = st.fixed.get(c, st.fixed.get("*", 0))
                continue
            group = [i.scenario for i in st.tuning if i.size_class == c]
            cal = calibrate_restarts(group, st.policy, class_label(c), temperature, st.rounds, RESTART_GRID)
            st.calibrations.append(cal)
            st.restarts_time[c] = cal.chosen
            say(f"equal-time restarts at {class_label(c)}: {cal.chosen}")
        # the evaluation
        for n, inst in enumerate(st.evaluation, 1):
            sc, c = inst.scenario, inst.size_class
            arms = st.arms_of.setdefault(c, make_arms(st.policy, st.restarts_time[c], temperature, stepwise))
            for run in timed_runs(sc, arms, st.seeds if c == SEED_CLASS else st.large_seeds):
                st.runs.append({"instance": sc.name, "family": sc.family, "size_class": c, **run})
            say(f"evaluation {n}/{len(st.evaluation)}: {sc.name}")


def _best_known(st: Study) -> None:
    """Each evaluation instance's best known, after the timing (full mode's CP-SAT beside nothing timed)."""
    for n, inst in enumerate(st.evaluation, 1):
        sc, c = inst.scenario, inst.size_class
        limit = st.best_time if c == SEED_CLASS else st.large_time
        values = [r["objective"] for r in st.runs if r["instance"] == sc.name]
        t0 = time.perf_counter()
        best, objective, status, proven = best_known(sc, st.policy, values, limit, st.dtime)
        st.info.append(
            {"name": sc.name, "family": sc.family, "size_class": c, "gpus": sc.gpus, "jobs": len(sc.jobs),
             "best": best, "full": objective, "status": status, "proven": proven, "arms_best": max(values),
             "full_s": time.perf_counter() - t0}
        )  # fmt: skip
        st.say(f"best known {n}/{len(st.evaluation)}: {sc.name} {status}{' (proven)' if proven else ''}")


def _report(st: Study, loaded: Any, header: str, stepwise: Any, stepwise_note: str) -> tuple[str, str, Any]:
    """The report's text, its command line, and the counts of runs where more candidates planned worse."""
    evaluation, classes, runs, info, quick = st.evaluation, st.classes, st.runs, st.info, st.quick
    seeds, large_seeds, per_family, large_sizes = st.seeds, st.large_seeds, st.per_family, st.large_sizes
    best_time, large_time, dtime, rounds = st.best_time, st.large_time, st.dtime, st.rounds
    temperature, temperatures, tuning_rows = st.temperature, st.temperatures, st.tuning_rows
    calibrations, restarts_time, fixed, arms_of = st.calibrations, st.restarts_time, st.fixed, st.arms_of
    tuning, tuning_seeds = st.tuning, st.tuning_seeds
    best = {i["name"]: i["best"] for i in info}
    exe = Path(sys.executable)
    exe_text = os.path.relpath(exe, ROOT) if exe.is_relative_to(ROOT) else str(exe)
    command = shlex.join([f"PYTHONPATH={ROOT}", exe_text, "benchmarks/ppo_equal_time.py", *st.argv])
    rel = st.policy.relative_to(ROOT) if st.policy.is_relative_to(ROOT) else st.policy
    count_lines, totals = count_table(runs, classes)
    n_seed = sum(i.size_class == SEED_CLASS for i in evaluation)
    n_large = len(evaluation) - n_seed
    out = [
        "# Equal time: greedy with restarts beside the learned planner" + (" (quick run)" if quick else ""),
        "",
        f"- Command: `{command}`",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M %Z')}",
        f"- Machine: {header} (at the start)",
        f"- Policy: `{rel}`, SHA-256 `{loaded.sha256}`, temperature {loaded.temperature:g}",
        f"- {stepwise_note}.",
        f"- Restart temperature: **{temperature:g}**"
        + (" (`--temperature`, not tuned)" if not tuning_rows else " (tuned below)")
        + "; equal-time restarts: "
        + ", ".join(f"**{restarts_time[c]}** at {class_label(c)}" for c in classes)
        + (" (calibrated below)" if calibrations else "")
        + (" (`--restarts-at-time`)" if fixed else "")
        + ".",
        f"- Instances: {n_seed} at the seed's sizes ({per_family} per family, seeds {EVAL_SEED}.."
        f"{EVAL_SEED + max(per_family, 1) - 1}) x planner seeds 0..{len(seeds) - 1} = {n_seed * len(seeds)} runs per "
        f"arm; {n_large} large ({', '.join(map(str, large_sizes))} GPUs, one per family, seed {EVAL_SEED}) x seeds "
        f"0..{len(large_seeds) - 1} = {n_large * len(large_seeds)} runs per arm. Tuning and calibration: other fresh "
        f"draws (seeds {TUNING_SEED}...). None of them is among training's draws.",
        f"- Best known: at the seed's sizes full mode (`agents.full.solve`) with {best_time:g} s"
        + (f" or {dtime:g} deterministic units" if dtime else "")
        + f", proven optimal on {sum(i['proven'] for i in info if i['size_class'] == SEED_CLASS)} of {n_seed} "
        "(elsewhere the ratio is an upper bound); on large clusters the best of every arm's runs"
        + (f" and of full mode with {large_time:g} s" if large_time > 0 else " (no full mode)")
        + ".",
        "",
        "Timing: each plan with `time.perf_counter` around the planner call itself (`greedy.solve`, `ppo.plan`"
        + (f", `{STEPWISE}`'s plan function" if stepwise is not None else "")
        + "), plans validated and scored outside it; one process pinned to one CPU core, after one warm-up call of "
        "every arm per instance; the arms interleaved seed by seed, their order rotated. Medians over every run of "
        "the class; the ratios of times are per run (same instance and seed), then the median. Orders decoded: before "
        f"promotion; greedy's {GREEDY_ORDERS} are its 2 orderings in 2 trade modes and the FIFO seed (3 on a "
        "scenario without real-time apps, where there is nothing to trade), the learned planner's the argmax order "
        "(in 2 modes) and its Gumbel draws; 'as shipped' adds the FIFO guard's replay. The equal-time restarts are "
        "calibrated against the planner as shipped.",
    ]
    for c in classes:
        rs = _runs(runs, size_class=c)
        ci = [i for i in info if i["size_class"] == c]
        out += [
            "",
            f"## {class_label(c)[0].upper()}{class_label(c)[1:]}: quality and time",
            "",
            f"{len(ci)} instances x {len(seeds if c == SEED_CLASS else large_seeds)} planner seeds; best known "
            + (
                f"proven optimal on {sum(i['proven'] for i in ci)} of {len(ci)}."
                if c == SEED_CLASS
                else f"from full mode on {sum(i['full'] is not None and i['full'] >= i['best'] - EPS for i in ci)} "
                f"of {len(ci)} (else the best arm's run)."
            ),
            "",
            *arm_table(rs, arms_of[c], best),
            "",
            "Per family, mean objective / best known:",
            "",
            *family_table(rs, arms_of[c], ci),
        ]
    out += [
        "",
        "## More candidates, a worse plan?",
        "",
        "Runs (same instance and planner seed) where the arm with more candidates planned worse than the one with "
        "fewer. Guaranteed 0: the argmax order and greedy's own sweeps are each a promotion group of their own.",
        "",
        *count_lines,
        "",
        "## Head to head",
        "",
        *head_to_head(runs, classes),
    ]
    if tuning_rows:
        out += [
            "",
            "## Tuning: the restart temperature",
            "",
            f"Greedy + {DECODE_RESTARTS} restarts at each temperature on {len(tuning)} tuning instances (seeds "
            f"{TUNING_SEED}..., never evaluated) x planner seeds 0..{len(tuning_seeds) - 1}: mean objective over "
            "plain greedy's on the same instance; the best mean over all is chosen.",
            "",
            *tuning_table(tuning_rows, temperatures, temperature),
        ]
    if calibrations:
        out += [
            "",
            "## Calibration: the equal-time restarts",
            "",
            "Median ms of the shipped planner and of greedy with each restart count, interleaved per tuning instance "
            f"({rounds} rounds after a warm-up call, pinned to one core); the largest count whose median is at most "
            "the shipped planner's is chosen.",
            "",
            *calibration_table(calibrations),
        ]
    out += ["", f"Total benchmark time {time.perf_counter() - st.started:.0f} s; at the end: {machine()}.", ""]
    return "\n".join(out), command, totals


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    st = _study(argv, args)
    header = machine()
    loaded = ppo.load_policy(st.policy)
    ppo.warm_up(st.policy)
    stepwise, stepwise_note = _warm_stepwise()
    st.say(stepwise_note.replace("`", ""))
    _timed(st, args.temperature, stepwise)
    _best_known(st)
    text, command, totals = _report(st, loaded, header, stepwise, stepwise_note)
    write_text_atomic(args.out or (QUICK_RESULTS if st.quick else RESULTS), text)
    if args.json is not None:
        document = {
            "command": command,
            "policy_sha256": loaded.sha256,
            "temperature": st.temperature,
            "restarts_time": st.restarts_time,
            "arms": {
                c: [{"key": a.key, "label": a.label, "orders": a.orders} for a in st.arms_of[c]] for c in st.classes
            },
            "instances": st.info,
            "runs": st.runs,
            "tuning": st.tuning_rows,
            "calibration": [asdict(cal) for cal in st.calibrations],
            "more_candidates_worse": totals,
        }
        write_text_atomic(args.json, _dumps(document))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
