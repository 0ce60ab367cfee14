"""One cycle (snapshot, plan, commit) and the loop that repeats it (``gpualloc slurm cycle`` / ``run``).

A cycle keeps no state of its own: everything it needs is in Slurm (the jobs,
which of the allocator's jobs are held, the apps' reservations), so running it
twice on an unchanged cluster changes nothing the second time, and the loop can
be stopped and started again at any point. A cycle that cannot reach Slurm (a
controller restarting) fails with one line, and the loop tries again at the
next cycle. Between cycles the loop polls the queue, and a job that ends or is
submitted starts a cycle (:mod:`agents.slurm.events`) besides the clock's.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from agents.live.allocator import Decision, decision_from_plan
from agents.options import PlanOptions
from agents.registry import run_scheduler
from agents.slurm import commit as commit_module
from agents.slurm import live as live_module
from agents.slurm import snapshot as snapshot_module
from agents.slurm.capacity import Teller
from agents.slurm.clock import DayClock
from agents.slurm.config import SlurmConfig
from agents.slurm.errors import SlurmError
from agents.slurm.events import Events, Watch
from agents.slurm.live import LiveSetup
from agents.slurm.record import DayRecord, History
from gpu_env.metrics import compute_metrics
from gpu_env.validation import validate

FULL_MIN_SECONDS = 2.0  # the loop runs ``full`` when a cycle's budget leaves at least this long to plan
FULL_LEAST_SECONDS = 0.1  # with less of the budget left after the fast plan, that plan is the cycle's
LOCK_WAIT_MOST = 600.0  # seconds a loop's cycle waits for another writer's lock, at most (else its interval)

Lock = Callable[[], AbstractContextManager[Any]]
"""Makes the context in which a cycle commits: the single-writer guard (:mod:`agents.slurm.lock`)."""
Observe = Callable[[SlurmConfig], tuple[dict[str, int], list[str]]]
"""Reads the apps' observed demand now: GPUs per app that answered, and one line per source that failed."""


class InvalidPlanError(SlurmError):
    """A scheduler returned a plan that breaks a rule: nothing is committed (a bug in that scheduler)."""


@dataclass
class CycleResult:
    """What one cycle saw, planned and did.

    Attributes:
        snapshot: The cluster as read.
        decision: The plan and its slot-0 decisions.
        changes: The changes the plan asks for.
        commit: What was done (None for a dry run).
        lines: One JSON-able dict per job, app and note, then a summary.
        timings: Milliseconds of ``snapshot``, ``plan``, ``commit`` and ``total``.
    """

    snapshot: snapshot_module.Snapshot
    decision: Decision
    changes: list[commit_module.Change]
    commit: commit_module.Commit | None
    lines: list[dict[str, Any]]
    timings: dict[str, float]

    @property
    def failed(self) -> int:
        """Changes that failed."""
        return len(self.commit.failed) if self.commit else 0


def cycle(
    config: SlurmConfig,
    client: Any,
    scheduler: str | LiveSetup,
    options: PlanOptions | None = None,
    *,
    dry_run: bool = False,
    now: float | None = None,
    confirm_seconds: float | None = None,
    slot_start: Mapping[str, int] | None = None,
    hint: str | None = None,
    lock: Lock | None = None,
    observe: Observe | None = None,
) -> CycleResult:
    """Snapshot, plan with ``scheduler``, validate, and commit the plan's slot 0 (nothing when ``dry_run``).

    ``scheduler`` is a registry name (its plan of the snapshot, rolled as it is) or a
    :class:`~agents.slurm.live.LiveSetup` (the live planner, :mod:`agents.slurm.live`). A live
    cycle reads the apps' observed demand through ``observe``, adds what it saw to the day's
    record in ``slurm.history_dir`` (not in a dry run; :mod:`agents.slurm.record`) and plans
    from the recorded day and the past days.

    ``confirm_seconds`` (default: the configuration's ``slurm.confirm``) is how long a released
    job may take to start before it is held again. ``slot_start`` (per app, the GPUs it held when
    the current slot began) makes a second cycle within a slot plan the apps' ramps from there
    (:func:`agents.slurm.snapshot.build`). ``hint`` names the scheduler whose plan seeds ``full``
    (default: full's own choice). ``lock`` (not for a dry run) is held from the snapshot to the
    end of the commit, so that no other writer's changes come in between.

    Raises:
        SlurmError: Slurm cannot be read (nothing changed), another writer holds the lock (nothing
            changed), or the plan breaks a rule (nothing changed).
        UnknownSchedulerError: No scheduler has this name.
    """
    with contextlib.nullcontext() if lock is None or dry_run else lock():
        return _cycle(config, client, scheduler, options, dry_run, now, confirm_seconds, slot_start, hint, observe)


def _cycle(
    config: SlurmConfig,
    client: Any,
    scheduler: str | LiveSetup,
    options: PlanOptions | None,
    dry_run: bool,
    now: float | None,
    confirm_seconds: float | None,
    slot_start: Mapping[str, int] | None,
    hint: str | None,
    observe: Observe | None,
) -> CycleResult:
    started = time.perf_counter()
    readings: dict[str, int] = {}
    read_notes: list[str] = []
    if observe is not None and isinstance(scheduler, LiveSetup):
        readings, read_notes = observe(config)
    snap = snapshot_module.take(client, config, now, slot_start)
    for app, seen in sorted(readings.items()):  # more than the cluster holds is read as all of it, and said
        if seen > snap.scenario.gpus:
            read_notes.append(
                f"{app}: observed {seen} GPUs, more than the cluster's {snap.scenario.gpus}: read as those"
            )
            readings[app] = snap.scenario.gpus
    t_snap = time.perf_counter()
    live: dict[str, Any] = {}
    if isinstance(scheduler, LiveSetup):
        decision, live = _live_decision(scheduler, snap, readings, options, dry_run)
        live["observed"] = readings
        if read_notes:
            live["observe_failed"] = read_notes
        plan = decision.plan
        checked = decision.scenario
    else:
        plan = plan_with(scheduler, snap.scenario, options, hint)
        checked = snap.scenario
    violations = validate(checked, plan)
    if violations:
        raise InvalidPlanError(f"the {plan.scheduler} plan breaks a rule, nothing committed: {violations[0]}")
    if not isinstance(scheduler, LiveSetup):
        decision = decision_from_plan(snap.scenario, plan)
    t_plan = time.perf_counter()
    planned = commit_module.changes(snap, decision)
    confirm = config.confirm if confirm_seconds is None else confirm_seconds
    teller = Teller(config.replicas)
    done = (
        None
        if dry_run
        else commit_module.apply(snap, planned, client, confirm_seconds=confirm, signal=teller if teller else None)
    )
    t_commit = time.perf_counter()
    lines = commit_module.decisions(snap, decision, done)
    metrics = plan.metrics
    timings = {
        "snapshot": 1000 * (t_snap - started),
        "plan": 1000 * (t_plan - t_snap),
        "commit": 1000 * (t_commit - t_plan),
        "total": 1000 * (t_commit - started),
    }
    lines.append(
        {
            "cycle": "dry-run" if dry_run else "commit",
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(snap.now)),
            "scheduler": scheduler.name if isinstance(scheduler, LiveSetup) else plan.scheduler,
            **_full_info(plan),
            **live,
            "objective": round(metrics.objective, 6) if metrics else None,
            "utilization": round(metrics.utilization, 6) if metrics else None,
            "start_now": [p.job for p in decision.start_now],
            "changes": [c.summary() for c in planned],
            "done": len(done.done) if done else 0,
            "failed": [f"{c.summary()}: {why}" for c, why in done.failed] if done else [],
            **({"skipped": [f"{c.summary()}: {why}" for c, why in done.skipped]} if done and done.skipped else {}),
            **({"confirmed": done.confirmed} if done and done.confirmed else {}),
            **({"above_plan": done.above_plan} if done and done.above_plan else {}),
            **({"drained": done.drained, "drain_s": round(done.drain_wait_s, 1)} if done and done.drained else {}),
            **({"signal": done.signal} if done and done.signal else {}),
            **({"replicas": _replica_gpus(snap)} if snap.replicas else {}),
            "ms": {k: round(v, 1) for k, v in timings.items()},
        }
    )
    return CycleResult(snap, decision, planned, done, lines, timings)


def _replica_gpus(snap: snapshot_module.Snapshot) -> dict[str, dict[str, int]]:
    """GPUs of each app's replicas per node, as the snapshot counted them (once, as the app's capacity)."""
    return {a.name: snap.app_replicas(a.name) for a in snap.config.apps if snap.app_replicas(a.name)}


def _live_decision(
    setup: LiveSetup,
    snap: snapshot_module.Snapshot,
    readings: Mapping[str, int],
    options: PlanOptions | None,
    dry_run: bool,
) -> tuple[Decision, dict[str, Any]]:
    """The live planner's decision, and what the cycle's summary says of the day, the history and the record."""
    config = snap.config
    clock = DayClock.of(config)
    history = History.of(config)
    notes: list[str] = []
    record: DayRecord | None = None
    recorded: list[Path] = []
    if history is not None:
        record = history.load(config, snap.now, notes, write=not dry_run)
        record.see(snap, readings)
        recorded = history.recent(config.history_days)
    setup.notes.clear()
    try:
        planner = setup.planner(config, snap.scenario.gpus, recorded)
    except ValueError as exc:
        raise SlurmError(str(exc)) from None
    decision = live_module.decide(planner, snap, record, options)
    if decision.plan.metrics is None:
        decision.plan.metrics = compute_metrics(decision.scenario, decision.plan)
    if history is not None and record is not None and not dry_run:
        history.save(record)
    info: dict[str, Any] = {
        "day": clock.day_name(snap.now),
        "slot_of_day": clock.slot_of_day(snap.now),
        "history_days": len(setup.history) if setup.history else len(recorded),
        "forecast_now": {a.name: a.demand[0] for a in decision.scenario.apps},
    }
    if decision.why:
        info["why"] = dict(decision.why)
    notes.extend(setup.notes)
    if notes:
        info["history_notes"] = notes
    return decision, info


def plan_with(scheduler: str, scenario: Any, options: PlanOptions | None, hint: str | None = None) -> Any:
    """Plan with ``scheduler``; ``full`` seeded by ``hint``'s plan when given (else full's own choice of hint).

    With ``hint``, its plan comes first (the fast mode's own time), and full improves it within what
    is left of ``options.time_limit`` (plus :data:`agents.full.GRACE_SECONDS`); when nothing is left,
    the fast plan is the cycle's, and ``plan.info["full"]`` says why. A cycle never plans nothing.
    """
    if scheduler != "full" or hint is None or hint == "full":
        return run_scheduler(scheduler, scenario, options)
    from agents import full
    from gpu_env.metrics import compute_metrics

    options = options or PlanOptions()
    started = time.perf_counter()
    fast = run_scheduler(hint, scenario, options)
    left = options.time_limit - (time.perf_counter() - started)
    if left < FULL_LEAST_SECONDS:
        fast.info = {**(fast.info or {}), "full": f"not run: {hint} took {options.time_limit - left:.2f} s of the "
                     f"{options.time_limit:g} s budget"}  # fmt: skip
        return fast
    plan = full.plan(scenario, replace(options, time_limit=left), hint_source=hint, hint_plan=fast)
    plan.solve_ms = (time.perf_counter() - started) * 1000.0
    plan.scheduler = "full"
    plan.metrics = compute_metrics(scenario, plan)
    return plan


def _full_info(plan: Any) -> dict[str, Any]:
    """For a ``full`` plan: the scheduler that seeded it, its status, what was late; or why full did not run."""
    if not isinstance(plan.info, dict):
        return {}
    if "full" in plan.info:
        return {"full": plan.info["full"]}
    if plan.scheduler != "full":
        return {}
    record = plan.info.get("hint") or {}
    out: dict[str, Any] = {"hint": record.get("scheduler"), "status": plan.info.get("status")}
    if record.get("fallback"):
        out["fallback"] = record["fallback"]
    if record.get("late"):
        out["late"] = record["late"]
    return out


def run_loop(
    config: SlurmConfig,
    client: Any,
    scheduler: str | LiveSetup,
    every_minutes: float,
    options: PlanOptions | None = None,
    *,
    budget: float | None = None,
    cycles: int | None = None,
    log: Path | None = None,
    out: IO[str] | None = None,
    poll_seconds: float = 0.0,
    debounce_seconds: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    should_stop: Callable[[], bool] = lambda: False,
    lock: Lock | None = None,
    observe: Observe | None = None,
) -> int:
    """Repeat :func:`cycle` every ``every_minutes`` and when a job ends or is submitted; returns the failed cycles.

    The clock's cycles start at the loop's start and every ``every_minutes`` after
    it (a start that a long cycle overran is skipped). With ``poll_seconds`` > 0
    the queue is read (one ``squeue``) that often between cycles; a change
    (:mod:`agents.slurm.events`) starts a cycle ``debounce_seconds`` after the poll
    that saw it, so that the events of that window make one cycle. Each cycle's
    summary line names its ``trigger`` (``clock``, ``ended`` or ``submitted``) and
    its ``events``. A poll that fails is one ``{"poll": "failed", ...}`` line (once
    until a poll succeeds again) and the loop goes on. An event cycle plans the apps'
    ramps from what they held at the clock's last cycle, so that an app moves at most
    its ramp a slot however many events come (``slot_start`` of :func:`cycle`).

    Each cycle plans with ``scheduler``: the live planner (a :class:`~agents.slurm.live.LiveSetup`,
    which reads the apps' demand through ``observe`` and keeps the day's record), or a registry
    name (the fast mode), then ``full`` seeded by its plan when ``budget`` (seconds of planning per
    cycle; default a tenth of the interval, at most 60) is at least :data:`FULL_MIN_SECONDS`; full
    returns within the budget plus its stated grace (:data:`agents.full.GRACE_SECONDS`). Every
    cycle's lines go to ``out`` and, appended, to ``log``; a cycle that fails is one
    ``{"cycle": "failed", "error": ...}`` line, and so is one that found another writer
    holding ``lock`` (a cycle's single-writer guard) too long.
    ``sleep`` and ``clock`` (monotonic seconds) are the loop's only sense of time.

    Raises:
        ReservationNamesError: At the start, reservations named like the allocator's that the configuration
            cannot read (a changed prefix, a name that does not parse): the loop does not start.
    """
    options = options or PlanOptions()
    try:  # reservations this configuration cannot read stop the loop at its start (a cycle would fail on each)
        snapshot_module.check_names(config, client.reservations(), [n.name for n in client.nodes()])
    except snapshot_module.ReservationNamesError:
        raise
    except SlurmError:
        pass  # a cluster that cannot be read now is the first cycle's failure, said in its line
    interval = every_minutes * 60.0
    budget = min(interval / 10.0, 60.0) if budget is None else budget
    watch = Watch(client, replica_prefix=config.reservation_prefix)
    failures = 0
    n = 0
    due = clock()  # the clock's next cycle
    slot_start: dict[str, int] | None = None  # per app, the GPUs it held when the clock's last cycle began the slot
    trigger, found = "clock", Events()
    while cycles is None or n < cycles:
        if should_stop():
            break
        n += 1
        live = isinstance(scheduler, LiveSetup)
        use = "full" if budget >= FULL_MIN_SECONDS and not live else scheduler
        opts = replace(options, time_limit=budget) if use == "full" else options
        try:
            result = cycle(
                config,
                client,
                use,
                opts,
                slot_start=None if trigger == "clock" else slot_start,
                hint=scheduler if use == "full" and scheduler != "full" and isinstance(scheduler, str) else None,
                lock=lock,
                observe=observe,
            )
            watch.saw(result.snapshot.jobs)  # what happens from here on is the next poll's news
            if trigger == "clock":  # a slot begins: the apps' ramps count from what they hold now
                slot_start = {a.name: a.initial for a in result.snapshot.scenario.apps}
            lines = result.lines
            if result.failed:
                failures += 1
        except SlurmError as exc:
            failures += 1
            lines = [{"cycle": "failed", "time": _now(), "error": str(exc)}]
            if trigger == "clock":
                slot_start = None
        lines[-1].update(n=n, trigger=trigger)
        if found:
            lines[-1]["events"] = found.to_dict()
        _emit(lines, out, log)
        if cycles is not None and n >= cycles:
            break
        if trigger == "clock":
            due += interval * max(1, math.ceil((clock() - due) / interval))
        waited = _wait(watch, due, poll_seconds, debounce_seconds, sleep, clock, should_stop, out, log)
        if waited is None:
            break
        trigger, found = waited
    return failures


def _wait(
    watch: Watch,
    due: float,
    poll: float,
    debounce: float,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    should_stop: Callable[[], bool],
    out: IO[str] | None,
    log: Path | None,
) -> tuple[str, Events] | None:
    """Poll until the clock's cycle is due or a debounced event fires: its trigger and events (None: stopped)."""
    found = Events()
    fire = math.inf  # when the events found so far start a cycle
    next_poll = clock() + poll if poll > 0 else math.inf
    while not should_stop():
        now = clock()
        if now >= due:
            return "clock", found
        if now >= fire:
            return found.kind, found
        if now >= next_poll:
            new, error = watch.poll()
            next_poll = clock() + poll
            if error is not None:
                _emit([{"poll": "failed", "time": _now(), "error": error}], out, log)
            if new and not found:
                fire = clock() + debounce
            found = found.merge(new)
            continue
        sleep(min(min(due, fire, next_poll) - now, 1.0))  # at most 1 s: a stop is seen within a second
    return None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _emit(lines: list[dict[str, Any]], out: IO[str] | None, log: Path | None) -> None:
    text = "".join(json.dumps(line, sort_keys=False) + "\n" for line in lines)
    if out is not None:
        out.write(text)
        out.flush()
    if log is not None:
        with open(log, "a") as f:
            f.write(text)
