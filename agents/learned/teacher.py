"""The imitation teacher: greedy's plan replayed in the environment's action space, and greedy's label for a state.

:func:`teacher_actions` turns a whole greedy plan into the actions that
reproduce it (behaviour cloning); :func:`teacher_label` re-plans with greedy
from any state the policy reaches and returns the action greedy takes now
(DAgger).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def teacher_actions(episode: Any, reference: Any, least_overlap: bool = True) -> list[int]:
    """Replay a reference plan in the episode's FIT action space; returns the actions (the episode is played).

    At each clock the rows the reference starts at or before the clock and that
    can start now are placed (earliest reference start first), each on the fit
    rule that gives the reference's block, else on the rule whose block overlaps
    the blocks the reference still has to place least (``least_overlap``; else
    on the lowest-index rule); then ADVANCE.
    """
    sc = episode.scenario
    index = {job.id: i for i, job in enumerate(sc.jobs)}
    row_of = {int(r): n for n, r in enumerate(episode.rows)}
    target = {}
    for p in reference.placements:
        i = index[p.job]
        if i in row_of:
            target[row_of[i]] = (p.start, p.gpus[0])
    actions = []
    while not episode.done:
        action = _teacher_action(episode, target, least_overlap)
        episode.step(action)
        actions.append(action)
    return actions


def _teacher_action(episode: Any, target: dict[int, tuple[int, int]], least_overlap: bool = True) -> int:
    """The teacher's action now, given its (start, first GPU) per row: a due row that can start now, else ADVANCE.

    Due rows (reference start at or before the clock) are taken earliest start first, then lowest first GPU.
    """
    now = np.flatnonzero(episode.now)
    due = sorted((r for r in now if r in target and target[r][0] <= episode.clock), key=lambda r: target[r])
    if not due:
        return episode.layout.advance
    row = int(due[0])
    options = episode.options()[row]
    same = np.flatnonzero(options == target[row][1])
    if same.size:
        option = int(same[0])
    else:
        option = _least_overlap(episode, row, options, target) if least_overlap else 0
    return episode.layout.encode(row, option)


def _least_overlap(episode: Any, row: int, options: np.ndarray, target: dict[int, tuple[int, int]]) -> int:
    t, d, k = episode.clock, int(episode.d[row]), int(episode.k[row])
    best = (float("inf"), 0)
    for option, first in enumerate(options):
        overlap = 0
        for other, (start, gpu) in target.items():
            if other == row or episode.placed[other]:
                continue
            k2, d2 = int(episode.k[other]), int(episode.d[other])
            gpus = max(0, min(first + k, gpu + k2) - max(first, gpu))
            slots = max(0, min(t + d, start + d2) - max(t, start))
            overlap += gpus * slots
        best = min(best, (overlap, option))
    return best[1]


def teacher_label(episode: Any) -> int:
    """Greedy's action at the episode's current state, for DAgger: greedy re-plans the rest of the day from here.

    The state becomes a rolling-horizon sub-problem (:func:`agents.rolling.state_at`:
    the jobs placed so far run on their GPUs, the others wait in the queue, the
    real-time curves continue from the clock); greedy plans it. The label places
    the job that greedy starts now on the lowest first GPU, on the fit rule that
    gives greedy's block or else the one that overlaps greedy's other blocks
    least (as :func:`teacher_actions`); ADVANCE when greedy starts nothing now
    that the environment allows now.
    """
    from agents.rolling import Reveal, decide, state_at

    sc = episode.scenario
    clock = episode.clock
    so_far = episode.plan("dagger")
    started = {p.job: (p.start, tuple(p.gpus)) for p in so_far.placements}
    started.update({job.id: (0, tuple(job.running_on)) for job in sc.jobs if job.running_on is not None})
    curves = np.array([so_far.curve(app.name, sc.slots) for app in sc.apps], dtype=np.int64)
    curves = curves.reshape(len(sc.apps), sc.slots)
    decision = decide(state_at(sc, clock, started, curves, sc.demand[:, clock:], Reveal.ALL), "greedy")
    index = {job.id: i for i, job in enumerate(sc.jobs)}
    row_of = {int(r): n for n, r in enumerate(episode.rows)}
    target = {}
    for p in decision.plan.placements:
        row = row_of.get(index.get(p.job, -1))
        if row is not None and not episode.placed[row]:
            target[row] = (clock + p.start, p.gpus[0])
    return _teacher_action(episode, target)
