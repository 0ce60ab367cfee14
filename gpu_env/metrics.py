"""What a plan is worth (SPEC section 3), in one function built on :mod:`gpu_env.objective`."""

from __future__ import annotations

import numpy as np

from gpu_env.objective import placement_value, shortfall, shortfall_penalty
from gpu_env.plan import Metrics, Plan  # Metrics: the record a plan carries, defined there
from gpu_env.scenario import Scenario

__all__ = ["Metrics", "compute_metrics", "placement_value"]


def compute_metrics(scenario: Scenario, plan: Plan) -> Metrics:
    """The metrics of a plan; placements of unknown jobs are ignored (the validator reports them)."""
    job_value = 0.0
    held = 0
    completed = 0
    placed_ids: set[str] = set()
    for p in plan.placements:
        index = scenario.job_index(p.job)
        if index < 0 or p.job in placed_ids:
            continue
        placed_ids.add(p.job)
        job = scenario.jobs[index]
        job_value += placement_value(job, p.start, scenario)
        held += job.gpus * max(0, min(p.start + job.duration, scenario.slots) - max(p.start, 0))
        completed += int(p.start + job.duration <= scenario.slots)
    T = scenario.slots
    curves = np.zeros((len(scenario.apps), T), dtype=np.int64)
    for a, app in enumerate(scenario.apps):
        r = plan.curve(app.name, T)
        if r.size != T:  # a malformed plan (the validator reports it): repeat or pad to the horizon
            r = np.resize(r, T) if r.size else np.zeros(T, dtype=np.int64)
        curves[a] = r
    demand = scenario.demand
    penalty = shortfall_penalty(curves, demand, np.array([app.penalty for app in scenario.apps], dtype=np.float64))
    served = int(np.minimum(demand, np.maximum(curves, 0)).sum())
    return Metrics(
        objective=job_value - penalty,
        job_value=job_value,
        shortfall=int(shortfall(curves, demand).sum()),
        utilization=(held + served) / (scenario.gpus * scenario.slots),
        completed=completed,
        placed=len(placed_ids),
        jobs=len(scenario.jobs),
    )
