"""Runs of recorded days from the traces, the ``agents`` side: the ``history`` forecast and the command's options.

:mod:`gpu_env.trace_runs` builds the days and names its forecast methods in a registry; ``gpu_env``
never imports ``agents``, so the method that uses the live planner's own forecaster
(:class:`agents.live.history.HistoryForecaster`) is registered here, on import:

- ``history[:K]``: the forecaster fitted on the last K days before the day (default 7) as the run
  records them (each app's scaled demand), evaluated at slot 0 with nothing observed. That is not the
  mean profile: at slot 0 the level correction is nothing, so it yields the mean of those days by slot
  times ``1 + margin[h]``, where ``margin[h]`` is the 80th percentile (floored at 0) of the relative errors
  the same forecaster made at lead ``h = slot + 1`` on those days, each forecast from the others (leave one
  out); with one day before it, the margin is 0 and the forecast is that day.

``gpualloc from-trace --run DIR`` (:func:`add_run_arguments`, :func:`run_from_args`) writes a run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from gpu_env.scenario import Scenario, scenario_from_dict
from gpu_env.trace_runs import (
    DEFAULT_FORECAST,
    FORECASTS,
    Forecaster,
    ForecastInput,
    ForecastMethod,
    RunRequest,
    register_forecast,
    trace_run,
    whole_number,
    write_run,
)
from gpu_env.traces import SHIPPED_TRACES, TraceRequestError, TraceSpec


def recorded_days(inp: ForecastInput, last: int) -> tuple[list[Scenario], Scenario]:
    """The last ``last`` days before the forecast day as the run records them (apps only), and the day's frame.

    Each is a scenario of the run's apps with their scaled demand and no jobs: what
    :meth:`~agents.live.history.HistoryForecaster.fit` reads of a past day.
    """
    T = inp.slots

    def day(name: str, curves: np.ndarray) -> Scenario:
        data = {
            "name": name,
            "cluster": {"gpus": inp.gpus, "node_size": 1},
            "horizon": {"slots": T, "slot_minutes": inp.slot_minutes},
            "realtime": [
                {"name": app, "demand": [int(x) for x in curves[i]], "ramp": inp.gpus, "penalty": 1.0}
                for i, app in enumerate(inp.apps)
            ],
            "jobs": [],
        }
        return scenario_from_dict(data, f"<day {name}>")

    first = max(0, inp.day - last)
    past = [day(str(d), inp.past[:, d, :]) for d in range(first, inp.day)]
    return past, day(str(inp.day), np.zeros((len(inp.apps), T), dtype=np.int64))


def _history(arg: str) -> Forecaster:
    from agents.live.history import HistoryForecaster

    k = whole_number(arg, f"history:{arg}", 7)

    def forecast(inp: ForecastInput) -> np.ndarray:
        past, frame = recorded_days(inp, k)
        model = HistoryForecaster.fit(past, frame)
        nothing = np.zeros((len(inp.apps), 0), dtype=np.int64)
        return model.forecast(None, nothing, 0, inp.gpus).astype(np.float64)

    return forecast


HISTORY = register_forecast(
    ForecastMethod(
        "history",
        "history[:K]",
        "the live planner's HistoryForecaster fitted on the last K days (default 7), at slot 0: "
        "their mean by slot raised by its leave-one-out error margin",
        _history,
    )
)


# ----------------------------------------------------------------------------- the command's options


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``gpualloc from-trace --run DIR`` (docs/traces.md, "Runs of days")."""
    p.add_argument(
        "--run",
        dest="run_dir",  # args.run is the subcommand's function
        type=Path,
        metavar="DIR",
        help="write a run of consecutive days here (day files and run.json) instead of one scenario; the files "
        "--traces, --pods and --demand do not name come from the shipped compact data (benchmarks/data/traces)",
    )
    p.add_argument("--days", type=int, metavar="N", help="with --run: days written (default: every day left)")
    p.add_argument(
        "--first-day", type=int, metavar="D", help="with --run: the first demand day written (default: --fit-days)"
    )
    p.add_argument(
        "--fit-days",
        type=int,
        default=7,
        metavar="K",
        help="with --run: the days before --first-day each app's scale and ramp are fitted on (default: 7)",
    )
    p.add_argument(
        "--fit-first",
        type=int,
        metavar="D",
        help="with --run: fit on the --fit-days days from demand day D instead (e.g. 0 with --first-day 1: the first "
        "week fitted once and written too, so that the days after it have a recorded week as their history)",
    )
    methods = "; ".join(f"{m.usage}: {m.help}" for m in FORECASTS.values())
    p.add_argument(
        "--forecast",
        default=DEFAULT_FORECAST,
        metavar="METHOD",
        help=f"with --run: each day's forecast, from the days before it only ({methods}); default {DEFAULT_FORECAST}",
    )


def run_from_args(args: argparse.Namespace, spec: TraceSpec, demand_paths: dict[str, Path]) -> int:
    """``gpualloc from-trace --run DIR``: build the run, write it, print one line; the exit status.

    Raises:
        TraceRequestError: Options that do not go with ``--run``, or a run that cannot be built.
        ScenarioError: A missing or malformed trace or forecast file.
    """
    conflicts = {
        "-o": args.output,
        "--demand-day": args.demand_day if args.demand_day != 0 else None,
        "--slots": args.slots,
    }
    for option, value in conflicts.items():
        if value is not None:
            raise TraceRequestError(f"{option}: not with --run (a run's days are whole days from --first-day)")
    if args.job_day is not None and not isinstance(args.job_day, int):
        raise TraceRequestError(f"--job-day {args.job_day}: with --run, the pod-trace day of the first day (a number)")
    traces = args.traces if args.traces is not None else SHIPPED_TRACES
    request = RunRequest(
        spec,
        first_day=args.first_day,
        days=args.days,
        fit_days=args.fit_days,
        fit_first=args.fit_first,
        job_day=args.job_day,
        forecast=args.forecast,
        seed=args.seed,
        traces=traces,
        pods=args.pods,
        demand_paths=demand_paths,
        num_jobs=args.jobs,
    )
    run = trace_run(request)
    write_run(run, args.run_dir)
    days = run.manifest["days"]
    apps = ", ".join(f"{a['name']} x{a['scale']:.4g} ramp {a['ramp']}" for a in run.manifest["apps"])
    first, last = days[0], days[-1]
    print(
        f"{len(days)} days ({first['file']} .. {last['file']}, job days {first['job_day']}..{last['job_day']}), "
        f"{spec.gpus} GPUs, forecast {request.forecast}; {apps} -> {args.run_dir}",
        file=sys.stderr,
    )
    return 0
