"""Runs of consecutive recorded days from the public traces (``gpualloc from-trace --run DIR``).

A run turns the demand days ``first_day .. first_day + days - 1`` of one or more demand series into
as many one-day scenarios, each carrying what a cluster's log would hold for that day:

- its own jobs: pod-trace day ``job_day + i`` for the run's ``i``-th day (consecutive demand days get
  consecutive job days), thinned as :func:`gpu_env.traces.build_scenario` does with a seed per day
  drawn from the run's seed and the two days;
- its realized demand (``demand``) on one scale per app for the whole run, fitted on the ``fit_days``
  days before the first written day (their 99th percentile maps to ``peak * G / apps`` GPUs), so that
  the level shifts between days stay; one ramp per app, fitted on the same days;
- its forecast (``forecast``), made by a named method (:data:`FORECASTS`) from the days before it only:
  a method is handed a :class:`ForecastInput` that holds no value of the day or of any later day.

:func:`trace_run` returns the days in memory (and the run's manifest); :func:`write_run` writes them.
``docs/traces.md`` ("Runs of days") describes the choices. ``gpu_env`` does not import ``agents``: the
``history`` method (the live planner's forecaster) is registered by ``agents.trace_forecasts`` on import.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from gpu_env.files import write_text_atomic
from gpu_env.scenario import Scenario, ScenarioError, dump_scenario
from gpu_env.traces import (
    APP_NAMES,
    DAY_SECONDS,
    DEMAND_FILES,
    POD_FILE,
    SHIPPED_TRACES,
    DemandSeries,
    TraceRequestError,
    TraceSpec,
    _parse_time,
    _rows,
    _under,
    build_scenario,
    offered_load,
    pod_days,
    pod_window,
    read_demand,
    read_pods,
)

REPOSITORY = Path(__file__).resolve().parent.parent
DEFAULT_FORECAST = "mean:7"
MANIFEST = "run.json"
FIT_QUANTILE = 99.0
"""The percentile of the fit days' values that maps to an app's share of the peak."""
RAMP_QUANTILE = 90.0
"""The percentile of the fit days' slot-to-slot changes (scaled) that sets an app's ramp."""


# ----------------------------------------------------------------------------- forecast methods


@dataclass(frozen=True)
class ForecastInput:
    """What a forecast method may read when it forecasts one day: the days before it, nothing later.

    Attributes:
        day: The demand day forecast (whole days from each series' first midnight).
        sources: Each app's demand source (``lora``, ``helios-vc6YE``, ...).
        apps: Each app's name.
        starts: Each app's first slot of the day (the series' own clock).
        past_raw: The series' days ``0 .. day - 1``, in the series' own units, shape (apps, day, T).
        past: The same days as the run records them (scaled, rounded and clipped: GPUs), same shape.
        scales: GPUs per unit of each series (the run's fitted scale), shape (apps,).
        gpus: G.
        slot_minutes: Minutes per slot.
    """

    day: int
    sources: tuple[str, ...]
    apps: tuple[str, ...]
    starts: tuple[datetime, ...]
    past_raw: np.ndarray
    past: np.ndarray
    scales: np.ndarray
    gpus: int
    slot_minutes: float

    @property
    def slots(self) -> int:
        """T, slots per day."""
        return int(self.past_raw.shape[2])


Forecaster = Callable[[ForecastInput], np.ndarray]
"""One day's forecast in GPUs, shape (apps, T); the run rounds it and clips it like the demand."""


@dataclass(frozen=True)
class ForecastMethod:
    """A named way to forecast a day (``--forecast NAME[:ARG]``).

    Attributes:
        name: What precedes the colon.
        usage: How it is written (``mean:K``).
        help: One line: what it forecasts.
        make: The forecaster for the text after the colon (empty without one); raises
            :class:`~gpu_env.traces.TraceRequestError` (or ``ScenarioError`` for a file) on a bad argument.
    """

    name: str
    usage: str
    help: str
    make: Callable[[str], Forecaster]


FORECASTS: dict[str, ForecastMethod] = {}
"""The forecast methods by name; :func:`register_forecast` adds one."""


def register_forecast(method: ForecastMethod) -> ForecastMethod:
    """Add (or replace) a forecast method in :data:`FORECASTS`; returns it."""
    FORECASTS[method.name] = method
    return method


def forecaster(text: str) -> Forecaster:
    """The forecaster ``NAME[:ARG]`` names.

    Raises:
        TraceRequestError: An unknown method or a bad argument.
        ScenarioError: A forecast file that is missing or malformed.
    """
    name, _, arg = text.partition(":")
    if name not in FORECASTS:
        known = ", ".join(m.usage for m in FORECASTS.values())
        raise TraceRequestError(f"--forecast {text}: unknown forecast method {name!r} (expected one of: {known})")
    return FORECASTS[name].make(arg)


def whole_number(text: str, what: str, default: int) -> int:
    """``text`` as a whole number of at least 1 (``default`` when empty).

    Raises:
        TraceRequestError: Not such a number (naming ``what``).
    """
    if not text:
        return default
    try:
        k = int(text)
    except ValueError:
        k = 0
    if k < 1:
        raise TraceRequestError(f"--forecast {what}: expected a whole number of days of at least 1, got {text!r}")
    return k


def _mean(arg: str) -> Forecaster:
    k = whole_number(arg, f"mean:{arg}", 7)

    def forecast(inp: ForecastInput) -> np.ndarray:
        recent = inp.past_raw[:, -k:, :]
        return recent.mean(axis=1) * inp.scales[:, None]

    return forecast


register_forecast(
    ForecastMethod(
        "mean",
        "mean:K",
        "the mean of the last K days at each slot (fewer when fewer came before; default K 7)",
        _mean,
    )
)


def _file(arg: str) -> Forecaster:
    if not arg:
        raise TraceRequestError("--forecast file: expected file:PATH (a CSV of the site's forecast, docs/traces.md)")
    table = ForecastFile.read(Path(arg))
    return table.forecast


@dataclass(frozen=True)
class ForecastFile:
    """A site's own forecast (``--forecast file:PATH``): a CSV with a ``time`` column and one per source.

    ``time`` is the start of a slot (``YYYY-MM-DD HH:MM:SS``, the series' own clock, on the run's slot
    grid); the column named after a demand source (``lora``, ``helios-vc6YE``, ``helios-vcvlY``) holds
    the forecast of that slot in the series' own units (requests in the slot, or GPUs), which the run
    scales like the demand. Every slot of every written day needs a value for each of the run's
    sources; other rows and columns are ignored, and a cell no written day needs may be empty.

    Attributes:
        path: The file.
        columns: Its header.
        rows: By slot start: the line number and the row.
    """

    path: Path
    columns: tuple[str, ...]
    rows: dict[datetime, tuple[int, dict[str, str]]]

    @classmethod
    def read(cls, path: Path) -> ForecastFile:
        """Read the file (its times; values are read when a day needs them).

        Raises:
            ScenarioError: A missing file, no ``time`` column, a malformed or repeated time.
        """
        rows: dict[datetime, tuple[int, dict[str, str]]] = {}
        columns: tuple[str, ...] = ()
        for line, row in _rows(path, ("time",)):
            columns = columns or tuple(row)
            t = _parse_time(path, line, "time", row["time"])
            if t in rows:
                raise ScenarioError(str(path), f"line {line}, time", f"{t} repeats line {rows[t][0]}")
            rows[t] = (line, row)
        if not rows:
            raise ScenarioError(str(path), "<file>", "no rows")
        return cls(path, columns, rows)

    def value(self, source: str, t: datetime) -> float:
        """The forecast of ``source`` for the slot starting at ``t``, in the series' units.

        Raises:
            ScenarioError: No such column or row, or an empty, malformed or negative value.
        """
        if source not in self.columns:
            raise ScenarioError(str(self.path), "<header>", f"missing column {source!r} (the forecast of {source})")
        if t not in self.rows:
            raise ScenarioError(str(self.path), "time", f"no row for {t} (a slot of a written day)")
        line, row = self.rows[t]
        text = (row.get(source) or "").strip()
        if not text:
            raise ScenarioError(str(self.path), f"line {line}, {source}", f"no value for {t}")
        try:
            v = float(text)
        except ValueError:
            raise ScenarioError(str(self.path), f"line {line}, {source}", f"expected a number, got {text!r}") from None
        if not math.isfinite(v) or v < 0:
            raise ScenarioError(str(self.path), f"line {line}, {source}", f"expected a number >= 0, got {text!r}")
        return v

    def forecast(self, inp: ForecastInput) -> np.ndarray:
        """The day's forecast from the file, scaled: shape (apps, T)."""
        step = timedelta(minutes=inp.slot_minutes)
        out = np.empty((len(inp.sources), inp.slots))
        for i, (source, start) in enumerate(zip(inp.sources, inp.starts, strict=True)):
            out[i] = [self.value(source, start + s * step) * inp.scales[i] for s in range(inp.slots)]
        return out


register_forecast(
    ForecastMethod("file", "file:PATH", "a site's own forecast: a CSV of time and one column per source", _file)
)


# ----------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class RunRequest:
    """A run of consecutive days (``gpualloc from-trace --run DIR``).

    Attributes:
        spec: The mapping choices; ``slots`` is set to one day's slots at ``spec.slot_minutes``
            (a run's days are whole days), and ``family`` is dropped.
        first_day: The first written demand day (whole days from each series' first midnight);
            ``None``: ``fit_days``, the first day after the fit days.
        days: Days written; ``None``: every whole day from ``first_day`` that every series has.
        fit_days: The days the scales and ramps are fitted on: those before ``first_day`` unless ``fit_first``.
        fit_first: The first of the ``fit_days`` days (None: ``first_day - fit_days``); a run whose early days
            are a later day's history sets 0, so that its first week is fitted once and written too.
        job_day: The pod-trace day of the first written day (origin-aligned); ``None``: the first
            complete day (116).
        forecast: The forecast method, ``NAME[:ARG]`` (:data:`FORECASTS`).
        seed: Seeds every day's thinning draw (with the day's job and demand days).
        traces: Folder of the traces; default: the shipped compact data (``benchmarks/data/traces``).
        pods: Pod trace file instead of the one under ``traces``.
        demand_paths: Demand files by source instead of those under ``traces``.
        num_jobs: Keep this many jobs a day instead of thinning to the load.
    """

    spec: TraceSpec
    first_day: int | None = None
    days: int | None = None
    fit_days: int = 7
    fit_first: int | None = None
    job_day: int | None = None
    forecast: str = DEFAULT_FORECAST
    seed: int = 0
    traces: Path | None = SHIPPED_TRACES
    pods: Path | None = None
    demand_paths: dict[str, Path] = field(default_factory=dict)
    num_jobs: int | None = None


@dataclass(frozen=True)
class TraceRun:
    """A run in memory.

    Attributes:
        days: Each written day in order: the scenario and its manifest entry (``file``, ``demand_day``,
            ``date``, ``job_day``, ``seed``, counts).
        manifest: What ``run.json`` holds: the sources, the choices, the scales and ramps, the days.
    """

    days: tuple[tuple[Scenario, dict[str, Any]], ...]
    manifest: dict[str, Any]

    @property
    def scenarios(self) -> list[Scenario]:
        """The days' scenarios, in order."""
        return [scenario for scenario, _ in self.days]


def _shown(path: Path) -> str:
    """A path as the manifest names it: relative to the repository when inside it, else as given."""
    try:
        return Path(path).resolve().relative_to(REPOSITORY).as_posix()
    except ValueError:
        return str(path)


def _scaled(values: np.ndarray, scale: float, gpus: int) -> np.ndarray:
    """Values in GPUs: rounded, held at least 1 GPU from 8 GPUs up (0 below), capped at G (as ``scale_demand``)."""
    floor = 1 if gpus >= 8 else 0
    return np.clip(np.round(values * scale), floor, gpus).astype(np.int64)


def fit_scale(values: np.ndarray, target: float, gpus: int) -> tuple[float, int]:
    """One app's scale and ramp, fitted on the fit days' values.

    The scale maps the values' 99th percentile to ``target`` GPUs (their maximum when that
    percentile is 0, and 1 when all are 0); the ramp is the 90th percentile of the scaled curve's
    slot-to-slot changes, at least 1.

    Returns:
        GPUs per unit of the series, and the ramp.
    """
    top = float(np.percentile(values, FIT_QUANTILE)) or float(values.max()) or 1.0
    scale = target / top
    steps = np.abs(np.diff(_scaled(values, scale, gpus)))
    ramp = max(1, math.ceil(float(np.percentile(steps, RAMP_QUANTILE)))) if steps.size else 1
    return scale, ramp


def trace_run(request: RunRequest) -> TraceRun:
    """Build a run of consecutive recorded days (module docstring; ``docs/traces.md``).

    Returns:
        The days and the manifest.

    Raises:
        TraceRequestError: A window outside a series or outside the pod trace's complete days, an
            unknown forecast method or a bad argument, slots that do not divide a day.
        ScenarioError: A missing or malformed trace or forecast file, naming file and field.
    """
    spec = replace(request.spec, family=None)
    per_day = 24 * 60 / spec.slot_minutes
    if per_day < 1 or abs(per_day - round(per_day)) > 1e-9:
        raise TraceRequestError(f"--slot-minutes {spec.slot_minutes:g}: a run's days need slots that divide 24 hours")
    T = round(per_day)
    spec = replace(spec, slots=T)
    if request.fit_days < 1:
        raise TraceRequestError(f"--fit-days {request.fit_days}: expected at least 1 day to fit the scales on")
    first = request.fit_days if request.first_day is None else request.first_day
    if first < 1:
        raise TraceRequestError(
            f"--first-day {first}: a day's forecast is made from the days before it, and demand day 0 has none "
            "(expected --first-day 1 or later)"
        )
    fit_lo = first - request.fit_days if request.fit_first is None else request.fit_first
    if request.fit_first is not None and request.fit_first < 0:
        raise TraceRequestError(f"fit_first {request.fit_first}: expected a demand day, 0 or later")
    if request.fit_first is None and first < request.fit_days:
        raise TraceRequestError(
            f"--first-day {first}: the scales are fitted on the --fit-days {request.fit_days} days before it "
            f"(expected --first-day {request.fit_days} or later)"
        )
    if request.days is not None and request.days < 1:
        raise TraceRequestError(f"--days {request.days}: expected at least 1")
    if not spec.apps:
        raise TraceRequestError("a run needs at least one demand source")
    method = forecaster(request.forecast)

    pod_path = request.pods or _under(request.traces, POD_FILE, "--pods CSV")
    pods = read_pods(pod_path)
    complete = pod_days(pods, T, spec.slot_minutes)
    series_list: list[DemandSeries] = []
    paths: dict[str, str] = {}
    for source in spec.apps:
        path = request.demand_paths.get(source)
        series = read_demand(f"{source}={path}" if path else source, request.traces, spec.slot_minutes)
        series_list.append(series)
        paths[source] = _shown(Path(path) if path else _under(request.traces, DEMAND_FILES[source], ""))
    n = request.days if request.days is not None else min(s.days for s in series_list) - first
    for series in series_list:
        if first + max(n, 1) > series.days:
            raise TraceRequestError(
                f"{paths[series.source]}: --first-day {first} --days {n} runs past the series "
                f"({series.days} whole days from {series.start:%Y-%m-%d}: demand days 0..{series.days - 1})"
            )
    job0 = complete.start if request.job_day is None else request.job_day
    if not len(complete) or job0 < complete.start or job0 + n - 1 > complete[-1]:
        span = f"{complete.start}..{complete[-1]}" if len(complete) else "none"
        raise TraceRequestError(
            f"{_shown(pod_path)}: --job-day {job0} --days {n} needs pod-trace days {job0}..{job0 + n - 1}, "
            f"outside its complete days ({span})"
        )

    G = spec.gpus
    target = spec.peak * G / len(series_list)
    names = tuple(APP_NAMES.get(s.source, s.source) for s in series_list)
    for series in series_list:
        if fit_lo + request.fit_days > series.days:
            raise TraceRequestError(f"{paths[series.source]}: the fit days {fit_lo}.. run past the series")
    window = slice(fit_lo * T, (fit_lo + request.fit_days) * T)
    fits = [fit_scale(s.values[window], target, G) for s in series_list]
    scales = np.array([scale for scale, _ in fits])
    raw = np.stack([s.values[: (first + n) * T].reshape(first + n, T) for s in series_list])
    recorded = np.stack([_scaled(raw[i], scales[i], G) for i in range(len(series_list))])

    days: list[tuple[Scenario, dict[str, Any]]] = []
    for k in range(n):
        d, job_day = first + k, job0 + k
        inp = ForecastInput(
            day=d,
            sources=tuple(s.source for s in series_list),
            apps=names,
            starts=tuple(s.start + timedelta(days=d) for s in series_list),
            past_raw=raw[:, :d, :].copy(),
            past=recorded[:, :d, :].copy(),
            scales=scales.copy(),
            gpus=G,
            slot_minutes=spec.slot_minutes,
        )
        forecast = _scaled(np.asarray(method(inp), dtype=np.float64).reshape(len(names), T), 1.0, G)
        realtime = [
            {
                "name": names[i],
                "demand": [int(x) for x in recorded[i, d]],
                "ramp": fits[i][1],
                "forecast": [int(x) for x in forecast[i]],
            }
            for i in range(len(names))
        ]
        date = f"{inp.starts[0]:%Y-%m-%d}"
        jobs, skipped = pod_window(pods, job_day * DAY_SECONDS, spec)
        seed = [request.seed, job_day, d]
        scenario, summary = build_scenario(
            replace(spec, name=f"{spec.name}-{date}"),
            jobs,
            [],
            np.random.default_rng(seed),
            num_jobs=request.num_jobs,
            realtime=realtime,
        )
        info = {
            "file": f"{k:02d}-{date}.yaml",
            "name": scenario.name,
            "demand_day": d,
            "date": {s.source: f"{start:%Y-%m-%d}" for s, start in zip(series_list, inp.starts, strict=True)},
            "job_day": job_day,
            "seed": seed,
            "forecast": request.forecast,
            "jobs": summary["kept"],
            "running": summary["running_kept"],
            "window_jobs": summary["window_jobs"],
            "pods_left_out": dict(sorted(skipped.items())),
            "offered_load": round(offered_load(scenario), 4),
        }
        days.append((scenario, info))

    manifest = {
        "about": "A run of consecutive recorded days from the public traces (docs/traces.md, 'Runs of days').",
        "sources": {"pods": _shown(pod_path), "demand": paths},
        "cluster": {"gpus": G, "node_size": spec.node_size},
        "horizon": {"slots": T, "slot_minutes": spec.slot_minutes, "decay": spec.decay},
        "choices": {
            "peak": spec.peak,
            "load": spec.load,
            "num_jobs": request.num_jobs,
            "penalty_factor": spec.penalty_factor,
            "max_jobs_per_gpu": spec.max_jobs_per_gpu,
        },
        "forecast": request.forecast,
        "seed": request.seed,
        "fit_days": list(range(fit_lo, fit_lo + request.fit_days)),
        "apps": [
            {
                "name": names[i],
                "source": s.source,
                "scale": float(scales[i]),
                "ramp": fits[i][1],
                "target_gpus": target,
            }
            for i, s in enumerate(series_list)
        ],
        "days": [info for _, info in days],
    }
    return TraceRun(tuple(days), manifest)


def write_run(run: TraceRun, folder: str | Path) -> list[Path]:
    """Write a run: each day as YAML (its manifest ``file``), then ``run.json``, each file atomically.

    Everything is built before this is called, so bad input never leaves a file half-written; a
    failed write leaves the file it was writing as it was.

    Returns:
        The files written, the manifest last.

    Raises:
        gpu_env.files.OutputError: A file could not be written.
    """
    folder = Path(folder)
    written = []
    for scenario, info in run.days:
        path = folder / info["file"]
        write_text_atomic(path, dump_scenario(scenario))
        written.append(path)
    path = folder / MANIFEST
    write_text_atomic(path, manifest_text(run.manifest))
    written.append(path)
    return written


def manifest_text(manifest: dict[str, Any]) -> str:
    """The manifest as JSON: a line per top-level key, and a line per entry of a list of objects (the days)."""

    def value(v: Any) -> str:
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            return "[\n" + ",\n".join(f"  {json.dumps(x)}" for x in v) + "\n ]"
        return json.dumps(v)

    return "{\n" + ",\n".join(f" {json.dumps(k)}: {value(v)}" for k, v in manifest.items()) + "\n}\n"


def load_run(folder: str | Path) -> list[Path]:
    """The day files of a written run, in order (from its ``run.json``).

    Raises:
        ScenarioError: No readable manifest.
    """
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ScenarioError(str(folder / MANIFEST), "<file>", f"cannot read the run's manifest: {exc}") from None
    return [folder / day["file"] for day in manifest["days"]]
