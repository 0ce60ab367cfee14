"""The live planner on real demand: days of the public traces replayed as they happened (issue 47).

Each run of consecutive days comes from the shipped trace data (``benchmarks/data/traces``) through
:func:`gpu_env.trace_runs.trace_run`: the Alibaba GenAI LoRA requests (one app, ``imagegen``) and the two SenseTime
Helios VCs together (``vc6YE``, ``vcvlY``), at 32 and 64 GPUs, 60-minute slots. Each day carries its own jobs (the
Alibaba pod trace's day paired with it), the demand that came (one scale per app, fitted on the first week) and the
forecast made for it from the days before (``mean:7``: each slot's mean over the seven days before). Every day after
the first week is played live, its history the seven recorded days before it (each with its forecast; six for the
first played day, since demand day 0 has no day before it to be forecast from), by:

- ``anticipate`` and its base arm ``anticipate-base``;
- rolling greedy and ``greedy-newsvendor``;
- online ``backfill`` and ``fifo``, both holding the apps' peak;
- ``anticipate-oracle``: the planner told the day's demand (the information limit of the forecast);

against the hindsight optimum of the same realized day (CP-SAT with every job and the demand known, greedy as a
floor). The report pools each planner's objective over the days (sum over sum), gives every day's ratio, lists the
days whose optimum is not positive by their shortfall in GPU-slots, and names each day more than 0.02 below backfill
with the cause its decision trace gives. Tuning days (Helios demand days up to 18, LoRA up to 13) are reported apart
from the later, unseen days. The error model's calibration on each run's tuning days closes the report.

    PYTHONPATH=. .venv/bin/python benchmarks/real_demand.py --parallel 2

writes ``benchmarks/results/real_demand.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from agents.live.error_model import calibration
from agents.live.forecast import replayed
from agents.simulator.hindsight import BENCHMARK_OPTIONS, plan_hindsight
from agents.simulator.simulation import realized_day
from gpu_env.scenario import Scenario
from gpu_env.trace_runs import RunRequest, trace_run
from gpu_env.traces import TRACE_FAMILIES
from lab.benchmarking import commit, machine, table, write_report
from lab.live_arms import Settings, play

PLANNERS = (
    "anticipate",
    "anticipate-base",
    "greedy",
    "greedy-newsvendor",
    "backfill",
    "fifo",
    "anticipate-oracle",
)
TRACES: dict[str, str] = {"lora": "trace-alibaba", "helios": "trace-helios"}
"""The runs by name: the trace family whose mapping they use (``gpualloc from-trace --family F``): LoRA alone, peak
0.4 of the cluster; both Helios VCs, peak 0.5."""
TUNING_LAST = {"lora": 13, "helios": 18}
"""The last demand day of each trace that tuning may look at; later days are reported as unseen."""
HISTORY_DAYS = 7
FIRST_PLAYED = 7
"""Demand days before this one are the first week: they fit the scales and serve as history only."""
BELOW = 0.02
"""A day more than this share of its optimum below backfill (or rolling greedy) is named."""
OUT = Path(__file__).resolve().parent / "results" / "real_demand"


@dataclass(frozen=True)
class DayTask:
    """One played day: the run it belongs to, the day and its history (recorded scenarios)."""

    trace: str
    gpus: int
    demand_day: int
    date: str
    day: Scenario
    history: tuple[Scenario, ...]
    planners: tuple[str, ...]


def recorded_run(trace: str, gpus: int) -> list[tuple[Scenario, dict[str, Any]]]:
    """Every recorded day of a trace's run at ``gpus`` GPUs (demand days 1..), with its manifest entry.

    The same days as ``gpualloc from-trace --family F --gpus G --run DIR --first-day 1 --fit-first 0`` writes.
    """
    spec = replace(TRACE_FAMILIES[TRACES[trace]], name=f"real-{trace}-{gpus}", gpus=gpus)
    run = trace_run(RunRequest(spec, first_day=1, fit_days=FIRST_PLAYED, fit_first=0))
    return list(run.days)


def tasks(
    traces: Sequence[str], sizes: Sequence[int], planners: Sequence[str], days: int | None, tuning: bool = False
) -> list[DayTask]:
    """Every played day of every run: demand days from :data:`FIRST_PLAYED`, each with the seven days before.

    ``tuning``: the tuning days only (:data:`TUNING_LAST`); ``days``: the first ``days`` of each run only.
    """
    out = []
    for trace in traces:
        for gpus in sizes:
            run = recorded_run(trace, gpus)
            by_day = {int(entry["demand_day"]): scenario for scenario, entry in run}
            dates = {int(entry["demand_day"]): _date(entry.get("date", "")) for _, entry in run}
            last = TUNING_LAST[trace] if tuning else max(by_day)
            played = [d for d in sorted(by_day) if FIRST_PLAYED <= d <= last]
            for d in played[:days]:
                history = tuple(by_day[k] for k in range(d - HISTORY_DAYS, d) if k in by_day)
                out.append(DayTask(trace, gpus, d, dates[d], by_day[d], history, tuple(planners)))
    return out


def _date(value: Any) -> str:
    """A manifest entry's date: one per demand source, the same calendar day for all of them here."""
    if isinstance(value, dict):
        return "/".join(dict.fromkeys(str(v) for v in value.values()))
    return str(value)


def play_task(task: DayTask) -> list[dict[str, Any]]:
    """Every planner on one recorded day, against the hindsight optimum of the day as it came."""
    planned, actual = replayed(task.day)
    runtimes = {job.id: job.duration for job in planned.jobs}
    realized = realized_day(planned, actual, runtimes)
    best = plan_hindsight(realized, BENCHMARK_OPTIONS, scheduler="cpsat", floor="greedy")
    starts = {p.job: p.start for p in best.plan.placements}
    settings = Settings(sigmas=(0.0,), runtimes=("exact",), planners=task.planners, history_days=HISTORY_DAYS)
    rows = []
    for name in task.planners:
        started = time.perf_counter()
        row = play(name, planned, realized, runtimes, list(task.history), "exact", task.demand_day, settings, starts)
        row.update(
            trace=task.trace,
            gpus=task.gpus,
            demand_day=task.demand_day,
            date=task.date,
            unseen=task.demand_day > TUNING_LAST[task.trace],
            reference=round(best.reference, 6),
            day_wall_s=round(time.perf_counter() - started, 3),
        )
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- the report


def pooled(rows: Sequence[dict[str, Any]], planner: str) -> float | None:
    """Sum of the planner's objectives over the sum of the optima, over the days whose optimum is positive."""
    mine = [r for r in rows if r["planner"] == planner and r["reference"] > 0 and r["objective"] is not None]
    ref = sum(r["reference"] for r in mine)
    return sum(r["objective"] for r in mine) / ref if ref > 0 else None


def _ratio(row: dict[str, Any]) -> float | None:
    if row["objective"] is None or row["reference"] <= 0:
        return None
    return row["objective"] / row["reference"]


def _cause(row: dict[str, Any]) -> str:
    """The decision trace's account of a day: its shortfall and the first late starts with their causes."""
    late = row.get("late") or []
    causes = "; ".join(x["line"] for x in late[:3]) or "no late start"
    return f"shortfall {row.get('shortfall', 0)} GPU-slots; {causes}"


def report(rows: list[dict[str, Any]], command: str, wall: float) -> list[str]:
    planners = list(dict.fromkeys(r["planner"] for r in rows))
    lines = [
        "# The live planner on real demand",
        "",
        f"- Command: `{command}`",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M %Z')}; commit {commit()}",
        f"- Machine: {machine()}; {wall / 60:.1f} min wall.",
        "",
        "Days of the public traces replayed as they came (`benchmarks/real_demand.py` says how they are built). Each "
        "figure is a share of the hindsight optimum of the same realized day. Pooled: the sum of the objectives over "
        "the sum of the optima, over the days whose optimum is positive.",
        "",
        f"**Validation: {sum(bool(r['valid']) for r in rows)} of {len(rows)} executed days passed the validator.**",
        "",
    ]
    for part, keep in (("tuning days", False), ("unseen days", True)):
        sel = [r for r in rows if r["unseen"] == keep]
        lines += [f"## Pooled ratio, {part}", ""]
        head = ["trace", "GPUs", "days", *planners]
        body = []
        for trace in TRACES:
            for gpus in sorted({r["gpus"] for r in sel}):
                group = [r for r in sel if r["trace"] == trace and r["gpus"] == gpus]
                if not group:
                    continue
                n = len({r["demand_day"] for r in group})
                body.append([trace, gpus, n, *(_fmt(pooled(group, p)) for p in planners)])
            group = [r for r in sel if r["trace"] == trace]
            if group:
                n = len({(r["gpus"], r["demand_day"]) for r in group})
                body.append([f"**{trace}, all**", "", n, *(_fmt(pooled(group, p)) for p in planners)])
        lines += [table(head, body), ""]
    lines += ["## Every trace, all days", ""]
    body = []
    for trace in TRACES:
        group = [r for r in rows if r["trace"] == trace]
        if group:
            body.append([trace, *(_fmt(pooled(group, p)) for p in planners)])
    lines += [table(["trace", *planners], body), ""]
    lines += _days_below(rows, "backfill") + _days_below(rows, "greedy") + _nonpositive(rows) + _per_day(rows, planners)
    lines += _cycles(rows)
    return lines


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _days_below(rows: list[dict[str, Any]], other: str) -> list[str]:
    by = {(r["trace"], r["gpus"], r["demand_day"], r["planner"]): r for r in rows}
    lines = [f"## Days on which anticipate is more than {BELOW} below {other}", ""]
    body = []
    for (trace, gpus, day, planner), r in sorted(by.items()):
        if planner != "anticipate" or (trace, gpus, day, other) not in by:
            continue
        o = by[(trace, gpus, day, other)]
        if r["reference"] <= 0 or r["objective"] is None or o["objective"] is None:
            continue
        gap = (r["objective"] - o["objective"]) / r["reference"]
        if gap < -BELOW:
            body.append([trace, gpus, day, r["date"], f"{_ratio(r):.3f}", f"{_ratio(o):.3f}", f"{gap:+.3f}", _cause(r)])
    if not body:
        return [*lines, "None.", ""]
    head = ["trace", "GPUs", "day", "date", "anticipate", other, "gap", "cause (decision trace)"]
    return [*lines, table(head, body, right=4), ""]


def _nonpositive(rows: list[dict[str, Any]]) -> list[str]:
    days = sorted({(r["trace"], r["gpus"], r["demand_day"]) for r in rows if r["reference"] <= 0})
    lines = ["## Days whose optimum is not positive (by shortfall, GPU-slots)", ""]
    if not days:
        return [*lines, "None.", ""]
    planners = list(dict.fromkeys(r["planner"] for r in rows))
    by = {(r["trace"], r["gpus"], r["demand_day"], r["planner"]): r for r in rows}
    body = [[*d, *(by[(*d, p)].get("shortfall", "n/a") for p in planners)] for d in days]
    return [*lines, table(["trace", "GPUs", "day", *planners], body), ""]


def _per_day(rows: list[dict[str, Any]], planners: list[str]) -> list[str]:
    by = {(r["trace"], r["gpus"], r["demand_day"], r["planner"]): r for r in rows}
    days = sorted({(r["trace"], r["gpus"], r["demand_day"]) for r in rows})
    body = []
    for d in days:
        first = by[(*d, planners[0])]
        cells = [_fmt(_ratio(by[(*d, p)])) if (*d, p) in by else "" for p in planners]
        body.append([*d, first["date"], "unseen" if first["unseen"] else "tuning", f"{first['reference']:.1f}", *cells])
    head = ["trace", "GPUs", "day", "date", "set", "optimum", *planners]
    return ["## Every day: ratio to the hindsight optimum", "", table(head, body, right=5), ""]


def _cycles(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["## Cycle time of anticipate (ms)", ""]
    body = []
    for gpus in sorted({r["gpus"] for r in rows}):
        ms = [x for r in rows if r["planner"] == "anticipate" and r["gpus"] == gpus for x in r["cycle_ms"]]
        if ms:
            body.append([gpus, len(ms), f"{np.median(ms):.1f}", f"{np.percentile(ms, 95):.1f}", f"{max(ms):.1f}"])
    return [*lines, table(["GPUs", "cycles", "median", "p95", "max"], body), ""]


def calibration_lines(traces: Sequence[str], gpus: int) -> list[str]:
    """The error model's band coverage by lead on each run's tuning days (each left out in turn)."""
    lines = [
        "## Calibration of the error model (tuning days, each left out in turn)",
        "",
        "Share of (slot, app) cells whose realized demand fell inside the central band of 64 futures, by lead.",
        "",
    ]
    for trace in traces:
        days = [s for s, e in recorded_run(trace, gpus) if FIRST_PLAYED <= int(e["demand_day"]) <= TUNING_LAST[trace]]
        table_ = calibration(days, samples=64)
        lines += [f"**{trace}, {gpus} GPUs, {table_.days} days ({table_.source} errors):**", "", table_.table(), ""]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", default="lora,helios", help="comma-separated: lora, helios (both)")
    parser.add_argument("--sizes", default="32,64", help="GPU counts (32,64)")
    parser.add_argument("--planners", default=",".join(PLANNERS), help="comma-separated (" + ",".join(PLANNERS) + ")")
    parser.add_argument("--days", type=int, default=None, metavar="N", help="play only the first N days of each run")
    parser.add_argument("--tuning", action="store_true", help="play the tuning days only (the variants' study)")
    parser.add_argument("--no-calibration", action="store_true", help="skip the error model's calibration table")
    parser.add_argument("--parallel", type=int, default=1, metavar="N", help="days played at once (1)")
    parser.add_argument("--out", type=Path, default=OUT, metavar="STEM", help="output stem")
    args = parser.parse_args(argv)
    traces = [t for t in args.traces.split(",") if t]
    unknown = [t for t in traces if t not in TRACES]
    if unknown:
        print(f"real_demand: --traces: unknown {unknown} (expected {', '.join(TRACES)})", file=sys.stderr)
        return 2
    sizes = [int(x) for x in args.sizes.split(",") if x]
    planners = [p for p in args.planners.split(",") if p]
    started = time.perf_counter()
    work = tasks(traces, sizes, planners, args.days, args.tuning)
    print(f"{len(work)} days x {len(planners)} planners", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        for i, result in enumerate(pool.map(play_task, work)):
            rows += result
            t = work[i]
            mine = {r["planner"]: _ratio(r) for r in result}
            shown = ", ".join(f"{p} {_fmt(v)}" for p, v in mine.items())
            print(f"[{i + 1}/{len(work)}] {t.trace} {t.gpus} GPUs day {t.demand_day}: {shown}", file=sys.stderr)
    command = "PYTHONPATH=. .venv/bin/python benchmarks/real_demand.py " + " ".join(argv or sys.argv[1:])
    lines = report(rows, command.strip(), time.perf_counter() - started)
    if not args.no_calibration:
        lines += calibration_lines(traces, min(sizes))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_report(args.out.with_suffix(".md"), lines, command)
    slim = [{k: v for k, v in r.items() if k != "traceback"} for r in rows]
    args.out.with_suffix(".json").write_text(json.dumps(slim, indent=0))
    print(f"wrote {args.out}.md, .json: {len(rows)} executed days", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
