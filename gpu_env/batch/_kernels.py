"""The numba kernels of :mod:`gpu_env.batch.kernels` (imported on first use; see there)."""

from __future__ import annotations

import os

import numpy as np

try:  # pragma: no cover - depends on the install
    if os.environ.get("GPUALLOC_NUMBA", "1") == "0":
        raise ImportError("disabled by GPUALLOC_NUMBA=0")
    from numba import njit
except ImportError:  # pragma: no cover - depends on the install

    def njit(*args: object, **kwargs: object):  # type: ignore[no-redef]
        """Stand-in decorator: the plain Python function (the tests run the kernels so without numba)."""

        def wrap(f):
            return f

        return wrap


_BIG = np.int64(1) << 40


@njit(cache=True, nogil=True)
def _bit(words: np.ndarray, g: int) -> bool:  # pragma: no cover - compiled
    return (words[g >> 6] >> np.uint64(g & 63)) & np.uint64(1) != 0


@njit(cache=True, nogil=True)
def _choices_row(words: np.ndarray, wide: bool, size: int, gpus: int, out: np.ndarray) -> None:  # pragma: no cover
    """One row of :func:`_choices_row` into ``out`` (6,)."""
    first = -1
    last = -1
    first_len = -1
    best = -1
    best_len = 1 << 30
    group = -1
    last_start = -1
    for g in range(gpus):
        if words[g >> 6] == 0 or not _bit(words, g):
            continue
        if group < 0 or g % size == 0:
            group = g
            last_start = g
        if first < 0:
            first = g
        last = g
        nxt = g + 1
        if nxt >= gpus or nxt % size == 0 or not _bit(words, nxt):
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


@njit(cache=True, nogil=True)
def _envelope(x: np.ndarray, ramp: int, upper: bool, n: int) -> None:  # pragma: no cover - compiled
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


@njit(cache=True, nogil=True)
def _realtime_one(
    b: int,
    curves: np.ndarray,
    cost: np.ndarray,
    base: np.ndarray,
    initial: np.ndarray,
    ramp: np.ndarray,
    order: np.ndarray,
    floors: np.ndarray,
    gpus: np.ndarray,
    load: np.ndarray,
    slots: np.ndarray,
    demand: np.ndarray,
    penalty: np.ndarray,
    scratch: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """The curves and shortfall cost of episode b (``scratch``: (4, T) int64 work space)."""
    A, T = base.shape[1], base.shape[2]
    free, rest, up, low = scratch[0], scratch[1], scratch[2], scratch[3]
    n = slots[b]
    for t in range(T):
        free[t] = gpus[b] - load[b, t]
        s = 0
        for a in range(A):
            s += floors[b, a, t]
        rest[t] = s
    for i in range(A):
        a = order[b, i]
        r = ramp[b, a]
        init = initial[b, a]
        for t in range(T):
            rest[t] -= floors[b, a, t]
        for t in range(n):
            cap = max(free[t] - rest[t], floors[b, a, t])
            up[t] = min(init + r * (t + 1), cap)
        _envelope(up, r, True, n)
        for t in range(n):
            target = min(base[b, a, t], up[t])
            low[t] = max(target, max(0, init - r * (t + 1)))
        _envelope(low, r, False, n)
        for t in range(T):
            c = max(min(low[t], up[t]), 0) if t < n else 0
            curves[b, a, t] = c
            free[t] -= c
    total = 0.0
    for a in range(A):
        short = 0
        for t in range(T):
            short += max(0, demand[b, a, t] - curves[b, a, t])
        total = total + penalty[b, a] * short
    cost[b] = total


@njit(cache=True, nogil=True)
def place_into(
    b: np.ndarray,
    r: np.ndarray,
    option: np.ndarray,
    trade: bool,
    width: int,
    busy: np.ndarray,
    load: np.ndarray,
    grid: np.ndarray,
    free_now: np.ndarray,
    placed: np.ndarray,
    start: np.ndarray,
    first: np.ndarray,
    earliest: np.ndarray,
    at: np.ndarray,
    job_value: np.ndarray,
    objective: np.ndarray,
    curves: np.ndarray,
    cost: np.ndarray,
    clock: np.ndarray,
    k: np.ndarray,
    d: np.ndarray,
    wide: np.ndarray,
    node: np.ndarray,
    values: np.ndarray,
    slots: np.ndarray,
    gpus: np.ndarray,
    base: np.ndarray,
    initial: np.ndarray,
    ramp: np.ndarray,
    order: np.ndarray,
    floors: np.ndarray,
    floor_total: np.ndarray,
    demand: np.ndarray,
    penalty: np.ndarray,
) -> np.ndarray:  # pragma: no cover - compiled
    """The engine's whole ``_place`` for n placements (row r of episode b by fit rule ``option`` at the clock).

    Takes the block (:func:`_choices_row`), marks it (:func:`mark_into`), records the placement and its
    value, recomputes the curves where the new load meets them, and narrows the rows whose span meets
    the block (:func:`narrow_into`, with the room of ``BatchEngine.room``).

    Returns:
        (n, R) bool: rows left with no feasible first GPU (to search on from their earliest start + 1).
    """
    n = b.size
    A, T = curves.shape[1], curves.shape[2]
    R, NW = earliest.shape[1], at.shape[2]
    opts = np.zeros(6, dtype=np.int64)
    scratch = np.empty((4, T), dtype=np.int64)
    room = np.empty((1, T), dtype=np.int64)
    one = np.zeros(1, dtype=np.int64)
    blocks = np.zeros(n, dtype=np.int64)
    for i in range(n):
        e, row = b[i], r[i]
        _choices_row(at[e, row], wide[e, row], node[e], width, opts)
        blocks[i] = opts[2 * option[i]]
    ks = np.empty(n, dtype=np.int64)
    ds = np.empty(n, dtype=np.int64)
    ts = np.empty(n, dtype=np.int64)
    for i in range(n):
        e, row = b[i], r[i]
        ks[i], ds[i], ts[i] = k[e, row], d[e, row], clock[e]
    mark_into(b, blocks, ks, ts, ds, slots, busy, load, grid, free_now)
    lost = np.zeros((n, R), dtype=np.bool_)
    for i in range(n):
        e, row, t = b[i], r[i], ts[i]
        placed[e, row] = True
        start[e, row] = t
        first[e, row] = blocks[i]
        earliest[e, row] = -1
        for w in range(NW):
            at[e, row, w] = 0
        job_value[e] += values[e, row, t]
        if trade:
            over = False
            for c in range(t, min(t + ds[i], T, slots[e])):
                total = load[e, c]
                for a in range(A):
                    total += curves[e, a, c]
                if total > gpus[e]:
                    over = True
                    break
            if over:
                _realtime_one(
                    e, curves, cost, base, initial, ramp, order, floors, gpus, load, slots, demand, penalty, scratch
                )
        objective[e] = job_value[e] - cost[e]
        for c in range(T):
            if c < slots[e]:
                used = floor_total[e, c]
                if not trade:
                    used = 0
                    for a in range(A):
                        used += curves[e, a, c]
                room[0, c] = gpus[e] - used - load[e, c]
            else:
                room[0, c] = _BIG
        one[0] = e
        lost[i] = narrow_into(
            one, blocks[i : i + 1], ks[i : i + 1], ts[i : i + 1], ds[i : i + 1], earliest, k, d, at, room
        )[0]
    return lost


@njit(cache=True, nogil=True)
def mark_into(
    b: np.ndarray,
    first: np.ndarray,
    k: np.ndarray,
    t: np.ndarray,
    d: np.ndarray,
    slots: np.ndarray,
    busy: np.ndarray,
    load: np.ndarray,
    grid: np.ndarray,
    free_now: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Placements' blocks into the busy sets, load, observation grid and free runs (the engine's ``_place``)."""
    W, T = busy.shape[1], load.shape[1]
    for i in range(b.size):
        e, g0, kk, t0 = b[i], first[i], k[i], t[i]
        end = min(t0 + d[i], W)
        for g in range(g0, g0 + kk):
            bit = np.uint64(1) << np.uint64(g & 63)
            for c in range(t0, end):
                busy[e, c, g >> 6] |= bit
            for c in range(t0, min(end, T)):
                grid[e, g, c, 0] = 1.0
            free_now[e, g] = 0
        for c in range(t0, min(end, T, slots[e])):
            load[e, c] += kk


@njit(cache=True, nogil=True)
def narrow_into(
    b: np.ndarray,
    first: np.ndarray,
    k: np.ndarray,
    t: np.ndarray,
    d: np.ndarray,
    earliest: np.ndarray,
    rk: np.ndarray,
    rd: np.ndarray,
    at: np.ndarray,
    room: np.ndarray,
) -> np.ndarray:  # pragma: no cover - compiled
    """Rows whose span meets a new block lose the blocks that meet it, or all when the room falls under k.

    Args:
        b: (n,) episodes of the placements.
        first: (n,) first GPU of each block.
        k: (n,) GPUs of each block.
        t: (n,) start of each placement.
        d: (n,) duration.
        earliest: (B, R) state.
        rk: (B, R) state ``k``.
        rd: (B, R) state ``d``.
        at: (B, R, NW) state, narrowed in place.
        room: (n, T) ``BatchEngine.room(b)`` (huge past each horizon).

    Returns:
        (n, R) bool: rows left with no feasible first GPU (to search on).
    """
    R, NW = earliest.shape[1], at.shape[2]
    T = room.shape[1]
    lost = np.zeros((b.size, R), dtype=np.bool_)
    for i in range(b.size):
        e = b[i]
        for r in range(R):
            s = earliest[e, r]
            if s < 0 or s >= t[i] + d[i] or s + rd[e, r] <= t[i]:
                continue
            lo = max(first[i] - rk[e, r] + 1, 0)
            hi = min(first[i] + k[i], 64 * NW)
            for g in range(lo, hi):
                at[e, r, g >> 6] &= ~(np.uint64(1) << np.uint64(g & 63))
            empty = True
            for w in range(NW):
                if at[e, r, w] != 0:
                    empty = False
            if not empty:
                low = _BIG
                for c in range(s, min(s + rd[e, r], T)):
                    low = min(low, room[i, c])
                if low < rk[e, r]:
                    for w in range(NW):
                        at[e, r, w] = 0
                    empty = True
            lost[i, r] = empty
    return lost


@njit(cache=True, nogil=True)
def free_runs_into(
    b: np.ndarray, clock: np.ndarray, busy: np.ndarray, slots: int, free_now: np.ndarray
) -> None:  # pragma: no cover
    """``free_now`` of episodes b: consecutive free slots of each GPU from the clock, capped at T + 1."""
    W, G = busy.shape[1], free_now.shape[1]
    for e in b:
        c0 = clock[e]
        for g in range(G):
            w, bit = g >> 6, np.uint64(1) << np.uint64(g & 63)
            run = slots + 1
            for j in range(slots + 1):
                c = c0 + j
                if c < W and busy[e, c, w] & bit:
                    run = j
                    break
            free_now[e, g] = run


@njit(cache=True, nogil=True)
def job_options_into(
    b: np.ndarray,
    r: np.ndarray,
    jobs: np.ndarray,
    gpus: np.ndarray,
    node: np.ndarray,
    slots: np.ndarray,
    clock: np.ndarray,
    load: np.ndarray,
    curves: np.ndarray,
    k: np.ndarray,
    d: np.ndarray,
    at: np.ndarray,
    wide: np.ndarray,
    per_area: np.ndarray,
    per_block: np.ndarray,
    cheapest: np.ndarray,
    reward_scale: np.ndarray,
    width: int,
) -> None:  # pragma: no cover - compiled
    """Columns 14.. of the job rows that can start now (``observe._jobs``): real-time take, options, waste."""
    A, T = curves.shape[1], curves.shape[2]
    NW = at.shape[2]
    opts = np.zeros(6, dtype=np.int64)
    for i in range(b.size):
        e, row = b[i], r[i]
        kk, t0 = k[e, row], clock[e]
        end = min(t0 + d[e, row], slots[e])
        take = 0
        for t in range(t0, end):
            c = min(t, T - 1)
            total = 0
            for a in range(A):
                total += curves[e, a, c]
            over = kk - (gpus[e] - load[e, c] - total)
            if over > 0:
                take += over
        words = at[e, row]
        _choices_row(words, wide[e, row], node[e], width, opts)
        members = 0
        for w in range(NW):
            x = words[w]
            while x:
                x &= x - np.uint64(1)
                members += 1
        gpu_scale = 1.0 / gpus[e]
        waste_scale = 1.0 / node[e]
        cut = cheapest[e] / reward_scale[e]
        jobs[e, row, 14] = take * per_area[e, row]
        jobs[e, row, 15] = take * cut
        jobs[e, row, 16] = members * per_block[e, row]
        for j in range(3):
            jobs[e, row, 17 + 2 * j] = opts[2 * j] * gpu_scale
            jobs[e, row, 18 + 2 * j] = opts[2 * j + 1] * waste_scale


@njit(cache=True, nogil=True)
def search_into(
    b: np.ndarray,
    r: np.ndarray,
    begin: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    k: np.ndarray,
    d: np.ndarray,
    shifts: np.ndarray,
    allowed: np.ndarray,
    everyone: np.ndarray,
    busy: np.ndarray,
    gpus: np.ndarray,
    slots: np.ndarray,
    used: np.ndarray,
    load: np.ndarray,
    earliest: np.ndarray,
    at: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """The engine's ``_search``: each (episode, row) to its first feasible start >= begin, and its first GPUs there.

    A start t fits when the room (G less the used real-time GPUs and the load; unbounded past the
    horizon) holds k in every slot of ``[t, t + d)`` and some allowed first GPU begins a run of k GPUs
    free over the whole span (the OR of the span's busy sets, runs grown by the row's shifts).
    """
    T, NW = load.shape[1], busy.shape[2]
    span = np.zeros(NW, dtype=np.uint64)
    run = np.zeros(NW, dtype=np.uint64)
    moved = np.zeros(NW, dtype=np.uint64)
    for i in range(b.size):
        e, row = b[i], r[i]
        kk, dd = k[e, row], d[e, row]
        found = -1
        for t in range(max(begin[i], lo[e, row]), min(hi[e, row], T)):
            fits = True
            for c in range(t, min(t + dd, T)):
                if c < slots[e] and gpus[e] - used[e, c] - load[e, c] < kk:
                    fits = False
                    break
            if not fits:
                continue
            for w in range(NW):
                span[w] = 0
            for c in range(t, t + dd):
                for w in range(NW):
                    span[w] |= busy[e, c, w]
            for w in range(NW):
                run[w] = ~span[w] & everyone[e, w]
            for level in range(shifts.shape[2]):
                s = shifts[e, row, level]
                if s == 0:
                    continue
                q, rr = s >> 6, np.uint64(s & 63)
                for w in range(NW):
                    low = run[w + q] if w + q < NW else np.uint64(0)
                    high = run[w + q + 1] if w + q + 1 < NW else np.uint64(0)
                    moved[w] = low >> rr
                    if rr > 0:
                        moved[w] |= high << (np.uint64(64) - rr)
                for w in range(NW):
                    run[w] &= moved[w]
            nonempty = False
            for w in range(NW):
                run[w] &= allowed[e, row, w]
                if run[w] != 0:
                    nonempty = True
            if nonempty:
                found = t
                break
        earliest[e, row] = found
        for w in range(NW):
            at[e, row, w] = run[w] if found >= 0 else np.uint64(0)


@njit(cache=True, nogil=True)
def jobs_into(
    jobs: np.ndarray,
    valid: np.ndarray,
    placed: np.ndarray,
    earliest: np.ndarray,
    done: np.ndarray,
    clock: np.ndarray,
    slots: np.ndarray,
    row_table: np.ndarray,
    values: np.ndarray,
    reward_scale: np.ndarray,
    width: int,
) -> None:  # pragma: no cover - compiled
    """Columns 0..13 of ``observe._jobs`` for every row (``jobs`` zeroed beforehand; padding rows stay 0)."""
    B, R = valid.shape
    for e in range(B):
        c0, T, scale = clock[e], slots[e], reward_scale[e]
        shift = c0 / T
        for row in range(R):
            if not valid[e, row]:
                continue
            s = earliest[e, row]
            pending = s >= 0
            now = s == c0 and not done[e]
            jobs[e, row, 0] = 1.0
            jobs[e, row, 1] = 1.0 if pending else 0.0
            jobs[e, row, 2] = 1.0 if placed[e, row] else 0.0
            jobs[e, row, 3] = 1.0 if now else 0.0
            for j in range(7):
                jobs[e, row, 4 + j] = row_table[e, row, j]
            jobs[e, row, 8] = row_table[e, row, 4] - shift
            jobs[e, row, 9] = row_table[e, row, 5] - shift
            jobs[e, row, 11] = (s - c0) / T if pending else 1.0
            jobs[e, row, 12] = values[e, row, min(c0, T)] / scale * (1.0 if now else 0.0)
            jobs[e, row, 13] = values[e, row, s if pending else width] / scale


@njit(cache=True, nogil=True)
def gpus_into(
    out: np.ndarray, gpus: np.ndarray, node: np.ndarray, free_now: np.ndarray, H: int
) -> None:  # pragma: no cover - compiled
    """``observe._gpus`` into a zeroed (B, G, 3) array."""
    B, G = free_now.shape
    inv = 1.0 / H
    for e in range(B):
        size = node[e]
        for g in range(min(gpus[e], G)):
            out[e, g, 0] = 1.0
            out[e, g, 1] = (g % size) / size
            out[e, g, 2] = min(free_now[e, g], H) * inv


@njit(cache=True, nogil=True)
def slots_into(
    out: np.ndarray,
    gpus: np.ndarray,
    slots: np.ndarray,
    clock: np.ndarray,
    load: np.ndarray,
    curves: np.ndarray,
    demand: np.ndarray,
    floor_total: np.ndarray,
    decay_weights: np.ndarray,
    trade: bool,
) -> None:  # pragma: no cover - compiled
    """``observe._slots`` into a zeroed (B, T, 9) array."""
    B, A, T = curves.shape
    for e in range(B):
        G = gpus[e]
        for t in range(min(slots[e], T)):
            total = 0
            want = 0
            short = 0
            for a in range(A):
                total += curves[e, a, t]
                want += demand[e, a, t]
                short += max(0, demand[e, a, t] - curves[e, a, t])
            used = floor_total[e, t] if trade else total
            out[e, t, 0] = 1.0
            out[e, t, 1] = 1.0 if t < clock[e] else 0.0
            out[e, t, 2] = load[e, t] / G
            out[e, t, 3] = total / G
            out[e, t, 4] = want / G
            out[e, t, 5] = short / G
            out[e, t, 6] = (G - load[e, t] - total) / G
            out[e, t, 7] = (G - used - load[e, t]) / G
            out[e, t, 8] = decay_weights[e, t]
