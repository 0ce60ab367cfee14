"""The FIT placement rules (``first``, ``best``, ``last``) on sets of feasible first GPUs, batched.

The batched form of :func:`gpu_env.episode._fit_choices`: the feasible first
GPUs of a row come in groups (runs of consecutive first GPUs, split at node
boundaries); a block's waste is its group's length less one (0 for blocks
wider than a node); ``best`` is the first GPU of the first shortest group.
"""

from __future__ import annotations

import numpy as np

from gpu_env.batch import bits

_ZERO = np.uint64(0)


def lowest(x: np.ndarray) -> np.ndarray:
    """Index of the lowest member of each set, -1 when empty; ``x`` is ``(..., nw)``."""
    low = x & (~x + np.uint64(1))
    ctz = np.bitwise_count(low - np.uint64(1)).astype(np.int64)  # per word; 64 for an empty word
    if x.shape[-1] == 1:
        return np.where(x[..., 0] != 0, ctz[..., 0], -1)
    nonzero = x != 0
    word = np.argmax(nonzero, axis=-1)
    found = np.take_along_axis(ctz, word[..., None], axis=-1)[..., 0] + bits.WORD * word
    return np.where(nonzero.any(axis=-1), found, -1)


def highest(x: np.ndarray) -> np.ndarray:
    """Index of the highest member of each set, -1 when empty."""
    smear = x
    for s in (1, 2, 4, 8, 16, 32):
        smear = smear | (smear >> np.uint64(s))
    top = np.bitwise_count(smear).astype(np.int64) - 1  # per word; -1 for an empty word
    if x.shape[-1] == 1:
        return top[..., 0]
    nonzero = x != 0
    nw = x.shape[-1]
    word = nw - 1 - np.argmax(nonzero[..., ::-1], axis=-1)
    found = np.take_along_axis(top, word[..., None], axis=-1)[..., 0] + bits.WORD * word
    return np.where(nonzero.any(axis=-1), found, -1)


def node_masks(node: np.ndarray, gpus: int, nw: int) -> tuple[np.ndarray, np.ndarray]:
    """(first GPUs of nodes, last GPUs of nodes) as sets, for node sizes ``node`` (any shape)."""
    g = np.arange(gpus, dtype=np.int64)
    node = np.asarray(node, dtype=np.int64)[..., None]
    starts = _pack(g % node == 0, nw)
    ends = _pack((g + 1) % node == 0, nw)
    return starts, ends


def _pack(flags: np.ndarray, nw: int) -> np.ndarray:
    """Bool ``(..., G)`` as sets ``(..., nw)``."""
    G = flags.shape[-1]
    full = np.zeros((*flags.shape[:-1], nw * bits.WORD), dtype=np.uint64)
    full[..., :G] = flags
    weights = np.uint64(1) << np.arange(bits.WORD, dtype=np.uint64)
    return (full.reshape((*flags.shape[:-1], nw, bits.WORD)) * weights).sum(axis=-1, dtype=np.uint64)


def shift_up(x: np.ndarray, s: int) -> np.ndarray:
    """Bit ``a + s`` of the result is bit ``a`` of ``x`` (the int ``x << s``) for a small constant s < 64."""
    if s == 0:
        return x
    out = x << np.uint64(s)
    if x.shape[-1] > 1:
        out[..., 1:] |= x[..., :-1] >> np.uint64(bits.WORD - s)
    return out


def choices(
    at: np.ndarray, wide: np.ndarray, node_starts: np.ndarray, node_ends: np.ndarray, max_node: int
) -> np.ndarray:
    """(first GPU, waste) of each fit rule in turn, for n sets of feasible first GPUs.

    Args:
        at: (n, nw) non-empty sets of feasible first GPUs.
        wide: (n,) bool, the job is wider than a node.
        node_starts: (n, nw) first GPUs of the nodes (:func:`node_masks`).
        node_ends: (n, nw) last GPUs of the nodes.
        max_node: The largest node size among the episodes (groups are at most this long).

    Returns:
        (n, 6) int64: first, first waste, best, best waste, last, last waste
        (the layout of ``Episode.fit_table``).
    """
    n = at.shape[0]
    first = lowest(at)
    last = highest(at)
    starts = at & (~shift_up(at, 1) | node_starts)  # a group begins: no member just below, or a node starts
    ends = at & (~bits.shift_down(at, np.ones(n, dtype=np.int64)) | node_ends)
    first_len = lowest(ends) - first + 1
    last_len = last - highest(starts) + 1
    # The shortest group: its start s has its first end at s + L - 1; try L = 1, 2, ...
    best = np.full(n, -1, dtype=np.int64)
    best_len = np.zeros(n, dtype=np.int64)
    open_ = starts.copy()  # group starts whose end is not found yet
    for length in range(1, max_node + 1):
        ended = open_ & bits.shift_down(ends, np.full(n, length - 1, dtype=np.int64))
        hit = bits.any_set(ended) & (best < 0)
        if hit.any():
            best[hit] = lowest(ended[hit])
            best_len[hit] = length
        open_ &= ~ended
        if (best >= 0).all():
            break
    out = np.stack([first, first_len - 1, best, best_len - 1, last, last_len - 1], axis=1)
    out[wide] = np.stack([first, np.zeros(n, np.int64), first, np.zeros(n, np.int64), last, np.zeros(n, np.int64)], 1)[
        wide
    ]
    return out
