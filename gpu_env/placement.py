"""The placement rules of SPEC section 2 in compiled form (numba; plain Python with ``GPUALLOC_NUMBA=0``), stated once.

Built from :mod:`gpu_env.rules`, and held to it by ``tests/test_placement.py``: the blocks rule 4 allows
(:func:`block_pattern`, :func:`find_block`; the search doubles runs of free GPUs in 64-GPU words; :func:`free_starts`,
every allowed first GPU free over a span, as words), the blocks a new block meets (:func:`drop_meeting`, rule 1), the
capacity (:func:`free_capacity`, :func:`last_short` and :func:`fits`, rule 7), the earliest feasible start
(:func:`earliest`), greedy's block and start rules (:func:`pick_block`, :func:`packed_start`: lowest, best-fit,
node-fit, highest), a job's preferred block (:func:`preferred_block`), the learned block rule (:func:`block_features`,
:func:`learned_block`), the fit rules' blocks of the batched engine (:func:`fit_choices`), and the real-time
curves with their shortfall penalty (:func:`realtime_one`: :func:`gpu_env.objective.realtime_curves` and
:func:`gpu_env.objective.shortfall_penalty`, rules 6 and 7). The list-scheduling decoder (:mod:`gpu_env.listsched`,
which greedy and the learned planner run) and the batched engine (:mod:`gpu_env.batch`) compile these functions
into theirs.

Functions named ``inst`` read an :class:`Instance` (a :class:`gpu_env.listsched.ListInstance`: its ``gpus``,
``node_size``, ``slots``, ``k``, ``d``, ``lo``, ``hi``, ``values`` and ``block_pattern``); ``busy`` is a (W, NW) uint64
grid of busy GPUs per column, 64 GPUs a word.

numba checks only the source file of each compiled function: the decoder and the engine inline some of these, so
after editing this file delete ``gpu_env/__pycache__/listsched.*.nb[ci]`` and ``gpu_env/batch/__pycache__/*.nb[ci]``
(``make`` runs the warm-up again when it changes).
"""

from __future__ import annotations

import os
from functools import lru_cache
from types import ModuleType
from typing import NamedTuple, Protocol

import numpy as np

from gpu_env import rules

if globals().get("PLAIN") or os.environ.get("GPUALLOC_NUMBA", "1") == "0":  # plain() sets PLAIN

    def njit(*args: object, **kwargs: object):  # type: ignore[no-redef]
        """Stand-in decorator: the plain Python function (for tests and debugging)."""

        def wrap(f):
            return f

        return wrap

else:
    from numba import njit

BLOCK_LOWEST = 0
BLOCK_BEST_FIT = 1
BLOCK_NODE_FIT = 2
BLOCK_HIGHEST = 3
BLOCK_LEARNED = 4
BLOCK_FEATURES = (
    "left",
    "right",
    "before",
    "after",
    "node_load",
    "position",
    "lowest",
    "highest",
    "position_x_duration",
    "position_x_size",
)
"""What :func:`block_features` says of a free block, in order (the learned block rule's inputs)."""
PACK_ROWS = 4
"""Feasible starts the ``packed`` start rule compares."""

_EPS = 1e-9
_ONE = np.uint64(1)


class Instance(Protocol):
    """What the functions named ``inst`` read of a scenario; :class:`gpu_env.listsched.ListInstance` is one.

    Stated here rather than imported from the decoder, which compiles these functions into its own: this module
    stays below it. The arrays are indexed by job, ``n`` jobs in file order.

    Attributes:
        gpus: G, the cluster's GPUs.
        slots: T, the horizon.
        node_size: GPUs per node.
        k: (n,) int64 GPUs of each job.
        d: (n,) int64 duration.
        lo: (n,) int64 first allowed start.
        hi: (n,) int64 one past the last allowed start.
        values: (n, T + 1) float64 value by start.
        block_pattern: (n,) uint64 :func:`block_pattern` of each job.
    """

    gpus: int
    slots: int
    node_size: int
    k: np.ndarray
    d: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    values: np.ndarray
    block_pattern: np.ndarray


@lru_cache(maxsize=256)
def block_pattern(k: int, node_size: int) -> int:
    """Bit a set when a block of k GPUs may start at GPU a (mod 64), by rule 4 within one 64-GPU word.

    :func:`gpu_env.rules.allowed_block_starts` of a 64-GPU cluster; 0 when blocks may cross a 64-GPU word (k > node
    size, or nodes that do not tile 64), which sends :func:`find_block` to its general search.
    """
    if k > node_size or 64 % node_size:
        return 0
    return rules.allowed_block_mask(k, 64, node_size)


@njit(cache=True, nogil=True, inline="always")
def allowed_start(a: int, k: int, gpus: int, node_size: int) -> bool:  # pragma: no cover - compiled
    """:func:`gpu_env.rules.is_allowed_block`, compiled."""
    if a < 0 or a + k > gpus:
        return False
    if k > node_size:
        return a % node_size == 0
    return a // node_size == (a + k - 1) // node_size


@njit(cache=True, nogil=True, inline="always")
def lowest_bit(m: np.uint64) -> int:  # pragma: no cover - compiled
    """Index of the lowest set bit of a nonzero word."""
    i = 0
    while ((m >> np.uint64(i)) & _ONE) == 0:
        i += 1
    return i


@njit(cache=True, nogil=True)
def find_block(inst: Instance, j: int, t: int, busy: np.ndarray, span: np.ndarray) -> int:  # pragma: no cover
    """Lowest allowed first GPU of a block of job j free over [t, t + d), or -1 (``span``: (NW,) scratch)."""
    G, ns = inst.gpus, inst.node_size
    k, d = inst.k[j], inst.d[j]
    nw = busy.shape[1]
    for w in range(nw):
        acc = np.uint64(0)
        for s in range(t, t + d):
            acc |= busy[s, w]
        span[w] = ~acc
    rem = G & 63
    if rem:
        span[nw - 1] &= (_ONE << np.uint64(rem)) - _ONE
    pattern = inst.block_pattern[j]
    if pattern != np.uint64(0):  # k <= node_size and nodes tile the words: blocks never cross a word
        for w in range(nw):
            m = span[w]
            covered = 1
            while covered < k and m != np.uint64(0):
                shift = min(covered, k - covered)
                m &= m >> np.uint64(shift)
                covered += shift
            m &= pattern
            if m != np.uint64(0):
                return w * 64 + lowest_bit(m)
        return -1
    for a in range(0, G - k + 1, ns if k > ns else 1):
        if not allowed_start(a, k, G, ns):
            continue
        ok = True
        for g in range(a, a + k):
            if ((span[g >> 6] >> np.uint64(g & 63)) & _ONE) == 0:
                ok = False
                break
        if ok:
            return a
    return -1


@njit(cache=True, nogil=True, inline="always")
def free_starts(
    busy: np.ndarray,
    t: int,
    d: int,
    everyone: np.ndarray,
    allowed: np.ndarray,
    shifts: np.ndarray,
    span: np.ndarray,
    run: np.ndarray,
    moved: np.ndarray,
) -> bool:  # pragma: no cover - compiled
    """Into ``run`` (NW,): the allowed first GPUs of blocks of k GPUs free over [t, t + d); whether there is one.

    :func:`gpu_env.occupancy.free_block_starts` on words: ``everyone`` (NW,) holds the cluster's GPUs, ``allowed``
    (NW,) the first GPUs rule 4 allows (:func:`gpu_env.rules.allowed_block_mask`), ``shifts``
    :func:`gpu_env.occupancy.block_shifts` of k padded with zeros; the runs of GPUs free over the span (the OR of its
    columns of ``busy``) grow by each shift across words. ``span`` and ``moved``: (NW,) scratch.
    """
    nw = run.shape[0]
    for w in range(nw):
        span[w] = 0
    for c in range(t, t + d):
        for w in range(nw):
            span[w] |= busy[c, w]
    for w in range(nw):
        run[w] = ~span[w] & everyone[w]
    for level in range(shifts.shape[0]):
        shift = shifts[level]
        if shift == 0:
            continue
        q, rr = shift >> 6, np.uint64(shift & 63)
        for w in range(nw):
            low = run[w + q] if w + q < nw else np.uint64(0)
            high = run[w + q + 1] if w + q + 1 < nw else np.uint64(0)
            moved[w] = low >> rr
            if rr > 0:
                moved[w] |= high << (np.uint64(64) - rr)
        for w in range(nw):
            run[w] &= moved[w]
    nonempty = False
    for w in range(nw):
        run[w] &= allowed[w]
        if run[w] != 0:
            nonempty = True
    return nonempty


@njit(cache=True, nogil=True, inline="always")
def drop_meeting(starts: np.ndarray, k: int, first: int, width: int) -> None:  # pragma: no cover - compiled
    """Clear from ``starts`` (NW,) words of first GPUs every block of k GPUs that meets GPUs first..first+width-1."""
    for g in range(max(first - k + 1, 0), min(first + width, 64 * starts.shape[0])):
        starts[g >> 6] &= ~(_ONE << np.uint64(g & 63))


@njit(cache=True, nogil=True, inline="always")
def free_capacity(gpus: int, held: int, reserved: int) -> int:  # pragma: no cover - compiled
    """:func:`gpu_env.rules.free_capacity` of one slot, compiled: ``gpus`` less those held and those reserved."""
    return gpus - held - reserved


@njit(cache=True, nogil=True, inline="always")
def last_short(k: int, t: int, d: int, T: int, room: np.ndarray) -> int:  # pragma: no cover - compiled
    """The last slot of [t, t + d) inside the horizon whose ``room`` (free capacity per slot) is short of k, or -1.

    Rule 7 (:func:`gpu_env.rules.short_slots`): no start up to that slot fits k GPUs over d slots.
    """
    for s in range(min(t + d, T) - 1, t - 1, -1):
        if room[s] < k:
            return s
    return -1


@njit(cache=True, nogil=True, inline="always")
def fits(k: int, t: int, d: int, T: int, room: np.ndarray) -> bool:  # pragma: no cover - compiled
    """Rule 7 for k GPUs over [t, t + d): ``room`` (free capacity per slot) covers k in each slot inside the horizon."""
    return last_short(k, t, d, T, room) < 0


@njit(cache=True, nogil=True)
def earliest(inst: Instance, j: int, busy: np.ndarray, room: np.ndarray, span: np.ndarray) -> tuple:  # pragma: no cover
    """(start, first GPU) of job j's earliest feasible start on its lowest free block, or (-1, -1)."""
    T = inst.slots
    k, d = inst.k[j], inst.d[j]
    for t in range(inst.lo[j], inst.hi[j]):
        if not fits(k, t, d, T, room):
            continue
        a = find_block(inst, j, t, busy, span)
        if a >= 0:
            return t, a
    return -1, -1


@njit(cache=True, nogil=True, inline="always")
def busy_at(busy: np.ndarray, s: int, g: int) -> bool:  # pragma: no cover - compiled
    """Whether GPU g is busy in column s."""
    return ((busy[s, g >> 6] >> np.uint64(g & 63)) & _ONE) != 0


@njit(cache=True, nogil=True)
def block_free(inst: Instance, j: int, t: int, a: int, busy: np.ndarray) -> bool:  # pragma: no cover
    """Whether GPUs a..a+k-1 are free over job j's span from t."""
    for s in range(t, t + inst.d[j]):
        for g in range(a, a + inst.k[j]):
            if busy_at(busy, s, g):
                return False
    return True


@njit(cache=True, nogil=True)
def contact(inst: Instance, j: int, t: int, a: int, busy: np.ndarray) -> int:  # pragma: no cover - compiled
    """Touching perimeter of job j's block from GPU a at start t: busy or edge cells around it.

    Left and right count the slots of the span in which the neighbouring GPU is busy (a node or cluster edge counts
    as busy); before and after count the GPUs of the block busy in the slot before the start and the slot after the
    end (the horizon's start and end count as busy).
    """
    G, ns, T = inst.gpus, inst.node_size, inst.slots
    k, d = inst.k[j], inst.d[j]
    b = a + k
    score = 0
    for side, edge in ((a - 1, a % ns == 0), (b, b % ns == 0 or b >= G)):
        if edge:
            score += d
        else:
            for s in range(t, t + d):
                if busy_at(busy, s, side):
                    score += 1
    for slot, edge in ((t - 1, t == 0), (t + d, t + d >= T)):
        if edge:
            score += k
        else:
            for g in range(a, b):
                if busy_at(busy, slot, g):
                    score += 1
    return score


@njit(cache=True, nogil=True)
def node_load(inst: Instance, j: int, t: int, a: int, busy: np.ndarray) -> int:  # pragma: no cover - compiled
    """Busy GPU-slots over job j's span from t in the node(s) its block from GPU a lies in."""
    G, ns = inst.gpus, inst.node_size
    k, d = inst.k[j], inst.d[j]
    total = 0
    for g in range((a // ns) * ns, min(((a + k - 1) // ns + 1) * ns, G)):
        for s in range(t, t + d):
            if busy_at(busy, s, g):
                total += 1
    return total


@njit(cache=True, nogil=True)
def pick_block(
    inst: Instance, j: int, t: int, busy: np.ndarray, rule: int, span: np.ndarray
) -> tuple:  # pragma: no cover - compiled
    """(first GPU, score) of job j's block at start t among the free ones by a block rule; (-1, -1) when none.

    The lowest and the highest free block score 0; the others score by :func:`contact` or :func:`node_load`, the
    first of the highest winning.
    """
    if rule == BLOCK_LOWEST:
        return find_block(inst, j, t, busy, span), 0
    G, ns = inst.gpus, inst.node_size
    k = inst.k[j]
    if rule == BLOCK_HIGHEST:
        step = ns if k > ns else 1
        for a in range(((G - k) // step) * step, -1, -step):
            if allowed_start(a, k, G, ns) and block_free(inst, j, t, a, busy):
                return a, 0
        return -1, -1
    best_a, best_score = -1, -1
    for a in range(0, G - k + 1, ns if k > ns else 1):
        if not allowed_start(a, k, G, ns):
            continue
        if not block_free(inst, j, t, a, busy):
            continue
        score = contact(inst, j, t, a, busy) if rule == BLOCK_BEST_FIT else node_load(inst, j, t, a, busy)
        if score > best_score:
            best_a, best_score = a, score
    return best_a, best_score


@njit(cache=True, nogil=True)
def block_features(
    inst: Instance, j: int, t: int, a: int, lowest: int, highest: int, busy: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled
    """Into ``out`` (:data:`BLOCK_FEATURES`): what job j's free block from GPU a at start t looks like, each in [0, 1].

    The share of the span its left and right neighbour GPUs are busy (a node or cluster edge counts as busy), the
    share of its GPUs busy in the slot before the start and after the end (the horizon's ends count as busy), the
    busy share of its node(s) over the span, its position ``a / (G - k)``, whether it is the lowest or the highest
    free block (``lowest``, ``highest``: their first GPUs), and the position times the job's duration over the
    horizon and times its size over the node's.
    """
    G, ns, T = inst.gpus, inst.node_size, inst.slots
    k, d = inst.k[j], inst.d[j]
    b = a + k
    for i, (side, edge) in enumerate(((a - 1, a % ns == 0), (b, b % ns == 0 or b >= G))):
        if edge:
            out[i] = 1.0
        else:
            n = 0
            for s in range(t, t + d):
                if busy_at(busy, s, side):
                    n += 1
            out[i] = n / d
    for i, (slot, edge) in enumerate(((t - 1, t == 0), (t + d, t + d >= T))):
        if edge:
            out[2 + i] = 1.0
        else:
            n = 0
            for g in range(a, b):
                if busy_at(busy, slot, g):
                    n += 1
            out[2 + i] = n / k
    first_node = (a // ns) * ns
    width = min(((a + k - 1) // ns + 1) * ns, G) - first_node
    out[4] = node_load(inst, j, t, a, busy) / (width * d)
    position = a / (G - k) if G > k else 0.0
    out[5] = position
    out[6] = 1.0 if a == lowest else 0.0
    out[7] = 1.0 if a == highest else 0.0
    out[8] = position * min(d / T, 1.0)
    out[9] = position * min(k / ns, 1.0)


@njit(cache=True, nogil=True)
def learned_block(
    inst: Instance, j: int, t: int, busy: np.ndarray, weights: np.ndarray, span: np.ndarray
) -> int:  # pragma: no cover - compiled
    """Job j's free block at start t with the highest learned score ``weights . block_features``; -1 when none.

    The first of equal scores (the lowest) wins; without weights, the lowest free block.
    """
    lowest = find_block(inst, j, t, busy, span)
    if lowest < 0 or weights.size == 0:
        return lowest
    G, ns = inst.gpus, inst.node_size
    k = inst.k[j]
    step = ns if k > ns else 1
    highest, _ = pick_block(inst, j, t, busy, BLOCK_HIGHEST, span)
    features = np.zeros(len(BLOCK_FEATURES))
    best_a, best_score = lowest, -np.inf
    for a in range(lowest, highest + 1, step):
        if not allowed_start(a, k, G, ns) or not block_free(inst, j, t, a, busy):
            continue
        block_features(inst, j, t, a, lowest, highest, busy, features)
        score = 0.0
        for i in range(features.size):
            score += weights[i] * features[i]
        if score > best_score + 1e-12:
            best_a, best_score = a, score
    return best_a


@njit(cache=True, nogil=True)
def preferred_block(
    inst: Instance, j: int, t: int, a: int, want: int, busy: np.ndarray
) -> int:  # pragma: no cover - compiled
    """Job j's first GPU at start t nearest ``want`` among the allowed blocks free over the span.

    ``want`` itself where rule 4 allows it and its block is free; ``a`` (the block rule's, free) without a
    preference. Of blocks as near as each other, ``a`` wins, then the lower.
    """
    if want < 0 or want == a:
        return a
    G, ns, k = inst.gpus, inst.node_size, inst.k[j]
    if allowed_start(want, k, G, ns) and block_free(inst, j, t, want, busy):
        return want
    best, gap = a, abs(a - want)
    for b in range(0, G - k + 1, ns if k > ns else 1):
        if abs(b - want) < gap and allowed_start(b, k, G, ns) and block_free(inst, j, t, b, busy):
            best, gap = b, abs(b - want)
    return best


@njit(cache=True, nogil=True)
def packed_start(
    inst: Instance,
    j: int,
    t0: int,
    a0: int,
    busy: np.ndarray,
    pack_tolerance: float,
    room: np.ndarray,
    span: np.ndarray,
) -> tuple:  # pragma: no cover - compiled
    """The ``packed`` start rule from the earliest feasible start t0 (lowest free block a0): (start, first GPU).

    Among the first :data:`PACK_ROWS` feasible starts, in order, until one is worth less than
    ``1 - pack_tolerance`` of t0's value, the start whose best-fit block touches most (the first of equals).
    """
    T = inst.slots
    k, d = inst.k[j], inst.d[j]
    floor = inst.values[j, t0] * (1.0 - pack_tolerance)
    best_t, best_a, best_score = t0, a0, -1
    rows = 0
    for t in range(t0, inst.hi[j]):
        if rows == PACK_ROWS:
            break
        if not fits(k, t, d, T, room) or find_block(inst, j, t, busy, span) < 0:
            continue
        rows += 1
        if inst.values[j, t] < floor:
            break
        a, score = pick_block(inst, j, t, busy, BLOCK_BEST_FIT, span)
        if score > best_score:
            best_t, best_a, best_score = t, a, score
    return best_t, best_a


@njit(cache=True, nogil=True, inline="always")
def has(words: np.ndarray, g: int) -> bool:  # pragma: no cover - compiled
    """Whether GPU g is in the set ``words`` (NW,)."""
    return ((words[g >> 6] >> np.uint64(g & 63)) & _ONE) != 0


@njit(cache=True, nogil=True, _nrt=False)
def fit_choices(words: np.ndarray, wide: bool, size: int, gpus: int, out: np.ndarray) -> None:  # pragma: no cover
    """The fit rules' blocks among a set of feasible first GPUs into ``out`` (6,): first, best, last and their waste.

    A row of :meth:`gpu_env.episode.Episode.fit_table`, on words. The feasible first GPUs come in groups (runs of
    consecutive first GPUs, split at node boundaries); a block's waste is its group's length less one (0 for blocks
    wider than a node, ``wide``); ``best`` is the first GPU of the first shortest group.
    """
    first = -1
    last = -1
    first_len = -1
    best = -1
    best_len = 1 << 30
    group = -1
    last_start = -1
    for g in range(gpus):
        if words[g >> 6] == 0 or not has(words, g):
            continue
        if group < 0 or g % size == 0:
            group = g
            last_start = g
        if first < 0:
            first = g
        last = g
        nxt = g + 1
        if nxt >= gpus or nxt % size == 0 or not has(words, nxt):
            length = g - group + 1
            if first_len < 0:
                first_len = length
            if length < best_len:
                best_len = length
                best = group
            group = -1
    if wide:
        out[0], out[1], out[2], out[3], out[4], out[5] = first, 0, first, 0, last, 0
    else:
        out[0], out[1], out[2], out[3] = first, first_len - 1, best, best_len - 1
        out[4], out[5] = last, last - last_start


@njit(cache=True, nogil=True, inline="always")
def mark(busy: np.ndarray, t: int, d: int, a: int, k: int) -> None:  # pragma: no cover - compiled
    """Mark GPUs a..a+k-1 busy over slots [t, t + d)."""
    for s in range(t, t + d):
        for g in range(a, a + k):
            busy[s, g >> 6] |= _ONE << np.uint64(g & 63)


@njit(cache=True, nogil=True, _nrt=False)
def envelope(x: np.ndarray, ramp: int, upper: bool, n: int) -> None:  # pragma: no cover - compiled
    """In place over x[:n]: min_s x[s] + R|t - s| (upper) or max_s x[s] - R|t - s|, by two passes."""
    if upper:
        for t in range(1, n):
            x[t] = min(x[t], x[t - 1] + ramp)
        for t in range(n - 2, -1, -1):
            x[t] = min(x[t], x[t + 1] + ramp)
    else:
        for t in range(1, n):
            x[t] = max(x[t], x[t - 1] - ramp)
        for t in range(n - 2, -1, -1):
            x[t] = max(x[t], x[t + 1] - ramp)


class RealtimeView(NamedTuple):
    """The fields of an engine state that :func:`realtime_one` reads, for one episode.

    ``base`` and ``demand`` are the demand (curves follow demand); ``load`` the job load to serve around;
    ``curves`` and ``shortfall_cost`` receive the curves and their penalty.
    """

    base: np.ndarray  # (1, A, T)
    curves: np.ndarray  # (1, A, T) out
    demand: np.ndarray  # (1, A, T)
    floors: np.ndarray  # (1, A, T)
    gpus: np.ndarray  # (1,)
    initial: np.ndarray  # (1, A)
    load: np.ndarray  # (1, T)
    order: np.ndarray  # (1, A)
    penalty: np.ndarray  # (1, A)
    ramp: np.ndarray  # (1, A)
    shortfall_cost: np.ndarray  # (1,) out
    slots: np.ndarray  # (1,)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def realtime_one(s, e: int, scratch: np.ndarray) -> None:  # pragma: no cover - compiled
    """The least-shortfall curves of episode e under its load and their cost (``objective.realtime_curves``).

    The apps are served in the episode's order; each curve is a pair of Lipschitz envelopes over the
    episode's horizon (``rules.cover_curve`` with a cap). ``scratch``: (4, T) int64 work space.
    """
    s_base, s_curves, s_demand, s_floors, s_gpus = s.base, s.curves, s.demand, s.floors, s.gpus
    s_initial, s_load, s_order, s_penalty, s_ramp = s.initial, s.load, s.order, s.penalty, s.ramp
    s_shortfall_cost, s_slots = s.shortfall_cost, s.slots
    A, T = s_base.shape[1], s_base.shape[2]
    free, rest, up, low = scratch[0], scratch[1], scratch[2], scratch[3]
    n = s_slots[e]
    for t in range(T):
        free[t] = s_gpus[e] - s_load[e, t]
        total = 0
        for a in range(A):
            total += s_floors[e, a, t]
        rest[t] = total
    for i in range(A):
        a = s_order[e, i]
        r = s_ramp[e, a]
        init = s_initial[e, a]
        for t in range(T):
            rest[t] -= s_floors[e, a, t]
        for t in range(n):
            cap = max(free[t] - rest[t], s_floors[e, a, t])
            up[t] = min(init + r * (t + 1), cap)
        envelope(up, r, True, n)
        for t in range(n):
            target = min(s_base[e, a, t], up[t])
            low[t] = max(target, max(0, init - r * (t + 1)))
        envelope(low, r, False, n)
        for t in range(T):
            c = max(min(low[t], up[t]), 0) if t < n else 0
            s_curves[e, a, t] = c
            free[t] -= c
    cost = 0.0
    for a in range(A):
        short = 0
        for t in range(T):
            short += max(0, s_demand[e, a, t] - s_curves[e, a, t])
        cost = cost + s_penalty[e, a] * short
    s_shortfall_cost[e] = cost


_plain = None


def plain() -> ModuleType:
    """This module as plain Python functions (a second copy, compiled by nothing), for ``kernels.plain()``."""
    global _plain
    if _plain is None:
        import importlib.util
        from pathlib import Path

        spec = importlib.util.spec_from_file_location("gpu_env._placement_plain", Path(__file__))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        module.PLAIN = True  # type: ignore[attr-defined]  # read above: the stand-in decorator
        spec.loader.exec_module(module)
        _plain = module
    return _plain
