"""Run every scheduler on the benchmark scenarios, validate every plan, and write a report.

    python evaluate.py                                   # configs/scenarios/, every scheduler, into results/
    python evaluate.py --scenarios my.yaml other/ --schedulers fifo,greedy --out /tmp/eval

It writes, under the output folder:

- ``plans/<scenario>/<scheduler>.json``: each plan with its metrics and plan time;
- ``results.csv`` and ``results.json``: one row per scenario and scheduler;
- ``report.md``: a table per scenario, an overall summary, and links to
- ``figures/``: allocation grids (FIFO beside the best plan), real-time demand
  against allocation, and summary bars.

Every plan goes through :func:`gpu_env.validation.validate`; an invalid plan (or a
scheduler that fails) is reported at the top of the report and makes the exit
status 1. Bad input (an unreadable scenario, an unknown scheduler) prints one line
and exits 2 before any planning. ``docs/report.md`` explains every column.

The steps are functions (:func:`run_evaluation`, :func:`evaluate_scenario`,
:func:`result_rows`, :func:`write_outputs`, :func:`render_report`) so that other
modes can add their own sections to :attr:`Evaluation.sections`.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import shlex
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.arguments import add_plan_options, int_at_least, plan_options, positive_float
from agents.options import PlanOptions
from agents.registry import UnknownSchedulerError, available_schedulers, get_scheduler, run_scheduler
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario, ScenarioError, load_scenario, write_text_atomic
from gpu_env.validation import Violation, validate

ROOT = Path(__file__).resolve().parent
DEFAULT_SCENARIOS = ROOT / "configs" / "scenarios"
DEFAULT_OUT = Path("results")
SCENARIO_SUFFIXES = (".yaml", ".yml", ".json")
BASELINE = "fifo"


class InputError(Exception):
    """Bad input to evaluate.py: reported as one line, exit status 2."""


# ----------------------------------------------------------------------------- what a run produces


@dataclass
class Outcome:
    """One scheduler on one scenario.

    Attributes:
        scheduler: The scheduler's name.
        plan: The plan, with metrics and plan time; None when the scheduler failed.
        violations: What the validator found (empty for a valid plan).
        error: ``Type: message`` when the scheduler raised, else None.
    """

    scheduler: str
    plan: Plan | None
    violations: list[Violation] = field(default_factory=list)
    error: str | None = None

    @property
    def valid(self) -> bool:
        """A plan exists and breaks no rule."""
        return self.plan is not None and not self.violations


@dataclass
class ScenarioResult:
    """Every scheduler's outcome on one scenario, and the figures drawn for it."""

    scenario: Scenario
    source: Path
    outcomes: dict[str, Outcome]
    figures: dict[str, str] = field(default_factory=dict)  # kind -> path relative to the output folder

    @property
    def slug(self) -> str:
        """The scenario name made safe for file names."""
        return slugify(self.scenario.name)


@dataclass
class Evaluation:
    """A whole run: settings, per-scenario results, and extra report sections.

    Attributes:
        command: The command line that reproduces the run.
        schedulers: Scheduler names in report order.
        options: The options every scheduler got.
        results: One entry per scenario, in input order.
        sections: Extra Markdown sections appended to the report by other modes.
        figures: Figures of the whole run (kind -> path relative to the output folder).
    """

    command: str
    schedulers: list[str]
    options: PlanOptions
    results: list[ScenarioResult] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    figures: dict[str, str] = field(default_factory=dict)

    def failures(self) -> list[tuple[str, Outcome]]:
        """(scenario name, outcome) of every invalid plan or failed scheduler."""
        return [(r.scenario.name, o) for r in self.results for o in r.outcomes.values() if not o.valid]


def slugify(name: str) -> str:
    """A name made safe as a file or folder name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "scenario"


# ----------------------------------------------------------------------------- input


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (exit 2) instead of usage plus error."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The command-line options; other modes add theirs here."""
    parser = _Parser(
        prog="evaluate.py",
        description="Plan every scenario with every scheduler, validate each plan, and write a report.",
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        type=Path,
        metavar="FILE_OR_DIR",
        help=f"scenario files, or folders of *.yaml/*.yml/*.json (default: {DEFAULT_SCENARIOS.relative_to(ROOT)}/)",
    )
    parser.add_argument(
        "--schedulers",
        metavar="NAMES",
        help="comma-separated scheduler names (default: every available one); fifo always runs as the baseline",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR", help="output folder (default: results)")
    add_plan_options(parser)
    parser.add_argument("--no-figures", action="store_true", help="skip the figures (faster)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    rolling = parser.add_argument_group("rolling horizon (docs/rolling.md)")
    rolling.add_argument(
        "--rolling", action="store_true", help="also compare open loop with rolling re-planning under forecast error"
    )
    rolling.add_argument(
        "--rolling-sigmas",
        type=_sigmas,
        default=(0.0, 0.1, 0.2, 0.3),
        metavar="LIST",
        help="comma-separated forecast errors (default: 0,0.1,0.2,0.3)",
    )
    rolling.add_argument(
        "--rolling-seeds", type=int_at_least(1), default=5, metavar="N", help="actual-demand draws per error (5)"
    )
    rolling.add_argument(
        "--rolling-time-limit",
        type=positive_float,
        default=0.5,
        metavar="S",
        help="seconds per re-plan for anytime schedulers (default: 0.5)",
    )
    rolling.add_argument(
        "--rolling-replan-every", type=int_at_least(1), default=1, metavar="K", help="re-plan every K slots (1)"
    )
    return parser


def _sigmas(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(not math.isfinite(v) or v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers >= 0, got {text!r}")
    return values


def find_scenarios(paths: Sequence[Path] | None) -> list[Path]:
    """Scenario files from files and folders (a folder contributes its scenario files, sorted).

    Raises:
        InputError: A path that does not exist, or no scenario at all.
    """
    if not paths:
        paths = [DEFAULT_SCENARIOS]
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in SCENARIO_SUFFIXES)
            if not found:
                raise InputError(f"{path}: no scenario files (*.yaml, *.yml, *.json) in this folder")
            files.extend(found)
        elif path.exists():
            files.append(path)
        else:
            raise InputError(f"{path}: <file>: no such file or folder (--scenarios)")
    return files


def load_scenarios(files: Sequence[Path]) -> list[tuple[Scenario, Path]]:
    """Load and check every scenario before any planning.

    Raises:
        ScenarioError: A malformed file (the message names file and field).
        InputError: Two files with the same scenario name (their plans would collide).
    """
    loaded: list[tuple[Scenario, Path]] = []
    seen: dict[str, Path] = {}
    for path in files:
        scenario = load_scenario(path)
        slug = slugify(scenario.name)
        if slug in seen:
            raise InputError(f"{path}: name: scenario name {scenario.name!r} is also used by {seen[slug]}")
        seen[slug] = path
        loaded.append((scenario, path))
    return loaded


def pick_schedulers(spec: str | None) -> list[str]:
    """Scheduler names to run, the baseline first.

    Raises:
        InputError: An unknown name, or a scheduler whose module cannot be imported here.
    """
    if spec is None:
        names = available_schedulers()
    else:
        names = list(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))
        if not names:
            raise InputError("--schedulers: expected a comma-separated list of names")
    for name in names:
        try:
            get_scheduler(name)
        except UnknownSchedulerError as exc:
            raise InputError(f"--schedulers: {exc}") from None
        except ImportError as exc:
            raise InputError(f"--schedulers: scheduler {name!r} cannot be loaded here: {exc}") from None
    if BASELINE not in names:
        names.insert(0, BASELINE)
    else:
        names.remove(BASELINE)
        names.insert(0, BASELINE)
    return names


# ----------------------------------------------------------------------------- planning


def evaluate_scenario(
    scenario: Scenario, source: Path, schedulers: Sequence[str], options: PlanOptions, progress: Any = None
) -> ScenarioResult:
    """Plan one scenario with every scheduler and validate each plan.

    A scheduler that raises is recorded as failed (its traceback goes to stderr)
    so that one broken scheduler does not lose the others' results.
    """
    outcomes: dict[str, Outcome] = {}
    for name in schedulers:
        if progress is not None:
            progress.set_postfix_str(f"{scenario.name} / {name}")
        try:
            plan = run_scheduler(name, scenario, options)
        except Exception as exc:  # a broken scheduler is reported, not fatal to the run
            _write_stderr(f"{name} failed on {scenario.name}:\n{traceback.format_exc()}", progress)
            outcomes[name] = Outcome(name, None, error=f"{type(exc).__name__}: {exc}")
        else:
            outcomes[name] = Outcome(name, plan, validate(scenario, plan))
        if progress is not None:
            progress.update(1)
    return ScenarioResult(scenario, source, outcomes)


def _write_stderr(text: str, progress: Any) -> None:
    if progress is not None:
        progress.write(text.rstrip("\n"), file=sys.stderr)
    else:
        print(text.rstrip("\n"), file=sys.stderr)


def run_evaluation(
    scenarios: Sequence[tuple[Scenario, Path]],
    schedulers: Sequence[str],
    options: PlanOptions,
    command: str = "python evaluate.py",
    show_progress: bool = True,
) -> Evaluation:
    """Plan every scenario with every scheduler (progress on stderr)."""
    from tqdm import tqdm

    evaluation = Evaluation(command, list(schedulers), options)
    with tqdm(
        total=len(scenarios) * len(schedulers),
        desc="planning",
        unit="plan",
        file=sys.stderr,
        disable=not show_progress,
        dynamic_ncols=True,
    ) as progress:
        for scenario, source in scenarios:
            evaluation.results.append(evaluate_scenario(scenario, source, schedulers, options, progress))
    return evaluation


# ----------------------------------------------------------------------------- numbers


def gap(plan: Plan) -> float | None:
    """The optimality gap ``(bound - objective) / |bound|`` when the plan carries a bound, else None."""
    bound = plan.info.get("bound")
    if not isinstance(bound, int | float) or isinstance(bound, bool) or plan.metrics is None:
        return None
    objective = plan.metrics.objective
    if bound == 0:
        return 0.0 if abs(objective) < 1e-9 else math.inf
    return (bound - objective) / abs(bound)


def result_rows(evaluation: Evaluation) -> list[dict[str, Any]]:
    """One flat row per (scenario, scheduler): the numbers of results.csv, results.json and the report.

    ``objective_vs_fifo_pct`` is ``100 * (objective - fifo) / fifo`` (None when FIFO's
    objective is not positive or FIFO has no valid plan); ``utilization_vs_fifo_pts``
    the difference in percentage points.
    """
    rows: list[dict[str, Any]] = []
    for result in evaluation.results:
        sc = result.scenario
        base = result.outcomes.get(BASELINE)
        base_m = base.plan.metrics if base is not None and base.valid and base.plan is not None else None
        for name, outcome in result.outcomes.items():
            row: dict[str, Any] = {
                "scenario": sc.name,
                "family": sc.family,
                "gpus": sc.gpus,
                "slots": sc.slots,
                "scheduler": name,
                "valid": outcome.valid,
                "violations": [str(v) for v in outcome.violations],
                "error": outcome.error,
            }
            plan = outcome.plan
            m = plan.metrics if plan is not None else None
            if m is not None:
                row.update(
                    objective=round(m.objective, 6),
                    job_value=round(m.job_value, 6),
                    shortfall=m.shortfall,
                    utilization=round(m.utilization, 6),
                    placed=m.placed,
                    completed=m.completed,
                    jobs=m.jobs,
                    solve_ms=round(plan.solve_ms or 0.0, 3),
                )
            else:
                row.update(
                    objective=None,
                    job_value=None,
                    shortfall=None,
                    utilization=None,
                    placed=None,
                    completed=None,
                    jobs=len(sc.jobs),
                    solve_ms=None,
                )
            vs = pts = None
            if m is not None and base_m is not None:
                if base_m.objective > 0:
                    vs = round(100.0 * (m.objective - base_m.objective) / base_m.objective, 3)
                pts = round(100.0 * (m.utilization - base_m.utilization), 3)
            row["objective_vs_fifo_pct"] = vs
            row["utilization_vs_fifo_pts"] = pts
            g = gap(plan) if plan is not None else None
            row["bound"] = plan.info.get("bound") if plan is not None else None
            row["gap"] = None if g is None else (round(g, 6) if math.isfinite(g) else "inf")
            row["status"] = plan.info.get("status") if plan is not None else None
            rows.append(row)
    return rows


# ----------------------------------------------------------------------------- files


CSV_COLUMNS = (
    "scenario",
    "family",
    "gpus",
    "slots",
    "scheduler",
    "valid",
    "objective",
    "objective_vs_fifo_pct",
    "job_value",
    "shortfall",
    "utilization",
    "utilization_vs_fifo_pts",
    "placed",
    "completed",
    "jobs",
    "solve_ms",
    "bound",
    "gap",
    "status",
    "violations",
    "error",
)


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
    write_text_atomic(out / "results.csv", _csv(rows))
    document = {
        "command": evaluation.command,
        "schedulers": evaluation.schedulers,
        "options": {
            "time_limit": evaluation.options.time_limit,
            "seed": evaluation.options.seed,
            "workers": evaluation.options.workers,
            "policy": str(evaluation.options.policy) if evaluation.options.policy else None,
        },
        "results": rows,
    }
    write_text_atomic(out / "results.json", json.dumps(document, indent=1) + "\n")
    report = out / "report.md"
    write_text_atomic(report, render_report(evaluation, rows, out))
    return report


def _csv(rows: Sequence[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        flat = dict(row)
        flat["violations"] = len(row["violations"])
        flat["error"] = row["error"] or ""
        writer.writerow({k: "" if flat.get(k) is None else flat[k] for k in CSV_COLUMNS})
    return buffer.getvalue()


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
        if result.scenario.realtime:
            path = folder / f"{result.slug}-realtime.png"
            render.save_figure(render.plot_realtime(result.scenario, plans), path)
            result.figures["realtime"] = path.relative_to(out).as_posix()
    rows = [r for r in result_rows(evaluation) if r["objective"] is not None]
    if rows:
        path = folder / "summary.png"
        render.save_figure(render.plot_summary(rows), path)
        evaluation.figures["summary"] = path.relative_to(out).as_posix()


# ----------------------------------------------------------------------------- the report


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
    target = ROOT / "docs" / name
    if out is not None:
        try:
            out.resolve().relative_to(ROOT)
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
        f"on a machine with {os.cpu_count()} CPU cores.\n\n"
        f"Reproduce with `{evaluation.command}`. Objective is the priority-weighted value "
        "(job value minus real-time shortfall penalties, SPEC section 3); every plan was checked by the validator."
    )


def _report_failures(evaluation: Evaluation) -> str:
    failures = evaluation.failures()
    if not failures:
        return ""
    lines = [f"## ⚠ INVALID OR FAILED PLANS: {len(failures)}", ""]
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
    apps = ", ".join(a.name for a in sc.realtime) or "none"
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
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Run the evaluation; exit status 0 all plans valid, 1 an invalid plan or failed scheduler, 2 bad input."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(args_list)
    try:
        scenarios = load_scenarios(find_scenarios(args.scenarios))
        schedulers = pick_schedulers(args.schedulers)
        if args.policy is not None and not args.policy.is_file():
            raise InputError(f"{args.policy}: <file>: no such policy file (--policy)")
        if "ppo" in schedulers:  # a bad policy file is bad input, not a scheduler failure per scenario
            from agents.ppo import PolicyError, load_policy

            try:
                load_policy(args.policy)
            except PolicyError as exc:
                raise InputError(f"--policy: {exc}") from None
        if args.out.exists() and not args.out.is_dir():
            raise InputError(f"{args.out}: not a folder (--out)")
    except (InputError, ScenarioError) as exc:
        print(f"evaluate.py: error: {exc}", file=sys.stderr)
        return 2
    options = plan_options(args)
    command = shlex.join(["python", "evaluate.py", *args_list])
    evaluation = run_evaluation(scenarios, schedulers, options, command, show_progress=not args.quiet)
    if args.rolling:
        from dataclasses import replace

        from agents.rolling import evaluation_section

        evaluation.sections.append(
            evaluation_section(
                [scenario for scenario, _ in scenarios],
                schedulers,
                args.rolling_sigmas,
                range(args.rolling_seeds),
                args.out,
                replace(options, time_limit=args.rolling_time_limit),
                open_options=options,
                replan_every=args.rolling_replan_every,
                figures=not args.no_figures,
                show_progress=not args.quiet,
                command=command,
            )
        )
    try:
        report = write_outputs(evaluation, args.out, figures=not args.no_figures, show_progress=not args.quiet)
    except OSError as exc:
        print(f"evaluate.py: error: cannot write under {args.out}: {exc}", file=sys.stderr)
        return 2
    failures = evaluation.failures()
    if failures:
        print(f"evaluate.py: {len(failures)} invalid or failed plan(s), see {report}", file=sys.stderr)
        for scenario, outcome in failures:
            what = outcome.error or f"{len(outcome.violations)} violation(s), first: {outcome.violations[0]}"
            print(f"  {scenario} / {outcome.scheduler}: {what}", file=sys.stderr)
        return 1
    print(
        f"evaluate.py: {len(evaluation.results)} scenarios x {len(schedulers)} schedulers, report: {report}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
