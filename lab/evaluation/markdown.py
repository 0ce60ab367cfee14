"""The evaluation report in Markdown: header, failures, summary tables, one section per scenario.

``docs/report.md`` explains every column.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lab.evaluation.evaluation import BASELINE, Evaluation, ScenarioResult
from lab.evaluation.results import result_rows

REPOSITORY = Path(__file__).resolve().parents[2]
"""The checkout this module lies in: links to its docs/ and scenario paths are written relative to it."""


def _num(value: float | None, fmt: str = "{:.1f}", none: str = "–") -> str:
    return none if value is None else fmt.format(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str | None = None) -> str:
    align = align or "l" + "r" * (len(header) - 1)
    marks = {"l": "---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks[a] for a in align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _doc_link(name: str, out: Path | None) -> str:
    """A link from the report to docs/<name>, relative when the report lies inside the repository."""
    target = REPOSITORY / "docs" / name
    if out is not None:
        try:
            out.resolve().relative_to(REPOSITORY)
        except ValueError:
            pass
        else:
            return f"[docs/{name}]({Path(os.path.relpath(target, out.resolve())).as_posix()})"
    return f"`docs/{name}` in the repository"


def render_report(evaluation: Evaluation, rows: Sequence[dict[str, Any]] | None = None, out: Path | None = None) -> str:
    """The Markdown report: header, failures, summary, one section per scenario, extra sections.

    Args:
        evaluation: The run.
        rows: Its result rows (computed when None).
        out: The folder the report goes to, for relative links to docs/.
    """
    rows = list(rows) if rows is not None else result_rows(evaluation)
    parts = [_report_header(evaluation)]
    failures = _report_failures(evaluation)
    if failures:
        parts.append(failures)
    parts.append(_report_summary(evaluation, rows))
    parts.append("## Scenarios")
    for result in evaluation.results:
        parts.append(_report_scenario(evaluation, result, [r for r in rows if r["scenario"] == result.scenario.name]))
    parts.extend(evaluation.sections)
    parts.append(
        f"---\n\nColumns, figures and how each number is computed: {_doc_link('report.md', out)} "
        f"(the rules and metrics: {_doc_link('SPEC.md', out)})."
    )
    return "\n\n".join(p.strip("\n") for p in parts) + "\n"


def _report_header(evaluation: Evaluation) -> str:
    o = evaluation.options
    n = len(evaluation.results)
    return (
        "# Evaluation report\n\n"
        f"{n} scenario{'s' * (n != 1)}, schedulers {', '.join(f'`{s}`' for s in evaluation.schedulers)}; "
        f"time limit {o.time_limit:g} s, seed {o.seed}, {o.workers} worker{'s' * (o.workers != 1)}, "
        + (
            f"ppo with {o.samples} sample{'s' * (o.samples != 1)} and guard {o.guard.value}, "
            if "ppo" in evaluation.schedulers
            else ""
        )
        + f"on a machine with {os.cpu_count()} CPU cores. Planned by: {evaluation.backend} "
        f"({n * len(evaluation.schedulers)} tasks in {evaluation.wall_s:.1f} s).\n\n"
        f"Reproduce with `{evaluation.command}`. Objective is the priority-weighted value "
        "(job value minus real-time shortfall penalties, SPEC section 3); every plan was checked by the validator."
    )


def _report_failures(evaluation: Evaluation) -> str:
    failures = evaluation.failures()
    if not failures and not evaluation.task_failures:
        return ""
    lines = [f"## ⚠ INVALID OR FAILED PLANS: {len(failures) + len(evaluation.task_failures)}", ""]
    # An entry's first line names the task; the traceback under it is for stderr, not the report.
    lines += [f"- **a task of another section failed**: {e.splitlines()[0]}" for e in evaluation.task_failures]
    for scenario, outcome in failures:
        if outcome.error is not None:
            lines.append(f"- **{scenario} / {outcome.scheduler}: the scheduler failed**: `{outcome.error}`")
            continue
        lines.append(f"- **{scenario} / {outcome.scheduler}: {len(outcome.violations)} violation(s)**")
        lines += [f"  - {v}" for v in outcome.violations[:20]]
        if len(outcome.violations) > 20:
            lines.append(f"  - ... and {len(outcome.violations) - 20} more (see results.json)")
    lines.append("\nThese plans are left out of the figures; their numbers are not comparable.")
    return "\n".join(lines)


def _report_summary(evaluation: Evaluation, rows: Sequence[dict[str, Any]]) -> str:
    names = evaluation.schedulers
    by = {(r["scenario"], r["scheduler"]): r for r in rows}
    scenarios = [r.scenario.name for r in evaluation.results]
    others = [n for n in names if n != BASELINE]

    def cell(s: str, n: str, key: str, fmt: str, mark: bool = True) -> str:
        r = by.get((s, n))
        if r is None or r[key] is None:
            return "–"
        text = fmt.format(r[key])
        return text if r["valid"] or not mark else f"{text} ✗"

    def mean(n: str, key: str, scale: float = 1.0) -> float | None:
        valid = [by[(s, n)] for s in scenarios if (s, n) in by and by[(s, n)]["valid"]]
        values = [r[key] for r in valid if r[key] is not None]
        return scale * sum(values) / len(values) if values else None

    parts = ["## Summary"]
    if others:
        body = [[s] + [cell(s, n, "objective_vs_fifo_pct", "{:+.1f} %") for n in others] for s in scenarios]
        body.append(["**mean**"] + [f"**{_num(mean(n, 'objective_vs_fifo_pct'), '{:+.1f} %')}**" for n in others])
        parts.append("Objective (priority-weighted value) against FIFO:\n\n" + _table(["scenario", *others], body))
    body = [[s] + [cell(s, n, "utilization", "{:.1%}").replace("%", " %") for n in names] for s in scenarios]
    body.append(["**mean**"] + [f"**{_num(mean(n, 'utilization', 100.0), '{:.1f} %')}**" for n in names])
    parts.append(
        "Utilisation (GPU-slots held by jobs or serving real-time demand):\n\n" + _table(["scenario", *names], body)
    )
    body = [[s] + [cell(s, n, "solve_ms", "{:.1f}", mark=False) for n in names] for s in scenarios]
    body.append(["**mean**"] + [f"**{_num(mean(n, 'solve_ms'), '{:.1f}')}**" for n in names])
    parts.append("Plan time (ms, wall clock, one process):\n\n" + _table(["scenario", *names], body))
    if "summary" in evaluation.figures:
        parts.append(f"![Summary: objective against FIFO and utilisation]({evaluation.figures['summary']})")
    if any(o.error is None and not o.valid for _, o in evaluation.failures()):
        parts.append("✗ marks an invalid plan; means are over valid plans only.")
    return "\n\n".join(parts)


def _report_scenario(evaluation: Evaluation, result: ScenarioResult, rows: Sequence[dict[str, Any]]) -> str:
    sc = result.scenario
    nodes = f" (nodes of {sc.node_size})" if sc.node_size < sc.gpus else ""
    inherited = sum(job.running_on is not None for job in sc.jobs)
    apps = ", ".join(a.name for a in sc.apps) or "none"
    origin = f"; family `{sc.family}`, seed {sc.seed}" if sc.family is not None else ""
    lines = [
        f"### {sc.name}",
        "",
        f"`{_display_path(result.source)}`: {sc.gpus} GPUs{nodes} x {sc.slots} slots of {sc.slot_minutes:g} min, "
        f"{len(sc.jobs)} jobs ({inherited} inherited), real-time: {apps}{origin}.",
        "",
    ]
    with_gap = any(
        o.plan is not None and "bound" in o.plan.info for r in evaluation.results for o in r.outcomes.values()
    )
    header = [
        "scheduler",
        "objective",
        "vs FIFO",
        "utilisation",
        "vs FIFO",
        "placed",
        "completed",
        "shortfall",
        "plan time (ms)",
    ]
    if with_gap:
        header.append("gap")
    valid_objectives = [r["objective"] for r in rows if r["valid"] and r["objective"] is not None]
    best = max(valid_objectives) if valid_objectives else None
    body = []
    for r in rows:
        if r["objective"] is None:
            body.append([f"`{r['scheduler']}`", "**failed**"] + ["–"] * (len(header) - 2))
            continue
        objective = f"{r['objective']:.1f}"
        if best is not None and r["valid"] and abs(r["objective"] - best) < 1e-6:
            objective = f"**{objective}**"
        if not r["valid"]:
            objective += " ✗ invalid"
        line = [
            f"`{r['scheduler']}`",
            objective,
            "–" if r["scheduler"] == BASELINE else _num(r["objective_vs_fifo_pct"], "{:+.1f} %"),
            f"{100 * r['utilization']:.1f} %",
            "–" if r["scheduler"] == BASELINE else _num(r["utilization_vs_fifo_pts"], "{:+.1f} pts"),
            f"{r['placed']}/{r['jobs']}",
            f"{r['completed']}/{r['jobs']}",
            str(r["shortfall"]),
            f"{r['solve_ms']:.1f}",
        ]
        if with_gap:
            g = r["gap"]
            text = "–" if g is None else ("∞" if g == "inf" else f"{100 * g:.1f} %")
            if r["status"]:
                text += f" ({str(r['status']).lower()})"
            line.append(text)
        body.append(line)
    lines.append(_table(header, body))
    if "allocation" in result.figures:
        lines += ["", f"![{sc.name}: allocation grids]({result.figures['allocation']})"]
    if "realtime" in result.figures:
        lines += ["", f"![{sc.name}: real-time demand and allocation]({result.figures['realtime']})"]
    return "\n".join(lines)


def _display_path(path: Path) -> str:
    try:
        return path.resolve().relative_to(REPOSITORY).as_posix()
    except ValueError:
        return str(path)
