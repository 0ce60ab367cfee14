"""Sets of GPUs as arrays of uint64 words, for many episodes at once.

A set of GPUs of a cluster with at most ``64 * NW`` GPUs is an array whose last
axis holds ``NW`` words: GPU g is bit ``g % 64`` of word ``g // 64``. The
helpers here are the batched forms of the plain-int bitmasks of
:mod:`gpu_env.occupancy` and :mod:`gpu_env.episode`: every argument may carry
leading batch axes.
"""

from __future__ import annotations

import numpy as np

WORD = 64
_ONE = np.uint64(1)
# _PREFIX[n]: the lowest n bits set, n in 0..64.
_PREFIX = np.array([(1 << n) - 1 for n in range(WORD + 1)], dtype=np.uint64)
_BIT = np.arange(WORD, dtype=np.uint64)


def words_for(gpus: int) -> int:
    """Words needed for ``gpus`` GPUs (at least one)."""
    return max(1, -(-gpus // WORD))


def range_mask(lo: np.ndarray, hi: np.ndarray, nw: int) -> np.ndarray:
    """Bits ``lo..hi-1`` set (empty where ``hi <= lo``), shape ``lo.shape + (nw,)``.

    Args:
        lo: First bit, any shape (may be negative: clipped to 0).
        hi: One past the last bit, the same shape.
        nw: Words.
    """
    base = np.arange(nw, dtype=np.int64) * WORD
    lo = np.asarray(lo, dtype=np.int64)[..., None] - base
    hi = np.asarray(hi, dtype=np.int64)[..., None] - base
    top = _PREFIX[np.clip(hi, 0, WORD)]
    bottom = _PREFIX[np.clip(lo, 0, WORD)]
    return np.where(hi > lo, top & ~bottom, np.uint64(0))


def shift_down(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Bit ``a`` of the result is bit ``a + s`` of ``x`` (the int ``x >> s``), per set.

    Args:
        x: Sets, shape ``(..., nw)``.
        s: Shifts in ``0..64 * nw - 1``, shape ``(...)`` broadcastable to ``x.shape[:-1]``.
    """
    nw = x.shape[-1]
    s = np.asarray(s, dtype=np.int64)
    if nw == 1:
        return x >> s[..., None].astype(np.uint64)
    q, r = np.divmod(s, WORD)
    pad = np.concatenate([x, np.zeros(x.shape, dtype=np.uint64)], axis=-1)
    shape = (*np.broadcast_shapes(x.shape[:-1], s.shape), nw)
    index = np.broadcast_to(np.arange(nw, dtype=np.int64) + q[..., None], shape)
    pad = np.broadcast_to(pad, (*shape[:-1], 2 * nw))
    low = np.take_along_axis(pad, index, axis=-1)
    high = np.take_along_axis(pad, index + 1, axis=-1)
    r = r[..., None].astype(np.uint64)
    return (low >> r) | np.where(r > 0, high << (np.uint64(WORD) - r), np.uint64(0))


def grow_runs(free: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """Turn "GPU a is free" into "GPUs a..a+k-1 are free", with each set's shift sequence.

    Args:
        free: Sets, shape ``(..., nw)``.
        shifts: ``(..., L)`` shifts (``_block_search``'s, padded with 0, which changes nothing).
    """
    run = free
    for level in range(shifts.shape[-1]):
        step = shifts[..., level]
        if not step.any():
            continue
        run = run & shift_down(run, step)
    return run


def shift_table(k: int, width: int) -> list[int]:
    """The shifts that grow runs of 1 free GPU into runs of k, padded with zeros to ``width``.

    The same sequence as :func:`gpu_env.occupancy._block_search`: runs of 1, 2, 4, ... GPUs, then
    one overlapping step to k.
    """
    shifts, have = [], 1
    while 2 * have <= k:
        shifts.append(have)
        have *= 2
    if have < k:
        shifts.append(k - have)
    return shifts + [0] * (width - len(shifts))


def shift_levels(max_k: int) -> int:
    """How many shifts the largest job needs: the width of :func:`shift_table`."""
    return max(1, len(shift_table(max(1, max_k), 0)))


def any_set(x: np.ndarray) -> np.ndarray:
    """Whether each set is non-empty, shape ``x.shape[:-1]``."""
    return (x != 0).any(axis=-1)


def count(x: np.ndarray) -> np.ndarray:
    """Members of each set, shape ``x.shape[:-1]`` (int64)."""
    return np.bitwise_count(x).sum(axis=-1, dtype=np.int64)


def unpack(x: np.ndarray, gpus: int) -> np.ndarray:
    """Sets as bool arrays, shape ``x.shape[:-1] + (gpus,)``."""
    bits = (x[..., :, None] >> _BIT) & _ONE  # (..., nw, 64)
    return bits.reshape((*x.shape[:-1], x.shape[-1] * WORD))[..., :gpus].astype(bool)


def from_int(value: int, nw: int) -> np.ndarray:
    """A plain-int bitmask as ``(nw,)`` words."""
    return np.array([(value >> (WORD * w)) & ((1 << WORD) - 1) for w in range(nw)], dtype=np.uint64)
