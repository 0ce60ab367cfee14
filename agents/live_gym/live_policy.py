"""What a live policy sees at a slot, and the decision its action makes (GpuClusterLive-v0).

A policy trained by PPO runs the live day one slot at a time. At slot ``t`` it sees what a live system knows
(:func:`view`): the slot of the day; the grid ahead (the GPUs the running jobs hold, and the base planner's
plan of the rest: its jobs and its real-time curves); the running jobs and how far through their limits
they are; the released queue; each app's forecast ahead (corrected by the demand observed so far), its
last observed demand, its GPUs now and its observed error level; and the base plan's jobs that start now.

Its action decides this slot (:func:`decide_action`), as the sampled-futures planner's candidates do:

* **hold or start** each of the base plan's start-now jobs (the :data:`MAX_STARTS` largest; 1 holds it);
* **a headroom level** for each app (:data:`HEADROOM`): the base planner plans the state with the app's
  demand raised to ``ceil(forecast * (1 + z * level))`` (the fill's error level, :func:`fill_ceiling`).

The compiled base planner (greedy) places everything else, and the GPUs its jobs leave idle go to the apps
(:func:`fill_idle`), as the live planner's base decision does: the action of all zeros is that decision.
The rules are masks: a hold only for a job that starts now, a headroom only for an app the cluster has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from agents.live.allocator import ClusterState, Decision, decision_from_plan
from agents.live.fill import fill_ceiling, fill_idle
from agents.live.forecast import with_demand
from agents.options import PlanOptions
from agents.registry import run_scheduler
from gpu_env.objective import placement_value
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import Scenario

MAX_STARTS = 8
"""Start-now jobs of the base plan a policy may hold: the largest (GPUs x limit) first."""
MAX_APPS = 3
"""Real-time apps a policy sees (a cluster with more is refused)."""
HEADROOM = (0.0, 1.0, 2.0, 4.0)
"""Headroom levels: error levels above the forecast at which an app's capacity is planned."""
AHEAD = 24
"""Slots ahead of now that the grid, the plan and the forecast are seen for."""
FILL_Z = 5.0
"""The fill's ceiling (error levels above the forecast), the live planner's (``DEFAULT_FILL_Z``)."""
GLOBAL_FEATURES = ("slot_of_day", "horizon_share", "gpus_log", "free_now", "running", "queue", "queue_area", "error")
GRID_FEATURES = ("held_by_running", "planned_jobs", "planned_apps")
APP_FEATURES = ("present", "last_observed", "gpus_now", "error_level", "penalty", "ramp")
START_FEATURES = ("present", "gpus", "duration", "weight", "area", "deadline_slack")
RUNNING_FEATURES = ("through_limit", "remaining_area", "ending_next")
OBSERVATION_SIZE = (
    len(GLOBAL_FEATURES)
    + AHEAD * len(GRID_FEATURES)
    + MAX_APPS * (AHEAD + len(APP_FEATURES))
    + MAX_STARTS * len(START_FEATURES)
    + len(RUNNING_FEATURES)
)
LOW, HIGH = -1.0, 8.0
"""Every feature is clipped into this range (the observation space's bounds)."""


def action_nvec() -> np.ndarray:
    """The MultiDiscrete action: a hold bit per start-now job, then a headroom level per app."""
    return np.array([2] * MAX_STARTS + [len(HEADROOM)] * MAX_APPS, dtype=np.int64)


def action_offsets() -> np.ndarray:
    """Where each action dimension's values begin in the concatenated mask (and in the policy's logits)."""
    nvec = action_nvec()
    return np.concatenate([[0], np.cumsum(nvec)[:-1]]).astype(np.int64)


def dimension_masks(mask: np.ndarray) -> tuple[np.ndarray, ...]:
    """A concatenated mask split per action dimension, int8: what ``MultiDiscrete.sample(mask=)`` takes."""
    nvec = action_nvec()
    return tuple(np.asarray(mask[o : o + n], dtype=np.int8) for o, n in zip(action_offsets(), nvec, strict=True))


@dataclass
class SlotView:
    """One slot as a live policy sees it, and what its decision is built from.

    Attributes:
        state: The cluster now.
        now: The slot of the day.
        scenario: The state as a scenario (slot 0 = now).
        expired: Jobs past their deadline (left out of the scenario).
        plain: The base planner's plan of the state (its placements and curves; no metrics: the live step
            reads none, :func:`base_plan`).
        starts: The plan's start-now jobs a policy may hold, largest first (at most :data:`MAX_STARTS`).
        observation: The features (:data:`OBSERVATION_SIZE` float32 values).
        mask: Allowed values of each action dimension, concatenated (``action_nvec().sum()`` booleans).
    """

    state: ClusterState
    now: int
    scenario: Scenario
    expired: tuple[str, ...]
    plain: Plan
    starts: tuple[Placement, ...]
    observation: np.ndarray
    mask: np.ndarray


def view(
    state: ClusterState,
    now: int,
    elapsed: Mapping[str, int] | None = None,
    *,
    base: str = "greedy",
    options: PlanOptions | None = None,
) -> SlotView:
    """The slot as a live policy sees it: the base plan of the state, its features and the action mask.

    Args:
        state: The cluster at the start of slot ``now`` (:meth:`agents.simulator.simulation.LiveDay.state`).
        now: The slot of the day.
        elapsed: Slots each running job has run (missing: 0).
        base: The base planner.
        options: Passed to the base planner.

    Raises:
        ValueError: The cluster has more than :data:`MAX_APPS` real-time apps.
    """
    if len(state.apps) > MAX_APPS:
        raise ValueError(f"the live policy sees at most {MAX_APPS} real-time apps, the cluster has {len(state.apps)}")
    scenario, expired = state.to_scenario()
    plain = base_plan(base, scenario, options)
    size = {j.id: j.gpus * j.duration for j in scenario.jobs}
    starts = tuple(
        sorted((p for p in plain.placements if p.start == 0 and _queued(scenario, p.job)), key=lambda p: -size[p.job])
    )[:MAX_STARTS]
    features = _features(state, now, elapsed or {}, scenario, plain, starts)
    return SlotView(state, now, scenario, expired, plain, starts, features, _mask(len(starts), len(state.apps)))


def decide_action(
    slot: SlotView, action: Sequence[int] | np.ndarray, *, base: str = "greedy", options: PlanOptions | None = None
) -> Decision:
    """The decision an action makes for the slot (module docstring); ``why`` says where it departs from the base.

    Raises:
        ValueError: The action has the wrong length or a value its mask forbids.
    """
    action = np.asarray(action, dtype=np.int64).reshape(-1)
    nvec = action_nvec()
    if action.shape != nvec.shape:
        raise ValueError(f"action: expected {len(nvec)} values, got {action.shape[0]}")
    offsets = action_offsets()
    if np.any(action < 0) or np.any(action >= nvec) or not np.all(slot.mask[offsets + action]):
        raise ValueError(f"action {action.tolist()} is not allowed by the mask")
    scenario, state = slot.scenario, slot.state
    held = {p.job for i, p in enumerate(slot.starts) if action[i] == 1}
    z = [HEADROOM[int(action[MAX_STARTS + a])] for a in range(len(scenario.apps))]
    plan = slot.plain
    if any(level > 0 for level in z):
        raised = scenario.demand.copy()
        for a, level in enumerate(z):
            if level > 0:
                cap = fill_ceiling(scenario, state.error_level or (0.0,) * len(z), level, slot.now)
                raised[a] = np.minimum(cap[a], scenario.gpus)  # type: ignore[index]
        alt = base_plan(base, with_demand(scenario, raised, scenario.name), options)
        plan = Plan(slot.plain.scenario, alt.scheduler, list(alt.placements), dict(alt.curves))
    if held:
        plan = Plan(plan.scenario, plan.scheduler, [p for p in plan.placements if p.job not in held], dict(plan.curves))
    plan = fill_idle(scenario, plan, fill_ceiling(scenario, state.error_level, FILL_Z, slot.now))
    decision = decision_from_plan(scenario, plan, slot.expired)
    why = {job: "held: the live policy (ppo) holds it" for job in sorted(held)}
    base_starts = {p.job for p in slot.plain.placements if p.start == 0}
    for p in decision.start_now:
        if p.job not in base_starts:
            why[p.job] = "started: the live policy's headroom plan starts it"
    for app, level in zip(scenario.apps, z, strict=True):
        if level > 0:
            why[app.name] = f"planned with headroom {level:g} error levels above the forecast (the live policy)"
    decision.why = why
    return decision


def base_plan(base: str, scenario: Scenario, options: PlanOptions | None = None) -> Plan:
    """The base planner's plan of a state, without its metrics (``plan.metrics`` is None).

    A live step reads the plan's placements and curves only, and the executed day is scored as a whole
    (:meth:`~agents.simulator.simulation.LiveDay.result`).
    """
    return run_scheduler(base, scenario, options, metrics=False)


def slot_reward(actual: Scenario, started: Sequence[Placement], app_gpus: Mapping[str, int], t: int) -> float:
    """What slot ``t`` of the realized day earns: the jobs started in it, less the apps' unserved demand in it.

    A job started at ``t`` earns its whole value there (:func:`gpu_env.objective.placement_value` at its
    actual runtime); each app pays its penalty for each GPU of actual demand above its GPUs in ``t``. Over
    the day's slots (and the inherited jobs, counted at slot 0) this adds up to the executed day's objective.
    """
    value = sum(placement_value(actual.jobs[actual.job_index(p.job)], t, actual) for p in started)
    for i, app in enumerate(actual.apps):
        value -= app.penalty * max(0, int(actual.demand[i, t]) - int(app_gpus.get(app.name, 0)))
    return float(value)


def inherited_value(actual: Scenario) -> float:
    """What the jobs running at slot 0 of the day earn (counted in slot 0's reward)."""
    return float(sum(placement_value(j, 0, actual) for j in actual.jobs if j.running_on is not None))


# ----------------------------------------------------------------------------- features


def _queued(scenario: Scenario, job_id: str) -> bool:
    return scenario.jobs[scenario.job_index(job_id)].running_on is None


def _mask(starts: int, apps: int) -> np.ndarray:
    parts = [np.array([True, i < starts]) for i in range(MAX_STARTS)]
    parts += [
        np.ones(len(HEADROOM), dtype=bool) if a < apps else np.eye(len(HEADROOM), dtype=bool)[0]
        for a in range(MAX_APPS)
    ]
    return np.concatenate(parts)


def _features(
    state: ClusterState,
    now: int,
    elapsed: Mapping[str, int],
    scenario: Scenario,
    plain: Plan,
    starts: Sequence[Placement],
) -> np.ndarray:
    G = float(scenario.gpus)
    H = scenario.slots
    k = min(AHEAD, H)
    day = now + H  # the day's slots: the state plans to the day's end
    queue = [j for j in scenario.jobs if j.running_on is None]
    weights = [j.weight for j in scenario.jobs] or [1.0]
    w_max = max(max(weights), 1e-9)
    held = np.zeros(AHEAD)
    for r in state.running:
        held[: min(r.remaining, AHEAD)] += len(r.gpus)
    jobs_grid = np.zeros(AHEAD)
    for p in plain.placements:
        job = scenario.jobs[scenario.job_index(p.job)]
        if job.running_on is None:
            jobs_grid[p.start : min(p.start + job.duration, AHEAD)] += job.gpus
    apps_grid = np.zeros(AHEAD)
    for app in scenario.apps:
        apps_grid[:k] += np.asarray(plain.curve(app.name, H)[:k], dtype=np.float64)
    used_now = held[0] + sum(a.initial for a in scenario.apps)
    error = list(state.error_level) or [0.0] * len(scenario.apps)
    out: list[float] = [
        now / max(day, 1),
        H / max(day, 1),
        np.log2(G) / 10.0,
        (G - used_now) / G,
        len(state.running) / G,
        len(queue) / G,
        sum(j.gpus * j.duration for j in queue) / (G * H),
        float(np.mean(error)) if error else 0.0,
    ]
    out += list(held / G) + list(jobs_grid / G) + list(apps_grid / G)
    for a in range(MAX_APPS):
        if a < len(scenario.apps):
            app = scenario.apps[a]
            ahead = np.zeros(AHEAD)
            ahead[:k] = scenario.demand[a, :k]
            seen = state.observed[a][-1] if state.observed and state.observed[a] else app.demand[0]
            out += [*(ahead / G), 1.0, seen / G, app.initial / G, error[a], app.penalty / 10.0, app.ramp / G]
        else:
            out += [0.0] * (AHEAD + len(APP_FEATURES))
    for i in range(MAX_STARTS):
        if i < len(starts):
            job = scenario.jobs[scenario.job_index(starts[i].job)]
            slack = 1.0 if job.deadline is None else (job.deadline - job.duration) / H
            out += [1.0, job.gpus / G, job.duration / H, job.weight / w_max, job.gpus * job.duration / (G * H), slack]
        else:
            out += [0.0] * len(START_FEATURES)
    through = [elapsed.get(r.job.id, 0) / max(elapsed.get(r.job.id, 0) + r.remaining, 1) for r in state.running]
    out += [
        float(np.mean(through)) if through else 0.0,
        sum(len(r.gpus) * r.remaining for r in state.running) / (G * H),
        sum(len(r.gpus) for r in state.running if r.remaining == 1) / G,
    ]
    return np.clip(np.asarray(out, dtype=np.float32), LOW, HIGH)


def masked_argmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per action dimension, the index of the largest logit among the values the (flat) mask allows."""
    nvec = action_nvec()
    out = np.zeros(len(nvec), dtype=np.int64)
    at = 0
    for i, n in enumerate(nvec):
        part = np.where(mask[at : at + n], logits[at : at + n], -np.inf)
        out[i] = int(np.argmax(part))
        at += n
    return out
