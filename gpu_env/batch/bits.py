"""Sets of GPUs as arrays of uint64 words: the layout of the batched engine's GPU sets.

A set of GPUs of a cluster with at most ``64 * NW`` GPUs is an array whose last
axis holds ``NW`` words: GPU g is bit ``g % 64`` of word ``g // 64``. The
helpers here build a start's sets from the plain-int bitmasks of
:mod:`gpu_env.occupancy` and :mod:`gpu_env.episode`; the kernels
(:mod:`gpu_env.batch.kernels`) work on the words.
"""

from __future__ import annotations

import numpy as np

from gpu_env.occupancy import block_shifts

WORD = 64


def words_for(gpus: int) -> int:
    """Words needed for ``gpus`` GPUs (at least one)."""
    return max(1, -(-gpus // WORD))


def shift_table(k: int, width: int) -> list[int]:
    """:func:`gpu_env.occupancy.block_shifts` of k as a list, padded with zeros to ``width``."""
    shifts = list(block_shifts(k))
    return shifts + [0] * (width - len(shifts))


def shift_levels(max_k: int) -> int:
    """How many shifts the largest job needs: the width of :func:`shift_table`."""
    return max(1, len(shift_table(max(1, max_k), 0)))


def from_int(value: int, nw: int) -> np.ndarray:
    """A plain-int bitmask as ``(nw,)`` words."""
    return np.array([(value >> (WORD * w)) & ((1 << WORD) - 1) for w in range(nw)], dtype=np.uint64)
