"""Rolling horizon under forecast error: "optimise the day, commit the hour", simulated and measured.

A simulation of one day (SPEC section 7) with a scenario whose real-time
``demand`` is the **forecast**:

1. **Actual demand** is drawn around the forecast by :class:`NoiseModel`: each
   app's curve is shifted in time (its peaks come early or late) and multiplied
   by ``1 + e_t``, where ``e_t`` is a stationary AR(1) error with standard
   deviation ``sigma`` and persistence ``rho`` (errors stay high or low for
   hours: peaks come higher or lower). ``sigma = 0`` gives the forecast exactly.
2. **Rolling**: every ``replan_every`` slots the allocator
   (:func:`agents.live.allocator.decide`) gets the state at the start of slot ``t``:
   the jobs running (pinned with ``running_on``, their remaining duration), the
   jobs released so far and not started (release and deadline counted from
   ``t``), and each app's forecast for slots ``t..T-1`` corrected by what has
   been observed (:class:`Corrector`), with ``initial`` = the allocation
   committed in slot ``t - 1``. The horizon shrinks to the day's end: the
   scenario's T slots are the day being scored, so the planner at ``t`` sees
   slots ``t..T-1`` (``docs/rolling.md`` says why). Decay counts from now, and
   job worth is scaled by ``decay**t`` so that the planner maximises exactly the
   day's objective over the remaining slots. Only slot ``t`` is committed: the
   jobs the plan starts at ``t`` and each app's allocation in ``t``; between
   re-plans the latest plan is followed.
3. **Open loop**: one plan at slot 0 on the forecast, knowing the day's jobs
   (the scenario as given), executed unchanged.

Both are scored with :func:`gpu_env.metrics.compute_metrics` against the
scenario with the actual demand in place of the forecast (``actual.yaml``);
the executed schedule is an ordinary plan that passes the validator against it.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

import numpy as np

from agents.live.allocator import ClusterState, Decision, RunningJob, decide, with_forecast
from agents.live.forecast import Corrector, NoiseModel, with_demand
from agents.options import PlanOptions
from agents.registry import run_scheduler
from gpu_env.metrics import Metrics, compute_metrics
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import App, Job, Scenario
from gpu_env.validation import validate

MODES = ("open", "rolling")
TRACE_AHEAD = 8
"""Slots of the apps' forecast each re-plan's record keeps (:attr:`SlotRecord.forecast_ahead`)."""


class Forecaster(Protocol):
    """What the rolling loop asks of a forecast: the slots ahead, from the demand observed so far."""

    def forecast(self, forecast: np.ndarray, actual: np.ndarray, now: int, gpus: int) -> np.ndarray:
        """Forecast of slots ``now..T-1``, shape (apps, T - now).

        Args:
            forecast: The day's forecast, shape (apps, T).
            actual: The demand observed in the slots before ``now``, shape (apps, now) or wider (only
                columns ``< now`` may be read; :func:`rolling` hands exactly ``now`` columns).
            now: The slot being planned.
            gpus: G, the largest allocation.
        """
        ...


class LivePlanner(Protocol):
    """A planner that needs more than the state: the slot of the day, and how long each running job has run."""

    name: str
    base: str

    def decide(
        self, state: ClusterState, now: int, elapsed: Mapping[str, int], options: PlanOptions | None
    ) -> Decision:
        """This slot's decisions."""
        ...


class RollingError(RuntimeError):
    """A planner returned a plan that breaks the rules for the state it was given."""


# ----------------------------------------------------------------------------- one simulated day


class Reveal(StrEnum):
    """When the rolling planner learns of a job."""

    RELEASE = "release"  # from its release slot on
    ALL = "all"  # the day's jobs from slot 0 (they still start no earlier than their release)


@dataclass(frozen=True)
class SlotRecord:
    """What was committed in one slot.

    Attributes:
        slot: The slot.
        replanned: Whether the allocator was called at this slot.
        started: Jobs started in this slot (with their GPUs).
        running: Ids of the jobs holding GPUs in this slot.
        app_gpus: GPUs given to each app in this slot.
        forecast: Each app's demand for this slot as the planner saw it.
        actual: Each app's actual demand in this slot.
        solve_ms: Time of this slot's plan (0 when not re-planned).
        planned: Where the decision of this slot plans each known job that has not started before it: job
            id -> its planned start (absolute slot; -1: not planned in the horizon). Empty when not re-planned.
        margin: The forecast and margin the apps were planned at (a live planner's; empty otherwise).
        chosen: The live planner's candidate taken, where it departed from its base decision (empty otherwise).
        forecast_ahead: The apps' forecast of the next slots (summed over the apps, slot ``slot`` first) as this
            slot's plan saw it (:data:`TRACE_AHEAD` slots; empty when not re-planned).
    """

    slot: int
    replanned: bool
    started: tuple[Placement, ...]
    running: tuple[str, ...]
    app_gpus: dict[str, int]
    forecast: dict[str, int]
    actual: dict[str, int]
    solve_ms: float
    planned: dict[str, int] = field(default_factory=dict)
    margin: str = ""
    chosen: str = ""
    forecast_ahead: tuple[int, ...] = ()


@dataclass
class Simulation:
    """One simulated day of one scheduler in one mode.

    Attributes:
        mode: ``rolling`` or ``open``.
        scheduler: The scheduler's name.
        forecast: The scenario as given (its demand is the forecast).
        actual: The same scenario with the actual demand.
        executed: The executed schedule as a plan, valid against ``actual``.
        metrics: The realised metrics (``executed`` scored against ``actual``).
        slots: One record per slot (rolling) or none (open loop).
        replans: Calls to the planner.
        solve_ms: Each call's planning time.
        plan: Open loop only: the plan as the scheduler made it (reusable for another actual demand).
    """

    mode: str
    scheduler: str
    forecast: Scenario
    actual: Scenario
    executed: Plan
    metrics: Metrics
    slots: list[SlotRecord] = field(default_factory=list)
    replans: int = 0
    solve_ms: list[float] = field(default_factory=list)
    plan: Plan | None = None  # open loop: the plan as the scheduler made it

    def summary(self) -> dict[str, Any]:
        """Plain numbers for files and tables."""
        ms = np.array(self.solve_ms) if self.solve_ms else np.zeros(1)
        return {
            "mode": self.mode,
            "scheduler": self.scheduler,
            **self.metrics.to_dict(),
            "replans": self.replans,
            "solve_ms_mean": round(float(ms.mean()), 3),
            "solve_ms_p95": round(float(np.percentile(ms, 95)), 3),
            "solve_ms_max": round(float(ms.max()), 3),
        }


def open_loop(
    scenario: Scenario,
    scheduler: str,
    actual: Scenario,
    options: PlanOptions | None = None,
    planning_demand: np.ndarray | None = None,
    plan: Plan | None = None,
) -> Simulation:
    """Plan once at slot 0 on the forecast, with the day's jobs known, and execute the plan unchanged.

    The rules do not involve demand, so the plan is valid against ``actual`` as it is.

    Args:
        scenario: The scenario; its demand is the forecast.
        scheduler: The scheduler's name.
        actual: The scenario with the actual demand, which scores the plan.
        options: Passed to the scheduler.
        planning_demand: Plan on this demand (apps, T) instead of the forecast
            (e.g. a forecast raised by a safety margin).
        plan: The open-loop plan when already made (it depends on neither the
            actual demand nor the seed); ``options`` and ``planning_demand`` are then unused.
    """
    if plan is None:
        planned_on = scenario if planning_demand is None else with_demand(scenario, planning_demand)
        plan = run_scheduler(scheduler, planned_on, options)
    executed = Plan(actual.name, f"{scheduler}/open", list(plan.placements), dict(plan.curves))
    executed.solve_ms = plan.solve_ms
    metrics = compute_metrics(actual, executed)
    executed.metrics = metrics
    return Simulation("open", scheduler, scenario, actual, executed, metrics, [], 1, [plan.solve_ms or 0.0], plan)


def rolling(
    scenario: Scenario,
    scheduler: str | LivePlanner,
    actual: Scenario,
    *,
    replan_every: int = 1,
    options: PlanOptions | None = None,
    corrector: Corrector | Forecaster | None = None,
    reveal: Reveal | str = Reveal.RELEASE,
    check: bool = True,
    runtimes: Mapping[str, int] | None = None,
) -> Simulation:
    """Simulate the rolling horizon over the scenario's day against the actual demand.

    Args:
        scenario: The scenario; its demand is the forecast.
        scheduler: Any name of :data:`agents.registry.SCHEDULERS` (rolled as it is), or a live planner
            (an object with ``name`` and ``decide(state, now, elapsed, options)``, such as
            :class:`agents.live.anticipate.AnticipatingPlanner`).
        actual: The scenario with the actual demand (:func:`with_demand`); with ``runtimes``, its
            jobs' durations are the actual runtimes (:func:`realized_day`).
        replan_every: Re-plan every K slots (1: every slot); between re-plans the latest plan is followed.
        options: Passed to the scheduler at every re-plan.
        corrector: How observed demand corrects the forecast (default :class:`Corrector`, or the live
            planner's ``forecaster``). It and the planner are handed only the actual demand of the slots
            before the slot being planned (``actual.demand[:, :t]``): nothing of the day's future.
        reveal: ``release``: a job is known from its release slot on; ``all``: the
            day's jobs are known from slot 0 (they still start no earlier than their release).
        check: Validate every plan against the state it was made for; a broken
            rule raises :class:`RollingError` naming the scheduler and slot.
        runtimes: Each job's actual runtime in slots (at most its ``duration``, the time limit the
            planner sees; default: the limit). A job that ends before its limit frees its GPUs from
            the slot it ends in, and the planner re-plans at that slot whatever ``replan_every`` says.

    Returns:
        The simulation, with the executed schedule and its realised metrics.
    """
    if replan_every < 1:
        raise ValueError(f"replan_every must be a positive integer, got {replan_every}")
    name = scheduler if isinstance(scheduler, str) else scheduler.name
    day = LiveDay(
        scenario,
        actual,
        corrector=corrector or getattr(scheduler, "forecaster", None),
        reveal=reveal,
        runtimes=runtimes,
        replan_every=replan_every,
    )
    for state, ran in day.cycles():
        began = time.perf_counter()
        if isinstance(scheduler, str):
            decision = decide(state, scheduler, options)
        else:
            decision = scheduler.decide(state, day.t, ran, options)
        solve_ms = (time.perf_counter() - began) * 1000.0
        if check:
            problems = validate(decision.scenario, decision.plan)
            if problems:
                raise RollingError(
                    f"{name} at slot {day.t}: the plan breaks the rules for the state it was given: {problems[0]}"
                )
        day.commit(decision, solve_ms)
    return day.result(name)


class LiveDay:
    """One day played live, slot by slot: what :func:`rolling` runs, and what an environment steps.

    At each slot ``t``: :meth:`state` is the cluster as a live system sees it (the jobs released so far,
    the running ones with the slots they have run, each app's forecast corrected by the demand observed
    before ``t``); :meth:`commit` commits slot ``t`` of a decision made for it (the jobs it starts now and
    each app's GPUs now; between re-plans, ``None`` follows the latest plan) and moves to ``t + 1``.
    :meth:`result` is the executed day, scored against ``actual``.

    Args:
        scenario: The day; its demand is the forecast.
        actual: The day with the actual demand (:func:`realized_day`).
        corrector: How observed demand corrects the forecast (default :class:`Corrector`).
        reveal: When a job becomes known (:class:`Reveal`).
        runtimes: Each job's actual runtime in slots (at most its limit; default: the limit).
        replan_every: Re-plan every K slots, and at every slot where a job ended before its limit.
    """

    def __init__(
        self,
        scenario: Scenario,
        actual: Scenario,
        *,
        corrector: Corrector | Forecaster | None = None,
        reveal: Reveal | str = Reveal.RELEASE,
        runtimes: Mapping[str, int] | None = None,
        replan_every: int = 1,
    ) -> None:
        if reveal not in tuple(Reveal):
            raise ValueError(f"reveal must be 'release' or 'all', got {reveal!r}")
        self.scenario = scenario
        self.actual = actual
        self.corrector = corrector or Corrector()
        self.reveal = Reveal(reveal)
        self.replan_every = replan_every
        self.runtime = {job.id: job.duration for job in scenario.jobs}
        for job_id, r in (runtimes or {}).items():
            if job_id in self.runtime:
                if not 1 <= r <= self.runtime[job_id]:
                    raise ValueError(f"runtimes[{job_id!r}]: expected 1..{self.runtime[job_id]} (its limit), got {r}")
                self.runtime[job_id] = int(r)
        self.t = 0
        apps = len(scenario.apps)
        T = scenario.slots
        # job id -> (start, gpus), committed; inherited jobs hold their GPUs from slot 0
        self.started: dict[str, tuple[int, tuple[int, ...]]] = {
            job.id: (0, job.running_on) for job in scenario.jobs if job.running_on is not None
        }
        self.curves = np.zeros((apps, T), dtype=np.int64)
        self.planned_starts: dict[str, tuple[int, tuple[int, ...]]] = {}  # from the latest plan, absolute slots
        self.planned_curves = np.zeros((apps, T), dtype=np.int64)
        self.seen = np.zeros((apps, T), dtype=np.int64)  # forecast of each slot as the planner saw it
        self.records: list[SlotRecord] = []
        self.times: list[float] = []
        self._ahead: np.ndarray | None = None
        self._day_forecast_array = scenario.demand.astype(np.int64)  # every state's

    @property
    def done(self) -> bool:
        """Whether every slot of the day is committed."""
        return self.t >= self.scenario.slots

    @property
    def replans(self) -> bool:
        """Whether slot ``t`` is planned afresh: every ``replan_every`` slots, and where a job ended early."""
        t = self.t
        ended_early = any(
            start + self.runtime[job_id] == t and self.runtime[job_id] < _limit(self.scenario, job_id)
            for job_id, (start, _) in self.started.items()
        )
        return t % self.replan_every == 0 or ended_early

    def cycles(self) -> Iterator[tuple[ClusterState, dict[str, int]]]:
        """The :meth:`state` at every slot that is planned afresh (:attr:`replans`), to the day's end.

        The caller commits each slot's decision before asking for the next; the slots between re-plans follow the
        latest plan (``commit(None)``) here.
        """
        while not self.done:
            if self.replans:
                yield self.state()
            else:
                self.commit(None)

    def state(self) -> tuple[ClusterState, dict[str, int]]:
        """The cluster at the start of slot ``t`` as a live system sees it, and the slots each running job has run.

        Only the demand observed before ``t`` is read: the planner at slot ``t`` never reads slot ``t`` or later.
        """
        t = self.t
        scenario = self.scenario
        observed = self.actual.demand[:, :t]
        blank = np.zeros((len(scenario.apps), scenario.slots - t), dtype=np.int64)
        state = state_at(scenario, t, self.started, self.curves, blank, self.reveal, self.runtime)
        state = with_forecast(state, self._day_forecast_array, observed, t, self.corrector)
        ahead = [app.demand for app in state.apps]
        self._ahead = np.array(ahead, dtype=np.int64) if ahead else blank
        return state, {job_id: t - start for job_id, (start, _) in self.started.items()}

    def commit(self, decision: Decision | None, solve_ms: float = 0.0) -> SlotRecord:
        """Commit slot ``t``: the decision made for it (None: the latest plan's), then move to ``t + 1``."""
        t = self.t
        scenario = self.scenario
        T = scenario.slots
        replanned = decision is not None
        planned: dict[str, int] = {}
        ahead: tuple[int, ...] = ()
        if decision is not None and self._ahead is not None:
            ahead = tuple(int(x) for x in self._ahead.sum(axis=0)[:TRACE_AHEAD])
        if decision is not None:
            self.times.append(solve_ms)
            running_now = {j.id for j in decision.scenario.jobs if j.running_on is not None}
            self.planned_starts = {
                p.job: (t + p.start, tuple(p.gpus)) for p in decision.plan.placements if p.job not in running_now
            }
            planned = {
                job.id: self.planned_starts[job.id][0] if job.id in self.planned_starts else -1
                for job in decision.scenario.jobs
                if job.id not in running_now
            }
            for i, app in enumerate(scenario.apps):
                self.planned_curves[i, t:] = decision.plan.curve(app.name, T - t)
            if self._ahead is not None:
                self.seen[:, t:] = self._ahead
        now_started = []
        for job_id, (start, gpus) in sorted(self.planned_starts.items(), key=lambda kv: scenario.job_index(kv[0])):
            if start == t and job_id not in self.started:
                self.started[job_id] = (t, gpus)
                now_started.append(Placement(job_id, t, gpus))
        self.curves[:, t] = self.planned_curves[:, t]
        running = tuple(
            job.id
            for job in scenario.jobs
            if job.id in self.started and self.started[job.id][0] <= t < self.started[job.id][0] + self.runtime[job.id]
        )
        real = self.actual.demand
        record = SlotRecord(
            slot=t,
            replanned=replanned,
            started=tuple(now_started),
            running=running,
            app_gpus={app.name: int(self.curves[i, t]) for i, app in enumerate(scenario.apps)},
            forecast={app.name: int(self.seen[i, t]) for i, app in enumerate(scenario.apps)},
            actual={app.name: int(real[i, t]) for i, app in enumerate(scenario.apps)},  # the record, after the decision
            solve_ms=solve_ms if replanned else 0.0,
            planned=planned,
            margin=getattr(decision, "margin", "") if decision is not None else "",
            chosen=getattr(decision, "chosen", "") if decision is not None else "",
            forecast_ahead=ahead,
        )
        self.records.append(record)
        self._ahead = None
        self.t += 1
        return record

    def fork(self) -> LiveDay:
        """A copy of the day played so far that plays on apart (the days themselves are shared: never changed)."""
        other = copy.copy(self)
        other.started = dict(self.started)
        other.curves = self.curves.copy()
        other.planned_starts = dict(self.planned_starts)
        other.planned_curves = self.planned_curves.copy()
        other.seen = self.seen.copy()
        other.records = list(self.records)
        other.times = list(self.times)
        other.runtime = dict(self.runtime)
        return other

    def result(self, name: str) -> Simulation:
        """The executed day as a plan scored against ``actual`` (every slot committed)."""
        if not self.done:
            raise RuntimeError(f"the day is played to slot {self.t} of {self.scenario.slots}")
        scenario, actual, started = self.scenario, self.actual, self.started
        placements = [
            Placement(job.id, started[job.id][0], started[job.id][1]) for job in scenario.jobs if job.id in started
        ]
        placements.sort(key=lambda p: (p.start, scenario.job_index(p.job)))
        curves_by_app = {app.name: [int(x) for x in self.curves[i]] for i, app in enumerate(scenario.apps)}
        executed = Plan(actual.name, f"{name}/rolling", placements, curves_by_app)
        executed.solve_ms = float(sum(self.times))
        metrics = compute_metrics(actual, executed)
        executed.metrics = metrics
        return Simulation(
            "rolling", name, scenario, actual, executed, metrics, self.records, len(self.times), self.times
        )


def _limit(scenario: Scenario, job_id: str) -> int:
    return scenario.jobs[scenario.job_index(job_id)].duration


def state_at(
    scenario: Scenario,
    now: int,
    started: Mapping[str, tuple[int, tuple[int, ...]]],
    curves: np.ndarray,
    ahead: np.ndarray,
    reveal: Reveal | str,
    runtimes: Mapping[str, int] | None = None,
) -> ClusterState:
    """The cluster at the start of slot ``now`` as the allocator sees it.

    A running job's remaining duration is what its time limit leaves (the planner never sees the
    actual runtime); a job whose actual runtime (``runtimes``, default its limit) is over has ended.
    """
    running: list[RunningJob] = []
    queue: list[Job] = []
    for job in scenario.jobs:
        if job.id in started:
            start, gpus = started[job.id]
            runtime = job.duration if runtimes is None else runtimes.get(job.id, job.duration)
            if start + runtime > now:
                running.append(RunningJob(job, gpus, start + job.duration - now))
            continue
        if reveal == Reveal.RELEASE and job.release > now:
            continue  # not yet known
        deadline = None if job.deadline is None else job.deadline - now
        if deadline is not None and deadline < 1:
            continue  # past its deadline
        queue.append(
            replace(
                job,
                release=max(0, job.release - now),
                deadline=deadline,
                value=None,
                priority=job.weight,
            )
        )
    apps = tuple(
        App(
            app.name,
            tuple(int(x) for x in ahead[i]),
            app.ramp,
            app.initial if now == 0 else int(curves[i, now - 1]),
            app.penalty,
        )
        for i, app in enumerate(scenario.apps)
    )
    return ClusterState.at(
        scenario,
        now,
        horizon=scenario.slots - now,
        running=running,
        queue=queue,
        apps=apps,
        name=f"{scenario.name}@{now}",
    )


def realized_day(scenario: Scenario, demand: np.ndarray, runtimes: Mapping[str, int] | None = None) -> Scenario:
    """The day as it happened (``actual.yaml``): the actual demand, and each job's actual runtime as its duration.

    A job whose runtime is shorter than its limit keeps its worth per GPU-slot (its ``priority`` becomes
    ``Job.weight``, any ``value`` is dropped), so that the executed day scores exactly what the jobs
    earned, and any planner given this file plans with hindsight: every job, its actual runtime and the
    actual demand known from slot 0.
    """
    day = with_demand(scenario, demand, f"{scenario.name}-actual")
    if not runtimes:
        return day
    jobs = []
    for job in day.jobs:
        r = int(runtimes.get(job.id, job.duration))
        if r != job.duration:
            job = replace(job, duration=r, priority=job.weight, value=None)
        jobs.append(job)
    return replace(day, jobs=tuple(jobs))


def simulate(
    scenario: Scenario,
    scheduler: str | LivePlanner,
    *,
    sigma: float = 0.0,
    seed: int = 0,
    replan_every: int = 1,
    options: PlanOptions | None = None,
    noise: NoiseModel | None = None,
    corrector: Corrector | None = None,
    reveal: Reveal | str = Reveal.RELEASE,
    actual_demand: np.ndarray | None = None,
    runtime_model: str = "exact",
) -> tuple[Simulation, Simulation]:
    """Draw the actual demand and run the day both ways: rolling and open loop.

    Args:
        scenario: The scenario; its demand is the forecast.
        scheduler: The scheduler's name.
        sigma: Forecast error (the noise model's relative standard deviation).
        seed: Seed of the actual-demand draw.
        replan_every: Re-plan every K slots.
        options: Passed to the scheduler.
        noise: The noise model (its ``sigma`` is replaced by ``sigma``).
        corrector: The forecast correction (default: ``ratio`` with the noise model's rho).
        reveal: When jobs become known to the rolling planner (``release`` or ``all``).
        actual_demand: Actual demand (apps, T) to use instead of a draw.
        runtime_model: ``exact`` (every job runs to its limit) or ``trace`` (actual runtimes drawn
            below the limits, :mod:`agents.live.runtimes`, from the same seed).

    Returns:
        (rolling, open loop), scored against the same realized day (:func:`realized_day`). A live
        planner's open loop is its base scheduler's.
    """
    from agents.live.runtimes import draw_runtimes

    noise = replace(noise or NoiseModel(), sigma=sigma)
    if corrector is None:
        corrector = getattr(scheduler, "forecaster", None) or Corrector(rho=noise.rho)
    demand = noise.draw(scenario, seed) if actual_demand is None else np.asarray(actual_demand, dtype=np.int64)
    runtimes = draw_runtimes(scenario, runtime_model, seed)
    actual = realized_day(scenario, demand, runtimes)
    roll = rolling(
        scenario,
        scheduler,
        actual,
        replan_every=replan_every,
        options=options,
        corrector=corrector,
        reveal=reveal,
        runtimes=runtimes,
    )
    fixed = open_loop(scenario, scheduler if isinstance(scheduler, str) else scheduler.base, actual, options)
    return roll, fixed


# ----------------------------------------------------------------------------- comparisons


def compare(
    scenarios: Sequence[Scenario],
    schedulers: Sequence[str],
    sigmas: Sequence[float],
    seeds: Sequence[int],
    *,
    replan_every: int = 1,
    options: Mapping[str, PlanOptions] | None = None,
    open_options: Mapping[str, PlanOptions] | None = None,
    reveal: Reveal | str = Reveal.RELEASE,
    corrector: str = "ratio",
    margin: float = 1.0,
    open_margin: float = 0.0,
    told_sigma: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Open loop against rolling for every scenario, scheduler, forecast error and seed.

    The same seed draws the same actual demand for every scheduler and both
    modes (common random numbers), so that differences are paired. With
    ``sigma = 0`` every seed draws the forecast itself, so only the first seed
    runs (repeating it would count one outcome several times in the statistics).
    ``open_margin`` lets the open loop plan on the forecast raised by
    ``open_margin * sigma`` of itself (it is told the forecast error); ``margin``,
    ``corrector`` and ``reveal`` set the rolling side (:class:`Corrector`, :func:`rolling`),
    and ``told_sigma`` gives the rolling corrector sigma as its prior. ``options``
    go to every plan, ``open_options`` (default: ``options``) to the open loop's
    single plan, which may deserve a longer time limit than one re-plan.

    Returns:
        One row per (scenario, scheduler, sigma, seed, mode) with the realised metrics.
    """
    options = options or {}
    open_options = options if open_options is None else open_options
    plans: dict[tuple[int, str, float], Plan] = {}  # one open-loop plan per scenario, scheduler and planning demand
    rows: list[dict[str, Any]] = []
    noise = NoiseModel()
    for scenario in scenarios:
        for sigma in sigmas:
            for seed in seeds if sigma > 0 else list(seeds)[:1]:
                demand = replace(noise, sigma=sigma).draw(scenario, seed)
                actual = with_demand(scenario, demand, f"{scenario.name}-actual")
                for name in schedulers:
                    opts = options.get(name)
                    raised = None
                    if open_margin > 0:
                        raised = np.clip(np.round(scenario.demand * (1 + open_margin * sigma)), 0, scenario.gpus)
                    key = (id(scenario), name, open_margin * sigma)
                    fixed = open_loop(scenario, name, actual, open_options.get(name), raised, plans.get(key))
                    plans[key] = fixed.plan
                    roll = rolling(
                        scenario,
                        name,
                        actual,
                        replan_every=replan_every,
                        options=opts,
                        corrector=Corrector(
                            method=corrector, rho=noise.rho, margin=margin, prior_sigma=sigma if told_sigma else 0.0
                        ),
                        reveal=reveal,
                    )
                    for sim in (fixed, roll):
                        problems = validate(sim.actual, sim.executed)
                        rows.append(
                            {
                                "scenario": scenario.name,
                                "sigma": sigma,
                                "seed": seed,
                                **sim.summary(),
                                "valid": not problems,
                            }
                        )
                    if progress is not None:
                        progress(
                            f"{scenario.name} sigma={sigma:g} seed={seed} {name}: "
                            f"open {fixed.metrics.objective:.1f} rolling {roll.metrics.objective:.1f}"
                        )
    return rows
