"""What a plan is worth (SPEC section 3), in one function."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from gpu_env.plan import Plan
from gpu_env.scenario import Job, Scenario


@dataclass(frozen=True)
class Metrics:
    """The metrics of SPEC section 3.

    Attributes:
        objective: ``job_value`` minus each app's penalty times its shortfall.
        job_value: Sum over placed jobs of ``w * k * decay**t`` for their slots inside the horizon.
        shortfall: Unserved real-time GPU-slots, ``sum max(0, D_t - r_t)``.
        utilization: (job GPU-slots inside the horizon + ``sum min(D_t, r_t)``) / (G * T).
        completed: Placed jobs that end by T.
        placed: Placed jobs.
        jobs: All jobs of the scenario.
    """

    objective: float
    job_value: float
    shortfall: int
    utilization: float
    completed: int
    placed: int
    jobs: int

    def to_dict(self) -> dict[str, float | int]:
        """Plain numbers, rounded for files."""
        data = asdict(self)
        for key in ("objective", "job_value"):
            data[key] = round(data[key], 6)
        data["utilization"] = round(data["utilization"], 6)
        return data


def placement_value(job: Job, start: int, scenario: Scenario) -> float:
    """What a job earns when it starts at ``start``: ``w * k * sum decay**t`` over its slots inside the horizon."""
    end = min(start + job.duration, scenario.slots)
    if end <= start:
        return 0.0
    weights = scenario.decay_weights[start:end]
    return float(job.weight * job.gpus * weights.sum())


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
    penalty = 0.0
    shortfall = 0
    served = 0
    for app in scenario.realtime:
        demand = np.asarray(app.demand, dtype=np.int64)
        r = plan.curve(app.name, scenario.slots)
        if r.size != demand.size:
            r = np.resize(r, demand.size) if r.size else np.zeros_like(demand)
        short = int(np.maximum(0, demand - r).sum())
        shortfall += short
        penalty += app.penalty * short
        served += int(np.minimum(demand, np.maximum(r, 0)).sum())
    return Metrics(
        objective=job_value - penalty,
        job_value=job_value,
        shortfall=shortfall,
        utilization=(held + served) / (scenario.gpus * scenario.slots),
        completed=completed,
        placed=len(placed_ids),
        jobs=len(scenario.jobs),
    )
