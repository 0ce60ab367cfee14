"""Past days from Slurm's job accounting, for a cluster that ran without the allocator (``gpualloc slurm history``).

``sacct --json`` (slurmdbd) keeps every job: when it was submitted and became eligible, its time limit,
the GPUs it asked for and got, its ``--comment``, and when it started and ended. :func:`read_sacct`
reads that answer into :class:`AccountedJob` records; :func:`past_days` puts each job on the day of the
day's clock (:mod:`agents.slurm.clock`) its release falls in and fills one
:class:`~agents.slurm.record.DayRecord` per day, so that the day's scenario is written by the same
:meth:`~agents.slurm.record.DayRecord.to_scenario` as the days the loop records itself.

Per job: ``job_id``; GPUs: the ``gres/<slurm.gres>`` count of ``tres.allocated``, else of
``tres.requested`` (a job never started has no allocation); release: ``time.eligible`` (a held job's is
its release), else ``time.submission``; ``time.limit`` (minutes, rounded up to slots); type and worth
from ``comment.job``, ``partition`` and ``qos`` by the configuration's workload rules, as the snapshot
reads them; ``time.start`` and ``time.end`` when the job got an allocation (a job cancelled while pending
shows start = end = its cancel time and no allocation: it keeps its release and limit, no runtime).

What accounting does not hold: the apps' demand. A past day's ``realtime`` is the configured forecast
read by the day's clock (slot ``t`` of the day: ``demand[t % len(demand)]``).

The job completion log (``jobcomp/filetxt``) is not read: on Slurm 22.05 it records no comment, and no
GPUs without slurmdbd.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents.slurm.clock import DayClock
from agents.slurm.config import SlurmConfig
from agents.slurm.errors import UnreadableError
from agents.slurm.jsonread import SlurmJob, number
from agents.slurm.record import AppRecord, DayRecord, JobRecord
from agents.slurm.snapshot import _workload
from gpu_env.scenario import MAX_SLOTS

SACCT_STATES = "PD,R,S,CD,CA,F,TO,NF,PR,OOM,BF,DL,RQ,RS,RV"
"""``sacct -s``: every state, so that a window also lists the jobs cancelled while held (none without ``-s``)."""
KILL_GRACE = 60.0
"""Seconds a job may run past its time limit before its record is taken as wrong (Slurm's kill takes a while)."""


@dataclass(frozen=True)
class AccountedJob:
    """One job of Slurm's accounting, as a past day needs it.

    Attributes:
        id: Job id as text.
        state: Its final (or current) state, upper case.
        partition: Its partition (the first, when it names several).
        qos: Its QOS.
        comment: Its ``--comment``.
        gpus: GPUs allocated, else requested (0: none).
        submitted: Epoch seconds it was submitted (None: unknown).
        eligible: Epoch seconds it became eligible to start (None: never, e.g. held then cancelled).
        limit: Time limit in minutes (None: none).
        started: Epoch seconds it started (None: never got an allocation).
        ended: Epoch seconds it ended (None: not yet, or never started).
    """

    id: str
    state: str
    partition: str
    qos: str
    comment: str
    gpus: int
    submitted: int | None
    eligible: int | None
    limit: int | None
    started: int | None
    ended: int | None

    @property
    def released(self) -> int | None:
        """When it could first start: eligible, else submitted."""
        return self.eligible or self.submitted


def read_sacct(data: Any, gres: str = "gpu") -> tuple[list[AccountedJob], list[str]]:
    """The jobs of a ``sacct --json`` answer, and a line per job that cannot be read (left out).

    Args:
        data: The parsed answer (``{"jobs": [...]}``).
        gres: The gres name of a GPU (``slurm.gres``).

    Raises:
        UnreadableError: Not a sacct answer (no ``jobs`` list), or one that reports an error.
    """
    jobs = data.get("jobs") if isinstance(data, Mapping) else None
    if not isinstance(jobs, list):
        raise UnreadableError("sacct --json: no 'jobs' list in the answer")
    errors = data.get("errors")
    if isinstance(errors, list) and errors:
        first = errors[0]
        why = first.get("error") or first.get("description") if isinstance(first, Mapping) else first
        raise UnreadableError(f"sacct --json: it reports an error: {why}")
    out, bad = [], []
    for i, raw in enumerate(jobs):
        jid = raw.get("job_id") if isinstance(raw, Mapping) else None
        label = f"job {jid}" if isinstance(jid, int | str) and not isinstance(jid, bool) else f"jobs[{i}]"
        try:
            out.append(_job(raw, gres, label))
        except UnreadableError as exc:
            bad.append(f"{label}: left out: {exc}")
    return out, bad


def _job(j: Any, gres: str, label: str) -> AccountedJob:
    if not isinstance(j, Mapping):
        raise UnreadableError("expected a job object")
    jid = number(j.get("job_id"), "job_id")
    if jid is None:
        raise UnreadableError("no job_id")
    times = j.get("time")
    if not isinstance(times, Mapping):
        raise UnreadableError("no 'time' object")
    tres = j.get("tres") if isinstance(j.get("tres"), Mapping) else {}
    allocated = _gres_count(tres.get("allocated"), gres, "tres.allocated")
    requested = _gres_count(tres.get("requested"), gres, "tres.requested")
    got_allocation = bool(tres.get("allocated"))
    start, end = _epoch(times, "start"), _epoch(times, "end")
    state = j.get("state")
    current = state.get("current") if isinstance(state, Mapping) else state
    if isinstance(current, list):
        current = current[0] if current else ""
    comment = j.get("comment")
    if isinstance(comment, Mapping):
        comment = comment.get("job")
    limit = _limit(times.get("limit"))
    return AccountedJob(
        id=str(jid),
        state=str(current or "").upper(),
        partition=str(j.get("partition") or "").split(",")[0],
        qos=str(j.get("qos") or ""),
        comment=str(comment or ""),
        gpus=allocated or requested,
        submitted=_epoch(times, "submission"),
        eligible=_epoch(times, "eligible"),
        limit=limit,
        started=start if got_allocation else None,
        ended=end if got_allocation and start is not None else None,
    )


def _epoch(times: Mapping[str, Any], key: str) -> int | None:
    """Epoch seconds of ``time.<key>`` (0 or unset: None)."""
    n = number(times.get(key), f"time.{key}")
    if n is not None and n < 0:
        raise UnreadableError(f"time.{key}: expected epoch seconds, got {n}")
    return n or None


def _limit(value: Any) -> int | None:
    n = number(value, "time.limit")
    return None if n is None or n <= 0 or n >= 4294967294 else n  # 22.05's INFINITE / NO_VAL


def _gres_count(entries: Any, gres: str, where: str) -> int:
    if entries is None:
        return 0
    if not isinstance(entries, list):
        raise UnreadableError(f"{where}: expected a list")
    total = 0
    for e in entries:
        if isinstance(e, Mapping) and e.get("type") == "gres" and str(e.get("name") or "").split(":")[0] == gres:
            total += number(e.get("count"), f"{where}: count") or 0
    return total


def day_starts(clock: DayClock, since: float, until: float) -> list[float]:
    """Epoch starts of the clock's days that overlap ``[since, until)``, oldest first."""
    out = []
    begins = clock.day_begins(since)
    while begins < until:
        out.append(begins)
        begins += clock.day_seconds
    return out


def past_days(
    config: SlurmConfig,
    jobs: Sequence[AccountedJob],
    days: Sequence[float],
    gpus: int,
    node_size: int,
    problems: dict[str, list[str]],
) -> list[DayRecord]:
    """One record per day of ``days`` (epoch starts) with the owned jobs released in it.

    Jobs the configuration does not own (``owned``, ``slurm.partitions``) or released outside the days
    are not on any of them. A job that cannot be a day's job is reported in ``problems`` under its day's
    name (``""`` when it has no release) with its id, and left out.

    Args:
        config: The configuration (day clock, workload rules, apps, ownership).
        jobs: What :func:`read_sacct` read.
        days: Starts of the days to fill (:func:`day_starts`).
        gpus: The cluster's GPUs.
        node_size: GPUs per node.
        problems: Where the lines of the jobs left out go, per day name.
    """
    clock = DayClock.of(config)
    records = {}
    for begins in days:
        rec = DayRecord(clock.day_name(begins), begins, config.slot_seconds, config.day_slots, gpus, node_size)
        rec.decay = config.decay
        for app in config.apps:
            forecast: list[int | None] = [int(app.demand[t % len(app.demand)]) for t in range(config.day_slots)]
            rec.apps[app.name] = AppRecord(app.ramp, app.penalty, forecast, [None] * config.day_slots)
        records[clock.day_index(begins)] = rec
        problems.setdefault(rec.name, [])
    for job in jobs:
        if not config.owns(job.partition, job.qos, job.comment):
            continue
        if config.partitions and job.partition not in config.partitions:
            continue
        released = job.released
        if released is None:
            problems.setdefault("", []).append(f"job {job.id}: left out: no submit or eligible time")
            continue
        rec = records.get(clock.day_index(released))
        if rec is None:
            continue
        try:
            rec.jobs[job.id] = _record(config, job, rec, released)
        except UnreadableError as exc:
            problems[rec.name].append(f"job {job.id}: left out of day {rec.name}: {exc}")
    return list(records.values())


def _record(config: SlurmConfig, job: AccountedJob, day: DayRecord, released: int) -> JobRecord:
    """The day's record of one job.

    Raises:
        UnreadableError: No GPUs, no time limit, a type or worth the rules refuse, or a runtime that
            cannot be (ended before it started, or ran past its limit).
    """
    if job.gpus <= 0:
        raise UnreadableError(f"asks for no {config.gres}")
    if job.limit is None:
        raise UnreadableError("no time limit")
    fields = SlurmJob(
        id=job.id, state=job.state, reason="", partition=job.partition, qos=job.qos, comment=job.comment,
        priority=0, nodes=(), node_count=1, tres_per_node="", tres_per_job="", tres_other="", gres_detail=(),
        time_limit=job.limit, start_time=job.started, end_time=job.ended, eligible_time=job.eligible, deadline=None,
        required_nodes=(),
    )  # fmt: skip
    job_type, priority = _workload(config, fields, strict=False)
    limit = max(1, math.ceil(job.limit * 60.0 / day.slot_seconds - 1e-9))
    if job.started is not None and job.ended is not None:
        ran = job.ended - job.started
        if ran < 0:
            raise UnreadableError(f"ended {-ran} s before it started")
        if ran > job.limit * 60.0 + KILL_GRACE:
            raise UnreadableError(f"ran {ran} s, above its time limit of {job.limit} min")
    return JobRecord(
        job_type,
        job.gpus,
        min(limit, MAX_SLOTS),
        day.slot(released),
        float(priority),
        None,
        None if job.started is None else float(job.started),
        None if job.ended is None else float(job.ended),
    )
