"""2D-knapsack instances as scenarios: the conversion of SPEC section 6, its errors, and the CLI subcommand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.cli import main
from gpu_env.knapsack import convert_2kp, knapsack_from_dict, load_knapsack, to_scenario
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import ScenarioError, load_scenario
from gpu_env.validation import validate

KNAPSACK = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "2kp"

TOY: dict[str, Any] = {
    "name": "toy",
    "bin": {"width": 5, "height": 4},
    "items": [
        {"width": 3, "height": 2, "profit": 6, "copies": 2},
        {"width": 2, "height": 4, "profit": 9, "copies": 1},
        {"width": 5, "height": 1, "profit": 4.5, "copies": 0},
    ],
    "rotation": False,
    "optimum": 21,
}


def test_toy_conversion_follows_spec_section_6():
    sc = to_scenario(knapsack_from_dict(TOY, "toy.json"))
    assert (sc.name, sc.gpus, sc.slots, sc.node_size, sc.decay, sc.apps) == ("toy", 5, 4, 5, 1.0, ())
    assert [job.id for job in sc.jobs] == ["item1-1", "item1-2", "item2-1"]  # copies: 0 gives no job
    for job in sc.jobs:
        assert job.release == 0 and job.deadline == 4 and job.running_on is None
    assert [(j.gpus, j.duration, j.value) for j in sc.jobs] == [(3, 2, 6.0), (3, 2, 6.0), (2, 4, 9.0)]


def test_objective_of_a_packing_is_its_profit():
    sc = to_scenario(knapsack_from_dict(TOY))
    plan = Plan(
        "toy",
        "hand",
        [
            Placement("item1-1", 0, (0, 1, 2)),
            Placement("item1-2", 2, (0, 1, 2)),
            Placement("item2-1", 0, (3, 4)),
        ],
    )
    assert validate(sc, plan) == []
    assert compute_metrics(sc, plan).objective == pytest.approx(21.0)
    late = Plan("toy", "hand", [Placement("item2-1", 1, (3, 4))])  # would end at 5, after the bin's height
    assert any(v.rule.value.startswith("3") for v in validate(sc, late))


def test_every_stored_instance_converts():
    paths = sorted(KNAPSACK.glob("*.json"))
    assert len(paths) >= 30
    for path in paths:
        instance = load_knapsack(path)
        sc = to_scenario(instance)
        assert len(sc.jobs) == instance.pieces
        assert (sc.gpus, sc.slots) == (instance.width, instance.height)


def test_ngcut1_as_stored():
    instance = load_knapsack(KNAPSACK / "ngcut1.json")
    assert (instance.width, instance.height, instance.pieces, instance.optimum) == (10, 10, 10, 164)
    sc = convert_2kp(KNAPSACK / "ngcut1.json")
    assert sum(1 for j in sc.jobs if (j.gpus, j.duration, j.value) == (5, 4, 23.0)) == 3


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda d: d.pop("bin"), "bin", "missing"),
        (lambda d: d["bin"].update(width=0), "bin.width", "positive"),
        (lambda d: d["bin"].update(height="ten"), "bin.height", "integer"),
        (lambda d: d["items"][1].update(height=2.5), "items[1].height", "integer"),
        (lambda d: d["items"][0].update(profit=-1), "items[0].profit", "positive"),
        (lambda d: d["items"][0].update(copies=-2), "items[0].copies", "at least 0"),
        (lambda d: d["items"][2].update(width=6), "items[2].width", "wider than the bin"),
        (lambda d: d["items"][0].update(colour="red"), "items[0].colour", "unknown key"),
        (lambda d: d.update(items={}), "items", "list"),
        (lambda d: d.update(rotation=True), "rotation", "rotation"),
        (lambda d: d.update(optimum="best"), "optimum", "number"),
    ],
)
def test_bad_instances_name_file_and_field(change, field, words):
    data = json.loads(json.dumps(TOY))
    change(data)
    with pytest.raises(ScenarioError) as info:
        knapsack_from_dict(data, "bad.json")
    assert info.value.source == "bad.json" and info.value.field == field
    assert words in info.value.reason


def test_unreadable_files(tmp_path):
    with pytest.raises(ScenarioError, match="no such file"):
        load_knapsack(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"name": "x", ', encoding="utf-8")
    with pytest.raises(ScenarioError, match="invalid JSON"):
        load_knapsack(broken)


def test_cli_convert_writes_a_scenario_that_loads_back(tmp_path, capsys):
    out = tmp_path / "ngcut1.yaml"
    assert main(["convert-2kp", str(KNAPSACK / "ngcut1.json"), "-o", str(out)]) == 0
    assert load_scenario(out).to_dict() == convert_2kp(KNAPSACK / "ngcut1.json").to_dict()
    assert "literature optimum 164" in capsys.readouterr().err


def test_cli_convert_bad_input_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    data = json.loads(json.dumps(TOY))
    data["items"][0]["width"] = "3"
    bad.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "out.yaml"
    assert main(["convert-2kp", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "bad.json" in err and "items[0].width" in err and "Traceback" not in err
    assert not out.exists()
    assert main(["convert-2kp", str(KNAPSACK / "ngcut1.json"), "-o", str(tmp_path / "x.txt")]) == 2
