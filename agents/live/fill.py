"""Raising the real-time apps into the GPUs a plan's jobs leave idle (docs/rolling.md, "the fill").

An idle GPU given to a real-time app costs nothing in the slot it is given, and a live app's demand may come
above its forecast: serving it from GPUs no job uses avoids the penalty. :func:`fill_idle` raises each app's
curve as far as the rules allow; :func:`fill_ceiling` caps the raise by the error level observed so far, so
that with an exact forecast GPUs are not held by an app whose ramp would keep the next jobs waiting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from agents.live.forecast import PRIOR_WEIGHT
from gpu_env import rules
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario

FILL_PRIOR = 0.2
"""The error level assumed for the ceiling before the day shows its own, counted as :data:`FILL_PRIOR_WEIGHT`
observed slots: with an exact forecast the ceiling falls back to the plan within a few hours."""
FILL_PRIOR_WEIGHT = PRIOR_WEIGHT


def fill_ceiling(
    scenario: Scenario, error_level: Sequence[float], z: float, observed: int, *, mixed: bool = False
) -> np.ndarray | None:
    """How far :func:`fill_idle` may raise each app: ``ceil(demand * (1 + z * level))`` per slot.

    ``level`` mixes each app's relative forecast error observed over ``observed`` slots
    (:attr:`ClusterState.error_level`) with :data:`FILL_PRIOR` counted as :data:`FILL_PRIOR_WEIGHT`
    slots, as :class:`agents.live.Corrector`'s prior does. With an exact forecast the level falls
    towards 0 and little is raised above the plan: GPUs held by an app are shed only by its ramp and
    would keep the next jobs waiting. No error level given, or ``z`` infinite: no ceiling (``None``).

    With ``mixed`` the level is used as it is: it already mixes a prior (the live planner's error model,
    :meth:`agents.live.error_model.ErrorModel.level`, whose prior is the history's recorded error).
    """
    if not error_level or not math.isfinite(z):
        return None
    err = np.asarray(error_level, dtype=np.float64).reshape(-1, 1)
    if mixed:
        level = err
    else:
        level = np.sqrt((FILL_PRIOR_WEIGHT * FILL_PRIOR**2 + observed * err**2) / (FILL_PRIOR_WEIGHT + observed))
    return np.ceil(scenario.demand * (1.0 + z * level) - 1e-9).astype(np.int64)


def fill_idle(scenario: Scenario, plan: Plan, cap: np.ndarray | None = None) -> Plan:
    """The plan with each app's curve raised into the GPUs its jobs leave idle, the rules kept.

    An idle GPU given to a real-time app costs nothing in the slot it is given, and a live app's demand
    may come above its forecast: serving it from GPUs no job uses avoids the penalty. Apps are raised in
    :func:`gpu_env.objective.serving_order` (highest penalty first), each to the largest curve that fits
    in the capacity the plan's jobs and the other apps leave in every slot and that keeps its ramp from
    ``initial`` and between slots (:func:`gpu_env.rules.ramp_envelope`, the rules' own statement: a backward
    pass ``u[s] <= u[s+1] + R``, so that the plan's later slots can still be reached, and a forward pass
    ``u[s] <= u[s-1] + R``, ``u[0] <= initial + R``). The plan's own curve satisfies both, so the raised
    curve is never below it, and the plan stays valid.

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
        curves[app.name] = np.maximum(rules.ramp_envelope(u, app.initial, app.ramp), curves[app.name])
    lists = {name: [int(x) for x in curve] for name, curve in curves.items()}
    raised = Plan(plan.scenario, plan.scheduler, list(plan.placements), lists)
    raised.solve_ms = plan.solve_ms
    return raised
