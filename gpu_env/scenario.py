"""Scenarios: the cluster, the horizon, the real-time apps and the jobs (SPEC section 1).

A scenario is loaded from YAML or JSON and checked completely before any
scheduler sees it. Every malformed input raises :class:`ScenarioError`, whose
message names the file, the field and what was expected.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gpu_env.files import write_text_atomic


class JobType(StrEnum):
    """The three batch-like workloads."""

    TRAINING = "training"
    BATCH_INFERENCE = "batch_inference"
    QUANTIZATION = "quantization"


class ScenarioError(ValueError):
    """A scenario (or plan) file that breaks the format.

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


@dataclass(frozen=True)
class Scenario:
    """One planning problem: G GPUs in nodes, T slots, real-time apps and jobs."""

    name: str
    gpus: int  # G
    slots: int  # T
    node_size: int = 0  # 0 means one node of G GPUs
    slot_minutes: float = 60.0
    decay: float = 1.0
    realtime: tuple[App, ...] = ()
    jobs: tuple[Job, ...] = ()
    family: str | None = None  # the generator family, when drawn by one
    seed: int | None = None  # the generator seed, when drawn by one
    _index: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.node_size == 0:
            object.__setattr__(self, "node_size", self.gpus)
        self._index.update({job.id: i for i, job in enumerate(self.jobs)})

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
        return np.array([app.demand for app in self.realtime], dtype=np.int64).reshape(-1, self.slots)

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
        if self.realtime:
            data["realtime"] = [
                {
                    "name": app.name,
                    "demand": list(app.demand),
                    "ramp": app.ramp,
                    "initial": app.initial,
                    "penalty": _plain(app.penalty),
                }
                for app in self.realtime
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
_APP_KEYS = {"name", "demand", "ramp", "initial", "penalty"}
_JOB_KEYS = {"id", "type", "gpus", "duration", "release", "priority", "deadline", "value", "running_on"}


class _Reader:
    """Typed access to nested mappings that raises ScenarioError with the field path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, reason: str) -> ScenarioError:
        return ScenarioError(self.source, path, reason)

    def mapping(self, value: Any, path: str, allowed: set[str], required: set[str]) -> Mapping[str, Any]:
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

    def integer(self, value: Any, path: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {_kind(value)}")
        if minimum is not None and value < minimum:
            word = "positive" if minimum == 1 else f"at least {minimum}"
            raise self.fail(path, f"expected a {word} integer, got {value}")
        return value

    def number(self, value: Any, path: str, positive: bool = False, minimum: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.fail(path, f"expected a finite number, got {_kind(value)}")
        if positive and value <= 0:
            raise self.fail(path, f"expected a positive number, got {value}")
        if minimum is not None and value < minimum:
            raise self.fail(path, f"expected a number >= {minimum}, got {value}")
        return float(value)

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"expected a non-empty string, got {_kind(value)}")
        return value

    def int_list(self, value: Any, path: str, minimum: int = 0) -> list[int]:
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list of integers, got {_kind(value)}")
        return [self.integer(x, f"{path}[{i}]", minimum) for i, x in enumerate(value)]


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"{type(value).__name__} ({value!r})"


def scenario_from_dict(data: Any, source: str = "<dict>") -> Scenario:
    """Build and check a scenario from parsed YAML/JSON data.

    Args:
        data: The parsed document.
        source: The file name used in error messages.

    Returns:
        The checked scenario.

    Raises:
        ScenarioError: On any input that breaks SPEC section 1.
    """
    from gpu_env import rules  # rules import this module; import late to keep one direction at load time

    r = _Reader(source)
    top = r.mapping(data, "", _TOP_KEYS, {"name", "cluster", "horizon"})
    name = r.string(top["name"], "name")
    cluster = r.mapping(top["cluster"], "cluster", _CLUSTER_KEYS, {"gpus"})
    gpus = r.integer(cluster["gpus"], "cluster.gpus", 1)
    node_size = r.integer(cluster.get("node_size", gpus), "cluster.node_size", 1)
    if node_size > gpus:
        raise r.fail("cluster.node_size", f"expected at most cluster.gpus ({gpus}), got {node_size}")
    horizon = r.mapping(top["horizon"], "horizon", _HORIZON_KEYS, {"slots"})
    slots = r.integer(horizon["slots"], "horizon.slots", 1)
    slot_minutes = r.number(horizon.get("slot_minutes", 60), "horizon.slot_minutes", positive=True)
    decay = r.number(horizon.get("decay", 1.0), "horizon.decay", positive=True)
    if decay > 1.0:
        raise r.fail("horizon.decay", f"expected a number in (0, 1], got {decay}")
    family = top.get("family")
    if family is not None:
        family = r.string(family, "family")
    seed = top.get("seed")
    if seed is not None:
        seed = r.integer(seed, "seed", 0)

    apps = _read_apps(r, top.get("realtime", []), slots)
    jobs = _read_jobs(r, top.get("jobs", []), gpus, node_size, slots)

    scenario = Scenario(
        name=name,
        gpus=gpus,
        slots=slots,
        node_size=node_size,
        slot_minutes=slot_minutes,
        decay=decay,
        realtime=tuple(apps),
        jobs=tuple(jobs),
        family=family,
        seed=seed,
    )
    problem = rules.inherited_conflict(scenario)
    if problem is not None:
        raise r.fail(*problem)
    return scenario


def _read_apps(r: _Reader, value: Any, slots: int) -> list[App]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise r.fail("realtime", f"expected a list of applications, got {_kind(value)}")
    apps: list[App] = []
    seen: set[str] = set()
    for i, raw in enumerate(value):
        path = f"realtime[{i}]"
        entry = r.mapping(raw, path, _APP_KEYS, {"name", "demand", "ramp", "penalty"})
        name = r.string(entry["name"], f"{path}.name")
        if name in seen:
            raise r.fail(f"{path}.name", f"duplicate application name {name!r}")
        seen.add(name)
        demand = r.int_list(entry["demand"], f"{path}.demand", 0)
        if len(demand) != slots:
            raise r.fail(f"{path}.demand", f"expected {slots} values (horizon.slots), got {len(demand)}")
        ramp = r.integer(entry["ramp"], f"{path}.ramp", 0)
        initial = r.integer(entry.get("initial", demand[0]), f"{path}.initial", 0)
        penalty = r.number(entry["penalty"], f"{path}.penalty", minimum=0.0)
        apps.append(App(name, tuple(demand), ramp, initial, penalty))
    return apps


def _read_jobs(r: _Reader, value: Any, gpus: int, node_size: int, slots: int) -> list[Job]:
    from gpu_env import rules

    if value is None:
        return []
    if not isinstance(value, list):
        raise r.fail("jobs", f"expected a list of jobs, got {_kind(value)}")
    jobs: list[Job] = []
    seen: set[str] = set()
    for i, raw in enumerate(value):
        path = f"jobs[{i}]"
        entry = r.mapping(raw, path, _JOB_KEYS, {"id", "type", "gpus", "duration"})
        job_id = entry["id"]
        if isinstance(job_id, int) and not isinstance(job_id, bool):
            job_id = str(job_id)
        job_id = r.string(job_id, f"{path}.id")
        if job_id in seen:
            raise r.fail(f"{path}.id", f"duplicate job id {job_id!r}")
        seen.add(job_id)
        kind = entry["type"]
        if kind not in {t.value for t in JobType}:
            raise r.fail(f"{path}.type", f"expected one of {', '.join(t.value for t in JobType)}, got {_kind(kind)}")
        k = r.integer(entry["gpus"], f"{path}.gpus", 1)
        if k > gpus:
            raise r.fail(f"{path}.gpus", f"job needs {k} GPUs but the cluster has {gpus}")
        d = r.integer(entry["duration"], f"{path}.duration", 1)
        release = r.integer(entry.get("release", 0), f"{path}.release", 0)
        priority = r.number(entry.get("priority", 1.0), f"{path}.priority", positive=True)
        deadline = entry.get("deadline")
        if deadline is not None:
            deadline = r.integer(deadline, f"{path}.deadline", 1)
        job_value = entry.get("value")
        if job_value is not None:
            job_value = r.number(job_value, f"{path}.value", positive=True)
        running_on = entry.get("running_on")
        if running_on is not None:
            block = r.int_list(running_on, f"{path}.running_on", 0)
            problem = rules.block_problem(block, k, gpus, node_size)
            if problem:
                raise r.fail(f"{path}.running_on", problem)
            if release != 0:
                raise r.fail(f"{path}.release", "a running job starts at slot 0: release must be 0")
            if deadline is not None and d > deadline:
                raise r.fail(f"{path}.deadline", f"running job ends at slot {d}, after its deadline {deadline}")
            running_on = tuple(block)
        jobs.append(
            Job(
                id=job_id,
                type=JobType(kind),
                gpus=k,
                duration=d,
                release=release,
                priority=priority,
                deadline=deadline,
                value=job_value,
                running_on=running_on,
            )
        )
    return jobs


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
    if json_only or path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScenarioError(source, f"<line {exc.lineno}>", f"invalid JSON: {exc.msg}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"<line {mark.line + 1}>" if mark is not None else "<file>"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError(source, where, f"invalid YAML: {problem}") from None


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
