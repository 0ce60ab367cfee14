"""Scenarios drawn from real public traces: readers and the trace -> scenario mapping.

Three kinds of trace file (see ``docs/traces.md`` for the mapping and its
choices, their origin and terms; the raw files are not part of the repository, but a
compact form of the four the mapping reads is, in ``benchmarks/data/traces``: :func:`compact_traces`):

- **Jobs** from the Alibaba GPU pod trace (``openb_pod_list_default.csv``,
  Weng et al., USENIX ATC '23): a job's GPU count (rounded up to a power of
  two), its run time (``deletion_time - scheduled_time``, in slots, rounded up)
  and its arrival (``creation_time``). Tasks running when the window opens
  become inherited jobs (``running_on``).
- **Real-time demand** from hourly request counts (``lora_requests_per_hour.csv``,
  Lin et al., SoCC '25) or from the per-minute GPU demand
  (``running_gpu_num + pending_gpu_num``) of a SenseTime Helios virtual cluster
  (Hu et al., SC '21), scaled so that the series' 99th percentile is a chosen
  fraction of the cluster.

:func:`from_trace` builds one scenario from the raw files for a chosen window
(``gpualloc from-trace``). The ``trace-*`` generator families
(:data:`TRACE_FAMILIES`, reached through :func:`gpu_env.generators.generate`)
draw fresh scenarios from compact statistics extracted once from the same files
into ``gpu_env/data/trace_stats.json`` (``python -m gpu_env.traces extract``),
so that they work without the raw traces. Both go through :func:`build_scenario`, and so do
the runs of consecutive recorded days of :mod:`gpu_env.trace_runs` (``gpualloc from-trace --run``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from gpu_env import rules
from gpu_env.files import write_text_atomic
from gpu_env.scenario import DrawError, JobType, Scenario, ScenarioError, scenario_from_dict

STATS_PATH = Path(__file__).resolve().parent / "data" / "trace_stats.json"

POD_FILE = "alibaba-gpu-v2023/openb_pod_list_default.csv"
DEMAND_FILES = {
    "lora": "alibaba-genai-v2026/lora_requests_per_hour.csv",
    "helios-vc6YE": "helios-earth/vc6YE_cluster_sequence_vc.csv",
    "helios-vcvlY": "helios-earth/vcvlY_cluster_sequence_vc.csv",
}
APP_NAMES = {"lora": "imagegen", "helios-vc6YE": "vc6YE", "helios-vcvlY": "vcvlY"}

# The trace has no priorities: its QoS classes stand in for them.
QOS_PRIORITY = {"BE": 1.0, "Burstable": 2.0, "LS": 3.0, "Guaranteed": 4.0}
DAY_SECONDS = 86_400


class TraceRequestError(ValueError):
    """A trace request that cannot be met: a day outside the trace, no complete window, a day that is not one."""


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Pod:
    """One row of the Alibaba pod trace (times in seconds from the trace origin)."""

    name: str
    num_gpu: int
    gpu_milli: int
    qos: str
    creation: int
    deletion: int
    scheduled: int | None  # None: never scheduled


@dataclass(frozen=True)
class TraceJob:
    """A job on the scenario's slot grid, before thinning and block assignment.

    Attributes:
        name: Job id (the pod name for real windows).
        gpus: GPUs, a power of two.
        duration: Slots (for running jobs: slots left when the window opens).
        release: Arrival slot inside the window (0 for running jobs).
        qos: The trace's QoS class, which sets the priority.
        running: Already running when the window opens (becomes ``running_on``).
    """

    name: str
    gpus: int
    duration: int
    release: int
    qos: str
    running: bool = False


@dataclass(frozen=True)
class DemandSeries:
    """A demand series on a regular slot grid that starts at a midnight.

    Attributes:
        source: The demand source key (``lora``, ``helios-vc6YE``, ...).
        values: Raw demand per slot (requests per hour, or GPUs), shape (n,).
        start: Time of ``values[0]``.
        slot_minutes: Minutes per value.
    """

    source: str
    values: np.ndarray
    start: datetime
    slot_minutes: float

    @property
    def slots_per_day(self) -> int:
        """Values per day."""
        return round(24 * 60 / self.slot_minutes)

    @property
    def days(self) -> int:
        """Whole days in the series."""
        return self.values.size // self.slots_per_day

    def window(self, day: int, slots: int) -> np.ndarray:
        """The ``slots`` values from the midnight of ``day`` (0 = the first whole day).

        Raises:
            TraceRequestError: The window runs past the series.
        """
        first = day * self.slots_per_day
        if day < 0 or first + slots > self.values.size:
            last = (self.values.size - slots) // self.slots_per_day
            raise TraceRequestError(f"demand day {day} of {self.source} is outside the series (expected 0..{last})")
        return self.values[first : first + slots]


@dataclass(frozen=True)
class TraceSpec:
    """How a trace window becomes a scenario (the choices of ``docs/traces.md``).

    Attributes:
        name: Scenario name.
        gpus: G.
        node_size: GPUs per node (the Alibaba cluster's nodes hold up to 8).
        slots: T.
        slot_minutes: Minutes per slot.
        decay: Per-slot decay of job value.
        load: Job GPU-slots kept, as a multiple of the GPU-slots the forecast
            demand leaves free; the window's jobs are thinned to it.
        peak: The peak of each app's day of demand maps to ``peak * G / apps`` GPUs.
        penalty_factor: Real-time penalty as a multiple of the mean job priority.
        max_duration: Longest duration kept, in multiples of T (past the horizon it changes nothing).
        max_jobs_per_gpu: At most this many jobs per GPU are kept (thinning further), so that
            every planner handles the scenario.
        apps: Demand sources, one real-time app each.
        family: Family name written into generated scenarios.
    """

    name: str
    gpus: int = 16
    node_size: int = 8
    slots: int = 24
    slot_minutes: float = 60.0
    decay: float = 0.99
    load: float = 1.0
    peak: float = 0.4
    penalty_factor: float = 8.0
    max_duration: int = 2
    max_jobs_per_gpu: float = 2.5
    apps: tuple[str, ...] = ("lora",)
    family: str | None = None

    @property
    def slot_seconds(self) -> float:
        """Seconds per slot."""
        return self.slot_minutes * 60.0


TRACE_FAMILIES: dict[str, TraceSpec] = {
    s.name: s
    for s in (
        TraceSpec("trace-alibaba", gpus=16, node_size=8, apps=("lora",), family="trace-alibaba"),
        TraceSpec(
            "trace-helios", gpus=32, node_size=8, peak=0.5, apps=("helios-vc6YE", "helios-vcvlY"), family="trace-helios"
        ),
    )
}


# ----------------------------------------------------------------------------- readers


def _under(traces: str | Path | None, name: str, option: str) -> Path:
    """``traces / name``; without a traces folder, an error naming the two ways to give the file."""
    if traces is None:
        raise ScenarioError(
            "from-trace", "traces", f"no traces folder given for {name}: pass --traces DIR or {option} (docs/traces.md)"
        )
    return Path(traces) / name


def _rows(path: Path, needed: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """CSV rows as dicts with their line numbers; errors name the file and the column."""
    source = str(path)
    with _open(path) as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in needed if c not in (reader.fieldnames or [])]
        if missing:
            raise ScenarioError(source, "<header>", f"missing column(s): {', '.join(missing)}")
        for row in reader:
            yield reader.line_num, row


def _open(path: Path) -> TextIO:
    """A trace file open for reading as CSV; a missing or unreadable file is a ScenarioError naming it."""
    source = str(path)
    try:
        return path.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(source, "<file>", "no such file (see docs/traces.md for where the traces live)") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise ScenarioError(source, "<file>", f"cannot read: {exc}") from None


def _fieldnames(path: Path) -> list[str]:
    """A CSV file's header; errors name the file."""
    with _open(path) as handle:
        return next(csv.reader(handle), [])


def _int(path: Path, line: int, row: dict[str, str], column: str, allow_empty: bool = False) -> int | None:
    text = (row.get(column) or "").strip()
    if not text and allow_empty:
        return None
    try:
        return int(float(text))
    except ValueError:
        raise ScenarioError(str(path), f"line {line}, {column}", f"expected a number, got {text!r}") from None


def read_pods(path: str | Path) -> list[Pod]:
    """Read the Alibaba pod trace (``openb_pod_list_default.csv``).

    Raises:
        ScenarioError: A missing file, column or malformed number, naming the line.
    """
    path = Path(path)
    cols = ("name", "num_gpu", "gpu_milli", "qos", "creation_time", "deletion_time", "scheduled_time")
    pods = []
    for line, row in _rows(path, cols):
        qos = row["qos"].strip()
        if qos not in QOS_PRIORITY:
            raise ScenarioError(str(path), f"line {line}, qos", f"expected one of {', '.join(QOS_PRIORITY)}")
        pods.append(
            Pod(
                name=row["name"].strip(),
                num_gpu=_int(path, line, row, "num_gpu") or 0,
                gpu_milli=_int(path, line, row, "gpu_milli", allow_empty=True) or 0,
                qos=qos,
                creation=_int(path, line, row, "creation_time") or 0,
                deletion=_int(path, line, row, "deletion_time") or 0,
                scheduled=_int(path, line, row, "scheduled_time", allow_empty=True),
            )
        )
    if not pods:
        raise ScenarioError(str(path), "<file>", "no rows")
    return pods


def _parse_time(path: Path, line: int, column: str, text: str) -> datetime:
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise ScenarioError(
            str(path), f"line {line}, {column}", f"expected YYYY-MM-DD HH:MM:SS, got {text!r}"
        ) from None


def _on_grid(
    path: Path, times: list[datetime], values: list[float], step_minutes: float, slot_minutes: float, how: str
) -> tuple[np.ndarray, datetime]:
    """Values at regular times, from the first midnight, aggregated into slots (``how``: sum or mean)."""
    if not times:
        raise ScenarioError(str(path), "<file>", "no rows")
    ratio = slot_minutes / step_minutes
    if ratio < 1 or abs(ratio - round(ratio)) > 1e-9:
        raise ScenarioError(
            str(path),
            "slot_minutes",
            f"expected a multiple of the file's {step_minutes:g}-minute step, got {slot_minutes:g}",
        )
    per = round(ratio)
    first = times[0]
    midnight = datetime(first.year, first.month, first.day)
    if first != midnight:
        midnight += timedelta(days=1)
    step = timedelta(minutes=step_minutes)
    grid: dict[int, float] = {}
    for t, v in zip(times, values, strict=True):
        offset = (t - midnight) / step
        if offset < 0:
            continue
        if abs(offset - round(offset)) > 1e-9:
            raise ScenarioError(str(path), "time", f"{t} is not on the file's {step_minutes:g}-minute grid")
        grid[round(offset)] = v
    n = (max(grid) + 1) // per if grid else 0
    raw = np.full(n * per, np.nan)
    for i, v in grid.items():
        if i < raw.size:
            raw[i] = v
    if np.isnan(raw).any():
        gap = int(np.flatnonzero(np.isnan(raw))[0])
        raise ScenarioError(str(path), "time", f"gap in the series at {midnight + gap * step}")
    blocks = raw.reshape(n, per)
    out = blocks.sum(axis=1) if how == "sum" else blocks.mean(axis=1)
    return out, midnight


def read_requests_per_hour(path: str | Path, slot_minutes: float = 60.0) -> DemandSeries:
    """Read hourly request counts (``lora_requests_per_hour.csv``), summed into slots of ``slot_minutes``.

    Raises:
        ScenarioError: A missing file or column, a malformed row, or slots that are not whole hours.
    """
    path = Path(path)
    times, values = [], []
    for line, row in _rows(path, ("hour_start", "requests")):
        times.append(_parse_time(path, line, "hour_start", row["hour_start"]))
        values.append(float(_int(path, line, row, "requests") or 0))
    grid, start = _on_grid(path, times, values, 60.0, slot_minutes, "sum")
    return DemandSeries("lora", grid, start, slot_minutes)


HELIOS_COMPACT_COLUMNS = ("time", "minutes", "demand_gpu_minutes")
"""Columns of a compact Helios file (``python -m gpu_env.traces compact``): per row, the start of a block of
``minutes`` minutes and the sum over those minutes of ``running_gpu_num + pending_gpu_num``."""


def _helios_minutes(path: Path) -> tuple[list[datetime], list[float]]:
    """A Helios per-minute VC file's times and demand (``running_gpu_num + pending_gpu_num``)."""
    times, values = [], []
    for line, row in _rows(path, ("time", "running_gpu_num", "pending_gpu_num")):
        times.append(_parse_time(path, line, "time", row["time"]))
        running = _int(path, line, row, "running_gpu_num") or 0
        pending = _int(path, line, row, "pending_gpu_num") or 0
        values.append(float(running + pending))
    return times, values


def read_helios_demand(path: str | Path, slot_minutes: float = 60.0, source: str = "helios") -> DemandSeries:
    """Read a Helios VC file: demand = ``running_gpu_num + pending_gpu_num``, averaged per slot.

    Two forms are read: the per-minute file of the trace, and the compact file
    :func:`compact_traces` writes (:data:`HELIOS_COMPACT_COLUMNS`: the demand summed over blocks of
    ``minutes`` minutes), which gives the same slot values for any slot that is a whole number of
    blocks (the sums are whole numbers, so both are the exact sum over the slot's minutes divided by
    its minutes).

    Raises:
        ScenarioError: A missing file or column, a malformed row, a gap in the minutes, or slots
            finer than a compact file's blocks.
    """
    path = Path(path)
    if "demand_gpu_minutes" not in _fieldnames(path):
        times, values = _helios_minutes(path)
        grid, start = _on_grid(path, times, values, 1.0, slot_minutes, "mean")
        return DemandSeries(source, grid, start, slot_minutes)
    times, values = [], []
    step: int | None = None
    for line, row in _rows(path, HELIOS_COMPACT_COLUMNS):
        times.append(_parse_time(path, line, "time", row["time"]))
        minutes = _int(path, line, row, "minutes")
        if step is None:
            step = minutes
        if minutes != step or not minutes or minutes < 1:
            raise ScenarioError(str(path), f"line {line}, minutes", f"expected {step} in every row, got {minutes}")
        values.append(float(_int(path, line, row, "demand_gpu_minutes") or 0))
    grid, start = _on_grid(path, times, values, float(step or 1), slot_minutes, "sum")
    return DemandSeries(source, grid / slot_minutes, start, slot_minutes)


def read_demand(source: str, traces: str | Path | None = None, slot_minutes: float = 60.0) -> DemandSeries:
    """Read one of :data:`DEMAND_FILES` from a traces folder (or ``source`` given as ``key=path``).

    Raises:
        ScenarioError: An unknown source, no file given and no traces folder, or a
            malformed file.
    """
    key, _, explicit = source.partition("=")
    if key not in DEMAND_FILES:
        raise ScenarioError(
            "from-trace", "demand", f"unknown demand source {key!r} (expected one of: {', '.join(DEMAND_FILES)})"
        )
    path = Path(explicit) if explicit else _under(traces, DEMAND_FILES[key], f"--demand {key}=CSV")
    if key == "lora":
        return read_requests_per_hour(path, slot_minutes)
    return read_helios_demand(path, slot_minutes, key)


# ----------------------------------------------------------------------------- pods -> jobs


def gpu_block(num_gpu: int) -> int:
    """GPUs of a job: the trace's count (a GPU share counts as one GPU) rounded up to a power of two."""
    k = max(1, num_gpu)
    return 1 << (k - 1).bit_length()


def _slots(seconds: float, slot_seconds: float) -> int:
    """Whole slots covering ``seconds`` (at least one)."""
    return max(1, math.ceil(seconds / slot_seconds))


def pod_window(pods: Sequence[Pod], start: int, spec: TraceSpec) -> tuple[list[TraceJob], Counter[str]]:
    """The jobs of a window of the pod trace on the spec's slot grid.

    Args:
        pods: The trace.
        start: Window start, seconds from the trace origin.
        spec: Slot length, horizon and duration cap.

    Returns:
        The jobs (running ones first, then arrivals in arrival order) and a count
        of the pods left out and why.
    """
    slot_s = spec.slot_seconds
    end = start + spec.slots * slot_s
    cap = spec.max_duration * spec.slots
    jobs: list[TraceJob] = []
    skipped: Counter[str] = Counter()
    arrivals: list[tuple[int, int, TraceJob]] = []
    for i, pod in enumerate(pods):
        if pod.creation >= end or pod.deletion <= start:
            continue  # outside the window
        if pod.num_gpu <= 0:
            skipped["no GPU"] += 1
            continue
        if pod.scheduled is None:
            skipped["never scheduled (no run time)"] += 1
            continue
        k = gpu_block(pod.num_gpu)
        if pod.scheduled <= start:  # holds its GPUs when the window opens
            remaining = min(cap, _slots(pod.deletion - start, slot_s))
            jobs.append(TraceJob(pod.name, k, remaining, 0, pod.qos, running=True))
            continue
        release = max(0, int((pod.creation - start) // slot_s))
        duration = min(cap, _slots(pod.deletion - pod.scheduled, slot_s))
        arrivals.append((release, i, TraceJob(pod.name, k, duration, release, pod.qos)))
    arrivals.sort(key=lambda a: (a[0], a[1]))
    return jobs + [a[2] for a in arrivals], skipped


def pod_days(pods: Sequence[Pod], slots: int = 24, slot_minutes: float = 60.0) -> range:
    """Origin-aligned days whose window the trace covers completely.

    Every deletion falls in the trace's last weeks, so a window is complete only
    from the first deletion on (before it, tasks that ended are missing).
    """
    first = min(p.deletion for p in pods)
    last_creation = max(p.creation for p in pods)
    span = slots * slot_minutes * 60
    lo = math.ceil(first / DAY_SECONDS)
    hi = math.floor((last_creation - span) / DAY_SECONDS)
    return range(lo, hi + 1)


# ----------------------------------------------------------------------------- the mapping


def job_type(duration_hours: float) -> JobType:
    """A label for a trace job, which records none: by run length (``docs/traces.md``)."""
    if duration_hours >= 4:
        return JobType.TRAINING
    if duration_hours > 1:
        return JobType.BATCH_INFERENCE
    return JobType.QUANTIZATION


def scale_demand(window: np.ndarray, target: float, gpus: int) -> tuple[list[int], int]:
    """Scale a day of demand so that its peak becomes ``target`` GPUs.

    Returns:
        The demand curve (integers in ``[1, G]``, or ``[0, G]`` below 8 GPUs) and
        the ramp: the 90th percentile of the curve's slot-to-slot changes, at
        least 1, so that the app can follow nine in ten of the day's changes.
    """
    top = float(window.max()) or 1.0
    floor = 1 if gpus >= 8 else 0
    curve = np.clip(np.round(window * (target / top)), floor, gpus).astype(np.int64)
    steps = np.abs(np.diff(curve))
    ramp = max(1, math.ceil(float(np.percentile(steps, 90)))) if steps.size else 1
    return [int(x) for x in curve], ramp


def build_scenario(
    spec: TraceSpec,
    jobs: Sequence[TraceJob],
    demands: Sequence[tuple[DemandSeries, int]],
    rng: np.random.Generator,
    *,
    num_jobs: int | None = None,
    seed: int | None = None,
    realtime: Sequence[dict[str, Any]] | None = None,
) -> tuple[Scenario, dict[str, Any]]:
    """Turn a window's jobs and demand into a scenario (the mapping of ``docs/traces.md``).

    Args:
        spec: The choices (cluster, horizon, load, peak, penalty).
        jobs: The window's jobs, running ones included, in arrival order.
        demands: One (series, day) per real-time app, each day scaled to its own peak.
        rng: Draws the thinning (which jobs are kept).
        num_jobs: Keep this many jobs instead of thinning to ``spec.load``.
        seed: Written into the scenario with ``spec.family``.
        realtime: The apps already scaled instead of ``demands`` (a run of days scales them once
            for the run): per app ``name``, ``demand`` (T integers), ``ramp`` and optionally
            ``forecast`` (T integers); ``initial`` and ``penalty`` are set here.

    Returns:
        The checked scenario and a summary (jobs seen, kept, dropped and why).
    """
    G, T = spec.gpus, spec.slots
    # Real-time apps: each series scaled so that its 99th percentile is its share of the peak.
    apps: list[dict[str, Any]] = []
    if realtime is not None:
        apps = [dict(a) for a in realtime]
    for series, day in demands if realtime is None else ():
        curve, ramp = scale_demand(series.window(day, T), spec.peak * G / len(demands), G)
        apps.append({"name": APP_NAMES.get(series.source, series.source), "demand": curve, "ramp": ramp})
    demand_total = np.sum([a["demand"] for a in apps], axis=0) if apps else np.zeros(T)

    # Thinning: keep a uniform sample of the window's jobs, so that sizes, run times and the
    # arrival pattern keep the trace's proportions, sized to the capacity the demand leaves.
    fits = [j for j in jobs if j.gpus <= G and rules.allowed_block_starts(j.gpus, G, spec.node_size).size]
    too_big = len(jobs) - len(fits)
    area = sum(j.gpus * min(j.duration, T - j.release) for j in fits)
    free = G * T - float(np.sum(demand_total))
    if num_jobs is not None:
        keep_fraction = min(1.0, num_jobs / max(1, len(fits)))
    else:
        keep_fraction = min(1.0, spec.load * free / area) if area else 1.0
        keep_fraction = min(keep_fraction, spec.max_jobs_per_gpu * G / max(1, len(fits)))
    running = [j for j in fits if j.running]
    arriving = [j for j in fits if not j.running]
    if num_jobs is not None:
        n_run = min(len(running), round(num_jobs * len(running) / max(1, len(fits))))
        n_arr = min(len(arriving), num_jobs - n_run)
    else:
        n_run, n_arr = round(keep_fraction * len(running)), round(keep_fraction * len(arriving))
    kept_run = [running[i] for i in sorted(rng.choice(len(running), n_run, replace=False))] if n_run else []
    kept_arr = [arriving[i] for i in sorted(rng.choice(len(arriving), n_arr, replace=False))] if n_arr else []

    # Running jobs take the lowest free allowed block while real-time keeps its slot-0 demand.
    room = G - int(demand_total[0]) if apps else G
    owner = np.zeros(G, dtype=bool)
    entries: list[dict[str, Any]] = []
    no_room = 0
    for job in kept_run:
        spot = next(
            (
                int(a)
                for a in rules.allowed_block_starts(job.gpus, G, spec.node_size)
                if not owner[a : a + job.gpus].any()
            ),
            None,
        )
        if spot is None or job.gpus > room:
            no_room += 1
            continue
        owner[spot : spot + job.gpus] = True
        room -= job.gpus
        entries.append(_job_entry(job, spec, running_on=list(range(spot, spot + job.gpus))))
    entries += [_job_entry(job, spec) for job in kept_arr]

    priorities = [QOS_PRIORITY[j.qos] for j in fits] or [1.0]
    penalty = round(spec.penalty_factor * float(np.mean(priorities)), 1)
    data: dict[str, Any] = {"name": spec.name}
    if spec.family is not None:
        data["family"] = spec.family
        if seed is not None:
            data["seed"] = seed
    data["cluster"] = {"gpus": G, "node_size": spec.node_size}
    data["horizon"] = {"slots": T, "slot_minutes": spec.slot_minutes, "decay": spec.decay}
    data["realtime"] = [{**a, "initial": a["demand"][0], "penalty": penalty} for a in apps]
    data["jobs"] = entries
    scenario = scenario_from_dict(data, f"<{spec.name}>")
    summary = {
        "window_jobs": len(jobs),
        "too_big_for_cluster": too_big,
        "kept_fraction": round(keep_fraction, 4),
        "kept": len(entries),
        "running_kept": sum(1 for e in entries if "running_on" in e),
        "running_without_room": no_room,
        "penalty": penalty,
        "ramps": {a["name"]: a["ramp"] for a in apps},
    }
    return scenario, summary


def _job_entry(job: TraceJob, spec: TraceSpec, running_on: list[int] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": job.name,
        "type": job_type(job.duration * spec.slot_minutes / 60).value,
        "gpus": job.gpus,
        "duration": job.duration,
    }
    if job.release and running_on is None:
        entry["release"] = job.release
    entry["priority"] = QOS_PRIORITY[job.qos]
    if running_on is not None:
        entry["running_on"] = running_on
    return entry


# ----------------------------------------------------------------------------- from the raw traces


@dataclass(frozen=True)
class TraceRequest:
    """What ``gpualloc from-trace`` asks for (all paths optional: default under ``traces``).

    Attributes:
        spec: The mapping choices.
        job_day: Origin-aligned day of the pod trace; ``None``: the middle complete
            day; ``"most-loaded"``: the complete day whose kept jobs need the most
            GPU-slots relative to what the demand leaves free.
        demand_day: Whole day of each demand series from its first midnight;
            ``"busiest"``: the day with the largest total of the first app's series.
        seed: Seed of the thinning draw.
        traces: Folder of the raw traces (not in the repository, see ``docs/traces.md``);
            ``None``: every file is given by ``pods`` and ``demand_paths``.
        pods: Pod trace file instead of the one under ``traces``.
        demand_paths: Demand files by source instead of those under ``traces``.
        num_jobs: Keep this many jobs instead of thinning to the load.
    """

    spec: TraceSpec
    job_day: int | str | None = None
    demand_day: int | str = 0
    seed: int = 0
    traces: Path | None = None
    pods: Path | None = None
    demand_paths: dict[str, Path] = field(default_factory=dict)
    num_jobs: int | None = None


# The windows of the committed scenarios configs/scenarios/trace-*.yaml (job day, demand day),
# chosen by the rules "most-loaded" and "busiest" (docs/traces.md).
BENCHMARK_DAYS: dict[str, tuple[int, int]] = {"trace-alibaba": (138, 17), "trace-helios": (137, 28)}


def busiest_day(series: DemandSeries, slots: int) -> int:
    """The whole day whose first ``slots`` values sum highest (the earliest on a tie)."""
    totals = [float(series.window(d, slots).sum()) for d in range(series.days) if _fits(series, d, slots)]
    return int(np.argmax(totals))


def _fits(series: DemandSeries, day: int, slots: int) -> bool:
    return day * series.slots_per_day + slots <= series.values.size


def offered_load(scenario: Scenario) -> float:
    """Job GPU-slots inside the horizon over the GPU-slots the forecast demand leaves free."""
    area = sum(job.gpus * max(0, min(job.duration, scenario.slots - job.release)) for job in scenario.jobs)
    free = scenario.gpus * scenario.slots - int(scenario.demand.sum())
    return area / max(1, free)


def from_trace(request: TraceRequest) -> tuple[Scenario, dict[str, Any]]:
    """Build a scenario from the raw trace files for one window.

    Returns:
        The scenario and a summary of the conversion (window, counts, choices).

    Raises:
        ScenarioError: A missing or malformed trace file, naming file and field.
        TraceRequestError: A day outside the trace, or a trace without a complete window.
    """
    spec = request.spec
    pod_path = request.pods or _under(request.traces, POD_FILE, "--pods CSV")
    pods = read_pods(pod_path)
    days = pod_days(pods, spec.slots, spec.slot_minutes)
    if not len(days):
        raise TraceRequestError(f"{pod_path}: no complete window of {spec.slots} slots in the trace")
    series_list = []
    for source in spec.apps:
        path = request.demand_paths.get(source)
        series_list.append(read_demand(f"{source}={path}" if path else source, request.traces, spec.slot_minutes))
    if request.demand_day == "busiest":
        demand_day = busiest_day(series_list[0], spec.slots) if series_list else 0
    elif isinstance(request.demand_day, int):
        demand_day = request.demand_day
    else:
        raise TraceRequestError(f"demand day must be a whole number or 'busiest', got {request.demand_day!r}")
    demands = [(series, demand_day) for series in series_list]

    def build(day: int) -> tuple[Scenario, dict[str, Any], Counter[str]]:
        jobs, skipped = pod_window(pods, day * DAY_SECONDS, spec)
        rng = np.random.default_rng(request.seed)
        scenario, summary = build_scenario(spec, jobs, demands, rng, num_jobs=request.num_jobs)
        return scenario, summary, skipped

    if request.job_day == "most-loaded":
        loads = [(offered_load(build(day)[0]), -day) for day in days]
        job_day = -max(loads)[1]
    elif request.job_day is None:
        job_day = days[len(days) // 2]
    elif isinstance(request.job_day, int):
        job_day = request.job_day
    else:
        raise TraceRequestError(f"job day must be a whole number or 'most-loaded', got {request.job_day!r}")
    if job_day not in days:
        raise TraceRequestError(
            f"{pod_path}: job day {job_day} is not a complete window (expected {days.start}..{days[-1]})"
        )
    scenario, summary, skipped = build(job_day)
    summary = {
        "pods": str(pod_path),
        "job_day": job_day,
        "job_window_s": [job_day * DAY_SECONDS, job_day * DAY_SECONDS + int(spec.slots * spec.slot_seconds)],
        "pods_left_out": dict(skipped),
        "demand_day": demand_day,
        "demand": {s.source: str(s.start + timedelta(days=demand_day)) for s, _ in demands},
        "offered_load": round(offered_load(scenario), 4),
        **summary,
    }
    return scenario, summary


# ----------------------------------------------------------------------------- statistics for the generator


def extract_stats(traces: str | Path) -> dict[str, Any]:
    """Compact statistics of the traces for the ``trace-*`` families (hourly slots, 24-slot days).

    Per complete day of the pod trace: the number of arrivals and of running
    tasks at midnight; over all days: the arrival hours, the joint counts of
    (GPUs, duration, QoS) of arrivals and of (GPUs, remaining duration, QoS) of
    running tasks; and each demand series per hour.
    """
    traces = Path(traces)
    spec = TraceSpec("stats")
    pods = read_pods(traces / POD_FILE)
    days = pod_days(pods, spec.slots, spec.slot_minutes)
    hours = Counter[int]()
    arrivals = Counter[tuple[int, int, str]]()
    running = Counter[tuple[int, int, str]]()
    day_arrivals, day_running = [], []
    for day in days:
        jobs, _ = pod_window(pods, day * DAY_SECONDS, spec)
        n_run = 0
        for j in jobs:
            if j.running:
                running[(j.gpus, j.duration, j.qos)] += 1
                n_run += 1
            else:
                arrivals[(j.gpus, j.duration, j.qos)] += 1
                hours[j.release] += 1
        day_running.append(n_run)
        day_arrivals.append(len(jobs) - n_run)
    demand = {}
    for source in DEMAND_FILES:
        series = read_demand(source, traces, 60.0)
        demand[source] = {
            "start": str(series.start),
            "per_hour": [round(float(v), 2) for v in series.values[: series.days * 24]],
        }
    return {
        "about": (
            "Derived by `python -m gpu_env.traces extract` from the raw public traces (see docs/traces.md): "
            "Alibaba cluster-trace-gpu-v2023 (Weng et al., USENIX ATC '23; research or study use), "
            "Alibaba GenAI serving trace v2026 (Lin et al., SoCC '25; research or study use), "
            "SenseTime Helios (Hu et al., SC '21; CC BY 4.0)."
        ),
        "slot_minutes": 60,
        "max_duration": spec.max_duration * spec.slots,
        "pods": {
            "days": [days.start, days[-1]],
            "day_arrivals": day_arrivals,
            "day_running": day_running,
            "arrival_hours": [hours[h] for h in range(spec.slots)],
            "arrivals": [[k, d, q, n] for (k, d, q), n in sorted(arrivals.items())],
            "running": [[k, d, q, n] for (k, d, q), n in sorted(running.items())],
        },
        "demand": demand,
    }


@lru_cache(maxsize=1)
def load_stats(path: str | Path = STATS_PATH) -> dict[str, Any]:
    """The shipped statistics (``gpu_env/data/trace_stats.json``)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _draw_table(rng: np.random.Generator, table: list[list[Any]], n: int) -> list[tuple[int, int, str]]:
    counts = np.array([row[3] for row in table], dtype=np.float64)
    picks = rng.choice(len(table), size=n, p=counts / counts.sum())
    return [(int(table[i][0]), int(table[i][1]), str(table[i][2])) for i in picks]


def generate(
    family: str, seed: int, *, gpus: int | None = None, num_jobs: int | None = None, name: str | None = None
) -> Scenario:
    """Draw a scenario of a ``trace-*`` family from the shipped statistics.

    A day of the pod trace is drawn (its number of arrivals and of running
    tasks), each arrival's hour from the trace's arrival hours and its (GPUs,
    duration, QoS) from their joint counts, each running task from the running
    ones'; each app's demand is a whole day of its hourly series (one day draw
    for all apps). Then :func:`build_scenario` thins and maps it as for a real window.

    Raises:
        KeyError: Unknown family.
    """
    if family not in TRACE_FAMILIES:
        raise KeyError(f"unknown trace family {family!r} (expected one of: {', '.join(TRACE_FAMILIES)})")
    spec = TRACE_FAMILIES[family]
    if gpus is not None:
        if gpus < 1:
            raise DrawError(f"gpus must be positive, got {gpus}")
        spec = replace(spec, gpus=gpus, node_size=min(spec.node_size, gpus))
    if name is not None:
        spec = replace(spec, name=name)
    stats = load_stats()
    pods = stats["pods"]
    rng = np.random.default_rng(seed)
    day = int(rng.integers(len(pods["day_arrivals"])))
    hours = np.array(pods["arrival_hours"], dtype=np.float64)
    releases = np.sort(rng.choice(spec.slots, size=pods["day_arrivals"][day], p=hours / hours.sum()))
    jobs = [
        TraceJob(f"pod-run{i + 1}", k, d, 0, q, running=True)
        for i, (k, d, q) in enumerate(_draw_table(rng, pods["running"], pods["day_running"][day]))
    ]
    drawn = _draw_table(rng, pods["arrivals"], len(releases))
    jobs += [
        TraceJob(f"pod-{i + 1}", k, d, int(r), q) for i, ((k, d, q), r) in enumerate(zip(drawn, releases, strict=True))
    ]
    u = rng.random()
    demands = []
    for source in spec.apps:
        entry = stats["demand"][source]
        series = DemandSeries(
            source, np.array(entry["per_hour"], dtype=np.float64), datetime.fromisoformat(entry["start"]), 60.0
        )
        demands.append((series, int(u * series.days)))
    scenario, _ = build_scenario(spec, jobs, demands, rng, num_jobs=num_jobs, seed=seed)
    return scenario


# ----------------------------------------------------------------------------- the shipped compact data

SHIPPED_TRACES = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "traces"
"""The compact real-demand data in the repository (``benchmarks/data/traces``, its README names the sources):
the same file names under the same folders as the raw traces, so that every reader here reads it."""

POD_COLUMNS = ("name", "num_gpu", "gpu_milli", "qos", "creation_time", "deletion_time", "scheduled_time")
"""The pod trace's columns :func:`read_pods` reads; the compact pod file keeps these, in every row."""

COMPACT_CHECK_SLOTS = (60.0, 120.0, 240.0, 1440.0)
"""Slot lengths (minutes) at which :func:`compact_traces` checks the compact Helios files read like the raw ones."""


def compact_texts(traces: str | Path) -> dict[str, str]:
    """The compact forms of the raw files the mapping reads, by path relative to the traces folder.

    - ``lora_requests_per_hour.csv``: unchanged (it is already hourly and small).
    - ``openb_pod_list_default.csv``: every row, the :data:`POD_COLUMNS` only, each value unchanged.
    - each Helios VC file: one row per hour from the first midnight (:data:`HELIOS_COMPACT_COLUMNS`), the
      hour's sum of ``running_gpu_num + pending_gpu_num`` over its 60 minutes.

    Raises:
        ScenarioError: A missing or malformed raw file.
    """
    traces = Path(traces)
    out: dict[str, str] = {}
    with _open(traces / DEMAND_FILES["lora"]) as handle:
        out[DEMAND_FILES["lora"]] = handle.read()
    lines = [",".join(POD_COLUMNS)]
    for _, row in _rows(traces / POD_FILE, POD_COLUMNS):
        lines.append(",".join(row[c] for c in POD_COLUMNS))
    out[POD_FILE] = "\n".join(lines) + "\n"
    for source, name in DEMAND_FILES.items():
        if source == "lora":
            continue
        path = traces / name
        times, values = _helios_minutes(path)
        sums, start = _on_grid(path, times, values, 1.0, 60.0, "sum")
        rows = [",".join(HELIOS_COMPACT_COLUMNS)]
        rows += [f"{start + timedelta(hours=i):%Y-%m-%d %H:%M:%S},60,{int(v)}" for i, v in enumerate(sums)]
        out[name] = "\n".join(rows) + "\n"
    return out


def compact_traces(traces: str | Path, out: str | Path) -> dict[str, int]:
    """Write the compact data (:func:`compact_texts`) under ``out`` after checking it reads like the raw files.

    The check, before anything is written: :func:`read_pods` gives the same pods from both pod files,
    and :func:`read_demand` the same slot values and start from both forms of every demand file at
    each of :data:`COMPACT_CHECK_SLOTS` (at 60 minutes and its multiples the compact Helios files
    give the exact values; finer slots are refused). Each file is written atomically.

    Returns:
        The bytes of each file written, by relative path.

    Raises:
        ScenarioError: A missing or malformed raw file.
        ValueError: The compact data does not read like the raw files (a bug here).
    """
    import tempfile

    traces, out = Path(traces), Path(out)
    texts = compact_texts(traces)
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in texts.items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_text(text, encoding="utf-8")
        if read_pods(traces / POD_FILE) != read_pods(Path(tmp) / POD_FILE):
            raise ValueError(f"{POD_FILE}: the compact pods differ from the raw ones")
        for source in DEMAND_FILES:
            for minutes in COMPACT_CHECK_SLOTS:
                raw, small = read_demand(source, traces, minutes), read_demand(source, tmp, minutes)
                if raw.start != small.start or not np.array_equal(raw.values, small.values):
                    raise ValueError(f"{DEMAND_FILES[source]}: the compact series differs at {minutes:g}-minute slots")
    for name, text in texts.items():
        write_text_atomic(out / name, text)
    return {name: len(text.encode("utf-8")) for name, text in texts.items()}


# ----------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gpu_env.traces extract|compact --traces DIR``: derive the shipped data from the raw traces.

    ``extract [-o FILE]`` writes the generator's statistics (``gpu_env/data/trace_stats.json``);
    ``compact [--out DIR]`` the compact real-demand data (``benchmarks/data/traces``).
    """
    parser = argparse.ArgumentParser(prog="python -m gpu_env.traces", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract", help="extract the trace-* families' statistics from the raw traces")
    ex.add_argument("--traces", type=Path, metavar="DIR", help="folder of the raw traces (required, docs/traces.md)")
    ex.add_argument("-o", "--output", type=Path, default=STATS_PATH, help="output JSON (default %(default)s)")
    co = sub.add_parser("compact", help="write the compact real-demand data from the raw traces (checked)")
    co.add_argument("--traces", type=Path, metavar="DIR", help="folder of the raw traces (required, docs/traces.md)")
    co.add_argument(
        "--out", type=Path, default=SHIPPED_TRACES, metavar="DIR", help="output folder (default %(default)s)"
    )
    args = parser.parse_args(argv)
    if args.traces is None or not args.traces.is_dir():
        given = "not given" if args.traces is None else f"{args.traces}: no such folder"
        print(f"error: --traces DIR: the folder of the raw traces is {given} (see docs/traces.md)", file=sys.stderr)
        return 2
    try:
        if args.command == "compact":
            sizes = compact_traces(args.traces, args.out)
            for name, size in sizes.items():
                print(f"wrote {args.out / name} ({size} bytes)")
            print(f"{sum(sizes.values())} bytes in all; read like the raw files (checked)")
            return 0
        stats = extract_stats(args.traces)
    except (ScenarioError, TraceRequestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(stats, separators=(",", ":"))
    write_text_atomic(args.output, text + "\n")
    print(f"wrote {args.output} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
