"""The rules module: blocks, start windows and ramp curves, checked against brute force."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_env import rules
from gpu_env.occupancy import Occupancy
from gpu_env.scenario import Job, JobType
from tests.conftest import make_scenario


@given(gpus=st.integers(1, 24), node=st.integers(1, 24), k=st.integers(1, 24))
def test_allowed_blocks_match_the_rule_in_words(gpus: int, node: int, k: int):
    node = min(node, gpus)
    expected = []
    for a in range(gpus):
        block = list(range(a, a + k))
        if block[-1] >= gpus:
            continue
        if (k <= node and len({g // node for g in block}) == 1) or (k > node and a % node == 0):
            expected.append(a)
    assert rules.allowed_block_starts(k, gpus, node).tolist() == expected
    for a in range(gpus):
        assert rules.is_allowed_block(a, k, gpus, node) == (a in expected)


def test_start_window():
    job = Job("j", JobType.TRAINING, gpus=1, duration=3, release=2, deadline=8)
    assert rules.start_window(job, 24) == range(2, 6)
    assert rules.start_window(Job("j", JobType.TRAINING, 1, 3, release=5), 6) == range(5, 6)
    assert len(rules.start_window(Job("j", JobType.TRAINING, 1, 3, release=2, deadline=4), 24)) == 0
    assert rules.start_window(Job("j", JobType.TRAINING, 1, 3, running_on=(0,)), 24) == range(0, 1)


curves = st.lists(st.integers(0, 12), min_size=1, max_size=30)


@settings(max_examples=200)
@given(demand=curves, initial=st.integers(0, 12), ramp=st.integers(1, 4))
def test_cover_curve_is_the_least_feasible_cover(demand: list[int], initial: int, ramp: int):
    r = rules.cover_curve(demand, initial, ramp)
    assert rules.ramp_problems(r, initial, ramp) == []
    reachable = np.minimum(demand, rules.ramp_ceiling(initial, ramp, len(demand)))
    # It serves all the demand the ramp can reach from `initial`...
    assert np.all(r >= np.minimum(demand, reachable))
    # ...and no other feasible cover is below it anywhere: lowering any slot by one breaks something.
    for t in range(len(demand)):
        if r[t] == 0:
            continue
        lower = r.copy()
        lower[t] -= 1
        assert rules.ramp_problems(lower, initial, ramp) or lower[t] < reachable[t]


@settings(max_examples=200)
@given(demand=curves, initial=st.integers(0, 12), ramp=st.integers(1, 4), data=st.data())
def test_cover_curve_under_a_cap_stays_under_it(demand: list[int], initial: int, ramp: int, data):
    cap = np.array(data.draw(st.lists(st.integers(0, 12), min_size=len(demand), max_size=len(demand))))
    floor = rules.ramp_floor(initial, ramp, len(demand))
    cap = np.maximum(cap, floor)  # a cap under the floor cannot be met by any curve
    r = rules.cover_curve(demand, initial, ramp, cap=cap)
    assert rules.ramp_problems(r, initial, ramp) == []
    assert np.all(r <= cap) and np.all(r >= floor)


def test_occupancy_feasible_matches_brute_force():
    s = make_scenario(
        cluster={"gpus": 4, "node_size": 2},
        horizon={"slots": 5},
        realtime=[{"name": "rt", "demand": [0, 1, 2, 1, 0], "ramp": 1, "initial": 0, "penalty": 5}],
        jobs=[
            {"id": "run", "type": "training", "gpus": 1, "duration": 2, "running_on": [1]},
            {"id": "x", "type": "training", "gpus": 2, "duration": 2, "release": 1, "deadline": 6},
            {"id": "y", "type": "training", "gpus": 1, "duration": 3},
        ],
    )
    grid = Occupancy(s)
    grid.set_curve(0, [0, 1, 2, 1, 0])
    grid.place_inherited()
    grid.place(2, 1, 3)  # y on GPU 3 in slots 1-3
    x = s.jobs[1]
    feasible = grid.feasible(x)
    starts = rules.allowed_block_starts(2, 4, 2).tolist()
    assert starts == [0, 2]
    for t in range(5):
        for b, a in enumerate(starts):
            in_window = t in rules.start_window(x, 5)
            free = all(grid.owner[g, u] == -1 for g in range(a, a + 2) for u in range(t, t + 2))
            used = [1 + (1 if u < 2 else 0) + (1 if 1 <= u <= 3 else 0) + [0, 1, 2, 1, 0][u] for u in range(5)]
            room = all(used[u] - 1 + 2 <= 4 for u in range(t, min(t + 2, 5)))  # `used` counts x's slot as 1
            assert feasible[t, b] == (in_window and free and room), (t, a)


@settings(max_examples=200, deadline=None)
@given(
    candidates=st.integers(0, 2**40 - 1),
    others=st.integers(1, 2**40 - 1),
    k_other=st.integers(1, 12),
    k=st.integers(1, 12),
)
def test_starts_clear_of_keeps_exactly_the_blocks_that_leave_another_free(
    candidates: int, others: int, k_other: int, k: int
) -> None:
    """Against the definition: a start is kept when some block of ``others`` shares no GPU with its block."""
    kept = rules.starts_clear_of(candidates, others, k_other, k)
    starts = [h for h in range(40) if others >> h & 1]
    for b in range(40):
        clear = any(not rules.blocks_meet(h, k_other, b, k) for h in starts)
        assert bool(kept >> b & 1) == (bool(candidates >> b & 1) and clear), b
    assert kept >> 40 == 0  # nothing outside the candidates


def test_hand_worked_blocks_meet() -> None:
    assert rules.blocks_meet(0, 2, 1, 2) and rules.blocks_meet(3, 1, 0, 4)
    assert not rules.blocks_meet(0, 2, 2, 2) and not rules.blocks_meet(4, 1, 0, 4)
