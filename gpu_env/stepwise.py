"""A policy that sees the grid as it decodes: each turn scores a window of the queue against the partial plan.

The static planner (:mod:`agents.ppo`) scores the queue once and decodes the order. Here the order is built one
turn at a time (``docs/learned-mode.md``, "The stepwise policy"), compiled, with no Python per turn:

1. The **window** is the first :data:`WINDOW` jobs, in greedy's priority order, that have not had their turn.
2. Each job of the window gets :data:`STEP_FEATURES`, read from the plan as it stands: its earliest feasible start
   on the grid (and the value it keeps there), the fragmentation its block would leave (touching perimeter), the
   real-time slack in its slots, its value and value density against the window's best, its deadline slack,
   what the queue behind it needs in its slots, and for a job that fits only by taking real-time capacity, what
   that trade costs against its value.
3. A small network scores them: ``relu(static[j] + step_features @ w_step) @ w_out + b_out``, where ``static[j]``
   is the job's hidden row computed once per plan from :data:`gpu_env.queue_features.JOB_FEATURES` and the cluster
   (the exported ONNX model's first output, :mod:`agents.ppo_stepwise`). The best score takes the turn (greedy's
   placement: :func:`gpu_env.listsched.take_turn`); a sampled candidate adds Gumbel noise of ``temperature``.
4. The turns' order is the candidate: :func:`gpu_env.listsched.decode` replays it (the same plan, it is
   deterministic) and promotes on it.

A job's earliest start is cached between turns and recomputed only when its block or its capacity is gone (both
only shrink), or after a trade (which moves the real-time curves). Every plan keeps the rules: the decoder places.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from gpu_env import listsched, placement
from gpu_env.listsched import Choice, ListInstance, Live, Scratch, new_live, new_scratch
from gpu_env.placement import njit

WINDOW = 12
"""Jobs scored per turn: the first undecided ones in greedy's priority order."""

STEP_FEATURES: tuple[str, ...] = (
    "fits",  # 1 when the job has a start in the capacity the curves leave
    "delay",  # (earliest start - first allowed start) / T; 1 without a start
    "value_kept",  # value at the earliest start / value at the first allowed start
    "value_share",  # value at the earliest start / the window's largest
    "density_share",  # that value per GPU-slot / the window's largest
    "deadline_slack",  # (last allowed start - earliest start) / T
    "contact",  # touching perimeter of its block / the block's perimeter (1: fits snugly)
    "room_slack",  # least free capacity over its span less its GPUs, / G
    "trade_only",  # 1 when it fits only by taking real-time capacity (above the ramp floors)
    "pressure",  # GPUs the undecided queue needs per slot over its span (spread over windows), / G
    "window_rank",  # position in the window, 0 .. 1
    "progress",  # share of the pending jobs that had their turn
    "trade_cost",  # a trade-only job: least penalty of the GPUs it takes from the curves / its value there; else 0
)
"""For a job that fits only by a trade (``trade_only``), ``value_kept``, ``value_share``, ``density_share`` and
``deadline_slack`` are read at its earliest start above the ramp floors; ``fits`` is 0 and ``delay`` 1."""

TRADE_COST_CAP = 4.0
"""``trade_cost`` is capped here: a trade that costs four times the job's value is as bad as any."""


class StepHead(NamedTuple):
    """The per-turn part of the network (the ONNX model's outputs after ``static``).

    Attributes:
        w_step: (len(STEP_FEATURES), H) float64.
        w_out: (H,) float64.
        b_out: (1,) float64.
    """

    w_step: np.ndarray
    w_out: np.ndarray
    b_out: np.ndarray


class Rollout(NamedTuple):
    """What :func:`roll` records of one candidate, turn by turn (training reads it).

    Attributes:
        objective: The plan's objective.
        order: (m,) the jobs in the order they took their turn (-1 padding).
        window: (m, WINDOW) the window's jobs at each turn (-1 padding).
        features: (m, WINDOW, len(STEP_FEATURES)) their step features.
        chosen: (m,) the window position that took the turn.
        turns: How many turns were taken.
    """

    objective: float
    order: np.ndarray
    window: np.ndarray
    features: np.ndarray
    chosen: np.ndarray
    turns: int


def priority_order(inst: ListInstance, weight: np.ndarray, has_deadline: np.ndarray) -> np.ndarray:
    """The pending jobs in greedy's priority order (:func:`agents.greedy._order_weight`'s key)."""
    pending = np.flatnonzero(inst.pending)
    keys = sorted(
        pending.tolist(),
        key=lambda i: (-weight[i], not has_deadline[i], -inst.first_value[i], int(inst.lo[i]), i),
    )
    return np.array(keys, dtype=np.int64)


def roll(
    inst: ListInstance,
    base: np.ndarray,
    static: np.ndarray,
    head: StepHead,
    mode: int,
    temperature: float = 0.0,
    seed: int = 0,
    forced: np.ndarray | None = None,
    first: int = -1,
) -> Rollout:
    """One candidate built turn by turn, everything recorded.

    Args:
        inst: The scenario's arrays.
        base: (m,) the pending jobs in priority order (:func:`priority_order`): the window slides along it.
        static: (n, H) each job's hidden row (the ONNX model's ``static`` output).
        head: The per-turn weights.
        mode: Trade mode (:data:`gpu_env.listsched.MODES`).
        temperature: Gumbel noise on the scores (0: the argmax).
        seed: Seed of the noise.
        forced: (n,) a teacher's preference per job: each turn takes the window's most preferred job instead of the
            network's choice (imitation's labels); the features are recorded as they are.
        first: A window position the first turn takes whatever the scores (POMO's multiple starts); -1: none, and
            none when the first window is smaller.
    """
    _check_head(head)
    prefer = np.zeros(0, dtype=np.float64) if forced is None else np.ascontiguousarray(forced, dtype=np.float64)
    m = base.size
    order = np.full(m, -1, dtype=np.int64)
    window = np.full((m, WINDOW), -1, dtype=np.int64)
    features = np.zeros((m, WINDOW, len(STEP_FEATURES)), dtype=np.float64)
    chosen = np.full(m, -1, dtype=np.int64)
    live = new_live(inst)
    sc = new_scratch(inst)
    how = listsched.choice()
    if inst.curves.shape[0] == 0:
        mode = listsched.MODE_OFF
    objective, turns = _roll(
        inst, live, sc, how, base, static, head.w_step, head.w_out, head.b_out, int(mode),
        float(temperature), int(seed), True, prefer, int(first), order, window, features, chosen,
    )  # fmt: skip
    return Rollout(float(objective), order, window, features, chosen, int(turns))


def orders(
    inst: ListInstance,
    base: np.ndarray,
    static: np.ndarray,
    head: StepHead,
    modes: np.ndarray,
    temperatures: np.ndarray,
    seed: int = 0,
) -> np.ndarray:
    """K candidates' turn orders in one compiled call (candidate c: ``modes[c]``, ``temperatures[c]``).

    Returns:
        (K, m) job orders for :func:`gpu_env.listsched.decode`.
    """
    _check_head(head)
    modes = np.ascontiguousarray(modes, dtype=np.int64)
    temperatures = np.ascontiguousarray(temperatures, dtype=np.float64)
    if modes.shape != temperatures.shape or modes.ndim != 1:
        raise ValueError(f"modes and temperatures must be (K,) each, got {modes.shape} and {temperatures.shape}")
    out = np.full((modes.size, base.size), -1, dtype=np.int64)
    if inst.curves.shape[0] == 0:
        modes = np.zeros_like(modes)
    _orders(inst, listsched.choice(), base, static, head.w_step, head.w_out, head.b_out, modes, temperatures, seed, out)
    return out


def _check_head(head: StepHead) -> None:
    """The compiled loop writes every step feature by position: a head for another feature set is refused."""
    if head.w_step.ndim != 2 or head.w_step.shape[0] != len(STEP_FEATURES):
        raise ValueError(
            f"w_step must have one row per step feature ({len(STEP_FEATURES)}), got shape {head.w_step.shape}"
        )


# ----------------------------------------------------------------------------- compiled


@njit(cache=True, nogil=True)
def _orders(
    inst: ListInstance,
    how: Choice,
    base: np.ndarray,
    static: np.ndarray,
    w_step: np.ndarray,
    w_out: np.ndarray,
    b_out: np.ndarray,
    modes: np.ndarray,
    temperatures: np.ndarray,
    seed: int,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    sc = new_scratch(inst)
    live = listsched.blank_live(inst)
    window = np.zeros((1, WINDOW), dtype=np.int64)
    features = np.zeros((1, WINDOW, len(STEP_FEATURES)), dtype=np.float64)
    chosen = np.zeros(1, dtype=np.int64)
    prefer = np.zeros(0, dtype=np.float64)
    for c in range(modes.size):
        _roll(
            inst, live, sc, how, base, static, w_step, w_out, b_out, modes[c], temperatures[c],
            seed * 1_000_003 + c, False, prefer, -1, out[c], window, features, chosen,
        )  # fmt: skip


@njit(cache=True, nogil=True, inline="always")
def _share(inst: ListInstance, j: int, T: int) -> float:  # pragma: no cover - compiled
    """GPUs job j needs per slot it may occupy: its GPU-slots in the horizon spread over them (0: none)."""
    span = min(T, inst.hi[j] + inst.d[j] - 1) - inst.lo[j]
    if span <= 0:
        return 0.0
    return inst.k[j] * min(inst.d[j], span) / span


@njit(cache=True, nogil=True)
def _earliest_in(
    inst: ListInstance,
    j: int,
    busy: np.ndarray,
    room: np.ndarray,
    span: np.ndarray,
    t_cache: np.ndarray,
    a_cache: np.ndarray,
    fresh: bool,
) -> tuple:  # pragma: no cover - compiled
    """Job j's earliest (start, first GPU) in ``room``, from the cache where it still holds."""
    t, a = t_cache[j], a_cache[j]
    if not fresh:
        if t < 0:
            return t, a
        if placement.fits(inst.k[j], t, inst.d[j], inst.slots, room) and placement.block_free(inst, j, t, a, busy):
            return t, a
    t, a = placement.earliest(inst, j, busy, room, span)
    t_cache[j] = t
    a_cache[j] = a
    return t, a


@njit(cache=True, nogil=True, inline="always")
def _meets(t: int, a: int, k: int, d: int, last: np.ndarray, margin: int) -> bool:  # pragma: no cover - compiled
    """Whether the block (t, a, k, d), grown by ``margin`` cells on each side, meets the last placement's block."""
    if last[0] < 0:
        return False
    lt, la, lk, ld = last[0], last[1], last[2], last[3]
    return t - margin < lt + ld and lt < t + d + margin and a - margin < la + lk and la < a + k + margin


@njit(cache=True, nogil=True)
def _window_start(
    inst: ListInstance,
    j: int,
    busy: np.ndarray,
    room: np.ndarray,
    span: np.ndarray,
    t_cache: np.ndarray,
    a_cache: np.ndarray,
    fresh: bool,
    last: np.ndarray,
) -> tuple:  # pragma: no cover - compiled
    """Job j's earliest (start, first GPU, recomputed) for a job of the window, checked against the last placement.

    A window job's cache was checked at the previous turn, so only the last placement can have taken its block or
    its capacity (room changes only in the slots it holds); a trade marks every job fresh.
    """
    t, a = t_cache[j], a_cache[j]
    k, d = inst.k[j], inst.d[j]
    if not fresh:
        if t < 0:
            return t, a, False
        if last[0] < 0:
            return t, a, False
        lt, ld = last[0], last[3]
        overlaps_time = t < lt + ld and lt < t + d
        if not overlaps_time:
            return t, a, False
        if not _meets(t, a, k, d, last, 0) and placement.fits(k, t, d, inst.slots, room):
            return t, a, False
    t, a = placement.earliest(inst, j, busy, room, span)
    t_cache[j] = t
    a_cache[j] = a
    return t, a, True


# One numba kernel (njit), kept whole: each turn's phases (window, features, scores, the turn) share the 18 scratch
# arrays and caches allocated above the loop; as separate njit functions they would take them all as arguments, and
# each would be one more function for numba to type, compile and cache (the small helpers use inline="always").
@njit(cache=True, nogil=True)
def _roll(
    inst: ListInstance,
    live: Live,
    sc: Scratch,
    how: Choice,
    base: np.ndarray,
    static: np.ndarray,
    w_step: np.ndarray,
    w_out: np.ndarray,
    b_out: np.ndarray,
    mode: int,
    temperature: float,
    seed: int,
    record: bool,
    forced: np.ndarray,
    first: int,
    order: np.ndarray,
    window_out: np.ndarray,
    features_out: np.ndarray,
    chosen_out: np.ndarray,
) -> tuple:  # pragma: no cover - compiled
    """One candidate turn by turn into ``live`` (reset first); (objective, turns)."""
    n = inst.k.size
    T, G = inst.slots, inst.gpus
    m = base.size
    D = w_step.shape[0]
    H = w_step.shape[1]
    listsched._reset(inst, live)
    np.random.seed(seed)
    trade = mode == 1
    t_cache = np.full(n, -1, dtype=np.int64)
    a_cache = np.full(n, -1, dtype=np.int64)
    f_cache = np.full(n, -1, dtype=np.int64)  # earliest start above the ramp floors (trades allowed)
    g_cache = np.full(n, -1, dtype=np.int64)
    fresh = np.ones(n, dtype=np.bool_)  # t_cache must be recomputed
    f_fresh = np.ones(n, dtype=np.bool_)  # f_cache must be recomputed
    win = np.empty(WINDOW, dtype=np.int64)
    feat = np.zeros((WINDOW, D), dtype=np.float64)
    score = np.empty(WINDOW, dtype=np.float64)
    t0 = np.empty(WINDOW, dtype=np.int64)
    pressure = np.zeros(T + 1, dtype=np.float64)  # prefix sums of the queue's need per slot
    need = np.zeros(T, dtype=np.float64)
    floor_room = np.empty(T, dtype=np.int64)
    tf0 = np.empty(WINDOW, dtype=np.int64)  # earliest start above the ramp floors of a window job that does not fit
    hidden = np.empty(H, dtype=np.float64)
    contact = np.zeros(n, dtype=np.float64)  # touching perimeter of each job's cached block, / its perimeter
    slack = np.zeros(n, dtype=np.float64)  # least free capacity over its span less its GPUs, / G
    last = np.full(4, -1, dtype=np.int64)  # the last placement's (start, first GPU, GPUs, duration); -1: none
    turns = 0
    # The undecided queue's need per slot: each job's GPU-slots spread over the slots it may occupy (a job's share
    # leaves it when it takes its turn).
    for p in range(m):
        j = base[p]
        share = _share(inst, j, T)
        for t in range(inst.lo[j], min(T, inst.hi[j] + inst.d[j] - 1)):
            need[t] += share
    listsched._set_room(inst, live.load, live.curves, sc, live.excess)
    while turns < m:
        # The window: the first undecided jobs in priority order.
        size = 0
        for p in range(m):
            j = base[p]
            if not live.decided[j]:
                win[size] = j
                size += 1
                if size == WINDOW:
                    break
        if size == 0:
            break
        pressure[0] = 0.0
        for t in range(T):
            pressure[t + 1] = pressure[t] + need[t]
        for t in range(T):
            floor_room[t] = placement.free_capacity(G, live.load[t], inst.floor_total[t])
        best_value = 1e-12
        best_density = 1e-12
        for w in range(size):
            j = win[w]
            t, a, again = _window_start(inst, j, live.busy, sc.room, sc.span, t_cache, a_cache, fresh[j], last)
            t0[w] = t
            k, d = inst.k[j], inst.d[j]
            if t >= 0 and (again or _meets(t, a, k, d, last, 1)):  # the block or a neighbour changed
                contact[j] = placement.contact(inst, j, t, a, live.busy) / (2.0 * (k + d))
            if t >= 0 and (again or (last[0] >= 0 and t < last[0] + last[3] and last[0] < t + d)):
                least = G
                for s in range(t, min(t + d, T)):
                    least = min(least, sc.room[s] - k)
                slack[j] = least / G
            tf0[w] = -1
            if t < 0:
                tf, _ = _earliest_in(inst, j, live.busy, floor_room, sc.span, f_cache, g_cache, f_fresh[j])
                f_fresh[j] = False
                tf0[w] = tf
            at = t if t >= 0 else tf0[w]
            if at >= 0:
                v = inst.values[j, at]
                best_value = max(best_value, v)
                best_density = max(best_density, v / (inst.k[j] * inst.d[j]))
        for w in range(size):
            j = win[w]
            k, d = inst.k[j], inst.d[j]
            t = t0[w]
            for i in range(D):
                feat[w, i] = 0.0
            tf = tf0[w]
            at = t if t >= 0 else tf
            if at >= 0:
                v = inst.values[j, at]
                feat[w, 2] = v / inst.first_value[j] if inst.first_value[j] > 0 else 0.0
                feat[w, 3] = v / best_value
                feat[w, 4] = v / (k * d) / best_density
                feat[w, 5] = (inst.hi[j] - 1 - at) / T
            if t >= 0:
                feat[w, 0] = 1.0
                feat[w, 1] = (t - inst.lo[j]) / T
                feat[w, 6] = contact[j]
                feat[w, 7] = slack[j]
                lo = t
            else:
                feat[w, 1] = 1.0
                feat[w, 8] = 1.0 if tf >= 0 else 0.0
                if tf >= 0:  # the GPUs beyond the room and the curves' excess, at the least penalty (decoder's bound)
                    taken = 0
                    for s in range(tf, min(tf + d, T)):
                        taken += max(0, k - sc.room[s] - live.excess[s])
                    v = inst.values[j, tf]
                    cost = inst.min_penalty * taken if taken > 0 else 0.0
                    feat[w, 12] = min(TRADE_COST_CAP, cost / v) if v > 0 else TRADE_COST_CAP
                lo = tf if tf >= 0 else inst.lo[j]
            fresh[j] = False
            hi = min(lo + d, T)
            if hi > lo:  # the queue's need over the span, less this job's own share
                feat[w, 9] = max(0.0, (pressure[hi] - pressure[lo]) / (hi - lo) - _share(inst, j, T)) / G
            feat[w, 10] = w / (WINDOW - 1)
            feat[w, 11] = turns / m
        # Scores, and the turn.
        pick = 0
        for w in range(size):
            j = win[w]
            s = b_out[0]
            for h in range(H):
                x = static[j, h]
                for i in range(D):
                    x += feat[w, i] * w_step[i, h]
                hidden[h] = x if x > 0.0 else 0.0
                s += hidden[h] * w_out[h]
            if temperature > 0.0:
                u = np.random.random()
                s += temperature * -np.log(-np.log(u + 1e-300) + 1e-300)
            if forced.size:
                s = forced[j]
            score[w] = s
            if score[w] > score[pick]:
                pick = w
        if turns == 0 and 0 <= first < size:
            pick = first
        j = win[pick]
        if record:
            for w in range(WINDOW):
                window_out[turns, w] = win[w] if w < size else -1
                for i in range(D):
                    features_out[turns, w, i] = feat[w, i] if w < size else 0.0
            chosen_out[turns] = pick
        order[turns] = j
        turns += 1
        live.decided[j] = True
        share = _share(inst, j, T)
        for t in range(inst.lo[j], min(T, inst.hi[j] + inst.d[j] - 1)):
            need[t] -= share
        traded_before = live.money[1]
        last[0] = -1
        if listsched._turn(inst, live, j, trade, how, sc):
            last[0], last[1], last[2], last[3] = live.start[j], live.first[j], inst.k[j], inst.d[j]
        else:
            live.left[live.count[0]] = j
            live.count[0] += 1
        if live.money[1] != traded_before:  # a trade moved the curves: every cached start is recomputed
            for i in range(n):
                fresh[i] = True
                f_fresh[i] = True
    if mode == 2:
        listsched._second_turn(inst, live, np.bool_(True), how, sc)
    return live.money[0] - live.money[1], turns
