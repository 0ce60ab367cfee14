"""Plan files: every scheduler's plan on every shipped scenario reads back, validates and is worth the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.cli import main
from agents.options import PlanOptions
from agents.registry import SCHEDULERS, run_scheduler
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Placement, Plan, without_timings
from gpu_env.scenario import ScenarioError, load_scenario
from gpu_env.validation import validate

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "configs" / "scenarios").glob("*.yaml"))
# The anytime schedulers stop after a little deterministic work (the wall limit is never reached): the test is
# about the file, not the optimum, and the same plan comes back at any machine speed.
OPTIONS = PlanOptions(time_limit=10_000, workers=1, seed=0, deterministic_time=0.5)


def test_every_shipped_scenario_is_covered():
    assert len(SCENARIOS) == 9


@pytest.mark.parametrize("name", list(SCHEDULERS))
@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_scheduler_plan_reads_back(tmp_path, path, name):
    sc = load_scenario(path)
    plan = run_scheduler(name, sc, OPTIONS)
    out = tmp_path / f"{name}.json"
    plan.save(out)
    loaded = Plan.load(out)
    assert validate(sc, loaded) == []
    assert loaded.scheduler == name and loaded.scenario == sc.name
    assert loaded.placements == plan.placements and loaded.curves == plan.curves
    assert compute_metrics(sc, loaded) == plan.metrics
    assert loaded.info == json.loads(json.dumps(plan.info))  # kept as written, whatever it holds
    assert Plan.from_dict(loaded.to_dict()).to_dict() == loaded.to_dict()


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_cli_plan_then_validate(tmp_path, capsys, name):
    """The reported bug: ``plan --scheduler ppo -o p.json`` then ``validate`` exited 2 (``policy: unknown key``)."""
    scenario = str(ROOT / "configs" / "scenarios" / "training-heavy.yaml")
    out = tmp_path / "p.json"
    limits = ["--time-limit", "10000", "--deterministic-time", "0.5"]
    assert main(["plan", scenario, "--scheduler", name, *limits, "-o", str(out)]) == 0
    assert "info" in json.loads(out.read_text())
    capsys.readouterr()
    assert main(["validate", scenario, str(out)]) == 0
    assert f"valid plan by {name} for training-heavy" in capsys.readouterr().out


def test_info_is_kept_without_judging():
    info = {"anything": [1, {"nested": None}], "status": "mine", "score": 1.5}
    data = {"scenario": "s", "scheduler": "x", "placements": [], "info": info}
    plan = Plan.from_dict(data)
    assert plan.info == info
    assert plan.to_dict()["info"] == info


def test_info_must_be_an_object():
    with pytest.raises(ScenarioError, match=r"p\.json: info: expected a JSON object"):
        Plan.from_dict({"placements": [], "info": [1, 2]}, "p.json")


def test_other_top_level_keys_are_still_refused():
    with pytest.raises(ScenarioError, match="policy"):
        Plan.from_dict({"placements": [], "policy": "default.onnx"}, "p.json")


def test_top_level_status_bound_gap_of_older_files_move_into_info():
    data = {"placements": [], "status": "optimal", "bound": 3.0, "gap": 0.0, "info": {"gap": 0.5}}
    plan = Plan.from_dict(data)
    assert plan.info == {"status": "optimal", "bound": 3.0, "gap": 0.5}  # the key inside info wins
    written = plan.to_dict()
    assert "status" not in written and written["info"]["status"] == "optimal"


def test_plan_without_info_reads_back_empty():
    plan = Plan.from_dict({"placements": [{"job": "a", "start": 0, "gpus": [0]}]})
    assert plan.info == {} and plan.placements == [Placement("a", 0, (0,))]
    assert plan.to_dict()["info"] == {}


def test_without_timings_drops_the_clock_only():
    document = {
        "scenario": "s",
        "solve_ms": 3.2,
        "placements": [{"job": "a", "start": 0, "gpus": [0]}],
        "info": {
            "status": "optimal",
            "trace": {"seconds": [0.1, 0.2], "objective": [1.0, 2.0], "bound": [3.0, 2.0]},
            "hint": {"scheduler": "greedy", "info": {"trace": {"seconds": [0.05], "objective": [1.0]}}},
            "seconds": 7,  # not a trace's: kept
        },
    }
    stripped = without_timings(document)
    assert stripped == {
        "scenario": "s",
        "placements": [{"job": "a", "start": 0, "gpus": [0]}],
        "info": {
            "status": "optimal",
            "trace": {"objective": [1.0, 2.0], "bound": [3.0, 2.0]},
            "hint": {"scheduler": "greedy", "info": {"trace": {"objective": [1.0]}}},
            "seconds": 7,
        },
    }
    assert document["info"]["trace"]["seconds"] == [0.1, 0.2]  # the input is left as it was
