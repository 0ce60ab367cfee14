"""The batched engine on torch tensors (CPU or CUDA): masks, step, rewards and plans of B episodes.

:class:`TorchEngine` has :class:`~gpu_env.batch.engine.BatchEngine`'s interface
(``for_scenarios``, ``reset``, ``action_masks``, ``step``, ``plan``) and its
exact semantics (the differential test drives it against the reference
:class:`~gpu_env.episode.Episode`), with its state in a
:class:`~gpu_env.batch.state.BatchState` of torch tensors on ``device``.

Sets of GPUs are bool tensors over the G GPUs instead of uint64 words (torch
2.13 has no shifts, negation or subtraction for uint64): ``busy`` is (B, W, G),
``at`` and ``allowed`` are (B, R, G), ``everyone`` is (B, G). Runs of k free
GPUs come from a running count of busy GPUs along G; the fit rules from the
group starts and ends of each row. Integers are int64, money float64, so the
rewards and objectives equal the numpy engine's within 1e-9 (the test's
tolerance), and the observation grid is float32 as everywhere.

Observations (:func:`observe`) give the network's keys as tensors on the device.
Torch is imported by this module only; the allocator's planning path uses the
numpy engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

import numpy as np
import torch

from gpu_env.batch import bits
from gpu_env.batch.engine import plan_of, sizes_for
from gpu_env.batch.state import BatchState, Sizes, Start
from gpu_env.episode import FIT_RULES, ActionLayout, ActionMode
from gpu_env.observation import GLOBAL_FEATURES, JOB_FEATURES
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario

_BIG = 1 << 40
_SETS = ("allowed", "everyone", "busy", "at")  # uint64 words in the numpy engine, bool over G here
_STARTS_KEPT = 256


def _tensor(name: str, value: np.ndarray, gpus: int, device: torch.device) -> torch.Tensor:
    if name in _SETS:
        value = bits.unpack(value, gpus)
    elif value.dtype == np.uint64:
        raise TypeError(name)
    return torch.as_tensor(np.ascontiguousarray(value), device=device)


class TorchEngine:
    """B episodes in torch tensors on one device, advanced together (see the module docstring).

    Attributes:
        sizes: The padded sizes.
        state: A :class:`BatchState` of tensors (GPU sets as bool over G).
        layout: The FIT action layout.
        scenarios: The scenario of each episode.
        device: The tensors' device.
    """

    def __init__(
        self,
        batch: int,
        sizes: Sizes,
        *,
        trade_realtime: bool = True,
        reward_scale: float | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        """Allocate B episodes (all done until reset); arguments as :class:`BatchEngine`'s, plus ``device``."""
        if batch < 1:
            raise ValueError(f"batch: expected a positive integer, got {batch}")
        self.sizes = sizes
        self.batch = batch
        self.device = torch.device(device)
        self.trade_realtime = bool(trade_realtime)
        self.fixed_reward_scale = reward_scale
        empty = BatchState.empty(batch, sizes)
        self.state = BatchState(
            **{f.name: _tensor(f.name, getattr(empty, f.name), sizes.gpus, self.device) for f in fields(BatchState)}
        )
        self.layout = ActionLayout.make(ActionMode.FIT, sizes.jobs, sizes.gpus)
        self.scenarios: list[Scenario | None] = [None] * batch
        self._rows: list[np.ndarray] = [np.zeros(0, dtype=np.intp)] * batch
        self._starts: dict[int, tuple[Start, dict[str, torch.Tensor]]] = {}
        dev = self.device
        self._cols = torch.arange(sizes.width, device=dev)
        self._slot = torch.arange(sizes.slots, device=dev)
        self._gpu = torch.arange(sizes.gpus, device=dev)
        self._levels = max(1, sizes.duration.bit_length())

    @classmethod
    def for_scenarios(cls, scenarios: Sequence[Scenario], batch: int | None = None, **kwargs: object) -> TorchEngine:
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

    def _start_of(self, scenario: Scenario) -> tuple[Start, dict[str, torch.Tensor]]:
        cached = self._starts.get(id(scenario))
        if cached is None or cached[0].scenario is not scenario:
            start = Start.build(
                scenario, self.sizes, trade_realtime=self.trade_realtime, reward_scale=self.fixed_reward_scale
            )
            tensors = {
                name: _tensor(name, np.asarray(value), self.sizes.gpus, self.device)
                for name, value in start.arrays.items()
            }
            if len(self._starts) >= _STARTS_KEPT:
                del self._starts[next(iter(self._starts))]
            cached = self._starts[id(scenario)] = (start, tensors)
        return cached

    def reset(self, scenarios: Scenario | Sequence[Scenario], index: Sequence[int] | np.ndarray | None = None) -> None:
        """Start episodes afresh (as :meth:`BatchEngine.reset`)."""
        index = np.arange(self.batch) if index is None else np.asarray(index, dtype=np.int64).reshape(-1)
        if isinstance(scenarios, Scenario):
            scenarios = [scenarios] * index.size
        if len(scenarios) != index.size:
            raise ValueError(f"reset: {len(scenarios)} scenarios for {index.size} episodes")
        groups: dict[int, list[int]] = {}
        for i, sc in zip(index.tolist(), scenarios, strict=True):
            groups.setdefault(id(sc), []).append(i)
            self.scenarios[i] = sc
        done: set[int] = set()
        for sc in scenarios:
            if id(sc) in done:
                continue
            done.add(id(sc))
            start, tensors = self._start_of(sc)
            where = torch.as_tensor(groups[id(sc)], device=self.device)
            for name, value in tensors.items():
                getattr(self.state, name)[where] = value
            for j in groups[id(sc)]:
                self._rows[j] = start.rows

    # ------------------------------------------------------------------ masks

    def now(self) -> torch.Tensor:
        """(B, R) bool: rows that can start at the clock."""
        s = self.state
        return (s.earliest == s.clock[:, None]) & ~s.done[:, None]

    def action_masks(self) -> torch.Tensor:
        """(B, n_actions) bool on the device: the reference's ``action_mask()`` of every episode."""
        s = self.state
        return torch.cat([self.now().repeat_interleave(len(FIT_RULES), dim=1), ~s.done[:, None]], dim=1)

    def room(self, index: torch.Tensor) -> torch.Tensor:
        """(n, T) GPUs a new job may use in each slot; huge past each horizon."""
        s = self.state
        used = s.floor_total[index] if self.trade_realtime else s.curves[index].sum(dim=1)
        room = s.gpus[index, None] - used - s.load[index]
        return torch.where(self._slot < s.slots[index, None], room, _BIG)

    # ------------------------------------------------------------------ step

    def step(self, actions: torch.Tensor | np.ndarray | Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Take one action in every episode: (rewards (B,) float64, done (B,) bool), as :meth:`BatchEngine.step`."""
        s = self.state
        a = torch.as_tensor(np.asarray(actions) if not torch.is_tensor(actions) else actions, device=self.device)
        a = a.to(torch.int64).reshape(self.batch)
        width = len(FIT_RULES)
        advance = self.layout.advance
        active = ~s.done
        is_adv = a == advance
        clipped = a.clamp(0, advance - 1)
        row, option = clipped // width, clipped % width
        ep = torch.arange(self.batch, device=self.device)
        places = active & (a >= 0) & (a < advance) & (s.earliest[ep, row] == s.clock)
        valid = places | (active & is_adv)
        s.steps += active.to(torch.int64)
        before = s.objective.clone()
        parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        P = torch.nonzero(places).flatten()
        if P.numel():
            parts.append(self._place(P, row[P], option[P]))
        V = torch.nonzero(valid & is_adv).flatten()
        if V.numel():
            now = s.earliest[V] == s.clock[V, None]
            s.at[V] = s.at[V] & ~now[..., None]
            vb, vr = torch.nonzero(now, as_tuple=True)
            parts.append((V[vb], vr, s.earliest[V[vb], vr] + 1))
        if parts:
            self._search(*(torch.cat(p) for p in zip(*parts, strict=True)))
        moved = torch.nonzero(valid).flatten()
        if moved.numel():
            self._move_clock(moved)
        rewards = torch.where(valid, (s.objective - before) + s.unpaid, torch.zeros_like(before))
        s.unpaid.masked_fill_(valid, 0.0)
        return rewards, s.done.clone()

    def _choices(self, at: torch.Tensor, wide: torch.Tensor, node: torch.Tensor) -> torch.Tensor:
        """(n, 6) first, waste, best, waste, last, waste of non-empty bool rows ``at`` (n, G)."""
        n, G = at.shape
        g = self._gpu
        node = node[:, None]
        prev = torch.cat([torch.zeros_like(at[:, :1]), at[:, :-1]], dim=1)
        nxt = torch.cat([at[:, 1:], torch.zeros_like(at[:, :1])], dim=1)
        starts = at & (~prev | (g % node == 0))
        ends = at & (~nxt | ((g + 1) % node == 0))
        end_at = torch.where(ends, g, _BIG).flip(1).cummin(dim=1).values.flip(1)  # the first end at or after g
        length = torch.where(starts, end_at - g + 1, _BIG)  # group length at each group start
        first = at.to(torch.int8).argmax(dim=1)
        last = G - 1 - at.flip(1).to(torch.int8).argmax(dim=1)
        ix = torch.arange(n, device=at.device)
        first_len = length[ix, first]
        best = length.argmin(dim=1)
        best_len = length[ix, best]
        last_start = G - 1 - starts.flip(1).to(torch.int8).argmax(dim=1)
        last_len = last - last_start + 1
        zero = torch.zeros_like(first)
        narrow = torch.stack([first, first_len - 1, best, best_len - 1, last, last_len - 1], dim=1)
        broad = torch.stack([first, zero, first, zero, last, zero], dim=1)
        return torch.where(wide[:, None], broad, narrow)

    def _place(
        self, b: torch.Tensor, r: torch.Tensor, option: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s, T = self.state, self.sizes.slots
        n = b.numel()
        ix = torch.arange(n, device=self.device)
        first = self._choices(s.at[b, r], s.wide[b, r], s.node[b])[ix, 2 * option]
        t, k, d = s.clock[b], s.k[b, r], s.d[b, r]
        span = (self._cols >= t[:, None]) & (self._cols < (t + d)[:, None])  # (n, W)
        block = (self._gpu >= first[:, None]) & (self._gpu < (first + k)[:, None])  # (n, G)
        s.busy[b] |= span[:, :, None] & block[:, None, :]
        inside = self._slot < s.slots[b, None]
        span_t = span[:, :T] & inside
        s.load[b] += span_t * k[:, None]
        cells = block[:, :, None] & span[:, None, :T]  # (n, G, T)
        s.grid[b, :, :, 0] = torch.where(cells, 1.0, s.grid[b, :, :, 0])
        s.free_now[b] = torch.where(block, 0, s.free_now[b])
        s.placed[b, r] = True
        s.start[b, r] = t
        s.first[b, r] = first
        s.earliest[b, r] = -1
        s.at[b, r] = False
        s.job_value[b] += s.values[b, r, t]
        if self.trade_realtime:
            total = s.curves[b].sum(dim=1)
            over = ((s.load[b] + total > s.gpus[b, None]) & span_t).any(dim=1)
            if bool(over.any()):
                c = b[over]
                s.curves[c] = _realtime_curves(
                    s.base[c], s.initial[c], s.ramp[c], s.order[c], s.floors[c], s.gpus[c], s.load[c], inside[over]
                )
                short = (s.demand[c] - s.curves[c]).clamp(min=0).sum(dim=2)
                cost = torch.zeros(c.numel(), dtype=torch.float64, device=self.device)
                for a in range(short.shape[1]):
                    cost = cost + s.penalty[c, a] * short[:, a]
                s.shortfall_cost[c] = cost
        s.objective[b] = s.job_value[b] - s.shortfall_cost[b]
        e, kr, dr = s.earliest[b], s.k[b], s.d[b]
        hit = (e >= 0) & (e < (t + d)[:, None]) & (e + dr > t[:, None])
        g = self._gpu
        clear = (g >= (first[:, None] - kr + 1)[..., None]) & (g < (first + k)[:, None, None])  # (n, R, G)
        kept = torch.where(hit[..., None], s.at[b] & ~clear, s.at[b])
        low = _span_min(self.room(b), e, dr, self._levels)
        short = hit & kept.any(dim=2) & (low < kr)
        kept = kept & ~short[..., None]
        s.at[b] = kept
        lost = hit & ~kept.any(dim=2)
        lb, lr = torch.nonzero(lost, as_tuple=True)
        return b[lb], lr, e[lb, lr] + 1

    def _search(self, b: torch.Tensor, r: torch.Tensor, begin: torch.Tensor) -> None:
        s, T, G = self.state, self.sizes.slots, self.sizes.gpus
        if not b.numel():
            return
        episodes, which = torch.unique(b, return_inverse=True)
        table = _or_table(s.busy[episodes], self._levels)  # (u, L, W, G)
        k, d = s.k[b, r], s.d[b, r]
        lo = torch.maximum(begin, s.lo[b, r])
        slot = self._slot[None, :]
        window = (slot >= lo[:, None]) & (slot < s.hi[b, r][:, None])
        room = self.room(episodes)[which]
        short = torch.zeros((b.numel(), T + 1), dtype=torch.int64, device=self.device)
        short[:, 1:] = torch.cumsum((room < k[:, None]).to(torch.int64), dim=1)
        end = torch.clamp(slot + d[:, None], max=T)
        fits = torch.gather(short, 1, end) == short[:, :T]
        candidates = window & fits
        level = _floor_log2(d)
        offset = d - (1 << level)
        rows = which[:, None].expand(-1, T)
        lv = level[:, None].expand(-1, T)
        spans = table[rows, lv, slot.expand(b.numel(), -1)] | table[rows, lv, slot + offset[:, None]]  # (P, T, G)
        free = ~spans & s.everyone[b][:, None, :]
        # run[g]: GPUs g..g+k-1 all free (a running count of busy GPUs, zero over the block)
        count = torch.zeros((*free.shape[:2], G + 1), dtype=torch.int32, device=self.device)
        count[..., 1:] = torch.cumsum((~free).to(torch.int32), dim=2)
        stop = (self._gpu[None, :] + k[:, None]).clamp(max=G)  # (P, G)
        inside = (self._gpu[None, :] + k[:, None]) <= G
        run = (torch.gather(count, 2, stop[:, None, :].expand(-1, T, -1)) == count[..., :G]) & inside[:, None, :]
        run &= s.allowed[b, r][:, None, :]
        ok = candidates & run.any(dim=2)
        found = ok.any(dim=1)
        when = ok.to(torch.int8).argmax(dim=1)
        s.earliest[b, r] = torch.where(found, when, -1)
        s.at[b, r] = run[torch.arange(b.numel(), device=self.device), when] & found[:, None]

    def _move_clock(self, b: torch.Tensor) -> None:
        s, T = self.state, self.sizes.slots
        e = s.earliest[b]
        pending = e >= 0
        has = pending.any(dim=1)
        clock = torch.where(has, torch.where(pending, e, _BIG).amin(dim=1), s.clock[b])
        moved = b[clock != s.clock[b]]
        s.clock[b] = clock
        s.done[b] |= ~has
        if moved.numel():
            cols = s.clock[moved, None] + torch.arange(T + 1, device=self.device)
            inside = cols < self.sizes.width
            window = s.busy[moved[:, None], cols.clamp(max=self.sizes.width - 1)] & inside[..., None]  # (n, T+1, G)
            busy_any = window.any(dim=1)
            s.free_now[moved] = torch.where(busy_any, window.to(torch.int8).argmax(dim=1), T + 1)

    # ------------------------------------------------------------------ results

    def plan(self, i: int, scheduler: str = "env") -> Plan:
        """The plan of episode i so far, with metrics: ``Episode.plan()``'s."""
        sc = self.scenarios[i]
        if sc is None:
            raise ValueError(f"episode {i} has not been reset")
        s = self.state
        return plan_of(
            sc,
            self._rows[i],
            s.placed[i].cpu().numpy(),
            s.start[i].cpu().numpy(),
            s.first[i].cpu().numpy(),
            s.curves[i].cpu().numpy(),
            scheduler,
        )


def _floor_log2(x: torch.Tensor) -> torch.Tensor:
    """floor(log2 x) for positive int64 x, exactly."""
    level = torch.zeros_like(x)
    for shift in (32, 16, 8, 4, 2, 1):
        up = (x >> (level + shift)) > 0
        level = torch.where(up, level + shift, level)
    return level


def _or_table(busy: torch.Tensor, levels: int) -> torch.Tensor:
    """(u, L, W, G): level l holds the OR of busy over columns ``[c, c + 2**l)``."""
    u, W, G = busy.shape
    table = torch.zeros((u, levels, W, G), dtype=torch.bool, device=busy.device)
    table[:, 0] = busy
    for level in range(1, levels):
        half = 1 << (level - 1)
        table[:, level] = table[:, level - 1]
        table[:, level, : W - half] |= table[:, level - 1, half:]
    return table


def _span_min(room: torch.Tensor, start: torch.Tensor, duration: torch.Tensor, levels: int) -> torch.Tensor:
    """(n, R) least ``room[i, start + j]`` over ``0 <= j < duration``."""
    n, T = room.shape
    width = T + (1 << levels)
    table = torch.full((levels, n, width), _BIG, dtype=torch.int64, device=room.device)
    table[0, :, :T] = room
    for level in range(1, levels):
        half = 1 << (level - 1)
        table[level] = table[level - 1]
        table[level, :, :-half] = torch.minimum(table[level - 1, :, :-half], table[level - 1, :, half:])
    safe = start.clamp(min=0)
    level = _floor_log2(duration)
    rows = torch.arange(n, device=room.device)[:, None]
    return torch.minimum(table[level, rows, safe], table[level, rows, safe + duration - (1 << level)])


def _cover_curves(
    demand: torch.Tensor, initial: torch.Tensor, ramp: torch.Tensor, cap: torch.Tensor, inside: torch.Tensor
) -> torch.Tensor:
    T = demand.shape[1]
    t = torch.arange(T, device=demand.device)
    dist = (t[:, None] - t[None, :]).abs()[None] * ramp[:, None, None]
    upper = torch.minimum(initial[:, None] + ramp[:, None] * (t + 1), cap)
    upper = (torch.where(inside, upper, _BIG)[:, None, :] + dist).amin(dim=2)
    target = torch.minimum(demand, upper)
    floor = (initial[:, None] - ramp[:, None] * (t + 1)).clamp(min=0)
    low = (torch.where(inside, torch.maximum(target, floor), -_BIG)[:, None, :] - dist).amax(dim=2)
    return torch.where(inside, torch.minimum(low, upper).clamp(min=0), 0)


def _realtime_curves(
    base: torch.Tensor,
    initial: torch.Tensor,
    ramp: torch.Tensor,
    order: torch.Tensor,
    floors: torch.Tensor,
    gpus: torch.Tensor,
    load: torch.Tensor,
    inside: torch.Tensor,
) -> torch.Tensor:
    n, A, _ = base.shape
    curves = torch.zeros_like(floors)
    free = gpus[:, None] - load
    rest = floors.sum(dim=1)
    ep = torch.arange(n, device=base.device)
    for i in range(A):
        a = order[:, i]
        floor = floors[ep, a]
        rest = rest - floor
        cap = torch.maximum(free - rest, floor)
        curve = _cover_curves(base[ep, a], initial[ep, a], ramp[ep, a], cap, inside)
        curves[ep, a] = curve
        free = free - curve
    return curves


# ---------------------------------------------------------------------------------------------- observations

KEYS: tuple[str, ...] = ("jobs", "grid", "gpus", "slots", "apps", "app_info", "globals", "action_mask")


def observe(engine: TorchEngine, keys: Sequence[str] = KEYS) -> dict[str, torch.Tensor]:
    """The observations of all B episodes as tensors on the engine's device (``gpu_env.batch.observe``'s values).

    Every column is computed in float64 and cast to float32, as the encoder does; the action mask is int8.

    Raises:
        ValueError: An unknown key.
    """
    keys = tuple(keys)
    unknown = set(keys) - set(KEYS)
    if unknown:
        raise ValueError(f"observe: unknown keys {sorted(unknown)} (expected some of {', '.join(KEYS)})")
    s = engine.state
    out: dict[str, torch.Tensor] = {}
    if "jobs" in keys:
        out["jobs"] = _jobs(engine)
    if "grid" in keys:
        out["grid"] = s.grid.clone()
    if "gpus" in keys:
        out["gpus"] = _gpus(engine)
    if "slots" in keys:
        out["slots"] = _slots(engine)
    if "apps" in keys:
        G = s.gpus[:, None, None].to(torch.float64)
        out["apps"] = torch.stack([s.demand / G, s.curves / G, s.floors / G], dim=-1).to(torch.float32)
    if "app_info" in keys:
        out["app_info"] = s.app_table.to(torch.float32)
    if "globals" in keys:
        out["globals"] = _globals(engine)
    if "action_mask" in keys:
        out["action_mask"] = engine.action_masks().to(torch.int8)
    return out


def _jobs(engine: TorchEngine) -> torch.Tensor:
    s = engine.state
    B, R = s.valid.shape
    T = s.slots[:, None].to(torch.float64)
    clock = s.clock[:, None]
    e = s.earliest
    pending = e >= 0
    now = engine.now()
    scale = s.reward_scale[:, None]
    f64 = torch.float64
    jobs = torch.zeros((B, R, len(JOB_FEATURES)), dtype=f64, device=engine.device)
    jobs[..., 0] = s.valid.to(f64)
    jobs[..., 1] = pending.to(f64)
    jobs[..., 2] = s.placed.to(f64)
    jobs[..., 3] = now.to(f64)
    jobs[..., 4:11] = s.row_table
    jobs[..., 8:10] = s.row_table[..., 4:6] - (clock / T)[..., None]
    jobs[..., 11] = torch.where(pending, (e - clock) / T, 1.0)
    episode = torch.arange(B, device=engine.device)[:, None]
    row = torch.arange(R, device=engine.device)[None, :]
    jobs[..., 12] = s.values[episode, row, torch.minimum(clock, s.slots[:, None])] / scale * now.to(f64)
    jobs[..., 13] = s.values[episode, row, torch.where(pending, e, engine.sizes.slots)] / scale
    jobs[~s.valid] = 0.0
    b, r = torch.nonzero(now, as_tuple=True)
    if b.numel():
        slack = s.gpus[:, None] - s.load - s.curves.sum(dim=1)  # (B, T)
        k, d, t0 = s.k[b, r], s.d[b, r], s.clock[b]
        end = torch.minimum(t0 + d, s.slots[b])
        t = t0[:, None] + torch.arange(engine.sizes.duration, device=engine.device)[None, :]  # (n, D)
        over = k[:, None] - slack[b[:, None], t.clamp(max=engine.sizes.slots - 1)]
        take = torch.where((t < end[:, None]) & (over > 0), over, 0).sum(dim=1)
        at = s.at[b, r]
        table = engine._choices(at, s.wide[b, r], s.node[b]).to(f64)
        gpu_scale = 1.0 / s.gpus[b].to(f64)
        waste_scale = 1.0 / s.node[b].to(f64)
        cut = s.cheapest[b] / s.reward_scale[b]
        columns = [take * s.per_area[b, r], take * cut, at.sum(dim=1) * s.per_block[b, r]]
        for i in range(3):
            columns += [table[:, 2 * i] * gpu_scale, table[:, 2 * i + 1] * waste_scale]
        jobs[b, r, 14:] = torch.stack(columns, dim=1)
    return jobs.to(torch.float32)


def _gpus(engine: TorchEngine) -> torch.Tensor:
    s = engine.state
    H = engine.sizes.slots
    g = torch.arange(engine.sizes.gpus, device=engine.device)
    inside = g < s.gpus[:, None]
    node = s.node[:, None]
    zero = torch.zeros((), dtype=torch.float64, device=engine.device)
    out = torch.stack(
        [
            inside.to(torch.float64),
            torch.where(inside, (g % node) / node, zero),
            torch.where(inside, s.free_now.clamp(max=H) * (1.0 / H), zero),
        ],
        dim=-1,
    )
    return out.to(torch.float32)


def _slots(engine: TorchEngine) -> torch.Tensor:
    s = engine.state
    T = engine.sizes.slots
    G = s.gpus[:, None].to(torch.float64)
    t = torch.arange(T, device=engine.device)
    inside = t < s.slots[:, None]
    total = s.curves.sum(dim=1)
    used = s.floor_total if engine.trade_realtime else total
    Gi = s.gpus[:, None]
    out = torch.stack(
        [
            inside.to(torch.float64),
            (t < s.clock[:, None]).to(torch.float64),
            s.load / G,
            total / G,
            s.demand.sum(dim=1) / G,
            (s.demand - s.curves).clamp(min=0).sum(dim=1) / G,
            (Gi - s.load - total) / G,
            (Gi - used - s.load) / G,
            s.decay_weights,
        ],
        dim=-1,
    )
    out[~inside] = 0.0
    return out.to(torch.float32)


def _globals(engine: TorchEngine) -> torch.Tensor:
    s = engine.state
    sizes = engine.sizes
    T, H = s.slots.to(torch.float64), sizes.slots
    assert len(GLOBAL_FEATURES) == 9
    out = torch.stack(
        [
            s.clock / T,
            (T - s.clock) / H,
            T / H,
            s.gpus / sizes.gpus,
            s.node / s.gpus,
            (s.earliest >= 0).sum(dim=1) / sizes.jobs,
            s.objective / s.reward_scale,
            s.decay,
            torch.full_like(s.decay, float(engine.trade_realtime)),
        ],
        dim=1,
    )
    return out.to(torch.float32)
