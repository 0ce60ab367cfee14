"""The compiled rules (``gpu_env/placement.py``) against :mod:`gpu_env.rules` on random small states.

Allowed blocks, the lowest and the highest free block, the free block nearest a preference, a start's capacity and
the real-time curves with their penalty: each compiled answer is the one the rules (and :mod:`gpu_env.objective`,
built on them) give.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_env import placement, rules
from gpu_env.generators import FAMILIES, generate
from gpu_env.listsched import ListInstance, Scratch, new_scratch
from gpu_env.objective import realtime_curves, shortfall_penalty
from gpu_env.occupancy import block_shifts
from tests.conftest import make_scenario

F = len(placement.BLOCK_FEATURES)
quiet = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@quiet
@given(k=st.integers(1, 20), gpus=st.integers(1, 96), node_size=st.sampled_from((1, 2, 3, 4, 6, 8, 16)))
def test_allowed_starts_are_the_rules(k: int, gpus: int, node_size: int):
    allowed = [a for a in range(-1, gpus + 1) if placement.allowed_start(a, k, gpus, node_size)]
    assert allowed == rules.allowed_block_starts(k, gpus, node_size).tolist()
    pattern = placement.block_pattern(k, node_size)
    if pattern:
        assert [a for a in range(64) if pattern >> a & 1] == rules.allowed_block_starts(k, 64, node_size).tolist()


STATES = {  # what random_state takes: a family's scenario at a size (12: nodes of 6) and draws for its busy cells
    "family": st.sampled_from(sorted(FAMILIES)),
    "seed": st.integers(0, 1000),
    "gpus": st.sampled_from((8, 12, 16, 80)),
    "data": st.data(),
}


def random_state(family: str, seed: int, gpus: int, data: st.DataObject) -> tuple[ListInstance, np.ndarray, Scratch]:
    sc = (
        generate(family, seed, gpus=gpus)
        if gpus != 12
        else generate(replace(FAMILIES[family], gpus=12, node_size=6), seed)
    )
    inst = ListInstance.build(sc)
    busy = inst.busy.copy()
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="cells"))
    cells = rng.random((busy.shape[0], sc.gpus)) < data.draw(st.floats(0.0, 0.6), label="density")
    for s, g in zip(*np.nonzero(cells), strict=True):
        busy[s, g >> 6] |= np.uint64(1) << np.uint64(g & 63)
    return inst, busy, new_scratch(inst)


def free_over(busy: np.ndarray, t: int, d: int, a: int, k: int) -> bool:
    return all(not (int(busy[s, g >> 6]) >> (g & 63)) & 1 for s in range(t, t + d) for g in range(a, a + k))


@quiet
@given(**STATES)
def test_lowest_free_block_and_capacity_are_the_rules(family: str, seed: int, gpus: int, data: st.DataObject):
    inst, busy, sc = random_state(family, seed, gpus, data)
    T = inst.slots
    room = np.asarray(data.draw(st.lists(st.integers(-2, gpus), min_size=T, max_size=T), label="room"), dtype=np.int64)
    for j in range(inst.k.size):
        k, d = int(inst.k[j]), int(inst.d[j])
        t = data.draw(st.integers(0, T - 1), label="start")
        free = [int(a) for a in rules.allowed_block_starts(k, gpus, inst.node_size) if free_over(busy, t, d, int(a), k)]
        assert placement.find_block(inst, j, t, busy, sc.span) == (int(free[0]) if free else -1)
        assert placement.fits(k, t, d, T, room) == bool((room[t : min(t + d, T)] >= k).all())
        highest, _ = placement.pick_block(inst, j, t, busy, placement.BLOCK_HIGHEST, sc.span)
        assert highest == (int(free[-1]) if free else -1)
        # A preference: the allowed free block nearest it (of blocks as near, the block rule's, then the lower).
        want = data.draw(st.integers(-1, gpus - 1), label="want")
        if free:
            a0 = data.draw(st.sampled_from(free), label="block rule's")  # the block rule's block wins a tie
            near = a0 if want < 0 else min((abs(a - want), a != a0, a) for a in free)[2]
            assert placement.preferred_block(inst, j, t, a0, want, busy) == near
        # The learned rule: the free block of the highest score (the first of equals), each feature in [0, 1].
        weights = np.array(data.draw(st.lists(st.sampled_from((-1.0, 0.0, 0.5, 2.0)), min_size=F, max_size=F)))
        chosen = placement.learned_block(inst, j, t, busy, weights, sc.span)
        if not free:
            assert chosen == -1
            continue
        x = np.zeros((len(free), F))
        for i, a in enumerate(free):
            placement.block_features(inst, j, t, int(a), int(free[0]), int(free[-1]), busy, x[i])
        assert ((x >= 0) & (x <= 1)).all()
        scores = [sum(float(w) * float(v) for w, v in zip(weights, row, strict=True)) for row in x]
        best = 0
        for i in range(1, len(free)):  # a later block wins only by more than 1e-12: the first of equals
            if scores[i] > scores[best] + 1e-12:
                best = i
        assert chosen == free[best]
        assert placement.learned_block(inst, j, t, busy, np.zeros(0), sc.span) == int(free[0])


@quiet
@given(family=st.sampled_from(sorted(FAMILIES)), seed=st.integers(0, 1000), data=st.data())
def test_realtime_curves_and_penalty_are_the_objectives(family: str, seed: int, data: st.DataObject):
    sc = generate(family, seed, gpus=16)
    inst = ListInstance.build(sc)
    A, T = inst.curves.shape
    load = np.asarray(data.draw(st.lists(st.integers(0, 16), min_size=T, max_size=T), label="load"), dtype=np.int64)
    expected = realtime_curves(inst.demand[0], sc.apps, inst.order[0], inst.floors[0], sc.gpus, load).reshape(A, T)
    curves = np.zeros((1, A, T), dtype=np.int64)
    cost = np.zeros(1)
    view = placement.RealtimeView(
        inst.demand, curves, inst.demand, inst.floors, inst.gpus_arr, inst.initial, load[None], inst.order,
        inst.penalty, inst.ramp, cost, inst.slots_arr,
    )  # fmt: skip
    placement.realtime_one(view, 0, np.zeros((4, T), dtype=np.int64))
    assert np.array_equal(curves[0], expected)
    assert cost[0] == shortfall_penalty(expected, inst.demand[0], inst.penalty[0])


def words_of(mask: int, nw: int) -> np.ndarray:
    return np.array([(mask >> (64 * w)) & ((1 << 64) - 1) for w in range(nw)], dtype=np.uint64)


def mask_of(words: np.ndarray) -> int:
    return sum(int(x) << (64 * w) for w, x in enumerate(words))


@quiet
@given(**STATES)
def test_free_block_starts_and_the_blocks_a_new_block_meets_are_the_rules(
    family: str, seed: int, gpus: int, data: st.DataObject
):
    inst, busy, _ = random_state(family, seed, gpus, data)
    T, nw = inst.slots, busy.shape[1]
    everyone = words_of((1 << gpus) - 1, nw)
    span, run, moved = (np.zeros(nw, dtype=np.uint64) for _ in range(3))
    for j in range(inst.k.size):
        k, d = int(inst.k[j]), int(inst.d[j])
        t = data.draw(st.integers(0, T - 1), label="start")
        allowed = words_of(rules.allowed_block_mask(k, gpus, inst.node_size), nw)
        shifts = np.array([*block_shifts(k), 0], dtype=np.int64)
        free = [int(a) for a in rules.allowed_block_starts(k, gpus, inst.node_size) if free_over(busy, t, d, int(a), k)]
        assert placement.free_starts(busy, t, d, everyone, allowed, shifts, span, run, moved) == bool(free)
        assert mask_of(run) == sum(1 << a for a in free)
        first = data.draw(st.integers(0, gpus - 1), label="first")
        width = data.draw(st.integers(1, gpus - first), label="width")
        starts = run.copy()
        placement.drop_meeting(starts, k, first, width)
        assert mask_of(starts) == sum(1 << a for a in free if a + k <= first or a >= first + width)


@quiet
@given(
    gpus=st.integers(1, 64),
    held=st.lists(st.integers(0, 64), min_size=1, max_size=30),
    k=st.integers(1, 16),
    data=st.data(),
)
def test_capacity_and_the_last_short_slot_are_the_rules(gpus: int, held: list[int], k: int, data: st.DataObject):
    T = len(held)
    reserved = data.draw(st.lists(st.integers(0, 64), min_size=T, max_size=T), label="reserved")
    room = rules.free_capacity(gpus, np.array(held), np.array(reserved))
    assert [placement.free_capacity(gpus, h, r) for h, r in zip(held, reserved, strict=True)] == room.tolist()
    t = data.draw(st.integers(0, T - 1), label="start")
    d = data.draw(st.integers(1, 2 * T), label="duration")
    short = np.flatnonzero(rules.short_slots(room, k)[t : t + d]) + t
    assert placement.last_short(k, t, d, T, room) == (int(short[-1]) if short.size else -1)
    assert placement.fits(k, t, d, T, room) == rules.fits_capacity(room.tolist(), k, t, d) == (short.size == 0)


def test_hand_worked_block_features():
    sc = make_scenario(
        cluster={"gpus": 4, "node_size": 4},
        horizon={"slots": 4},
        jobs=[{"id": "a", "type": "training", "gpus": 1, "duration": 2, "priority": 1}],
    )
    inst = ListInstance.build(sc)
    busy = inst.busy.copy()
    placement.mark(busy, 0, 2, 1, 1)  # GPU 1 busy in slots 0 and 1
    x = np.zeros(F)
    # GPU 0 from slot 0: the node's edge on the left, GPU 1 busy on the right, the horizon's start before, nothing
    # after; 2 of the node's 8 GPU-slots busy; position 0; the lowest free block.
    placement.block_features(inst, 0, 0, 0, 0, 3, busy, x)
    assert x.tolist() == [1.0, 1.0, 1.0, 0.0, 0.25, 0.0, 1.0, 0.0, 0.0, 0.0]
    # GPU 3: GPU 2 free on the left, the edge on the right; position 1, the highest; duration 2 of 4 slots, 1 of 4 GPUs.
    placement.block_features(inst, 0, 0, 3, 0, 3, busy, x)
    assert x.tolist() == [0.0, 1.0, 1.0, 0.0, 0.25, 1.0, 0.0, 1.0, 0.5, 0.25]
