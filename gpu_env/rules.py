"""The rules of SPEC section 2, stated once.

Every other part of the project asks these functions (or :class:`gpu_env.occupancy.Occupancy`,
which is built on them) whether a block, a start or a real-time curve is allowed:
the validator, FIFO, the heuristic, the environment's masks and the CP-SAT model.
Each rule has a member of :class:`Rule`; checks and constraints are keyed by it.
"""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

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


# ----------------------------------------------------------------------------- rule 4: blocks


@lru_cache(maxsize=4096)
def _block_starts(k: int, gpus: int, node_size: int) -> tuple[int, ...]:
    if k > gpus:
        return ()
    if k > node_size:
        return tuple(a for a in range(0, gpus - k + 1, node_size))
    return tuple(a for a in range(gpus - k + 1) if a // node_size == (a + k - 1) // node_size)


def allowed_block_starts(k: int, gpus: int, node_size: int) -> np.ndarray:
    """First GPUs ``a`` of every block ``a..a+k-1`` that rule 4 allows, ascending.

    A block of ``k <= node_size`` GPUs lies inside one node; a larger one starts on
    a node boundary.
    """
    return np.array(_block_starts(k, gpus, node_size), dtype=np.int64)


@lru_cache(maxsize=4096)
def allowed_block_mask(k: int, gpus: int, node_size: int) -> int:
    """:func:`allowed_block_starts` as a bitmask: bit ``a`` set for every allowed first GPU ``a``."""
    mask = 0
    for a in _block_starts(k, gpus, node_size):
        mask |= 1 << a
    return mask


def is_allowed_block(first: int, k: int, gpus: int, node_size: int) -> bool:
    """Whether the block ``first..first+k-1`` is allowed by rule 4."""
    if first < 0 or first + k > gpus:
        return False
    if k > node_size:
        return first % node_size == 0
    return first // node_size == (first + k - 1) // node_size


def block_problem(block: list[int] | tuple[int, ...], k: int, gpus: int, node_size: int) -> str | None:
    """Why a list of GPUs is not an allowed block for a job of ``k`` GPUs, or None when it is."""
    if len(block) != k:
        return f"expected {k} GPUs (the job's size), got {len(block)}"
    if any(g < 0 or g >= gpus for g in block):
        return f"GPUs must lie in 0..{gpus - 1}, got {list(block)}"
    if list(block) != list(range(block[0], block[0] + k)):
        return f"expected consecutive ascending GPUs, got {list(block)}"
    if not is_allowed_block(block[0], k, gpus, node_size):
        if k > node_size:
            return f"a block of {k} > node_size={node_size} GPUs must start on a node boundary, got {block[0]}"
        return f"a block of {k} <= node_size={node_size} GPUs must lie inside one node, got {list(block)}"
    return None


def blocks_meet(a: int, k_a: int, b: int, k_b: int) -> bool:
    """Rule 1: whether the blocks ``a..a+k_a-1`` and ``b..b+k_b-1`` share a GPU (then they may not overlap in time)."""
    return a < b + k_b and b < a + k_a


def starts_clear_of(candidates: int, others: int, k_other: int, k: int) -> int:
    """Of the first GPUs in ``candidates`` (a bitmask) of k-GPU blocks, those that leave one block of ``others`` free.

    ``others`` is a non-empty bitmask of first GPUs of k_other-GPU blocks (for example the blocks a reserved job
    may still take). A block from ``b`` leaves one of them untouched (:func:`blocks_meet`) exactly when the
    lowest of them ends by ``b`` or the highest starts at ``b + k`` or later.
    """
    lowest, highest = (others & -others).bit_length() - 1, others.bit_length() - 1
    above = ~((1 << (lowest + k_other)) - 1)  # b >= lowest + k_other
    below = (1 << (highest - k + 1)) - 1 if highest >= k else 0  # b <= highest - k
    return candidates & (above | below)


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


# ----------------------------------------------------------------------------- rules 1, 5 and 7 on inherited work


def inherited_load(scenario: Scenario) -> np.ndarray:
    """GPUs held by inherited (``running_on``) jobs in each slot, shape (T,)."""
    load = np.zeros(scenario.slots, dtype=np.int64)
    for job in scenario.jobs:
        if job.running_on is not None:
            load[: min(job.duration, scenario.slots)] += job.gpus
    return load


def inherited_conflict(scenario: Scenario) -> tuple[str, str] | None:
    """A (field, reason) pair when the inherited work alone makes every plan invalid, or no state before slot 0 exists.

    Two running jobs on one GPU break rule 1. The inherited jobs hold their GPUs before slot 0 as in it, and
    each app holds its ``initial`` there: together they may not exceed the cluster (SPEC section 1), and the
    field named is the ``initial`` of the first app (in file order) that takes them past it. That also
    keeps rule 7 within reach in every slot: the least allocation the ramps allow never exceeds ``initial``
    and the inherited load never grows, so each slot's floors fit beside the inherited jobs (and a plan
    exists that keeps every rule, FIFO's among them: :func:`gpu_env.objective.peak_reservation`).
    """
    owner: dict[int, str] = {}
    for i, job in enumerate(scenario.jobs):
        if job.running_on is None:
            continue
        for g in job.running_on:
            if g in owner:
                return f"jobs[{i}].running_on", f"GPU {g} is already held by running job {owner[g]!r}"
            owner[g] = job.id
    held = len(owner)
    for i, app in enumerate(scenario.apps):
        held += app.initial
        if held > scenario.gpus:
            initial = sum(a.initial for a in scenario.apps)
            return (
                f"realtime[{i}].initial",
                f"the apps' initial GPUs ({initial}) plus the inherited jobs' GPUs ({len(owner)}) exceed the "
                f"cluster's {scenario.gpus} before slot 0",
            )
    return None
