"""The live planner: plan for the jobs that have not arrived yet and for the ones that will end early.

An online anticipatory algorithm in the sense of Bent and Van Hentenryck ("The value of consensus",
ICAPS 2004; "Online Stochastic Combinatorial Optimization", 2006). At every cycle:

1. The state now (slot 0 = now) is planned as it is by the base planner (greedy by default): its
   slot-0 starts are the candidate decision, exactly today's rolling decision.
2. ``samples`` possible futures are drawn: the known state plus the arrivals of the rest of the day
   drawn from the cluster's history (:class:`agents.rolling.history.ArrivalModel`), and, when a runtime
   distribution is given, each running job's remaining runtime drawn given how long it has run and each
   queued job's runtime drawn below its limit (:mod:`agents.rolling.runtimes`). Each future is planned by
   the same base planner, which sees that future whole.
3. **Consensus**: a job of the candidate decision starts now only if it also starts now in at least
   ``threshold`` of the futures; the others wait for the next cycle. A future in which valuable work
   arrives in an hour keeps its GPUs free for it, and enough such futures hold a long cheap job back.

Before the consensus the plan's real-time curves are raised into the GPUs its jobs leave idle
(:func:`fill_idle`): an idle GPU serving an app costs nothing, and live demand comes above the forecast.

Holding a job back only frees GPUs, so the decision is always feasible and its plan (the base plan
without the held jobs) passes the validator. Without a history and with exact runtimes there is nothing
to sample and the planner is the base planner rolled, its curves raised into idle GPUs. Every draw is seeded from the
planner's seed and the slot, so the same day gives the same decisions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from agents.options import PlanOptions
from agents.registry import run_scheduler
from agents.rolling.allocator import ClusterState, Decision, decision_from_plan
from agents.rolling.forecast import Corrector
from agents.rolling.history import ArrivalModel, HistoryForecaster, history_error_level, stable_seed
from gpu_env.plan import Plan
from gpu_env.scenario import Job, Scenario

DEFAULT_SAMPLES = 8
"""Futures per cycle as shipped (docs/rolling.md: measured against 4 and 16)."""
DEFAULT_LOOKAHEAD = 8
"""Slots ahead in which arrivals are sampled: what arrives later barely changes what to start now, and the
futures stay small enough for a cycle within a second at 1,024 GPUs (docs/rolling.md)."""
LARGE_CLUSTER = 128
"""From this many GPUs the live planner's base is ppo (2-4x faster than greedy there; docs/learned-mode.md)
and it samples half the futures."""
DEFAULT_FILL_Z = 5.0
"""An app is raised into idle GPUs up to its forecast plus this many relative error SDs (docs/rolling.md:
measured against 2, 3 and no ceiling)."""
FILL_PRIOR = 0.2
"""The error level assumed for the ceiling before the day shows its own, counted as :data:`FILL_PRIOR_WEIGHT`
observed slots: with an exact forecast the ceiling falls back to the plan within a few hours."""
FILL_PRIOR_WEIGHT = 4.0
DEFAULT_THRESHOLD = 0.5
"""Share of the futures in which a job must start now for it to start now."""
FUTURE_PREFIX = "~future"
LIVE_FORECAST = Corrector()
"""The live planner's demand forecast: the day's forecast corrected as rolling does (:class:`Corrector`'s
defaults); with a history, the prior error level is the past curves' spread (docs/rolling.md: measured
against a 1.5-SD margin, the forecaster fitted from the history, and the larger of the two)."""
LIVE_PLANNERS = ("anticipate", "anticipate-ppo")
"""The live planners by name: consensus over sampled futures with greedy, or with ppo, as the base planner."""


@dataclass(frozen=True)
class AnticipatingPlanner:
    """The default live planner: consensus over sampled futures (module docstring).

    Attributes:
        base: The scheduler that plans the state and every future (any name of ``agents.registry``).
        arrivals: The history's arrival model (None: no arrivals are sampled).
        runtimes: The distribution of runtime / limit (an object with ``sample_remaining(limit,
            elapsed, rng)`` and ``runtime_slots(limit, u)``, :mod:`agents.rolling.runtimes`; None, as
            shipped: jobs run to their limit in every future, which measured better, docs/rolling.md).
        samples: Futures per cycle.
        threshold: Share of the futures in which a candidate start must also start now.
        seed: Seed of every draw.
        name: How the planner is reported.
        forecaster: The demand forecast the rolling loop gives it (:data:`LIVE_FORECAST`, or one fitted
            from the history, :class:`agents.rolling.history.HistoryForecaster`).
        lookahead: Slots ahead in which arrivals are sampled.
        fill: Give the GPUs the plan leaves idle to the real-time apps (:func:`fill_idle`).
        fill_z: ... up to the forecast plus this many observed relative error SDs (:func:`fill_ceiling`).
    """

    base: str = "greedy"
    arrivals: ArrivalModel | None = None
    runtimes: object | None = None
    samples: int = DEFAULT_SAMPLES
    threshold: float = DEFAULT_THRESHOLD
    seed: int = 0
    name: str = "anticipate"
    forecaster: Corrector | HistoryForecaster = LIVE_FORECAST
    lookahead: int = DEFAULT_LOOKAHEAD
    fill: bool = True
    fill_z: float = DEFAULT_FILL_Z

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"samples: expected an integer >= 1, got {self.samples}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold: expected a number in (0, 1], got {self.threshold}")

    @property
    def anticipates(self) -> bool:
        """Whether there is anything to sample."""
        return self.arrivals is not None or self.runtimes is not None

    def decide(
        self,
        state: ClusterState,
        now: int,
        elapsed: Mapping[str, int] | None = None,
        options: PlanOptions | None = None,
    ) -> Decision:
        """This slot's decisions for the cluster state at slot ``now`` of the day.

        Args:
            state: The cluster now.
            now: The slot of the day that is the state's slot 0 (where the arrival model is read).
            elapsed: Slots each running job has run so far (job id -> slots; missing: 0).
            options: Passed to the base planner.
        """
        scenario, expired = state.to_scenario()
        plan = run_scheduler(self.base, scenario, options)
        if self.fill:
            plan = fill_idle(scenario, plan, fill_ceiling(scenario, state.error_level, self.fill_z, now))
        decision = decision_from_plan(scenario, plan, expired)
        if not self.anticipates or not decision.start_now:
            return decision
        votes = dict.fromkeys((p.job for p in decision.start_now), 0)
        running = {j.id for j in scenario.jobs if j.running_on is not None}
        for k in range(self.samples):
            rng = np.random.default_rng(stable_seed(self.seed, now, k))
            future = self._future(scenario, now, elapsed or {}, rng)
            starts = {p.job for p in run_scheduler(self.base, future, options).placements if p.start == 0}
            for job in votes:
                votes[job] += job in starts and job not in running
        held = {job for job, n in votes.items() if n < self.threshold * self.samples}
        if not held:
            return decision
        kept = Plan(
            plan.scenario,
            plan.scheduler,
            [p for p in plan.placements if p.job not in held],
            dict(plan.curves),
        )
        kept.solve_ms = plan.solve_ms
        return decision_from_plan(scenario, kept, expired)

    def _future(self, scenario: Scenario, now: int, elapsed: Mapping[str, int], rng: np.random.Generator) -> Scenario:
        """One possible future of the state: sampled runtimes for the known jobs, sampled arrivals after them."""
        jobs: list[Job] = []
        for job in scenario.jobs:
            if self.runtimes is not None:
                if job.running_on is not None:
                    ran = int(elapsed.get(job.id, 0))
                    left = int(self.runtimes.sample_remaining(ran + job.duration, ran, rng))  # type: ignore[attr-defined]
                    job = replace(job, duration=max(1, min(job.duration, left)))
                else:
                    u = float(rng.random())
                    job = replace(job, duration=int(self.runtimes.runtime_slots(job.duration, u)))  # type: ignore[attr-defined]
            jobs.append(job)
        if self.arrivals is not None:
            jobs.extend(
                self.arrivals.sample(rng, now, scenario.gpus, scenario.node_size, scenario.slots, prefix=FUTURE_PREFIX)
            )
        return replace(scenario, jobs=tuple(jobs))


def live_planner(
    name: str = "anticipate",
    *,
    history: Sequence[Scenario] = (),
    day: Scenario | None = None,
    runtimes: object | None = None,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    forecast: str = "corrector",
) -> AnticipatingPlanner:
    """A live planner by name, fitted from past days of the cluster.

    Args:
        name: One of :data:`LIVE_PLANNERS`. ``anticipate`` plans with greedy below :data:`LARGE_CLUSTER`
            GPUs and with ppo (and half the samples) from there on.
        history: Past days (their arrivals fit the arrival model; none: nothing is sampled for arrivals).
        day: The day being played (its apps name the curves ``forecast="history"`` fits; nothing else is read).
        runtimes: The runtime / limit distribution the planner assumes (None: jobs run to their limit).
        samples: Futures per cycle.
        seed: Seed of every draw.
        forecast: ``corrector`` (:data:`LIVE_FORECAST` on the day's forecast; with a history, its prior
            error level is :func:`agents.rolling.history.history_error_level`) or ``history`` (each app's
            curve fitted from its past days, :class:`HistoryForecaster`; needs ``history`` and ``day``).

    Raises:
        ValueError: An unknown name or forecast, or ``forecast="history"`` without a history.
    """
    if name not in LIVE_PLANNERS:
        raise ValueError(f"unknown live planner {name!r} (expected one of: {', '.join(LIVE_PLANNERS)})")
    large = day is not None and day.gpus >= LARGE_CLUSTER
    base = "ppo" if name == "anticipate-ppo" or large else "greedy"
    if large:
        samples = max(1, samples // 2)
    arrivals = ArrivalModel.fit(history) if history else None
    if forecast == "corrector":
        forecaster: Corrector | HistoryForecaster = LIVE_FORECAST
        if history and day is not None:
            forecaster = replace(LIVE_FORECAST, prior_sigma=history_error_level(history, day))
    elif forecast == "history":
        if not history or day is None:
            raise ValueError("forecast 'history' needs past days (--history)")
        forecaster = HistoryForecaster.fit(history, day)
    else:
        raise ValueError(f"unknown forecast {forecast!r} (expected corrector or history)")
    return AnticipatingPlanner(base, arrivals, runtimes, samples, DEFAULT_THRESHOLD, seed, name, forecaster)


def fill_ceiling(scenario: Scenario, error_level: Sequence[float], z: float, observed: int) -> np.ndarray | None:
    """How far :func:`fill_idle` may raise each app: ``ceil(demand * (1 + z * level))`` per slot.

    ``level`` mixes each app's relative forecast error observed over ``observed`` slots
    (:attr:`ClusterState.error_level`) with :data:`FILL_PRIOR` counted as :data:`FILL_PRIOR_WEIGHT`
    slots, as :class:`agents.rolling.Corrector`'s prior does. With an exact forecast the level falls
    towards 0 and little is raised above the plan: GPUs held by an app are shed only by its ramp and
    would keep the next jobs waiting. No error level given, or ``z`` infinite: no ceiling (``None``).
    """
    if not error_level or not math.isfinite(z):
        return None
    err = np.asarray(error_level, dtype=np.float64).reshape(-1, 1)
    level = np.sqrt((FILL_PRIOR_WEIGHT * FILL_PRIOR**2 + observed * err**2) / (FILL_PRIOR_WEIGHT + observed))
    return np.ceil(scenario.demand * (1.0 + z * level) - 1e-9).astype(np.int64)


def fill_idle(scenario: Scenario, plan: Plan, cap: np.ndarray | None = None) -> Plan:
    """The plan with each app's curve raised into the GPUs its jobs leave idle, the rules kept.

    An idle GPU given to a real-time app costs nothing in the slot it is given, and a live app's demand
    may come above its forecast: serving it from GPUs no job uses avoids the penalty. Apps are raised in
    :func:`gpu_env.objective.serving_order` (highest penalty first), each to the largest curve that fits
    in the capacity the plan's jobs and the other apps leave in every slot and that keeps its ramp from
    ``initial`` and between slots: a backward pass (``u[s] <= u[s+1] + R``, so that the plan's later
    slots can still be reached) and a forward pass (``u[s] <= u[s-1] + R``, ``u[0] <= initial + R``). The
    plan's own curve satisfies both, so the raised curve is never below it, and the plan stays valid.

    Args:
        scenario: The state as a scenario (slot 0 = now).
        plan: A valid plan of it.
        cap: Optional (apps, T) ceiling per app and slot (never below the plan's curve where given).
    """
    from gpu_env.objective import serving_order

    T, G = scenario.slots, scenario.gpus
    used = np.zeros(T, dtype=np.int64)
    for p in plan.placements:
        job = scenario.jobs[scenario.job_index(p.job)]
        used[p.start : min(T, p.start + job.duration)] += job.gpus
    curves = {app.name: plan.curve(app.name, T).copy() for app in scenario.apps}
    for i in serving_order(scenario.apps):
        app = scenario.apps[int(i)]
        others = sum((c for name, c in curves.items() if name != app.name), np.zeros(T, dtype=np.int64))
        u = G - used - others
        if cap is not None:
            u = np.minimum(u, np.maximum(cap[int(i)], curves[app.name]))
        for s in range(T - 2, -1, -1):
            u[s] = min(u[s], u[s + 1] + app.ramp)
        for s in range(T):
            u[s] = min(u[s], (app.initial if s == 0 else u[s - 1]) + app.ramp)
        curves[app.name] = np.maximum(u, curves[app.name])
    lists = {name: [int(x) for x in curve] for name, curve in curves.items()}
    raised = Plan(plan.scenario, plan.scheduler, list(plan.placements), lists)
    raised.solve_ms = plan.solve_ms
    return raised
