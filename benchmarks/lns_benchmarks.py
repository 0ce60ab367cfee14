"""Full mode at scale: the whole CP-SAT model against large-neighbourhood search, side by side on the same instances.

    .venv/bin/python benchmarks/lns_benchmarks.py scale   # fresh draws of every family at 128-1,024 GPUs
    .venv/bin/python benchmarks/lns_benchmarks.py seven   # the seven scenarios and fresh draws at the seed's sizes

``scale`` runs, per instance, today's full mode (``mode="whole"``: CP-SAT on the
whole model from the default hint) with ``--whole-limit`` seconds and the LNS
mode with each of ``--limits``, all with ``--workers``; every plan is validated.
The bound of an instance is the least valid one any run proved: CP-SAT's bound
on the whole model or the certified LP relaxation (``agents/relaxation.py``);
every gap is against it. The file is rewritten after each instance, so a run cut
short keeps what finished. ``seven`` runs full mode (``mode="auto"``, which keeps
the whole model at these sizes) and records status and seconds; with ``--code DIR``
it imports the project from another checkout (today's code, for a side-by-side).
Results go to ``benchmarks/results/lns*.md`` with the command line.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _import_path(argv: Sequence[str]) -> Path:
    """The checkout whose code runs: ``--code DIR`` if given, else this repository."""
    if "--code" in argv:
        return Path(argv[list(argv).index("--code") + 1]).resolve()
    return ROOT


sys.path.insert(0, str(_import_path(sys.argv)))

from agents import full  # noqa: E402
from agents.benchmarking import results_header, table  # noqa: E402
from agents.registry import run_scheduler  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import FAMILIES, generate  # noqa: E402
from gpu_env.scenario import Scenario, load_scenario  # noqa: E402
from gpu_env.validation import validate  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SIZES = (128, 256, 512, 1024)
SEED_BASE = 3000  # fresh draws: seed 3000 + G, unused by the seven scenarios (2026) and full-vs-cold (1000-1019)
SMALL_SEED = 3001  # fresh draws at the seed's sizes


def header(command: str, what: str) -> str:
    """The first lines of a results file: what, the command, when, on what."""
    return results_header(command, what, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))


def progress(*parts: object) -> None:
    """One line on stderr, flushed."""
    print(*parts, file=sys.stderr, flush=True)


def run(scenario: Scenario, mode: str, limit: float, workers: int) -> dict[str, object]:
    """One full-mode run: objective, bound and its source, seconds, validity."""
    started = time.perf_counter()
    result = full.solve(scenario, time_limit=limit, workers=workers, seed=0, mode=mode)
    seconds = time.perf_counter() - started
    plan = result.plan
    problems = validate(scenario, plan)
    info = plan.info
    return {
        "objective": result.objective,
        "bounds": dict(info.get("bounds", {})),
        "status": info["status"],
        "seconds": seconds,
        "valid": not problems,
        "hint": info["hint"]["scheduler"],
        "mode": "portfolio" if "whole" in info.get("lns", {}).get("portfolio", {}) else info.get("mode", "whole"),
    }


def _gap(objective: float, bound: float) -> float:
    return max(0.0, (bound - objective) / abs(bound))


def run_scale(args: argparse.Namespace, command: str) -> None:
    """Every family at every size: whole model against LNS, written after each instance."""
    configs = [("whole", args.whole_limit)] + [("auto", limit) for limit in args.limits]
    names = [f"{'today' if mode == 'whole' else 'full'} {limit:g} s" for mode, limit in configs]
    rows: list[list[object]] = []
    misses: list[str] = []
    records: list[dict[str, object]] = []
    for gpus in args.sizes:
        for family in args.families:
            sc = generate(family, SEED_BASE + gpus, gpus=gpus)
            greedy = run_scheduler("greedy", sc).metrics.objective
            runs = [run(sc, mode, limit, args.workers) for mode, limit in configs]
            bounds = {}
            for r in runs:
                for source, value in r["bounds"].items():  # type: ignore[union-attr]
                    if value is not None:
                        bounds[source] = min(bounds.get(source, float("inf")), value)
            source, bound = min(bounds.items(), key=lambda item: item[1])
            bound = max(bound, *(float(r["objective"]) for r in runs))  # type: ignore[arg-type]
            row: list[object] = [family, f"{gpus} x {sc.slots}, {len(sc.jobs)} jobs", runs[-1]["mode"], f"{greedy:.2f}"]
            for r in runs:
                row += [f"{r['objective']:.2f}", f"{100 * _gap(float(r['objective']), bound):.2f}"]  # type: ignore[arg-type]
            row += [f"{bound:.2f} ({source})", f"{bounds.get('cpsat', float('nan')):.2f}"]
            row += [f"{float(r['objective']) / greedy:.4f}" for r in runs]  # type: ignore[arg-type]
            row += ["yes" if all(r["valid"] for r in runs) else "NO"]
            rows.append(row)
            records.append({"family": family, "gpus": gpus, "runs": runs, "bound": bound, "source": source})
            for name, r in zip(names, runs, strict=True):
                if name.startswith("full") and _gap(float(r["objective"]), bound) > 0.01:  # type: ignore[arg-type]
                    misses.append(f"{family} {gpus}: {name} gap {100 * _gap(float(r['objective']), bound):.2f} %")  # type: ignore[arg-type]
            shortest = min(args.limits)
            quick = [r for (mode, limit), r in zip(configs, runs, strict=True) if mode == "auto" and limit == shortest]
            if quick and float(quick[0]["objective"]) < float(runs[0]["objective"]) - 1e-6:  # type: ignore[arg-type]
                misses.append(f"{family} {gpus}: full {shortest:g} s below today's {args.whole_limit:g} s")
            progress(" | ".join(str(x) for x in row))
            _write_scale(args, command, names, rows, misses, records)


def _write_scale(
    args: argparse.Namespace,
    command: str,
    names: list[str],
    rows: list[list[object]],
    misses: list[str],
    records: list[dict[str, object]],
) -> None:
    head = ["family", "size", "full's mode", "greedy"]
    for name in names:
        head += [name, "gap %"]
    head += ["bound (source)", "cpsat bound"] + [f"{name} / greedy" for name in names] + ["valid"]
    text = header(command, "Full mode at scale: whole model against large-neighbourhood search")
    text += (
        f"Fresh draws (`generate(family, {SEED_BASE} + G, gpus=G)`, jobs scaled with G), {args.workers} workers; "
        '`today` is today\'s full mode (`mode="whole"`: CP-SAT on the whole model from the default hint), '
        '`full` the new one (`mode="auto"`: the whole model up to 180 jobs, LNS above, beside the whole model '
        "up to 300 jobs: `portfolio`); "
        "gaps are against the least bound any run proved (`cpsat`: CP-SAT's bound on the whole model; "
        "`lp-dual`: the certified LP relaxation). `cpsat bound` is the least bound CP-SAT proved on the whole "
        "model in any run (nan: none).\n\n"
    )
    text += table(head, rows, right=3)
    gaps = {name: [] for name in names}
    for record in records:
        for name, r in zip(names, record["runs"], strict=True):  # type: ignore[call-overload]
            gaps[name].append(_gap(float(r["objective"]), float(record["bound"])))  # type: ignore[arg-type]
    text += "\n" + table(
        ["run", "instances", "mean gap %", "max gap %", "within 1 %", "within 0.5 %"],
        [
            [
                name,
                len(g),
                f"{100 * sum(g) / len(g):.2f}",
                f"{100 * max(g):.2f}",
                sum(x <= 0.01 for x in g),
                sum(x <= 0.005 for x in g),
            ]
            for name, g in gaps.items()
            if g
        ],
    )
    text += "\nMisses of the targets (full's gap above 1 %, full's shortest run below today's):\n\n"
    text += "".join(f"- {m}\n" for m in misses) or "- none\n"
    write_text_atomic(RESULTS / f"{args.output}.md", text)


def run_seven(args: argparse.Namespace, command: str) -> None:
    """The seven scenarios and one fresh draw per family at the seed's size: status and seconds of full mode."""
    instances: list[tuple[str, Scenario]] = []
    for family in FAMILIES:
        path = ROOT / "configs" / "scenarios" / f"{family}.yaml"
        instances.append((f"{family} (benchmark)", load_scenario(path)))
    for family in FAMILIES:
        instances.append((f"{family} (seed {SMALL_SEED})", generate(family, SMALL_SEED)))
    rows = []
    for name, sc in instances:
        times, statuses, objective = [], [], 0.0
        for _ in range(args.repeats):
            started = time.perf_counter()
            result = full.solve(sc, time_limit=args.time_limit, workers=args.workers, seed=0)
            times.append(time.perf_counter() - started)
            statuses.append(result.plan.info["status"])
            objective = result.objective
            if validate(sc, result.plan):
                statuses[-1] += " INVALID"
        mode = result.plan.info.get("mode", "whole (before LNS)")
        rows.append(
            [
                name,
                f"{sc.gpus} x {sc.slots}, {len(sc.jobs)} jobs",
                mode,
                f"{objective:.3f}",
                ", ".join(sorted(set(statuses))),
                f"{sorted(times)[len(times) // 2]:.2f}",
                f"{max(times):.2f}",
            ]
        )
        progress(" | ".join(rows[-1]))
    text = header(command, "Full mode at the seed's sizes: the seven scenarios and fresh draws")
    text += f"Code imported from `{_import_path(sys.argv)}`; {args.workers} workers, {args.time_limit:g} s limit, "
    text += f"{args.repeats} runs each (median and max seconds).\n\n"
    text += table(["instance", "size", "mode", "objective", "status", "median s", "max s"], rows, right=3)
    write_text_atomic(RESULTS / f"{args.output}.md", text)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line and run one benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, help="import the project from this checkout (default: this one)")
    sub = parser.add_subparsers(dest="what", required=True)
    scale = sub.add_parser("scale", help="every family at 128-1,024 GPUs: whole model against LNS")
    scale.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    scale.add_argument("--families", nargs="+", default=list(FAMILIES))
    scale.add_argument("--limits", type=float, nargs="+", default=[10.0, 30.0], help="LNS time limits")
    scale.add_argument("--whole-limit", type=float, default=30.0)
    scale.add_argument("--workers", type=int, default=2)
    scale.add_argument("--output", default="lns")
    seven = sub.add_parser("seven", help="the seven scenarios and fresh draws at the seed's sizes")
    seven.add_argument("--time-limit", type=float, default=10.0)
    seven.add_argument("--workers", type=int, default=2)
    seven.add_argument("--repeats", type=int, default=3)
    seven.add_argument("--output", default="lns_seven")
    args = parser.parse_args(argv)
    command = "python benchmarks/lns_benchmarks.py " + " ".join(sys.argv[1:] if argv is None else argv)
    {"scale": run_scale, "seven": run_seven}[args.what](args, command)


if __name__ == "__main__":
    main()
