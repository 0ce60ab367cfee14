"""The ``gpualloc`` command line: plan, validate, generate and render.

    gpualloc plan configs/scenarios/mixed-control.yaml --scheduler greedy -o plan.json
    gpualloc validate configs/scenarios/mixed-control.yaml plan.json
    gpualloc generate training-heavy --seed 7 -o my.yaml
    gpualloc render configs/scenarios/mixed-control.yaml plan.json -o plan.png

Exit status: 0 ok, 1 an invalid plan, 2 bad input (a malformed scenario or plan
file, an unknown scheduler or family, bad arguments). Bad input prints one line
on stderr that names the file and the field; nothing is half-written, since every
file goes through an atomic write.

Adding a subcommand is one entry in :data:`COMMANDS`: a :class:`Command` with a
function that declares its arguments and one that runs it and returns the exit
status. Raise :class:`CliError` (or :class:`~gpu_env.scenario.ScenarioError`) for
bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from agents.options import PlanOptions
from agents.registry import SCHEDULERS, UnknownSchedulerError, run_scheduler
from gpu_env.metrics import Metrics, compute_metrics
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario, ScenarioError, dump_scenario, load_scenario, save_scenario
from gpu_env.validation import Violation, validate

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_BAD_INPUT = 2


class CliError(Exception):
    """Bad input: printed as one line on stderr, exit status 2."""


@dataclass(frozen=True)
class Command:
    """One subcommand.

    Attributes:
        name: What the user types after ``gpualloc``.
        help: One line for ``gpualloc --help``.
        arguments: Declares the subcommand's arguments on its parser.
        run: Runs it and returns the exit status.
    """

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# ----------------------------------------------------------------------------- shared helpers


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def summary(plan: Plan, metrics: Metrics) -> str:
    """One line of a plan's metrics for humans."""
    line = (
        f"objective {metrics.objective:.2f} (job value {metrics.job_value:.2f}), "
        f"utilisation {100 * metrics.utilization:.1f} %, placed {metrics.placed}/{metrics.jobs}, "
        f"completed {metrics.completed}/{metrics.jobs}, shortfall {metrics.shortfall}"
    )
    if plan.solve_ms is not None:
        line += f", planned in {plan.solve_ms:.1f} ms"
    return line


def _report_violations(violations: Sequence[Violation], stream: Any) -> None:
    for v in violations:
        print(str(v), file=stream)


def _check_output(path: Path, allowed: Sequence[str], option: str = "-o") -> None:
    if path.suffix.lower() not in allowed:
        raise CliError(f"{path}: {option}: expected a file name ending in {' or '.join(allowed)}")
    if path.is_dir():
        raise CliError(f"{path}: {option}: is a folder, expected a file name")


def _load_pair(scenario_path: Path, plan_path: Path) -> tuple[Scenario, Plan]:
    scenario = load_scenario(scenario_path)
    plan = Plan.load(plan_path)
    if plan.scenario and plan.scenario != scenario.name:
        print(
            f"warning: {plan_path} is a plan for scenario {plan.scenario!r}, not {scenario.name!r}",
            file=sys.stderr,
        )
    return scenario, plan


# ----------------------------------------------------------------------------- plan


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", type=Path, help="scenario file (YAML or JSON)")
    p.add_argument("--scheduler", "-s", required=True, metavar="NAME", help=f"one of: {', '.join(SCHEDULERS)}")
    p.add_argument("-o", "--output", type=Path, metavar="PLAN.json", help="write the plan here (default: stdout)")
    p.add_argument(
        "--time-limit",
        type=_positive_float,
        default=10.0,
        metavar="S",
        help="seconds for anytime schedulers (default: 10)",
    )
    p.add_argument(
        "--workers", type=_int_at_least(1), default=1, metavar="N", help="parallel solver workers (default: 1)"
    )
    p.add_argument(
        "--seed", type=_int_at_least(0), default=0, metavar="N", help="seed for every random draw (default: 0)"
    )
    p.add_argument("--policy", type=Path, metavar="PATH", help="exported policy for the learned scheduler")


def _plan(args: argparse.Namespace) -> int:
    if args.output is not None:
        _check_output(args.output, (".json",))
    scenario = load_scenario(args.scenario)
    if args.policy is not None and not args.policy.is_file():
        raise CliError(f"{args.policy}: --policy: no such file")
    options = PlanOptions(time_limit=args.time_limit, seed=args.seed, workers=args.workers, policy=args.policy)
    try:
        plan = run_scheduler(args.scheduler, scenario, options)
    except UnknownSchedulerError as exc:
        raise CliError(f"--scheduler: {exc}") from None
    except ImportError as exc:
        raise CliError(f"--scheduler: {args.scheduler!r} cannot be loaded here: {exc}") from None
    violations = validate(scenario, plan)
    metrics = plan.metrics or compute_metrics(scenario, plan)
    if args.output is None:
        print(json.dumps(plan.to_dict(), indent=1))
    else:
        plan.save(args.output)
        print(f"{args.scheduler} on {scenario.name}: {summary(plan, metrics)} -> {args.output}", file=sys.stderr)
    if violations:
        print(f"the {args.scheduler} plan is INVALID ({len(violations)} violations):", file=sys.stderr)
        _report_violations(violations, sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


# ----------------------------------------------------------------------------- validate


def _validate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", type=Path, help="scenario file (YAML or JSON)")
    p.add_argument("plan", type=Path, help="plan JSON file")


def _validate(args: argparse.Namespace) -> int:
    scenario, plan = _load_pair(args.scenario, args.plan)
    metrics = compute_metrics(scenario, plan)
    violations = validate(scenario, plan)
    state = "valid" if not violations else f"INVALID ({len(violations)} violations)"
    print(f"{args.plan}: {state} plan by {plan.scheduler or '?'} for {scenario.name}")
    print(summary(plan, metrics))
    if violations:
        _report_violations(violations, sys.stdout)
        return EXIT_INVALID
    return EXIT_OK


# ----------------------------------------------------------------------------- generate


def _generate_arguments(p: argparse.ArgumentParser) -> None:
    from gpu_env.generators import FAMILIES

    p.add_argument("family", metavar="FAMILY", help=f"one of: {', '.join(FAMILIES)}")
    p.add_argument(
        "--seed", type=_int_at_least(0), metavar="N", help="seed of every draw (default: the benchmark seed)"
    )
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="write .yaml/.yml or .json here (default: stdout)")
    p.add_argument("--gpus", type=_int_at_least(1), metavar="G", help="cluster size instead of the family's")
    p.add_argument("--jobs", type=_int_at_least(1), metavar="N", help="number of jobs instead of the family's")
    p.add_argument("--name", metavar="NAME", help="scenario name (default: the family name)")


def _generate(args: argparse.Namespace) -> int:
    from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, generate
    from gpu_env.scenario import scenario_from_dict

    if args.family not in FAMILIES:
        raise CliError(f"FAMILY: unknown family {args.family!r} (expected one of: {', '.join(FAMILIES)})")
    if args.output is not None:
        _check_output(args.output, (".yaml", ".yml", ".json"))
    seed = args.seed if args.seed is not None else BENCHMARK_SEEDS[args.family]
    try:
        scenario = generate(args.family, seed, gpus=args.gpus, num_jobs=args.jobs, name=args.name)
    except ValueError as exc:
        raise CliError(f"--gpus/--jobs: {exc}") from None
    try:  # what is written must load back
        scenario_from_dict(scenario.to_dict(), f"<{args.family} seed {seed}>")
    except ScenarioError as exc:
        raise CliError(f"--gpus/--jobs: the family cannot draw this size: {exc}") from None
    if args.output is None:
        sys.stdout.write(dump_scenario(scenario))
    else:
        save_scenario(scenario, args.output)
        print(
            f"{scenario.name}: {scenario.gpus} GPUs x {scenario.slots} slots, {len(scenario.jobs)} jobs, "
            f"{len(scenario.realtime)} real-time apps (family {args.family}, seed {seed}) -> {args.output}",
            file=sys.stderr,
        )
    return EXIT_OK


# ----------------------------------------------------------------------------- render


def _render_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", type=Path, help="scenario file (YAML or JSON)")
    p.add_argument("plan", type=Path, help="plan JSON file")
    p.add_argument("-o", "--output", type=Path, metavar="PNG", help="draw a PNG here (default: a text grid on stdout)")
    p.add_argument("--color", action="store_true", help="colour the text grid with ANSI codes")


def _render(args: argparse.Namespace) -> int:
    from gpu_env import render

    if args.output is not None:
        _check_output(args.output, (".png",))
    scenario, plan = _load_pair(args.scenario, args.plan)
    violations = validate(scenario, plan)
    if args.output is None:
        print(render.text_grid(scenario, plan, color=args.color))
    else:
        ax = render.plot_allocation(scenario, plan)
        render.save_figure(ax.figure, args.output)
        print(f"{scenario.name}: {summary(plan, compute_metrics(scenario, plan))} -> {args.output}", file=sys.stderr)
    if violations:
        print(f"{args.plan}: INVALID ({len(violations)} violations):", file=sys.stderr)
        _report_violations(violations, sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


# ----------------------------------------------------------------------------- the table and main

COMMANDS: list[Command] = [
    Command("plan", "plan a scenario with one scheduler and write the plan JSON", _plan_arguments, _plan),
    Command("validate", "check a plan against every rule and print its metrics", _validate_arguments, _validate),
    Command("generate", "draw a scenario from a generator family", _generate_arguments, _generate),
    Command("render", "draw a plan: a text grid, or a PNG with -o", _render_arguments, _render),
]


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser with one subparser per entry of :data:`COMMANDS`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("gpualloc")
    except PackageNotFoundError:
        release = "unknown"
    parser = _Parser(prog="gpualloc", description="Plan GPU-cluster allocations: jobs and real-time apps on a grid.")
    parser.add_argument("--version", action="version", version=f"gpualloc {release}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        p = sub.add_parser(
            command.name, help=command.help, description=command.help[0].upper() + command.help[1:] + "."
        )
        command.arguments(p)
        p.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gpualloc``; returns the exit status (0 ok, 1 invalid plan, 2 bad input)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    prefix = f"gpualloc {args.command}: error:"
    try:
        return args.run(args)
    except (CliError, ScenarioError) as exc:
        print(f"{prefix} {exc}", file=sys.stderr)
    except OSError as exc:  # e.g. -o names a folder or an unwritable place
        where = getattr(args, "output", None) or exc.filename or "output"
        print(f"{prefix} {where}: {exc.strerror or exc}", file=sys.stderr)
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
