"""The learned scheduler's options with the shipped policy: samples, guard, what the plan records, the CLI.

Only onnxruntime is needed (no torch): these are the planner's options as a user meets them.
The untrained-policy cases (where FIFO and greedy beat the policy) are in ``tests/test_ppo.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agents import ppo
from agents.arguments import add_plan_options, plan_options
from agents.cli import build_parser
from agents.cli import main as cli_main
from agents.options import DEFAULT_GUARD, DEFAULT_SAMPLES, Guard, PlanOptions
from agents.registry import run_scheduler
from gpu_env.generators import generate
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Plan
from gpu_env.scenario import load_scenario
from gpu_env.validation import validate
from tests.conftest import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "configs" / "scenarios"

# The shipped configuration's plans (8 rollouts, seed 0, greedy guard), measured with `ppo.plan(sc)`:
# (objective, winner: the winning rollout, or "greedy" where greedy's plan is worth more than every rollout). These
# are the shipped policy's numbers: a retrained policy needs them measured again (SHIPPED_SHA256 says which policy).
# They are onnxruntime's and numpy's arithmetic too: measured with the versions pinned in constraints.txt.
# Measured for the RL policy of configs/train/rl.yaml with the rollouts as one batch of the numpy engine
# (agents.ppo.rollout_batch); with the FIFO guard (shipped before) the three greedy rows were the policy's own
# 840.52 (0), 1206.93 (0), 165.33 (7). The DAgger policy before it, on the per-episode loop, gave 497.24 (5),
# 207.12 (0), 847.73 (2), 670.72 (3), 1205.77 (5), 190.70 (4), 1808.11 (0).
SHIPPED_SHA256 = "09d8d094ba50f92329b92bba3e8de00afcd6e6a9edde50432674d62928c1d126"
SHIPPED: dict[str, tuple[float, int | str]] = {
    "mixed-control": (496.37647801825136, 6),
    "training-heavy": (207.11747995069052, 0),
    "realtime-diurnal": (848.971935289389, "greedy"),
    "batch-fragmentation": (689.0833965568559, 6),
    "priority-inversion": (1209.1881043733638, "greedy"),
    "uniform-priority": (197.14329352133242, "greedy"),
    "scale-64x30": (1810.9200298359451, 4),
}


@pytest.fixture(scope="module")
def seven():
    return {name: load_scenario(SCENARIOS / f"{name}.yaml") for name in SHIPPED}


def test_defaults_are_the_shipped_configuration():
    options = PlanOptions()
    assert (options.samples, options.guard) == (DEFAULT_SAMPLES, DEFAULT_GUARD) == (8, Guard.GREEDY)
    assert ppo.DEFAULT_SAMPLES == DEFAULT_SAMPLES
    # No flags on the command line: the same options as PlanOptions().
    args = build_parser().parse_args(["plan", "x.yaml", "-s", "ppo"])
    assert plan_options(args) == PlanOptions()


@pytest.mark.parametrize("name", list(SHIPPED))
def test_default_plans_are_unchanged_on_the_seven_scenarios(seven, name):
    assert ppo.load_policy().sha256 == SHIPPED_SHA256, "the shipped policy changed: measure SHIPPED again"
    sc = seven[name]
    objective, winner = SHIPPED[name]
    plan = run_scheduler("ppo", sc)
    assert validate(sc, plan) == []
    assert plan.metrics.objective == pytest.approx(objective, abs=1e-6)
    info = plan.info
    assert info["samples"] == 8 and info["guard"] == "greedy" and info["winner"] == winner
    assert len(info["objectives"]) == 8
    greedy = run_scheduler("greedy", sc)
    assert info["guard_objective"] == pytest.approx(greedy.metrics.objective, abs=1e-5)
    if winner == "greedy":
        assert plan.placements == greedy.placements and max(info["objectives"]) < objective - 1e-6
    else:
        assert max(info["objectives"]) == pytest.approx(objective, abs=1e-5)
    # The plan as written reads back with what it records.
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.info == json.loads(json.dumps(info))


@pytest.mark.parametrize("guard", [Guard.FIFO, Guard.GREEDY])
@pytest.mark.parametrize("name", list(SHIPPED))
def test_a_guard_is_never_below_its_baseline(seven, name, guard):
    sc = seven[name]
    baseline = run_scheduler(guard.value, sc)
    plan = run_scheduler("ppo", sc, PlanOptions(guard=guard))
    assert validate(sc, plan) == []
    assert plan.metrics.objective >= baseline.metrics.objective - 1e-9
    assert plan.info["guard"] == guard.value
    assert plan.info["guard_objective"] == pytest.approx(baseline.metrics.objective, abs=1e-5)
    best_rollout = max(plan.info["objectives"])
    if baseline.metrics.objective > best_rollout + 1e-6:
        assert plan.info["winner"] == guard.value and plan.placements == baseline.placements
    else:
        assert plan.info["winner"] in range(8)
        assert plan.metrics.objective == pytest.approx(best_rollout, abs=1e-5)


def test_the_greedy_guard_fires_somewhere(seven):
    """Greedy beats every rollout on three of the seven scenarios (shipped policy, batched rollouts)."""
    assert ppo.load_policy().sha256 == SHIPPED_SHA256, "the shipped policy changed: measure this again"
    winners = {name: run_scheduler("ppo", sc, PlanOptions(guard="greedy")).info["winner"] for name, sc in seven.items()}
    fired = {name for name, w in winners.items() if w == "greedy"}
    assert fired == {"realtime-diurnal", "priority-inversion", "uniform-priority"}


@pytest.mark.parametrize("name", list(SHIPPED))
def test_no_guard_returns_the_best_rollout(seven, name):
    sc = seven[name]
    plan = run_scheduler("ppo", sc, PlanOptions(guard=Guard.NONE))
    assert validate(sc, plan) == []
    assert "guard_objective" not in plan.info and plan.info["guard"] == "none"
    assert isinstance(plan.info["winner"], int)
    assert plan.metrics.objective == pytest.approx(max(plan.info["objectives"]), abs=1e-5)
    assert plan.info["objectives"][plan.info["winner"]] == max(plan.info["objectives"])


def test_one_sample_against_many():
    sc = generate("mixed-control", seed=31)
    one = ppo.plan(sc, PlanOptions(samples=1, guard="none"))
    assert one.info["samples"] == 1 and one.info["winner"] == 0 and len(one.info["objectives"]) == 1
    many = ppo.plan(sc, PlanOptions(samples=5, guard="none", seed=3))
    assert many.info["samples"] == 5 and len(many.info["objectives"]) == 5
    # Rollout 0 is the most likely action at every step whatever the seed; the samples only add candidates.
    assert many.info["objectives"][0] == pytest.approx(one.metrics.objective, abs=1e-5)
    assert many.metrics.objective >= one.metrics.objective - 1e-9
    assert len(set(many.info["objectives"])) > 1  # the samples differ from the most likely rollout
    assert validate(sc, one) == [] and validate(sc, many) == []
    # Seeded: the same options give the same plan.
    assert ppo.plan(sc, PlanOptions(samples=5, guard="none", seed=3)).info == many.info


def test_candidates_are_one_valid_plan_per_rollout():
    sc = generate("batch-fragmentation", seed=5)
    policy = ppo.load_policy()
    plans = ppo.candidates(sc, policy, 4, seed=1)
    assert len(plans) == 4
    for p in plans:
        assert p.scheduler == "ppo" and p.metrics is not None
        assert validate(sc, p) == []
    assert ppo.candidates(sc, policy, 1)[0].placements == plans[0].placements
    chosen = ppo.plan(sc, PlanOptions(samples=4, seed=1, guard="none"))
    assert chosen.info["objectives"] == [round(p.metrics.objective, 6) for p in plans]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"samples": 0}, "samples: expected an integer >= 1, got 0"),
        ({"samples": -3}, "samples: expected an integer >= 1"),
        ({"samples": 2.5}, "samples: expected an integer >= 1, got 2.5"),
        ({"samples": True}, "samples: expected an integer >= 1"),
        ({"samples": "4"}, "samples: expected an integer >= 1"),
        ({"guard": "always"}, "guard: expected one of none, fifo, greedy, got 'always'"),
        ({"guard": None}, "guard: expected one of"),
    ],
)
def test_options_refuse_bad_values_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        PlanOptions(**fields)


def test_options_take_a_guard_by_name():
    assert PlanOptions(guard="greedy").guard is Guard.GREEDY
    assert PlanOptions(samples=3).samples == 3


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--samples", "0"], "--samples"),
        (["--samples", "many"], "--samples"),
        (["--guard", "greddy"], "--guard"),
        (["--guard", ""], "--guard"),
    ],
)
def test_cli_bad_values_exit_2_with_one_line(argv, field, capsys):
    code = cli_main(["plan", str(SCENARIOS / "training-heavy.yaml"), "-s", "ppo", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert field in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_plan_records_the_options(tmp_path, capsys):
    out = tmp_path / "plan.json"
    code = cli_main(
        [
            "plan",
            str(SCENARIOS / "uniform-priority.yaml"),
            "-s",
            "ppo",
            "--samples",
            "3",
            "--guard",
            "fifo",  # not the default (greedy): the flag must reach the planner
            "-o",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    plan = Plan.load(out)
    assert plan.info["samples"] == 3 and plan.info["guard"] == "fifo" and len(plan.info["objectives"]) == 3
    sc = load_scenario(SCENARIOS / "uniform-priority.yaml")
    assert validate(sc, plan) == []
    fifo = run_scheduler("fifo", sc).metrics.objective
    assert plan.info["guard_objective"] == pytest.approx(fifo, abs=1e-5)
    assert compute_metrics(sc, plan).objective >= fifo - 1e-6


def test_evaluate_takes_the_options_and_refuses_bad_ones(tmp_path):
    import argparse

    parser = argparse.ArgumentParser()
    add_plan_options(parser)
    assert plan_options(parser.parse_args(["--samples", "2", "--guard", "none"])) == PlanOptions(
        samples=2, guard="none"
    )
    bad = subprocess.run(
        [sys.executable, "evaluate.py", "--samples", "0", "--out", str(tmp_path / "x")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert bad.returncode == 2 and "--samples" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    scenario = tmp_path / "s.yaml"
    scenario.write_text((SCENARIOS / "training-heavy.yaml").read_text())
    options = ["--samples", "2", "--guard", "fifo", "--out", str(tmp_path / "out"), "--no-figures", "--quiet"]
    good = subprocess.run(
        [sys.executable, "evaluate.py", "--scenarios", str(scenario), "--schedulers", "ppo", *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert good.returncode == 0, good.stderr
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    assert document["options"]["samples"] == 2 and document["options"]["guard"] == "fifo"
    plan = Plan.load(tmp_path / "out" / "plans" / "training-heavy" / "ppo.json")
    assert plan.info["samples"] == 2 and plan.info["guard"] == "fifo"
