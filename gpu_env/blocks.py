"""Rule 4 of SPEC section 2, stated once: the blocks of GPUs a job may hold (and, rule 1, when two blocks meet).

A block of ``k`` GPUs is ``a..a+k-1``: one of ``k <= node_size`` GPUs lies inside one node, a larger one starts on
a node boundary. These functions need only the cluster's sizes, not a scenario, so the scenario's own check (an
inherited job's ``running_on``, :mod:`gpu_env.scenario`) uses them, and :mod:`gpu_env.rules` gives them with the
other rules under the same names (``rules.allowed_block_starts``, ``rules.block_problem``, ...).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


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
