"""B planning episodes advanced together: the batched form of :class:`gpu_env.episode.Episode`.

:class:`BatchEngine` holds a :class:`~gpu_env.batch.state.BatchState` and moves
all its episodes with one call: ``step(actions)`` takes one action per episode
(FIT layout: ``row * 3 + rule``, ADVANCE last) and returns the rewards and
which episodes are done; ``action_masks()`` gives the (B, n_actions) masks.
Episodes may hold different scenarios padded to common sizes. The transition
is the reference's (``Episode.apply``), compiled once
(:func:`gpu_env.batch.kernels.step_into`, numba) and run over every episode:

* a placement takes its block (bit operations on uint64 words per grid column),
  earns ``values[row, clock]``, recomputes the least-shortfall real-time curves
  where the new load meets them, narrows the feasible first GPUs of the rows
  whose span meets the new job (``Occupancy.narrow_masks``) and searches on for
  rows left with none;
* ADVANCE searches on for every row that could start at the clock;
* the search (``Occupancy.next_feasible_mask``) tries each later start of a row:
  the room over its span, then runs of k GPUs free over the span;
* the clock moves to the least earliest start, or the episode ends.

Forbidden actions change nothing and earn 0 (the env's ``ignore``). The learned
mode's configuration is supported: FIT actions, real-time curves served from the
demand (``realtime="cover"``), with or without ``trade_realtime``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpu_env.batch import kernels
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
        self._slot = np.arange(sizes.slots, dtype=np.int64)
        self._rewards = np.zeros(batch, dtype=np.float64)
        ints, words = kernels.work_sizes(sizes.jobs, sizes.slots, sizes.words)
        self._work = (np.zeros(ints, dtype=np.int64), np.zeros(words, dtype=np.uint64))

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

    # ------------------------------------------------------------------ masks

    def action_masks(self) -> np.ndarray:
        """(B, n_actions) bool: the reference's ``action_mask()`` of every episode (all False when done)."""
        mask = np.empty((self.batch, self.layout.n), dtype=bool)
        kernels.masks_into(self.state, mask, len(FIT_RULES))
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
        a = np.ascontiguousarray(actions, dtype=np.int64).reshape(self.batch)
        rewards = self._rewards
        advance, rules, trade = self.layout.advance, len(FIT_RULES), self.trade_realtime
        kernels.step_into(self.state, a, advance, rules, self.sizes.gpus, trade, rewards, *self._work)
        return rewards.copy(), self.state.done.copy()

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
