"""Rolling horizon under forecast error: "optimise the day, commit the hour", simulated and measured.

A simulation of one day (SPEC section 7) with a scenario whose real-time
``demand`` is the **forecast**:

1. **Actual demand** is drawn around the forecast by :class:`NoiseModel`: each
   app's curve is shifted in time (its peaks come early or late) and multiplied
   by ``1 + e_t``, where ``e_t`` is a stationary AR(1) error with standard
   deviation ``sigma`` and persistence ``rho`` (errors stay high or low for
   hours: peaks come higher or lower). ``sigma = 0`` gives the forecast exactly.
2. **Rolling**: every ``replan_every`` slots the allocator
   (:func:`agents.allocator.decide`) gets the state at the start of slot ``t``:
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

import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from agents.allocator import ClusterState, RunningJob, decide
from agents.options import PlanOptions
from agents.registry import run_scheduler
from gpu_env.metrics import Metrics, compute_metrics
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import App, Job, Scenario, save_scenario, write_text_atomic
from gpu_env.validation import validate

MODES = ("open", "rolling")


class RollingError(RuntimeError):
    """A planner returned a plan that breaks the rules for the state it was given."""


# ----------------------------------------------------------------------------- the noise model


@dataclass(frozen=True)
class NoiseModel:
    """How actual real-time demand departs from the forecast.

    For each app, independently: a time shift ``tau ~ N(0, (shift * sigma)^2)``
    slots (the forecast curve is read at ``t - tau`` by linear interpolation,
    held flat past the ends), then a multiplicative error ``1 + e_t`` with
    ``e_0 ~ N(0, sigma^2)`` and ``e_t = rho * e_{t-1} + sqrt(1 - rho^2) * sigma * z_t``
    (a stationary AR(1) process). The result is rounded and clipped to ``[0, G]``.

    Attributes:
        sigma: Standard deviation of the relative error (0: the forecast is exact).
        rho: Slot-to-slot persistence of the error (0.8: about five slots of memory).
        shift: Standard deviation of the time shift, in slots per unit of sigma.
    """

    sigma: float = 0.0
    rho: float = 0.8
    shift: float = 4.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise ValueError(f"forecast error sigma must be a number >= 0, got {self.sigma}")
        if not 0 <= self.rho < 1:
            raise ValueError(f"rho must lie in [0, 1), got {self.rho}")
        if not (math.isfinite(self.shift) and self.shift >= 0):
            raise ValueError(f"shift must be a number >= 0, got {self.shift}")

    def draw(self, scenario: Scenario, seed: int) -> np.ndarray:
        """Actual demand around the scenario's forecast, shape (apps, T); the same seed gives the same curves."""
        rng = np.random.default_rng(seed)
        T = scenario.slots
        forecast = scenario.demand.astype(np.float64)
        out = np.zeros_like(forecast, dtype=np.int64)
        slots = np.arange(T, dtype=np.float64)
        for i in range(forecast.shape[0]):
            tau = rng.normal(0.0, self.shift * self.sigma)
            shifted = np.interp(slots - tau, slots, forecast[i])
            z = rng.normal(0.0, 1.0, T)
            e = np.empty(T)
            e[0] = self.sigma * z[0]
            for t in range(1, T):
                e[t] = self.rho * e[t - 1] + math.sqrt(1 - self.rho**2) * self.sigma * z[t]
            out[i] = np.clip(np.round(shifted * (1.0 + e)), 0, scenario.gpus).astype(np.int64)
        return out


def with_demand(scenario: Scenario, demand: np.ndarray, name: str | None = None) -> Scenario:
    """The scenario with other demand curves (``initial`` kept: the state before slot 0 is what it is)."""
    demand = np.asarray(demand, dtype=np.int64)
    if demand.shape != (len(scenario.realtime), scenario.slots):
        raise ValueError(f"demand must have shape {(len(scenario.realtime), scenario.slots)}, got {demand.shape}")
    if (demand < 0).any():
        raise ValueError("demand must be non-negative")
    apps = tuple(replace(app, demand=tuple(int(x) for x in demand[i])) for i, app in enumerate(scenario.realtime))
    return replace(scenario, name=name or scenario.name, realtime=apps)


# ----------------------------------------------------------------------------- forecast correction


@dataclass(frozen=True)
class Corrector:
    """The forecast the planner sees at slot t, corrected by the demand observed in slots before t.

    ``ratio`` (default): the relative error over the last ``window`` observed
    slots, ``e = sum(actual) / sum(forecast) - 1`` clipped to ``[-1, limit]``,
    is carried forward with the noise model's persistence: slot ``s >= t`` is
    forecast as ``F_s * (1 + rho**(s - t + 1) * e)``. Where the forecast of
    those slots is 0 the error is taken as a difference instead
    (``F_s + rho**(s - t + 1) * mean(actual - forecast)``). ``bias`` always uses
    the difference; ``none`` keeps the forecast.

    A safety margin then raises the forecast of lead ``h = s - t + 1`` by
    ``margin * sigma_hat * sqrt(1 - rho**(2h))`` of itself, where ``sigma_hat``
    is the root mean square of the relative errors observed so far
    (``(actual - forecast) / max(forecast, 1)`` over slots before t): the
    planner learns how wrong the forecast is and keeps that much head-room, more
    for slots further ahead. Shortfall costs the penalty, a reserved idle GPU at
    most a job's worth, so erring high is cheaper (the newsvendor's argument).
    Without a prior the margin is 0 until something is observed; with
    ``prior_sigma`` (an error level known from history) it counts as
    ``prior_weight`` observed slots, and before any observation the margin is
    ``margin * prior_sigma`` at every lead.

    Attributes:
        method: ``ratio``, ``bias`` or ``none`` (``none``: the forecast unchanged, no margin).
        rho: Persistence assumed for the error (the noise model's).
        window: Observed slots the error is estimated from.
        limit: Largest relative error carried forward.
        margin: Safety margin in standard deviations of the error (0: none).
        prior_sigma: Relative error level known before the day (0: none).
        prior_weight: How many observed slots the prior counts as.
    """

    method: str = "ratio"
    rho: float = 0.8
    window: int = 2
    limit: float = 1.0
    margin: float = 1.0
    prior_sigma: float = 0.0
    prior_weight: float = 4.0

    def __post_init__(self) -> None:
        if self.method not in ("ratio", "bias", "none"):
            raise ValueError(f"unknown correction {self.method!r} (expected ratio, bias or none)")

    def forecast(self, forecast: np.ndarray, actual: np.ndarray, now: int, gpus: int) -> np.ndarray:
        """Forecast of slots ``now..T-1``, shape (apps, T - now), from the actual demand of slots before ``now``."""
        F = forecast.astype(np.float64)
        ahead = F[:, now:]
        if self.method == "none":
            return np.clip(np.round(ahead), 0, gpus).astype(np.int64)
        if now == 0:
            raised = ahead * (1.0 + self.margin * self.prior_sigma)
            return np.clip(np.round(raised), 0, gpus).astype(np.int64)
        lo = max(0, now - self.window)
        seen_f = F[:, lo:now].sum(axis=1)
        seen_a = actual[:, lo:now].astype(np.float64).sum(axis=1)
        lead = np.arange(1, ahead.shape[1] + 1)
        decay = self.rho**lead
        out = np.empty_like(ahead)
        for i in range(F.shape[0]):
            if self.method == "ratio" and seen_f[i] > 0:
                e = min(self.limit, max(-1.0, seen_a[i] / seen_f[i] - 1.0))
                out[i] = ahead[i] * (1.0 + decay * e)
            else:
                bias = (seen_a[i] - seen_f[i]) / (now - lo)
                out[i] = ahead[i] + decay * bias
            if self.margin > 0:
                errors = (actual[i, :now] - F[i, :now]) / np.maximum(F[i, :now], 1.0)
                weight = self.prior_weight if self.prior_sigma > 0 else 0.0
                sigma_hat = math.sqrt((weight * self.prior_sigma**2 + float(np.sum(errors**2))) / (weight + now))
                out[i] = out[i] * (1.0 + self.margin * sigma_hat * np.sqrt(1.0 - self.rho ** (2 * lead)))
        return np.clip(np.round(out), 0, gpus).astype(np.int64)


# ----------------------------------------------------------------------------- one simulated day


@dataclass(frozen=True)
class SlotRecord:
    """What was committed in one slot.

    Attributes:
        slot: The slot.
        replanned: Whether the allocator was called at this slot.
        started: Jobs started in this slot (with their GPUs).
        running: Ids of the jobs holding GPUs in this slot.
        realtime: GPUs given to each app in this slot.
        forecast: Each app's demand for this slot as the planner saw it.
        actual: Each app's actual demand in this slot.
        solve_ms: Time of this slot's plan (0 when not re-planned).
    """

    slot: int
    replanned: bool
    started: tuple[Placement, ...]
    running: tuple[str, ...]
    realtime: dict[str, int]
    forecast: dict[str, int]
    actual: dict[str, int]
    solve_ms: float


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
    executed = Plan(actual.name, f"{scheduler}/open", list(plan.placements), dict(plan.realtime))
    executed.solve_ms = plan.solve_ms
    metrics = compute_metrics(actual, executed)
    executed.metrics = metrics
    return Simulation("open", scheduler, scenario, actual, executed, metrics, [], 1, [plan.solve_ms or 0.0], plan)


def rolling(
    scenario: Scenario,
    scheduler: str,
    actual: Scenario,
    *,
    replan_every: int = 1,
    options: PlanOptions | None = None,
    corrector: Corrector | None = None,
    reveal: str = "release",
    check: bool = True,
) -> Simulation:
    """Simulate the rolling horizon over the scenario's day against the actual demand.

    Args:
        scenario: The scenario; its demand is the forecast.
        scheduler: Any name of :data:`agents.registry.SCHEDULERS`.
        actual: The scenario with the actual demand (:func:`with_demand`).
        replan_every: Re-plan every K slots (1: every slot); between re-plans the latest plan is followed.
        options: Passed to the scheduler at every re-plan.
        corrector: How observed demand corrects the forecast (default :class:`Corrector`).
        reveal: ``release``: a job is known from its release slot on; ``all``: the
            day's jobs are known from slot 0 (they still start no earlier than their release).
        check: Validate every plan against the state it was made for; a broken
            rule raises :class:`RollingError` naming the scheduler and slot.

    Returns:
        The simulation, with the executed schedule and its realised metrics.
    """
    if replan_every < 1:
        raise ValueError(f"replan_every must be a positive integer, got {replan_every}")
    if reveal not in ("release", "all"):
        raise ValueError(f"reveal must be 'release' or 'all', got {reveal!r}")
    corrector = corrector or Corrector()
    T, G = scenario.slots, scenario.gpus
    apps = scenario.realtime
    forecast = scenario.demand
    real = actual.demand
    # job id -> (start, gpus), committed; inherited jobs hold their GPUs from slot 0
    started: dict[str, tuple[int, tuple[int, ...]]] = {
        job.id: (0, job.running_on) for job in scenario.jobs if job.running_on is not None
    }
    curves = np.zeros((len(apps), T), dtype=np.int64)
    planned_starts: dict[str, tuple[int, tuple[int, ...]]] = {}  # from the latest plan, absolute slots
    planned_curves = np.zeros((len(apps), T), dtype=np.int64)
    seen = np.zeros((len(apps), T), dtype=np.int64)  # forecast of each slot as the planner saw it
    records: list[SlotRecord] = []
    times: list[float] = []

    for t in range(T):
        solve_ms = 0.0
        replanned = t % replan_every == 0
        if replanned:
            ahead = corrector.forecast(forecast, real, t, G)
            state = state_at(scenario, t, started, curves, ahead, reveal)
            decision = decide(state, scheduler, options)
            solve_ms = decision.plan.solve_ms if decision.plan.solve_ms is not None else 0.0
            if check:
                problems = validate(decision.scenario, decision.plan)
                if problems:
                    raise RollingError(
                        f"{scheduler} at slot {t}: the plan breaks the rules for the state it was given: {problems[0]}"
                    )
            times.append(solve_ms)
            running_now = {j.id for j in decision.scenario.jobs if j.running_on is not None}
            planned_starts = {
                p.job: (t + p.start, tuple(p.gpus)) for p in decision.plan.placements if p.job not in running_now
            }
            for i, app in enumerate(apps):
                planned_curves[i, t:] = decision.plan.curve(app.name, T - t)
            seen[:, t:] = ahead
        # Commit slot t: the jobs the latest plan starts now, and each app's allocation now.
        now_started = []
        for job_id, (start, gpus) in sorted(planned_starts.items(), key=lambda kv: scenario.job_index(kv[0])):
            if start == t and job_id not in started:
                started[job_id] = (t, gpus)
                now_started.append(Placement(job_id, t, gpus))
        curves[:, t] = planned_curves[:, t]
        running = tuple(
            job.id
            for job in scenario.jobs
            if job.id in started and started[job.id][0] <= t < started[job.id][0] + job.duration
        )
        records.append(
            SlotRecord(
                slot=t,
                replanned=replanned,
                started=tuple(now_started),
                running=running,
                realtime={app.name: int(curves[i, t]) for i, app in enumerate(apps)},
                forecast={app.name: int(seen[i, t]) for i, app in enumerate(apps)},
                actual={app.name: int(real[i, t]) for i, app in enumerate(apps)},
                solve_ms=solve_ms,
            )
        )

    placements = [
        Placement(job.id, started[job.id][0], started[job.id][1]) for job in scenario.jobs if job.id in started
    ]
    placements.sort(key=lambda p: (p.start, scenario.job_index(p.job)))
    realtime = {app.name: [int(x) for x in curves[i]] for i, app in enumerate(apps)}
    executed = Plan(actual.name, f"{scheduler}/rolling", placements, realtime)
    executed.solve_ms = float(sum(times))
    metrics = compute_metrics(actual, executed)
    executed.metrics = metrics
    return Simulation("rolling", scheduler, scenario, actual, executed, metrics, records, len(times), times)


def state_at(
    scenario: Scenario,
    now: int,
    started: Mapping[str, tuple[int, tuple[int, ...]]],
    curves: np.ndarray,
    ahead: np.ndarray,
    reveal: str,
) -> ClusterState:
    """The cluster at the start of slot ``now`` as the allocator sees it."""
    running: list[RunningJob] = []
    queue: list[Job] = []
    for job in scenario.jobs:
        if job.id in started:
            start, gpus = started[job.id]
            if start + job.duration > now:
                running.append(RunningJob(job, gpus, start + job.duration - now))
            continue
        if reveal == "release" and job.release > now:
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
        for i, app in enumerate(scenario.realtime)
    )
    return ClusterState(
        gpus=scenario.gpus,
        horizon=scenario.slots - now,
        running=tuple(running),
        queue=tuple(queue),
        apps=apps,
        node_size=scenario.node_size,
        decay=scenario.decay,
        slot_minutes=scenario.slot_minutes,
        value_scale=scenario.decay**now,
        name=f"{scenario.name}@{now}",
    )


def simulate(
    scenario: Scenario,
    scheduler: str,
    *,
    sigma: float = 0.0,
    seed: int = 0,
    replan_every: int = 1,
    options: PlanOptions | None = None,
    noise: NoiseModel | None = None,
    corrector: Corrector | None = None,
    reveal: str = "release",
    actual_demand: np.ndarray | None = None,
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

    Returns:
        (rolling, open loop), scored against the same actual demand.
    """
    noise = replace(noise or NoiseModel(), sigma=sigma)
    corrector = corrector or Corrector(rho=noise.rho)
    demand = noise.draw(scenario, seed) if actual_demand is None else np.asarray(actual_demand, dtype=np.int64)
    actual = with_demand(scenario, demand, f"{scenario.name}-actual")
    roll = rolling(
        scenario, scheduler, actual, replan_every=replan_every, options=options, corrector=corrector, reveal=reveal
    )
    fixed = open_loop(scenario, scheduler, actual, options)
    return roll, fixed


def write_simulation(
    directory: str | Path, roll: Simulation, fixed: Simulation, settings: Mapping[str, Any], picture: bool = True
) -> list[Path]:
    """Write ``actual.yaml``, ``executed.json``, ``open_loop.json``, ``metrics.json`` and ``simulation.png``.

    Returns:
        The files written.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    save_scenario(roll.actual, directory / "actual.yaml")
    written.append(directory / "actual.yaml")
    roll.executed.save(directory / "executed.json")
    written.append(directory / "executed.json")
    fixed.executed.save(directory / "open_loop.json")
    written.append(directory / "open_loop.json")
    forecast, actual = roll.forecast.demand, roll.actual.demand
    data = {
        "scenario": roll.forecast.name,
        "scheduler": roll.scheduler,
        **dict(settings),
        "forecast_error": {
            "abs_gpu_slots": int(np.abs(actual - forecast).sum()),
            "relative": round(float(np.abs(actual - forecast).sum() / max(1, forecast.sum())), 4),
            "actual_above_forecast_gpu_slots": int(np.maximum(0, actual - forecast).sum()),
        },
        "rolling": roll.summary(),
        "open_loop": fixed.summary(),
        "rolling_minus_open": round(roll.metrics.objective - fixed.metrics.objective, 6),
        "validation": {
            "executed": [str(v) for v in validate(roll.actual, roll.executed)],
            "open_loop": [str(v) for v in validate(fixed.actual, fixed.executed)],
        },
        "slots": [_record_dict(r) for r in roll.slots],
    }
    write_text_atomic(directory / "metrics.json", json.dumps(data, indent=1) + "\n")
    written.append(directory / "metrics.json")
    if picture:
        from gpu_env.render import save_figure
        from gpu_env.render_rolling import plot_simulation

        written.append(save_figure(plot_simulation(roll, fixed), directory / "simulation.png"))
    return written


def _record_dict(r: SlotRecord) -> dict[str, Any]:
    data = asdict(r)
    data["started"] = [{"job": p.job, "gpus": list(p.gpus)} for p in r.started]
    data["running"] = list(r.running)
    data["solve_ms"] = round(r.solve_ms, 3)
    return data


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
    reveal: str = "release",
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


# Two-sided 95 % Student t quantiles by degrees of freedom (larger: the normal 1.96).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
_T95.update({11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 19: 2.093, 24: 2.064, 29: 2.045})


def t95(n: int) -> float:
    """The two-sided 95 % t quantile for a mean of n values (``n - 1`` degrees of freedom)."""
    df = n - 1
    if df < 1:
        return float("nan")
    if df in _T95:
        return _T95[df]
    known = sorted(k for k in _T95 if k <= df)
    return _T95[known[-1]] if df < 30 else 1.96


def mean_ci(values: Iterable[float]) -> tuple[float, float]:
    """Mean and half-width of its 95 % confidence interval (t distribution; nan for one value)."""
    x = np.asarray(list(values), dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan")
    if x.size == 1:
        return float(x[0]), float("nan")
    return float(x.mean()), float(t95(x.size) * x.std(ddof=1) / math.sqrt(x.size))


def summarise(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (scenario, scheduler, sigma): mean realised objective of each mode with 95 % CIs, and the paired gain.

    ``gain`` is rolling minus open loop on the same actual demand, averaged over
    seeds; ``gain_ci`` its 95 % half-width; ``wins`` the seeds where rolling earned more.
    """
    table: dict[tuple[str, str, float], dict[str, dict[int, Mapping[str, Any]]]] = {}
    for r in rows:
        key = (r["scenario"], r["scheduler"], float(r["sigma"]))
        table.setdefault(key, {}).setdefault(r["mode"], {})[int(r["seed"])] = r
    out = []
    for (scenario, scheduler, sigma), modes in table.items():
        entry: dict[str, Any] = {"scenario": scenario, "scheduler": scheduler, "sigma": sigma}
        for mode in MODES:
            runs = modes.get(mode, {})
            mean, ci = mean_ci(r["objective"] for r in runs.values())
            entry[f"{mode}_objective"] = mean
            entry[f"{mode}_ci"] = ci
            entry[f"{mode}_shortfall"] = float(np.mean([r["shortfall"] for r in runs.values()])) if runs else math.nan
            entry[f"{mode}_valid"] = all(r.get("valid", True) for r in runs.values())
            entry[f"{mode}_solve_ms_max"] = max((r["solve_ms_max"] for r in runs.values()), default=math.nan)
        paired = sorted(set(modes.get("open", {})) & set(modes.get("rolling", {})))
        diffs = [modes["rolling"][s]["objective"] - modes["open"][s]["objective"] for s in paired]
        entry["gain"], entry["gain_ci"] = mean_ci(diffs)
        entry["wins"] = sum(d > 1e-9 for d in diffs)
        entry["seeds"] = len(paired)
        out.append(entry)
    out.sort(key=lambda e: (e["scenario"], e["scheduler"], e["sigma"]))
    return out


def _fmt(mean: float, ci: float) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.1f}" if math.isnan(ci) else f"{mean:.1f} ± {ci:.1f}"


def markdown_table(summary: Sequence[Mapping[str, Any]]) -> str:
    """The summary as a Markdown table: one row per scenario, scheduler and forecast error."""
    lines = [
        "| scenario | scheduler | sigma | open loop | rolling | rolling - open (paired) | rolling wins | "
        "shortfall open / rolling |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for e in summary:
        valid = "" if e["open_valid"] and e["rolling_valid"] else " (INVALID)"
        lines.append(
            f"| {e['scenario']} | {e['scheduler']}{valid} | {e['sigma']:g} | "
            f"{_fmt(e['open_objective'], e['open_ci'])} | {_fmt(e['rolling_objective'], e['rolling_ci'])} | "
            f"{_fmt(e['gain'], e['gain_ci'])} | {e['wins']}/{e['seeds']} | "
            f"{e['open_shortfall']:.1f} / {e['rolling_shortfall']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def pooled(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (scheduler, sigma), over every scenario and seed: rolling's paired gain in % of a nominal objective.

    Each pair's gain (rolling minus open loop on the same actual demand) is
    divided by the open-loop objective of the same scenario and scheduler with an
    exact forecast (sigma 0) when the rows hold it, else by the pair's own
    open-loop objective, so that scenarios of different scale pool.

    Returns:
        One entry per (scheduler, sigma) with ``gain_pct`` and its 95 % half-width
        ``gain_pct_ci``, ``wins`` (pairs where rolling earned more) and ``pairs``.
    """
    by: dict[tuple[str, str, float, int], dict[str, float]] = {}
    nominal: dict[tuple[str, str], float] = {}
    for r in rows:
        key = (r["scenario"], r["scheduler"], float(r["sigma"]), int(r["seed"]))
        by.setdefault(key, {})[r["mode"]] = r["objective"]
        if r["mode"] == "open" and float(r["sigma"]) == 0.0:
            nominal[(r["scenario"], r["scheduler"])] = r["objective"]
    groups: dict[tuple[str, float], list[float]] = {}
    for (scenario, scheduler, sigma, _), modes in by.items():
        if "open" in modes and "rolling" in modes:
            base = abs(nominal.get((scenario, scheduler), modes["open"])) or 1.0
            groups.setdefault((scheduler, sigma), []).append(100.0 * (modes["rolling"] - modes["open"]) / base)
    order = {name: i for i, name in enumerate(dict.fromkeys(r["scheduler"] for r in rows))}
    out = []
    for (scheduler, sigma), gains in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        mean, ci = mean_ci(gains)
        out.append(
            {
                "scheduler": scheduler,
                "sigma": sigma,
                "gain_pct": mean,
                "gain_pct_ci": ci,
                "wins": sum(g > 1e-9 for g in gains),
                "pairs": len(gains),
            }
        )
    return out


def pooled_table(entries: Sequence[Mapping[str, Any]]) -> str:
    """The pooled gains as a Markdown table: one row per scheduler, one column per forecast error."""
    sigmas = sorted({e["sigma"] for e in entries})
    names = list(dict.fromkeys(e["scheduler"] for e in entries))
    by = {(e["scheduler"], e["sigma"]): e for e in entries}
    lines = [
        "| scheduler | " + " | ".join(f"sigma {s:g}" for s in sigmas) + " |",
        "| --- | " + " | ".join("---:" for _ in sigmas) + " |",
    ]
    for name in names:
        cells = []
        for s in sigmas:
            e = by.get((name, s))
            if e is None:
                cells.append("-")
                continue
            ci = "" if math.isnan(e["gain_pct_ci"]) else f" ± {e['gain_pct_ci']:.1f}"
            cells.append(f"{e['gain_pct']:+.1f} %{ci} ({e['wins']}/{e['pairs']})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def evaluation_section(
    scenarios: Sequence[Scenario],
    schedulers: Sequence[str],
    sigmas: Sequence[float],
    seeds: Sequence[int],
    out: str | Path,
    options: PlanOptions,
    *,
    open_options: PlanOptions | None = None,
    replan_every: int = 1,
    figures: bool = True,
    show_progress: bool = True,
    command: str = "",
) -> str:
    """Run :func:`compare` and write ``rolling.csv``, ``rolling.json`` and ``figures/rolling.png`` under ``out``.

    Returns:
        The report's Markdown section (pooled gains, then every scenario in a folded table).
    """
    from tqdm import tqdm

    out = Path(out)
    total = len(scenarios) * len(sigmas) * len(seeds) * len(schedulers)
    with tqdm(total=total, desc="rolling", unit="day", file=sys.stderr, disable=not show_progress) as bar:

        def progress(message: str) -> None:
            bar.set_postfix_str(message.split(":")[0])
            bar.update(1)

        rows = compare(
            scenarios,
            schedulers,
            sigmas,
            seeds,
            replan_every=replan_every,
            options=dict.fromkeys(schedulers, options),
            open_options=dict.fromkeys(schedulers, open_options or options),
            progress=progress,
        )
    summary = summarise(rows)
    gains = pooled(rows)
    columns = list(rows[0]) if rows else []
    lines = [",".join(columns)] + [",".join(str(r[c]) for c in columns) for r in rows]
    write_text_atomic(out / "rolling.csv", "\n".join(lines) + "\n")
    document = {"command": command, "rows": rows, "summary": summary, "pooled": gains}
    write_text_atomic(out / "rolling.json", json.dumps(document, indent=1, default=float) + "\n")
    parts = [
        "## Rolling horizon under forecast error",
        f"Open loop (one plan at slot 0 on the forecast, knowing the day's jobs, executed unchanged) against "
        f"rolling re-planning every {replan_every} slot(s) (jobs revealed at release, forecast corrected by the "
        f"demand observed so far, only the current slot committed), on the same actual demand drawn around the "
        f"forecast with relative error sigma (docs/rolling.md). {len(seeds)} seeds per sigma; time limit "
        f"{options.time_limit:g} s per re-plan, {(open_options or options).time_limit:g} s for the open-loop plan. "
        "Every executed schedule was checked by the validator against the actual demand"
        + ("." if all(r["valid"] for r in rows) else ": SOME ARE INVALID, see rolling.json."),
        "Rolling minus open loop, pooled over scenarios, in % of each scenario's open-loop objective with an exact "
        "forecast (mean ± 95 % CI over scenario x seed pairs; in brackets the pairs where rolling earned more):",
        pooled_table(gains),
    ]
    if figures and summary:
        from gpu_env.render import save_figure
        from gpu_env.render_rolling import plot_rolling_curve

        path = save_figure(plot_rolling_curve(summary, gains), out / "figures" / "rolling.png")
        parts.append(f"![Realised objective against forecast error]({path.relative_to(out).as_posix()})")
    parts.append(
        "<details><summary>Every scenario, scheduler and sigma (realised objective, mean ± 95 % CI over seeds)"
        "</summary>\n\n" + markdown_table(summary) + "\n</details>"
    )
    return "\n\n".join(parts)
