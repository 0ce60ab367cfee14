"""Full mode at scale: one neighbourhood move by hand, never below the hint, repeatable, the bound, the size switch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agents import cpsat, full, lns, relaxation
from agents.cli import main
from agents.options import PlanOptions
from agents.registry import run_scheduler
from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, generate
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import Job, JobType, Scenario, save_scenario
from gpu_env.validation import validate
from tests.conftest import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- one move, worked by hand


def _two_nodes() -> tuple[Scenario, Plan]:
    """8 GPUs in two nodes of 4, 2 slots, no decay; the hint leaves the valuable 4-GPU job out.

    Node 0 holds ``low-a`` and ``low-b`` (2 GPUs x 2 slots at priority 1: worth 4 each), so
    ``high`` (4 GPUs x 2 slots at priority 2: worth 16) fits nowhere; node 1 holds ``keep``
    (4 GPUs x 2 slots at priority 5: worth 40). Objective of the hint: 4 + 4 + 40 = 48.
    """
    jobs = (
        Job("low-a", JobType.BATCH_INFERENCE, gpus=2, duration=2, priority=1.0),
        Job("low-b", JobType.BATCH_INFERENCE, gpus=2, duration=2, priority=1.0),
        Job("high", JobType.TRAINING, gpus=4, duration=2, priority=2.0),
        Job("keep", JobType.TRAINING, gpus=4, duration=2, priority=5.0),
    )
    sc = Scenario("two-nodes", gpus=8, slots=2, node_size=4, decay=1.0, jobs=jobs)
    hint = Plan(
        sc.name,
        "hand",
        [Placement("low-a", 0, (0, 1)), Placement("low-b", 0, (2, 3)), Placement("keep", 0, (4, 5, 6, 7))],
        {},
    )
    return sc, hint


def test_a_node_move_finds_the_hand_worked_improvement():
    """Freeing node 0 (its two low jobs, ``high`` as a candidate) and holding node 1 as constant load.

    The small model's optimum puts ``high`` on GPUs 0-3 at slot 0 and leaves both low jobs
    out: 16 instead of 4 + 4, a gain of exactly 8 (objective 48 -> 56); ``keep`` is not in the
    model and stays where it is.
    """
    sc, hint = _two_nodes()
    assert validate(sc, hint) == [] and compute_metrics(sc, hint).objective == pytest.approx(48.0)
    state = lns._State(sc, hint)
    region = lns.Region("nodes", gpus=(0, 4), slots=(0, 2), freed=[0, 1], candidates=[2], pinned=[])
    move, spots, curves = lns.solve_region(state, region, seconds=30.0, deterministic_time=5.0, workers=1, seed=0)
    assert move.status == "optimal"
    assert move.gain == pytest.approx(8.0)
    assert spots == {2: (0, 0)}
    lns._apply(state, region, spots, curves)
    plan = state.plan()
    assert validate(sc, plan) == []
    assert compute_metrics(sc, plan).objective == pytest.approx(56.0)
    assert {p.job: p.gpus for p in plan.placements} == {"high": (0, 1, 2, 3), "keep": (4, 5, 6, 7)}


def test_a_move_that_cannot_improve_is_refused():
    """Node 1 alone: ``keep`` already earns the most its region allows; nothing changes."""
    sc, hint = _two_nodes()
    state = lns._State(sc, hint)
    region = lns.Region("nodes", gpus=(4, 8), slots=(0, 2), freed=[3], candidates=[2], pinned=[])
    move, spots, _ = lns.solve_region(state, region, seconds=30.0, deterministic_time=5.0, workers=1, seed=0)
    assert move.status == "optimal" and move.gain == pytest.approx(0.0) and spots is None


def test_the_search_reaches_the_optimum_of_the_hand_worked_instance():
    sc, hint = _two_nodes()
    out = lns.search(sc, hint, time_limit=60.0, deterministic_time=2.0, max_moves=40, seed=0)
    assert validate(sc, out.plan) == []
    assert out.objective == pytest.approx(56.0)  # the optimum: high + keep fill the grid
    assert out.bound.value >= 56.0 - 1e-6


def test_regions_hold_what_they_say():
    """Freed jobs lie inside the region, pinned jobs meet it, candidates are left out and fit it."""
    sc = generate("batch-fragmentation", seed=11, gpus=64)
    hint = run_scheduler("greedy", sc)
    state = lns._State(sc, hint)
    rng = np.random.default_rng(0)
    for kind in lns.KINDS * 3:
        region = lns.choose_region(state, rng, kind, 12)
        inside = lns._inside(state, region.gpus, region.slots)
        meets = lns._meets(state, region.gpus, region.slots)
        assert len(region.freed) <= 12 and all(inside[j] for j in region.freed)
        assert all(meets[j] and j not in region.freed for j in region.pinned)
        assert set(np.flatnonzero(meets)) <= set(region.freed) | set(region.pinned)
        assert not any(state.placed[j] for j in region.candidates)
        g0, g1 = region.gpus
        assert g0 % sc.node_size == 0 and (g1 % sc.node_size == 0 or g1 == sc.gpus)


# ----------------------------------------------------------------------------- never below the hint, repeatable


@pytest.mark.parametrize("family", ["batch-fragmentation", "mixed-control", "scale-64x30"])
def test_lns_is_never_below_its_hint_and_keeps_every_rule(family):
    sc = generate(family, seed=4242, gpus=64 if family != "scale-64x30" else 256)
    greedy = run_scheduler("greedy", sc).metrics.objective
    result = full.solve(sc, time_limit=120.0, seed=3, hint_source="greedy", deterministic_time=0.1, mode="lns")
    plan = result.plan
    assert validate(sc, plan) == []
    assert plan.info["mode"] == "lns" and plan.info["hint"]["scheduler"] == "greedy"
    assert result.objective == pytest.approx(compute_metrics(sc, plan).objective)
    assert result.objective >= greedy - 1e-9
    trace = plan.info["trace"]
    assert trace["objective"][0] == pytest.approx(greedy, abs=1e-6)  # the hint comes first
    assert trace["bound"][0] is None
    assert all(b >= a - 1e-9 for a, b in zip(trace["objective"], trace["objective"][1:], strict=False))
    assert plan.info["bound"] >= result.objective - 1e-6  # (rounded to 6 places in info)
    assert plan.info["bound_source"] == "lp-dual"


def test_one_worker_and_a_deterministic_budget_repeat_the_plan():
    sc = generate("batch-fragmentation", seed=99, gpus=64)
    runs = [
        full.solve(sc, time_limit=120.0, seed=5, hint_source="greedy", deterministic_time=0.15, mode="lns")
        for _ in range(2)
    ]
    a, b = (r.plan for r in runs)
    assert a.placements == b.placements and a.curves == b.curves
    assert a.info["lns"] == b.info["lns"]


def test_a_budget_of_no_moves_returns_the_hint():
    sc = generate("uniform-priority", seed=5, gpus=128)
    hint = run_scheduler("greedy", sc)
    result = full.solve(sc, time_limit=60.0, hint_source="greedy", max_moves=0, mode="lns")
    assert result.plan.placements == hint.placements and result.objective == pytest.approx(hint.metrics.objective)
    assert result.plan.info["lns"]["moves"] == 0


# ----------------------------------------------------------------------------- the bound


def _tiny(seed: int) -> Scenario:
    family = list(FAMILIES)[seed % len(FAMILIES)]
    return generate(family, seed=seed, gpus=8, num_jobs=5)


@pytest.mark.parametrize("seed", range(8))
def test_the_lp_bound_is_never_below_the_proven_optimum(seed):
    sc = _tiny(seed)
    exact = cpsat.solve(sc, time_limit=60.0, workers=1, deterministic_time=20.0)
    assert exact.status is cpsat.Status.OPTIMAL
    bound = relaxation.lp_bound(sc)
    assert bound.value >= exact.objective - 1e-6
    assert bound.lp is not None and bound.value == pytest.approx(bound.lp, rel=1e-6, abs=1e-6)  # strong duality
    # Weak duality: any prices >= 0 give a valid bound, however poor.
    rng = np.random.default_rng(seed)
    for _ in range(5):
        prices = rng.exponential(2.0, sc.slots) * (rng.random(sc.slots) < 0.7)
        assert relaxation.lagrangian_bound(sc, prices) >= exact.objective - 1e-6


def test_the_lagrangian_curve_term_is_the_best_ramp_feasible_curve():
    """Brute force over every ramp-feasible curve of a 4-slot app on 3 GPUs."""
    import itertools

    demand, initial, ramp, penalty, gpus = np.array([2, 3, 1, 2]), 1, 1, 4.0, 3
    pi = np.array([0.5, 5.0, 0.0, 1.5])
    best = np.inf
    for curve in itertools.product(range(gpus + 1), repeat=4):
        steps = np.abs(np.diff(np.concatenate(([initial], curve))))
        if (steps <= ramp).all():
            r = np.array(curve)
            best = min(best, float((penalty * np.maximum(0, demand - r) + pi * r).sum()))
    assert relaxation._least_curve_cost(demand, initial, ramp, penalty, pi, gpus) == pytest.approx(best)


# ----------------------------------------------------------------------------- the size switch


def test_the_seven_scenarios_keep_the_whole_model():
    for family in FAMILIES:
        assert not lns.use_lns(generate(family, seed=BENCHMARK_SEEDS[family]))


def test_the_switch_is_the_number_of_jobs():
    assert not lns.use_lns(generate("mixed-control", seed=1, num_jobs=lns.LNS_ABOVE_JOBS, gpus=128))
    assert lns.use_lns(generate("mixed-control", seed=1, num_jobs=lns.LNS_ABOVE_JOBS + 1, gpus=128))
    big = generate("batch-fragmentation", seed=2, gpus=128)  # 205 jobs
    plan = full.plan(big, PlanOptions(time_limit=60.0, deterministic_time=0.05), hint_source="greedy")
    assert plan.info["mode"] == "lns" and validate(big, plan) == []


def test_small_instances_keep_todays_full_mode():
    sc = generate("training-heavy", seed=0)
    result = full.solve(sc, time_limit=60.0, workers=1, hint_source="greedy", deterministic_time=5.0)
    info = result.plan.info
    assert info["mode"] == "whole" and info["status"] == "optimal" and info["bound_source"] == "cpsat"
    assert "lp-dual" not in info["bounds"]  # proved: no LP needed
    assert info["trace"]["bound"][0] is None and info["trace"]["objective"][-1] == pytest.approx(result.objective)


def test_whole_mode_can_be_forced_at_scale_and_is_then_bounded_by_the_lp_too():
    sc = generate("scale-64x30", seed=8, gpus=128)
    result = full.solve(sc, time_limit=60.0, hint_source="greedy", mode="whole", deterministic_time=0.05)
    info = result.plan.info
    assert info["mode"] == "whole" and validate(sc, result.plan) == []
    if info["status"] != "optimal":
        assert "lp-dual" in info["bounds"]
        assert info["bound"] == pytest.approx(min(b for b in info["bounds"].values() if b is not None), abs=1e-6)


# ----------------------------------------------------------------------------- the trace on the command line


def test_plan_draws_the_trace(tmp_path):
    path = tmp_path / "big.yaml"
    save_scenario(generate("scale-64x30", seed=3, gpus=192), path)
    png = tmp_path / "trace.png"
    args = ["plan", str(path), "-s", "full", "--time-limit", "60", "--deterministic-time", "0.05"]
    assert main([*args, "-o", str(tmp_path / "p.json"), "--trace", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plan", str(path), "-s", "greedy", "--trace", str(png)]) == 2
    assert main(["plan", str(path), "-s", "full", "--trace", str(tmp_path / "trace.jpg")]) == 2


def test_options_reach_the_search():
    sc = generate("uniform-priority", seed=21, gpus=192)  # 192 jobs: above the switch
    plan = full.plan(sc, PlanOptions(time_limit=60.0, deterministic_time=0.05, seed=2), hint_source="greedy")
    assert plan.info["mode"] == "lns" and plan.info["lns"]["deterministic_time"] <= 0.05 + 0.05


def test_the_portfolio_keeps_every_rule_and_the_hint():
    """Two workers: CP-SAT on the whole model beside LNS; whatever either finds, the plan is valid and no worse."""
    sc = generate("training-heavy", seed=17, gpus=96)
    assert len(sc.jobs) <= full.PORTFOLIO_MAX_JOBS
    greedy = run_scheduler("greedy", sc).metrics.objective
    result = full.solve(sc, time_limit=120.0, workers=2, hint_source="greedy", deterministic_time=0.2, mode="lns")
    info = result.plan.info
    assert validate(sc, result.plan) == [] and result.objective >= greedy - 1e-9
    assert info["mode"] == "lns" and 1 <= len(info["lns"]["portfolio"]["whole"]) <= full.WHOLE_ROUNDS
    assert info["bound"] >= result.objective - 1e-6
    assert info["bound"] == pytest.approx(min(b for b in info["bounds"].values() if b is not None), abs=1e-5) or (
        info["bound"] == pytest.approx(result.objective, abs=1e-5)
    )


def test_the_learned_plan_is_planned_beside_the_search_and_never_lost():
    """Above the switch the auto hint is greedy's; the learned plan joins when ready and is never lost."""
    sc = generate("uniform-priority", seed=23, gpus=192)  # 192 jobs
    # three moves, then the call waits for the learned plan until its deadline: far away
    result = full.solve(sc, time_limit=HANG_GUARD_S, workers=1, max_moves=3)
    hint = result.plan.info["hint"]
    assert hint["scheduler"] == "greedy" and hint.get("beside") == "ppo"
    assert set(hint["candidates"]) == {"greedy", "ppo"}
    assert result.objective >= max(hint["candidates"].values()) - 1e-5
    assert validate(sc, result.plan) == []
