"""FIFO of SPEC section 4 on hand-worked scenarios, slot by slot."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from agents import fifo
from gpu_env.generators import FAMILIES, generate
from gpu_env.plan import Placement
from gpu_env.scenario import Job, Scenario
from gpu_env.validation import validate
from tests.conftest import make_app, make_job, make_scenario, two_node_day


def hand_scenario():
    # G=4 in nodes of 2, T=6. The app peaks at 3: FIFO reserves 2, then 3 for the rest of the day.
    # A running job holds GPU 3 in slots 0-1.
    return two_node_day(
        [1, 1, 2, 3, 1, 1],
        make_job("J1", 1, 2),
        make_job("J2", 2, 1, type="batch_inference", priority=9),
        make_job("J3", 1, 3, type="quantization", release=1),
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
    assert plan.curves == {"rt": [2, 3, 3, 3, 3, 3]}
    assert validate(s, plan) == []


def test_reservation_cut_by_inherited_work_and_earlier_apps():
    s = make_scenario(
        realtime=[
            make_app("a", [4, 4, 4, 4, 4, 4], ramp=2, initial=1, penalty=5),
            make_app("b", [1, 1, 1, 1, 1, 1], ramp=1, initial=1, penalty=5),
        ],
        jobs=[make_job("run", 2, 3, running_on=[0, 1])],
    )
    curves = fifo.peak_reservation(s)
    # a: 1 -> 3 cut to 2 free, then 4 cut to 2 while the running job holds 2 GPUs, then 4.
    assert curves[0].tolist() == [2, 2, 2, 4, 4, 4]
    # b is listed after a: what a leaves.
    assert curves[1].tolist() == [0, 0, 0, 0, 0, 0]


def test_fifo_ignores_priority_and_waits_for_its_turn():
    s = make_scenario(
        cluster={"gpus": 2, "node_size": 2}, jobs=[make_job("low", 2, 4), make_job("high", 2, 4, priority=10)]
    )
    plan = fifo.plan(s)
    assert plan.placements == [Placement("low", 0, (0, 1)), Placement("high", 4, (0, 1))]


def test_deadline_and_horizon_leave_a_job_unplaced():
    s = make_scenario(jobs=[make_job("a", 4, 5), make_job("b", 1, 1, deadline=3)])
    plan = fifo.plan(s)
    # b would start at 5 (after a), too late for its deadline 3.
    assert [p.job for p in plan.placements] == ["a"]


@settings(max_examples=25, deadline=None)
@given(family=st.sampled_from(sorted(FAMILIES)), seed=st.integers(0, 10_000))
def test_fifo_plans_validate_on_every_family(family: str, seed: int):
    s = generate(family, seed)
    plan = fifo.plan(s)
    assert validate(s, plan) == []
    assert np.all(fifo.peak_reservation(s) >= 0)
    # Every job, in arrival order, is at the earliest (start, first GPU) that the jobs before it leave
    # free on FIFO's reservation, or unplaced when none is: a brute force of SPEC section 4.
    assert [plan.curves[app.name] for app in s.apps] == fifo.peak_reservation(s).tolist()
    placed = {p.job: p for p in plan.placements}
    busy = [(0, job.duration, set(job.running_on)) for job in s.jobs if job.running_on is not None]
    arrivals = sorted(
        (i for i, job in enumerate(s.jobs) if job.running_on is None), key=lambda i: (s.jobs[i].release, i)
    )
    for i in arrivals:
        job = s.jobs[i]
        spot = _earliest_by_brute_force(s, job, busy, plan.curves)
        p = placed.get(job.id)
        assert (None if p is None else (p.start, p.gpus[0])) == spot, job.id
        if p is not None:
            busy.append((p.start, p.start + job.duration, set(p.gpus)))


def _earliest_by_brute_force(
    s: Scenario, job: Job, busy: list[tuple[int, int, set[int]]], realtime: dict[str, list[int]]
) -> tuple[int, int] | None:
    """The first (start, first GPU) in that order where the job's block is free and capacity holds."""
    last = s.slots - 1 if job.deadline is None else min(s.slots - 1, job.deadline - job.duration)
    for t in range(job.release, last + 1):
        span = range(t, t + job.duration)
        for a in range(s.gpus - job.gpus + 1):
            block = set(range(a, a + job.gpus))
            if job.gpus <= s.node_size:
                if a // s.node_size != (a + job.gpus - 1) // s.node_size:
                    continue
            elif a % s.node_size:
                continue
            if any(block & gpus and start < span.stop and span.start < end for start, end, gpus in busy):
                continue
            held = [sum(len(g) for b, e, g in busy if b <= u < e) for u in span if u < s.slots]
            reserved = [sum(curve[u] for curve in realtime.values()) for u in span if u < s.slots]
            if all(h + job.gpus + r <= s.gpus for h, r in zip(held, reserved, strict=True)):
                return t, a
    return None
