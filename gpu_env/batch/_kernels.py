"""The kernels of :mod:`gpu_env.batch.kernels` (imported on first use; see there).

Every kernel takes the engine's :class:`~gpu_env.batch.state.BatchState` (a named tuple of arrays) as
its first argument and updates it, or an output array, in place. The loops follow the reference
:class:`gpu_env.episode.Episode` (the same integer arithmetic and the same float64 expressions in the
same order), so the results equal its results; ``tests/test_batch.py`` checks that step by step, with
the kernels compiled and as plain Python.
"""

from __future__ import annotations

import os

import numpy as np

from gpu_env.observation import (
    APP_CURVE_COLUMN,
    GLOBAL_COLUMN,
    GPU_COLUMN,
    JOB_COLUMN,
    JOB_FEATURES,
    JOB_STATIC,
    OBSERVE_BITS,
    SLOT_COLUMN,
)

if globals().get("PLAIN") or os.environ.get("GPUALLOC_NUMBA", "1") == "0":  # kernels.plain() sets PLAIN

    def njit(*args: object, **kwargs: object):  # type: ignore[no-redef]
        """Stand-in decorator: the plain Python function (for tests and debugging)."""

        def wrap(f):
            return f

        return wrap

else:
    from numba import njit

# The compiled rules' real-time step (its plain copy beside this plain copy: kernels.plain() runs nothing compiled).
from gpu_env import placement as _compiled_rules

placement = _compiled_rules.plain() if globals().get("PLAIN") else _compiled_rules

_BIG = np.int64(1) << 40

# Columns, by name (numba freezes these module-level integers into the compiled code).
_J_VALID, _J_PENDING, _J_PLACED, _J_NOW = (JOB_COLUMN[n] for n in ("valid", "pending", "placed", "now"))
_J_STATIC, _J_STATIC_N = JOB_STATIC.start, JOB_STATIC.stop - JOB_STATIC.start
_J_RELEASE, _J_LAST_START = JOB_COLUMN["release"], JOB_COLUMN["last_start"]
_ROW_RELEASE, _ROW_LAST_START = _J_RELEASE - _J_STATIC, _J_LAST_START - _J_STATIC  # in Episode.row_table
_J_EARLIEST, _J_VALUE_NOW, _J_VALUE_EARLIEST = (JOB_COLUMN[n] for n in ("earliest", "value_now", "value_earliest"))
_J_TAKE, _J_COST, _J_BLOCKS = (JOB_COLUMN[n] for n in ("realtime_take", "realtime_cost", "blocks_now"))
_J_FIRST, _J_FIRST_WASTE = JOB_COLUMN["first_gpu"], JOB_COLUMN["first_waste"]
_J_BEST, _J_BEST_WASTE = JOB_COLUMN["best_gpu"], JOB_COLUMN["best_waste"]
_J_LAST, _J_LAST_WASTE = JOB_COLUMN["last_gpu"], JOB_COLUMN["last_waste"]
_J_COUNT = len(JOB_FEATURES)
_G_VALID, _G_POSITION, _G_FREE = (GPU_COLUMN[n] for n in ("valid", "node_position", "free_now"))
_S_INSIDE, _S_PAST, _S_LOAD, _S_REALTIME, _S_DEMAND, _S_SHORTFALL, _S_SLACK, _S_ROOM, _S_DECAY = (
    SLOT_COLUMN[n] for n in ("inside", "past", "job_load", "realtime", "demand", "shortfall", "slack", "room", "decay")
)
_A_DEMAND, _A_ALLOCATION, _A_FLOOR = (APP_CURVE_COLUMN[n] for n in ("demand", "allocation", "floor"))
_C_CLOCK, _C_REMAINING, _C_HORIZON, _C_GPUS, _C_NODE, _C_PENDING, _C_OBJECTIVE, _C_DECAY, _C_TRADE = (
    GLOBAL_COLUMN[n]
    for n in ("clock", "remaining", "horizon", "gpus", "node_size", "pending", "objective", "decay", "trade_realtime")
)


# ----------------------------------------------------------------------------- helpers


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _room(s, e: int, trade: bool, room: np.ndarray) -> None:  # pragma: no cover - compiled
    """``BatchEngine.room`` of episode e into ``room`` (T,), huge past the episode's horizon.

    G less the load and the real-time GPUs a new job may not use (the ramp floors when trading, else the curves).
    """
    s_curves, s_floor_total, s_gpus, s_load, s_slots = s.curves, s.floor_total, s.gpus, s.load, s.slots
    A, T = s_curves.shape[1], s_curves.shape[2]
    for c in range(T):
        if c >= s_slots[e]:
            room[c] = _BIG
            continue
        if trade:
            used = s_floor_total[e, c]
        else:
            used = 0
            for a in range(A):
                used += s_curves[e, a, c]
        room[c] = placement.free_capacity(s_gpus[e], s_load[e, c], used)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _mark(s, e: int, first: int, k: int, t0: int, d: int) -> None:  # pragma: no cover - compiled
    """A new block into the busy sets, the observation grid, the free runs and the load."""
    s_busy, s_free_now, s_grid, s_load, s_slots = s.busy, s.free_now, s.grid, s.load, s.slots
    W, T = s_busy.shape[1], s_load.shape[1]
    end = min(t0 + d, W)
    placement.mark(s_busy[e], t0, end - t0, first, k)
    for g in range(first, first + k):
        for c in range(t0, min(end, T)):
            s_grid[e, g, c, 0] = 1.0
        s_free_now[e, g] = 0
    for c in range(t0, min(end, T, s_slots[e])):
        s_load[e, c] += k


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _narrow(
    s, e: int, first: int, k: int, t: int, d: int, room: np.ndarray, rows: np.ndarray, begins: np.ndarray
) -> int:  # pragma: no cover - compiled
    """Rows whose span meets a new block lose the blocks that meet it, or all when the room falls under k.

    ``room``: (T,) ``BatchEngine.room`` of episode e (huge past its horizon). The rows left with no
    feasible first GPU go to ``rows`` with their search's first slot in ``begins``; returns how many.
    """
    s_at, s_d, s_earliest, s_k = s.at, s.d, s.earliest, s.k
    R, NW = s_earliest.shape[1], s_at.shape[2]
    T = room.shape[0]
    n = 0
    for r in range(R):
        start = s_earliest[e, r]
        if start < 0 or start >= t + d or start + s_d[e, r] <= t:
            continue
        placement.drop_meeting(s_at[e, r], s_k[e, r], first, k)
        empty = True
        for w in range(NW):
            if s_at[e, r, w] != 0:
                empty = False
        if not empty and not placement.fits(s_k[e, r], start, s_d[e, r], T, room):
            for w in range(NW):
                s_at[e, r, w] = 0
            empty = True
        if empty:
            rows[n] = r
            begins[n] = start + 1
            n += 1
    return n


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _place(
    s,
    e: int,
    row: int,
    option: int,
    trade: bool,
    gpus: int,
    opts: np.ndarray,
    scratch: np.ndarray,
    room: np.ndarray,
    rows: np.ndarray,
    begins: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """Place ``row`` of episode e by fit rule ``option`` at the clock (``Episode.apply`` of a FIT action).

    Takes the block, marks it, records the placement and its value, recomputes the curves where the
    new load meets them and narrows the rows whose span meets the block. Returns how many rows are
    left to search on (in ``rows`` and ``begins``).
    """
    s_at, s_clock, s_curves, s_d, s_earliest = s.at, s.clock, s.curves, s.d, s.earliest
    s_first, s_gpus, s_job_value, s_k, s_load = s.first, s.gpus, s.job_value, s.k, s.load
    s_node, s_objective, s_placed, s_shortfall_cost, s_slots = s.node, s.objective, s.placed, s.shortfall_cost, s.slots
    s_start, s_values, s_wide = s.start, s.values, s.wide
    A, T = s_curves.shape[1], s_curves.shape[2]
    NW = s_at.shape[2]
    placement.fit_choices(s_at[e, row], s_wide[e, row], s_node[e], gpus, opts)
    first = opts[2 * option]
    k, d, t = s_k[e, row], s_d[e, row], s_clock[e]
    _mark(s, e, first, k, t, d)
    s_placed[e, row] = True
    s_start[e, row] = t
    s_first[e, row] = first
    s_earliest[e, row] = -1
    for w in range(NW):
        s_at[e, row, w] = 0
    s_job_value[e] += s_values[e, row, t]
    if trade:
        over = False
        for c in range(t, min(t + d, T, s_slots[e])):
            total = 0
            for a in range(A):
                total += s_curves[e, a, c]
            if placement.free_capacity(s_gpus[e], s_load[e, c], total) < 0:
                over = True
                break
        if over:
            placement.realtime_one(s, e, scratch)
    s_objective[e] = s_job_value[e] - s_shortfall_cost[e]
    _room(s, e, trade, room)
    return _narrow(s, e, first, k, t, d, room, rows, begins)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _search(
    s, e: int, row: int, begin: int, room: np.ndarray, span: np.ndarray, run: np.ndarray, moved: np.ndarray
) -> None:  # pragma: no cover - compiled
    """Row ``row`` of episode e to its first feasible start >= begin, and its first GPUs there.

    A start t fits when the room (``room``: :func:`_room` of the episode) holds k in every slot of
    ``[t, t + d)`` (:func:`gpu_env.placement.last_short`) and some allowed first GPU begins a block free
    over the whole span (:func:`gpu_env.placement.free_starts`): ``Occupancy.next_feasible_mask``.
    """
    s_allowed, s_at, s_busy, s_d, s_earliest = s.allowed, s.at, s.busy, s.d, s.earliest
    s_everyone, s_hi, s_k, s_lo, s_load = s.everyone, s.hi, s.k, s.lo, s.load
    s_shifts = s.shifts
    T, NW = s_load.shape[1], s_busy.shape[2]
    kk, dd = s_k[e, row], s_d[e, row]
    busy, everyone, allowed, shifts = s_busy[e], s_everyone[e], s_allowed[e, row], s_shifts[e, row]
    found = -1
    t, end = max(begin, s_lo[e, row]), min(s_hi[e, row], T)
    while t < end:
        # The room: the last slot of the span short of k rules out every start up to it.
        short = placement.last_short(kk, t, dd, T, room)
        if short >= 0:
            t = short + 1
            continue
        if placement.free_starts(busy, t, dd, everyone, allowed, shifts, span, run, moved):
            found = t
            break
        t += 1
    s_earliest[e, row] = found
    for w in range(NW):
        s_at[e, row, w] = run[w] if found >= 0 else np.uint64(0)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _move_clock(s, e: int) -> None:  # pragma: no cover - compiled
    """The clock to the least earliest start of episode e (and its free runs there), or the episode ends."""
    s_busy, s_clock, s_done, s_earliest, s_free_now = s.busy, s.clock, s.done, s.earliest, s.free_now
    s_load = s.load
    R = s_earliest.shape[1]
    clock = -1
    for r in range(R):
        start = s_earliest[e, r]
        if start >= 0 and (clock < 0 or start < clock):
            clock = start
    if clock < 0:
        s_done[e] = True
        return
    if clock == s_clock[e]:
        return
    s_clock[e] = clock
    # free_now at the clock: consecutive free slots of each GPU, capped at T + 1.
    W, G, T = s_busy.shape[1], s_free_now.shape[1], s_load.shape[1]
    for g in range(G):
        w, bit = g >> 6, np.uint64(1) << np.uint64(g & 63)
        length = T + 1
        for j in range(T + 1):
            c = clock + j
            if c < W and s_busy[e, c, w] & bit:
                length = j
                break
        s_free_now[e, g] = length


# ----------------------------------------------------------------------------- the transition


@njit(cache=True, nogil=True, _nrt=False)
def step_into(
    s,
    actions: np.ndarray,
    advance: int,
    rules: int,
    gpus: int,
    trade: bool,
    rewards: np.ndarray,
    work: np.ndarray,
    words: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """One action in every episode: ``Episode.apply`` of each (``BatchEngine.step``).

    Args:
        s: The state, advanced in place.
        actions: (B,) int64, FIT layout (``row * rules + rule``, ``advance`` last); those of done
            episodes are ignored, forbidden ones change nothing.
        advance: The ADVANCE action.
        rules: Fit rules per row.
        gpus: G of the padded sizes.
        trade: Placements may lower the real-time curves.
        rewards: (B,) float64 out: the change in objective plus the unpaid start value; 0 for done
            episodes and forbidden actions.
        work: int64 work space (``kernels.work_sizes``' first size).
        words: uint64 work space (its second).
    """
    s_at, s_clock, s_done, s_earliest, s_load = s.at, s.clock, s.done, s.earliest, s.load
    s_objective, s_steps, s_unpaid = s.objective, s.steps, s.unpaid
    B, R = s_earliest.shape
    T, NW = s_load.shape[1], s_at.shape[2]
    # Work space (the kernels allocate nothing: they run without numba's reference counting).
    opts = work[:6]
    scratch = work[6 : 6 + 4 * T].reshape((4, T))
    room = work[6 + 4 * T : 6 + 5 * T]
    rows = work[6 + 5 * T : 6 + 5 * T + R]
    begins = work[6 + 5 * T + R : 6 + 5 * T + 2 * R]
    span, run, moved = words[:NW], words[NW : 2 * NW], words[2 * NW : 3 * NW]
    for e in range(B):
        rewards[e] = 0.0
        if s_done[e]:
            continue
        s_steps[e] += 1
        a = actions[e]
        clock = s_clock[e]
        before = s_objective[e]
        n = 0
        if a == advance:
            for r in range(R):
                if s_earliest[e, r] == clock:
                    for w in range(NW):
                        s_at[e, r, w] = 0
                    rows[n] = r
                    begins[n] = clock + 1
                    n += 1
            _room(s, e, trade, room)
        elif 0 <= a < advance:
            row, option = a // rules, a % rules
            if s_earliest[e, row] != clock:
                continue
            n = _place(s, e, row, option, trade, gpus, opts, scratch, room, rows, begins)  # leaves the room
        else:
            continue
        for i in range(n):
            _search(s, e, rows[i], begins[i], room, span, run, moved)
        _move_clock(s, e)
        rewards[e] = (s_objective[e] - before) + s_unpaid[e]
        s_unpaid[e] = 0.0


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _masks(s, out: np.ndarray, rules: int) -> None:  # pragma: no cover - compiled
    """(B, n_actions) masks (bool or int8): a row's fit rules where it can start at the clock, ADVANCE while running."""
    B, R = s.earliest.shape
    s_clock, s_done, s_earliest = s.clock, s.done, s.earliest
    for e in range(B):
        running = not s_done[e]
        for r in range(R):
            now = running and s_earliest[e, r] == s_clock[e]
            for j in range(rules):
                out[e, r * rules + j] = now
        out[e, R * rules] = running


@njit(cache=True, nogil=True, _nrt=False)
def masks_into(s, out: np.ndarray, rules: int) -> None:  # pragma: no cover - compiled
    """(B, n_actions) masks (bool or int8): a row's fit rules where it can start at the clock, ADVANCE while running."""
    _masks(s, out, rules)


@njit(cache=True, nogil=True, _nrt=False)
def _jobs_into(s, out: np.ndarray, width: int, gpus: int, opts: np.ndarray) -> None:  # pragma: no cover - compiled
    """The ``jobs`` observation (``Encoder.observe``'s) into ``out`` (B, R, len(JOB_FEATURES)), every cell.

    ``width``: the padded T (the column of ``values`` that is 0); ``gpus``: the padded G.
    """
    s_at, s_cheapest, s_clock, s_curves, s_d = s.at, s.cheapest, s.clock, s.curves, s.d
    s_done, s_earliest, s_gpus, s_k, s_load = s.done, s.earliest, s.gpus, s.k, s.load
    s_node, s_per_area, s_per_block, s_placed, s_reward_scale = (
        s.node,
        s.per_area,
        s.per_block,
        s.placed,
        s.reward_scale,
    )
    s_row_table, s_slots, s_valid, s_values, s_wide = s.row_table, s.slots, s.valid, s.values, s.wide
    B, R = s_valid.shape
    A, T = s_curves.shape[1], s_curves.shape[2]
    NW = s_at.shape[2]
    for e in range(B):
        c0, n_slots, scale = s_clock[e], s_slots[e], s_reward_scale[e]
        shift = c0 / n_slots
        for row in range(R):
            if not s_valid[e, row]:
                for j in range(_J_COUNT):
                    out[e, row, j] = 0.0
                continue
            start = s_earliest[e, row]
            pending = start >= 0
            now = start == c0 and not s_done[e]
            out[e, row, _J_VALID] = 1.0
            out[e, row, _J_PENDING] = 1.0 if pending else 0.0
            out[e, row, _J_PLACED] = 1.0 if s_placed[e, row] else 0.0
            out[e, row, _J_NOW] = 1.0 if now else 0.0
            for j in range(_J_STATIC_N):
                out[e, row, _J_STATIC + j] = s_row_table[e, row, j]
            out[e, row, _J_RELEASE] = s_row_table[e, row, _ROW_RELEASE] - shift
            out[e, row, _J_LAST_START] = s_row_table[e, row, _ROW_LAST_START] - shift
            out[e, row, _J_EARLIEST] = (start - c0) / n_slots if pending else 1.0
            out[e, row, _J_VALUE_NOW] = s_values[e, row, min(c0, n_slots)] / scale * (1.0 if now else 0.0)
            out[e, row, _J_VALUE_EARLIEST] = s_values[e, row, start if pending else width] / scale
            if not now:
                for j in range(_J_TAKE, _J_COUNT):
                    out[e, row, j] = 0.0
                continue
            # Real-time GPU-slots a start at the clock takes: k beyond the slack in each slot of its span.
            kk = s_k[e, row]
            take = 0
            for t in range(c0, min(c0 + s_d[e, row], n_slots)):
                c = min(t, T - 1)
                total = 0
                for a in range(A):
                    total += s_curves[e, a, c]
                over = kk - placement.free_capacity(s_gpus[e], s_load[e, c], total)
                if over > 0:
                    take += over
            words = s_at[e, row]
            placement.fit_choices(words, s_wide[e, row], s_node[e], gpus, opts)
            members = 0
            for w in range(NW):
                x = words[w]
                while x:
                    x &= x - np.uint64(1)
                    members += 1
            gpu_scale = 1.0 / s_gpus[e]
            waste_scale = 1.0 / s_node[e]
            cut = s_cheapest[e] / scale
            out[e, row, _J_TAKE] = take * s_per_area[e, row]
            out[e, row, _J_COST] = take * cut
            out[e, row, _J_BLOCKS] = members * s_per_block[e, row]
            out[e, row, _J_FIRST] = opts[0] * gpu_scale
            out[e, row, _J_FIRST_WASTE] = opts[1] * waste_scale
            out[e, row, _J_BEST] = opts[2] * gpu_scale
            out[e, row, _J_BEST_WASTE] = opts[3] * waste_scale
            out[e, row, _J_LAST] = opts[4] * gpu_scale
            out[e, row, _J_LAST_WASTE] = opts[5] * waste_scale


@njit(cache=True, nogil=True, _nrt=False)
def _gpus_into(s, out: np.ndarray, H: int) -> None:  # pragma: no cover - compiled
    """The ``gpus`` observation into ``out`` (B, G, 3), every cell (``H``: the observed slots)."""
    s_free_now, s_gpus, s_node = s.free_now, s.gpus, s.node
    B, G = s_free_now.shape
    inv = 1.0 / H
    for e in range(B):
        size = s_node[e]
        for g in range(G):
            if g < s_gpus[e]:
                out[e, g, _G_VALID] = 1.0
                out[e, g, _G_POSITION] = (g % size) / size
                out[e, g, _G_FREE] = min(s_free_now[e, g], H) * inv
            else:
                out[e, g, _G_VALID] = 0.0
                out[e, g, _G_POSITION] = 0.0
                out[e, g, _G_FREE] = 0.0


@njit(cache=True, nogil=True, _nrt=False)
def _slots_into(s, out: np.ndarray, trade: bool) -> None:  # pragma: no cover - compiled
    """The ``slots`` observation into ``out`` (B, T, len(SLOT_FEATURES)), every cell."""
    s_clock, s_curves, s_decay_weights, s_demand, s_floor_total = (
        s.clock,
        s.curves,
        s.decay_weights,
        s.demand,
        s.floor_total,
    )
    s_gpus, s_load, s_slots = s.gpus, s.load, s.slots
    B, A, T = s_curves.shape
    F = out.shape[2]
    for e in range(B):
        G = s_gpus[e]
        for t in range(T):
            if t >= s_slots[e]:
                for j in range(F):
                    out[e, t, j] = 0.0
                continue
            total = 0
            want = 0
            short = 0
            for a in range(A):
                total += s_curves[e, a, t]
                want += s_demand[e, a, t]
                short += max(0, s_demand[e, a, t] - s_curves[e, a, t])
            used = s_floor_total[e, t] if trade else total
            out[e, t, _S_INSIDE] = 1.0
            out[e, t, _S_PAST] = 1.0 if t < s_clock[e] else 0.0
            out[e, t, _S_LOAD] = s_load[e, t] / G
            out[e, t, _S_REALTIME] = total / G
            out[e, t, _S_DEMAND] = want / G
            out[e, t, _S_SHORTFALL] = short / G
            out[e, t, _S_SLACK] = placement.free_capacity(G, s_load[e, t], total) / G
            out[e, t, _S_ROOM] = placement.free_capacity(G, s_load[e, t], used) / G
            out[e, t, _S_DECAY] = s_decay_weights[e, t]


@njit(cache=True, nogil=True, _nrt=False)
def _apps_into(s, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """The ``apps`` observation into ``out`` (B, A, T, len(APP_CURVES)): demand, allocation and floor / G."""
    s_curves, s_demand, s_floors, s_gpus = s.curves, s.demand, s.floors, s.gpus
    B, A, T = s_curves.shape
    for e in range(B):
        G = s_gpus[e]
        for a in range(A):
            for t in range(T):
                out[e, a, t, _A_DEMAND] = s_demand[e, a, t] / G
                out[e, a, t, _A_ALLOCATION] = s_curves[e, a, t] / G
                out[e, a, t, _A_FLOOR] = s_floors[e, a, t] / G


@njit(cache=True, nogil=True, _nrt=False)
def _globals_into(
    s, out: np.ndarray, max_gpus: int, max_jobs: int, H: int, trade: bool
) -> None:  # pragma: no cover - compiled
    """The ``globals`` observation into ``out`` (B, len(GLOBAL_FEATURES))."""
    s_clock, s_decay, s_earliest, s_gpus, s_node = s.clock, s.decay, s.earliest, s.gpus, s.node
    s_objective, s_reward_scale, s_slots = s.objective, s.reward_scale, s.slots
    B, R = s_earliest.shape
    for e in range(B):
        T, clock = s_slots[e], s_clock[e]
        pending = 0
        for r in range(R):
            if s_earliest[e, r] >= 0:
                pending += 1
        out[e, _C_CLOCK] = clock / T
        out[e, _C_REMAINING] = (T - clock) / H
        out[e, _C_HORIZON] = T / H
        out[e, _C_GPUS] = s_gpus[e] / max_gpus
        out[e, _C_NODE] = s_node[e] / s_gpus[e]
        out[e, _C_PENDING] = pending / max_jobs
        out[e, _C_OBJECTIVE] = s_objective[e] / s_reward_scale[e]
        out[e, _C_DECAY] = s_decay[e]
        out[e, _C_TRADE] = 1.0 if trade else 0.0


_O_JOBS, _O_GPUS, _O_SLOTS, _O_APPS, _O_GLOBALS, _O_MASK = (
    OBSERVE_BITS[key] for key in ("jobs", "gpus", "slots", "apps", "globals", "action_mask")
)


@njit(cache=True, nogil=True, _nrt=False)
def observe_into(
    s,
    which: int,
    jobs: np.ndarray,
    gpus: np.ndarray,
    slots: np.ndarray,
    apps: np.ndarray,
    globals_: np.ndarray,
    mask: np.ndarray,
    width: int,
    max_gpus: int,
    max_jobs: int,
    trade: bool,
    rules: int,
    opts: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """The observation keys of ``which`` (``OBSERVE_BITS``) into their arrays, every cell, in one call.

    Args:
        s: The state.
        which: The keys to fill; the arrays of the others are not touched (may be empty).
        jobs: (B, R, len(JOB_FEATURES)) float32.
        gpus: (B, G, len(GPU_FEATURES)) float32.
        slots: (B, T, len(SLOT_FEATURES)) float32.
        apps: (B, A, T, len(APP_CURVES)) float32.
        globals_: (B, len(GLOBAL_FEATURES)) float32.
        mask: (B, n_actions) int8.
        width: The padded T (also H, the observed slots).
        max_gpus: The padded G.
        max_jobs: The padded R.
        trade: Placements may lower the real-time curves.
        rules: Fit rules per row.
        opts: (6,) int64 work space.
    """
    if which & _O_JOBS:
        _jobs_into(s, jobs, width, max_gpus, opts)
    if which & _O_GPUS:
        _gpus_into(s, gpus, width)
    if which & _O_SLOTS:
        _slots_into(s, slots, trade)
    if which & _O_APPS:
        _apps_into(s, apps)
    if which & _O_GLOBALS:
        _globals_into(s, globals_, max_gpus, max_jobs, width, trade)
    if which & _O_MASK:
        _masks(s, mask, rules)
