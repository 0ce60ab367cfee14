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


def _two_passes(cap: np.ndarray, initial: int, ramp: int) -> np.ndarray:
    """The envelope as agents/live/anticipate.py ``fill_idle`` computes it inline: backward, then forward."""
    u = np.array(cap, dtype=np.int64)
    for s in range(u.size - 2, -1, -1):
        u[s] = min(u[s], u[s + 1] + ramp)
    for s in range(u.size):
        u[s] = min(u[s], (initial if s == 0 else u[s - 1]) + ramp)
    return u


def test_ramp_envelope_hand_worked():
    """cap [9, 9, 1, 9, 9], initial 2, R 2: the ceiling from initial is [4, 6, 8, 10, 12], and the cap of 1
    in slot 2 binds its neighbours at 3 and theirs at 5: [4, 3, 1, 3, 5]."""
    assert rules.ramp_envelope([9, 9, 1, 9, 9], 2, 2).tolist() == [4, 3, 1, 3, 5]
    assert rules.ramp_envelope([5, 5, 5], 5, 1).tolist() == [5, 5, 5]  # the cap itself when it keeps the ramp
    assert rules.ramp_envelope([0, 8, 8, 0], 0, 3).tolist() == [0, 3, 3, 0]
    assert rules.ramp_envelope([], 3, 1).tolist() == []


@settings(max_examples=300)
@given(initial=st.integers(0, 12), ramp=st.integers(1, 4), data=st.data())
def test_ramp_envelope_is_under_the_cap_keeps_the_ramp_and_is_the_two_passes(initial: int, ramp: int, data):
    """A cap above some ramp-feasible curve (as a valid plan's curve is in fill_idle): the envelope keeps rule 6,
    is above that curve, is under the cap, and is exactly what the backward-then-forward passes give."""
    steps = data.draw(st.lists(st.integers(-ramp, ramp), min_size=1, max_size=30))
    feasible = np.maximum(0, initial + np.cumsum(steps))
    assert rules.ramp_problems(feasible, initial, ramp) == []
    extra = np.array(data.draw(st.lists(st.integers(0, 12), min_size=len(steps), max_size=len(steps))))
    cap = feasible + extra
    c = rules.ramp_envelope(cap, initial, ramp)
    assert c.dtype == np.int64 and c.shape == cap.shape
    assert np.all(c <= cap)
    assert rules.ramp_problems(c, initial, ramp) == []
    assert np.all(c >= feasible)
    assert c.tolist() == _two_passes(cap, initial, ramp).tolist()
    # Any cap at all (none may be feasible): the upward ramp from initial and the ramp between slots still hold.
    wild = np.array(data.draw(st.lists(st.integers(-3, 30), min_size=len(steps), max_size=len(steps))))
    w = rules.ramp_envelope(wild, initial, ramp)
    assert np.all(w <= wild) and w[0] <= initial + ramp and np.all(np.abs(np.diff(w)) <= ramp)
    assert w.tolist() == _two_passes(wild, initial, ramp).tolist()


@settings(max_examples=150)
@given(
    cap=st.lists(st.integers(0, 4), min_size=1, max_size=4),
    initial=st.integers(0, 4),
    ramp=st.integers(1, 2),
)
def test_ramp_envelope_is_the_largest_against_brute_force(cap: list[int], initial: int, ramp: int):
    """Every curve under the cap (values 0..4, up to 4 slots) that keeps rule 6 is under the envelope pointwise,
    and the envelope is one of them whenever there is one; over the curves that keep only the ramp between
    slots and ``c[0] <= initial + R`` (no way down from initial), the envelope is their maximum."""
    import itertools

    c = rules.ramp_envelope(cap, initial, ramp)
    under = [np.array(x) for x in itertools.product(*(range(k + 1) for k in cap))]
    keeping = [x for x in under if not rules.ramp_problems(x, initial, ramp)]
    for x in keeping:
        assert np.all(x <= c), (x, c)
    if keeping:
        assert rules.ramp_problems(c, initial, ramp) == []
        assert any(np.array_equal(x, c) for x in keeping)
    upward = [x for x in under if x[0] <= initial + ramp and np.all(np.abs(np.diff(x)) <= ramp)]
    assert upward  # all zeros is one
    assert np.max(upward, axis=0).tolist() == c.tolist()
    assert any(np.array_equal(x, c) for x in upward)


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
