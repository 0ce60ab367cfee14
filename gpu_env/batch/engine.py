"""B planning episodes advanced together: the batched form of :class:`gpu_env.episode.Episode`.

:class:`BatchEngine` holds a :class:`~gpu_env.batch.state.BatchState` and moves
all its episodes with one call: ``step(actions)`` takes one action per episode
(FIT layout: ``row * 3 + rule``, ADVANCE last) and returns the rewards and
which episodes are done; ``action_masks()`` gives the (B, n_actions) masks.
Episodes may hold different scenarios padded to common sizes. The transition
is the reference's (``Episode.apply``), vectorised over the batch:

* a placement takes its block (bit operations on uint64 words per grid column),
  earns ``values[row, clock]``, recomputes the least-shortfall real-time curves
  in the episodes where the new load meets them, narrows the feasible first
  GPUs of the rows whose span meets the new job (``Occupancy.narrow_masks``)
  and searches on for rows left with none;
* ADVANCE searches on for every row that could start at the clock;
* the search (``Occupancy.next_feasible_mask``) tests every later start of every
  searching row at once: span-wide busy sets from a doubling table of ORs,
  capacity from a running count, runs of k free GPUs by shifts;
* the clock moves to the least earliest start, or the episode ends.

No Python loop runs over episodes; loops run over apps, shift levels and
durations. Forbidden actions change nothing and earn 0 (the env's ``ignore``).
The learned mode's configuration is supported: FIT actions, real-time curves
served from the demand (``realtime="cover"``), with or without ``trade_realtime``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpu_env.batch import bits, fit, kernels, realtime
from gpu_env.batch.state import BatchState, Sizes, Start
from gpu_env.episode import FIT_RULES, ActionLayout, ActionMode
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import Scenario

_STARTS_KEPT = 256
_BIG = np.int64(1) << 40


def sizes_for(scenarios: Sequence[Scenario]) -> Sizes:
    """The least sizes that hold every scenario."""
    return Sizes(
        jobs=max([sum(job.running_on is None for job in sc.jobs) for sc in scenarios] + [1]),
        gpus=max(sc.gpus for sc in scenarios),
        slots=max(sc.slots for sc in scenarios),
        apps=max([len(sc.apps) for sc in scenarios] + [1]),
        duration=max([job.duration for sc in scenarios for job in sc.jobs] + [1]),
    )


class BatchEngine:
    """B episodes in arrays, advanced together.

    Attributes:
        sizes: The padded sizes.
        state: The arrays (see :class:`~gpu_env.batch.state.BatchState`).
        layout: The FIT action layout (``max_jobs = sizes.jobs``).
        scenarios: The scenario of each episode (None before its first reset).
        trade_realtime: Whether placements may lower the real-time curves.
    """

    def __init__(
        self, batch: int, sizes: Sizes, *, trade_realtime: bool = True, reward_scale: float | None = None
    ) -> None:
        """Allocate B episodes (all done until reset).

        Args:
            batch: B.
            sizes: Padded sizes (:func:`sizes_for` gives the least for a set of scenarios).
            trade_realtime: As :class:`~gpu_env.episode.Episode`'s.
            reward_scale: A fixed reward scale, or None for ``G * T * w_max`` of each scenario.
        """
        if batch < 1:
            raise ValueError(f"batch: expected a positive integer, got {batch}")
        self.sizes = sizes
        self.batch = batch
        self.trade_realtime = bool(trade_realtime)
        self.fixed_reward_scale = reward_scale
        self.state = BatchState.empty(batch, sizes)
        self.layout = ActionLayout.make(ActionMode.FIT, sizes.jobs, sizes.gpus)
        self.scenarios: list[Scenario | None] = [None] * batch
        self._rows: list[np.ndarray] = [np.zeros(0, dtype=np.intp)] * batch
        self._starts: dict[int, Start] = {}
        self._node_sets = (np.zeros((batch, sizes.words), np.uint64), np.zeros((batch, sizes.words), np.uint64))
        self._cols = np.arange(sizes.width, dtype=np.int64)
        self._slot = np.arange(sizes.slots, dtype=np.int64)
        self._gpu = np.arange(sizes.gpus, dtype=np.int64)

    @classmethod
    def for_scenarios(cls, scenarios: Sequence[Scenario], batch: int | None = None, **kwargs: object) -> BatchEngine:
        """An engine sized for ``scenarios`` with episode i on ``scenarios[i % len]``, reset."""
        batch = len(scenarios) if batch is None else batch
        engine = cls(batch, sizes_for(scenarios), **kwargs)  # type: ignore[arg-type]
        engine.reset([scenarios[i % len(scenarios)] for i in range(batch)])
        return engine

    @property
    def n_actions(self) -> int:
        """Actions per episode."""
        return self.layout.n

    # ------------------------------------------------------------------ reset

    def start_of(self, scenario: Scenario) -> Start:
        """The (cached) padded start of a scenario."""
        start = self._starts.get(id(scenario))
        if start is None or start.scenario is not scenario:
            start = Start.build(
                scenario, self.sizes, trade_realtime=self.trade_realtime, reward_scale=self.fixed_reward_scale
            )
            if len(self._starts) >= _STARTS_KEPT:
                del self._starts[next(iter(self._starts))]
            self._starts[id(scenario)] = start
        return start

    def reset(self, scenarios: Scenario | Sequence[Scenario], index: np.ndarray | Sequence[int] | None = None) -> None:
        """Start episodes afresh.

        Args:
            scenarios: One scenario for every episode in ``index``, or one per episode of ``index``.
            index: Episodes to reset; default all.

        Raises:
            ValueError: A scenario does not fit the sizes.
        """
        index = np.arange(self.batch) if index is None else np.asarray(index, dtype=np.intp).reshape(-1)
        if isinstance(scenarios, Scenario):
            scenarios = [scenarios] * index.size
        if len(scenarios) != index.size:
            raise ValueError(f"reset: {len(scenarios)} scenarios for {index.size} episodes")
        groups: dict[int, list[int]] = {}
        for i, sc in zip(index.tolist(), scenarios, strict=True):
            groups.setdefault(id(sc), []).append(i)
            self.scenarios[i] = sc
        for i, sc in zip(index.tolist(), scenarios, strict=True):
            if i == groups[id(sc)][0]:
                start = self.start_of(sc)
                where = np.array(groups[id(sc)], dtype=np.intp)
                self.state.assign(where, start)
                for j in where.tolist():
                    self._rows[j] = start.rows
        starts, ends = fit.node_masks(self.state.node[index], self.sizes.gpus, self.sizes.words)
        self._node_sets[0][index], self._node_sets[1][index] = starts, ends

    # ------------------------------------------------------------------ masks

    def action_masks(self) -> np.ndarray:
        """(B, n_actions) bool: the reference's ``action_mask()`` of every episode (all False when done)."""
        s = self.state
        R = self.sizes.jobs
        mask = np.zeros((self.batch, self.layout.n), dtype=bool)
        now = (s.earliest == s.clock[:, None]) & ~s.done[:, None]
        mask[:, : R * len(FIT_RULES)] = np.repeat(now, len(FIT_RULES), axis=1)
        mask[:, -1] = ~s.done
        return mask

    def now(self) -> np.ndarray:
        """(B, R) bool: rows that can start at the clock."""
        s = self.state
        return (s.earliest == s.clock[:, None]) & ~s.done[:, None]

    def room(self, index: np.ndarray) -> np.ndarray:
        """(n, T) GPUs a new job may use in each slot (``Episode.job_slack``); huge past each horizon."""
        s = self.state
        used = s.floor_total[index] if self.trade_realtime else s.curves[index].sum(axis=1)
        room = s.gpus[index, None] - used - s.load[index]
        return np.where(self._slot < s.slots[index, None], room, _BIG)

    # ------------------------------------------------------------------ step

    def step(self, actions: np.ndarray | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Take one action in every episode.

        Args:
            actions: (B,) actions; those of done episodes are ignored, forbidden ones change nothing.

        Returns:
            rewards (B,) float64: ``Episode.apply``'s (the change in objective, plus on the first
            step what the plan was worth before it), 0 for done episodes and forbidden actions;
            done (B,) bool (a copy).
        """
        s = self.state
        a = np.asarray(actions, dtype=np.int64).reshape(self.batch)
        width = len(FIT_RULES)
        advance = self.layout.advance
        active = ~s.done
        is_adv = a == advance
        row, option = np.divmod(np.clip(a, 0, advance - 1), width)
        places = active & (a >= 0) & (a < advance) & (s.earliest[np.arange(self.batch), row] == s.clock)
        valid = places | (active & is_adv)
        s.steps[active] += 1
        before = s.objective.copy()
        searches: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        P = np.flatnonzero(places)
        if P.size:
            searches.append(self._place(P, row[P], option[P]))
        V = np.flatnonzero(valid & is_adv)
        if V.size:
            now = s.earliest[V] == s.clock[V, None]
            s.at[V] = np.where(now[..., None], np.uint64(0), s.at[V])
            vb, vr = np.nonzero(now)
            searches.append((V[vb], vr, s.earliest[V[vb], vr] + 1))
        if searches:
            self._search(*(np.concatenate(parts) for parts in zip(*searches, strict=True)))
        moved = np.flatnonzero(valid)
        if moved.size:
            self._move_clock(moved)
        rewards = np.zeros(self.batch, dtype=np.float64)
        rewards[valid] = (s.objective[valid] - before[valid]) + s.unpaid[valid]
        s.unpaid[valid] = 0.0
        return rewards, s.done.copy()

    def _place(self, b: np.ndarray, r: np.ndarray, option: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Place row r of episodes b by fit rule ``option`` at the clock; returns the rows to search on."""
        s, NW = self.state, self.sizes.words
        if kernels.ENABLED:
            lost = kernels.place_into(
                b, r, option, self.trade_realtime, self.sizes.gpus, s.busy, s.load, s.grid, s.free_now, s.placed,
                s.start, s.first, s.earliest, s.at, s.job_value, s.objective, s.curves, s.shortfall_cost, s.clock,
                s.k, s.d, s.wide, s.node, s.values, s.slots, s.gpus, s.base, s.initial, s.ramp, s.order, s.floors,
                s.floor_total, s.demand, s.penalty,
            )  # fmt: skip
            lb, lr = np.nonzero(lost)
            return b[lb], lr, s.earliest[b[lb], lr] + 1
        n = b.size
        at = s.at[b, r]
        t, k, d = s.clock[b], s.k[b, r], s.d[b, r]
        table = fit.choices(at, s.wide[b, r], self._node_sets[0][b], self._node_sets[1][b], int(s.node[b].max()))
        first = table[np.arange(n), 2 * option]
        # The grid: the block is busy over [t, t + d).
        span = (self._cols >= t[:, None]) & (self._cols < (t + d)[:, None])  # (n, W)
        block = bits.range_mask(first, first + k, NW)  # (n, NW)
        s.busy[b] |= np.where(span[..., None], block[:, None, :], np.uint64(0))
        T = self.sizes.slots
        inside = self._slot < s.slots[b, None]  # (n, T)
        span_t = span[:, :T] & inside
        s.load[b] += span_t * k[:, None]
        on_block = (self._gpu >= first[:, None]) & (self._gpu < (first + k)[:, None])  # (n, G)
        self._mark_grid(b, first, k, t, np.minimum(t + d, T) - t)
        s.free_now[b] = np.where(on_block, 0, s.free_now[b])
        self._finish_place(b, r, t, first)
        if self.trade_realtime:
            total = s.curves[b].sum(axis=1)
            over = ((s.load[b] + total > s.gpus[b, None]) & span_t).any(axis=1)
            if over.any():
                c = b[over]
                s.curves[c] = realtime.realtime_curves(
                    s.base[c], s.initial[c], s.ramp[c], s.order[c], s.floors[c], s.gpus[c], s.load[c], inside[over]
                )
                s.shortfall_cost[c] = realtime.shortfall_cost(s.curves[c], s.demand[c], s.penalty[c])
        s.objective[b] = s.job_value[b] - s.shortfall_cost[b]
        # Rows whose span at their earliest start meets the new job lose the blocks that meet it,
        # and all their blocks when the capacity over their span no longer covers them.
        e, kr, dr = s.earliest[b], s.k[b], s.d[b]  # (n, R)
        hit = (e >= 0) & (e < (t + d)[:, None]) & (e + dr > t[:, None])
        if not hit.any():
            return (np.zeros(0, np.intp),) * 2 + (np.zeros(0, np.int64),)
        clear = bits.range_mask(np.maximum(first[:, None] - kr + 1, 0), (first + k)[:, None], NW)
        kept = np.where(hit[..., None], s.at[b] & ~clear, s.at[b])
        low = _span_min(self.room(b), e, dr, self.sizes.duration)
        short = hit & bits.any_set(kept) & (low < kr)
        kept[short] = 0
        s.at[b] = kept
        lost = hit & ~bits.any_set(kept)
        lb, lr = np.nonzero(lost)
        return b[lb], lr, e[lb, lr] + 1

    def _finish_place(self, b: np.ndarray, r: np.ndarray, t: np.ndarray, first: np.ndarray) -> None:
        """Record the placements of rows r of episodes b at t on ``first`` and earn their values."""
        s = self.state
        s.placed[b, r] = True
        s.start[b, r] = t
        s.first[b, r] = first
        s.earliest[b, r] = -1
        s.at[b, r] = 0
        s.job_value[b] += s.values[b, r, t]

    def _mark_grid(self, b: np.ndarray, first: np.ndarray, k: np.ndarray, t: np.ndarray, length: np.ndarray) -> None:
        """Set the observation grid's channel 0 on GPUs ``first..first+k-1`` x slots ``t..t+length-1``, cell by cell."""
        G, T = self.sizes.gpus, self.sizes.slots
        cells = k * length
        owner = np.repeat(np.arange(b.size), cells)
        offset = np.arange(owner.size) - np.repeat(np.cumsum(cells) - cells, cells)
        gpu = first[owner] + offset // length[owner]
        slot = t[owner] + offset % length[owner]
        self.state.grid.reshape(-1)[((b[owner] * G + gpu) * T + slot) * 2] = 1.0

    def _search(self, b: np.ndarray, r: np.ndarray, begin: np.ndarray) -> None:
        """Move each (episode, row) to its first feasible start >= ``begin`` (``Occupancy.next_feasible_mask``)."""
        s, T = self.state, self.sizes.slots
        if not b.size:
            return
        if kernels.ENABLED:
            used = s.floor_total if self.trade_realtime else s.curves.sum(axis=1)
            kernels.search_into(
                b, r, begin, s.lo, s.hi, s.k, s.d, s.shifts, s.allowed, s.everyone, s.busy, s.gpus, s.slots,
                used, s.load, s.earliest, s.at,
            )  # fmt: skip
            return
        episodes, which = np.unique(b, return_inverse=True)
        table = _or_table(s.busy[episodes], self.sizes.duration)  # (u, L, W, NW)
        k, d = s.k[b, r], s.d[b, r]
        lo = np.maximum(begin, s.lo[b, r])
        slot = self._slot[None, :]
        window = (slot >= lo[:, None]) & (slot < s.hi[b, r][:, None])  # (P, T)
        room = self.room(episodes)[which]  # (P, T)
        short = np.zeros((b.size, T + 1), dtype=np.int64)
        np.cumsum(room < k[:, None], axis=1, out=short[:, 1:])
        end = np.minimum(slot + d[:, None], T)
        fits = np.take_along_axis(short, end, axis=1) == short[:, :T]
        candidates = window & fits
        level = np.floor(np.log2(d)).astype(np.int64)
        offset = d - (np.int64(1) << level)
        rows = np.broadcast_to(which[:, None], (b.size, T))
        lv = np.broadcast_to(level[:, None], (b.size, T))
        spans = table[rows, lv, slot] | table[rows, lv, slot + offset[:, None]]  # (P, T, NW)
        run = bits.grow_runs(~spans & s.everyone[b][:, None, :], s.shifts[b, r][:, None, :])
        run &= s.allowed[b, r][:, None, :]
        ok = candidates & bits.any_set(run)
        found = ok.any(axis=1)
        when = np.argmax(ok, axis=1)
        s.earliest[b, r] = np.where(found, when, -1)
        s.at[b, r] = np.where(found[:, None], run[np.arange(b.size), when], np.uint64(0))

    def _move_clock(self, b: np.ndarray) -> None:
        """The clock to the least earliest start of each episode b, or the episode ends."""
        s = self.state
        e = s.earliest[b]
        pending = e >= 0
        has = pending.any(axis=1)
        clock = np.where(has, np.where(pending, e, _BIG).min(axis=1), s.clock[b])
        moved = b[clock != s.clock[b]]
        s.clock[b] = clock
        s.done[b] |= ~has
        if moved.size:
            self._free_runs(moved)

    def _free_runs(self, b: np.ndarray) -> None:
        """``free_now`` of episodes b at their clock: consecutive free slots of each GPU, capped at T + 1."""
        s, T = self.state, self.sizes.slots
        if kernels.ENABLED:
            kernels.free_runs_into(b, s.clock, s.busy, T, s.free_now)
            return
        cols = s.clock[b, None] + np.arange(T + 1)  # (n, T + 1)
        inside = cols < self.sizes.width
        window = np.take_along_axis(s.busy[b], np.minimum(cols, self.sizes.width - 1)[..., None], axis=1)
        window = np.where(inside[..., None], window, np.uint64(0))
        busy = bits.unpack(window, self.sizes.gpus)  # (n, T + 1, G)
        s.free_now[b] = np.where(busy.any(axis=1), busy.argmax(axis=1), T + 1)

    # ------------------------------------------------------------------ results

    def plan(self, i: int, scheduler: str = "env") -> Plan:
        """The plan of episode i so far, with metrics: ``Episode.plan()``'s."""
        sc = self.scenarios[i]
        if sc is None:
            raise ValueError(f"episode {i} has not been reset")
        s = self.state
        return plan_of(sc, self._rows[i], s.placed[i], s.start[i], s.first[i], s.curves[i], scheduler)


def plan_of(
    sc: Scenario,
    rows: np.ndarray,
    placed: np.ndarray,
    start: np.ndarray,
    first: np.ndarray,
    curves: np.ndarray,
    scheduler: str = "env",
) -> Plan:
    """The plan of one episode from its arrays (any engine's), with metrics: ``Episode.plan()``'s.

    Args:
        sc: The scenario.
        rows: (R_s,) scenario job index of each row.
        placed: (R,) bool.
        start: (R,) start slot of each placed row.
        first: (R,) first GPU of each placed row.
        curves: (A, T) real-time curves.
        scheduler: The plan's scheduler name.
    """
    starts: dict[int, tuple[int, int]] = {}
    for j, job in enumerate(sc.jobs):
        if job.running_on is not None:
            starts[j] = (0, job.running_on[0])
    for r in np.flatnonzero(placed[: rows.size]).tolist():
        starts[int(rows[r])] = (int(start[r]), int(first[r]))
    placements = []
    for j in sorted(starts):
        t, g = starts[j]
        job = sc.jobs[j]
        placements.append(Placement(job.id, t, tuple(range(g, g + job.gpus))))
    T = sc.slots
    plan_curves = {app.name: [int(x) for x in curves[a, :T]] for a, app in enumerate(sc.apps)}
    plan = Plan(sc.name, scheduler, placements, plan_curves)
    plan.metrics = compute_metrics(sc, plan)
    return plan


def _or_table(busy: np.ndarray, duration: int) -> np.ndarray:
    """(u, L, W, NW): level l holds the OR of busy sets over columns ``[c, c + 2**l)`` (zeros past W)."""
    u, W, NW = busy.shape
    levels = max(1, int(np.floor(np.log2(max(duration, 1)))) + 1)
    table = np.zeros((u, levels, W, NW), dtype=np.uint64)
    table[:, 0] = busy
    for level in range(1, levels):
        half = 1 << (level - 1)
        table[:, level] = table[:, level - 1]
        table[:, level, : W - half] |= table[:, level - 1, half:]
    return table


def _span_min(room: np.ndarray, start: np.ndarray, duration: np.ndarray, longest: int) -> np.ndarray:
    """(n, R) least ``room[i, start + j]`` over ``0 <= j < duration`` (room is huge past the horizon)."""
    n, T = room.shape
    # A doubling table of minima over [t, t + 2**l), then two overlapping windows per span.
    levels = max(1, int(np.floor(np.log2(max(longest, 1)))) + 1)
    table = np.full((levels, n, T + longest), _BIG, dtype=np.int64)
    table[0, :, :T] = room
    for level in range(1, levels):
        half = 1 << (level - 1)
        table[level] = table[level - 1]
        np.minimum(table[level, :, :-half], table[level - 1, :, half:], out=table[level, :, :-half])
    safe = np.maximum(start, 0)
    level = np.floor(np.log2(duration)).astype(np.int64)
    rows = np.arange(n)[:, None]
    return np.minimum(table[level, rows, safe], table[level, rows, safe + duration - (np.int64(1) << level)])
