"""The allocator's face to a cluster manager: the state now in, a plan and this slot's decisions out.

A cluster manager calls :func:`decide` once per slot (or every few slots) with
what it knows: the jobs running now (on which GPUs, for how many more slots),
the queue (jobs waiting, with their earliest start and deadline counted from
now), and a forecast of each real-time application's demand from now on with
the GPUs serving it now. The allocator plans the horizon ahead with any
scheduler of :mod:`agents.registry` and returns the plan and the decisions that
cannot wait: which queued jobs start now and on which GPUs, and how many GPUs
each application gets in this slot. Everything later in the plan is advice
that the next call may revise ("optimise the day, commit the hour").

The state becomes an ordinary scenario whose slot 0 is now (running jobs
pinned with ``running_on``, the apps' ``initial`` the current allocation), so
every rule and every scheduler applies unchanged.

>>> from gpu_env.scenario import App, Job, JobType
>>> state = ClusterState(
...     gpus=8,
...     horizon=4,
...     running=(RunningJob(Job("etl", JobType.BATCH_INFERENCE, 2, 5), gpus=(0, 1), remaining=2),),
...     queue=(Job("sft", JobType.TRAINING, 2, 3, priority=2.0), Job("eval", JobType.BATCH_INFERENCE, 4, 2, release=1)),
...     apps=(App("chat", demand=(2, 3, 3, 2), ramp=1, initial=2, penalty=8.0),),
... )
>>> decision = decide(state, "fifo")
>>> [(p.job, p.gpus) for p in decision.start_now], decision.app_gpus_now, decision.waiting
([('sft', (2, 3))], {'chat': 3}, ('eval',))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from agents.live.forecast import observed_error_level
from agents.options import PlanOptions
from agents.registry import run_scheduler
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import App, Job, Scenario, scenario_from_dict


@dataclass(frozen=True)
class RunningJob:
    """A job that holds GPUs now.

    Attributes:
        job: The job as submitted (its size, priority or value, type).
        gpus: The GPUs it holds (an allowed block).
        remaining: Slots it still runs, now included (at least 1).
    """

    job: Job
    gpus: tuple[int, ...]
    remaining: int


@dataclass(frozen=True)
class ClusterState:
    """What a cluster manager knows at the start of a slot.

    Attributes:
        gpus: G.
        horizon: Slots planned ahead, now included.
        running: Jobs holding GPUs now.
        queue: Waiting jobs; ``release`` and ``deadline`` count slots from now
            (release 0: may start now).
        apps: Real-time applications: ``demand`` is the forecast for the next
            ``horizon`` slots, ``initial`` the GPUs serving the app now.
        node_size: GPUs per node (default: one node).
        decay: Per-slot decay of job value, counted from now.
        slot_minutes: Minutes per slot (informative).
        value_scale: Multiplies every job's worth per GPU-slot. A simulation of a
            scored day passes ``decay**now`` so that the planner's objective is
            the day's objective over the remaining slots.
        name: Name of the derived scenario.
        error_level: Each app's relative forecast error observed so far (root mean square; empty:
            unknown). The live planner raises an app into idle GPUs only as far as this says its
            demand may come above the forecast.
        day_forecast: Each app's forecast for the whole day, slots ``0..T-1`` of the day (empty: unknown), and
        observed: each app's actual demand in the slots of the day before now (empty: nothing observed).
            The live planner reads today's error from the two and draws its futures' demand around the
            forecast (:mod:`agents.live.error_model`); nothing at or after now is ever observed.
    """

    gpus: int
    horizon: int
    running: tuple[RunningJob, ...] = ()
    queue: tuple[Job, ...] = ()
    apps: tuple[App, ...] = ()
    node_size: int = 0
    decay: float = 1.0
    slot_minutes: float = 60.0
    value_scale: float = 1.0
    name: str = "now"
    error_level: tuple[float, ...] = ()
    day_forecast: tuple[tuple[int, ...], ...] = ()
    observed: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def at(
        cls,
        scenario: Scenario,
        now: int,
        *,
        horizon: int,
        running: Sequence[RunningJob],
        queue: Sequence[Job],
        apps: tuple[App, ...],
        name: str,
    ) -> ClusterState:
        """A state of ``scenario``'s cluster at slot ``now`` of its day.

        Its G, node size, decay and slot length are the scenario's, and every job's worth is scaled by
        ``decay**now`` (``value_scale``), so that the planner's objective is the day's over the slots left.
        """
        return cls(
            gpus=scenario.gpus,
            horizon=horizon,
            running=tuple(running),
            queue=tuple(queue),
            apps=apps,
            node_size=scenario.node_size,
            decay=scenario.decay,
            slot_minutes=scenario.slot_minutes,
            value_scale=scenario.decay**now,
            name=name,
        )

    def to_scenario(self) -> tuple[Scenario, tuple[str, ...]]:
        """The state as a scenario whose slot 0 is now, checked like any scenario file.

        Queued jobs that can no longer meet their deadline inside the horizon
        rules are left out.

        Returns:
            The scenario and the ids of the queued jobs left out as expired.

        Raises:
            ScenarioError: A state that breaks the rules (e.g. overlapping running
                jobs, a running job that is not an allowed block), naming the field.
        """
        jobs: list[dict[str, Any]] = []
        for r in self.running:
            entry = _job_entry(r.job, self.value_scale)
            entry["duration"] = r.remaining
            entry["running_on"] = list(r.gpus)
            jobs.append(entry)
        expired = []
        for job in self.queue:
            if job.deadline is not None and job.deadline - job.duration < job.release:
                expired.append(job.id)
                continue
            entry = _job_entry(job, self.value_scale)
            if job.release:
                entry["release"] = job.release
            if job.deadline is not None:
                entry["deadline"] = job.deadline
            jobs.append(entry)
        data = {
            "name": self.name,
            "cluster": {"gpus": self.gpus, "node_size": self.node_size or self.gpus},
            "horizon": {"slots": self.horizon, "slot_minutes": self.slot_minutes, "decay": self.decay},
            "realtime": [
                {
                    "name": app.name,
                    "demand": list(app.demand),
                    "ramp": app.ramp,
                    "initial": app.initial,
                    "penalty": app.penalty,
                }
                for app in self.apps
            ],
            "jobs": jobs,
        }
        return scenario_from_dict(data, f"<cluster state {self.name}>"), tuple(expired)


def with_forecast(
    state: ClusterState, day_forecast: np.ndarray, observed: np.ndarray, now: int, forecaster: Any
) -> ClusterState:
    """The state with each app's demand ahead as a live planner reads it: the simulator's and the Slurm loop's builder.

    Each app's ``demand`` becomes ``forecaster``'s forecast of slots ``now..now + horizon - 1`` from the day's
    forecast and the demand observed before ``now`` (held at its last value where the day's forecast ends
    first); ``error_level`` is the relative error observed so far (its root mean square), and ``day_forecast``
    and ``observed`` are the record the live planner draws its futures' demand from.

    Args:
        state: The cluster now (its apps' ramps, penalties and GPUs now; their ``demand`` is replaced).
        day_forecast: Each app's forecast of the day, shape (apps, at least ``now + 1``), slot 0 the day's first.
        observed: Each app's demand observed in the day's slots before ``now``, shape (apps, now).
        now: The slot of the day.
        forecaster: What turns them into the forecast ahead (``forecast(F, A, now, gpus)``, :class:`Corrector`'s face).
    """
    if not state.apps:
        return replace(state, error_level=(), day_forecast=(), observed=())
    F = np.asarray(day_forecast, dtype=np.int64).reshape(len(state.apps), -1)
    seen = np.asarray(observed, dtype=np.int64).reshape(len(state.apps), -1)[:, :now]
    ahead = np.asarray(forecaster.forecast(F, seen, now, state.gpus), dtype=np.int64)[:, : state.horizon]
    if ahead.shape[1] < state.horizon:  # the horizon runs past the day's forecast: its last value holds
        last = ahead[:, -1:] if ahead.shape[1] else F[:, -1:]
        ahead = np.concatenate([ahead, np.repeat(last, state.horizon - ahead.shape[1], axis=1)], axis=1)
    apps = tuple(replace(app, demand=tuple(int(x) for x in ahead[i])) for i, app in enumerate(state.apps))
    return replace(
        state,
        apps=apps,
        error_level=tuple(float(x) for x in observed_error_level(F, seen, now)),
        day_forecast=tuple(map(tuple, F.tolist())),
        observed=tuple(map(tuple, seen.tolist())),
    )


def _job_entry(job: Job, scale: float) -> dict[str, Any]:
    """A job as a scenario entry with its worth per GPU-slot times ``scale`` as its priority."""
    return {
        "id": job.id,
        "type": job.type.value,
        "gpus": job.gpus,
        "duration": job.duration,
        "priority": job.weight * scale,
    }


@dataclass
class Decision:
    """The allocator's answer for one slot.

    Attributes:
        scenario: The state as a scenario (slot 0 = now).
        plan: The plan over the whole horizon ahead (valid for ``scenario``).
        start_now: Queued jobs to start in this slot, with their GPUs.
        app_gpus_now: GPUs for each application in this slot.
        expired: Queued jobs left out: they can no longer meet their deadline.
        waiting: Queued jobs not started now (planned later or not at all).
        why: For a live planner, why its decision departs from its base plan's: job id -> a sentence (e.g.
            ``held: over 8 futures, holding it earns 12.5 more (± 3.1) than starting it now``).
        chosen: For a live planner that weighs candidate decisions, the one it took (``holding 7``,
            ``margin -1``; empty: its base decision).
        margin: For a live planner, the forecast and margin the apps were planned at (``corrected + 1``, or the
            hedge candidate taken, ``margin -1``; empty: a plain scheduler's).
        futures: For a live planner that races its candidates, the futures the decision was made over (0: none).
    """

    scenario: Scenario
    plan: Plan
    start_now: tuple[Placement, ...]
    app_gpus_now: dict[str, int]
    expired: tuple[str, ...] = ()
    waiting: tuple[str, ...] = field(default=())
    why: dict[str, str] = field(default_factory=dict)
    chosen: str = ""
    margin: str = ""
    futures: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a cluster manager that speaks JSON."""
        return {
            "start_now": [{"job": p.job, "gpus": list(p.gpus)} for p in self.start_now],
            "realtime_now": dict(self.app_gpus_now),
            "expired": list(self.expired),
            "waiting": list(self.waiting),
            "why": dict(self.why),
            **({"margin": self.margin} if self.margin else {}),
            "plan": self.plan.to_dict(),
        }


def decide(state: ClusterState | Scenario, scheduler: str = "greedy", options: PlanOptions | None = None) -> Decision:
    """Plan from the current state and return the decisions for the current slot.

    Args:
        state: The cluster now, as a :class:`ClusterState` or directly as a
            scenario whose slot 0 is now.
        scheduler: Any name of :data:`agents.registry.SCHEDULERS`.
        options: Passed to the scheduler (time limit, seed, ...).

    Returns:
        The plan and this slot's decisions.

    Raises:
        ScenarioError: The state breaks the rules.
        UnknownSchedulerError: No scheduler has this name.
    """
    if isinstance(state, ClusterState):
        scenario, expired = state.to_scenario()
    else:
        scenario, expired = state, ()
    plan = run_scheduler(scheduler, scenario, options)
    return decision_from_plan(scenario, plan, expired)


def decision_from_plan(scenario: Scenario, plan: Plan, expired: tuple[str, ...] = ()) -> Decision:
    """This slot's decisions in a plan of a scenario whose slot 0 is now."""
    running = {job.id for job in scenario.jobs if job.running_on is not None}
    start_now = tuple(p for p in plan.placements if p.start == 0 and p.job not in running)
    started = {p.job for p in start_now}
    app_gpus_now = {app.name: int(plan.curve(app.name, scenario.slots)[0]) for app in scenario.apps}
    waiting = tuple(job.id for job in scenario.jobs if job.running_on is None and job.id not in started)
    return Decision(scenario, plan, start_now, app_gpus_now, expired, waiting)


def state_from_mapping(data: Mapping[str, Any], source: str = "<state>") -> Scenario:
    """A cluster state written in the scenario format (slot 0 = now), checked.

    This is the file form of the API: ``running_on`` marks running jobs (their
    ``duration`` is what remains), ``release`` and ``deadline`` count from now,
    each app's ``initial`` is its current allocation and ``demand`` its forecast.
    """
    return scenario_from_dict(dict(data), source)
