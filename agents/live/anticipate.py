"""The live planner: decisions chosen by their value over sampled futures of the day.

An online anticipatory algorithm in the sense of Bent and Van Hentenryck (*Online Stochastic Combinatorial
Optimization*, 2006). At every cycle:

1. The state now (slot 0 = now) is planned as it is by the base planner (greedy by default), its real-time
   curves raised into the GPUs its jobs leave idle (:func:`agents.live.fill.fill_idle`): its slot-0
   starts are the **base decision**, exactly what rolling greedy (with the fill) would do.
2. ``samples`` possible futures are drawn: the known state plus the arrivals drawn from the cluster's history
   (:class:`agents.live.history.ArrivalModel`), each app's demand path drawn around the forecast by the
   error model (:class:`agents.live.error_model.ErrorModel`: a past day's recorded error path, conditioned on
   today's), and, when a runtime distribution is
   given, the jobs' runtimes (:mod:`agents.live.runtimes`).
3. The rule (``rule``) turns the futures into this slot's decision:

   - ``expectation`` (the default): a few candidate decisions (:meth:`AnticipatingPlanner.candidates`:
     the base decision; the same without the fill; the base decision with each of its jobs held; all of
     them held; the starts of plans made with the apps planned at the point forecast moved by each of
     ``margins`` error levels, below it as well as above (:func:`agents.live.hedge.hedged_demand`); the
     starts that the plans of ``future_plans`` sampled futures make, holds for the arrivals the history
     brings among them) are each committed in slot 0 of every future (its jobs started, each app's GPUs
     now), and the rest of each future is planned on by the base planner (:func:`commit_slot`). The
     candidates are raced over the same futures (common random numbers, :func:`agents.live.race.race`):
     ``samples`` futures first, more (up to ``most_samples``) while a challenger is close, the clearly
     worse dropped. A candidate replaces the base decision only if its paired gain over the base decision
     clears ``confidence`` standard errors and ``min_gain`` of the base decision's value: where the model
     says little, or says it unsure, the base decision stands.
   - ``consensus``: a job of the base decision starts now only if it also starts now in at least
     ``threshold`` of the futures, each planned whole (the vote, kept for comparison).

Holding a job back only frees GPUs, and every other candidate is a valid plan of the state, so every
decision passes the validator. Without anything to sample (no history, exact runtimes, no demand error
observed) the planner is its base planner rolled, its curves raised into idle GPUs. Every draw is seeded
from the planner's seed and the slot, so the same day gives the same decisions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any, ClassVar

import numpy as np

from agents.live.allocator import ClusterState, Decision, decision_from_plan
from agents.live.error_model import ErrorModel, QuantileForecast
from agents.live.fill import fill_ceiling, fill_idle
from agents.live.forecast import ERROR_RHO, Corrector, with_demand
from agents.live.hedge import (
    ChosenForecast,
    HedgedForecaster,
    choose_forecast,
    forecast_by_record,
    hedged_demand,
    newsvendor_ratio,
    work_worth,
)
from agents.live.history import ArrivalModel, HistoryForecaster, stable_seed
from agents.live.race import RaceResult, choose, race
from agents.live.runtimes import RuntimeSampler
from agents.options import PlanOptions
from agents.registry import run_scheduler
from gpu_env.objective import shortfall_penalty
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import Job, Scenario
from gpu_env.validation import validate

__all__ = [
    "DEFAULT_SAMPLES",
    "LARGE_CLUSTER",
    "LIVE_PLANNERS",
    "RULES",
    "AnticipatingPlanner",
    "Candidate",
    "choose",
    "fill_ceiling",
    "fill_idle",
    "live_planner",
]

DEFAULT_SAMPLES = 8
"""Futures per cycle as shipped."""
LARGE_CLUSTER = 128
"""From this many GPUs the live planner's base is ppo (2-4x faster than greedy there; docs/learned-mode.md),
it samples half the futures, races them to twice that at most, weighs two hedges and one future's plan."""
DEFAULT_FILL_Z = 5.0
"""An app is raised into idle GPUs up to its forecast plus this many relative error SDs (docs/rolling.md)."""
DEFAULT_THRESHOLD = 0.5
"""Consensus: share of the futures in which a job must start now for it to start now."""
DEFAULT_CONFIDENCE = 2.0
"""Expectation: standard errors of the paired gain a candidate must clear to replace the base decision
(docs/rolling.md: measured against 1 and 3)."""
DEFAULT_MIN_GAIN = 0.002
"""Expectation: ... and this share of the base decision's mean value over the futures."""
DEFAULT_MARGINS = (-1.0, 0.0, 1.0, 2.0)
"""Expectation: the hedge both ways: error levels around the point forecast whose plans' starts are candidates
(-1: about the 16th percentile of the demand paths; docs/rolling.md)."""
LARGE_MARGINS = (-1.0, 1.0)
"""Expectation, from :data:`LARGE_CLUSTER` GPUs: the hedges weighed (below and above the point forecast)."""
DEFAULT_MOST_SAMPLES = 16
"""Expectation: futures a close race may spend (the first ``samples`` for every candidate)."""
DEFAULT_FUTURE_PLANS = 2
"""Expectation: sampled futures planned whole whose slot-0 starts are candidates (holds for the arrivals)."""
MAX_HOLDS = 6
"""Expectation: at most this many single-job holds are candidates (the largest jobs in GPU-slots first)."""
RULES = ("expectation", "consensus")
FUTURE_PREFIX = "~future"
LIVE_FORECAST = Corrector()
"""The live planner's demand forecast: the day's forecast corrected as rolling does (:class:`Corrector`'s
defaults, no prior), so that its base decision is rolling greedy's; the uncertainty the history shows is
drawn into the futures (:class:`ErrorModel`) and hedged by the expectation rule (docs/rolling.md)."""
LIVE_PLANNERS = ("anticipate", "anticipate-ppo", "anticipate-consensus")
"""The live planners by name: expectation over sampled futures with greedy, or with ppo, as the base planner;
the consensus vote with greedy. (The learned chooser of :mod:`lab.live_chooser` is not offered: it loses
to ``anticipate`` on days it never saw, docs/learned-mode.md.)"""


@dataclass(frozen=True)
class Candidate:
    """One decision for this slot: the plan of the state it comes from (its slot 0 is the decision).

    Attributes:
        label: What it is (``the base plan``, ``holding j``, ``holding all``, ``margin -1``, ``the plan of future 0``,
            ``the fill``).
        plan: A valid plan of the state.
        starts: Its slot-0 starts of queued jobs.
        app_gpus: GPUs each app gets now, in the state's app order.
    """

    label: str
    plan: Plan
    starts: tuple[Placement, ...]
    app_gpus: tuple[int, ...]

    @classmethod
    def of(cls, label: str, scenario: Scenario, plan: Plan) -> Candidate:
        """The decision a plan of the state makes now."""
        running = {j.id for j in scenario.jobs if j.running_on is not None}
        starts = tuple(p for p in plan.placements if p.start == 0 and p.job not in running)
        gpus = tuple(int(plan.curve(app.name, scenario.slots)[0]) for app in scenario.apps)
        return cls(label, plan, starts, gpus)

    @property
    def key(self) -> tuple[frozenset[tuple[str, tuple[int, ...]]], tuple[int, ...]]:
        """The decision itself: which jobs start now on which GPUs, and each app's GPUs now."""
        return frozenset((p.job, tuple(p.gpus)) for p in self.starts), self.app_gpus


@dataclass
class Weighing:
    """One cycle of the expectation rule: the candidates and what the sampled futures said of them.

    Attributes:
        scenario: The state as a scenario.
        expired: Jobs whose deadline passed (as :meth:`ClusterState.to_scenario` gives them).
        base: The base decision (greedy with the fill, as shipped).
        candidates: The decisions weighed, the base decision first (empty: nothing was sampled).
        race: What the race over the futures decided (None: one candidate or none, no race).
    """

    scenario: Scenario
    expired: tuple[str, ...]
    base: Decision
    candidates: list[Candidate]
    race: RaceResult | None

    @property
    def pick(self) -> int:
        """The race's pick: the candidate the expectation rule commits (0: the base decision)."""
        return 0 if self.race is None else self.race.best

    def gain(self, pick: int) -> tuple[float, float, int]:
        """A candidate's mean paired gain over the base decision, its standard error, and the futures compared.

        The race's own figures for its pick; for another candidate, over the futures both were scored in.
        """
        if self.race is None or pick == 0:
            return 0.0, 0.0, 0 if self.race is None else self.race.futures
        if pick == self.race.best:
            return self.race.gain, self.race.se, self.race.futures
        values = self.race.values
        both = ~np.isnan(values[pick]) & ~np.isnan(values[0])
        diff = values[pick, both] - values[0, both]
        n = int(diff.size)
        se = float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
        return (float(diff.mean()) if n else 0.0), se, n

    def decision(self, pick: int | None = None) -> Decision:
        """The decision of candidate ``pick`` (None: the race's pick), with the why of a departure."""
        pick = self.pick if pick is None else pick
        decision = self.base
        if self.race is not None:
            decision.futures = self.race.futures
        if pick == 0:
            return decision
        chosen = self.candidates[pick]
        gain, se, futures = self.gain(pick)
        out = decision_from_plan(self.scenario, chosen.plan, self.expired)
        out.chosen = chosen.label
        out.futures = futures
        out.margin = chosen.label if chosen.label.startswith("margin ") else decision.margin
        base_jobs = {p.job for p in decision.start_now}
        new_jobs = {p.job for p in chosen.starts}
        note = f"over {futures} futures, {chosen.label} earns {gain:.4g} more (± {se:.2g}) than the base plan"
        out.why = {job: f"held: {note}" for job in sorted(base_jobs - new_jobs)}
        out.why.update({job: f"started: {note}" for job in sorted(new_jobs - base_jobs)})
        apps = zip(self.scenario.apps, self.candidates[0].app_gpus, chosen.app_gpus, strict=True)
        for app, before, after in apps:
            if before != after:
                out.why[app.name] = f"{after} GPUs now instead of {before}: {note}"
        return out


@dataclass(frozen=True)
class AnticipatingPlanner:
    """The default live planner (module docstring).

    Attributes:
        base: The scheduler that plans the state and every future (any name of ``agents.registry``).
        arrivals: The history's arrival model (None: no arrivals are sampled).
        runtimes: The distribution of runtime / limit the futures draw from (None, as shipped: jobs run to
            their limit in every future).
        samples: Futures per cycle.
        threshold: Consensus: share of the futures in which a candidate start must also start now.
        seed: Seed of every draw.
        name: How the planner is reported.
        forecaster: The demand forecast the rolling loop gives it (:data:`LIVE_FORECAST`, or one fitted
            from the history, :class:`agents.live.history.HistoryForecaster`).
        rule: ``expectation`` or ``consensus`` (module docstring).
        errors: The demand error model (:class:`ErrorModel`): the futures' demand paths, the hedges and the fill's
            ceiling (None: every future has the state's forecast).
        margins: Expectation: error levels around the point forecast whose plans' starts are candidates.
        most_samples: Expectation: futures a close race may spend (``samples``: a fixed number, the old rule).
        future_plans: Expectation: sampled futures (drawn apart from the scoring futures) planned whole whose
            slot-0 starts are candidates.
    """

    base: str = "greedy"
    arrivals: ArrivalModel | None = None
    runtimes: RuntimeSampler | None = None
    samples: int = DEFAULT_SAMPLES
    threshold: float = DEFAULT_THRESHOLD
    seed: int = 0
    name: str = "anticipate"
    forecaster: Corrector | HistoryForecaster | HedgedForecaster | ChosenForecast = LIVE_FORECAST
    rule: str = "expectation"
    errors: ErrorModel | None = None
    margins: tuple[float, ...] = field(default=DEFAULT_MARGINS)
    most_samples: int = DEFAULT_MOST_SAMPLES
    future_plans: int = DEFAULT_FUTURE_PLANS

    # The rule's fixed settings: no site sets them. The ablations of docs/rolling.md vary them, each a variant of
    # the laboratory's table (lab/variants.py, whose planner has them as fields and documents each).
    lookahead: ClassVar[int | None] = None
    fill: ClassVar[bool] = True
    fill_z: ClassVar[float] = DEFAULT_FILL_Z
    confidence: ClassVar[float] = DEFAULT_CONFIDENCE
    min_gain: ClassVar[float] = DEFAULT_MIN_GAIN
    rollout: ClassVar[str] = "base"
    corrected: ClassVar[bool] = True
    fill_within_ramp: ClassVar[bool] = False
    base_fill: ClassVar[bool] = True
    min_share: ClassVar[float] = 0.0
    newsvendor: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"samples: expected an integer >= 1, got {self.samples}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold: expected a number in (0, 1], got {self.threshold}")
        if self.rule not in RULES:
            raise ValueError(f"rule: expected one of {', '.join(RULES)}, got {self.rule!r}")
        if self.future_plans < 0:
            raise ValueError(f"future_plans: expected an integer >= 0, got {self.future_plans}")

    @property
    def anticipates(self) -> bool:
        """Whether there is anything to sample, before the day has shown any demand error."""
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
            state: The cluster now (its ``day_forecast`` and ``observed`` feed the demand model).
            now: The slot of the day that is the state's slot 0 (where the arrival model is read).
            elapsed: Slots each running job has run so far (job id -> slots; missing: 0).
            options: Passed to the base planner.
        """
        if self.rule == "expectation":
            return self.weigh(state, now, elapsed, options).decision()
        scenario, expired = state.to_scenario()
        plain = run_scheduler(self.base, scenario, options)
        plan = self._filled(scenario, plain, state, now) if self.base_fill else plain
        decision = decision_from_plan(scenario, plan, expired)
        decision.margin = self.margin_label
        demand = self._demand_inputs(state, now, scenario)
        if (not self.anticipates and demand is None) or not decision.start_now:
            return decision
        futures = [self._future(scenario, now, elapsed or {}, demand, k) for k in range(self.samples)]
        return self._consensus(scenario, plan, decision, futures, expired, options)

    def weigh(
        self,
        state: ClusterState,
        now: int,
        elapsed: Mapping[str, int] | None = None,
        options: PlanOptions | None = None,
    ) -> Weighing:
        """The expectation rule's candidates for the state, raced over the sampled futures (:func:`race`).

        What :meth:`decide` commits is :meth:`Weighing.decision` of the race's pick; a chooser may commit
        another candidate of the same weighing (:mod:`lab.live_chooser`).

        Args:
            state: The cluster now.
            now: The slot of the day.
            elapsed: Slots each running job has run so far.
            options: Passed to the base planner.
        """
        scenario, expired = state.to_scenario()
        plain = run_scheduler(self.base, scenario, options)
        filled = self._filled(scenario, plain, state, now)
        decision = decision_from_plan(scenario, filled if self.base_fill else plain, expired)
        decision.margin = self.margin_label
        demand = self._demand_inputs(state, now, scenario)
        if not self.anticipates and demand is None:
            return Weighing(scenario, expired, decision, [], None)
        candidates = self.candidates(scenario, state, now, plain, filled, demand, options, elapsed or {})
        if len(candidates) == 1:
            return Weighing(scenario, expired, decision, candidates, None)
        futures: list[Scenario] = []

        def value(c: int, k: int) -> float:
            while len(futures) <= k:
                futures.append(self._future(scenario, now, elapsed or {}, demand, len(futures)))
            return self.value(futures[k], candidates[c], options)

        result = race(
            value,
            len(candidates),
            first=self.samples,
            most=max(self.samples, self.most_samples),
            confidence=self.confidence,
            min_gain=self.min_gain,
            min_share=self.min_share,
            corrected=self.corrected,
        )
        return Weighing(scenario, expired, decision, candidates, result)

    # ------------------------------------------------------------------------- the two rules

    def _consensus(
        self,
        scenario: Scenario,
        plan: Plan,
        decision: Decision,
        futures: Sequence[Scenario],
        expired: tuple[str, ...],
        options: PlanOptions | None,
    ) -> Decision:
        votes = dict.fromkeys((p.job for p in decision.start_now), 0)
        for future in futures:
            starts = {p.job for p in run_scheduler(self.base, future, options).placements if p.start == 0}
            for job in votes:
                votes[job] += job in starts
        held = {job for job, n in votes.items() if n < self.threshold * len(futures)}
        if not held:
            return decision
        kept = decision_from_plan(scenario, _without(plan, held), expired)
        kept.why = {
            job: f"held: in the futures, {len(futures) - votes[job]} of {len(futures)} do not start it now"
            for job in sorted(held)
        }
        return kept

    @property
    def margin_label(self) -> str:
        """The margin the base decision plans the apps at, as traces show it (``corrected + 1``)."""
        f = self.forecaster
        if isinstance(f, HedgedForecaster | ChosenForecast | QuantileForecast):
            return f.label
        if isinstance(f, Corrector):
            if f.errors is not None and f.margin:
                return f"corrected + {f.margin:g} (error model)"
            return f"corrected + {f.margin:g}" + (" (raw)" if f.spread == "raw" and f.margin else "")
        return type(f).__name__

    def candidates(
        self,
        scenario: Scenario,
        state: ClusterState,
        now: int,
        plain: Plan,
        filled: Plan,
        demand: tuple[np.ndarray, np.ndarray, int] | None,
        options: PlanOptions | None,
        elapsed: Mapping[str, int] | None = None,
    ) -> list[Candidate]:
        """The decisions the expectation rule weighs, the base decision first, each decision once.

        Args:
            scenario: The state as a scenario.
            state: The state (its error level sets the hedges' spread without the day's record).
            now: The slot of the day.
            plain: The base planner's plan of the state.
            filled: The same with its curves raised into idle GPUs (:func:`fill_idle`; ``plain`` without the fill).
            demand: What the demand model reads (:meth:`_demand_inputs`; None: the state's error level sets
                the hedges' spread).
            options: Passed to the base planner.
            elapsed: Slots each running job has run (the futures planned whole draw runtimes from it).
        """
        base, other = (filled, plain) if self.base_fill else (plain, filled)
        out = [Candidate.of("the base plan", scenario, base), Candidate.of("the plan as made", scenario, other)]
        if self.fill and not self.base_fill:
            out[1] = replace(out[1], label="the fill")
        starts = out[0].starts
        size = {j.id: j.gpus * j.duration for j in scenario.jobs}
        for p in sorted(starts, key=lambda p: -size[p.job])[:MAX_HOLDS]:
            held = self._filled(scenario, _without(plain, {p.job}), state, now)
            out.append(Candidate.of(f"holding {p.job}", scenario, held))
        if len(starts) > 1:
            held = self._filled(scenario, _without(plain, {p.job for p in starts}), state, now)
            out.append(Candidate.of("holding all", scenario, held))
        for label, hedged in self.hedges(scenario, state, demand):
            alt = run_scheduler(self.base, with_demand(scenario, hedged, scenario.name), options)
            alt = Plan(plain.scenario, alt.scheduler, list(alt.placements), dict(alt.curves))
            out.append(Candidate.of(label, scenario, self._filled(scenario, alt, state, now)))
        if self.arrivals is not None:
            for k in range(self.future_plans):
                alt = self._future_plan(scenario, now, elapsed or {}, demand, k, options)
                if alt is not None:
                    out.append(
                        Candidate.of(f"the plan of future {k}", scenario, self._filled(scenario, alt, state, now))
                    )
        unique: dict[Any, Candidate] = {}
        for c in out:
            unique.setdefault(c.key, c)
        return list(unique.values())

    def value(self, future: Scenario, candidate: Candidate, options: PlanOptions | None) -> float:
        """The objective of a future with a candidate committed in slot 0, the rest planned on by the base planner.

        Slot 0 earns what the candidate's jobs and the jobs running earn in it, less the penalty of the
        apps' GPUs now against the future's demand now (:func:`commit_slot`); from slot 1 on, the base
        planner plans the rest of the future with the candidate's jobs running, the apps starting from
        their GPUs now, and every other job known now starting at slot 1 at the earliest.
        """
        now_value, rest = commit_slot(future, candidate.starts, candidate.app_gpus)
        if rest is None:
            return now_value
        return now_value + self._rest_value(rest, options)

    def _rest_value(self, rest: Scenario, options: PlanOptions | None) -> float:
        """The objective the rollout planner earns on the rest of a future (greedy's own count: no metrics pass)."""
        if self.rollout == "fast" or (self.rollout == "base" and self.base == "greedy"):
            from agents import greedy

            return float(greedy.solve(rest, greedy.FAST if self.rollout == "fast" else greedy.DEFAULT).objective)
        return float(run_scheduler(self.base, rest, options).metrics.objective)

    def hedges(
        self, scenario: Scenario, state: ClusterState, demand: tuple[np.ndarray, np.ndarray, int] | None
    ) -> list[tuple[str, np.ndarray]]:
        """The apps' demand planned at each of :attr:`margins` and at the newsvendor quantile, labelled.

        With the day's record (``demand``) the plans are quantiles of the error model's conditioned paths
        (:meth:`ErrorModel.quantile`): margin ``z`` is the quantile ``Phi(z)`` at every lead (``z = -1``: about the
        16th percentile), and ``newsvendor`` each app's quantile ``penalty / (penalty + worth)``, the worth being
        the mean worth per GPU-slot of the jobs known now (:attr:`newsvendor`). Without it (a state from a cluster
        manager with no day clock) the state's own forecast moved by ``z`` of its error level stands in
        (:func:`agents.live.hedge.hedged_demand`). Nothing to hedge (no app, no error): none.
        """
        if not scenario.apps or not (self.margins or self.newsvendor):
            return []
        G = scenario.gpus
        if demand is not None and self.errors is not None and demand[0].shape[1] == demand[2] + scenario.slots:
            F, seen, now = demand
            out = [
                (f"margin {z:g}", self.errors.quantile(NormalDist().cdf(z), F, seen, now, gpus=G)) for z in self.margins
            ]
            if self.newsvendor:
                q = np.array([newsvendor_ratio(app.penalty, _known_worth(scenario)) for app in scenario.apps])
                out.append((f"margin q{float(np.mean(q)):.2f}", self.errors.quantile(q, F, seen, now, gpus=G)))
            return out
        level = np.asarray(state.error_level or (0.0,) * len(scenario.apps), dtype=np.float64)
        if not np.any(level > 0):
            return []
        rho = np.full(len(scenario.apps), ERROR_RHO)
        point = scenario.demand.astype(np.float64)
        return [(f"margin {z:g}", hedged_demand(point, level, rho, z, G)) for z in self.margins]

    def _future_plan(
        self,
        scenario: Scenario,
        now: int,
        elapsed: Mapping[str, int],
        demand: tuple[np.ndarray, np.ndarray, int] | None,
        k: int,
        options: PlanOptions | None,
    ) -> Plan | None:
        """A plan of the state that makes the slot-0 starts the base planner makes in a sampled future planned whole.

        The future is drawn apart from the scoring futures (its own seed stream). Its plan's slot-0 starts
        of queued jobs are pinned in the state, and the rest of the state is planned around them: a valid
        plan of the state (None where the future's plan starts what the state cannot).
        """
        future = self._future(scenario, now, elapsed, demand, k, stream="plans")
        whole = run_scheduler(self.base, future, options)
        queued = {j.id: j for j in scenario.jobs if j.running_on is None}
        starts = {p.job: tuple(p.gpus) for p in whole.placements if p.start == 0 and p.job in queued}
        pinned = tuple(replace(j, running_on=starts[j.id]) if j.id in starts else j for j in scenario.jobs)
        try:
            rest = run_scheduler(self.base, replace(scenario, jobs=pinned), options)
        except ValueError:
            return None
        placements = [Placement(job, 0, gpus) for job, gpus in starts.items()]
        placements += [p for p in rest.placements if p.job not in starts]
        plan = Plan(scenario.name, rest.scheduler, placements, dict(rest.curves))
        return None if validate(scenario, plan) else plan

    # ------------------------------------------------------------------------- futures

    def _filled(self, scenario: Scenario, plan: Plan, state: ClusterState, now: int) -> Plan:
        if not self.fill:
            return plan
        record = self._record(state, now, scenario)
        if record is not None and self.errors is not None:
            cap = fill_ceiling(scenario, tuple(self.errors.level(*record)), self.fill_z, now, mixed=True)
        else:
            cap = fill_ceiling(scenario, state.error_level, self.fill_z, now)
        if self.fill_within_ramp and scenario.apps:
            T = scenario.slots
            step = np.array([[app.ramp] for app in scenario.apps])
            within = np.array([plan.curve(app.name, T) for app in scenario.apps]) + step
            cap = within if cap is None else np.minimum(cap, within)
        return fill_idle(scenario, plan, cap)

    def _record(self, state: ClusterState, now: int, scenario: Scenario) -> tuple[np.ndarray, np.ndarray, int] | None:
        """The day's forecast, the demand observed before ``now`` and ``now``, from the state's record of the day.

        None where the state carries no record of the day (a cluster manager with no day clock) or one of
        another shape.
        """
        if not scenario.apps or not state.day_forecast:
            return None
        F = np.asarray(state.day_forecast, dtype=np.int64)
        seen = np.asarray(state.observed, dtype=np.int64).reshape(F.shape[0], -1)[:, :now]
        if F.shape[1] != now + scenario.slots or seen.shape[1] != now:
            return None
        return F, seen, now

    def _demand_inputs(
        self, state: ClusterState, now: int, scenario: Scenario
    ) -> tuple[np.ndarray, np.ndarray, int] | None:
        """The day's forecast, the demand observed and the slot the demand model reads; None: nothing to draw."""
        if self.errors is None or not scenario.apps:
            return None
        record = self._record(state, now, scenario)
        if record is None:  # no record of the day: the state's forecast ahead, the history's level alone
            record = scenario.demand, np.zeros((len(scenario.apps), 0), dtype=np.int64), 0
        F, seen, at = record
        if not self.errors.uncertain(F, seen, at):
            return None
        return F, seen, at

    def _future(
        self,
        scenario: Scenario,
        now: int,
        elapsed: Mapping[str, int],
        demand: tuple[np.ndarray, np.ndarray, int] | None,
        k: int,
        stream: str = "",
    ) -> Scenario:
        """Future ``k`` of the state: sampled runtimes for the known jobs, sampled arrivals and demand after now.

        ``stream`` names a separate sequence of futures (the futures planned whole for candidates are
        drawn apart from those that score them).
        """
        rng = np.random.default_rng(
            stable_seed(self.seed, now, k, stream) if stream else stable_seed(self.seed, now, k)
        )
        jobs: list[Job] = []
        for job in scenario.jobs:
            if self.runtimes is not None:
                if job.running_on is not None:
                    ran = int(elapsed.get(job.id, 0))
                    left = int(self.runtimes.sample_remaining(ran + job.duration, ran, rng))
                    job = replace(job, duration=max(1, min(job.duration, left)))
                else:
                    job = replace(job, duration=int(self.runtimes.runtime_slots(job.duration, float(rng.random()))))
            jobs.append(job)
        if self.arrivals is not None:
            horizon = scenario.slots if self.lookahead is None else min(scenario.slots, self.lookahead + 1)
            jobs.extend(
                self.arrivals.sample(
                    rng,
                    now,
                    scenario.gpus,
                    scenario.node_size,
                    horizon,
                    prefix=FUTURE_PREFIX,
                    value_scale=scenario.decay**now,
                )
            )
        future = replace(scenario, jobs=tuple(jobs))
        if demand is not None:
            F, seen, at = demand
            path = self.errors.sample(rng, F, seen, at, gpus=scenario.gpus)  # type: ignore[union-attr]
            future = with_demand(future, path[:, -scenario.slots :], scenario.name)
        return future


def commit_slot(
    future: Scenario, starts: Sequence[Placement], app_gpus: Sequence[int]
) -> tuple[float, Scenario | None]:
    """Slot 0 of a future committed: what it earns, and the rest of the future from slot 1 on as a scenario.

    Slot 0 earns ``w k`` for every job that holds GPUs in it (those running and ``starts``), less each app's
    penalty for the demand above ``app_gpus``. The rest is the future's slots ``1..T-1``: the jobs that still
    run pinned on their GPUs with what remains, every other job known now released at slot 1 at the
    earliest (one that could only have started now is lost), the apps starting from ``app_gpus``; each
    job's worth per GPU-slot is multiplied by the decay, so that its objective is the future's over those
    slots. None when the future has one slot.

    Args:
        future: A future of the state (slot 0 = now), with its demand path.
        starts: The jobs started now, on their GPUs (a decision valid for the state).
        app_gpus: Each app's GPUs now, in the future's app order.
    """
    pinned = {p.job: tuple(p.gpus) for p in starts}
    value = -shortfall_penalty(
        np.asarray(app_gpus, dtype=np.int64).reshape(-1, 1),
        future.demand[:, :1],
        np.array([app.penalty for app in future.apps], dtype=np.float64),
    )
    decay = future.decay
    jobs = []
    for job in future.jobs:
        gpus = pinned.get(job.id, job.running_on)
        if gpus is not None:
            value += job.weight * job.gpus
            if job.duration > 1:
                jobs.append(
                    replace(
                        job,
                        running_on=gpus,
                        release=0,
                        duration=job.duration - 1,
                        deadline=None,
                        priority=job.weight * decay,
                        value=None,
                    )
                )
            continue
        release = max(0, job.release - 1)
        deadline = None if job.deadline is None else job.deadline - 1
        if release >= future.slots - 1 or (deadline is not None and deadline - job.duration < release):
            continue  # it could only have started now
        jobs.append(replace(job, release=release, deadline=deadline, priority=job.weight * decay, value=None))
    if future.slots < 2:
        return float(value), None
    apps = tuple(
        replace(app, demand=app.demand[1:], initial=int(a), forecast=None)
        for app, a in zip(future.apps, app_gpus, strict=True)
    )
    rest = replace(future, slots=future.slots - 1, apps=apps, jobs=tuple(jobs), name=f"{future.name}+1")
    return float(value), rest


def _known_worth(scenario: Scenario) -> float:
    """The mean worth per GPU-slot of the jobs a state knows (running and queued; 1 without any)."""
    weights = [job.weight for job in scenario.jobs]
    return float(np.mean(weights)) if weights else 1.0


def _without(plan: Plan, held: set[str]) -> Plan:
    kept = Plan(plan.scenario, plan.scheduler, [p for p in plan.placements if p.job not in held], dict(plan.curves))
    kept.solve_ms = plan.solve_ms
    return kept


ERROR_SOURCES = ("auto", "recorded", "none")
"""Where the live planner's error model learns from (:func:`live_planner`'s ``errors``)."""
FORECASTS = ("auto", "corrector", "residual", "record", "backtest", "point", "history", "newsvendor")
"""The live planner's forecasts by name (:func:`live_planner`)."""


def forecast_of(
    name: str, history: Sequence[Scenario], day: Scenario | None, errors: ErrorModel | None = None
) -> Corrector | HistoryForecaster | HedgedForecaster | ChosenForecast:
    """The live planner's demand forecast by name (:func:`live_planner`'s ``forecast``).

    ``corrector`` (and ``auto``) raises the corrected forecast by one error level of ``errors`` (the error model's,
    its prior the history's recorded error), or of today's raw errors alone without one.
    """
    if name == "auto":
        name = "corrector"
    if name == "corrector":
        return LIVE_FORECAST if errors is None else replace(LIVE_FORECAST, errors=errors)
    if name == "residual":
        return replace(LIVE_FORECAST, spread="residual")
    if name == "point":
        return HedgedForecaster("corrected", 0.0)
    if name == "newsvendor":
        if day is None:
            raise ValueError("forecast 'newsvendor' needs the day (its apps' penalties)")
        worth = work_worth(history, day)
        q = np.array([newsvendor_ratio(app.penalty, worth) for app in day.apps])
        return QuantileForecast(errors if errors is not None else ErrorModel.none(len(day.apps), day.slots), q)
    if name in ("history", "backtest", "record"):
        if not history or day is None:
            raise ValueError(f"forecast {name!r} needs past days (--history)")
        if name == "history":
            return HistoryForecaster.fit(history, day)
        if name == "record":
            return forecast_by_record(history, day)
        return choose_forecast(history, day)[0]
    raise ValueError(f"unknown forecast {name!r} (expected one of: {', '.join(FORECASTS)})")


def live_planner(
    name: str = "anticipate",
    *,
    history: Sequence[Scenario] = (),
    day: Scenario | None = None,
    runtimes: RuntimeSampler | None = None,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    forecast: str = "auto",
    errors: str = "auto",
    sources: Sequence[str] = (),
) -> AnticipatingPlanner:
    """A live planner by name, fitted from past days of the cluster.

    Args:
        name: One of :data:`LIVE_PLANNERS`. ``anticipate`` plans with greedy below :data:`LARGE_CLUSTER`
            GPUs and with ppo (and half the samples) from there on.
        history: Past days (their arrivals fit the arrival model and their curves the demand model; none:
            no arrivals are sampled and the demand error is today's alone).
        day: The day being played (its apps name the curves the models fit; nothing else is read).
        runtimes: The runtime / limit distribution the planner assumes (None: jobs run to their limit).
        samples: Futures per cycle.
        seed: Seed of every draw.
        forecast: How the apps' demand ahead is forecast for the base decision:

            - ``auto`` (the default): ``corrector``, with or without a history;
            - ``backtest``: the point forecast and margin that cost least on the past days played as if live
              (:func:`agents.live.hedge.choose_forecast`; needs ``history`` and ``day``);
            - ``point``: the day's forecast corrected by today's level, no margin (the futures carry the error);
            - ``corrector``: :data:`LIVE_FORECAST` on the day's forecast, rolling greedy's own correction, its margin
              one error level of the error model (the history's recorded error as a prior, today's mixed in);
            - ``residual``: the same with the margin measured from what the level correction leaves;
            - ``record``: the backtest's options chosen among by their record on the past days and today;
            - ``history``: each app's curve fitted from its past days (:class:`HistoryForecaster`; needs
              ``history`` and ``day``);
            - ``newsvendor``: each app at its newsvendor quantile ``penalty / (penalty + worth)`` of the error
              model's conditioned paths (:class:`agents.live.error_model.QuantileForecast`).

        errors: Where the demand error model (:class:`ErrorModel`) learns from: ``auto`` (the history's recorded
            forecasts and demand where the past days carry forecasts, else each past curve against the others'
            mean), ``recorded`` (the recorded errors only: a past day without a forecast is an error), ``none``
            (today's errors alone).
        sources: The history's file names, for error messages.

    Raises:
        ValueError: An unknown name, forecast or error source, or ``history`` or ``backtest`` without a history.
        HistoryError: ``errors="recorded"`` with a past day that carries no forecast (names the file and field).
    """
    if errors not in ERROR_SOURCES:
        raise ValueError(f"unknown error source {errors!r} (expected one of: {', '.join(ERROR_SOURCES)})")
    if name not in LIVE_PLANNERS:
        raise ValueError(f"unknown live planner {name!r} (expected one of: {', '.join(LIVE_PLANNERS)})")
    large = day is not None and day.gpus >= LARGE_CLUSTER
    base = "ppo" if name == "anticipate-ppo" or large else "greedy"
    if large:
        samples = max(1, samples // 2)
    arrivals = ArrivalModel.fit(history) if history else None
    model = None
    if day is not None:
        model = (
            ErrorModel.fit(history, day, require_forecasts=errors == "recorded", sources=sources)
            if history and errors != "none"
            else ErrorModel.none(len(day.apps), day.slots)
        )
    forecaster = forecast_of(forecast, history, day, model)
    rule = "consensus" if name == "anticipate-consensus" else "expectation"
    planner = AnticipatingPlanner(
        base,
        arrivals,
        runtimes,
        samples,
        DEFAULT_THRESHOLD,
        seed,
        name,
        forecaster,
        rule=rule,
        errors=None if name == "anticipate-consensus" else model,  # the vote as it was measured: arrivals alone
    )
    if large:  # a plan costs 50-200 ms there: fewer extra candidates, the race at most twice the first futures
        planner = replace(planner, most_samples=2 * samples, margins=LARGE_MARGINS, future_plans=1)
    return planner
