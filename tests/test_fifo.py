"""FIFO of SPEC section 4 on hand-worked scenarios, slot by slot."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from agents import fifo
from gpu_env.generators import FAMILIES, generate
from gpu_env.plan import Placement
from gpu_env.validation import validate
from tests.conftest import make_scenario


def hand_scenario():
    # G=4 in nodes of 2, T=6. The app peaks at 3: FIFO reserves 2, then 3 for the rest of the day.
    # A running job holds GPU 3 in slots 0-1.
    return make_scenario(
        cluster={"gpus": 4, "node_size": 2},
        realtime=[{"name": "rt", "demand": [1, 1, 2, 3, 1, 1], "ramp": 1, "initial": 1, "penalty": 5}],
        jobs=[
            {"id": "run", "type": "training", "gpus": 1, "duration": 2, "running_on": [3]},
            {"id": "J1", "type": "training", "gpus": 1, "duration": 2},
            {"id": "J2", "type": "batch_inference", "gpus": 2, "duration": 1, "priority": 9},
            {"id": "J3", "type": "quantization", "gpus": 1, "duration": 3, "release": 1},
        ],
    )


def test_peak_reservation_ramps_to_the_peak_and_holds():
    assert fifo.peak_reservation(hand_scenario()).tolist() == [[2, 3, 3, 3, 3, 3]]


def test_fifo_slot_by_slot():
    s = hand_scenario()
    plan = fifo.plan(s)
    # Slack after the reservation and the running job: [1, 0, 1, 1, 1, 1].
    # J1 (1x2): slots 0-1 and 1-2 lack capacity (slot 1 has none); at 2 the lowest free GPU is 0.
    # J2 (2x1, priority 9, ignored by FIFO): slack is 1 in 0 and 4-5 and 0 in 1-3: never fits.
    # J3 (1x3, release 1): starts 1, 2 and 3 meet slot 1 or J1's slots 2-3; at 4 GPU 0 is free again
    # and it runs 4, 5 and 6 (past the horizon).
    assert plan.placements == [
        Placement("run", 0, (3,)),
        Placement("J1", 2, (0,)),
        Placement("J3", 4, (0,)),
    ]
    assert plan.realtime == {"rt": [2, 3, 3, 3, 3, 3]}
    assert validate(s, plan) == []


def test_reservation_cut_by_inherited_work_and_earlier_apps():
    s = make_scenario(
        realtime=[
            {"name": "a", "demand": [4, 4, 4, 4, 4, 4], "ramp": 2, "initial": 1, "penalty": 5},
            {"name": "b", "demand": [1, 1, 1, 1, 1, 1], "ramp": 1, "initial": 1, "penalty": 5},
        ],
        jobs=[{"id": "run", "type": "training", "gpus": 2, "duration": 3, "running_on": [0, 1]}],
    )
    curves = fifo.peak_reservation(s)
    # a: 1 -> 3 cut to 2 free, then 4 cut to 2 while the running job holds 2 GPUs, then 4.
    assert curves[0].tolist() == [2, 2, 2, 4, 4, 4]
    # b is listed after a: what a leaves.
    assert curves[1].tolist() == [0, 0, 0, 0, 0, 0]


def test_fifo_ignores_priority_and_waits_for_its_turn():
    s = make_scenario(
        cluster={"gpus": 2, "node_size": 2},
        jobs=[
            {"id": "low", "type": "training", "gpus": 2, "duration": 4},
            {"id": "high", "type": "training", "gpus": 2, "duration": 4, "priority": 10},
        ],
    )
    plan = fifo.plan(s)
    assert plan.placements == [Placement("low", 0, (0, 1)), Placement("high", 4, (0, 1))]


def test_deadline_and_horizon_leave_a_job_unplaced():
    s = make_scenario(
        jobs=[
            {"id": "a", "type": "training", "gpus": 4, "duration": 5},
            {"id": "b", "type": "training", "gpus": 1, "duration": 1, "deadline": 3},
        ],
    )
    plan = fifo.plan(s)
    # b would start at 5 (after a), too late for its deadline 3.
    assert [p.job for p in plan.placements] == ["a"]


@settings(max_examples=25, deadline=None)
@given(family=st.sampled_from(sorted(FAMILIES)), seed=st.integers(0, 10_000))
def test_fifo_plans_validate_on_every_family(family: str, seed: int):
    s = generate(family, seed)
    plan = fifo.plan(s)
    assert validate(s, plan) == []
    # Every placement is at the earliest start FIFO could use: a later job never starts before its release.
    for p in plan.placements:
        job = s.jobs[s.job_index(p.job)]
        assert p.start >= job.release
    assert np.all(fifo.peak_reservation(s) >= 0)
