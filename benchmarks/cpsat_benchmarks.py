"""Benchmarks of the exact mode: formulations, the seven scenarios, the 2D knapsack set, full mode against cold.

    .venv/bin/python benchmarks/cpsat_benchmarks.py formulations   # model variants on the seven scenarios
    .venv/bin/python benchmarks/cpsat_benchmarks.py seven          # the chosen model, repeated, on the seven
    .venv/bin/python benchmarks/cpsat_benchmarks.py knapsack       # every instance of benchmarks/data/2kp/
    .venv/bin/python benchmarks/cpsat_benchmarks.py knapsack-formulations  # model variants on some of them
    .venv/bin/python benchmarks/cpsat_benchmarks.py full-vs-cold   # time to the optimum, hinted or not

Each prints its table and writes it to ``benchmarks/results/cpsat_<name>.md``
with the command line, date and machine. Every plan goes through the validator
(pairwise box checks instead for 2D-knapsack instances above a few million
GPU-slots, where the validator's cell map would not fit in memory). Times are wall
seconds on two cores shared with other work, so they are noisy; the CPU seconds
of the solver's threads (and CP-SAT's deterministic time) are given beside them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import cpsat, full  # noqa: E402
from agents.cpsat import Formulation, Result  # noqa: E402
from agents.registry import run_scheduler  # noqa: E402
from gpu_env import rules  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, generate  # noqa: E402
from gpu_env.knapsack import load_knapsack, to_scenario  # noqa: E402
from gpu_env.scenario import Scenario, load_scenario  # noqa: E402
from gpu_env.validation import validate  # noqa: E402
from lab.benchmarking import results_header, table  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
KNAPSACK = ROOT / "benchmarks" / "data" / "2kp"
FRESH_SEEDS = range(1000, 1020)  # fresh instances for full vs cold, disjoint from the benchmark seed

BASE = Formulation(start_literals="never", symmetry=False, normal_patterns=False, timetabling=False)
TI = replace(BASE, start_literals="always")
# name -> formulation; each line changes one thing from the line it names.
FORMULATIONS: dict[str, Formulation] = {
    "A: no_overlap_2d + cumulative, element values": BASE,
    "A + timetabling propagator": replace(BASE, timetabling=True),
    "A + energetic propagator": replace(BASE, energetic=True),
    "A + area-energetic propagator": replace(BASE, area_energetic=True),
    "A + try-edge propagator": replace(BASE, try_edge=True),
    "A + symmetry breaking": replace(BASE, symmetry=True),
    "A + node-level cumulatives": replace(BASE, node_cumulative=True),
    "A + GPU-axis cumulative": replace(BASE, gpu_cumulative=True),
    "B: A + start literals (values per start), no slot rows": replace(TI, slot_rows=False),
    "C: B + slot capacity rows (time-indexed LP)": TI,
    "D: C + symmetry breaking": replace(TI, symmetry=True),
    "E: D + timetabling (the default)": Formulation(),
    "E + node-level cumulatives": Formulation(node_cumulative=True),
    "E + node-level slot rows": Formulation(node_rows=True),
    "E + GPU-axis cumulative": Formulation(gpu_cumulative=True),
    "E + energetic propagator": Formulation(energetic=True),
    "E + area-energetic propagator": Formulation(area_energetic=True),
    "F: fully time-indexed (GPU-cell rows instead of no_overlap_2d)": Formulation(gpu_cells=True, timetabling=False),
}


# name -> formulation, each one change from the default, for knapsack-like scenarios (2KP instances).
KNAPSACK_FORMULATIONS: dict[str, Formulation] = {
    "default": Formulation(),
    "no normal patterns": Formulation(normal_patterns=False),
    "no symmetry breaking or copy caps": Formulation(symmetry=False),
    "no timetabling propagator": Formulation(timetabling=False),
    "+ start literals and slot rows": Formulation(start_literals="always"),
    "+ GPU-axis cumulative": Formulation(gpu_cumulative=True),
    "+ energetic propagator": Formulation(energetic=True),
}
KNAPSACK_SAMPLE = ("ngcut12", "cgcut3", "wang20", "okp1", "okp2", "okp5", "gcut3", "gcut11")


# ----------------------------------------------------------------------------- shared helpers


def benchmark_scenario(family: str) -> Scenario:
    """``configs/scenarios/<family>.yaml``, or the same instance drawn from the generator."""
    path = ROOT / "configs" / "scenarios" / f"{family}.yaml"
    if path.is_file():
        return load_scenario(path)
    return generate(family, BENCHMARK_SEEDS[family])


def timed_solve(scenario: Scenario, **kwargs: object) -> tuple[Result, float]:
    """``cpsat.solve`` and the CPU seconds it used (all its threads), which the load on the machine moves less."""
    cpu = time.process_time()
    result = cpsat.solve(scenario, **kwargs)
    return result, time.process_time() - cpu


def check(scenario: Scenario, result: Result) -> str:
    """ "ok" when the plan validates (or there is none), else the first violation; raises nothing."""
    if result.plan is None:
        return "ok"
    if scenario.gpus * (scenario.slots + max((j.duration for j in scenario.jobs), default=0)) > 4_000_000:
        return _check_boxes(scenario, result)
    problems = validate(scenario, result.plan)
    return "ok" if not problems else str(problems[0])


def _check_boxes(scenario: Scenario, result: Result) -> str:
    """Rules 1-4 by pairwise box overlap, for knapsack instances too large for the cell map (no real-time)."""
    boxes = []
    for p in result.plan.placements:
        job = scenario.jobs[scenario.job_index(p.job)]
        if list(p.gpus) != list(range(p.gpus[0], p.gpus[0] + job.gpus)):
            return f"{p.job}: not a contiguous block"
        if not rules.is_allowed_block(p.gpus[0], job.gpus, scenario.gpus, scenario.node_size):
            return f"{p.job}: block not allowed"
        if p.start not in rules.start_window(job, scenario.slots):
            return f"{p.job}: start {p.start} outside its window"
        boxes.append((p.start, p.start + job.duration, p.gpus[0], p.gpus[0] + job.gpus, p.job))
    for i, (t0, t1, g0, g1, a) in enumerate(boxes):
        for u0, u1, h0, h1, b in boxes[i + 1 :]:
            if t0 < u1 and u0 < t1 and g0 < h1 and h0 < g1:
                return f"{a} and {b} overlap"
    return "ok (pairwise)"


def header(command: str, what: str) -> str:
    """The first lines of a results file: what, the command, when, on what."""
    note = "; CPU seconds, those of the solver's own threads, less so; `dtime` is CP-SAT's deterministic time"
    return results_header(command, what, time.strftime("%Y-%m-%d"), note)


def fmt(x: float | None, digits: int = 2) -> str:
    """A number, or a dash."""
    return "-" if x is None else f"{x:.{digits}f}"


def write(name: str, text: str) -> None:
    """Print and write ``benchmarks/results/cpsat_<name>.md``."""
    print(text)
    write_text_atomic(RESULTS / f"cpsat_{name}.md", text)
    print(f"-> {RESULTS / f'cpsat_{name}.md'}", file=sys.stderr)


def progress(*parts: object) -> None:
    """One progress line on stderr."""
    print(*parts, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- formulations


def run_formulations(args: argparse.Namespace, command: str) -> None:
    """Every formulation of :data:`FORMULATIONS` on the seven scenarios."""
    families = args.families or list(FAMILIES)
    names = [n for n in FORMULATIONS if not args.only or any(o in n for o in args.only)]
    cells: dict[str, list[str]] = {}
    totals: dict[str, tuple[int, float, float]] = {}
    bad = []
    for name in names:
        formulation = FORMULATIONS[name]
        row = []
        proved, seconds, dtime = 0, 0.0, 0.0
        for family in families:
            sc = benchmark_scenario(family)
            result, cpu = timed_solve(sc, time_limit=args.time_limit, workers=args.workers, formulation=formulation)
            verdict = check(sc, result)
            if not verdict.startswith("ok"):
                bad.append(f"{name} / {family}: {verdict}")
            if result.status is cpsat.Status.OPTIMAL:
                proved += 1
                row.append(f"{result.runtime:.1f} ({cpu:.1f})")
            else:
                gap = result.gap
                row.append(f"gap {gap:.1%}" if gap is not None else result.status.value)
            seconds += result.runtime
            dtime += cpu
            progress(name, family, result.status.value, f"{result.runtime:.1f}s", fmt(result.objective, 3))
        cells[name] = row
        totals[name] = (proved, seconds, dtime)
    short = [f.split("-")[0] for f in families]
    text = header(command, "CP-SAT formulations on the seven benchmark scenarios")
    text += (
        f"Each cell: wall seconds to a proof of optimality (CPU seconds of all threads in brackets), or the gap "
        f"(bound - objective) / bound left at the {args.time_limit:g} s limit; {args.workers} workers. "
        "`proved`: scenarios proved optimal; `sum s`, `sum cpu s`: totals (unproved ones count the full limit). "
        "Formulations are those of `FORMULATIONS` in `benchmarks/cpsat_benchmarks.py`.\n\n"
    )
    rows = [[n, *cells[n], totals[n][0], f"{totals[n][1]:.1f}", f"{totals[n][2]:.2f}"] for n in names]
    text += table(["formulation", *short, "proved", "sum s", "sum cpu s"], rows)
    text += "\nInvalid plans: " + ("none" if not bad else "; ".join(bad)) + "\n"
    write(args.output or "formulations", text)


# ----------------------------------------------------------------------------- the seven, repeated


def run_seven(args: argparse.Namespace, command: str) -> None:
    """The default model on the seven scenarios, ``--repeats`` times each."""
    rows = []
    bad = []
    for family in args.families or list(FAMILIES):
        sc = benchmark_scenario(family)
        results: list[Result] = []
        cpus: list[float] = []
        for _ in range(args.repeats):
            result, cpu = timed_solve(sc, time_limit=args.time_limit, workers=args.workers)
            verdict = check(sc, result)
            if not verdict.startswith("ok"):
                bad.append(f"{family}: {verdict}")
            results.append(result)
            cpus.append(cpu)
            progress(family, result.status.value, f"{result.runtime:.1f}s")
        fifo = run_scheduler("fifo", sc).metrics.objective
        greedy = run_scheduler("greedy", sc).metrics.objective
        best = max(results, key=lambda r: r.objective or float("-inf"))
        times = [r.runtime for r in results]
        proved = sum(r.status is cpsat.Status.OPTIMAL for r in results)
        rows.append(
            [
                family,
                f"{sc.gpus}x{sc.slots}, {len(sc.jobs)} jobs",
                fmt(fifo),
                fmt(greedy),
                fmt(best.objective, 3),
                fmt(best.bound, 3),
                f"{proved}/{len(results)}",
                f"{statistics.median(times):.2f}",
                f"{max(times):.2f}",
                f"{statistics.median(cpus):.2f}",
                f"{statistics.median(r.deterministic_time for r in results):.2f}",
            ]
        )
    text = header(command, "CP-SAT on the seven benchmark scenarios")
    text += (
        f"The chosen formulation (`Formulation()`), {args.workers} workers, limit {args.time_limit:g} s, "
        f"{args.repeats} runs per scenario. `proved`: runs that ended with status optimal; seconds are wall "
        "time per run, model building included; `cpu s`: median CPU seconds of all threads.\n\n"
    )
    text += table(
        [
            "scenario",
            "size",
            "fifo",
            "greedy",
            "cpsat objective",
            "bound",
            "proved",
            "median s",
            "max s",
            "cpu s",
            "dtime",
        ],
        rows,
        right=2,
    )
    text += "\nInvalid plans: " + ("none" if not bad else "; ".join(bad)) + "\n"
    write(args.output or "seven", text)


# ----------------------------------------------------------------------------- 2D knapsack


def _knapsack_order(path: Path) -> tuple[int, int, str]:
    name = path.stem
    family = next(
        (i for i, f in enumerate(("ngcut", "cgcut", "hadchr", "wang", "okp", "gcut")) if name.startswith(f)), 9
    )
    digits = "".join(c for c in name if c.isdigit())
    return family, int(digits or 0), name


def run_knapsack(args: argparse.Namespace, command: str) -> None:
    """cpsat on every instance of the 2D-knapsack folder: literature optimum, objective, bound, status, seconds."""
    paths = sorted(Path(args.folder).glob("*.json"), key=_knapsack_order)
    if args.instances:
        paths = [p for p in paths if p.stem in args.instances]
    rows = []
    summary = {"reached": 0, "proved": 0, "known": 0}
    for path in paths:
        instance = load_knapsack(path)
        sc = to_scenario(instance)
        result, cpu = timed_solve(sc, time_limit=args.time_limit, workers=args.workers)
        verdict = check(sc, result)
        known = instance.optimum
        reached = known is not None and result.objective is not None and result.objective >= known - 1e-6
        proved = reached and result.status is cpsat.Status.OPTIMAL
        if known is not None:
            summary["known"] += 1
            summary["reached"] += reached
            summary["proved"] += proved
        if known is None:
            outcome = "no literature optimum"
        elif proved:
            outcome = "optimum proved"
        elif reached:
            outcome = "optimum reached, not proved in the limit"
        else:
            outcome = "NOT reached in the limit"
        if result.status is cpsat.Status.OPTIMAL and known is not None and abs(result.objective - known) > 1e-6:
            outcome = "DISAGREES with the literature"
        rows.append(
            [
                instance.name,
                f"{instance.width}x{instance.height}",
                instance.pieces,
                fmt(known, 0),
                fmt(result.objective, 0),
                fmt(result.bound, 0),
                result.status.value,
                f"{result.runtime:.1f}",
                f"{cpu:.1f}",
                outcome,
                verdict,
            ]
        )
        progress(instance.name, result.status.value, fmt(result.objective, 0), f"{result.runtime:.1f}s", outcome)
    text = header(command, "CP-SAT on the 2D-knapsack benchmark (benchmarks/data/2kp/)")
    text += (
        f"Each instance converted by `gpualloc convert-2kp` (SPEC section 6) and solved by `cpsat` with the chosen "
        f"formulation, {args.workers} workers, limit {args.time_limit:g} s. `bound`: proven upper bound; "
        "instances not proved within the limit are listed as such. `plan`: validator verdict.\n\n"
        f"Literature optimum reached on {summary['reached']} of {summary['known']} instances with a known optimum, "
        f"proved on {summary['proved']}.\n\n"
    )
    text += table(
        ["instance", "bin", "pieces", "literature", "objective", "bound", "status", "s", "cpu s", "outcome", "plan"],
        rows,
    )
    write(args.output or "2kp", text)


def run_knapsack_formulations(args: argparse.Namespace, command: str) -> None:
    """Formulations of :data:`KNAPSACK_FORMULATIONS` on a sample of 2KP instances."""
    names = args.instances or list(KNAPSACK_SAMPLE)
    instances = [load_knapsack(Path(args.folder) / f"{name}.json") for name in names]
    rows = []
    for label, formulation in KNAPSACK_FORMULATIONS.items():
        if args.only and not any(o in label for o in args.only):
            continue
        row: list[object] = [label]
        proved, seconds = 0, 0.0
        for instance in instances:
            sc = to_scenario(instance)
            result, cpu = timed_solve(sc, time_limit=args.time_limit, workers=args.workers, formulation=formulation)
            verdict = check(sc, result)
            if result.status is cpsat.Status.OPTIMAL:
                proved += 1
                row.append(f"{result.runtime:.1f} ({cpu:.1f})")
            else:
                row.append(f"gap {result.gap:.1%}" if result.gap is not None else result.status.value)
            if not verdict.startswith("ok"):
                row[-1] = f"{row[-1]} INVALID"
            seconds += result.runtime
            progress(label, instance.name, result.status.value, f"{result.runtime:.1f}s", fmt(result.objective, 0))
        rows.append([*row, proved, f"{seconds:.1f}"])
    text = header(command, "CP-SAT formulations on 2D-knapsack instances")
    text += (
        "Each cell: wall seconds to a proof of optimality (CPU seconds of all threads in brackets), or the gap "
        f"left at the {args.time_limit:g} s limit; {args.workers} workers. Each row changes one thing from the "
        "default (`KNAPSACK_FORMULATIONS` in `benchmarks/cpsat_benchmarks.py`).\n\n"
    )
    text += table(["formulation", *names, "proved", "sum s"], rows)
    write(args.output or "2kp_formulations", text)


# ----------------------------------------------------------------------------- full mode against cold CP-SAT


def _time_to(result: Result, target: float, jobs: int) -> float | None:
    tol = (jobs + 1) / result.scale  # the trace is in rounded objective units, the hint's point in exact ones
    for point in result.trace:
        if point.objective >= target - tol:
            return point.seconds
    return None


# name -> keyword arguments of agents.full.solve; "full" is the seed's full mode (the hint only).
FULL_VARIANTS: dict[str, dict[str, bool]] = {
    "full": {},
    "cutoff": {"use_hint": False, "use_cutoff": True},
    "hint+cutoff": {"use_cutoff": True},
}


def run_full_vs_cold(args: argparse.Namespace, command: str) -> None:
    """Time to reach the optimum: CP-SAT cold against full mode (and variants), same limit and workers."""
    variants = ["full", *(args.variants or [])]
    cases: list[tuple[str, str, Callable[[], Scenario]]] = []
    for family in args.families or list(FAMILIES):
        cases.append(("benchmark", family, lambda f=family: benchmark_scenario(f)))
    for family in args.families or list(FAMILIES):
        for seed in list(FRESH_SEEDS)[: args.instances]:
            cases.append((family, f"{family} #{seed}", lambda f=family, s=seed: generate(f, s)))
    per_group: dict[str, list[dict[str, float | None]]] = {}
    bench_rows = []
    unknown = 0
    bad = []
    for group, label, make in cases:
        sc = make()
        runs = {"cold": cpsat.solve(sc, time_limit=args.time_limit, workers=args.workers, seed=args.seed)}
        for name in variants:
            runs[name] = full.solve(
                sc,
                time_limit=args.time_limit,
                workers=args.workers,
                seed=args.seed,
                hint_source=args.hint,
                **FULL_VARIANTS[name],
            )
        for kind, result in runs.items():
            verdict = check(sc, result)
            if not verdict.startswith("ok"):
                bad.append(f"{label} {kind}: {verdict}")
        proved = [r for r in runs.values() if r.status is cpsat.Status.OPTIMAL]
        if not proved:
            unknown += 1
            times: dict[str, float | None] = dict.fromkeys(runs)
        else:
            target = max(r.trace[-1].objective for r in proved if r.trace)
            times = {kind: _time_to(r, target, len(sc.jobs)) for kind, r in runs.items()}
        per_group.setdefault(group, []).append(times)
        if group == "benchmark":
            cells = [fmt(times["cold"])]
            for name in variants:
                cells += [fmt(times[name]), _ratio(times["cold"], times[name])]
            bench_rows.append([label, *cells, fmt(runs["cold"].objective, 3)])
        progress(label, *(f"{k} {fmt(v)}" for k, v in times.items()))
    rows = []
    fresh = [e for group, entries in per_group.items() if group != "benchmark" for e in entries]
    for group, entries in [*per_group.items(), ("all fresh instances", fresh)]:
        row: list[object] = [group, len(entries)]
        reached_cold = [e["cold"] for e in entries if e["cold"] is not None]
        row.append(fmt(statistics.median(reached_cold)) if reached_cold else "-")
        for name in variants:
            both = [(e["cold"], e[name]) for e in entries if e["cold"] is not None and e[name] is not None]
            ratios = [w / c for c, w in both if c > 0]
            only_cold = sum(1 for e in entries if e["cold"] is not None and e[name] is None)
            only_warm = sum(1 for e in entries if e["cold"] is None and e[name] is not None)
            row += [
                fmt(statistics.median(w for _, w in both)) if both else "-",
                fmt(statistics.median(ratios), 3) if ratios else "-",
                f"{only_warm}/{only_cold}",
            ]
        rows.append(row)
    text = header(command, f"Full mode ({args.hint} hint) against cold CP-SAT: time to reach the optimum")
    text += (
        f"All with the chosen formulation, {args.workers} workers, seed {args.seed}, limit {args.time_limit:g} s; "
        f"the hint comes from `{args.hint}`. Variants: `full` hints every variable with the plan (the seed's "
        "full mode, the default); `cutoff` gives no hint but requires the plan's objective; `hint+cutoff` both. "
        "The optimum is the objective of a run that proved optimality (instances where no run proved it are "
        f"left out: {unknown} of {len(cases)}). Time to reach it: wall seconds from the call to the first "
        "solution at the optimum, model building and (for full) the hint's plan included. Fresh instances: "
        f"`generate(family, seed)` for seeds {FRESH_SEEDS.start}..{FRESH_SEEDS.start + args.instances - 1}. "
        "`ratio`: median over instances of (variant time) / (cold time); `only v/c`: instances where only the "
        "variant / only cold reached the optimum within the limit.\n\n"
    )
    text += "## The seven benchmark scenarios\n\n"
    head = ["scenario", "cold s"]
    for name in variants:
        head += [f"{name} s", f"{name} / cold"]
    text += table([*head, "optimum"], bench_rows)
    text += "\n## Per group (medians)\n\n"
    head = ["instances", "n", "cold s"]
    for name in variants:
        head += [f"{name} s", f"{name} ratio", f"only {name}/cold"]
    text += table(head, rows)
    text += "\nInvalid plans: " + ("none" if not bad else "; ".join(bad)) + "\n"
    write(args.output or "full_vs_cold", text)


def _ratio(cold: float | None, warm: float | None) -> str:
    if cold is None or warm is None or cold <= 0:
        return "-"
    return f"{warm / cold:.3f}"


# ----------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("formulations", "seven", "knapsack", "knapsack-formulations", "full-vs-cold"))
    parser.add_argument("--time-limit", type=float, help="seconds per solve (default: 20, 10, 60, 30, 10)")
    parser.add_argument("--workers", type=int, default=2, help="CP-SAT workers (default: 2)")
    parser.add_argument("--seed", type=int, default=0, help="CP-SAT seed for full-vs-cold (default: 0)")
    parser.add_argument("--families", nargs="*", help="benchmark families (default: all seven)")
    parser.add_argument("--only", nargs="*", help="formulations whose name contains one of these")
    parser.add_argument("--repeats", type=int, default=3, help="runs per scenario for `seven` (default: 3)")
    parser.add_argument("--instances", nargs="*", help="2KP instance names (default: all)")
    parser.add_argument("--fresh", type=int, default=20, help="fresh instances per family for full-vs-cold")
    parser.add_argument("--hint", default="greedy", help="hint source of full mode for full-vs-cold (default: greedy)")
    parser.add_argument(
        "--variants", nargs="*", choices=[v for v in FULL_VARIANTS if v != "full"], help="also run these variants"
    )
    parser.add_argument("--folder", default=str(KNAPSACK), help="2KP folder (default: benchmarks/data/2kp)")
    parser.add_argument("--output", help="results file name under benchmarks/results/cpsat_<name>.md")
    args = parser.parse_args(argv)
    command = ".venv/bin/python benchmarks/cpsat_benchmarks.py " + " ".join(sys.argv[1:] if argv is None else argv)
    default_limits = {
        "formulations": 20.0,
        "seven": 10.0,
        "knapsack": 60.0,
        "knapsack-formulations": 30.0,
        "full-vs-cold": 10.0,
    }
    args.time_limit = args.time_limit or default_limits[args.what]
    if args.what == "formulations":
        run_formulations(args, command)
    elif args.what == "seven":
        run_seven(args, command)
    elif args.what == "knapsack":
        run_knapsack(args, command)
    elif args.what == "knapsack-formulations":
        run_knapsack_formulations(args, command)
    else:
        args.instances = args.fresh
        run_full_vs_cold(args, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
