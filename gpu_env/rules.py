"""The rules of SPEC section 2, stated once.

Every other part of the project asks these functions (or :class:`gpu_env.occupancy.Occupancy`,
which is built on them) whether a block, a start or a real-time curve is allowed:
the validator, FIFO, the heuristic, the environment's masks and the CP-SAT model.
Each rule has a member of :class:`Rule`; checks and constraints are keyed by it.

Rule 4 (the blocks a job may hold) needs only the cluster's sizes and is stated in :mod:`gpu_env.blocks`, which
the scenario's own check uses too; its functions are here under the same names (``rules.allowed_block_starts``).
Whether inherited work alone breaks the rules is the scenario's check (:func:`gpu_env.scenario.inherited_conflict`).
"""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from gpu_env.blocks import (  # noqa: F401 - rule 4, given here under the same names
    allowed_block_mask,
    allowed_block_starts,
    block_problem,
    blocks_meet,
    is_allowed_block,
    starts_clear_of,
)

if TYPE_CHECKING:
    from gpu_env.scenario import Job, Scenario


class Rule(StrEnum):
    """The validity rules of a plan, numbered as in SPEC section 2."""

    ONE_JOB_PER_GPU = "1-one-job-per-gpu"
    NO_PREEMPTION = "2-no-preemption"
    RELEASE_HORIZON_DEADLINE = "3-release-horizon-deadline"
    CONTIGUOUS_BLOCK = "4-contiguous-block"
    INHERITED_HELD = "5-inherited-held"
    REALTIME_RAMP = "6-realtime-ramp"
    CAPACITY = "7-capacity"
    PLAN_FORMAT = "0-plan-format"  # names a job or app the scenario lacks, or a curve of the wrong length


# ----------------------------------------------------------------------------- rules 3 and 5: starts


def start_window(job: Job, slots: int) -> range:
    """The starts that rules 3 and 5 allow for a job (possibly empty).

    Inherited jobs start at 0. Others start in ``release..T-1`` and, with a
    deadline, no later than ``deadline - d``.
    """
    if job.running_on is not None:
        return range(0, 1)
    last = slots - 1
    if job.deadline is not None:
        last = min(last, job.deadline - job.duration)
    return range(job.release, last + 1)


# ----------------------------------------------------------------------------- rule 6: ramps


def ramp_problems(curve: np.ndarray | list[int], initial: int, ramp: int) -> list[int]:
    """Slots t where ``|r_t - r_{t-1}| > R`` (with ``r_{-1} = initial``)."""
    r = np.asarray(curve, dtype=np.int64)
    steps = np.abs(np.diff(np.concatenate(([initial], r))))
    return [int(t) for t in np.flatnonzero(steps > ramp)]


def ramp_floor(initial: int, ramp: int, slots: int) -> np.ndarray:
    """The least allocation the ramp allows in each slot: ``max(0, initial - R * (t + 1))``."""
    return np.maximum(0, initial - ramp * (np.arange(slots) + 1))


def ramp_ceiling(initial: int, ramp: int, slots: int) -> np.ndarray:
    """The most allocation the ramp allows in each slot: ``initial + R * (t + 1)``."""
    return initial + ramp * (np.arange(slots) + 1)


def ramp_envelope(cap: np.ndarray | list[int], initial: int, ramp: int) -> np.ndarray:
    """The largest curve under ``cap`` that keeps the ramp from ``initial`` and between slots.

    That is the pointwise largest ``c`` with ``c <= cap``, ``|c[s] - c[s-1]| <= R`` and
    ``c[0] <= initial + R``: ``c[t] = min(initial + R*(t + 1), min_s(cap[s] + R*|t - s|))``, what a
    backward pass (``c[s] <= c[s+1] + R``) then a forward pass (``c[s] <= c[s-1] + R``,
    ``c[0] <= initial + R``) give. Every curve under ``cap`` that keeps rule 6 lies under it, so when one
    exists (``cap`` is above some ramp-feasible curve) the envelope keeps rule 6 itself; when none does,
    its ``c[0]`` falls more than R below ``initial`` (the way down from ``initial`` is not this function's
    to enforce).

    >>> ramp_envelope([9, 9, 1, 9, 9], initial=2, ramp=2).tolist()
    [4, 3, 1, 3, 5]

    Args:
        cap: The ceiling per slot, shape (T,).
        initial: The allocation in the slot before slot 0.
        ramp: R, the largest change from one slot to the next.

    Returns:
        An int64 array of shape (T,).
    """
    c = np.asarray(cap, dtype=np.int64)
    return _lipschitz_envelope(np.minimum(c, ramp_ceiling(initial, ramp, c.size)), ramp, lower=False)


def cover_curve(demand: np.ndarray | list[int], initial: int, ramp: int, cap: np.ndarray | None = None) -> np.ndarray:
    """The least ramp-feasible allocation that serves as much demand as possible.

    Without ``cap`` this is ``r_t = max_s(D_s - R*|t - s|)`` raised to the ramp
    floor and clipped to the ramp ceiling: it ramps up early enough for every
    peak and comes down as fast as allowed afterwards. With ``cap`` (a per-slot
    upper bound), the curve is additionally held under ``cap`` while keeping the
    ramp, lowering earlier slots where a later cap forces it.

    Returns:
        An int array of shape (T,) that satisfies rule 6.
    """
    d = np.asarray(demand, dtype=np.int64)
    slots = d.size
    upper = ramp_ceiling(initial, ramp, slots)
    if cap is not None:
        # A cap binds earlier slots too: r_t <= cap_s + R*|t-s|.
        upper = ramp_envelope(np.broadcast_to(np.asarray(cap, dtype=np.int64), d.shape), initial, ramp)
    target = np.minimum(d, upper)
    low = _lipschitz_envelope(np.maximum(target, ramp_floor(initial, ramp, slots)), ramp, lower=True)
    return np.maximum(np.minimum(low, upper), 0)


@lru_cache(maxsize=64)
def _distances(slots: int) -> np.ndarray:
    """``|t - s|`` for all slot pairs, shape (T, T), read-only."""
    t = np.arange(slots, dtype=np.int64)
    out = np.abs(t[:, None] - t[None, :])
    out.flags.writeable = False
    return out


def _lipschitz_envelope(x: np.ndarray, ramp: int, lower: bool) -> np.ndarray:
    """Smallest R-Lipschitz curve above x (``lower=True``) or largest below x (``lower=False``).

    That is ``max_s(x_s - R*|t - s|)`` (or ``min_s(x_s + R*|t - s|)``): one
    vectorised step for day-length horizons, two scalar passes for long ones.
    """
    x = np.asarray(x, dtype=np.int64)
    if x.size <= 256:
        if lower:
            return (x[None, :] - ramp * _distances(x.size)).max(axis=1, initial=np.iinfo(np.int64).min)
        return (x[None, :] + ramp * _distances(x.size)).min(axis=1, initial=np.iinfo(np.int64).max)
    y = x.tolist()  # plain ints: the passes below are scalar loops
    step = -ramp if lower else ramp
    pick = max if lower else min
    for t in range(1, len(y)):  # forward pass
        y[t] = pick(y[t], y[t - 1] + step)
    for t in range(len(y) - 2, -1, -1):  # backward pass
        y[t] = pick(y[t], y[t + 1] + step)
    return np.array(y, dtype=np.int64)


# ----------------------------------------------------------------------------- rule 7: capacity


def free_capacity(gpus: int, held: np.ndarray | int, reserved: np.ndarray | int) -> np.ndarray | int:
    """GPUs a new job may use in a slot (or in each slot).

    The cluster's ``gpus`` less those ``held`` by jobs and those ``reserved`` for real-time apps (their
    curves, or their ramp floors where a placement may lower the curves).
    """
    return gpus - held - reserved


def short_slots(room: np.ndarray | list[int], k: np.ndarray | int) -> np.ndarray:
    """Where a job of ``k`` GPUs may not run by rule 7: the slots whose free capacity ``room`` is under k.

    ``k`` may be an array (for example of shape (n, 1), one job a row) that broadcasts against ``room``.
    """
    return np.asarray(room) < k


def fits_capacity(room: list[int], k: int, start: int, d: int) -> bool:
    """Rule 7 for one span: ``room`` covers k GPUs in every slot of ``[start, start + d)`` inside the horizon.

    ``room`` is the free capacity of each slot of the horizon (:func:`free_capacity`); plain ints answer fastest.
    """
    return min(room[start : start + d], default=k) >= k


# ----------------------------------------------------------------------------- rules 5 and 7: inherited work


def inherited_load(scenario: Scenario) -> np.ndarray:
    """GPUs held by inherited (``running_on``) jobs in each slot, shape (T,)."""
    load = np.zeros(scenario.slots, dtype=np.int64)
    for job in scenario.jobs:
        if job.running_on is not None:
            load[: min(job.duration, scenario.slots)] += job.gpus
    return load
