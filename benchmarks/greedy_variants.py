"""Compare variants of the greedy heuristic against FIFO on the seven scenario families.

For every family it draws ``generate(family, seed)`` for seeds 0..N-1 plus the
benchmark seed, plans with FIFO and with each variant, checks every plan with the
validator, and prints (and writes to ``benchmarks/results/greedy_variants.md``):

- the mean objective relative to FIFO per family and variant (mean of per-scenario ratios),
- how often a variant falls below FIFO, and how often the FIFO guard fired,
- the mean plan time per variant (wall and CPU),
- FIFO against the default on the seven benchmark scenarios (objective, utilisation,
  placed jobs) with median plan times, 64 GPUs x 30 jobs among them.

Run: ``.venv/bin/python benchmarks/greedy_variants.py`` (a few minutes on two shared
cores; ``--seeds 3 --repeats 3`` for a quick look).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import fifo, greedy  # noqa: E402
from agents.greedy import DEFAULT, FAST, GreedyConfig  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, generate  # noqa: E402
from gpu_env.metrics import compute_metrics  # noqa: E402
from gpu_env.validation import validate  # noqa: E402

ALL_ORDERINGS = tuple(greedy.ORDERINGS)
BASIC = GreedyConfig(
    orderings=("weight",), block_rule="lowest", trades=("off",), promote_rounds=0, fifo_seed=False, fifo_guard=False
)
RAW = {"fifo_seed": False, "fifo_guard": False}

# name -> configuration: the first group changes one thing at a time from the basic sweep (priority
# order, lowest block, earliest start, no trade, no promotion, no FIFO seed or guard); the second
# changes one thing at a time from the default.
VARIANTS: dict[str, GreedyConfig] = {
    "basic: weight order, lowest block, earliest start": BASIC,
    "basic, order value": replace(BASIC, orderings=("value",)),
    "basic, order density": replace(BASIC, orderings=("density",)),
    "basic, order deadline": replace(BASIC, orderings=("deadline",)),
    "basic, order arrival": replace(BASIC, orderings=("arrival",)),
    "basic, order size": replace(BASIC, orderings=("size",)),
    "basic, block best_fit": replace(BASIC, block_rule="best_fit"),
    "basic, block node_fit": replace(BASIC, block_rule="node_fit"),
    "basic, start packed (best_fit)": replace(BASIC, block_rule="best_fit", start_rule="packed"),
    "basic + trades inline": replace(BASIC, trades=("inline",)),
    "basic + trades after": replace(BASIC, trades=("after",)),
    "basic + promotion": replace(BASIC, promote_rounds=DEFAULT.promote_rounds),
    "basic + multi-start (default orderings and trades)": replace(
        BASIC, orderings=DEFAULT.orderings, trades=DEFAULT.trades
    ),
    "FAST (one sweep, trades inline, FIFO guard)": FAST,
    "DEFAULT": DEFAULT,
    "DEFAULT, block best_fit": replace(DEFAULT, block_rule="best_fit"),
    "DEFAULT, block node_fit": replace(DEFAULT, block_rule="node_fit"),
    "DEFAULT, start packed (best_fit)": replace(DEFAULT, block_rule="best_fit", start_rule="packed"),
    "DEFAULT, no trades": replace(DEFAULT, trades=("off",)),
    "DEFAULT, trades inline only": replace(DEFAULT, trades=("inline",)),
    "DEFAULT, trades after only": replace(DEFAULT, trades=("after",)),
    "DEFAULT, no promotion": replace(DEFAULT, promote_rounds=0),
    "DEFAULT, promotion 2 x 8": replace(DEFAULT, promote_rounds=2, promote_limit=8),
    "DEFAULT + density order": replace(DEFAULT, orderings=(*DEFAULT.orderings, "density")),
    "DEFAULT + arrival order": replace(DEFAULT, orderings=(*DEFAULT.orderings, "arrival")),
    "DEFAULT, all orderings": replace(DEFAULT, orderings=ALL_ORDERINGS),
    "DEFAULT, no FIFO seed": replace(DEFAULT, fifo_seed=False),
    "DEFAULT, no FIFO seed, no guard": replace(DEFAULT, **RAW),
}


def _objective(scenario, plan) -> float:
    return compute_metrics(scenario, plan).objective


def _timed(function, *args) -> tuple[object, float, float]:
    """Call and return (result, wall ms, CPU ms of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = function(*args)
    return result, (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


def _median_ms(function, args: tuple, repeats: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds over repeats."""
    samples = [_timed(function, *args)[1:] for _ in range(repeats)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def run(seeds: int, repeats: int) -> str:
    """Run the comparison and return the Markdown report."""
    families = list(FAMILIES)
    rel: dict[str, dict[str, list[float]]] = {v: {f: [] for f in families} for v in VARIANTS}
    below = dict.fromkeys(VARIANTS, 0)
    guard = dict.fromkeys(VARIANTS, 0)
    invalid = dict.fromkeys(VARIANTS, 0)
    wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    fifo_wall: list[float] = []
    fifo_cpu: list[float] = []
    count = 0
    for family in families:
        for seed in [*range(seeds), BENCHMARK_SEEDS[family]]:
            scenario = generate(family, seed)
            base_plan, ms, cpu_ms = _timed(fifo.plan, scenario)
            fifo_wall.append(ms)
            fifo_cpu.append(cpu_ms)
            base = _objective(scenario, base_plan)
            count += 1
            for name, config in VARIANTS.items():
                result, ms, cpu_ms = _timed(greedy.solve, scenario, config)
                wall[name].append(ms)
                cpu[name].append(cpu_ms)
                invalid[name] += bool(validate(scenario, result.plan))
                score = _objective(scenario, result.plan)
                below[name] += score < base - 1e-6
                guard[name] += result.guard_fired
                rel[name][family].append(score / base if base > 0 else float("nan"))

    short = {f: f.split("-")[0][:8] for f in families}
    lines = [
        "# Greedy variants against FIFO",
        "",
        f"Written by `.venv/bin/python benchmarks/greedy_variants.py --seeds {seeds} --repeats {repeats}` "
        f"on {time.strftime('%Y-%m-%d')} (Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs shared with other work: wall times swing with the load; CPU times, "
        "the process's own, less so).",
        "",
        f"Scenarios: `generate(family, seed)` for seeds 0..{seeds - 1} plus the benchmark seed "
        f"(`BENCHMARK_SEEDS`), {count // len(families)} per family, {count} in all. Family cells: mean over "
        "the family's scenarios of greedy objective / FIFO objective. `<FIFO`: scenarios where the "
        "variant scores below FIFO; `guard`: scenarios where the FIFO guard fired (variants with the "
        "guard on); `invalid`: plans the validator rejected; `ms`: mean wall time per plan; `cpu`: "
        "mean CPU time per plan.",
        "",
        "| variant | " + " | ".join(short[f] for f in families) + " | all | <FIFO | guard | invalid | ms | cpu |",
        "| --- | " + " | ".join("---:" for _ in families) + " | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in VARIANTS:
        cells = [statistics.fmean(rel[name][f]) for f in families]
        overall = statistics.fmean(x for f in families for x in rel[name][f])
        lines.append(
            f"| {name} | "
            + " | ".join(f"{c:.3f}" for c in cells)
            + f" | {overall:.3f} | {below[name]} | {guard[name]} | {invalid[name]} | "
            f"{statistics.fmean(wall[name]):.1f} | {statistics.fmean(cpu[name]):.1f} |"
        )
    lines += [
        "",
        f"FIFO over the same scenarios: {statistics.fmean(fifo_wall):.1f} ms wall, "
        f"{statistics.fmean(fifo_cpu):.1f} ms CPU per plan.",
        "",
    ]

    # The seven benchmark scenarios: FIFO against the default, and plan times (medians over repeats).
    lines += [
        f"## The benchmark scenarios (`generate(family, BENCHMARK_SEEDS[family])`), median of {repeats} runs",
        "",
        "| scenario | G x jobs | FIFO objective | greedy objective | gain | FIFO util | greedy util "
        "| FIFO placed | greedy placed | won by | FIFO ms (cpu) | FAST ms (cpu) | greedy ms (cpu) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for family in families:
        scenario = generate(family, BENCHMARK_SEEDS[family])
        f_metrics = compute_metrics(scenario, fifo.plan(scenario))
        result = greedy.solve(scenario)
        g_metrics = compute_metrics(scenario, result.plan)
        f_ms = _median_ms(fifo.plan, (scenario,), repeats)
        fast_ms = _median_ms(greedy.solve, (scenario, FAST), repeats)
        g_ms = _median_ms(greedy.solve, (scenario, DEFAULT), repeats)
        lines.append(
            f"| {family} | {scenario.gpus} x {len(scenario.jobs)} | {f_metrics.objective:.1f} | "
            f"{g_metrics.objective:.1f} | {100 * (g_metrics.objective / f_metrics.objective - 1):+.1f} % | "
            f"{100 * f_metrics.utilization:.1f} % | {100 * g_metrics.utilization:.1f} % | "
            f"{f_metrics.placed}/{f_metrics.jobs} | {g_metrics.placed}/{g_metrics.jobs} | {result.ordering} | "
            f"{f_ms[0]:.2f} ({f_ms[1]:.2f}) | {fast_ms[0]:.2f} ({fast_ms[1]:.2f}) | {g_ms[0]:.2f} ({g_ms[1]:.2f}) |"
        )
    lines += [
        "",
        "Default configuration: `" + repr(DEFAULT) + "`.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line entry: run, print, write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds 0..N-1 per family (plus the benchmark seed)")
    parser.add_argument("--repeats", type=int, default=21, help="runs for the 64x30 timing median")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "greedy_variants.md", help="results file"
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.repeats < 1:
        print("greedy_variants: --seeds and --repeats must be positive", file=sys.stderr)
        return 2
    report = run(args.seeds, args.repeats)
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
