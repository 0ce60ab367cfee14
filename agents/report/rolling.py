"""The rolling-horizon comparison reported: one simulated day's files, and open loop against rolling over many.

:func:`write_simulation` writes what ``gpualloc simulate -o`` leaves behind;
:func:`summarise` and :func:`pooled` turn the rows of
:func:`agents.simulator.compare` into means with 95 % confidence intervals and
paired gains, :func:`markdown_table` and :func:`pooled_table` into Markdown, and
:func:`evaluation_section` runs the comparison for ``evaluate.py --rolling``
(files, figure and the report's section). The figures are in
:mod:`agents.report.rolling_figures`.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from agents.fanout import Backend, Run, TaskResult
from agents.options import PlanOptions
from agents.report.statistics import mean_ci
from agents.simulator.decisions import LATE_SLACK, late_starts, trace_table
from agents.simulator.hindsight import Hindsight
from agents.simulator.simulation import MODES, Simulation, SlotRecord
from agents.simulator.tasks import compare_tasks
from gpu_env.files import write_text_atomic
from gpu_env.scenario import Scenario, save_scenario
from gpu_env.validation import validate

# ----------------------------------------------------------------------------- one simulated day


def write_simulation(
    directory: str | Path,
    roll: Simulation,
    fixed: Simulation,
    settings: Mapping[str, Any],
    picture: bool = True,
    hindsight: Hindsight | None = None,
) -> list[Path]:
    """Write ``actual.yaml``, ``executed.json``, ``open_loop.json``, ``metrics.json``, ``decisions.md`` and a picture.

    ``decisions.md`` is the decision trace (:mod:`agents.simulator.decisions`): each re-plan's margin, the
    candidate taken and the planned starts that moved; with ``hindsight``, the jobs that started late
    against the hindsight plan, each with its cause.

    Args:
        directory: The folder (made when missing).
        roll: The rolling simulation.
        fixed: The open-loop simulation on the same realized day.
        settings: The options of the run, copied into ``metrics.json``.
        picture: Draw ``simulation.png``.
        hindsight: The realized day planned with hindsight (:func:`agents.simulator.plan_hindsight`):
            also ``hindsight.json``, its numbers under ``metrics.json``'s ``hindsight`` (and its
            validation), and its allocation in the picture.

    Returns:
        The files written.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    save_scenario(roll.actual, directory / "actual.yaml")
    written.append(directory / "actual.yaml")
    roll.executed.save(directory / "executed.json")
    written.append(directory / "executed.json")
    fixed.executed.save(directory / "open_loop.json")
    written.append(directory / "open_loop.json")
    if hindsight is not None:
        hindsight.plan.save(directory / "hindsight.json")
        written.append(directory / "hindsight.json")
    forecast, actual = roll.forecast.demand, roll.actual.demand
    data: dict[str, Any] = {
        "scenario": roll.forecast.name,
        "scheduler": roll.scheduler,
        **dict(settings),
        "forecast_error": {
            "abs_gpu_slots": int(np.abs(actual - forecast).sum()),
            "relative": round(float(np.abs(actual - forecast).sum() / max(1, forecast.sum())), 4),
            "actual_above_forecast_gpu_slots": int(np.maximum(0, actual - forecast).sum()),
        },
        "rolling": roll.summary(),
        "open_loop": fixed.summary(),
        "rolling_minus_open": round(roll.metrics.objective - fixed.metrics.objective, 6),
        "validation": {
            "executed": [str(v) for v in validate(roll.actual, roll.executed)],
            "open_loop": [str(v) for v in validate(fixed.actual, fixed.executed)],
        },
    }
    if hindsight is not None:
        data["hindsight"] = hindsight.summary(roll.metrics.objective, fixed.metrics.objective)
        data["validation"]["hindsight"] = list(hindsight.violations)
    data["slots"] = [_record_dict(r) for r in roll.slots]
    write_text_atomic(directory / "metrics.json", json.dumps(data, indent=1) + "\n")
    written.append(directory / "metrics.json")
    write_text_atomic(directory / "decisions.md", decisions_markdown(roll, hindsight))
    written.append(directory / "decisions.md")
    if picture:
        from agents.report.rolling_figures import plot_simulation
        from gpu_env.render import save_figure

        written.append(save_figure(plot_simulation(roll, fixed, hindsight), directory / "simulation.png"))
    return written


def decisions_markdown(roll: Simulation, hindsight: Hindsight | None = None) -> str:
    """A simulated day's decision trace as Markdown: late starts against hindsight (when given), then each cycle."""
    doc = [f"# Decisions of {roll.scheduler} on {roll.forecast.name}", ""]
    if hindsight is not None:
        late = late_starts(roll.slots, roll.executed, hindsight.plan)
        doc += [
            f"## Late starts (more than {LATE_SLACK} slots after the hindsight plan's start, or never)",
            "",
            *([f"- {x.describe()}" for x in late] or ["None."]),
            "",
        ]
    margins = Counter(r.margin for r in roll.slots if r.replanned and r.margin)
    if margins:
        total = sum(margins.values())
        doc += [
            "Margins the apps were planned at: "
            + ", ".join(f"{m} ({n} of {total} cycles)" for m, n in margins.most_common()),
            "",
        ]
    doc += ["## Every cycle", "", trace_table(roll.slots)]
    return "\n".join(doc)


def _record_dict(r: SlotRecord) -> dict[str, Any]:
    # metrics.json keeps its key "realtime" for SlotRecord.app_gpus (same place in the record)
    data = {("realtime" if key == "app_gpus" else key): value for key, value in asdict(r).items()}
    data["started"] = [{"job": p.job, "gpus": list(p.gpus)} for p in r.started]
    data["running"] = list(r.running)
    data["solve_ms"] = round(r.solve_ms, 3)
    return data


# ----------------------------------------------------------------------------- comparisons


def summarise(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (scenario, scheduler, sigma): mean realised objective of each mode with 95 % CIs, and the paired gain.

    ``gain`` is rolling minus open loop on the same actual demand, averaged over
    seeds; ``gain_ci`` its 95 % half-width; ``wins`` the seeds where rolling earned more.
    """
    table: dict[tuple[str, str, float], dict[str, dict[int, Mapping[str, Any]]]] = {}
    for r in rows:
        key = (r["scenario"], r["scheduler"], float(r["sigma"]))
        table.setdefault(key, {}).setdefault(r["mode"], {})[int(r["seed"])] = r
    out = []
    for (scenario, scheduler, sigma), modes in table.items():
        entry: dict[str, Any] = {"scenario": scenario, "scheduler": scheduler, "sigma": sigma}
        for mode in MODES:
            runs = modes.get(mode, {})
            mean, ci = mean_ci(r["objective"] for r in runs.values())
            entry[f"{mode}_objective"] = mean
            entry[f"{mode}_ci"] = ci
            entry[f"{mode}_shortfall"] = float(np.mean([r["shortfall"] for r in runs.values()])) if runs else math.nan
            entry[f"{mode}_valid"] = all(r.get("valid", True) for r in runs.values())
            entry[f"{mode}_solve_ms_max"] = max((r["solve_ms_max"] for r in runs.values()), default=math.nan)
        paired = sorted(set(modes.get("open", {})) & set(modes.get("rolling", {})))
        diffs = [modes["rolling"][s]["objective"] - modes["open"][s]["objective"] for s in paired]
        entry["gain"], entry["gain_ci"] = mean_ci(diffs)
        entry["wins"] = sum(d > 1e-9 for d in diffs)
        entry["seeds"] = len(paired)
        out.append(entry)
    out.sort(key=lambda e: (e["scenario"], e["scheduler"], e["sigma"]))
    return out


def _fmt(mean: float, ci: float) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.1f}" if math.isnan(ci) else f"{mean:.1f} ± {ci:.1f}"


def markdown_table(summary: Sequence[Mapping[str, Any]]) -> str:
    """The summary as a Markdown table: one row per scenario, scheduler and forecast error."""
    lines = [
        "| scenario | scheduler | sigma | open loop | rolling | rolling - open (paired) | rolling wins | "
        "shortfall open / rolling |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for e in summary:
        valid = "" if e["open_valid"] and e["rolling_valid"] else " (INVALID)"
        lines.append(
            f"| {e['scenario']} | {e['scheduler']}{valid} | {e['sigma']:g} | "
            f"{_fmt(e['open_objective'], e['open_ci'])} | {_fmt(e['rolling_objective'], e['rolling_ci'])} | "
            f"{_fmt(e['gain'], e['gain_ci'])} | {e['wins']}/{e['seeds']} | "
            f"{e['open_shortfall']:.1f} / {e['rolling_shortfall']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def pooled(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (scheduler, sigma), over every scenario and seed: rolling's paired gain in % of a nominal objective.

    Each pair's gain (rolling minus open loop on the same actual demand) is
    divided by the open-loop objective of the same scenario and scheduler with an
    exact forecast (sigma 0) when the rows hold it, else by the pair's own
    open-loop objective, so that scenarios of different scale pool.

    Returns:
        One entry per (scheduler, sigma) with ``gain_pct`` and its 95 % half-width
        ``gain_pct_ci``, ``wins`` (pairs where rolling earned more) and ``pairs``.
    """
    by: dict[tuple[str, str, float, int], dict[str, float]] = {}
    nominal: dict[tuple[str, str], float] = {}
    for r in rows:
        key = (r["scenario"], r["scheduler"], float(r["sigma"]), int(r["seed"]))
        by.setdefault(key, {})[r["mode"]] = r["objective"]
        if r["mode"] == "open" and float(r["sigma"]) == 0.0:
            nominal[(r["scenario"], r["scheduler"])] = r["objective"]
    groups: dict[tuple[str, float], list[float]] = {}
    for (scenario, scheduler, sigma, _), modes in by.items():
        if "open" in modes and "rolling" in modes:
            base = abs(nominal.get((scenario, scheduler), modes["open"])) or 1.0
            groups.setdefault((scheduler, sigma), []).append(100.0 * (modes["rolling"] - modes["open"]) / base)
    order = {name: i for i, name in enumerate(dict.fromkeys(r["scheduler"] for r in rows))}
    out = []
    for (scheduler, sigma), gains in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        mean, ci = mean_ci(gains)
        out.append(
            {
                "scheduler": scheduler,
                "sigma": sigma,
                "gain_pct": mean,
                "gain_pct_ci": ci,
                "wins": sum(g > 1e-9 for g in gains),
                "pairs": len(gains),
            }
        )
    return out


def pooled_table(entries: Sequence[Mapping[str, Any]]) -> str:
    """The pooled gains as a Markdown table: one row per scheduler, one column per forecast error."""
    sigmas = sorted({e["sigma"] for e in entries})
    names = list(dict.fromkeys(e["scheduler"] for e in entries))
    by = {(e["scheduler"], e["sigma"]): e for e in entries}
    lines = [
        "| scheduler | " + " | ".join(f"sigma {s:g}" for s in sigmas) + " |",
        "| --- | " + " | ".join("---:" for _ in sigmas) + " |",
    ]
    for name in names:
        cells = []
        for s in sigmas:
            e = by.get((name, s))
            if e is None:
                cells.append("-")
                continue
            ci = "" if math.isnan(e["gain_pct_ci"]) else f" ± {e['gain_pct_ci']:.1f}"
            cells.append(f"{e['gain_pct']:+.1f} %{ci} ({e['wins']}/{e['pairs']})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def evaluation_section(
    scenarios: Sequence[Scenario],
    schedulers: Sequence[str],
    sigmas: Sequence[float],
    seeds: Sequence[int],
    out: str | Path,
    options: PlanOptions,
    *,
    open_options: PlanOptions | None = None,
    replan_every: int = 1,
    figures: bool = True,
    show_progress: bool = True,
    command: str = "",
    backend: Backend | None = None,
    timeout: float | None = None,
) -> tuple[str, Run]:
    """Run the comparison and write ``rolling.csv``, ``rolling.json`` and ``figures/rolling.png`` under ``out``.

    The comparison runs as one task per scenario and scheduler
    (:func:`agents.simulator.compare_tasks`) over ``backend``; the progress bar counts
    finished tasks. A task that raised has no rows, and one whose executed schedules break
    a rule is failed too: the section names both, as :meth:`Run.failure_lines` does.

    Returns:
        The report's Markdown section (pooled gains, then every scenario in a folded table) and the run.
    """
    from tqdm import tqdm

    out = Path(out)
    total = len(scenarios) * len(schedulers)
    with tqdm(total=total, desc="rolling", unit="task", file=sys.stderr, disable=not show_progress) as bar:

        def finished(index: int, result: TaskResult) -> None:
            bar.set_postfix_str(f"{result.scenario} / {result.planner}")
            bar.update(1)

        rows, run = compare_tasks(
            scenarios,
            schedulers,
            sigmas,
            seeds,
            backend=backend,
            timeout=timeout,
            on_result=finished,
            replan_every=replan_every,
            options=dict.fromkeys(schedulers, options),
            open_options=dict.fromkeys(schedulers, open_options or options),
        )
    summary = summarise(rows)
    gains = pooled(rows)
    columns = list(rows[0]) if rows else []
    lines = [",".join(columns)] + [",".join(str(r[c]) for c in columns) for r in rows]
    write_text_atomic(out / "rolling.csv", "\n".join(lines) + "\n")
    document = {
        "command": command,
        "backend": run.backend,
        "failed_tasks": run.failure_lines(),
        "rows": rows,
        "summary": summary,
        "pooled": gains,
    }
    write_text_atomic(out / "rolling.json", json.dumps(document, indent=1, default=float) + "\n")
    parts = [
        "## Rolling horizon under forecast error",
        f"Open loop (one plan at slot 0 on the forecast, knowing the day's jobs, executed unchanged) against "
        f"rolling re-planning every {replan_every} slot(s) (jobs revealed at release, forecast corrected by the "
        f"demand observed so far, only the current slot committed), on the same actual demand drawn around the "
        f"forecast with relative error sigma (docs/rolling.md). {len(seeds)} seeds per sigma; time limit "
        f"{options.time_limit:g} s per re-plan, {(open_options or options).time_limit:g} s for the open-loop plan. "
        "Every executed schedule was checked by the validator against the actual demand"
        + ("." if all(r["valid"] for r in rows) else ": SOME ARE INVALID, see rolling.json.")
        + f" Run by: {run.backend}."
        + "".join(f"\n\n**Failed task** (an error leaves no rows): {line}" for line in run.failure_lines() if line),
        "Rolling minus open loop, pooled over scenarios, in % of each scenario's open-loop objective with an exact "
        "forecast (mean ± 95 % CI over scenario x seed pairs; in brackets the pairs where rolling earned more):",
        pooled_table(gains),
    ]
    if figures and summary:
        from agents.report.rolling_figures import plot_rolling_curve
        from gpu_env.render import save_figure

        path = save_figure(plot_rolling_curve(summary, gains), out / "figures" / "rolling.png")
        parts.append(f"![Realised objective against forecast error]({path.relative_to(out).as_posix()})")
    parts.append(
        "<details><summary>Every scenario, scheduler and sigma (realised objective, mean ± 95 % CI over seeds)"
        "</summary>\n\n" + markdown_table(summary) + "\n</details>"
    )
    return "\n\n".join(parts), run
