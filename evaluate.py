"""Run every scheduler on the benchmark scenarios, validate every plan, and write a report.

    python evaluate.py                                   # configs/scenarios/, every scheduler, into results/
    python evaluate.py --scenarios my.yaml other/ --schedulers fifo,greedy --out /tmp/eval
    python evaluate.py --parallel 2                      # two tasks at once in a process pool
    python evaluate.py --ray [ADDRESS]                   # tasks on a local Ray, or on a running cluster

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

Each (scenario, scheduler) is a task of :mod:`agents.fanout`, run serially, over a
process pool (``--parallel N``) or over Ray (``--ray``); a task that raises or runs
past ``--task-timeout`` is reported by scenario, planner and seed and the others
complete. ``results.json`` and the report say which backend planned them
(``docs/fanout.md``).

The steps live in :mod:`agents.report`: :mod:`~lab.evaluation.evaluation` (the
scenarios, the schedulers, planning and validation), :mod:`~lab.evaluation.outputs`
(the files), :mod:`~lab.evaluation.results` and :mod:`~lab.evaluation.markdown` (the
numbers and the report) and :mod:`~agents.report.rolling` (``--rolling``).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from agents.arguments import (
    add_fanout_options,
    add_plan_options,
    fanout_backend,
    int_at_least,
    plan_options,
    positive_float,
)
from agents.fanout import FanoutError
from gpu_env.files import OutputError
from gpu_env.scenario import ScenarioError
from lab.evaluation.evaluation import (
    InputError,
    check_policy,
    exit_status,
    find_scenarios,
    load_scenarios,
    pick_schedulers,
    run_evaluation,
)
from lab.evaluation.outputs import write_outputs

ROOT = Path(__file__).resolve().parent
DEFAULT_SCENARIOS = ROOT / "configs" / "scenarios"
DEFAULT_OUT = Path("results")


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
    add_fanout_options(parser.add_argument_group("many tasks at once (docs/fanout.md)"))
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the evaluation; exit status 0 all plans valid, 1 an invalid plan or failed task, 2 bad input."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(args_list)

    # Scenarios and schedulers: every input is checked before any planning (bad input: one line, exit status 2).
    try:
        scenarios = load_scenarios(find_scenarios(args.scenarios or [DEFAULT_SCENARIOS]))
        schedulers = pick_schedulers(args.schedulers)
        check_policy(args.policy, schedulers)
        if args.out.exists() and not args.out.is_dir():
            raise InputError(f"{args.out}: not a folder (--out)")
        backend = fanout_backend(args)
    except (InputError, ScenarioError, FanoutError) as exc:
        print(f"evaluate.py: error: {exc}", file=sys.stderr)
        return 2
    options = plan_options(args)
    command = shlex.join(["python", "evaluate.py", *args_list])

    # Planners: every scenario with every scheduler, one task each over the backend, every plan validated.
    try:
        evaluation = run_evaluation(
            scenarios,
            schedulers,
            options,
            command,
            show_progress=not args.quiet,
            backend=backend,
            timeout=args.task_timeout,
        )
        if args.rolling:  # open loop against rolling re-planning under forecast error, a section of its own
            from agents.report.rolling import evaluation_section

            section, run = evaluation_section(
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
                backend=backend,
                timeout=args.task_timeout,
            )
            evaluation.sections.append(section)
            evaluation.task_failures += run.failure_lines(tracebacks=True)
    except FanoutError as exc:  # found only once the backend is up (a Ray node smaller than --workers)
        print(f"evaluate.py: error: {exc}", file=sys.stderr)
        return 2

    # Report: plans, results.csv, results.json, figures and report.md.
    try:
        report = write_outputs(evaluation, args.out, figures=not args.no_figures, show_progress=not args.quiet)
    except OutputError as exc:
        print(f"evaluate.py: error: cannot write under {args.out}: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    return exit_status(evaluation, report)


if __name__ == "__main__":
    sys.exit(main())
