"""A cheap proven upper bound on the optimum objective: the time-indexed LP relaxation, certified by its dual.

The relaxation
--------------
Drop rule 1 (one job per GPU), rule 4 (contiguous blocks) and integrality, keep
rule 7 (capacity per slot), rule 3 (allowed starts), rule 5 (inherited work) and
rule 6 (ramps). What remains is a linear program over ``x[j, s] in [0, 1]`` (job j
starts at s, at most one start each), curves ``r[a, t]`` and shortfalls ``y[a, t]``:

    maximise  sum v[j, s] x[j, s] - sum P_a y[a, t]
    s.t.      sum_j k_j sum_{s <= t < s + d_j} x[j, s] + sum_a r[a, t] <= G - inherited_t   (t < T)
              |r[a, t] - r[a, t-1]| <= R_a,  y[a, t] >= D[a, t] - r[a, t],  y >= 0

It is the LP that CP-SAT's time-indexed model (slot rows on start literals)
starts from, solved here by GLOP in well under a second at 1,024 GPUs where the
whole CP-SAT model does not finish its root in 30 s.

The certificate
---------------
The LP solver's number is not trusted as such. Its duals ``pi_t >= 0`` of the
capacity rows are plugged into the Lagrangian dual function, evaluated exactly:

    L(pi) = sum_{t<T} pi_t (G - inherited_t) + inherited value
            + sum_j max(0, max_s (v[j, s] - k_j * sum_{t in [s, s + d_j), t < T} pi_t))
            + sum_a max over ramp-feasible integer curves r in [0, G] of sum_t (-P_a max(0, D_t - r_t) - pi_t r_t)

**Claim: for every pi >= 0, L(pi) >= the objective of every valid plan.** Proof:
take a valid plan; by rule 7 its slack ``G - inherited_t - load_t - sum_a r_t`` is
>= 0 in every slot t < T, so adding ``sum_t pi_t * slack_t`` to its objective does
not lower it. Regroup the sum: each placed job contributes ``v[j, s] - k_j sum pi_t``
over its slots inside the horizon, at most the job's term of L (which may also
choose 0, for an unplaced job); each app contributes its curve's penalty and
``-pi_t r_t``, at most the app's maximum over all ramp-feasible curves (the plan's
curve is one, by rule 6; any curve in [0, G] is allowed in the maximum). The
constant terms are equal. So objective <= L(pi). Weak duality needs no
optimality of the LP, only ``pi >= 0``: a wrong or inexact dual gives a weaker
bound, never an invalid one. With the LP's optimal duals L(pi) equals the LP
optimum (strong duality), up to the solver's tolerance.

The app's maximum is a dynamic programme over the allocation value
(``0..G``) slot by slot, each step a sliding-window minimum of width ``2R + 1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpu_env import rules
from gpu_env.objective import start_values
from gpu_env.scenario import Scenario


@dataclass(frozen=True)
class Bound:
    """A proven upper bound and where it came from.

    Attributes:
        value: The bound (objective units).
        source: ``"lp-dual"`` (this module), ``"cpsat"`` (CP-SAT's bound on the whole model) or ``"plan"``
            (a plan proved optimal).
        lp: The LP optimum GLOP reported (None when the LP was not solved); ``value`` is the certified one.
        seconds: Time to compute it.
    """

    value: float
    source: str
    lp: float | None = None
    seconds: float = 0.0


def lagrangian_bound(scenario: Scenario, prices: np.ndarray) -> float:
    """``L(prices)`` of the module docstring: an upper bound on every valid plan's objective for any prices >= 0.

    Args:
        scenario: The problem.
        prices: (T,) price of one GPU in each slot; negative entries are read as 0.

    Returns:
        The bound.
    """
    T, G = scenario.slots, scenario.gpus
    pi = np.maximum(np.asarray(prices, dtype=np.float64).reshape(T), 0.0)
    inherited = rules.inherited_load(scenario)
    total = float((pi * (G - inherited)).sum())
    values = start_values(scenario)
    cum = np.concatenate(([0.0], np.cumsum(pi)))
    for j, job in enumerate(scenario.jobs):
        window = rules.start_window(job, T)
        if job.running_on is not None:
            total += float(values[j, 0])
            continue
        if not len(window):
            continue
        starts = np.arange(window.start, window.stop)
        cost = job.gpus * (cum[np.minimum(starts + job.duration, T)] - cum[starts])
        total += max(0.0, float((values[j, starts] - cost).max()))
    for app in scenario.apps:
        total -= _least_curve_cost(np.asarray(app.demand), app.initial, app.ramp, app.penalty, pi, G)
    return total


def _least_curve_cost(demand: np.ndarray, initial: int, ramp: int, penalty: float, pi: np.ndarray, gpus: int) -> float:
    """``min over ramp-feasible integer curves r in [0, G] of sum_t P max(0, D_t - r_t) + pi_t r_t``."""
    levels = np.arange(gpus + 1, dtype=np.float64)
    reach = np.where(np.abs(levels - initial) <= ramp, 0.0, math.inf)  # r_0 within R of the initial allocation
    best = reach
    for t in range(len(demand)):
        if t > 0:
            reach = _window_min(best, ramp)
        best = reach + penalty * np.maximum(0.0, demand[t] - levels) + pi[t] * levels
    return float(best.min())


def _window_min(x: np.ndarray, radius: int) -> np.ndarray:
    """``y[v] = min(x[v - radius .. v + radius])`` (clipped at the ends), by doubling windows."""
    n = x.size
    radius = min(radius, n - 1)
    if radius <= 0:
        return x.copy()
    width = 2 * radius + 1
    padded = np.concatenate((np.full(radius, math.inf), x, np.full(radius, math.inf)))
    # m holds min over windows of length `span` starting at each index.
    m, span = padded.copy(), 1
    while 2 * span <= width:
        m = np.minimum(m[:-span], m[span:])
        span *= 2
    # A window of `width` is the union of two windows of `span` (overlapping).
    left = m[:n]
    right = m[width - span : width - span + n]
    return np.minimum(left, right)


def lp_bound(scenario: Scenario) -> Bound:
    """Solve the time-indexed LP relaxation with GLOP and certify it with :func:`lagrangian_bound`.

    Returns:
        The certified bound (source ``"lp-dual"``); its ``lp`` is GLOP's own optimum.
        When GLOP fails, the bound of prices 0 (every job at its best start, every app
        served in full): still valid, only weaker.
    """
    import time

    from ortools.linear_solver import pywraplp

    started = time.perf_counter()
    T, G = scenario.slots, scenario.gpus
    solver = pywraplp.Solver.CreateSolver("GLOP")
    inherited = rules.inherited_load(scenario)
    rows = [solver.Constraint(-solver.infinity(), float(G - inherited[t]), f"cap{t}") for t in range(T)]
    objective = solver.Objective()
    values = start_values(scenario)
    for j, job in enumerate(scenario.jobs):
        if job.running_on is not None:
            continue
        window = rules.start_window(job, T)
        if not len(window):
            continue
        one = solver.Constraint(0.0, 1.0, f"one{j}")
        for s in window:
            x = solver.NumVar(0.0, 1.0, f"x{j}_{s}")
            one.SetCoefficient(x, 1.0)
            objective.SetCoefficient(x, float(values[j, s]))
            for t in range(s, min(s + job.duration, T)):
                rows[t].SetCoefficient(x, float(job.gpus))
    for i, app in enumerate(scenario.apps):
        previous: object = None
        for t in range(T):
            r = solver.NumVar(0.0, float(G), f"r{i}_{t}")
            y = solver.NumVar(0.0, float(app.demand[t]), f"y{i}_{t}")
            rows[t].SetCoefficient(r, 1.0)
            cover = solver.Constraint(float(app.demand[t]), solver.infinity(), f"cover{i}_{t}")
            cover.SetCoefficient(r, 1.0)
            cover.SetCoefficient(y, 1.0)
            objective.SetCoefficient(y, -float(app.penalty))
            ramp = solver.Constraint(-float(app.ramp), float(app.ramp), f"ramp{i}_{t}")
            ramp.SetCoefficient(r, 1.0)
            if previous is None:
                ramp.SetBounds(float(app.initial - app.ramp), float(app.initial + app.ramp))
            else:
                ramp.SetCoefficient(previous, -1.0)
            previous = r
    objective.SetMaximization()
    code = solver.Solve()
    if code == pywraplp.Solver.OPTIMAL:
        prices = np.array([abs(row.dual_value()) for row in rows])
        lp = objective.Value() + float(sum(values[j, 0] for j, job in enumerate(scenario.jobs) if job.running_on))
    else:
        prices, lp = np.zeros(T), None
    value = lagrangian_bound(scenario, prices)
    return Bound(value, "lp-dual", lp, time.perf_counter() - started)
