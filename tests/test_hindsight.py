"""The day with hindsight: ``gpualloc simulate --hindsight`` and :func:`agents.simulator.plan_hindsight`."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from agents import simulator
from agents.cli import build_parser, main
from agents.options import PlanOptions
from agents.report import rolling as report
from agents.simulator.hindsight import DEFAULT_SECONDS
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Plan
from gpu_env.scenario import load_scenario, save_scenario
from gpu_env.validation import validate
from tests.conftest import make_scenario

# Time is a controlled input: the wall limit is never reached, and CP-SAT (one worker, a seed) stops after a
# deterministic time far above what this day takes to prove, so the hindsight plan and its proof are the same at
# any machine speed or load.
SOLVE = PlanOptions(time_limit=10_000.0, workers=1, deterministic_time=10.0)
CLI_TIME = ["--hindsight", "10000", "--deterministic-time", "10"]
SHARE = re.compile(r"hindsight: executed (-?[\d.]+) = ([\d.]+) of the hindsight optimum (-?[\d.]+) \(CP-SAT: optimal")


def _late_big_job():
    """8 GPUs, 6 slots, chat holding 2; no decay and integer worths, so every objective is an integer.

    Live, ``a`` (4 GPUs x 4 slots, worth 1) starts at 0, since ``b`` (6 GPUs x 3 slots, worth 3) is unknown
    until its release at 2; ``b`` then waits for ``a`` to end and earns 2 of its 3 slots: 16 + 36 = 52. With
    hindsight ``b`` starts at 2 (54) and ``a`` at 5, its one slot in the day (4): 58.
    """
    return make_scenario(
        name="late-big-job",
        cluster={"gpus": 8, "node_size": 8},
        horizon={"slots": 6},
        realtime=[{"name": "chat", "demand": [2] * 6, "ramp": 2, "initial": 2, "penalty": 5}],
        jobs=[
            {"id": "a", "type": "training", "gpus": 4, "duration": 4, "priority": 1},
            {"id": "b", "type": "training", "gpus": 6, "duration": 3, "priority": 3, "release": 2},
        ],
    )


@pytest.fixture
def day_file(tmp_path: Path) -> Path:
    path = tmp_path / "day.yaml"
    save_scenario(_late_big_job(), path)
    return path


# ----------------------------------------------------------------------------- the library


def test_the_hindsight_optimum_of_a_late_big_job_by_hand():
    roll, fixed = simulator.simulate(_late_big_job(), "greedy", sigma=0.0, options=SOLVE)
    hindsight = simulator.plan_hindsight(roll.actual, SOLVE)
    assert roll.metrics.objective == pytest.approx(52.0) and hindsight.objective == pytest.approx(58.0)
    assert hindsight.status == "optimal" and hindsight.optimal
    assert hindsight.bound == pytest.approx(58.0)
    assert hindsight.share(roll.metrics.objective) == pytest.approx(52.0 / 58.0)
    assert not validate(roll.actual, hindsight.plan) and hindsight.violations == []
    assert hindsight.plan.scheduler == "full/hindsight" and hindsight.plan.scenario == roll.actual.name
    data = hindsight.summary(roll.metrics.objective, fixed.metrics.objective)
    assert data["status"] == "optimal" and data["objective"] == pytest.approx(58.0)
    assert data["executed_share"] == pytest.approx(52.0 / 58.0)
    assert data["open_loop_share"] == pytest.approx(fixed.metrics.objective / 58.0)
    assert data["time_limit"] == SOLVE.time_limit and data["deterministic_time"] == SOLVE.deterministic_time


@pytest.mark.parametrize(("scheduler", "sigma", "seed"), [("greedy", 0.3, 2), ("fifo", 0.5, 1)])
def test_no_executed_day_beats_its_proven_hindsight_optimum(scheduler: str, sigma: float, seed: int):
    roll, fixed = simulator.simulate(_late_big_job(), scheduler, sigma=sigma, seed=seed, options=SOLVE)
    hindsight = simulator.plan_hindsight(roll.actual, SOLVE)
    assert hindsight.optimal
    for sim in (roll, fixed):  # both are plans of the realized day: neither may beat its optimum, nor its bound
        share = hindsight.share(sim.metrics.objective)
        assert share is not None and share <= 1 + 1e-9
        assert hindsight.bound is not None and sim.metrics.objective <= hindsight.bound + 1e-6


def test_a_non_positive_hindsight_objective_has_no_share():
    # Demand above the cluster: shortfall whatever is planned, so the best objective is negative.
    day = make_scenario(
        cluster={"gpus": 2, "node_size": 2},
        horizon={"slots": 3},
        realtime=[{"name": "chat", "demand": [4] * 3, "ramp": 2, "initial": 2, "penalty": 5}],
    )
    hindsight = simulator.plan_hindsight(day, SOLVE)
    assert hindsight.objective < 0 and hindsight.share(-30.0) is None
    assert "leaves no share" in hindsight.describe(-30.0)
    assert hindsight.summary(-30.0)["executed_share"] is None


def test_a_plan_not_proven_optimal_says_so_and_gives_the_share_of_the_bound():
    roll, _ = simulator.simulate(_late_big_job(), "greedy", sigma=0.0, options=SOLVE)
    proven = simulator.plan_hindsight(roll.actual, SOLVE)
    unproven = replace(proven, status="feasible", bound=65.0, bound_source="lp-dual")
    line = unproven.describe(52.0)
    assert (
        "= 0.897 of the best hindsight plan found in 10000 s, 58.00 (CP-SAT: feasible; bound 65.00, LP relaxation)"
        in line
    )
    assert line.endswith(f"so at least {52.0 / 65.0:.3f} of the optimum")
    assert unproven.summary(52.0)["executed_share_of_bound"] == pytest.approx(0.8)
    assert "at least" not in proven.describe(52.0)


def test_write_simulation_adds_the_hindsight_plan_and_figure(tmp_path: Path):
    roll, fixed = simulator.simulate(_late_big_job(), "greedy", sigma=0.3, seed=2, options=SOLVE)
    hindsight = simulator.plan_hindsight(roll.actual, SOLVE)
    written = {p.name for p in report.write_simulation(tmp_path, roll, fixed, {}, hindsight=hindsight)}
    assert {"hindsight.json", "metrics.json", "simulation.png"} <= written
    assert not validate(load_scenario(tmp_path / "actual.yaml"), Plan.load(tmp_path / "hindsight.json"))
    data = json.loads((tmp_path / "metrics.json").read_text())
    assert data["validation"]["hindsight"] == []
    assert data["hindsight"]["executed_share"] == pytest.approx(roll.metrics.objective / hindsight.objective)
    assert list(data)[-1] == "slots"  # the per-slot records stay last


# ----------------------------------------------------------------------------- the command line


def test_gpualloc_simulate_hindsight_prints_the_share_and_writes_a_valid_plan(tmp_path: Path, capsys, day_file):
    out = tmp_path / "sim"
    argv = ["simulate", str(day_file), "-s", "greedy", "--forecast-error", "0.3", "--seed", "2", "-o", str(out)]
    assert main([*argv, *CLI_TIME]) == 0
    err = capsys.readouterr().err
    found = SHARE.search(err)
    assert found is not None, err
    # The share, computed independently from the files the command wrote.
    actual = load_scenario(out / "actual.yaml")
    executed = compute_metrics(actual, Plan.load(out / "executed.json")).objective
    best = compute_metrics(actual, Plan.load(out / "hindsight.json")).objective
    assert float(found.group(1)) == pytest.approx(executed, abs=0.005)
    assert float(found.group(3)) == pytest.approx(best, abs=0.005)
    assert float(found.group(2)) == pytest.approx(executed / best, abs=5e-4)
    assert executed / best <= 1 + 1e-9  # optimal on a tiny day: nothing executed beats it
    assert (executed, best) == pytest.approx((52.0, 58.0))
    data = json.loads((out / "metrics.json").read_text())["hindsight"]
    assert data["status"] == "optimal" and data["bound"] == pytest.approx(best, abs=1e-6)
    assert data["executed_share"] == pytest.approx(executed / best, abs=1e-9)
    assert data["objective"] == pytest.approx(best, abs=1e-6) and data["time_limit"] == 10_000.0
    assert (out / "simulation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["validate", str(out / "actual.yaml"), str(out / "hindsight.json")]) == 0
    assert "valid plan by full/hindsight" in capsys.readouterr().out


def test_gpualloc_simulate_hindsight_without_o_prints_it_in_the_summary(capsys, day_file):
    assert main(["simulate", str(day_file), "-s", "fifo", *CLI_TIME]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["deterministic_time"] == 10.0
    assert data["hindsight"]["executed_objective"] == pytest.approx(data["rolling"]["objective"], abs=1e-6)
    assert data["hindsight"]["executed_share"] == pytest.approx(52.0 / 58.0, abs=1e-6)
    assert "0.897 of the hindsight optimum 58.00" in err


def test_hindsight_without_a_value_takes_the_default_seconds():
    parser = build_parser()
    assert parser.parse_args(["simulate", "day.yaml", "--hindsight"]).hindsight == DEFAULT_SECONDS
    assert parser.parse_args(["simulate", "day.yaml", "--hindsight", "2.5"]).hindsight == 2.5
    assert parser.parse_args(["simulate", "day.yaml"]).hindsight is None


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--hindsight", "-5", "expected a positive number, got '-5'"),
        ("--hindsight", "0", "expected a positive number, got '0'"),
        ("--hindsight", "soon", "expected a number, got 'soon'"),
        ("--deterministic-time", "-1", "expected a positive number, got '-1'"),
    ],
)
def test_bad_hindsight_values_are_one_line_exit_2(tmp_path: Path, capsys, day_file, option, value, message):
    out = tmp_path / "sim"
    assert main(["simulate", str(day_file), "-s", "fifo", "-o", str(out), option, value]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and message in lines[0], lines
    assert not out.exists()
