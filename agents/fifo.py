"""FIFO, exactly as SPEC section 4 defines it: the seed's baseline, reproducible to the GPU-slot."""

from __future__ import annotations

import numpy as np

from agents.options import PlanOptions
from gpu_env import rules
from gpu_env.occupancy import Occupancy
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario


def peak_reservation(scenario: Scenario) -> np.ndarray:
    """FIFO's real-time curves, shape (apps, T).

    Each app moves from ``initial`` toward its daily peak ``M = max_t D_t`` by at
    most R a slot and then holds M. Where inherited jobs and the apps listed
    before it leave fewer GPUs free, its reservation is cut to what they leave;
    the next slot ramps on from the reservation actually made.
    """
    T = scenario.slots
    free = scenario.gpus - rules.inherited_load(scenario)
    curves = np.zeros((len(scenario.apps), T), dtype=np.int64)
    for i, app in enumerate(scenario.apps):
        peak = max(app.demand)
        r = app.initial
        for t in range(T):
            r = min(r + app.ramp, peak) if r < peak else max(r - app.ramp, peak)
            r = max(0, min(r, int(free[t])))
            curves[i, t] = r
        free = free - curves[i]
    return curves


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
