"""evaluate.py end to end on small generated scenarios: files, report, exit codes."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agents import registry
from gpu_env.generators import generate
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import load_scenario, save_scenario
from gpu_env.validation import validate

ROOT = Path(__file__).resolve().parents[1]


def _load_evaluate():
    spec = importlib.util.spec_from_file_location("evaluate", ROOT / "evaluate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["evaluate"] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


evaluate = _load_evaluate()


@pytest.fixture
def scenarios(tmp_path):
    folder = tmp_path / "scenarios"
    save_scenario(generate("training-heavy", seed=4, num_jobs=5, name="small-training"), folder / "a.yaml")
    save_scenario(generate("mixed-control", seed=4, gpus=8, num_jobs=6, name="small-mixed"), folder / "b.json")
    return folder


def test_writes_every_file_and_a_report_naming_each_scenario(tmp_path, scenarios, capsys):
    out = tmp_path / "out"
    code = evaluate.main(["--scenarios", str(scenarios), "--schedulers", "fifo", "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    for name, file in (("small-training", "a.yaml"), ("small-mixed", "b.json")):
        plan_path = out / "plans" / name / "fifo.json"
        data = json.loads(plan_path.read_text())
        assert "metrics" in data and "solve_ms" in data
        assert validate(load_scenario(scenarios / file), Plan.load(plan_path)) == []
        assert (out / "figures" / f"{name}-allocation.png").read_bytes()[:4] == b"\x89PNG"
        assert (out / "figures" / f"{name}-realtime.png").stat().st_size > 0
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [(r["scenario"], r["scheduler"]) for r in rows] == [("small-training", "fifo"), ("small-mixed", "fifo")]
    assert all(r["valid"] == "True" and float(r["objective_vs_fifo_pct"]) == 0.0 for r in rows)
    results = json.loads((out / "results.json").read_text())
    assert [r["scenario"] for r in results["results"]] == ["small-training", "small-mixed"]
    report = (out / "report.md").read_text()
    assert "### small-training" in report and "### small-mixed" in report
    assert "INVALID" not in report
    for link in ["figures/summary.png", "figures/small-mixed-allocation.png", "figures/small-training-realtime.png"]:
        assert f"]({link})" in report
        assert (out / link).exists()


def test_numbers_match_the_plans(tmp_path, scenarios):
    out = tmp_path / "out"
    args = ["--scenarios", str(scenarios / "a.yaml"), "--schedulers", "fifo", "--out", str(out), "--quiet"]
    assert evaluate.main([*args, "--no-figures"]) == 0
    row = json.loads((out / "results.json").read_text())["results"][0]
    plan = json.loads((out / "plans" / "small-training" / "fifo.json").read_text())
    assert row["objective"] == pytest.approx(plan["metrics"]["objective"])
    assert row["utilization"] == pytest.approx(plan["metrics"]["utilization"])
    assert not (out / "figures").exists()


def _tamper(name, shift_start=False, bound=None, fail=False):
    """A run_scheduler that runs FIFO and then breaks, bounds or crashes the plan of scheduler `name`."""
    real = registry.run_scheduler

    def fake(scheduler, scenario, options):
        if scheduler == name and fail:
            raise RuntimeError("solver exploded")
        plan = real("fifo", scenario, options)
        if scheduler != name:
            return plan
        plan.scheduler = name
        if shift_start:  # put every job on GPU block 0 at slot 0: overlaps, and starts before release
            plan.placements = [Placement(p.job, 0, tuple(range(len(p.gpus)))) for p in plan.placements]
        if bound is not None:
            plan.extra = {"bound": bound * plan.metrics.objective, "status": "FEASIBLE"}
        return plan

    return fake


def test_invalid_plan_is_loud_and_exits_1(tmp_path, scenarios, monkeypatch, capsys):
    monkeypatch.setitem(registry.SCHEDULERS, "broken", "agents.fifo:plan")
    monkeypatch.setattr(evaluate, "run_scheduler", _tamper("broken", shift_start=True))
    out = tmp_path / "out"
    args = ["--scenarios", str(scenarios), "--schedulers", "broken", "--out", str(out), "--quiet", "--no-figures"]
    code = evaluate.main(args)
    assert code == 1
    err = capsys.readouterr().err
    assert "invalid" in err and "broken" in err
    report = (out / "report.md").read_text()
    assert "INVALID OR FAILED PLANS" in report.split("## Summary")[0]  # at the top
    assert "rule 1-one-job-per-gpu" in report
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert {r["scheduler"]: r["valid"] for r in rows} == {"fifo": "True", "broken": "False"}


def test_failing_scheduler_is_reported_and_others_kept(tmp_path, scenarios, monkeypatch, capsys):
    monkeypatch.setitem(registry.SCHEDULERS, "crashy", "agents.fifo:plan")
    monkeypatch.setattr(evaluate, "run_scheduler", _tamper("crashy", fail=True))
    out = tmp_path / "out"
    args = ["--scenarios", str(scenarios), "--schedulers", "fifo,crashy", "--out", str(out), "--quiet", "--no-figures"]
    assert evaluate.main(args) == 1
    assert "solver exploded" in capsys.readouterr().err
    report = (out / "report.md").read_text()
    assert "the scheduler failed" in report and "RuntimeError: solver exploded" in report
    assert (out / "plans" / "small-mixed" / "fifo.json").exists()
    assert not (out / "plans" / "small-mixed" / "crashy.json").exists()


def test_gap_column_when_a_plan_has_a_bound(tmp_path, scenarios, monkeypatch):
    monkeypatch.setitem(registry.SCHEDULERS, "exact", "agents.fifo:plan")
    monkeypatch.setattr(evaluate, "run_scheduler", _tamper("exact", bound=1.25))
    out = tmp_path / "out"
    args = ["--scenarios", str(scenarios), "--schedulers", "fifo,exact", "--out", str(out), "--quiet", "--no-figures"]
    assert evaluate.main(args) == 0
    report = (out / "report.md").read_text()
    assert "| gap |" in report
    assert "20.0 % (feasible)" in report  # (1.25 x - x) / 1.25 x
    row = next(r for r in json.loads((out / "results.json").read_text())["results"] if r["scheduler"] == "exact")
    assert row["gap"] == pytest.approx(0.2)


def assert_bad_input(capsys, code, *fragments):
    assert code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0]


def test_bad_scenario_file_exits_2_before_writing(tmp_path, scenarios, capsys):
    (scenarios / "c.yaml").write_text("name: broken\ncluster: {gpus: 4}\nhorizon: {slots: -2}\n")
    out = tmp_path / "out"
    code = evaluate.main(["--scenarios", str(scenarios), "--out", str(out), "--quiet"])
    assert_bad_input(capsys, code, "c.yaml", "horizon.slots")
    assert not out.exists()


def test_unknown_scheduler_exits_2(tmp_path, scenarios, capsys):
    code = evaluate.main(["--scenarios", str(scenarios), "--schedulers", "fifo,psychic", "--out", str(tmp_path / "o")])
    assert_bad_input(capsys, code, "--schedulers", "'psychic'")


def test_missing_path_and_empty_folder_exit_2(tmp_path, capsys):
    code = evaluate.main(["--scenarios", str(tmp_path / "nowhere.yaml"), "--out", str(tmp_path / "o")])
    assert_bad_input(capsys, code, "nowhere.yaml")
    (tmp_path / "empty").mkdir()
    code = evaluate.main(["--scenarios", str(tmp_path / "empty"), "--out", str(tmp_path / "o")])
    assert_bad_input(capsys, code, "empty", "no scenario files")


def test_duplicate_scenario_names_exit_2(tmp_path, scenarios, capsys):
    save_scenario(load_scenario(scenarios / "a.yaml"), scenarios / "copy.yaml")
    code = evaluate.main(["--scenarios", str(scenarios), "--out", str(tmp_path / "o")])
    assert_bad_input(capsys, code, "small-training")


def test_bad_option_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        evaluate.main(["--time-limit", "0"])
    assert exc.value.code == 2
    assert_bad_input(capsys, 2, "--time-limit")


def test_pick_schedulers_puts_fifo_first():
    assert evaluate.pick_schedulers("fifo")[0] == "fifo"
    assert evaluate.pick_schedulers(None)[0] == "fifo"
    assert set(evaluate.pick_schedulers(None)) == set(registry.available_schedulers())


# ----------------------------------------------------------------------------- the real schedulers, end to end


def test_every_real_scheduler_through_evaluate_py(tmp_path, scenarios):
    # evaluate.py as a user runs it, in its own process, with the five schedulers of the registry. CP-SAT
    # proves the two small scenarios optimal in well under a second, so cpsat and full must say so. On
    # priority-inversion seed 4 (one worker proves it in about 8 s) the hint is not optimal: greedy 936.5,
    # ppo 944.3, and full improved on it to 960.2 in 3 s (measured), so full must beat its hint there.
    save_scenario(generate("priority-inversion", seed=4, name="hard-priority"), scenarios / "c.yaml")
    out = tmp_path / "out"
    names = ["fifo", "greedy", "ppo", "cpsat", "full"]
    command = [sys.executable, str(ROOT / "evaluate.py"), "--scenarios", str(scenarios)]
    command += ["--schedulers", ",".join(names), "--out", str(out), "--time-limit", "3", "--quiet", "--no-figures"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    files = {"small-training": "a.yaml", "small-mixed": "b.json", "hard-priority": "c.yaml"}
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [(r["scenario"], r["scheduler"]) for r in rows] == [(s, n) for s in files for n in names]
    assert all(r["valid"] == "True" and not r["error"] for r in rows)
    results = {(r["scenario"], r["scheduler"]): r for r in json.loads((out / "results.json").read_text())["results"]}
    report = (out / "report.md").read_text()
    assert "INVALID" not in report
    for name, file in files.items():
        scenario = load_scenario(scenarios / file)
        objective = {}
        for scheduler in names:
            data = json.loads((out / "plans" / name / f"{scheduler}.json").read_text())
            assert data["scenario"] == name and data["scheduler"] == scheduler
            # The schedule itself (reading back scheduler-specific keys is the plan format's own test).
            plan = Plan.from_dict({"placements": data["placements"], "realtime": data["realtime"]})
            assert validate(scenario, plan) == []
            metrics = compute_metrics(scenario, plan)
            assert data["metrics"] == metrics.to_dict()  # the recorded numbers are the plan's
            assert results[name, scheduler]["objective"] == pytest.approx(metrics.objective, abs=1e-6)
            objective[scheduler] = metrics.objective
            assert f"| `{scheduler}` |" in report.split(f"### {name}")[1].split("###")[0]
        hint = max(objective["greedy"], objective["ppo"])  # full's "auto" hint: the better of the two
        assert objective["greedy"] >= objective["fifo"] - 1e-9
        assert objective["full"] >= hint - 1e-6
        for exact in ("cpsat", "full"):  # a proven bound holds for every valid plan
            assert max(objective.values()) <= results[name, exact]["bound"] + 1e-6
        if name == "hard-priority":
            assert objective["full"] > hint + 1.0
        else:
            assert results[name, "cpsat"]["status"] == results[name, "full"]["status"] == "optimal"
            assert objective["full"] == pytest.approx(objective["cpsat"], abs=1e-2)  # both optimal (scaled model)
