"""The best objective of any plan, and of any action sequence of the environment, by exhaustive search.

For tiny scenarios only (a few GPUs, slots and jobs): ``tests/test_env.py`` checks that block actions reach the
optimum. Moved here from ``benchmarks/env_expressiveness.py`` when that study was retired (its last commit is 406907a,
its results ``benchmarks/results/env_expressiveness.md``).
"""

from __future__ import annotations

import itertools
import math
from functools import cache

import numpy as np

from gpu_env import rules
from gpu_env.episode import ActionLayout, ActionMode, Episode
from gpu_env.objective import placement_value
from gpu_env.scenario import Scenario


def least_penalty(scenario: Scenario, load: tuple[int, ...]) -> float | None:
    """The least shortfall penalty of any real-time curves that keep rules 6 and 7 under a job load.

    Dynamic programming over slots; the state is every app's allocation. None
    when no curves fit.
    """
    return _least_penalty(
        tuple((app.demand, app.ramp, app.initial, app.penalty) for app in scenario.apps), scenario.gpus, load
    )


@cache
def _least_penalty(apps: tuple, gpus: int, load: tuple[int, ...]) -> float | None:
    states = {tuple(initial for _, _, initial, _ in apps): 0.0}
    for t, used in enumerate(load):
        cap = gpus - used
        nxt: dict[tuple[int, ...], float] = {}
        for state, cost in states.items():
            ranges = [
                range(max(0, s - ramp), min(cap, s + ramp) + 1) for s, (_, ramp, _, _) in zip(state, apps, strict=True)
            ]
            for r in itertools.product(*ranges):
                if sum(r) > cap:
                    continue
                c = cost + sum(p * max(0, demand[t] - x) for x, (demand, _, _, p) in zip(r, apps, strict=True))
                if c < nxt.get(r, math.inf):
                    nxt[r] = c
        states = nxt
        if not states:
            return None
    return min(states.values())


def optimum(scenario: Scenario) -> float:
    """The best objective of any valid plan, by enumeration."""
    sc = scenario
    G, T = sc.gpus, sc.slots
    width = T + max((job.duration for job in sc.jobs), default=0)
    owner = np.zeros((G, width), dtype=bool)
    load = np.zeros(T, dtype=np.int64)
    value = 0.0
    pending = []
    for job in sc.jobs:
        if job.running_on is not None:
            owner[job.running_on[0] : job.running_on[0] + job.gpus, : job.duration] = True
            load[: min(job.duration, T)] += job.gpus
            value += placement_value(job, 0, sc)
        else:
            pending.append(job)
    best = -math.inf

    def search(i: int, value: float) -> None:
        nonlocal best
        if i == len(pending):
            penalty = least_penalty(sc, tuple(int(x) for x in load))
            if penalty is not None:
                best = max(best, value - penalty)
            return
        job = pending[i]
        search(i + 1, value)  # left unplaced
        for t in rules.start_window(job, T):
            for a in rules.allowed_block_starts(job.gpus, G, sc.node_size):
                cells = owner[a : a + job.gpus, t : t + job.duration]
                if cells.any():
                    continue
                cells[...] = True
                load[t : min(t + job.duration, T)] += job.gpus
                search(i + 1, value + placement_value(job, t, sc))
                load[t : min(t + job.duration, T)] -= job.gpus
                cells[...] = False

    search(0, value)
    return best


# ----------------------------------------------------------------------------- the environment's best


def env_best(
    scenario: Scenario, mode: ActionMode, options: tuple[int, ...], trade: bool, target: float = math.inf
) -> float:
    """The best final objective over every action sequence that uses only the given options.

    Branch and bound: a state's objective plus the value of every pending job at
    its earliest start bounds what it can still reach (more jobs never lower the
    shortfall), and the search stops once it reaches ``target`` (the optimum,
    when known). In BLOCK mode the jobs started at one slot give the same plan in
    any order, so the search places them in row order only.
    """
    layout = ActionLayout.make(mode, max(1, sum(job.running_on is None for job in scenario.jobs)), scenario.gpus)
    root = Episode(scenario, layout, trade_realtime=trade)
    best = -math.inf
    seen: set[tuple] = set()

    def bound(ep: Episode) -> float:
        pending = ep.earliest >= 0
        return ep.objective + float(ep.values[pending, ep.earliest[pending]].sum())

    def search(ep: Episode, last_row: int) -> bool:
        nonlocal best
        if ep.done:
            best = max(best, ep.objective)
            return best >= target - 1e-9
        if bound(ep) <= best + 1e-12:
            return False
        key = (ep.clock, ep.start.tobytes(), ep.first_gpu.tobytes(), last_row)
        if key in seen:
            return False
        seen.add(key)
        for action in np.flatnonzero(ep.action_mask()):
            decoded = layout.decode(int(action))
            if decoded is not None:
                row, option = decoded
                if mode == ActionMode.FIT and option not in options:
                    continue
                if mode == ActionMode.BLOCK and row <= last_row:
                    continue
            child = ep.copy()
            clock = child.clock
            child.step(int(action))
            same_slot = decoded is not None and child.clock == clock and mode == ActionMode.BLOCK
            if search(child, decoded[0] if same_slot else -1):
                return True
        return False

    search(root, -1)
    return best
