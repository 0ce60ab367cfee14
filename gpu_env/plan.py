"""Plans: which job starts when on which GPUs, and each app's real-time curve (SPEC section 2).

A :class:`Plan` reads and writes the plan JSON of the spec. Whether it is valid is
:func:`gpu_env.validation.validate`'s business; what it is worth is
:func:`gpu_env.metrics.compute_metrics`' (a :class:`Metrics`, the record a plan carries, defined here).

Scheduler-specific details (a solver's status and bound, the policy a learned
scheduler used, the hint full mode started from) live in one JSON object,
``info``, which the reader keeps as it is without judging its content.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpu_env.files import write_text_atomic
from gpu_env.scenario import FieldReader, parse_file

if TYPE_CHECKING:
    from gpu_env.occupancy import Occupancy

# Plans written before the ``info`` object held the solver's details at the top level;
# the reader still accepts them there and moves them into ``info`` (SPEC section 2).
LEGACY_INFO_KEYS = ("status", "bound", "gap")


@dataclass(frozen=True)
class Placement:
    """A job started at ``start`` on the GPUs listed (a contiguous block when valid)."""

    job: str
    start: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Metrics:
    """The metrics of SPEC section 3 as a plan carries them; :func:`gpu_env.metrics.compute_metrics` computes them.

    Attributes:
        objective: ``job_value`` minus each app's penalty times its shortfall.
        job_value: Sum over placed jobs of ``w * k * decay**t`` for their slots inside the horizon.
        shortfall: Unserved real-time GPU-slots, ``sum max(0, D_t - r_t)``.
        utilization: (job GPU-slots inside the horizon + ``sum min(D_t, r_t)``) / (G * T).
        completed: Placed jobs that end by T.
        placed: Placed jobs.
        jobs: All jobs of the scenario.
    """

    objective: float
    job_value: float
    shortfall: int
    utilization: float
    completed: int
    placed: int
    jobs: int

    def to_dict(self) -> dict[str, float | int]:
        """Plain numbers, rounded for files."""
        data = asdict(self)
        for key in ("objective", "job_value"):
            data[key] = round(data[key], 6)
        data["utilization"] = round(data["utilization"], 6)
        return data


@dataclass
class Plan:
    """A schedule for one scenario, with optional metrics, timing and solver details."""

    scenario: str
    scheduler: str
    placements: list[Placement] = field(default_factory=list)
    curves: dict[str, list[int]] = field(default_factory=dict)
    metrics: Metrics | None = None
    solve_ms: float | None = None
    info: dict[str, Any] = field(default_factory=dict)  # scheduler-specific details, any JSON (SPEC section 2)

    @classmethod
    def from_occupancy(cls, occupancy: Occupancy, scheduler: str) -> Plan:
        """The plan an :class:`~gpu_env.occupancy.Occupancy` holds."""
        sc = occupancy.scenario
        placements = []
        for index in sorted(occupancy.placed):
            s = occupancy.placed[index]
            job = sc.jobs[index]
            placements.append(Placement(job.id, s.start, tuple(range(s.first_gpu, s.first_gpu + job.gpus))))
        curves = {app.name: [int(x) for x in occupancy.curves[i]] for i, app in enumerate(sc.apps)}
        return cls(sc.name, scheduler, placements, curves)

    def to_dict(self) -> dict[str, Any]:
        """The plan JSON of SPEC section 2."""
        data: dict[str, Any] = {
            "scenario": self.scenario,
            "scheduler": self.scheduler,
            "placements": [{"job": p.job, "start": p.start, "gpus": list(p.gpus)} for p in self.placements],
            "realtime": {name: list(curve) for name, curve in self.curves.items()},
        }
        if self.metrics is not None:
            data["metrics"] = self.metrics.to_dict()
        if self.solve_ms is not None:
            data["solve_ms"] = round(self.solve_ms, 3)
        data["info"] = self.info
        return data

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the plan JSON (atomically)."""
        write_text_atomic(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> Plan:
        """Read a plan JSON document; checks its shape, not its rules.

        Raises:
            ScenarioError: A missing or mistyped field, named with the file.
        """
        r = FieldReader(source)
        allowed = {"scenario", "scheduler", "placements", "realtime", "metrics", "solve_ms", "info"}
        top = r.mapping(data, "", allowed | set(LEGACY_INFO_KEYS), {"placements"})
        placements = []
        raw = top["placements"]
        if not isinstance(raw, list):
            raise r.fail("placements", "expected a list of placements")
        for i, entry in enumerate(raw):
            path = f"placements[{i}]"
            entry = r.mapping(entry, path, {"job", "start", "gpus"}, {"job", "start", "gpus"})
            job = entry["job"]
            job = str(job) if isinstance(job, int) and not isinstance(job, bool) else r.string(job, f"{path}.job")
            start = r.integer(entry["start"], f"{path}.start")
            gpus = r.int_list(entry["gpus"], f"{path}.gpus", minimum=-(2**31))
            placements.append(Placement(job, start, tuple(gpus)))
        curves: dict[str, list[int]] = {}
        raw_rt = top.get("realtime", {}) or {}
        if not isinstance(raw_rt, dict):
            raise r.fail("realtime", "expected a mapping from application name to a list of integers")
        for name, curve in raw_rt.items():
            curves[str(name)] = r.int_list(curve, f"realtime.{name}", minimum=-(2**31))
        solve_ms = top.get("solve_ms")
        if solve_ms is not None:
            solve_ms = r.number(solve_ms, "solve_ms")
        info = top.get("info", {})
        if not isinstance(info, dict):
            raise r.fail("info", f"expected a JSON object, got {type(info).__name__}")
        legacy = {key: top[key] for key in LEGACY_INFO_KEYS if key in top}
        info = {**legacy, **info}
        return cls(
            scenario=str(top.get("scenario", "")),
            scheduler=str(top.get("scheduler", "")),
            placements=placements,
            curves=curves,
            solve_ms=solve_ms,
            info=info,
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Plan:
        """Read a plan JSON file.

        Raises:
            ScenarioError: The file is missing, not JSON, or mis-shaped.
        """
        path = Path(path)
        data = parse_file(path, json_only=True)
        return cls.from_dict(data, str(path))

    def curve(self, app: str, slots: int) -> np.ndarray:
        """An app's real-time curve, zeros when the plan has none for it."""
        return np.asarray(self.curves.get(app, [0] * slots), dtype=np.int64)


def without_timings(document: dict[str, Any]) -> dict[str, Any]:
    """A plan document (``Plan.to_dict()``) without what the clock measured: equal for two runs of a repeatable plan.

    Drops ``solve_ms`` and the ``seconds`` of every anytime trace in ``info`` (full mode's, and its
    hint's); objectives, bounds and every other field are kept.
    """

    def strip(value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {
                k: strip(v, k)
                for k, v in value.items()
                if not (k == "seconds" and key == "trace") and not (key is None and k == "solve_ms")
            }
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(document)
