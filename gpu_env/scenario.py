"""Scenarios: the cluster, the horizon, the real-time apps and the jobs (SPEC section 1).

A scenario is checked completely before any scheduler sees it, in one place:
:class:`Scenario` checks itself when it is constructed, however it is built
(read from YAML or JSON by :func:`scenario_from_dict`, drawn by a generator,
converted from a 2D-knapsack instance, or changed by ``dataclasses.replace``).
The reader only turns the file's structure into the dataclasses and leaves every
rule on values to that check. Every malformed input raises
:class:`ScenarioError`, whose message names the file (``<scenario NAME>`` for
one built in code), the field and what was expected.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gpu_env.blocks import block_problem
from gpu_env.files import write_text_atomic

# Upper limits of the scenario format (docs/SPEC.md section 1): generous for a real cluster, small
# enough that every planner's arrays fit in memory. Beyond them a scenario is refused like any
# malformed input, naming the field.
MAX_GPUS = 16_384  # cluster.gpus; also every GPU count: demand values, ramp, initial
MAX_SLOTS = 10_080  # horizon.slots (a week of one-minute slots); also duration, release and deadline
MAX_GRID = 2**24  # GPU-slots of the planners' grid: cluster.gpus x (horizon.slots + the longest duration)
MAX_JOBS = 100_000  # jobs
MAX_APPS = 1_024  # real-time applications
MAX_WEIGHT = 1e6  # priority, penalty, and a value's worth per GPU-slot (value / (gpus x duration))


class JobType(StrEnum):
    """The three batch-like workloads."""

    TRAINING = "training"
    BATCH_INFERENCE = "batch_inference"
    QUANTIZATION = "quantization"


class FieldError(Exception):
    """A file that breaks its format, naming the file and the field: ``source: field: reason``.

    The base of :class:`ScenarioError` and of the Slurm driver's configuration error.

    Attributes:
        source: The file (or ``"<dict>"`` for in-memory data).
        field: The offending field as a path, e.g. ``jobs[2].gpus``.
        reason: What was expected.
    """

    def __init__(self, source: str, field: str, reason: str) -> None:
        self.source = source
        self.field = field
        self.reason = reason
        super().__init__(f"{source}: {field}: {reason}")


class ScenarioError(FieldError, ValueError):
    """A scenario (or plan) file that breaks the format (:class:`FieldError`'s attributes)."""


class DrawError(ValueError):
    """Sizes a family cannot draw (a cluster of no GPUs): the generators' families and the trace families alike."""


@dataclass(frozen=True)
class Job:
    """A batch-like job that needs a contiguous block of ``gpus`` GPUs for ``duration`` slots."""

    id: str
    type: JobType
    gpus: int  # k
    duration: int  # d
    release: int = 0
    priority: float = 1.0  # w before a `value` override
    deadline: int | None = None  # the job must end by this slot: start + d <= deadline
    value: float | None = None  # total worth of a full run; sets w = value / (k * d)
    running_on: tuple[int, ...] | None = None  # inherited: holds these GPUs from slot 0
    runtime: int | None = None  # a recorded day's actual runtime, 1..duration (read by no rule or planner)

    @property
    def weight(self) -> float:
        """Worth of one GPU-slot before decay: ``value / (k * d)`` if a value is given, else the priority."""
        if self.value is not None:
            return self.value / (self.gpus * self.duration)
        return self.priority

    @property
    def area(self) -> int:
        """GPU-slots of a full run."""
        return self.gpus * self.duration


@dataclass(frozen=True)
class App:
    """A real-time inference application that follows a demand curve."""

    name: str
    demand: tuple[int, ...]  # (T,) D_t
    ramp: int  # R: most GPUs added or removed between consecutive slots
    initial: int  # GPUs serving it just before slot 0
    penalty: float  # P: cost of one unserved GPU-slot
    forecast: tuple[int, ...] | None = None
    """A recorded day's forecast (T,): what the forecast said of ``demand`` before the day began (None: not
    recorded). A past day, or a day replayed live (``gpualloc replay``), carries it beside the demand that
    came; the planners never read it as demand (docs/rolling.md, "Days as they happened")."""


@dataclass(frozen=True)
class Scenario:
    """One planning problem: G GPUs in nodes, T slots, real-time apps and jobs.

    Construction checks every rule of SPEC section 1 (:meth:`__post_init__`), so
    a Scenario that exists is a valid one, and builds the job index anew, also
    for one made by ``dataclasses.replace``.

    Raises:
        ScenarioError: A field that breaks SPEC section 1, named as in the file
            format (``jobs[2].gpus``), with the source ``<scenario NAME>``.
    """

    name: str
    gpus: int  # G
    slots: int  # T
    node_size: int = 0  # 0 means one node of G GPUs
    slot_minutes: float = 60.0
    decay: float = 1.0
    apps: tuple[App, ...] = ()
    jobs: tuple[Job, ...] = ()
    family: str | None = None  # the generator family, when drawn by one
    seed: int | None = None  # the generator seed, when drawn by one

    def __post_init__(self) -> None:
        if self.node_size == 0:
            object.__setattr__(self, "node_size", self.gpus)
        # Not a field: every construction (replace included) checks and indexes its own jobs.
        object.__setattr__(self, "_index", _check(self, FieldReader(f"<scenario {self.name}>")))

    def job_index(self, job_id: str) -> int:
        """Position of a job in the file, or -1 when there is none with this id."""
        return self._index.get(job_id, -1)

    @property
    def decay_weights(self) -> np.ndarray:
        """``decay**t`` for t in 0..T-1, shape (T,)."""
        return self.decay ** np.arange(self.slots, dtype=np.float64)

    @property
    def demand(self) -> np.ndarray:
        """Demand curves, shape (apps, T)."""
        return np.array([app.demand for app in self.apps], dtype=np.int64).reshape(-1, self.slots)

    def to_dict(self) -> dict[str, Any]:
        """The scenario in the file format of SPEC section 1 (defaults left out)."""
        cluster: dict[str, Any] = {"gpus": self.gpus}
        if self.node_size != self.gpus:
            cluster["node_size"] = self.node_size
        horizon: dict[str, Any] = {"slots": self.slots, "slot_minutes": _plain(self.slot_minutes)}
        if self.decay != 1.0:
            horizon["decay"] = self.decay
        data: dict[str, Any] = {"name": self.name}
        if self.family is not None:
            data["family"] = self.family
        if self.seed is not None:
            data["seed"] = self.seed
        data["cluster"] = cluster
        data["horizon"] = horizon
        if self.apps:
            data["realtime"] = [
                {
                    "name": app.name,
                    "demand": list(app.demand),
                    "ramp": app.ramp,
                    "initial": app.initial,
                    "penalty": _plain(app.penalty),
                    **({"forecast": list(app.forecast)} if app.forecast is not None else {}),
                }
                for app in self.apps
            ]
        jobs = []
        for job in self.jobs:
            entry: dict[str, Any] = {
                "id": job.id,
                "type": job.type.value,
                "gpus": job.gpus,
                "duration": job.duration,
            }
            if job.release:
                entry["release"] = job.release
            if job.priority != 1.0:
                entry["priority"] = _plain(job.priority)
            if job.value is not None:
                entry["value"] = _plain(job.value)
            if job.deadline is not None:
                entry["deadline"] = job.deadline
            if job.running_on is not None:
                entry["running_on"] = list(job.running_on)
            if job.runtime is not None:
                entry["runtime"] = job.runtime
            jobs.append(entry)
        data["jobs"] = jobs
        return data


def _plain(x: float) -> float | int:
    """A number as an int when it is whole, so that files stay readable."""
    return int(x) if float(x).is_integer() else float(x)


# ----------------------------------------------------------------------------- loading

_TOP_KEYS = {"name", "cluster", "horizon", "realtime", "jobs", "family", "seed"}
_CLUSTER_KEYS = {"gpus", "node_size"}
_HORIZON_KEYS = {"slots", "slot_minutes", "decay"}
_APP_KEYS = {"name", "demand", "ramp", "initial", "penalty", "forecast"}
_JOB_KEYS = {"id", "type", "gpus", "duration", "release", "priority", "deadline", "value", "running_on", "runtime"}


class FieldReader:
    """Typed access to nested mappings that raises ScenarioError with the field path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, reason: str) -> ScenarioError:
        """The error for ``path``: raise what this returns."""
        return ScenarioError(self.source, path, reason)

    def mapping(self, value: Any, path: str, allowed: set[str], required: set[str]) -> Mapping[str, Any]:
        """``value`` as a mapping with only ``allowed`` keys and every ``required`` one."""
        if not isinstance(value, Mapping):
            raise self.fail(path or "<top>", f"expected a mapping, got {_kind(value)}")
        for key in value:
            if key not in allowed:
                where = f"{path}.{key}" if path else str(key)
                raise self.fail(where, f"unknown key (expected one of: {', '.join(sorted(allowed))})")
        for key in sorted(required):
            if key not in value:
                where = f"{path}.{key}" if path else key
                raise self.fail(where, "missing required key")
        return value

    def integer(self, value: Any, path: str, minimum: int | None = None, maximum: int | None = None) -> int:
        """``value`` as an integer (not a bool) within the bounds given."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {_kind(value)}")
        if minimum is not None and value < minimum:
            word = "positive" if minimum == 1 else f"at least {minimum}"
            raise self.fail(path, f"expected a {word} integer, got {_int_text(value)}")
        if maximum is not None and value > maximum:
            raise self.fail(path, f"expected at most {maximum} (the format's limit), got {_int_text(value)}")
        return value

    def count(self, items: Any, path: str, maximum: int, what: str) -> None:
        """Refuse a list (or tuple) of more than ``maximum`` items, before anything is built from it."""
        if isinstance(items, list | tuple) and len(items) > maximum:
            raise self.fail(path, f"expected at most {maximum} {what} (the format's limit), got {len(items)}")

    def number(
        self,
        value: Any,
        path: str,
        positive: bool = False,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float:
        """``value`` as a finite number (not a bool), positive or at least ``minimum``, at most ``maximum``."""
        if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
            raise self.fail(path, f"expected a finite number, got {_kind(value)}")
        if positive and value <= 0:
            raise self.fail(path, f"expected a positive number, got {value}")
        if minimum is not None and value < minimum:
            raise self.fail(path, f"expected a number >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise self.fail(path, f"expected a number <= {maximum:g}, got {value:g}")
        return float(value)

    def string(self, value: Any, path: str) -> str:
        """``value`` as a non-empty string."""
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"expected a non-empty string, got {_kind(value)}")
        return value

    def int_list(self, value: Any, path: str, minimum: int = 0, maximum: int | None = None) -> list[int]:
        """``value`` as a list of integers within the bounds given."""
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list of integers, got {_kind(value)}")
        return [self.integer(x, f"{path}[{i}]", minimum, maximum) for i, x in enumerate(value)]


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond the float range
        return False


def _int_text(value: int) -> str:
    """An integer for a message: its digits, or their count when there are too many to read."""
    if value.bit_length() <= 64:
        return str(value)
    return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, int):
        return f"int ({_int_text(value)})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"{type(value).__name__} ({value!r})"


def scenario_from_dict(data: Any, source: str = "<dict>") -> Scenario:
    """Build and check a scenario from parsed YAML/JSON data.

    The reader checks the structure (mappings, their keys, lists) and hands the
    values to :class:`Scenario`, whose construction checks them
    (:func:`_check`); errors name ``source`` and the field.

    Args:
        data: The parsed document.
        source: The file name used in error messages.

    Returns:
        The checked scenario.

    Raises:
        ScenarioError: On any input that breaks SPEC section 1.
    """
    r = FieldReader(source)
    top = r.mapping(data, "", _TOP_KEYS, {"name", "cluster", "horizon"})
    cluster = r.mapping(top["cluster"], "cluster", _CLUSTER_KEYS, {"gpus"})
    horizon = r.mapping(top["horizon"], "horizon", _HORIZON_KEYS, {"slots"})
    apps = _read_apps(r, top.get("realtime", []))
    jobs = _read_jobs(r, top.get("jobs", []))
    node_size = cluster.get("node_size", cluster["gpus"])
    if type(node_size) is int and node_size == 0:  # 0 means "one node of G" to the dataclass, not in a file
        raise r.fail("cluster.node_size", "expected a positive integer, got 0")
    try:
        return Scenario(
            name=top["name"],
            gpus=cluster["gpus"],
            slots=horizon["slots"],
            node_size=node_size,
            slot_minutes=_as_float(horizon.get("slot_minutes", 60.0)),
            decay=_as_float(horizon.get("decay", 1.0)),
            apps=apps,
            jobs=jobs,
            family=top.get("family"),
            seed=top.get("seed"),
        )
    except ScenarioError as exc:
        raise ScenarioError(source, exc.field, exc.reason) from None


def _as_float(value: Any) -> Any:
    """A number as a float (the dataclasses' type); anything else unchanged, for the check to name."""
    return float(value) if type(value) in (int, float) and _finite(value) else value


def _read_apps(r: FieldReader, value: Any) -> tuple[App, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise r.fail("realtime", f"expected a list of applications, got {_kind(value)}")
    r.count(value, "realtime", MAX_APPS, "applications")
    apps: list[App] = []
    for i, raw in enumerate(value):
        entry = r.mapping(raw, f"realtime[{i}]", _APP_KEYS, {"name", "demand", "ramp", "penalty"})
        demand = entry["demand"]
        if isinstance(demand, list):
            demand = tuple(demand)
        first = demand[0] if isinstance(demand, tuple) and demand else 0
        forecast = entry.get("forecast")
        if isinstance(forecast, list):
            forecast = tuple(forecast)
        apps.append(
            App(
                entry["name"], demand, entry["ramp"], entry.get("initial", first), _as_float(entry["penalty"]), forecast
            )
        )
    return tuple(apps)


def _read_jobs(r: FieldReader, value: Any) -> tuple[Job, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise r.fail("jobs", f"expected a list of jobs, got {_kind(value)}")
    r.count(value, "jobs", MAX_JOBS, "jobs")
    jobs: list[Job] = []
    types = {t.value: t for t in JobType}
    for i, raw in enumerate(value):
        entry = r.mapping(raw, f"jobs[{i}]", _JOB_KEYS, {"id", "type", "gpus", "duration"})
        job_id = entry["id"]
        if type(job_id) is int:
            job_id = str(job_id)
        running_on = entry.get("running_on")
        if isinstance(running_on, list):
            running_on = tuple(running_on)
        value_ = entry.get("value")
        jobs.append(
            Job(
                id=job_id,
                type=types.get(entry["type"], entry["type"]) if isinstance(entry["type"], str) else entry["type"],
                gpus=entry["gpus"],
                duration=entry["duration"],
                release=entry.get("release", 0),
                priority=_as_float(entry.get("priority", 1.0)),
                deadline=entry.get("deadline"),
                value=None if value_ is None else _as_float(value_),
                running_on=running_on,
                runtime=entry.get("runtime"),
            )
        )
    return tuple(jobs)


# ----------------------------------------------------------------------------- the check (SPEC section 1)


def _int_tuple(r: FieldReader, values: Any, path: str, maximum: int) -> tuple[int, ...]:
    """``values`` as a tuple of integers in 0..maximum: one pass when it is one, else the reader's message."""
    if (
        isinstance(values, tuple)
        and all(type(x) is int for x in values)
        and min(values, default=0) >= 0
        and max(values, default=0) <= maximum
    ):
        return values
    r.int_list(list(values) if isinstance(values, tuple) else values, path, 0, maximum)
    raise r.fail(path, f"expected a tuple of integers, got {_kind(values)}")


def _plain_job_ok(job: Any, gpus: int, seen: Mapping[str, int]) -> bool:
    """True for a job without ``running_on`` that passes every rule of :func:`_check_job` (a fast path).

    Stricter than :func:`_check_job` (exact types), never looser: a job it does
    not pass goes through those rules one by one, which accept it or name the field.
    """
    return (
        type(job) is Job
        and type(job.id) is str
        and job.id != ""
        and job.id not in seen
        and type(job.type) is JobType
        and type(job.gpus) is int
        and 1 <= job.gpus <= gpus
        and type(job.duration) is int
        and 1 <= job.duration <= MAX_SLOTS
        and type(job.release) is int
        and 0 <= job.release <= MAX_SLOTS
        and type(job.priority) is float
        and 0.0 < job.priority <= MAX_WEIGHT
        and (job.deadline is None or (type(job.deadline) is int and 1 <= job.deadline <= MAX_SLOTS))
        and (
            job.value is None or (type(job.value) is float and 0.0 < job.value <= MAX_WEIGHT * job.gpus * job.duration)
        )
        and job.running_on is None
        and job.runtime is None
    )


def _check_job(r: FieldReader, job: Any, path: str, gpus: int, node_size: int, seen: Mapping[str, int]) -> None:
    """The rules on one job (``path`` is ``jobs[i]``, ``seen`` the ids before it); raises naming the field."""
    if not isinstance(job, Job):
        raise r.fail(path, f"expected a job, got {_kind(job)}")
    job_id = r.string(job.id, f"{path}.id")
    if job_id in seen:
        raise r.fail(f"{path}.id", f"duplicate job id {job_id!r}")
    if not isinstance(job.type, JobType):
        raise r.fail(f"{path}.type", f"expected one of {', '.join(t.value for t in JobType)}, got {_kind(job.type)}")
    k = r.integer(job.gpus, f"{path}.gpus", 1)
    if k > gpus:
        raise r.fail(f"{path}.gpus", f"job needs {k} GPUs but the cluster has {gpus}")
    d = r.integer(job.duration, f"{path}.duration", 1, MAX_SLOTS)
    release = r.integer(job.release, f"{path}.release", 0, MAX_SLOTS)
    r.number(job.priority, f"{path}.priority", positive=True, maximum=MAX_WEIGHT)
    if job.deadline is not None:
        r.integer(job.deadline, f"{path}.deadline", 1, MAX_SLOTS)
    if job.value is not None:
        r.number(job.value, f"{path}.value", positive=True, maximum=MAX_WEIGHT * k * d)
    if job.runtime is not None:
        if r.integer(job.runtime, f"{path}.runtime", 1, MAX_SLOTS) > d:
            raise r.fail(f"{path}.runtime", f"a job runs at most its duration ({d} slots), got {job.runtime}")
        if job.running_on is not None:
            raise r.fail(f"{path}.runtime", "a running job has no recorded runtime: leave runtime out")
    if job.running_on is not None:
        block = _int_tuple(r, job.running_on, f"{path}.running_on", MAX_GPUS)
        problem = block_problem(block, k, gpus, node_size)
        if problem:
            raise r.fail(f"{path}.running_on", problem)
        if release != 0:
            raise r.fail(f"{path}.release", "a running job starts at slot 0: release must be 0")
        if job.deadline is not None and d > job.deadline:
            raise r.fail(f"{path}.deadline", f"running job ends at slot {d}, after its deadline {job.deadline}")


def _check(sc: Scenario, r: FieldReader) -> dict[str, int]:
    """Check every rule of SPEC section 1 on a scenario; return its job index (id -> position).

    Linear in the jobs, the apps' demand values and the horizon: it runs on every
    construction (environment resets, rolling-horizon re-plans).

    Raises:
        ScenarioError: The first field that breaks a rule, named as in the file format.
    """
    r.string(sc.name, "name")
    gpus = r.integer(sc.gpus, "cluster.gpus", 1, MAX_GPUS)
    node_size = r.integer(sc.node_size, "cluster.node_size", 1)
    if node_size > gpus:
        raise r.fail("cluster.node_size", f"expected at most cluster.gpus ({gpus}), got {_int_text(node_size)}")
    slots = r.integer(sc.slots, "horizon.slots", 1, MAX_SLOTS)
    if gpus * slots > MAX_GRID:
        raise r.fail(
            "horizon.slots", f"cluster.gpus x horizon.slots = {gpus * slots} GPU-slots, above the limit {MAX_GRID}"
        )
    r.number(sc.slot_minutes, "horizon.slot_minutes", positive=True)
    decay = r.number(sc.decay, "horizon.decay", positive=True)
    if decay > 1.0:
        raise r.fail("horizon.decay", f"expected a number in (0, 1], got {decay}")
    if sc.family is not None:
        r.string(sc.family, "family")
    if sc.seed is not None:
        r.integer(sc.seed, "seed", 0)

    if not isinstance(sc.apps, tuple):
        raise r.fail("realtime", f"expected a tuple of applications, got {_kind(sc.apps)}")
    r.count(sc.apps, "realtime", MAX_APPS, "applications")
    names: set[str] = set()
    for i, app in enumerate(sc.apps):
        path = f"realtime[{i}]"
        if not isinstance(app, App):
            raise r.fail(path, f"expected an application, got {_kind(app)}")
        name = r.string(app.name, f"{path}.name")
        if name in names:
            raise r.fail(f"{path}.name", f"duplicate application name {name!r}")
        names.add(name)
        demand = _int_tuple(r, app.demand, f"{path}.demand", MAX_GPUS)
        if len(demand) != slots:
            raise r.fail(f"{path}.demand", f"expected {slots} values (horizon.slots), got {len(demand)}")
        r.integer(app.ramp, f"{path}.ramp", 0, MAX_GPUS)
        r.integer(app.initial, f"{path}.initial", 0, MAX_GPUS)
        r.number(app.penalty, f"{path}.penalty", minimum=0.0, maximum=MAX_WEIGHT)
        if app.forecast is not None:
            forecast = _int_tuple(r, app.forecast, f"{path}.forecast", MAX_GPUS)
            if len(forecast) != slots:
                raise r.fail(f"{path}.forecast", f"expected {slots} values (horizon.slots), got {len(forecast)}")

    if not isinstance(sc.jobs, tuple):
        raise r.fail("jobs", f"expected a tuple of jobs, got {_kind(sc.jobs)}")
    r.count(sc.jobs, "jobs", MAX_JOBS, "jobs")
    index: dict[str, int] = {}
    longest = 0
    for i, job in enumerate(sc.jobs):
        if not _plain_job_ok(job, gpus, index):  # the common case in one expression; the rules say why not
            _check_job(r, job, f"jobs[{i}]", gpus, node_size, index)
        index[job.id] = i
        if job.duration > longest:
            longest = job.duration
            if gpus * (slots + longest) > MAX_GRID:
                raise r.fail(
                    f"jobs[{i}].duration",
                    f"cluster.gpus x (horizon.slots + duration) = {gpus * (slots + longest)} GPU-slots, "
                    f"above the limit {MAX_GRID}",
                )

    problem = inherited_conflict(sc)
    if problem is not None:
        raise r.fail(*problem)
    return index


def inherited_conflict(scenario: Scenario) -> tuple[str, str] | None:
    """A (field, reason) pair when the inherited work alone makes every plan invalid, or no state before slot 0 exists.

    Two running jobs on one GPU break rule 1. The inherited jobs hold their GPUs before slot 0 as in it, and
    each app holds its ``initial`` there: together they may not exceed the cluster (SPEC section 1), and the
    field named is the ``initial`` of the first app (in file order) that takes them past it. That also
    keeps rule 7 within reach in every slot: the least allocation the ramps allow never exceeds ``initial``
    and the inherited load never grows, so each slot's floors fit beside the inherited jobs (and a plan
    exists that keeps every rule, FIFO's among them: :func:`gpu_env.objective.peak_reservation`).
    """
    owner: dict[int, str] = {}
    for i, job in enumerate(scenario.jobs):
        if job.running_on is None:
            continue
        for g in job.running_on:
            if g in owner:
                return f"jobs[{i}].running_on", f"GPU {g} is already held by running job {owner[g]!r}"
            owner[g] = job.id
    held = len(owner)
    for i, app in enumerate(scenario.apps):
        held += app.initial
        if held > scenario.gpus:
            initial = sum(a.initial for a in scenario.apps)
            return (
                f"realtime[{i}].initial",
                f"the apps' initial GPUs ({initial}) plus the inherited jobs' GPUs ({len(owner)}) exceed the "
                f"cluster's {scenario.gpus} before slot 0",
            )
    return None


def parse_file(path: Path, json_only: bool = False) -> Any:
    """The data of a JSON (by suffix, or always with ``json_only``) or YAML (``safe_load``) file.

    Raises:
        ScenarioError: The file is missing, unreadable or not valid JSON/YAML (naming the file and line).
    """
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(source, "<file>", "no such file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ScenarioError(source, "<file>", f"cannot read: {exc}") from None
    return parse_text(text, source, json_only or path.suffix.lower() == ".json")


def parse_text(text: str, source: str, json_only: bool = False) -> Any:
    """The data of a JSON (with ``json_only``) or YAML (``safe_load``) document held in a string.

    The one parser of scenario and plan documents: files (:func:`parse_file`) and the
    service's request bodies (``gpualloc serve``) go through it, so both refuse the same
    inputs with the same words.

    Raises:
        ScenarioError: Not valid JSON/YAML (naming ``source`` and the line).
    """
    if json_only:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScenarioError(source, f"<line {exc.lineno}>", f"invalid JSON: {exc.msg}") from None
        except (ValueError, RecursionError) as exc:  # e.g. an integer of more digits than Python converts
            raise ScenarioError(source, "<file>", f"invalid JSON: {_first_line(exc)}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"<line {mark.line + 1}>" if mark is not None else "<file>"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError(source, where, f"invalid YAML: {problem}") from None
    except (ValueError, RecursionError) as exc:
        raise ScenarioError(source, "<file>", f"invalid YAML: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    """A parser's error in one line (Python's own limit on an integer's digits in plain words)."""
    text = (str(exc).splitlines() or [type(exc).__name__])[0]
    if "integer string conversion" in text:
        return "an integer with more digits than Python reads"
    return text


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Load and check a scenario file (YAML through ``safe_load``, or JSON).

    Raises:
        ScenarioError: The file is missing, unparsable or breaks SPEC section 1.
    """
    path = Path(path)
    return scenario_from_dict(parse_file(path), str(path))


def dump_scenario(scenario: Scenario) -> str:
    """The scenario as YAML text, demand curves and GPU lists on one line each."""

    class _Dumper(yaml.SafeDumper):
        pass

    def _list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
        flow = all(isinstance(x, int | float) for x in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)

    _Dumper.add_representer(list, _list)
    return yaml.dump(scenario.to_dict(), Dumper=_Dumper, sort_keys=False, width=200)


def save_scenario(scenario: Scenario, path: str | os.PathLike[str]) -> None:
    """Write a scenario as YAML (or JSON when the name ends in ``.json``)."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        write_text_atomic(path, json.dumps(scenario.to_dict(), indent=1) + "\n")
    else:
        write_text_atomic(path, dump_scenario(scenario))
