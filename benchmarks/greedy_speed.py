"""Greedy's plan time, this tree against an earlier revision, side by side on every family.

For each family's benchmark scenario (``generate(family, BENCHMARK_SEEDS[family])``, the trace families too) it
times ``greedy.solve(scenario, DEFAULT)`` and ``greedy.solve(scenario, FAST)`` warm (each version first plans every
scenario once, so numba's compile or cache load is not timed) in this tree and in ``--against`` (a git revision,
unpacked with ``git archive`` into a temporary folder). The two versions run in turns, one subprocess per version
and round, so the machine's load falls on both alike; the table holds the median over all runs and the objectives
both found (equal when the plans are).

Run: ``.venv/bin/python benchmarks/greedy_speed.py --against f26cfa3`` (about a minute on two shared cores;
writes ``benchmarks/results/greedy_speed.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpu_env.files import write_text_atomic  # noqa: E402

MEASURE = """
import json, sys, time
from agents import greedy
from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, generate
from gpu_env.traces import TRACE_FAMILIES
repeats = int(sys.argv[1])
scenarios = {f: generate(f, BENCHMARK_SEEDS.get(f, 2026)) for f in (*FAMILIES, *TRACE_FAMILIES)}
configs = {"default": greedy.DEFAULT, "fast": greedy.FAST}
out = {}
for family, sc in scenarios.items():
    for name, config in configs.items():
        objective = greedy.solve(sc, config).objective  # warm: compile or cache load, imports
        samples = []
        for _ in range(repeats):
            t = time.perf_counter()
            greedy.solve(sc, config)
            samples.append((time.perf_counter() - t) * 1000)
        out[f"{family}/{name}"] = {"ms": samples, "objective": objective, "size": f"{sc.gpus} x {len(sc.jobs)}"}
print(json.dumps(out))
"""


def unpack(revision: str, into: Path) -> None:
    """The tracked files of a revision into a folder (``git archive``: no worktree registered)."""
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def measure(tree: Path, repeats: int) -> dict[str, dict]:
    """One round of timings in a source tree (its own interpreter process, its own numba cache)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    run = subprocess.run(
        [sys.executable, "-c", MEASURE, str(repeats)], cwd=tree, env=env, capture_output=True, text=True, check=True
    )
    return json.loads(run.stdout)


def run(against: str, rounds: int, repeats: int) -> str:
    """Time both versions in turns and return the Markdown report."""
    samples: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    info: dict[str, dict[str, dict]] = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory(prefix="greedy-speed-") as tmp:
        old = Path(tmp)
        unpack(against, old)
        for _ in range(rounds):
            for version, tree in (("before", old), ("after", ROOT)):
                for key, row in measure(tree, repeats).items():
                    samples[version].setdefault(key, []).extend(row["ms"])
                    info[version][key] = row
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    lines = [
        "# Greedy's plan time: the compiled decoder against the Python sweep",
        "",
        f"Written by `.venv/bin/python benchmarks/greedy_speed.py --against {against} --rounds {rounds} "
        f"--repeats {repeats}` on {time.strftime('%Y-%m-%d')} (this tree at {head.strip()}; Python "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs shared with other work).",
        "",
        f"Median wall milliseconds of `greedy.solve` per plan, warm, over {rounds} rounds x {repeats} runs per "
        f"version; the versions run in turns. `before`: revision `{against}`; `after`: this tree. The objectives "
        "are each version's own (equal when the plans are: `tests/test_greedy_reference.py` holds the plans).",
        "",
        "| scenario | G x jobs | config | before ms | after ms | speed-up | before objective | after objective |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key in info["after"]:
        family, config = key.split("/")
        before = statistics.median(samples["before"][key])
        after = statistics.median(samples["after"][key])
        lines.append(
            f"| {family} | {info['after'][key]['size']} | {config} | {before:.2f} | {after:.2f} | "
            f"{before / after:.1f}x | {info['before'][key]['objective']:.3f} | {info['after'][key]['objective']:.3f} |"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line entry: run, print, write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="git revision to compare with (e.g. f26cfa3)")
    parser.add_argument("--rounds", type=int, default=3, help="turns per version")
    parser.add_argument("--repeats", type=int, default=7, help="timed plans per scenario, configuration and turn")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "greedy_speed.md", help="results file"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1:
        print("greedy_speed: --rounds and --repeats must be positive", file=sys.stderr)
        return 2
    report = run(args.against, args.rounds, args.repeats)
    print(report)
    write_text_atomic(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
