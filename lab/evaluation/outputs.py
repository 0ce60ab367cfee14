"""The files of an evaluation: plans, ``results.csv``, ``results.json``, figures and ``report.md``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpu_env.files import write_text_atomic
from lab.evaluation.evaluation import Evaluation, slugify
from lab.evaluation.markdown import render_report
from lab.evaluation.results import result_rows, results_csv


def write_outputs(evaluation: Evaluation, out: Path, figures: bool = True, show_progress: bool = True) -> Path:
    """Write plans, results.csv, results.json, figures and report.md; return the report's path.

    Every file is written atomically, so a reader never sees half of one.
    """
    for result in evaluation.results:
        for name, outcome in result.outcomes.items():
            if outcome.plan is not None:
                outcome.plan.save(out / "plans" / result.slug / f"{slugify(name)}.json")
    if figures:
        draw_figures(evaluation, out, show_progress)
    rows = result_rows(evaluation)
    write_text_atomic(out / "results.csv", results_csv(rows))
    document = {
        "command": evaluation.command,
        "schedulers": evaluation.schedulers,
        "options": {
            "time_limit": evaluation.options.time_limit,
            "seed": evaluation.options.seed,
            "workers": evaluation.options.workers,
            "policy": str(evaluation.options.policy) if evaluation.options.policy else None,
            "samples": evaluation.options.samples,
            "guard": evaluation.options.guard.value,
        },
        "backend": evaluation.backend,
        "planning_wall_s": round(evaluation.wall_s, 3),
        "results": rows,
    }
    write_text_atomic(out / "results.json", json.dumps(document, indent=1) + "\n")
    report = out / "report.md"
    write_text_atomic(report, render_report(evaluation, rows, out))
    return report


def draw_figures(evaluation: Evaluation, out: Path, show_progress: bool = True) -> None:
    """Per scenario: FIFO beside the best plan, and real-time demand vs allocation; then the summary bars."""
    from tqdm import tqdm

    from gpu_env import render

    folder = out / "figures"
    for result in tqdm(evaluation.results, desc="figures", unit="scenario", file=sys.stderr, disable=not show_progress):
        plans = {name: o.plan for name, o in result.outcomes.items() if o.valid and o.plan is not None}
        if not plans:
            continue
        path = folder / f"{result.slug}-allocation.png"
        render.save_figure(render.plot_comparison(result.scenario, plans), path)
        result.figures["allocation"] = path.relative_to(out).as_posix()
        if result.scenario.apps:
            path = folder / f"{result.slug}-realtime.png"
            render.save_figure(render.plot_realtime(result.scenario, plans), path)
            result.figures["realtime"] = path.relative_to(out).as_posix()
    rows = [r for r in result_rows(evaluation) if r["objective"] is not None]
    if rows:
        path = folder / "summary.png"
        render.save_figure(render.plot_summary(rows), path)
        evaluation.figures["summary"] = path.relative_to(out).as_posix()
