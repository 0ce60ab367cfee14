"""The least-shortfall real-time curves of :func:`gpu_env.objective.realtime_curves`, for many episodes at once.

The apps are served one after another (the serving order may differ between
episodes, so the loop runs over positions in the order, not over episodes);
each :func:`gpu_env.rules.cover_curve` is a pair of Lipschitz envelopes over
the episode's own horizon, computed with a (T, T) distance table for all
episodes together. Integer arithmetic throughout, so the curves equal the
reference's exactly.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

_BIG = np.int64(1) << 40


@lru_cache(maxsize=16)
def _distances(slots: int) -> np.ndarray:
    t = np.arange(slots, dtype=np.int64)
    out = np.abs(t[:, None] - t[None, :])
    out.flags.writeable = False
    return out


def cover_curves(
    demand: np.ndarray, initial: np.ndarray, ramp: np.ndarray, cap: np.ndarray, inside: np.ndarray
) -> np.ndarray:
    """:func:`gpu_env.rules.cover_curve` with a cap, for n curves.

    Args:
        demand: (n, T) the curves to serve.
        initial: (n,) allocation before slot 0.
        ramp: (n,) R.
        cap: (n, T) per-slot upper bound.
        inside: (n, T) bool, slots inside each episode's horizon (the envelopes ignore the others).

    Returns:
        (n, T) int64 curves, 0 outside the horizon.
    """
    T = demand.shape[1]
    t = np.arange(T, dtype=np.int64)
    dist = _distances(T)[None] * ramp[:, None, None]  # (n, T, T): R * |t - s|
    upper = np.minimum(initial[:, None] + ramp[:, None] * (t + 1), cap)
    upper = (np.where(inside, upper, _BIG)[:, None, :] + dist).min(axis=2)
    target = np.minimum(demand, upper)
    floor = np.maximum(0, initial[:, None] - ramp[:, None] * (t + 1))
    low = (np.where(inside, np.maximum(target, floor), -_BIG)[:, None, :] - dist).max(axis=2)
    return np.where(inside, np.maximum(np.minimum(low, upper), 0), 0)


def realtime_curves(
    base: np.ndarray,
    initial: np.ndarray,
    ramp: np.ndarray,
    order: np.ndarray,
    floors: np.ndarray,
    gpus: np.ndarray,
    load: np.ndarray,
    inside: np.ndarray,
) -> np.ndarray:
    """:func:`gpu_env.objective.realtime_curves` for n episodes.

    Args:
        base: (n, A, T) base curves.
        initial: (n, A).
        ramp: (n, A).
        order: (n, A) serving order (padded apps, with zero curves, last).
        floors: (n, A, T) ramp floors.
        gpus: (n,) G.
        load: (n, T) GPUs held by jobs.
        inside: (n, T) bool slots inside the horizon.

    Returns:
        (n, A, T) int64 curves.
    """
    n, A, _ = base.shape
    curves = np.zeros_like(floors)
    free = gpus[:, None] - load
    rest = floors.sum(axis=1)
    ep = np.arange(n)
    for i in range(A):
        a = order[:, i]
        floor = floors[ep, a]
        rest = rest - floor
        cap = np.maximum(free - rest, floor)
        curve = cover_curves(base[ep, a], initial[ep, a], ramp[ep, a], cap, inside)
        curves[ep, a] = curve
        free = free - curve
    return curves


def shortfall_cost(curves: np.ndarray, demand: np.ndarray, penalty: np.ndarray) -> np.ndarray:
    """:func:`gpu_env.objective.shortfall_penalty` for n episodes, summed over apps in file order: (n,)."""
    short = np.maximum(0, demand - curves).sum(axis=2)  # (n, A)
    cost = np.zeros(curves.shape[0], dtype=np.float64)
    for a in range(curves.shape[1]):
        cost = cost + penalty[:, a] * short[:, a]
    return cost
