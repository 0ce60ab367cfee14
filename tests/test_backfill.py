"""EASY backfill: hand-worked slots, valid plans on every family, a literal reference, the rolling loop."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents import backfill
from agents.backfill import Reservation
from agents.live.forecast import NoiseModel, with_demand
from agents.options import PlanOptions
from agents.registry import SCHEDULERS, run_scheduler
from agents.simulator.simulation import rolling
from gpu_env import rules
from gpu_env.generators import FAMILIES, generate
from gpu_env.objective import peak_reservation
from gpu_env.occupancy import Occupancy
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import Scenario
from gpu_env.validation import validate
from tests.conftest import make_app, make_job, make_scenario
from tests.test_greedy import odd_scenarios


def _index(scenario: Scenario, job_id: str) -> int:
    return scenario.job_index(job_id)


def _wide_head(*queued: dict) -> Scenario:
    """4 GPUs in one node, 8 slots. A running job holds GPUs 0-1 in slots 0-2; a 4-GPU job must wait for slot 3."""
    return make_scenario(
        horizon={"slots": 8},
        jobs=[make_job("run", 2, 3, running_on=[0, 1]), make_job("wide", 4, 2, priority=5), *queued],
    )


def _two_gpus(*jobs: dict, slots: int) -> Scenario:
    """Two GPUs in one node for ``slots`` slots: one 2-GPU job at a time."""
    return make_scenario(cluster={"gpus": 2, "node_size": 2}, horizon={"slots": slots}, jobs=list(jobs))


# ----------------------------------------------------------------------------- hand-worked slots


def test_registered_after_fifo():
    names = list(SCHEDULERS)
    assert names.index("backfill") == names.index("fifo") + 1


def test_short_job_backfills_in_front_of_the_blocked_head():
    # Slot 0: "wide" (priority 5) does not fit (GPUs 0-1 are held until 3): it is the head and reserves slot 3.
    # "short" (2 GPUs for 2 slots, priority 1) fits on GPUs 2-3 and ends at 2 <= 3: it starts now.
    sc = _wide_head(make_job("short", 2, 2, type="batch_inference"))
    run = backfill.simulate(sc)
    assert run.reservations[0] == Reservation(slot=0, job=_index(sc, "wide"), start=3, first_gpu=0)
    assert run.backfilled == [_index(sc, "short")]
    assert backfill.plan(sc).placements == [
        Placement("run", 0, (0, 1)),
        Placement("wide", 3, (0, 1, 2, 3)),
        Placement("short", 0, (2, 3)),
    ]
    # Without backfilling the queue stops at the head: "short" waits until the wide job has run.
    strict = backfill.simulate(sc, backfill=False)
    assert strict.grid.placed[_index(sc, "short")].start == 5


def test_backfill_that_would_delay_the_head_is_refused():
    # "long" (2 GPUs for 4 slots) fits on GPUs 2-3 at slot 0 but would hold them until 4, past the head's
    # reservation at 3, and the head's only block (0-3) needs them: refused in slots 0, 1 and 2.
    sc = _wide_head(make_job("long", 2, 4, type="quantization"))
    run = backfill.simulate(sc)
    head, long = _index(sc, "wide"), _index(sc, "long")
    # Slots 3-4: the head has started; "long" is the head itself now and waits for slot 5.
    assert [(r.slot, r.job, r.start) for r in run.reservations] == [
        (0, head, 3),
        (1, head, 3),
        (2, head, 3),
        (3, long, 5),
        (4, long, 5),
    ]
    assert run.backfilled == []
    assert backfill.plan(sc).placements == [
        Placement("run", 0, (0, 1)),
        Placement("wide", 3, (0, 1, 2, 3)),
        Placement("long", 5, (0, 1)),
    ]
    # Had it started, the head's earliest start would have been 4: that is the delay EASY refuses.
    grid = run.grid.copy()
    grid.remove(long)
    grid.remove(head)
    grid.place(long, 0, 2)
    assert grid.earliest(sc.jobs[head]) == (4, 0)


def test_long_backfill_on_gpus_the_head_does_not_need_is_allowed():
    # 8 GPUs: the running job holds 0-5 until slot 3, the head needs 4 GPUs and reserves slot 3. A long
    # 2-GPU job on GPUs 6-7 runs past the reservation, but the head still has blocks 0-3 there: it starts.
    sc = make_scenario(
        cluster={"gpus": 8, "node_size": 8},
        horizon={"slots": 8},
        jobs=[
            make_job("run", 6, 3, running_on=[0, 1, 2, 3, 4, 5]),
            make_job("wide", 4, 2, priority=5),
            make_job("long", 2, 6, type="quantization"),
        ],
    )
    run = backfill.simulate(sc)
    assert run.backfilled == [_index(sc, "long")]
    assert run.grid.placed[_index(sc, "long")].start == 0
    assert run.grid.placed[_index(sc, "long")].first_gpu == 6
    assert run.grid.placed[_index(sc, "wide")].start == 3


def test_backfill_refused_for_capacity_over_the_heads_span():
    # 8 GPUs, an app held at 4 all day, a running job on GPUs 0-1 until slot 3: 2 GPUs of slack in slots 0-2.
    # The 4-GPU head reserves slot 3 (slack 4). A 1-GPU job for 5 slots fits at 0 on GPU 2, and the head would
    # still find free GPUs at 3, but the slack there would drop to 3 < 4: refused. It starts after the head.
    sc = make_scenario(
        cluster={"gpus": 8, "node_size": 8},
        horizon={"slots": 10},
        realtime=[make_app("chat", [4] * 10, ramp=1, initial=4, penalty=5)],
        jobs=[
            make_job("run", 2, 3, running_on=[0, 1]),
            make_job("wide", 4, 2, priority=5),
            make_job("thin", 1, 5, type="batch_inference"),
        ],
    )
    run = backfill.simulate(sc)
    assert run.reservations[0] == Reservation(slot=0, job=_index(sc, "wide"), start=3, first_gpu=0)
    assert run.backfilled == []
    assert backfill.plan(sc).placements == [
        Placement("run", 0, (0, 1)),
        Placement("wide", 3, (0, 1, 2, 3)),
        Placement("thin", 5, (0,)),
    ]
    assert validate(sc, backfill.plan(sc)) == []


def test_priority_is_worth_per_gpu_slot():
    # Two GPUs, one job at a time. "cheap" has priority 3; "valued" has value 40 over 2 x 4 GPU-slots, worth 5
    # per GPU-slot; "last" has value 8, worth 1. EASY runs them by worth, not by file order.
    sc = _two_gpus(
        make_job("cheap", 2, 4, priority=3),
        make_job("valued", 2, 4, value=40),
        make_job("last", 2, 4, value=8),
        slots=12,
    )
    assert [sc.jobs[i].id for i in backfill.priority_order(sc)] == ["valued", "cheap", "last"]
    starts = {p.job: p.start for p in backfill.plan(sc).placements}
    assert starts == {"valued": 0, "cheap": 4, "last": 8}


def test_ties_go_by_release_then_file_order():
    sc = _two_gpus(make_job("later", 2, 2, release=1), make_job("b", 2, 2), make_job("c", 2, 2), slots=12)
    assert [sc.jobs[i].id for i in backfill.priority_order(sc)] == ["b", "c", "later"]
    assert {p.job: p.start for p in backfill.plan(sc).placements} == {"b": 0, "c": 2, "later": 4}


def test_the_apps_peak_is_held():
    # The app peaks at 3 in slot 2; FIFO's reservation ramps to 3 at once and holds it: one GPU is left.
    # The 2-GPU job never fits (dropped when it is first the head); the 1-GPU jobs run one after the other.
    sc = make_scenario(
        horizon={"slots": 6},
        realtime=[make_app("rt", [1, 1, 3, 1, 1, 1], ramp=2, initial=1, penalty=5)],
        jobs=[make_job("pair", 2, 1, priority=9), make_job("one", 1, 2), make_job("two", 1, 2)],
    )
    run = backfill.simulate(sc)
    plan = backfill.plan(sc)
    assert plan.curves == {"rt": [3] * 6} == {"rt": peak_reservation(sc)[0].tolist()}
    assert run.dropped == [_index(sc, "pair")]
    assert plan.placements == [Placement("one", 0, (0,)), Placement("two", 2, (0,))]
    assert (run.grid.job_load + run.grid.curves.sum(axis=0) <= sc.gpus).all()
    assert run.grid.job_load.max() <= sc.gpus - 3
    assert validate(sc, plan) == []


def test_a_deadline_that_cannot_be_met_leaves_the_job_out():
    # "first" holds both GPUs in slots 0-2. "late" must end by 4 (start by 2): it cannot, and is left out;
    # "spare", with room in its deadline, runs after "first".
    sc = _two_gpus(
        make_job("first", 2, 3, priority=5),
        make_job("late", 2, 2, type="batch_inference", priority=4, deadline=4),
        make_job("spare", 2, 2, type="batch_inference", deadline=6),
        slots=8,
    )
    run = backfill.simulate(sc)
    assert run.dropped == [_index(sc, "late")]
    assert backfill.plan(sc).placements == [Placement("first", 0, (0, 1)), Placement("spare", 3, (0, 1))]


def test_a_job_whose_window_closes_while_it_waits_is_left_out():
    # "blocker" holds both GPUs in slots 0-3; "wait" (release 1, deadline 5) could start at 2 at the latest.
    sc = _two_gpus(
        make_job("blocker", 2, 4, priority=1),
        make_job("wait", 1, 3, type="batch_inference", release=1, deadline=5),
        slots=8,
    )
    plan = backfill.plan(sc)
    assert [p.job for p in plan.placements] == ["blocker"]
    assert validate(sc, plan) == []


# ----------------------------------------------------------------------------- every family


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("gpus", [None, 128])
def test_every_family_plans_validly(family, gpus):
    for seed in range(3):
        sc = generate(family, seed, gpus=gpus)
        plan = run_scheduler("backfill", sc)
        assert validate(sc, plan) == []
        assert plan.scheduler == "backfill" and plan.info == {}
        assert plan.curves == {app.name: list(c) for app, c in zip(sc.apps, peak_reservation(sc).tolist(), strict=True)}


def test_runs_the_same_twice_and_ignores_options():
    sc = generate("mixed-control", 3)
    first = backfill.plan(sc).to_dict()
    assert backfill.plan(sc, PlanOptions(seed=9, time_limit=0.1)).to_dict() == first


# ----------------------------------------------------------------------------- a literal reference


@st.composite
def queues(draw) -> Scenario:
    """Small crowded clusters: a running job, most jobs released early, wide and narrow, some deadlines.

    ``tests.test_greedy.odd_scenarios`` spreads releases over the day and rarely queues jobs behind a blocked
    head; these do (about a third of them backfill a job, half of those past the reservation).
    """
    node = draw(st.sampled_from([2, 3, 4]))
    gpus = node * draw(st.integers(1, 3))
    slots = draw(st.integers(4, 10))
    apps = []
    if draw(st.booleans()):
        demand = draw(st.lists(st.integers(0, max(1, gpus // 4)), min_size=slots, max_size=slots))
        apps.append({"name": "rt", "demand": demand, "ramp": 1, "initial": demand[0], "penalty": 2.0})
    room = gpus - sum(app["initial"] for app in apps)
    jobs = []
    if room >= 1:
        k = draw(st.integers(1, min(node, room)))
        first = draw(st.integers(0, (gpus - k) // node)) * node
        running_on = list(range(first, first + k))
        duration = draw(st.integers(1, 5))
        jobs.append({"id": "run", "type": "training", "gpus": k, "duration": duration, "running_on": running_on})
    for i in range(draw(st.integers(2, 10))):
        d = draw(st.integers(1, 5))
        release = draw(st.integers(0, 1)) * draw(st.integers(0, slots // 2))
        job = {
            "id": f"j{i}",
            "type": "training",
            "gpus": draw(st.integers(1, max(1, gpus // 2)) | st.integers(gpus // 2 + 1, gpus)),
            "duration": d,
            "release": release,
        }
        if draw(st.booleans()):
            job["priority"] = draw(st.sampled_from([0.5, 1, 2, 5]))
        else:
            job["value"] = draw(st.sampled_from([1, 4, 10, 30]))
        if draw(st.integers(0, 3)) == 0:
            job["deadline"] = release + d + draw(st.integers(0, 4))
        jobs.append(job)
    return make_scenario(cluster={"gpus": gpus, "node_size": node}, horizon={"slots": slots}, realtime=apps, jobs=jobs)


scenarios = st.one_of(odd_scenarios(), queues())


def reference_easy(scenario: Scenario, backfill_on: bool = True) -> tuple[Occupancy, list[tuple[int, int, int]]]:
    """EASY the slow, literal way: the full feasibility mask of every job in every slot, each block of a
    backfill candidate tried on a copy of the grid and the head's earliest start recomputed there.

    Returns:
        The grid and the reservations as (slot, head, start).
    """
    T, jobs = scenario.slots, scenario.jobs
    grid = Occupancy(scenario)
    for i, curve in enumerate(peak_reservation(scenario)):
        grid.set_curve(i, curve)
    grid.place_inherited()
    queue = sorted(
        (i for i, job in enumerate(jobs) if job.running_on is None), key=lambda i: (-jobs[i].weight, jobs[i].release, i)
    )
    reservations = []

    def earliest_from(g: Occupancy, j: int, t: int) -> int | None:
        rows = np.flatnonzero(g.feasible(jobs[j])[t:].any(axis=1))
        return t + int(rows[0]) if rows.size else None

    for t in range(T):
        head: tuple[int, int] | None = None
        for j in list(queue):
            job = jobs[j]
            if job.release > t:
                continue
            blocks = rules.allowed_block_starts(job.gpus, scenario.gpus, scenario.node_size)
            now = grid.feasible(job)[t]
            if head is None:
                if now.any():
                    grid.place(j, t, int(blocks[now.argmax()]))
                    queue.remove(j)
                    continue
                start = earliest_from(grid, j, t)
                if start is None:
                    queue.remove(j)
                    continue
                head = (j, start)
                reservations.append((t, j, start))
                if not backfill_on:
                    break
                continue
            for b in blocks[now]:
                trial = grid.copy()
                trial.place(j, t, int(b))
                later = earliest_from(trial, head[0], t)
                if later is not None and later <= head[1]:
                    grid.place(j, t, int(b))
                    queue.remove(j)
                    break
    return grid, reservations


def _head_earliest_after(scenario: Scenario, plan: Plan, reservation: Reservation) -> tuple[int, int] | None:
    """The head's earliest start on the grid of the jobs started by the reservation's slot (inherited included)."""
    grid = Occupancy(scenario)
    for i, curve in enumerate(peak_reservation(scenario)):
        grid.set_curve(i, curve)
    for p in plan.placements:
        if p.start <= reservation.slot:
            grid.place(scenario.job_index(p.job), p.start, p.gpus[0])
    job = scenario.jobs[reservation.job]
    return grid.earliest(replace(job, release=max(job.release, reservation.slot + 1)))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios, backfill_on=st.booleans())
def test_equals_the_literal_reference(scenario, backfill_on):
    run = backfill.simulate(scenario, backfill=backfill_on)
    grid, reservations = reference_easy(scenario, backfill_on)
    assert run.grid.placed == grid.placed
    assert [(r.slot, r.job, r.start) for r in run.reservations] == reservations
    assert validate(scenario, Plan.from_occupancy(run.grid, "backfill")) == []


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios)
def test_backfilling_never_delays_the_head(scenario):
    run, strict = backfill.simulate(scenario), backfill.simulate(scenario, backfill=False)
    plan, strict_plan = Plan.from_occupancy(run.grid, "backfill"), Plan.from_occupancy(strict.grid, "backfill")
    assert validate(scenario, plan) == [] and validate(scenario, strict_plan) == []
    # Every reservation holds after its slot's backfilling: the head can still start at its reserved slot.
    for reservation in run.reservations:
        spot = _head_earliest_after(scenario, plan, reservation)
        assert spot is not None and spot[0] == reservation.start
    # Slot 0 has the same head and reservation with and without backfilling, and the same earliest start after it.
    heads = [r for r in run.reservations if r.slot == 0]
    assert heads == [r for r in strict.reservations if r.slot == 0]
    if heads:
        after = _head_earliest_after(scenario, plan, heads[0])
        assert after is not None
        assert after[0] == _head_earliest_after(scenario, strict_plan, heads[0])[0] == heads[0].start


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios)
def test_with_every_job_known_at_0_the_head_starts_at_its_reservation(scenario):
    # No job arrives later to jump the queue: the head of slot 0 starts exactly at its reservation, with
    # backfilling as without.
    jobs = tuple(job if job.running_on is not None else replace(job, release=0) for job in scenario.jobs)
    sc = replace(scenario, jobs=jobs)
    run, strict = backfill.simulate(sc), backfill.simulate(sc, backfill=False)
    heads = [r for r in run.reservations if r.slot == 0]
    if heads:
        head = heads[0]
        assert run.grid.placed[head.job].start == strict.grid.placed[head.job].start == head.start


# ----------------------------------------------------------------------------- the rolling loop


@pytest.mark.parametrize(("family", "seed", "sigma"), [("mixed-control", 1, 0.2), ("priority-inversion", 4, 0.3)])
def test_plays_in_the_rolling_loop(family, seed, sigma):
    sc = generate(family, seed, gpus=16, num_jobs=14)
    actual = with_demand(sc, NoiseModel(sigma=sigma).draw(sc, seed), f"{sc.name}-actual")
    sim = rolling(sc, "backfill", actual)
    assert validate(actual, sim.executed) == []
    assert sim.replans == sc.slots
    by_id = {job.id: job for job in sc.jobs}
    assert all(p.start >= by_id[p.job].release for p in sim.executed.placements)


@pytest.mark.parametrize("family", ["batch-fragmentation", "priority-inversion", "uniform-priority"])
def test_rolling_without_apps_executes_the_offline_plan(family):
    # EASY decides each slot from the jobs released by then, so committing slot 0 of a plan every slot runs
    # the offline schedule exactly (without apps: the loop's peak reservation is of the remaining day only).
    sc = replace(generate(family, 2, gpus=16, num_jobs=16), apps=())
    sim = rolling(sc, "backfill", sc)
    offline = backfill.plan(sc)
    assert sorted(sim.executed.placements, key=str) == sorted(offline.placements, key=str)
    assert validate(sc, sim.executed) == []
