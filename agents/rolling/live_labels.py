"""Hindsight labels of GpuClusterLive-v0's actions: each candidate action rolled out on the realized day.

A label of a slot is the action whose copy of the realized day earns most when the action is taken now and the
base decision (the action of all zeros: greedy with the fill) plays every later slot. The clairvoyant chooser
of ``benchmarks/live_action_reach.py`` plays those labels; a researcher's imitation learner on the environment
can train on them.
"""

from __future__ import annotations

import numpy as np

from agents.rolling.live_policy import HEADROOM, MAX_STARTS, SlotView, action_nvec, decide_action, view
from agents.rolling.simulation import LiveDay

__all__ = ["candidate_actions", "hindsight_action", "play_base", "rolled_out"]


def candidate_actions(slot: SlotView) -> list[np.ndarray]:
    """The actions a hindsight label weighs at a slot.

    The base decision first, then each single hold, all holds, and each headroom level for every app.
    """
    zeros = np.zeros(len(action_nvec()), dtype=np.int64)
    out = [zeros]
    for i in range(len(slot.starts)):
        a = zeros.copy()
        a[i] = 1
        out.append(a)
    if len(slot.starts) > 1:
        a = zeros.copy()
        a[: len(slot.starts)] = 1
        out.append(a)
    for level in range(1, len(HEADROOM)) if slot.state.apps else ():
        a = zeros.copy()
        a[MAX_STARTS : MAX_STARTS + len(slot.state.apps)] = level
        out.append(a)
    return out


def rolled_out(live: LiveDay, slot: SlotView, action: np.ndarray) -> float:
    """The realized day's objective with ``action`` taken now and the base decision in every later slot."""
    day = live.fork()
    day.commit(decide_action(slot, action))
    return play_base(day)


def play_base(day: LiveDay) -> float:
    """Play the rest of ``day`` with the base decision (the action of all zeros); the executed day's objective."""
    zeros = np.zeros(len(action_nvec()), dtype=np.int64)
    while not day.done:
        state, ran = day.state()
        day.commit(decide_action(view(state, day.t, ran), zeros))
    return day.result("base").metrics.objective


def hindsight_action(live: LiveDay, slot: SlotView, margin: float) -> np.ndarray:
    """The candidate action whose rollout on the realized day earns the most (:func:`rolled_out`).

    The base decision unless another earns more than ``margin`` times the base's objective more.
    """
    candidates = candidate_actions(slot)
    if len(candidates) == 1:
        return candidates[0]
    values = [rolled_out(live, slot, a) for a in candidates]
    best = int(np.argmax(values))
    if values[best] - values[0] <= margin * max(abs(values[0]), 1.0):
        return candidates[0]
    return candidates[best]
