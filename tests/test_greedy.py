"""The greedy heuristic: valid plans, hand-worked cases with known optima, determinism, never below FIFO."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents import fifo, greedy
from agents.greedy import DEFAULT, FAST, GreedyConfig
from agents.options import PlanOptions
from agents.registry import run_scheduler
from gpu_env import rules
from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, generate
from gpu_env.metrics import compute_metrics
from gpu_env.occupancy import Occupancy
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import Scenario
from gpu_env.validation import validate
from tests.conftest import make_app, make_job, make_scenario

families = st.sampled_from(sorted(FAMILIES))
seeds = st.integers(min_value=0, max_value=10**6)


def _objective(scenario, plan) -> float:
    return compute_metrics(scenario, plan).objective


# ----------------------------------------------------------------------------- every plan is valid


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=families, seed=seeds)
def test_default_plans_validate_and_score_as_computed(family: str, seed: int):
    scenario = generate(family, seed)
    result = greedy.solve(scenario)
    assert validate(scenario, result.plan) == []
    assert _objective(scenario, result.plan) == pytest.approx(result.objective, abs=1e-6)


VARIANTS = {
    "fast": FAST,
    "best_fit": replace(DEFAULT, block_rule="best_fit"),
    "node_fit": replace(DEFAULT, block_rule="node_fit"),
    "packed": replace(DEFAULT, block_rule="best_fit", start_rule="packed"),
    "all orderings, all trade modes": replace(
        DEFAULT, orderings=tuple(greedy.ORDERINGS), trades=("off", "inline", "after")
    ),
    "no seed, no guard": replace(DEFAULT, fifo_seed=False, fifo_guard=False),
}
NO_GUARD = replace(DEFAULT, fifo_guard=False)
"""The default heuristic without its last resort: what "never below FIFO" is about."""


@pytest.mark.parametrize("name", sorted(VARIANTS))
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=families, seed=seeds)
def test_every_variant_validates(name: str, family: str, seed: int):
    scenario = generate(family, seed)
    result = greedy.solve(scenario, VARIANTS[name])
    assert validate(scenario, result.plan) == []
    assert _objective(scenario, result.plan) == pytest.approx(result.objective, abs=1e-6)


def test_plan_through_the_registry_round_trips():
    scenario = generate("mixed-control", 1)
    plan = run_scheduler("greedy", scenario, PlanOptions())
    expected = greedy.solve(scenario)
    assert plan.scheduler == "greedy"
    assert plan.placements == expected.plan.placements
    assert plan.metrics is not None and plan.metrics.objective == pytest.approx(expected.objective, abs=1e-6)
    assert plan.metrics == compute_metrics(scenario, expected.plan)
    assert plan.solve_ms is not None and plan.solve_ms >= 0  # measured; its size belongs to the benchmarks
    again = Plan.from_dict(plan.to_dict())
    assert again.placements == plan.placements and again.curves == plan.curves
    assert again.scheduler == "greedy" and compute_metrics(scenario, again) == plan.metrics


def test_no_jobs_and_no_apps():
    empty = make_scenario()
    assert greedy.plan(empty).placements == []
    no_apps = make_scenario(jobs=[make_job("a", 2, 3)])
    plan = greedy.plan(no_apps)
    assert plan.placements == [Placement("a", 0, (0, 1))]
    assert validate(no_apps, plan) == []


def test_config_rejects_unknown_names():
    with pytest.raises(ValueError, match="block_rule"):
        GreedyConfig(block_rule="first")
    with pytest.raises(ValueError, match="orderings"):
        GreedyConfig(orderings=("weight", "random"))
    with pytest.raises(ValueError, match="trades"):
        GreedyConfig(trades=())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_restarts_never_plan_worse_and_are_seeded(family: str):
    sc = generate(family, seed=20_001)
    plain = greedy.solve(sc)
    noisy = GreedyConfig(restarts=7)
    for seed in range(3):
        found = greedy.solve(sc, noisy, seed=seed)
        assert found.objective >= plain.objective - 1e-9
        assert validate(sc, found.plan) == []
        assert found.sweeps >= 5 + 7  # 4 sweeps and the FIFO seed, 7 restarts, promotion after
    again = greedy.solve(sc, noisy, seed=1)
    assert again.plan.placements == greedy.solve(sc, noisy, seed=1).plan.placements


def test_noisy_orders_are_permutations_near_the_priority_order():
    sc = generate("uniform-priority", seed=3)
    keys = greedy.JobKeys.of(sc)
    cold = greedy.noisy_orders(keys, 4, seed=0, temperature=1e-6)
    hot = greedy.noisy_orders(keys, 4, seed=0, temperature=5.0)
    priority = greedy.orderings(sc, ["weight"])[0]
    assert all(sorted(row) == sorted(keys.pending) for row in np.vstack([cold, hot]).tolist())
    assert all(row == priority for row in cold.tolist())  # noise far below a rank step: the key's order
    assert any(row != priority for row in hot.tolist())
    assert np.array_equal(greedy.noisy_orders(keys, 4, seed=0, temperature=5.0), hot)


def test_restart_config_is_checked():
    with pytest.raises(ValueError, match="restarts"):
        GreedyConfig(restarts=-1)
    with pytest.raises(ValueError, match="restart_temperature"):
        GreedyConfig(restart_temperature=0.0)


# ----------------------------------------------------------------------------- hand-worked cases


def _two_gpus_four_slots(*jobs: dict) -> Scenario:
    """G=2, T=4, no decay."""
    return make_scenario(cluster={"gpus": 2}, horizon={"slots": 4}, jobs=list(jobs))


def test_valuable_job_arriving_later_gets_the_slot():
    # G=2, T=4, no decay. FIFO starts 'low' (2 GPUs x 4 slots, worth 1) at 0 and 'high' (released at 1,
    # 2 GPUs x 2 slots, worth 5) never fits: 8. Greedy puts 'high' at 1 and 'low' after it at 3,
    # where one of its slots lies inside the horizon: 5*2*2 + 1*2*1 = 22, the optimum (placing 'low'
    # anywhere before 3 blocks 'high').
    s = _two_gpus_four_slots(make_job("low", 2, 4, priority=1), make_job("high", 2, 2, release=1, priority=5))
    assert _objective(s, fifo.plan(s)) == 8
    plan = greedy.plan(s)
    assert sorted(plan.placements, key=lambda p: p.job) == [Placement("high", 1, (0, 1)), Placement("low", 3, (0, 1))]
    assert _objective(s, plan) == 22


def test_realtime_follows_demand_not_the_peak():
    # G=4, T=6. Demand [1,1,3,3,1,1], ramp 2: FIFO reserves 3 from slot 0 on and leaves one GPU, so the
    # 3-GPU job never fits. Greedy serves the demand exactly (the ramp allows 1 -> 3 in one slot) and the
    # job runs in slots 0-1 with no shortfall.
    s = make_scenario(
        realtime=[make_app("rt", [1, 1, 3, 3, 1, 1], ramp=2, initial=1, penalty=10)],
        jobs=[make_job("A", 3, 2, type="batch_inference")],
    )
    assert fifo.plan(s).placements == []
    plan = greedy.plan(s)
    assert plan.curves == {"rt": [1, 1, 3, 3, 1, 1]}
    assert plan.placements == [Placement("A", 0, (0, 1, 2))]
    metrics = compute_metrics(s, plan)
    assert metrics.shortfall == 0 and metrics.objective == 6


def test_realtime_ramps_early_enough_for_the_peak():
    # Ramp 1 from 1 to a peak of 4 at slot 4: the curve climbs one GPU a slot from slot 2 (2, 3, 4),
    # not earlier, and comes down after the peak as fast as the ramp allows.
    s = make_scenario(
        cluster={"gpus": 8},
        realtime=[make_app("rt", [1, 1, 1, 1, 4, 1], ramp=1, initial=1, penalty=10)],
        jobs=[make_job("A", 4, 6)],
    )
    plan = greedy.plan(s)
    assert plan.curves == {"rt": [1, 1, 2, 3, 4, 3]}
    assert plan.curves["rt"] == rules.cover_curve([1, 1, 1, 1, 4, 1], 1, 1).tolist()
    assert compute_metrics(s, plan).shortfall == 0
    assert validate(s, plan) == []


def _whole_cluster_job(priority: float):
    # G=4, T=4, the app wants 1 GPU in every slot (penalty 10); the job needs all 4 GPUs for 2 slots.
    # Placing it at 0 drops the app to 0 for two slots: value 8w against a penalty of 20.
    return make_scenario(
        horizon={"slots": 4},
        realtime=[make_app("rt", [1, 1, 1, 1], ramp=1, initial=1, penalty=10)],
        jobs=[make_job("J", 4, 2, priority=priority)],
    )


def test_job_takes_realtime_capacity_when_that_pays():
    s = _whole_cluster_job(5.0)  # 40 > 20
    plan = greedy.plan(s)
    assert plan.placements == [Placement("J", 0, (0, 1, 2, 3))]
    assert plan.curves == {"rt": [0, 0, 1, 1]}
    metrics = compute_metrics(s, plan)
    assert (metrics.shortfall, metrics.objective) == (2, 20)
    assert validate(s, plan) == []


@pytest.mark.parametrize("priority", [2.0, 2.5])  # 16 < 20, and 20 = 20: no gain
def test_job_leaves_realtime_alone_when_that_does_not_pay(priority: float):
    s = _whole_cluster_job(priority)
    plan = greedy.plan(s)
    assert plan.placements == []
    assert plan.curves == {"rt": [1, 1, 1, 1]}
    assert _objective(s, plan) == 0


@pytest.mark.parametrize(("release", "placed"), [(0, True), (1, False)])
def test_value_per_gpu_slot_times_decay_against_the_penalty(release: int, placed: bool):
    # G=2, the app wants both GPUs (penalty 5); a 1-GPU, 1-slot job worth 5.5 per GPU-slot, decay 0.9.
    # At slot 0 it earns 5.5 > 5: it takes a GPU from the app. Released at 1 it earns 4.95 < 5: it does not.
    s = make_scenario(
        cluster={"gpus": 2},
        horizon={"slots": 3, "decay": 0.9},
        realtime=[make_app("rt", [2, 2, 2], ramp=2, initial=2, penalty=5)],
        jobs=[make_job("J", 1, 1, type="quantization", release=release, priority=5.5)],
    )
    plan = greedy.plan(s)
    assert bool(plan.placements) is placed
    assert _objective(s, plan) == pytest.approx(0.5 if placed else 0.0)
    assert validate(s, plan) == []


def test_trade_keeps_the_ramp_and_finds_the_cheapest_start():
    # G=4, T=6, the app wants 3 GPUs throughout (initial 3, ramp 1, penalty 1); a 4-GPU, 1-slot job
    # worth 3 per GPU-slot (12). The app must reach 0 in the job's slot, one GPU a slot: starting at
    # 2, 3 or 4 costs 9, 9 or 8 GPU-slots of shortfall, at 5 (the last slot) only 6 (curve 3,3,3,2,1,0).
    # The optimum is 12 - 6 = 6.
    s = make_scenario(
        horizon={"slots": 6},
        realtime=[make_app("rt", [3] * 6, ramp=1, initial=3, penalty=1)],
        jobs=[make_job("J", 4, 1, priority=3)],
    )
    plan = greedy.plan(s)
    assert plan.placements == [Placement("J", 5, (0, 1, 2, 3))]
    assert plan.curves == {"rt": [3, 3, 3, 2, 1, 0]}
    assert _objective(s, plan) == 6
    assert validate(s, plan) == []


def test_inline_and_deferred_trades_both_run_and_the_best_wins():
    # G=4, T=4, the app wants 1 GPU (penalty 1). 'big' (4 GPUs x 2 slots, worth 2 per GPU-slot: 16) fits
    # only by taking the app's GPU; 'small' (3 GPUs x 4 slots, worth 1: 12) fits as it is. Trading as
    # 'big' comes: 16 - 2 + 'small' at 2 with two slots inside the horizon (6) = 20, the optimum.
    # Deferring trades to the jobs left out places 'small' at 0 first, and 'big' then never fits: 12.
    s = make_scenario(
        horizon={"slots": 4},
        realtime=[make_app("rt", [1, 1, 1, 1], ramp=1, initial=1, penalty=1)],
        jobs=[make_job("big", 4, 2, priority=2), make_job("small", 3, 4, priority=1)],
    )
    assert greedy.solve(s, replace(DEFAULT, trades=("inline",), promote_rounds=0)).objective == 20
    assert greedy.solve(s, replace(DEFAULT, trades=("after",), promote_rounds=0)).objective == 12
    both = greedy.solve(s)
    assert both.objective == 20 and both.ordering.endswith("/inline")
    assert validate(s, both.plan) == []


# ----------------------------------------------------------------------------- determinism and FIFO


def test_deterministic():
    scenario = generate("batch-fragmentation", 7)
    first = greedy.plan(scenario).to_dict()
    assert greedy.plan(scenario).to_dict() == first
    assert greedy.plan(scenario, PlanOptions(seed=123)).to_dict() == first


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_never_below_fifo_on_the_benchmark_scenarios(family: str):
    scenario = generate(family, BENCHMARK_SEEDS[family])
    result = greedy.solve(scenario)
    assert not result.guard_fired
    assert _objective(scenario, result.plan) >= _objective(scenario, fifo.plan(scenario)) - 1e-9


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=families, seed=seeds)
def test_never_below_fifo_on_drawn_scenarios(family: str, seed: int):
    # The heuristic itself, guard off: the guard would hand back FIFO's own plan and hide a regression.
    scenario = generate(family, seed)
    fifo_objective = _objective(scenario, fifo.plan(scenario))
    heuristic = greedy.solve(scenario, NO_GUARD)
    assert heuristic.ordering != "fifo" and not heuristic.guard_fired
    assert heuristic.objective >= fifo_objective - 1e-9
    assert not greedy.solve(scenario).guard_fired


def test_the_guard_returns_fifo_when_the_heuristic_scores_less():
    # G=2, T=4, no decay. FAST sweeps by priority: 'hi' (2 GPUs x 1 slot, released at 2, worth 2) goes
    # at 2, so 'lo' (2 GPUs x 4 slots, worth 1.5) waits until 3 with one slot inside the horizon:
    # 2*2*1 + 1.5*2*1 = 7. FIFO starts 'lo' at 0 and never fits 'hi': 1.5*2*4 = 12.
    s = _two_gpus_four_slots(make_job("lo", 2, 4, priority=1.5), make_job("hi", 2, 1, release=2, priority=2))
    assert _objective(s, fifo.plan(s)) == 12
    unguarded = greedy.solve(s, replace(FAST, fifo_guard=False))
    assert unguarded.objective == 7 and not unguarded.guard_fired
    guarded = greedy.solve(s, FAST)
    assert guarded.guard_fired and guarded.ordering == "fifo" and guarded.objective == 12
    assert guarded.plan.placements == fifo.plan(s).placements and guarded.plan.scheduler == "greedy"
    # The default's value ordering finds FIFO's plan itself: the guard has nothing to do.
    assert greedy.solve(s).objective == 12 and not greedy.solve(s).guard_fired


# ----------------------------------------------------------------------------- the grid's fast path


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=families, seed=seeds, data=st.data())
def test_fast_earliest_agrees_with_the_feasibility_mask(family: str, seed: int, data):
    # Occupancy.earliest scans bitmasks kept up to date by place/remove; it must give the first True of
    # Occupancy.feasible in row-major order on every grid, including after removals and copies.
    scenario = generate(family, seed)
    grid = Occupancy(scenario)
    for i, curve in enumerate(fifo.peak_reservation(scenario)):
        grid.set_curve(i, np.maximum(0, curve - data.draw(st.integers(0, 3))))
    grid.place_inherited()
    rng = np.random.default_rng(seed)
    for j in rng.permutation(len(scenario.jobs)):
        job = scenario.jobs[j]
        if j in grid.placed:
            continue
        mask = grid.feasible(job)
        rows = np.flatnonzero(mask.any(axis=1))
        expected = None
        if rows.size:
            starts = rules.allowed_block_starts(job.gpus, scenario.gpus, scenario.node_size)
            expected = (int(rows[0]), int(starts[int(mask[rows[0]].argmax())]))
        assert grid.earliest(job) == expected
        if rows.size:
            t, b = np.argwhere(mask)[rng.integers(int(mask.sum()))]
            grid.place(int(j), int(t), int(rules.allowed_block_starts(job.gpus, scenario.gpus, scenario.node_size)[b]))
        if grid.placed and rng.random() < 0.3:
            victim = int(rng.choice([i for i in grid.placed if scenario.jobs[i].running_on is None] or [-1]))
            if victim >= 0:
                grid.remove(victim)
        if rng.random() < 0.3:
            grid = grid.copy()


# ----------------------------------------------------------------------------- odd shapes the generators never draw


@st.composite
def odd_scenarios(draw):
    """Small scenarios with any job sizes (not only powers of two), several apps, deadlines and a running job."""
    node = draw(st.sampled_from([2, 3, 4, 5]))
    gpus = node * draw(st.integers(1, 3))
    slots = draw(st.integers(3, 10))
    apps = []
    for a in range(draw(st.integers(0, 2))):
        demand = draw(st.lists(st.integers(0, max(1, gpus // 3)), min_size=slots, max_size=slots))
        apps.append(
            {
                "name": f"app{a}",
                "demand": demand,
                "ramp": draw(st.integers(1, 2)),
                "initial": demand[0],
                "penalty": draw(st.sampled_from([0.5, 2.0, 8.0])),
            }
        )
    jobs = []
    room = gpus - sum(app["initial"] for app in apps)  # what the apps leave at slot 0: valid by construction
    if room >= 1 and draw(st.booleans()):
        k = draw(st.integers(1, min(node, room)))
        jobs.append(
            {
                "id": "run",
                "type": "training",
                "gpus": k,
                "duration": draw(st.integers(1, 4)),
                "running_on": list(range(k)),
            }
        )
    for i in range(draw(st.integers(1, 8))):
        d = draw(st.integers(1, 5))
        release = draw(st.integers(0, slots - 1))
        job = {
            "id": f"j{i}",
            "type": "batch_inference",
            "gpus": draw(st.integers(1, gpus)),
            "duration": d,
            "release": release,
            "priority": draw(st.sampled_from([0.5, 1, 3, 9])),
        }
        if draw(st.booleans()):
            job["deadline"] = release + d + draw(st.integers(0, 3))
        jobs.append(job)
    return make_scenario(
        cluster={"gpus": gpus, "node_size": node},
        horizon={"slots": slots, "decay": draw(st.sampled_from([1.0, 0.9]))},
        realtime=apps,
        jobs=jobs,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=odd_scenarios())
def test_odd_shapes_validate_and_beat_fifo(scenario):
    fifo_objective = _objective(scenario, fifo.plan(scenario))
    for config in (DEFAULT, FAST, replace(DEFAULT, block_rule="best_fit", start_rule="packed")):
        result = greedy.solve(scenario, config)
        assert validate(scenario, result.plan) == []
        assert _objective(scenario, result.plan) == pytest.approx(result.objective, abs=1e-6)
        # The guard is the last resort and nothing more: the heuristic's own plan unless FIFO's scores higher.
        heuristic = greedy.solve(scenario, replace(config, fifo_guard=False))
        assert result.objective == pytest.approx(max(heuristic.objective, fifo_objective), abs=1e-6)
        assert result.guard_fired == (fifo_objective > heuristic.objective + 1e-6)
    # The default heuristic itself, guard off, never falls below FIFO.
    assert greedy.solve(scenario, NO_GUARD).objective >= fifo_objective - 1e-9


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=odd_scenarios(), data=st.data())
def test_fast_earliest_agrees_on_odd_shapes(scenario, data):
    grid = Occupancy(scenario)
    grid.place_inherited()
    for i, app in enumerate(scenario.apps):
        grid.set_curve(i, rules.cover_curve(app.demand, app.initial, app.ramp))
    for j in data.draw(st.permutations(range(len(scenario.jobs)))):
        job = scenario.jobs[j]
        if j in grid.placed:
            continue
        mask = grid.feasible(job)
        cells = np.argwhere(mask)
        starts = rules.allowed_block_starts(job.gpus, scenario.gpus, scenario.node_size)
        assert grid.earliest(job) == (None if not cells.size else (int(cells[0][0]), int(starts[cells[0][1]])))
        if cells.size:
            t, b = cells[data.draw(st.integers(0, len(cells) - 1))]
            grid.place(j, int(t), int(starts[b]))
