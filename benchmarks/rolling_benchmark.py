"""What rolling re-planning buys under forecast error, measured; writes ``benchmarks/results/rolling.md``.

For the benchmark scenarios (``configs/scenarios/*.yaml``, or the seven families
drawn with their benchmark seeds when a file is missing):

1. **The curve**: open loop against rolling (re-plan every slot) for every
   planner: FIFO and greedy at forecast error sigma in {0, 0.1, 0.2, 0.3, 0.4}
   with ``--seeds`` draws each, the learned mode (ppo) at the same errors with
   ``--learned-seeds``, and the anytime planners (cpsat, full) at
   ``--exact-sigmas`` with ``--exact-seeds`` and ``--time-limit`` per re-plan;
   realised objective with 95 % confidence intervals, and the paired gain. With
   sigma 0 the actual demand is the forecast whatever the seed: one run.
2. **Ablations** for greedy at sigma 0.2: no forecast correction, correction
   without the safety margin, jobs known from slot 0, re-planning every 2, 4
   or 8 slots, and an open loop told the error level.
3. **Latency**: the time of every re-plan of a rolling day at 64 GPUs x 30 jobs
   (``scale-64x30``) per planner, against each planner's own target.

Run: ``.venv/bin/python benchmarks/rolling_benchmark.py`` (about 40 minutes on
one core; ``--seeds 3 --learned-seeds 1 --exact-seeds 1`` for a quick look).
The comparisons of 1. and 2. are one fan-out of tasks (one per scenario,
scheduler and comparison, :mod:`agents.rolling.tasks`): ``--parallel N`` runs N
at once in a process pool, ``--ray [ADDRESS]`` on Ray (docs/fanout.md), with the
same rows as a serial run. The latency of 3. is measured serially, alone.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import rolling  # noqa: E402
from agents.arguments import add_fanout_options, fanout_backend  # noqa: E402
from agents.fanout import LOCAL_RAY, Backend, FanoutError, Task, run_tasks  # noqa: E402
from agents.options import DEFAULT_GUARD, DEFAULT_SAMPLES, PlanOptions  # noqa: E402
from agents.registry import available_schedulers, run_scheduler  # noqa: E402
from agents.report import rolling as report  # noqa: E402
from agents.report.rolling_figures import plot_rolling_curve  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, generate  # noqa: E402
from gpu_env.render import save_figure  # noqa: E402
from gpu_env.scenario import Scenario, load_scenario  # noqa: E402

OUT = ROOT / "benchmarks" / "results"
SIGMAS = (0.0, 0.1, 0.2, 0.3, 0.4)
TRACE = ("trace-alibaba", "trace-helios")
# Each planner's own latency target for one plan at 64 GPUs x 30 jobs: the seed's fast mode answers in
# 15 ms there (SPEC section 5); an anytime planner's target is its time limit.
TARGET_MS = {"greedy": 15.0, "ppo": 2.0}  # ppo: the learned mode's own target (docs/learned-mode.md)


def benchmark_scenarios() -> list[Scenario]:
    """The seven benchmark scenarios and the two trace scenarios."""
    out = []
    for name in [*FAMILIES, *TRACE]:
        path = ROOT / "configs" / "scenarios" / f"{name}.yaml"
        if path.exists():
            out.append(load_scenario(path))
        elif name in FAMILIES:
            out.append(generate(name, BENCHMARK_SEEDS[name]))
    return out


class Comparisons:
    """Comparisons of :func:`agents.rolling.compare` gathered first and then run as one fan-out of tasks."""

    def __init__(self) -> None:
        self.tasks: list[Task] = []
        self.parts: list[tuple[slice, list[str], tuple[float, ...], list[int]]] = []

    def add(self, scenarios, schedulers, sigmas, seeds, **kwargs) -> int:
        """Queue one comparison; returns its number for :meth:`rows`."""
        tasks = rolling.comparison_tasks(scenarios, schedulers, sigmas, seeds, **kwargs)
        self.parts.append((slice(len(self.tasks), len(self.tasks) + len(tasks)), list(schedulers), sigmas, seeds))
        self.tasks += tasks
        return len(self.parts) - 1

    def run(self, backend: Backend, timeout: float | None) -> None:
        """Run every queued task; the bar counts finished tasks."""
        from tqdm import tqdm

        with tqdm(total=len(self.tasks), desc="comparisons", unit="task", file=sys.stderr) as bar:
            self.done = run_tasks(
                self.tasks, backend, timeout=timeout, function=rolling.compare_task, on_result=lambda i, r: bar.update()
            )
        print(f"  {len(self.tasks)} tasks in {self.done.wall_s:.0f} s, {self.done.backend}", file=sys.stderr)

    def rows(self, number: int) -> list[dict]:
        """The rows of comparison ``number``, as a serial :func:`agents.rolling.compare` orders them."""
        where, schedulers, sigmas, seeds = self.parts[number]
        return rolling.ordered_rows(self.done.results[where], schedulers, sigmas, list(seeds))


def gain_line(rows: list[dict], label: str) -> str:
    cells = []
    for e in report.pooled(rows):
        ci = "" if np.isnan(e["gain_pct_ci"]) else f" ± {e['gain_pct_ci']:.1f}"
        cells.append(f"{e['scheduler']} sigma {e['sigma']:g}: {e['gain_pct']:+.1f} %{ci} ({e['wins']}/{e['pairs']})")
    return f"| {label} | " + "; ".join(cells) + " |"


def latency(schedulers: list[str], time_limit: float) -> list[str]:
    """Every re-plan of one rolling day at 64 x 30, per planner."""
    path = ROOT / "configs" / "scenarios" / "scale-64x30.yaml"
    sc = load_scenario(path) if path.exists() else generate("scale-64x30", BENCHMARK_SEEDS["scale-64x30"])
    lines = [
        "| planner | re-plans | median ms | p95 ms | max ms | one plan of the whole day (ms) | target (ms) | within |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name in schedulers:
        options = PlanOptions(time_limit=time_limit)
        run_scheduler(name, sc, options)  # warm-up: loads the policy and the compiled kernels, as a live planner has
        roll, fixed = rolling.simulate(sc, name, sigma=0.2, seed=0, options=options)
        ms = np.array(roll.solve_ms)
        target = TARGET_MS.get(name, time_limit * 1000.0 if name in ("cpsat", "full") else None)
        within = "-" if target is None else ("yes" if ms.max() <= target else f"no ({int((ms > target).sum())} over)")
        lines.append(
            f"| {name} | {ms.size} | {np.median(ms):.1f} | {np.percentile(ms, 95):.1f} | {ms.max():.1f} | "
            f"{fixed.solve_ms[0]:.1f} | {'-' if target is None else f'{target:g}'} | {within} |"
        )
    return lines


def target_line(gains: list[dict]) -> str:
    """Per planner: does rolling earn more than open loop at every sigma > 0, i.e. the 95 % CI above 0?"""
    lines = ["| planner | sigmas > 0 measured | rolling above open loop (CI excludes 0) at | target met |"]
    lines.append("| --- | --- | --- | --- |")
    for name in dict.fromkeys(e["scheduler"] for e in gains):
        noisy = [e for e in gains if e["scheduler"] == name and e["sigma"] > 0]
        above = [e for e in noisy if e["gain_pct"] - np.nan_to_num(e["gain_pct_ci"], nan=np.inf) > 0]
        met = "yes" if noisy and len(above) == len(noisy) else "no"
        measured = ", ".join(f"{e['sigma']:g}" for e in noisy)
        significant = ", ".join(f"{e['sigma']:g}" for e in above) or "none"
        lines.append(f"| {name} | {measured} | {significant} | {met} |")
    return "\n".join(lines)


def _parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Backend]:
    """The command line and the fan-out's backend; exits 2 with one line when the backend cannot be had."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="actual-demand draws per sigma, fifo/greedy (20)")
    parser.add_argument("--learned-seeds", type=int, default=6, help="draws per sigma for ppo (6)")
    parser.add_argument("--exact-seeds", type=int, default=4, help="draws per sigma for cpsat/full (4)")
    parser.add_argument("--exact-sigmas", default="0,0.2,0.4", help="forecast errors for cpsat/full (0,0.2,0.4)")
    parser.add_argument("--ablation-seeds", type=int, default=10, help="draws per sigma in the ablations (10)")
    parser.add_argument("--time-limit", type=float, default=0.3, help="seconds per re-plan for anytime planners")
    parser.add_argument(
        "--open-time-limit", type=float, default=3.0, help="seconds for the open-loop plan of anytime planners"
    )
    add_fanout_options(parser)
    args = parser.parse_args(argv)
    try:
        backend = fanout_backend(args)
    except FanoutError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    return args, backend


def _queue_curve(
    comparisons: Comparisons,
    scenarios: list[Scenario],
    args: argparse.Namespace,
    available: list[str],
    exact_sigmas: tuple[float, ...],
) -> tuple[list[int], list[str]]:
    """Queue 1., the curve: fifo and greedy, then ppo and the anytime planners where available and asked for.

    Returns:
        The comparisons' numbers, and a phrase per planner group saying what runs (for the report).
    """
    curve = [comparisons.add(scenarios, ["fifo", "greedy"], SIGMAS, range(args.seeds))]
    plan_options = {n: PlanOptions(time_limit=args.time_limit) for n in available}
    open_options = {n: PlanOptions(time_limit=args.open_time_limit) for n in available}
    runs = [f"fifo and greedy: sigma {', '.join(f'{x:g}' for x in SIGMAS)}, {args.seeds} seeds"]
    if "ppo" in available and args.learned_seeds > 0:
        curve.append(comparisons.add(scenarios, ["ppo"], SIGMAS, range(args.learned_seeds)))
        runs.append(
            f"ppo ({DEFAULT_SAMPLES} candidates + {DEFAULT_GUARD.value} guard, the shipped policy): the same sigmas, "
            f"{args.learned_seeds} seeds"
        )
    exact = [n for n in ("cpsat", "full") if n in available]
    if exact and args.exact_seeds > 0:
        curve.append(
            comparisons.add(
                scenarios, exact, exact_sigmas, range(args.exact_seeds), options=plan_options, open_options=open_options
            )
        )
        runs.append(
            f"{' and '.join(exact)}: sigma {', '.join(f'{x:g}' for x in exact_sigmas)}, {args.exact_seeds} seeds, "
            f"{args.time_limit:g} s per re-plan, {args.open_time_limit:g} s for the open-loop plan"
        )
    return curve, runs


def _queue_ablations(comparisons: Comparisons, scenarios: list[Scenario], seeds: int) -> list[tuple[str, int]]:
    """Queue 2., the ablations: greedy at sigma 0 and 0.2, one change at a time; returns (label, number) pairs."""
    both = {"open_margin": 1.0, "told_sigma": True}
    ablations = [
        ("default: ratio correction, margin 1, jobs revealed at release, re-plan every slot", {}),
        ("no forecast correction (re-plan on the forecast)", {"corrector": "none"}),
        ("correction without the safety margin", {"margin": 0.0}),
        ("jobs known from slot 0 (reveal all): the same job information as open loop", {"reveal": "all"}),
        ("re-plan every 2 slots", {"replan_every": 2}),
        ("re-plan every 4 slots", {"replan_every": 4}),
        ("re-plan every 8 slots", {"replan_every": 8}),
        ("open loop plans on the forecast raised by 1 sigma (it is told sigma)", {"open_margin": 1.0}),
        ("both told sigma: open loop raised by 1 sigma, rolling's margin starts from it", both),
        ("both told sigma, and jobs known from slot 0", {**both, "reveal": "all"}),
    ]
    return [
        (label, comparisons.add(scenarios, ["greedy"], (0.0, 0.2), range(seeds), **kwargs))
        for label, kwargs in ablations
    ]


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces the run, as the report quotes it."""
    return (
        f".venv/bin/python benchmarks/rolling_benchmark.py --seeds {args.seeds} --learned-seeds {args.learned_seeds} "
        f"--exact-seeds {args.exact_seeds} --exact-sigmas {args.exact_sigmas} --ablation-seeds {args.ablation_seeds} "
        f"--time-limit {args.time_limit:g} --open-time-limit {args.open_time_limit:g}"
        + (f" --parallel {args.parallel}" if args.parallel > 1 else "")
        + ("" if args.ray is None else " --ray" + ("" if args.ray == LOCAL_RAY else f" {args.ray}"))
        + (f" --task-timeout {args.task_timeout:g}" if args.task_timeout else "")
    )


def _document(
    args: argparse.Namespace,
    *,
    names: list[str],
    runs: list[str],
    backend: str,
    rows: list[dict],
    summary: list[dict],
    gains: list[dict],
    ablation_lines: list[str],
    latency_lines: list[str],
    elapsed: float,
) -> list[str]:
    """The lines of ``rolling.md``.

    Args:
        args: The command line.
        names: The scenarios' names.
        runs: What ran of the curve, a phrase per planner group.
        backend: Where the comparisons ran.
        rows: The curve's rows.
        summary: The curve's rows per scenario, planner and sigma (:func:`agents.report.rolling.summarise`).
        gains: The curve's rows pooled over scenarios (:func:`agents.report.rolling.pooled`).
        ablation_lines: The ablations' table.
        latency_lines: The latency table.
        elapsed: Seconds the run took.
    """
    return [
        "# Rolling horizon under forecast error",
        "",
        f"Written by `{_command(args)}` in {elapsed / 60:.0f} min on "
        f"{platform.processor() or platform.machine()} ({platform.python_implementation()} "
        f"{platform.python_version()}); the comparisons ran on: {backend}. What the modes are "
        "and how actual demand is drawn: docs/rolling.md.",
        "",
        f"Scenarios: {', '.join(names)}. Runs: " + "; ".join(runs) + ". Seed s draws the actual demand "
        "(the same draw for every planner and both modes); at sigma 0 the actual demand is the forecast, one run. "
        "Rolling re-plans every slot and learns of each job at its release; open loop plans once at slot 0 "
        "knowing the day's jobs. Every executed schedule passed the validator against its actual demand"
        + ("." if all(r["valid"] for r in rows) else ": NOT ALL - see the table."),
        "",
        "## The curve: rolling minus open loop, pooled over scenarios",
        "",
        "In % of each scenario's open-loop objective with an exact forecast; mean ± 95 % CI (t) over "
        "scenario x seed pairs; in brackets the pairs where rolling earned more.",
        "",
        report.pooled_table(gains),
        target_line(gains),
        "",
        "![Realised objective against forecast error](rolling.png)",
        "",
        "## Ablations (greedy)",
        "",
        f"Sigma 0 and 0.2, seeds 0..{args.ablation_seeds - 1}; one change at a time from the default.",
        "",
        *ablation_lines,
        "",
        "## Latency of one re-plan at 64 GPUs x 30 jobs",
        "",
        "One rolling day of `scale-64x30` at sigma 0.2 (24 re-plans, each of the jobs released so far over the rest "
        "of the day), after one warm-up plan; the last column plans the whole day with every job. Wall-clock time "
        "of the planner only (`run_scheduler`), one process.",
        "",
        *latency_lines,
        "",
        "## Every scenario, planner and sigma",
        "",
        report.markdown_table(summary),
    ]


def main(argv: list[str] | None = None) -> int:
    args, backend = _parse_args(argv)
    exact_sigmas = tuple(float(x) for x in args.exact_sigmas.split(","))
    started = time.perf_counter()
    scenarios = benchmark_scenarios()
    names = [s.name for s in scenarios]
    print(f"scenarios: {', '.join(names)}", file=sys.stderr)
    available = available_schedulers()

    print("1. the curve and 2. the ablations (greedy at sigma 0.2): one fan-out", file=sys.stderr)
    comparisons = Comparisons()
    curve, runs = _queue_curve(comparisons, scenarios, args, available, exact_sigmas)
    queued = _queue_ablations(comparisons, scenarios, args.ablation_seeds)
    comparisons.run(backend, args.task_timeout)
    for line in comparisons.done.failure_lines(tracebacks=True):
        print(f"failed: {line}", file=sys.stderr)

    rows = [row for number in curve for row in comparisons.rows(number)]
    summary = report.summarise(rows)
    gains = report.pooled(rows)
    save_figure(plot_rolling_curve(summary, gains), OUT / "rolling.png")
    ablation_lines = ["| variant | rolling - open loop, pooled (wins/pairs) |", "| --- | --- |"]
    for label, number in queued:
        ablation_lines.append(gain_line(comparisons.rows(number), label))

    print("3. latency at 64 x 30", file=sys.stderr)
    latency_lines = latency(available, args.time_limit)

    elapsed = time.perf_counter() - started
    doc = _document(
        args,
        names=names,
        runs=runs,
        backend=comparisons.done.backend,
        rows=rows,
        summary=summary,
        gains=gains,
        ablation_lines=ablation_lines,
        latency_lines=latency_lines,
        elapsed=elapsed,
    )
    write_text_atomic(OUT / "rolling.md", "\n".join(doc) + "\n")
    print(f"wrote {OUT / 'rolling.md'} in {elapsed:.0f} s", file=sys.stderr)
    return 0 if comparisons.done.ok else 1


if __name__ == "__main__":
    sys.exit(main())
