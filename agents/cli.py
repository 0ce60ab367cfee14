"""The ``gpualloc`` command line: plan, validate, generate and render.

    gpualloc plan configs/scenarios/mixed-control.yaml --scheduler greedy -o plan.json
    gpualloc validate configs/scenarios/mixed-control.yaml plan.json
    gpualloc generate training-heavy --seed 7 -o my.yaml
    gpualloc render configs/scenarios/mixed-control.yaml plan.json -o plan.png
    gpualloc convert-2kp benchmarks/data/2kp/ngcut1.json -o ngcut1.yaml
    gpualloc slurm cycle --config slurm.yaml --scheduler greedy --dry-run
    gpualloc serve --port 8080

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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from agents.arguments import add_option, add_plan_options, int_at_least, plan_options, positive_float
from agents.options import PlanOptions
from agents.ppo import PolicyError
from agents.registry import SCHEDULERS, SchedulerUnavailableError, UnknownSchedulerError, run_scheduler
from gpu_env.files import OutputError
from gpu_env.metrics import Metrics, compute_metrics
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario, ScenarioError, dump_scenario, load_scenario, save_scenario
from gpu_env.validation import Violation, validate

TRACED = ("cpsat", "full")  # the schedulers whose plan.info holds an anytime trace (--trace)
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


def _exit_status(violations: Sequence[Violation], heading: str) -> int:
    """EXIT_OK for a valid plan; else the heading, the count and each violation on stderr, and EXIT_INVALID."""
    if not violations:
        return EXIT_OK
    print(f"{heading} ({len(violations)} violations):", file=sys.stderr)
    _report_violations(violations, sys.stderr)
    return EXIT_INVALID


def _check_output(path: Path, allowed: Sequence[str], option: str = "-o") -> None:
    if path.suffix.lower() not in allowed:
        raise CliError(f"{path}: {option}: expected a file name ending in {' or '.join(allowed)}")
    if path.is_dir():
        raise CliError(f"{path}: {option}: is a folder, expected a file name")


def _write_scenario(scenario: Scenario, output: Path | None, line: str) -> int:
    """The scenario to ``output`` (stdout without one), then ``line`` on stderr (`` -> output`` added); EXIT_OK."""
    if output is None:
        sys.stdout.write(dump_scenario(scenario))
    else:
        save_scenario(scenario, output)
    print(line + (f" -> {output}" if output is not None else ""), file=sys.stderr)
    return EXIT_OK


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
        "--trace",
        type=Path,
        metavar="PNG",
        help=f"draw objective and bound against seconds here ({' and '.join(TRACED)} only)",
    )
    add_plan_options(p)


def _plan(args: argparse.Namespace) -> int:
    if args.output is not None:
        _check_output(args.output, (".json",))
    if args.trace is not None:
        _check_output(args.trace, (".png",), "--trace")
        if args.scheduler not in TRACED:
            raise CliError(f"--trace: only {' and '.join(TRACED)} record a trace, not {args.scheduler!r}")
    scenario = load_scenario(args.scenario)
    if args.policy is not None and not args.policy.is_file():
        raise CliError(f"{args.policy}: --policy: no such file")
    options = plan_options(args)
    try:
        plan = run_scheduler(args.scheduler, scenario, options)
    except (UnknownSchedulerError, SchedulerUnavailableError) as exc:
        raise CliError(f"--scheduler: {exc}") from None
    except PolicyError as exc:
        raise CliError(f"--policy: {exc}") from None
    violations = validate(scenario, plan)
    metrics = plan.metrics or compute_metrics(scenario, plan)
    if args.output is None:
        print(json.dumps(plan.to_dict(), indent=1))
    else:
        plan.save(args.output)
        print(f"{args.scheduler} on {scenario.name}: {summary(plan, metrics)} -> {args.output}", file=sys.stderr)
    if args.trace is not None:
        from agents.report.trace import plot_trace
        from gpu_env.render import save_figure

        save_figure(plot_trace(plan.info, scenario.name), args.trace)
        print(f"{args.scheduler} on {scenario.name}: trace -> {args.trace}", file=sys.stderr)
    return _exit_status(violations, f"the {args.scheduler} plan is INVALID")


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
    from gpu_env.traces import TRACE_FAMILIES

    p.add_argument("family", metavar="FAMILY", help=f"one of: {', '.join([*FAMILIES, *TRACE_FAMILIES])}")
    p.add_argument("--seed", type=int_at_least(0), metavar="N", help="seed of every draw (default: the benchmark seed)")
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="write .yaml/.yml or .json here (default: stdout)")
    p.add_argument("--gpus", type=int_at_least(1), metavar="G", help="cluster size instead of the family's")
    p.add_argument("--jobs", type=int_at_least(1), metavar="N", help="number of jobs instead of the family's")
    p.add_argument("--name", metavar="NAME", help="scenario name (default: the family name)")


def _generate(args: argparse.Namespace) -> int:
    from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, DrawError, generate
    from gpu_env.traces import TRACE_FAMILIES

    if args.family not in FAMILIES and args.family not in TRACE_FAMILIES:
        names = ", ".join([*FAMILIES, *TRACE_FAMILIES])
        raise CliError(f"FAMILY: unknown family {args.family!r} (expected one of: {names})")
    if args.output is not None:
        _check_output(args.output, (".yaml", ".yml", ".json"))
    seed = args.seed if args.seed is not None else BENCHMARK_SEEDS.get(args.family, 0)
    try:  # a Scenario checks itself when built: a draw that breaks a rule is refused here
        scenario = generate(args.family, seed, gpus=args.gpus, num_jobs=args.jobs, name=args.name)
    except ScenarioError as exc:
        raise CliError(f"--gpus/--jobs: the family cannot draw this size: {exc}") from None
    except DrawError as exc:
        raise CliError(f"--gpus/--jobs: {exc}") from None
    if args.output is None:
        sys.stdout.write(dump_scenario(scenario))
    else:
        save_scenario(scenario, args.output)
        print(
            f"{scenario.name}: {scenario.gpus} GPUs x {scenario.slots} slots, {len(scenario.jobs)} jobs, "
            f"{len(scenario.apps)} real-time apps (family {args.family}, seed {seed}) -> {args.output}",
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
    return _exit_status(violations, f"{args.plan}: INVALID")


# ----------------------------------------------------------------------------- simulate (docs/rolling.md)


def _simulate_arguments(p: argparse.ArgumentParser, replay: bool = False) -> None:
    from agents.live.anticipate import DEFAULT_SAMPLES, FORECASTS, LARGE_CLUSTER
    from agents.simulator.hindsight import DEFAULT_SECONDS

    if replay:
        p.add_argument(
            "day",
            type=Path,
            help="a recorded day (scenario file whose apps carry `forecast`, the forecast made before the day, and "
            "`demand`, what came): from `slurm.history_dir` or `gpualloc from-trace --run`",
        )
    else:
        p.add_argument("scenario", type=Path, help="scenario file; its real-time demand is the forecast")
        p.add_argument(
            "--actual",
            type=Path,
            metavar="FILE",
            help="the demand that came, as a scenario file of the same apps and slots (its apps' `demand`) "
            "instead of a draw around the forecast",
        )
    p.add_argument(
        "--scheduler",
        "-s",
        metavar="NAME",
        help="the live planner anticipate (default), anticipate-ppo or anticipate-consensus, "
        "or any scheduler rolled as it is: " + ", ".join(SCHEDULERS),
    )
    p.add_argument(
        "--history",
        type=Path,
        nargs="+",
        default=[],
        metavar="FILE",
        help="past days of the same cluster (scenario files): the live planner's arrivals model, never the day played",
    )
    p.add_argument(
        "--errors",
        choices=("auto", "recorded", "none"),
        default="auto",
        help="where the live planner's demand error model learns from: auto (the past days' recorded forecasts and "
        "demand, or each past curve against the others' mean where they carry no forecast), recorded (recorded "
        "forecasts only: a past day without one is an error), none (today's errors alone); docs/rolling.md",
    )
    p.add_argument(
        "--runtime-model",
        choices=("exact", "trace", "recorded"),
        default="recorded" if replay else "exact",
        help="exact: jobs run to their limit; trace: actual runtimes drawn below the limits (docs/runtimes.md); "
        "recorded: each job's recorded `runtime`, its limit where it has none"
        + (" (the default of replay)" if replay else ""),
    )
    p.add_argument(
        "--forecast",
        choices=FORECASTS,
        default="auto",
        help="the live planner's demand forecast for its base decision: auto (the default, with or without "
        "--history) is corrector: the day's forecast corrected by today's errors, one error level above (the "
        "error model's: the history's recorded error mixed with today's, today's alone without --history or "
        "with --errors none); residual: the same, the level today's errors leave after the correction; point: "
        "corrected, no margin (the futures carry the error); backtest: the "
        "point forecast and margin that cost least on --history's days played as if live; record: backtest's "
        "options, chosen again each cycle with today's record mixed in; history: each app's curve fitted from "
        "--history; newsvendor: each app at its newsvendor quantile penalty / (penalty + worth) of the error "
        "model's paths. backtest, record and history need --history; docs/rolling.md",
    )
    p.add_argument(
        "--samples",
        type=int_at_least(1),
        default=None,
        metavar="K",
        help=f"the live planner's futures per cycle (default {DEFAULT_SAMPLES}); from {LARGE_CLUSTER} GPUs the "
        "planner draws half as many (at least 1), given or not, and a close race at most twice that",
    )
    p.add_argument("--replan-every", type=int_at_least(1), default=1, metavar="K", help="re-plan every K slots")
    if not replay:
        p.add_argument(
            "--forecast-error", type=float, default=0.0, metavar="SIGMA", help="relative forecast error (default: 0)"
        )
    p.add_argument(
        "--seed",
        type=int_at_least(0),
        default=0,
        metavar="N",
        help="seed of every draw (the live planner's futures; the actual demand and runtimes where drawn)",
    )
    p.add_argument("-o", "--output", type=Path, metavar="DIR", help="write actual.yaml, executed.json, ... here")
    p.add_argument("--time-limit", type=positive_float, default=2.0, metavar="S", help="seconds per re-plan")
    p.add_argument("--reveal", choices=("release", "all"), default="release", help="when jobs become known")
    p.add_argument("--correction", choices=("ratio", "bias", "none"), default="ratio", help="forecast correction")
    p.add_argument(
        "--margin",
        type=float,
        default=None,
        metavar="Z",
        help="safety margin above the corrected forecast, in error levels (SDs of the relative error). A "
        "scheduler rolled as it is: its corrector's (default 1). The live planner: it replaces the margin of "
        "--forecast auto, corrector and residual (default 1), point (default 0) and backtest (the margin the "
        "backtest chose; its point forecast kept); record and history take none (an error)",
    )
    p.add_argument("--no-picture", action="store_true", help="skip simulation.png")
    p.add_argument(
        "--hindsight",
        type=positive_float,
        nargs="?",
        const=DEFAULT_SECONDS,
        default=None,
        metavar="SECONDS",
        help="also plan the realized day (actual.yaml) with full mode for SECONDS "
        f"(default {DEFAULT_SECONDS:g}) and report the executed objective as a share of it",
    )
    add_option(
        p,
        "--deterministic-time",
        positive_float,
        None,
        "D",
        "also stop CP-SAT (re-plans, --hindsight) after D units of its deterministic time",
    )


def _simulate(args: argparse.Namespace) -> int:
    from agents import live, simulator
    from agents.live.anticipate import DEFAULT_SAMPLES, LIVE_PLANNERS, live_planner
    from agents.live.history import load_history
    from agents.report.rolling import write_simulation

    replay = getattr(args, "day", None) is not None
    if replay:
        scenario, actual_demand = live.replayed(load_scenario(args.day), str(args.day))
        args.forecast_error = 0.0
    else:
        scenario = load_scenario(args.scenario)
        actual_demand = None
        if args.actual is not None:
            actual_demand = live.actual_of(scenario, load_scenario(args.actual), str(args.actual))
    history = load_history(args.history, scenario)
    name = args.scheduler or LIVE_PLANNERS[0]
    scheduler: Any = name
    if name in LIVE_PLANNERS:
        if args.forecast in ("history", "backtest", "record") and not history:
            raise CliError(f"--forecast {args.forecast}: needs past days (--history FILE...)")
        try:
            scheduler = live_planner(
                name,
                history=history,
                day=scenario,
                samples=args.samples or DEFAULT_SAMPLES,
                seed=args.seed,
                forecast=args.forecast,
                errors=args.errors,
                sources=[str(p) for p in args.history],
            )
        except PolicyError as exc:
            raise CliError(f"--scheduler {name}: {exc}") from None
    elif args.history or args.samples or args.forecast != "auto" or args.errors != "auto":
        raise CliError(f"--history, --samples, --forecast and --errors are the live planner's; {name!r} rolls as it is")
    if not math.isfinite(args.forecast_error) or args.forecast_error < 0:
        raise CliError(f"--forecast-error: expected a number >= 0, got {args.forecast_error}")
    if args.margin is not None and (not math.isfinite(args.margin) or args.margin < 0):
        raise CliError(f"--margin: expected a number >= 0, got {args.margin}")
    if args.output is not None and args.output.exists() and not args.output.is_dir():
        raise CliError(f"{args.output}: -o: expected a folder, found a file")
    try:
        corrector = None
        if isinstance(scheduler, str):
            corrector = live.Corrector(method=args.correction, margin=1.0 if args.margin is None else args.margin)
        elif args.correction != "ratio" or args.margin is not None:
            scheduler = replace(scheduler, forecaster=_with_margin(scheduler.forecaster, args))
        roll, fixed = simulator.simulate(
            scenario,
            scheduler,
            sigma=args.forecast_error,
            seed=args.seed,
            replan_every=args.replan_every,
            options=PlanOptions(time_limit=args.time_limit, seed=args.seed, deterministic_time=args.deterministic_time),
            corrector=corrector,
            reveal=args.reveal,
            runtime_model=args.runtime_model,
            actual_demand=actual_demand,
        )
    except (UnknownSchedulerError, SchedulerUnavailableError) as exc:
        raise CliError(f"--scheduler: {exc}") from None
    except PolicyError as exc:
        raise CliError(f"--scheduler {name}: {exc}") from None
    except simulator.RollingError as exc:
        print(f"gpualloc simulate: {exc}", file=sys.stderr)
        return EXIT_INVALID
    settings = {
        "scheduler": name,
        "history": [str(p) for p in args.history],
        "runtime_model": args.runtime_model,
        "forecast": getattr(scheduler, "margin_label", "") or "corrector",
        "replan_every": args.replan_every,
        "forecast_error": args.forecast_error,
        "errors": args.errors,
        **({"replay": str(args.day)} if replay else {}),
        **({"actual": str(args.actual)} if not replay and args.actual is not None else {}),
        "seed": args.seed,
        "reveal": args.reveal,
        "correction": args.correction,
        "margin": args.margin,
        "time_limit": args.time_limit,
    }
    if args.deterministic_time is not None:
        settings["deterministic_time"] = args.deterministic_time
    r, o = roll.metrics, fixed.metrics
    hindsight = None
    if args.hindsight is not None:
        options = PlanOptions(time_limit=args.hindsight, seed=args.seed, deterministic_time=args.deterministic_time)
        hindsight = simulator.plan_hindsight(roll.actual, options)
    if args.output is None:
        document = {**settings, "rolling": roll.summary(), "open_loop": fixed.summary()}
        if hindsight is not None:
            document["hindsight"] = hindsight.summary(r.objective, o.objective)
        print(json.dumps(document, indent=1))
    else:
        write_simulation(args.output, roll, fixed, settings, picture=not args.no_picture, hindsight=hindsight)
    played = "as it came" if replay or actual_demand is not None else f"forecast error {args.forecast_error:g}"
    print(
        f"{name} on {scenario.name}, {played}, seed {args.seed}: "
        f"rolling objective {r.objective:.2f} (shortfall {r.shortfall}), "
        f"open loop {o.objective:.2f} (shortfall {o.shortfall}); {roll.replans} re-plans, "
        f"slowest {max(roll.solve_ms):.1f} ms" + (f" -> {args.output}/" if args.output is not None else ""),
        file=sys.stderr,
    )
    if hindsight is not None:
        print(f"hindsight: {hindsight.describe(r.objective, o.objective)}", file=sys.stderr)
    _print_decisions(roll, hindsight, args.output)
    violations = validate(roll.actual, roll.executed)
    if violations:
        _report_violations(violations, sys.stderr)
        return EXIT_INVALID
    if hindsight is not None and hindsight.violations:  # full mode validates its plan: a bug if ever seen
        print(f"the hindsight plan is INVALID ({len(hindsight.violations)} violations):", file=sys.stderr)
        print("\n".join(hindsight.violations), file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


def _print_decisions(roll: Any, hindsight: Any, output: Path | None) -> None:
    """The decision trace in brief on stderr: the margins planned at, departures, late starts (decisions.md has all)."""
    from collections import Counter

    from agents.simulator.decisions import late_starts

    cycles = [r for r in roll.slots if r.replanned]
    margins = Counter(r.margin for r in cycles if r.margin)
    if margins:
        shares = ", ".join(f"{m} ({n})" for m, n in margins.most_common())
        departed = sum(bool(r.chosen) for r in cycles)
        print(
            f"decisions: apps planned at {shares} of {len(cycles)} cycles; {departed} departed from the base plan",
            file=sys.stderr,
        )
    if hindsight is not None:
        late = late_starts(roll.slots, roll.executed, hindsight.plan)
        where = f" ({output}/decisions.md)" if output is not None else ""
        print(f"late starts against hindsight: {len(late)}{where}", file=sys.stderr)
        for x in late:
            print(f"  {x.describe()}", file=sys.stderr)


def _with_margin(forecaster: Any, args: argparse.Namespace) -> Any:
    """The live planner's forecaster with ``--correction`` and ``--margin`` applied, or a CLI error."""
    from agents.live.forecast import Corrector
    from agents.live.hedge import HedgedForecaster

    if isinstance(forecaster, Corrector):
        margin = forecaster.margin if args.margin is None else args.margin
        return replace(forecaster, method=args.correction, margin=margin)
    if isinstance(forecaster, HedgedForecaster) and args.correction == "ratio":
        return replace(forecaster, margin=args.margin)
    raise CliError(
        f"--correction and --margin set the corrector; --forecast {args.forecast} has its own "
        "(--forecast auto, corrector, residual, point or backtest take --margin; record, history and newsvendor do not)"
    )


# ----------------------------------------------------------------------------- from-trace (docs/traces.md)


def _day(text: str) -> int | str:
    if text in ("most-loaded", "busiest"):
        return text
    return int_at_least(0)(text)


def _from_trace_arguments(p: argparse.ArgumentParser) -> None:
    from gpu_env import traces

    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="write .yaml/.yml or .json here (default: stdout)")
    p.add_argument(
        "--family", choices=sorted(traces.TRACE_FAMILIES), default="trace-alibaba", help="preset of the choices below"
    )
    p.add_argument(
        "--traces", type=Path, metavar="DIR", help="folder of the raw traces (not in the repository, docs/traces.md)"
    )
    p.add_argument("--pods", type=Path, metavar="CSV", help="pod trace file (default: under --traces)")
    p.add_argument(
        "--demand",
        action="append",
        metavar="SOURCE[=CSV]",
        help=f"a real-time app from {', '.join(traces.DEMAND_FILES)} (repeat for more; default: the family's)",
    )
    p.add_argument("--job-day", type=_day, metavar="N|most-loaded", help="day of the pod trace (default: middle)")
    p.add_argument("--demand-day", type=_day, default=0, metavar="N|busiest", help="day of the demand (default: 0)")
    p.add_argument("--gpus", type=int_at_least(1), metavar="G", help="cluster size")
    p.add_argument("--node-size", type=int_at_least(1), metavar="N", help="GPUs per node")
    p.add_argument("--slots", type=int_at_least(1), metavar="T", help="horizon in slots")
    p.add_argument("--slot-minutes", type=positive_float, metavar="M", help="minutes per slot")
    p.add_argument("--load", type=positive_float, metavar="X", help="job GPU-slots kept per free GPU-slot")
    p.add_argument("--peak", type=positive_float, metavar="F", help="demand peak as a fraction of the cluster")
    p.add_argument("--jobs", type=int_at_least(1), metavar="N", help="keep this many jobs instead")
    p.add_argument("--seed", type=int_at_least(0), default=0, metavar="N", help="seed of the thinning draw")
    p.add_argument("--name", metavar="NAME", help="scenario name (default: the family name)")
    from agents.trace_forecasts import add_run_arguments

    add_run_arguments(p)  # --run DIR: a run of consecutive days (docs/traces.md, "Runs of days")


def _from_trace(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from gpu_env import traces

    if args.output is not None:
        _check_output(args.output, (".yaml", ".yml", ".json"))
    spec = replace(traces.TRACE_FAMILIES[args.family], family=None)
    changes = {
        "gpus": args.gpus,
        "node_size": args.node_size,
        "slots": args.slots,
        "slot_minutes": args.slot_minutes,
        "load": args.load,
        "peak": args.peak,
        "name": args.name,
    }
    spec = replace(spec, **{k: v for k, v in changes.items() if v is not None})
    if args.node_size is None and spec.node_size > spec.gpus:
        spec = replace(spec, node_size=spec.gpus)
    paths: dict[str, Path] = {}
    if args.demand:
        sources = []
        for entry in args.demand:
            key, _, path = entry.partition("=")
            if key not in traces.DEMAND_FILES:
                raise CliError(f"--demand: unknown source {key!r} (expected one of: {', '.join(traces.DEMAND_FILES)})")
            sources.append(key)
            if path:
                paths[key] = Path(path)
        spec = replace(spec, apps=tuple(sources))
    if args.run_dir is not None:
        from agents.trace_forecasts import run_from_args

        try:
            return run_from_args(args, spec, paths)
        except traces.TraceRequestError as exc:
            raise CliError(str(exc)) from None
    request = traces.TraceRequest(
        spec,
        job_day=args.job_day,
        demand_day=args.demand_day,
        seed=args.seed,
        traces=args.traces,
        pods=args.pods,
        demand_paths=paths,
        num_jobs=args.jobs,
    )
    try:
        scenario, info = traces.from_trace(request)
    except traces.TraceRequestError as exc:
        raise CliError(str(exc)) from None
    demand = ", ".join(f"{k} from {v}" for k, v in info["demand"].items())
    return _write_scenario(
        scenario,
        args.output,
        f"{scenario.name}: {scenario.gpus} GPUs x {scenario.slots} slots, {len(scenario.jobs)} jobs "
        f"({info['running_kept']} running) kept of {info['window_jobs']} in pod-trace day {info['job_day']}, "
        f"offered load {info['offered_load']:.2f}; demand {demand}",
    )


# ----------------------------------------------------------------------------- convert-2kp (docs/exact-mode.md)


def _convert_2kp_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("instance", type=Path, help="2D-knapsack instance JSON (e.g. benchmarks/data/2kp/ngcut1.json)")
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="write .yaml/.yml or .json here (default: stdout)")


def _convert_2kp(args: argparse.Namespace) -> int:
    from gpu_env.knapsack import load_knapsack, to_scenario

    if args.output is not None:
        _check_output(args.output, (".yaml", ".yml", ".json"))
    instance = load_knapsack(args.instance)
    scenario = to_scenario(instance)
    optimum = "unknown" if instance.optimum is None else f"{instance.optimum:g}"
    return _write_scenario(
        scenario,
        args.output,
        f"{scenario.name}: bin {instance.width} x {instance.height} as {scenario.gpus} GPUs x {scenario.slots} slots, "
        f"{len(scenario.jobs)} jobs from {len(instance.items)} item types, literature optimum {optimum}",
    )


# ----------------------------------------------------------------------------- slurm (docs/slurm.md)


def _slurm_arguments(p: argparse.ArgumentParser) -> None:
    from agents.slurm import slurm_commands as slurm_cli

    slurm_cli.arguments(p)


def _slurm(args: argparse.Namespace) -> int:
    from agents.slurm import slurm_commands as slurm_cli
    from agents.slurm.errors import SlurmError

    try:
        return slurm_cli.run(args)
    except SlurmError as exc:  # its message names the file and field, or the command; nothing was changed
        raise CliError(str(exc)) from None


# ----------------------------------------------------------------------------- serve (docs/serve.md)


SERVE_PACKAGES = ("fastapi", "starlette", "uvicorn", "prometheus_client", "anyio", "pydantic")


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    from agents.serve.settings import Limits, Settings

    s, limits = Settings(), Limits()
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int_at_least(0), default=8080, metavar="N", help="port; 0: the OS chooses (8080)")
    p.add_argument("--port-file", type=Path, metavar="FILE", help="write the bound port here once listening")
    p.add_argument("--token-file", type=Path, metavar="FILE", help="require this bearer token on /v1 and /metrics")
    p.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="bind a non-loopback --host without --token-file (behind a proxy that authenticates)",
    )
    add_option(
        p,
        "--exact-processes",
        int_at_least(1),
        s.exact_processes,
        "N",
        "exact-mode (cpsat, full) worker processes at once",
    )
    add_option(
        p,
        "--exact-queue",
        int_at_least(0),
        s.exact_queue,
        "N",
        "exact-mode requests that may wait for a process; beyond, 429",
    )
    add_option(p, "--fast-threads", int_at_least(1), s.fast_threads, "N", "fast-mode plans at once")
    add_option(p, "--fast-queue", int_at_least(0), s.fast_queue, "N", "fast-mode requests that may wait; beyond, 429")
    add_option(p, "--max-body-bytes", int_at_least(1), limits.max_body_bytes, "N", "largest request body; beyond, 413")
    add_option(
        p,
        "--max-time-limit",
        positive_float,
        limits.max_time_limit,
        "S",
        "largest options.time_limit a request may ask",
    )
    add_option(
        p,
        "--max-workers",
        int_at_least(1),
        limits.max_workers,
        "N",
        "largest options.workers (CP-SAT threads) a request may ask",
    )
    add_option(p, "--grace", positive_float, s.grace, "S", "kill an exact worker this long past its time limit, 504")
    p.add_argument("--policy", type=Path, metavar="PATH", help="exported policy for the learned scheduler")
    p.add_argument("--access-log", action="store_true", help="log every request (uvicorn's access log)")


def _serve(args: argparse.Namespace) -> int:
    from agents.serve.settings import Limits, Settings

    try:
        from agents.serve.server import ServeError, is_loopback, read_token, serve
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in SERVE_PACKAGES:
            raise
        raise CliError(f'serve: needs the package {exc.name!r}: pip install -e ".[serve]"') from None
    try:
        token = None if args.token_file is None else read_token(args.token_file)
        if token is None and not is_loopback(args.host) and not args.allow_unauthenticated:
            raise CliError(
                f"--host {args.host}: not this machine only; give --token-file (or --allow-unauthenticated "
                "behind a proxy that authenticates, docs/serve.md)"
            )
        if args.policy is not None and not args.policy.is_file():
            raise CliError(f"{args.policy}: --policy: no such file")
        limits = Limits(
            max_body_bytes=args.max_body_bytes,
            max_time_limit=args.max_time_limit,
            max_workers=args.max_workers,
            default_time_limit=min(Limits.default_time_limit, args.max_time_limit),
        )
        settings = Settings(
            limits=limits,
            exact_processes=args.exact_processes,
            exact_queue=args.exact_queue,
            fast_threads=args.fast_threads,
            fast_queue=args.fast_queue,
            grace=args.grace,
            token=token,
            policy=args.policy,
        )
        return serve(settings, args.host, args.port, args.port_file, access_log=args.access_log)
    except ServeError as exc:
        raise CliError(str(exc)) from None


# ----------------------------------------------------------------------------- warm-up (docs/learned-mode.md#install)


def _warm_up_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", type=Path, metavar="PATH", help="exported policy to load (default: the shipped one)")


def _warm_up(args: argparse.Namespace) -> int:
    """Compile the decoder and the batched engine's kernels into numba's disk cache, so no first use waits.

    Or find them there: the printed line says which, for each (numba's cache hits and misses for the engine).
    """
    import time

    from agents import ppo, ppo_stepwise
    from gpu_env import batch, listsched

    if args.policy is not None and not args.policy.is_file():
        raise CliError(f"{args.policy}: --policy: no such file")
    started = time.perf_counter()
    try:
        ppo.warm_up(args.policy)  # loads the policy and plans one small scenario: every compiled path runs
    except PolicyError as exc:
        raise CliError(f"--policy: {exc}") from None
    try:
        ppo_stepwise.warm_up()  # the shipped stepwise policy: its turn-by-turn decoder compiles too
    except PolicyError as exc:
        raise CliError(f"ppo-stepwise: {exc}") from None
    engine = batch.warm_up()  # one small make_vec episode: every kernel the vector env calls runs
    print(
        f"gpualloc warm-up: {listsched.compile_stats().describe()}; {engine.describe()} "
        f"({time.perf_counter() - started:.1f} s)"
    )
    return EXIT_OK


# ----------------------------------------------------------------------------- the table and main

COMMANDS: list[Command] = [
    Command("plan", "plan a scenario with one scheduler and write the plan JSON", _plan_arguments, _plan),
    Command("validate", "check a plan against every rule and print its metrics", _validate_arguments, _validate),
    Command("generate", "draw a scenario from a generator family", _generate_arguments, _generate),
    Command("render", "draw a plan: a text grid, or a PNG with -o", _render_arguments, _render),
    Command("simulate", "simulate the rolling horizon under forecast error", _simulate_arguments, _simulate),
    Command(
        "replay",
        "play a recorded day live, its demand as it came",
        lambda p: _simulate_arguments(p, replay=True),
        _simulate,
    ),
    Command("from-trace", "build a scenario from the public traces", _from_trace_arguments, _from_trace),
    Command("convert-2kp", "turn a 2D-knapsack instance into a scenario", _convert_2kp_arguments, _convert_2kp),
    Command("slurm", "drive a Slurm cluster: snapshot, cycle (plan, commit), run, history", _slurm_arguments, _slurm),
    Command("serve", "run the allocator as an HTTP service with a what-if page", _serve_arguments, _serve),
    Command(
        "warm-up",
        "compile the learned planner's decoder and the batched engine now, so no first plan or make_vec waits",
        _warm_up_arguments,
        _warm_up,
    ),
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
    except OutputError as exc:  # -o names a folder or an unwritable place; any other OSError is a bug: a traceback
        print(f"{prefix} {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
