"""What a plan is worth (SPEC section 3), each part stated once.

Every scheduler and the environment price plans with these functions:

* **Job value.** A job started at slot s earns ``w * k * decay**t`` for each of
  its slots t inside the horizon: :func:`placement_value` for one job and start
  (the definition, which :func:`gpu_env.metrics.compute_metrics` sums), and
  :func:`start_values` for every job and start at once (the table that the
  heuristic, the environment and the CP-SAT coefficients read).
* **Shortfall penalty.** ``P * max(0, D_t - r_t)`` summed over slots and apps:
  :func:`shortfall` per app and :func:`shortfall_penalty` in value units.
* **Serving the real-time apps under a job load.** :func:`realtime_curves`: the
  ramp-feasible curves with the least shortfall next to the jobs (highest
  penalty first, :func:`serving_order`; ramp floors from :func:`ramp_floors`).

The table and the single value are the same number computed two ways: the table
takes differences of a running sum of the decay weights (one vectorised step for
all jobs and starts), :func:`placement_value` sums the weights of the job's slots.
They agree to a few units in the last place, not bit for bit; each caller keeps
the form it has always used, so that every recorded objective stays the same to
the last digit (``tests/test_objective.py`` pins them).

>>> from gpu_env.generators import generate
>>> sc = generate("training-heavy", seed=0)
>>> table = start_values(sc)
>>> job = sc.jobs[0]
>>> bool(abs(table[0, 3] - placement_value(job, 3, sc)) < 1e-9)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from gpu_env import rules

if TYPE_CHECKING:
    from gpu_env.scenario import App, Job, Scenario


# ----------------------------------------------------------------------------- job value


def placement_value(job: Job, start: int, scenario: Scenario) -> float:
    """What a job earns when it starts at ``start``: ``w * k * sum decay**t`` over its slots inside the horizon."""
    end = min(start + job.duration, scenario.slots)
    if end <= start:
        return 0.0
    weights = scenario.decay_weights[start:end]
    return float(job.weight * job.gpus * weights.sum())


def start_values(scenario: Scenario, jobs: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """What each job earns at each start: :func:`placement_value` for every (job, start), vectorised.

    Args:
        scenario: The scenario.
        jobs: Indices of the jobs to tabulate, in the order of the rows; default every job in file order.

    Returns:
        (len(jobs), T + 1) float array: entry [i, s] is the value of job ``jobs[i]``
        started at slot s (its slots inside the horizon, decayed); column T is 0.
        Equal to :func:`placement_value` up to float rounding (differences of a
        running sum instead of a sum per start).
    """
    T = scenario.slots
    rows = range(len(scenario.jobs)) if jobs is None else [int(i) for i in jobs]
    picked = [scenario.jobs[i] for i in rows]
    duration = np.array([job.duration for job in picked], dtype=np.int64).reshape(-1, 1)
    rate = np.array([job.weight * job.gpus for job in picked], dtype=np.float64).reshape(-1, 1)
    cum = np.concatenate(([0.0], np.cumsum(scenario.decay_weights)))
    starts = np.arange(T + 1)
    return rate * (cum[np.minimum(starts + duration, T)] - cum[starts])


# ----------------------------------------------------------------------------- shortfall penalty


def shortfall(curves: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """Unserved GPU-slots of each app, ``sum_t max(0, D_t - r_t)``.

    Args:
        curves: (apps, T) real-time allocations r.
        demand: (apps, T) demand D.

    Returns:
        (apps,) int array.
    """
    return np.maximum(0, demand - curves).sum(axis=1)


def shortfall_penalty(curves: np.ndarray, demand: np.ndarray, penalty: np.ndarray) -> float:
    """The penalty of real-time curves: the sum over apps of ``P * max(0, D_t - r_t)`` over slots.

    Args:
        curves: (apps, T) real-time allocations r.
        demand: (apps, T) demand D.
        penalty: (apps,) P of each app.

    Returns:
        The penalty, summed over apps in order (0.0 without apps).
    """
    return float(sum((penalty * shortfall(curves, demand)).tolist()))


# ----------------------------------------------------------------------------- serving the real-time apps


def serving_order(apps: Sequence[App]) -> np.ndarray:
    """The order in which apps are served when capacity is short: highest penalty first, ties in file order."""
    return np.argsort(-np.array([app.penalty for app in apps], dtype=np.float64), kind="stable")


def ramp_floors(scenario: Scenario) -> np.ndarray:
    """(apps, T) the least allocation each app's ramp allows in each slot (:func:`gpu_env.rules.ramp_floor`)."""
    floors = [rules.ramp_floor(app.initial, app.ramp, scenario.slots) for app in scenario.apps]
    return np.array(floors, dtype=np.int64).reshape(len(scenario.apps), scenario.slots)


def realtime_curves(
    base: np.ndarray,
    apps: Sequence[App],
    order: Sequence[int] | np.ndarray,
    floors: np.ndarray,
    gpus: int,
    job_load: np.ndarray,
) -> np.ndarray:
    """Real-time curves that serve as much of ``base`` as a job load leaves room for, under the ramps.

    Apps are served in ``order``. Each gets :func:`gpu_env.rules.cover_curve` of
    its base curve under a cap: the GPUs the jobs and the apps served before it
    leave, less the ramp floors of the apps still to serve, and never below its
    own ramp floor. So every curve keeps rule 6; with the jobs they keep rule 7
    whenever ``job_load + sum(floors) <= gpus`` in every slot (where that fails,
    no valid plan holds this load, and the curves stay at their floors there).
    With one app the curve has the least shortfall any ramp-feasible curve under
    that load can have.

    Args:
        base: (apps, T) the curves to serve: the demand, or reference curves that keep rule 6.
        apps: The scenario's apps (initial allocation and ramp).
        order: (apps,) the serving order (:func:`serving_order`).
        floors: (apps, T) the ramp floors (:func:`ramp_floors`).
        gpus: G.
        job_load: (T,) GPUs held by jobs.

    Returns:
        (apps, T) int curves.
    """
    curves = np.zeros_like(floors)
    free = gpus - job_load  # GPUs the jobs and the apps served so far leave
    rest = floors.sum(axis=0)  # ramp floors of the apps still to serve, this one included
    for a in order:
        rest = rest - floors[a]
        cap = np.maximum(free - rest, floors[a])  # below its floor no curve keeps the ramp
        curves[a] = rules.cover_curve(base[a], apps[a].initial, apps[a].ramp, cap)
        free = free - curves[a]
    return curves


# ----------------------------------------------------------------------------- FIFO's reservation (SPEC section 4)


def peak_reservation(scenario: Scenario) -> np.ndarray:
    """FIFO's real-time curves, shape (apps, T).

    Each app moves from ``initial`` toward its daily peak ``M = max_t D_t`` by at
    most R a slot and then holds M. Where inherited jobs and the apps listed
    before it leave fewer GPUs free, its reservation is cut to what they leave,
    less the least the apps listed after it may hold in that slot (each its
    reservation of the slot before, ``initial`` before slot 0, less its ramp);
    the next slot ramps on from the reservation actually made. On a scenario
    the loader accepts (the apps' ``initial`` plus the inherited jobs fit the
    cluster) no cut takes an app below what its ramp allows: rule 6 holds, and
    wherever a cut leaves the later apps what they may hold the curves are
    those of the cut alone (SPEC section 4).
    """
    T = scenario.slots
    free = (scenario.gpus - rules.inherited_load(scenario)).tolist()
    peaks = [max(app.demand) for app in scenario.apps]
    ramps = [app.ramp for app in scenario.apps]
    held = [app.initial for app in scenario.apps]  # each app's reservation in the slot before
    curves = np.zeros((len(scenario.apps), T), dtype=np.int64)
    for t in range(T):
        floors = [max(0, r - ramp) for r, ramp in zip(held, ramps, strict=True)]
        later = sum(floors)  # the least the apps not yet served hold in slot t
        left = int(free[t])  # GPUs the inherited jobs and the apps served so far leave in slot t
        for i, (peak, ramp) in enumerate(zip(peaks, ramps, strict=True)):
            later -= floors[i]
            r = held[i]
            r = min(r + ramp, peak) if r < peak else max(r - ramp, peak)
            r = max(0, min(r, left - later))
            held[i] = r
            left -= r
        curves[:, t] = held
    return curves
