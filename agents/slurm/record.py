"""History the cluster keeps itself: the loop records each day, and the live planner reads the past ones.

With ``slurm.history_dir`` set, every cycle adds what it saw to the record of the current day (the
day's clock, :mod:`agents.slurm.clock`), kept in ``<history_dir>/recording/<day>.json``:

- **Jobs**, each owned job the first time it is seen, as submitted: its type and worth per GPU-slot
  (the configuration's mapping), GPUs, time limit in slots, the slot of the day it arrived in (its
  submit time, or its ``--begin`` when later) and its ``--deadline``; then, from Slurm's own records of
  the job, when it started and when it ended.
- **Demand**, per app and slot of the day: the forecast as the slot's first cycle read it, and the
  demand observed in the slot (the largest reading of the app's ``observed`` source in it).

The first cycle of a later day closes the record: the day becomes ``<history_dir>/<day>.yaml``, a
scenario file that ``--history`` reads and the live planner fits its models on (:mod:`agents.live.history`):
its jobs are the day's arrivals (``release``: the slot of arrival; ``duration``: the time limit;
``runtime``: the slots it actually ran, when Slurm recorded its start and end within the record), and
each app's ``demand`` is what was observed (the forecast in a slot without a reading; with ``anchor:
now``, a slot no cycle saw has the forecast of the last slot before it that one did), and its ``forecast``
the forecast the cycles read (so that the live planner's error model learns from the errors that happened,
and ``gpualloc replay`` can play the day again as it came). A record that
cannot be read is reported and set aside (renamed ``.bad``), never guessed; a job whose fields break
the format is reported with its id and left out of the day.

The file is written whole to a temporary name and renamed, so a cycle that dies leaves the last
complete record.

For the days before the allocator ran, ``gpualloc slurm history`` fills these records from Slurm's job
accounting instead (:mod:`agents.slurm.accounting`) and writes them with the same :meth:`DayRecord.to_scenario`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agents.slurm.clock import DayClock
from agents.slurm.config import SlurmConfig
from agents.slurm.errors import UnreadableError
from agents.slurm.jsonread import SlurmJob
from agents.slurm.snapshot import Snapshot, _asked_gpus, _workload
from gpu_env.files import write_text_atomic
from gpu_env.scenario import MAX_SLOTS, Scenario, ScenarioError, save_scenario, scenario_from_dict

RECORDING = "recording"
FINISHED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"})
STARTED_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", *FINISHED_STATES})
FORMAT = 1


@dataclass
class JobRecord:
    """One owned job of the day, as submitted, and when it ran.

    Attributes:
        type: Its workload type.
        gpus: GPUs asked.
        limit: Time limit, in slots.
        release: Slot of the day it arrived in.
        priority: Worth per GPU-slot.
        deadline: Its ``--deadline`` in slots from the day's start (None: none).
        started: Epoch seconds it started (None: not seen started).
        ended: Epoch seconds it ended (None: not seen ended).
    """

    type: str
    gpus: int
    limit: int
    release: int
    priority: float
    deadline: int | None = None
    started: float | None = None
    ended: float | None = None


@dataclass
class AppRecord:
    """One app's day: the forecast and the observed demand per slot (None: no cycle / no reading)."""

    ramp: int
    penalty: float
    forecast: list[int | None]
    observed: list[int | None]


@dataclass
class DayRecord:
    """The record of one day of the cluster (module docstring).

    Attributes:
        name: The day's name (:meth:`DayClock.day_name`).
        begins: Epoch seconds at which it began.
        slot_seconds: Seconds per slot.
        day_slots: Slots in the day.
        gpus: GPUs of the cluster, the most seen.
        node_size: GPUs per node.
        decay: Per-slot decay.
        apps: Per app.
        jobs: Per job id.
    """

    name: str
    begins: float
    slot_seconds: float
    day_slots: int
    gpus: int = 0
    node_size: int = 0
    decay: float = 1.0
    apps: dict[str, AppRecord] = field(default_factory=dict)
    jobs: dict[str, JobRecord] = field(default_factory=dict)

    @classmethod
    def new(cls, config: SlurmConfig, epoch: float) -> DayRecord:
        """An empty record of the day ``epoch`` falls in."""
        clock = DayClock.of(config)
        return cls(clock.day_name(epoch), clock.day_begins(epoch), config.slot_seconds, config.day_slots)

    def slot(self, epoch: float) -> int:
        """The slot of this day ``epoch`` falls in (clipped to the day)."""
        return min(max(math.floor((epoch - self.begins) / self.slot_seconds + 1e-9), 0), self.day_slots - 1)

    def see(self, snapshot: Snapshot, observed: Mapping[str, int]) -> None:
        """Add what one cycle saw: the snapshot's owned jobs and apps, and the apps' observed demand now."""
        config = snapshot.config
        scenario = snapshot.scenario
        s = self.slot(snapshot.now)
        self.gpus = max(self.gpus, scenario.gpus)
        self.node_size = snapshot.node_size
        self.decay = scenario.decay
        for app in scenario.apps:
            spec = next(a for a in config.apps if a.name == app.name)
            rec = self.apps.setdefault(
                app.name,
                AppRecord(spec.ramp, spec.penalty, [None] * self.day_slots, [None] * self.day_slots),
            )
            if rec.forecast[s] is None:
                rec.forecast[s] = int(app.demand[0])
            if spec.anchor == "day":  # the day's whole forecast is known: the slots without a cycle have it too
                for t, f in enumerate(rec.forecast):
                    if f is None:
                        rec.forecast[t] = int(spec.demand[t % len(spec.demand)])
            if app.name in observed:
                seen = int(observed[app.name])
                rec.observed[s] = seen if rec.observed[s] is None else max(rec.observed[s], seen)
        entries = {job.id: job for job in scenario.jobs if job.running_on is None}
        for job in snapshot.jobs:
            if not config.owns(job.partition, job.qos, job.comment):
                continue
            if config.partitions and job.partition not in config.partitions:
                continue
            rec = self.jobs.get(job.id)
            if rec is None:
                rec = self._first_sight(config, snapshot, job, entries.get(job.id))
                if rec is None:
                    continue
                self.jobs[job.id] = rec
            if job.state in STARTED_STATES and job.start_time:
                rec.started = float(job.start_time)
            if job.state in FINISHED_STATES and job.end_time and job.start_time:
                rec.ended = float(job.end_time)

    def _first_sight(self, config: SlurmConfig, snapshot: Snapshot, job: SlurmJob, entry: Any) -> JobRecord | None:
        """A new job's record, or None for one that arrived before this day or cannot be read."""
        arrived = max(job.submit_time or 0, job.eligible_time or 0) or snapshot.now
        if arrived < self.begins - 1e-6:
            return None  # the day before's arrival: in that day's record
        if job.time_limit is None:
            return None
        try:
            gpus = entry.gpus if entry is not None else _asked_gpus(config, job, snapshot.node_size)
            job_type, priority = (
                (entry.type.value, entry.weight) if entry is not None else _workload(config, job, strict=False)
            )
        except UnreadableError:
            return None
        limit = max(1, math.ceil(job.time_limit * 60.0 / self.slot_seconds - 1e-9))
        deadline = None
        if job.deadline:
            deadline = math.floor((job.deadline - self.begins) / self.slot_seconds + 1e-9)
        return JobRecord(job_type, gpus, min(limit, MAX_SLOTS), self.slot(arrived), float(priority), deadline)

    def observed_before(self, app: str, slot: int, forecast: Sequence[int]) -> list[int]:
        """The app's observed demand in slots ``0..slot-1`` (a slot without a reading: ``forecast``'s value)."""
        rec = self.apps.get(app)
        out = []
        for t in range(slot):
            seen = rec.observed[t] if rec is not None else None
            out.append(int(forecast[t]) if seen is None else int(seen))
        return out

    def forecast_before(self, app: str, slot: int, fallback: Sequence[int]) -> list[int]:
        """The app's forecast of slots ``0..slot-1`` as the cycles read it (missing: ``fallback``'s value)."""
        rec = self.apps.get(app)
        return [
            int(fallback[t]) if rec is None or rec.forecast[t] is None else int(rec.forecast[t])  # type: ignore[arg-type]
            for t in range(slot)
        ]

    # ------------------------------------------------------------------------- files

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the recording's JSON)."""
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Any) -> DayRecord:
        """The record of :meth:`to_dict`.

        Raises:
            ValueError: Not a record of this format.
        """
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a day record of format {FORMAT}")
        try:
            apps = {k: AppRecord(**v) for k, v in data["apps"].items()}
            jobs = {k: JobRecord(**v) for k, v in data["jobs"].items()}
            fields = {k: data[k] for k in ("name", "begins", "slot_seconds", "day_slots", "gpus", "node_size", "decay")}
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"a day record with a missing or wrong field ({exc})") from None
        return cls(**fields, apps=apps, jobs=jobs)

    def to_scenario(self, problems: list[str] | None = None) -> Scenario:
        """The finished day as a scenario (module docstring); jobs that break the format are reported and left out.

        Args:
            problems: Where a line per job left out is appended (job id and why).
        """
        apps = []
        for name, rec in self.apps.items():
            forecast = _filled(rec.forecast)
            demand = [forecast[t] if o is None else o for t, o in enumerate(rec.observed)]
            demand = [min(max(int(d), 0), max(self.gpus, 0)) for d in demand]
            apps.append(
                {
                    "name": name,
                    "demand": demand,
                    "ramp": rec.ramp,
                    "initial": demand[0],
                    "penalty": rec.penalty,
                    "forecast": [min(max(int(f), 0), max(self.gpus, 0)) for f in forecast],
                }
            )
        base = {
            "name": self.name,
            "cluster": {"gpus": max(self.gpus, 1), "node_size": self.node_size or max(self.gpus, 1)},
            "horizon": {"slots": self.day_slots, "slot_minutes": self.slot_seconds / 60.0, "decay": self.decay},
            "realtime": apps,
            "jobs": [],
        }
        jobs = []
        for jid, job in self.jobs.items():
            entry: dict[str, Any] = {
                "id": jid,
                "type": job.type,
                "gpus": job.gpus,
                "duration": job.limit,
                "priority": job.priority,
            }
            if job.release:
                entry["release"] = job.release
            if job.deadline is not None:
                entry["deadline"] = job.deadline
            if job.started is not None and job.ended is not None:
                ran = math.ceil(max(job.ended - job.started, 1.0) / self.slot_seconds - 1e-9)
                entry["runtime"] = min(max(ran, 1), job.limit)
            try:
                scenario_from_dict({**base, "jobs": [entry]}, f"<day {self.name}>")
            except ScenarioError as exc:
                if problems is not None:
                    problems.append(f"job {jid}: left out of day {self.name}: {str(exc).split(': ', 1)[-1]}")
                continue
            jobs.append(entry)
        return scenario_from_dict({**base, "jobs": jobs}, f"<day {self.name}>")


def _filled(values: Sequence[int | None]) -> list[int]:
    """Each missing value as the last one before it (the first known one at the start; 0 when none is)."""
    known = [v for v in values if v is not None]
    last = known[0] if known else 0
    out = []
    for v in values:
        last = last if v is None else v
        out.append(int(last))
    return out


@dataclass
class History:
    """The folder ``slurm.history_dir``: finished days (``<day>.yaml``) and the day being recorded.

    Attributes:
        root: The folder.
    """

    root: Path

    @classmethod
    def of(cls, config: SlurmConfig) -> History | None:
        """The configuration's history folder (None when ``slurm.history_dir`` is not set)."""
        return None if config.history_dir is None else cls(Path(config.history_dir))

    def recording(self, name: str) -> Path:
        """The file of the day ``name`` while it is recorded."""
        return self.root / RECORDING / f"{name}.json"

    def day_file(self, name: str) -> Path:
        """The finished day ``name``."""
        return self.root / f"{name}.yaml"

    def days(self) -> list[Path]:
        """The finished days, oldest first (names sort by date)."""
        return sorted(p for p in self.root.glob("*.yaml") if p.is_file())

    def load(self, config: SlurmConfig, epoch: float, notes: list[str], *, write: bool = True) -> DayRecord:
        """The record of the day ``epoch`` falls in; earlier records found are closed first (:meth:`close`).

        A record that cannot be read is renamed ``.bad`` and reported in ``notes``; the day starts afresh.
        With ``write`` False (a dry run) nothing is closed, renamed or written.
        """
        today = DayRecord.new(config, epoch)
        folder = self.root / RECORDING
        found = sorted(folder.glob("*.json")) if folder.is_dir() else []
        record = None
        for path in found:
            try:
                rec = DayRecord.from_dict(json.loads(path.read_text()))
            except (OSError, ValueError) as exc:
                if write:
                    notes.append(f"{path}: unreadable day record, set aside as {path.name}.bad ({exc})")
                    path.replace(path.with_name(path.name + ".bad"))
                else:
                    notes.append(f"{path}: unreadable day record ({exc})")
                continue
            if rec.name == today.name and rec.day_slots == today.day_slots and rec.slot_seconds == today.slot_seconds:
                record = rec
            elif rec.begins < today.begins and write:
                self.close(rec, notes)
                path.unlink(missing_ok=True)
        return record or today

    def save(self, record: DayRecord) -> None:
        """Write the record of the day being recorded."""
        write_text_atomic(self.recording(record.name), json.dumps(record.to_dict(), sort_keys=True))

    def close(self, record: DayRecord, notes: list[str]) -> Path:
        """Write a finished day as ``<day>.yaml`` (its bad jobs reported in ``notes``)."""
        scenario = record.to_scenario(notes)
        path = self.day_file(record.name)
        save_scenario(scenario, path)  # whole or not at all (gpu_env.files)
        notes.append(f"day {record.name} recorded: {path} ({len(scenario.jobs)} jobs)")
        return path

    def recent(self, n: int) -> list[Path]:
        """The newest ``n`` finished days, oldest first."""
        return self.days()[-n:]
