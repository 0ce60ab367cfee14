"""FIFO, exactly as SPEC section 4 defines it: the seed's baseline, reproducible to the GPU-slot."""

from __future__ import annotations

from agents.options import PlanOptions
from gpu_env.objective import peak_reservation as peak_reservation  # FIFO's reservation; re-exported here
from gpu_env.occupancy import Occupancy
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario


def plan(scenario: Scenario, options: PlanOptions | None = None) -> Plan:
    """Reserve real-time capacity at the peak, then place jobs in arrival order at their earliest start."""
    grid = Occupancy(scenario)
    for i, curve in enumerate(peak_reservation(scenario)):
        grid.set_curve(i, curve)
    grid.place_inherited()
    order = sorted(
        (i for i, job in enumerate(scenario.jobs) if job.running_on is None),
        key=lambda i: (scenario.jobs[i].release, i),
    )
    for i in order:
        spot = grid.earliest(scenario.jobs[i])
        if spot is not None:
            grid.place(i, *spot)
    return Plan.from_occupancy(grid, "fifo")
