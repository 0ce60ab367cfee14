"""The compiled rules (``gpu_env/placement.py``) against :mod:`gpu_env.rules` on random small states.

Allowed blocks, the lowest free block, a start's capacity and the real-time curves with their penalty: each compiled
answer is the one the rules (and :mod:`gpu_env.objective`, built on them) give.
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

quiet = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@quiet
@given(k=st.integers(1, 20), gpus=st.integers(1, 96), node_size=st.sampled_from((1, 2, 3, 4, 6, 8, 16)))
def test_allowed_starts_are_the_rules(k: int, gpus: int, node_size: int):
    allowed = [a for a in range(-1, gpus + 1) if placement.allowed_start(a, k, gpus, node_size)]
    assert allowed == rules.allowed_block_starts(k, gpus, node_size).tolist()
    pattern = placement.block_pattern(k, node_size)
    if pattern:
        assert [a for a in range(64) if pattern >> a & 1] == rules.allowed_block_starts(k, 64, node_size).tolist()


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
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    seed=st.integers(0, 1000),
    gpus=st.sampled_from((8, 12, 16, 80)),
    data=st.data(),
)
def test_lowest_free_block_and_capacity_are_the_rules(family: str, seed: int, gpus: int, data: st.DataObject):
    inst, busy, sc = random_state(family, seed, gpus, data)
    T = inst.slots
    room = np.asarray(data.draw(st.lists(st.integers(-2, gpus), min_size=T, max_size=T), label="room"), dtype=np.int64)
    for j in range(inst.k.size):
        k, d = int(inst.k[j]), int(inst.d[j])
        t = data.draw(st.integers(0, T - 1), label="start")
        free = [a for a in rules.allowed_block_starts(k, gpus, inst.node_size) if free_over(busy, t, d, int(a), k)]
        assert placement.find_block(inst, j, t, busy, sc.span) == (int(free[0]) if free else -1)
        assert placement.fits(k, t, d, T, room) == bool((room[t : min(t + d, T)] >= k).all())


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
