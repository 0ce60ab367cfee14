"""The gpualloc command line: exit codes, one-line errors without tracebacks, and round trips."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agents import cli
from gpu_env.generators import generate
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import load_scenario, save_scenario, scenario_from_dict
from gpu_env.validation import validate
from tests.conftest import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err, *fragments):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def scenario_file(tmp_path):
    path = tmp_path / "small.yaml"
    save_scenario(generate("mixed-control", seed=3, gpus=8, num_jobs=6), path)
    return path


# ----------------------------------------------------------------------------- round trips


def test_generate_then_load_round_trip(tmp_path, capsys):
    for name in ("s.yaml", "s.json"):
        code, _, err = run(capsys, "generate", "training-heavy", "--seed", 5, "-o", tmp_path / name)
        assert code == 0, err
        assert load_scenario(tmp_path / name) == generate("training-heavy", seed=5)


def test_generate_to_stdout_with_sizes(capsys):
    code, out, _ = run(capsys, "generate", "scale-64x30", "--seed", 1, "--gpus", 16, "--jobs", 7, "--name", "mini")
    assert code == 0
    sc = scenario_from_dict(yaml.safe_load(out), "<stdout>")
    assert (sc.name, sc.gpus, len(sc.jobs)) == ("mini", 16, 7)
    assert sc == generate("scale-64x30", seed=1, gpus=16, num_jobs=7, name="mini")


def test_generate_default_seed_is_the_benchmark_seed(capsys):
    from gpu_env.generators import BENCHMARK_SEEDS

    code, out, _ = run(capsys, "generate", "uniform-priority")
    assert code == 0
    assert scenario_from_dict(yaml.safe_load(out)) == generate("uniform-priority", BENCHMARK_SEEDS["uniform-priority"])


def test_plan_then_validate_round_trip(tmp_path, capsys, scenario_file):
    out_plan = tmp_path / "plans" / "fifo.json"
    code, out, err = run(capsys, "plan", scenario_file, "--scheduler", "fifo", "-o", out_plan)
    assert code == 0, err
    assert out == ""
    assert "objective" in err and str(out_plan) in err  # the short summary goes to stderr
    data = json.loads(out_plan.read_text())
    assert data["scheduler"] == "fifo" and "metrics" in data and data["solve_ms"] >= 0
    sc = load_scenario(scenario_file)
    assert validate(sc, Plan.load(out_plan)) == []

    code, out, err = run(capsys, "validate", scenario_file, out_plan)
    assert code == 0, err
    assert "valid plan by fifo" in out
    assert f"objective {data['metrics']['objective']:.2f}" in out


def test_plan_to_stdout_is_plan_json(capsys, scenario_file):
    code, out, _ = run(capsys, "plan", scenario_file, "-s", "fifo", "--time-limit", "1", "--seed", "3")
    assert code == 0
    plan = Plan.from_dict(json.loads(out))
    assert validate(load_scenario(scenario_file), plan) == []


def test_render_text_and_png(tmp_path, capsys, scenario_file):
    plan_path = tmp_path / "p.json"
    assert run(capsys, "plan", scenario_file, "-s", "fifo", "-o", plan_path)[0] == 0
    code, out, _ = run(capsys, "render", scenario_file, plan_path)
    assert code == 0
    assert sum(line.startswith("gpu") for line in out.splitlines()) == 8
    png = tmp_path / "p.png"
    code, _, err = run(capsys, "render", scenario_file, plan_path, "-o", png)
    assert code == 0, err
    assert png.read_bytes()[:4] == b"\x89PNG"


# ----------------------------------------------------------------------------- invalid plans: exit 1


def broken_plan(scenario_file, path):
    """A plan with three violations: an overlap, a start before release, a missing real-time curve."""
    sc = load_scenario(scenario_file)
    pending = [j for j in sc.jobs if j.running_on is None and j.gpus <= 4][:2]
    placements = [Placement(j.id, 0, tuple(range(j.gpus))) for j in pending]
    placements += [Placement(j.id, 0, j.running_on) for j in sc.jobs if j.running_on is not None]
    plan = Plan(sc.name, "hand", placements, {})
    plan.save(path)
    return validate(sc, plan)


def test_validate_invalid_plan_exits_1_with_one_line_per_violation(tmp_path, capsys, scenario_file):
    violations = broken_plan(scenario_file, tmp_path / "bad.json")
    assert len(violations) >= 2
    code, out, _ = run(capsys, "validate", scenario_file, tmp_path / "bad.json")
    assert code == 1
    lines = [line for line in out.splitlines() if line.startswith("rule ")]
    assert lines == [str(v) for v in violations]
    assert "INVALID" in out


def test_render_invalid_plan_still_draws_and_exits_1(tmp_path, capsys, scenario_file):
    broken_plan(scenario_file, tmp_path / "bad.json")
    code, out, err = run(capsys, "render", scenario_file, tmp_path / "bad.json")
    assert code == 1
    assert "gpu 0|" in out and "INVALID" in err


def test_plan_reports_an_invalid_scheduler_plan(tmp_path, capsys, scenario_file, monkeypatch):
    def bad_scheduler(name, scenario, options):
        plan = Plan(scenario.name, name, [], {})  # no real-time curves: invalid when the scenario has apps
        plan.solve_ms = 0.0
        return plan

    monkeypatch.setattr(cli, "run_scheduler", bad_scheduler)
    out_plan = tmp_path / "p.json"
    code, _, err = run(capsys, "plan", scenario_file, "-s", "fifo", "-o", out_plan)
    assert code == 1
    assert "INVALID" in err and "rule 0-plan-format" in err
    assert out_plan.exists()  # the whole plan is written, for inspection


# ----------------------------------------------------------------------------- bad input: exit 2


def test_missing_scenario_file(tmp_path, capsys):
    code, _, err = run(capsys, "plan", tmp_path / "nope.yaml", "-s", "fifo", "-o", tmp_path / "p.json")
    assert code == 2
    assert_one_line_error(err, "nope.yaml", "no such file")
    assert not (tmp_path / "p.json").exists()


def test_malformed_scenario_names_file_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\ncluster: {gpus: 4}\nhorizon: {slots: 3}\njobs:\n- {id: a, type: training, gpus: 0, duration: 1}\n"
    )
    code, _, err = run(capsys, "plan", bad, "-s", "fifo", "-o", tmp_path / "p.json")
    assert code == 2
    assert_one_line_error(err, "bad.yaml", "jobs[0].gpus")
    assert not (tmp_path / "p.json").exists()


def test_unknown_scheduler(tmp_path, capsys, scenario_file):
    code, _, err = run(capsys, "plan", scenario_file, "--scheduler", "oracle", "-o", tmp_path / "p.json")
    assert code == 2
    assert_one_line_error(err, "--scheduler", "'oracle'", "fifo")
    assert not (tmp_path / "p.json").exists()


def test_unknown_family(tmp_path, capsys):
    code, _, err = run(capsys, "generate", "tiny-family", "-o", tmp_path / "s.yaml")
    assert code == 2
    assert_one_line_error(err, "unknown family 'tiny-family'", "mixed-control")
    assert not (tmp_path / "s.yaml").exists()


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["plan", "{sc}", "-s", "fifo", "--time-limit", "-1"], "--time-limit"),
        (["plan", "{sc}", "-s", "fifo", "--workers", "0"], "--workers"),
        (["plan", "{sc}"], "--scheduler"),
        (["generate", "mixed-control", "--seed", "x"], "--seed"),
        (["validate", "{sc}"], "plan"),
        (["frobnicate"], "frobnicate"),
        (["plan", "{sc}", "-s", "fifo", "-o", "{tmp}/plan.txt"], ".json"),
        (["generate", "mixed-control", "-o", "{tmp}/s.txt"], ".yaml"),
        (["render", "{sc}", "{sc}", "-o", "{tmp}/x.jpg"], ".png"),
        (["plan", "{sc}", "-s", "fifo", "--policy", "{tmp}/none.onnx"], "--policy"),
    ],
)
def test_bad_arguments(tmp_path, capsys, scenario_file, argv, fragment):
    argv = [a.format(sc=scenario_file, tmp=tmp_path) for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert_one_line_error(err, fragment)
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.yaml"]  # nothing written


def test_output_is_a_folder(tmp_path, capsys, scenario_file):
    (tmp_path / "out.json").mkdir()
    code, _, err = run(capsys, "plan", scenario_file, "-s", "fifo", "-o", tmp_path / "out.json")
    assert code == 2
    assert_one_line_error(err, "out.json", "folder")


def test_malformed_plan_file(tmp_path, capsys, scenario_file):
    bad = tmp_path / "plan.json"
    bad.write_text('{"placements": [{"job": "x", "start": "soon", "gpus": [0]}]}')
    code, _, err = run(capsys, "validate", scenario_file, bad)
    assert code == 2
    assert_one_line_error(err, "plan.json", "placements[0].start")
    bad.write_text("{not json")
    code, _, err = run(capsys, "render", scenario_file, bad)
    assert code == 2
    assert_one_line_error(err, "plan.json", "invalid JSON")


def test_no_command_and_help(capsys):
    assert (
        run(
            capsys,
        )[0]
        == 2
    )
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for command in cli.COMMANDS:
        assert command.name in out


def test_console_entry_point_in_a_subprocess(tmp_path):
    """The real process: exit 2 and one line on stderr, no traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "agents.cli", "plan", str(tmp_path / "missing.yaml"), "-s", "fifo"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 2
    assert_one_line_error(result.stderr, "missing.yaml")


# ----------------------------------------------------------------------------- adversarial scenarios, the real process

SMALL = "name: x\ncluster: {gpus: 8}\nhorizon: {slots: 4}\n"
ADVERSARIAL = {
    "huge cluster": (SMALL.replace("gpus: 8", "gpus: 1000000000000"), "cluster.gpus"),
    "huge horizon": (SMALL.replace("slots: 4", "slots: 1000000000000"), "horizon.slots"),
    "NaN priority": (
        SMALL + "jobs:\n- {id: a, type: training, gpus: 1, duration: 1, priority: .nan}\n",
        "jobs[0].priority",
    ),
    "alias bomb": (
        SMALL
        + "realtime:\n- name: chat\n  ramp: 1\n  penalty: 5\n  demand:\n  - &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
        + "".join(f"  - &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)),
        "realtime[0].demand[0]",
    ),
    "empty file": ("", "<top>"),
    "python tag": ("name: !!python/object/apply:os.system ['echo hi']\n" + SMALL[8:], "<line 1>"),
}


def _run_cli(tmp_path: Path, command: str, kind: str) -> tuple[subprocess.CompletedProcess[str], Path, str]:
    text, field = ADVERSARIAL[kind]
    scenario = tmp_path / "adversarial.yaml"
    scenario.write_text(text)
    plan = tmp_path / "plan.json"
    plan.write_text('{"scenario": "x", "placements": []}\n')
    argv = {
        "plan": [scenario, "-s", "greedy", "-o", tmp_path / "out.json"],
        "validate": [scenario, plan],
        "render": [scenario, plan, "-o", tmp_path / "out.png"],
        "simulate": [scenario, "-s", "greedy", "-o", tmp_path / "out"],
    }[command]
    result = subprocess.run(
        [sys.executable, "-m", "agents.cli", command, *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=HANG_GUARD_S,
    )
    return result, scenario, field


@pytest.mark.parametrize("command", ["plan", "validate", "render", "simulate"])
@pytest.mark.parametrize("kind", ["huge cluster", "huge horizon"])
def test_absurd_sizes_exit_2_with_one_line_and_write_nothing(tmp_path, command, kind):
    result, scenario, field = _run_cli(tmp_path, command, kind)
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result.stderr, str(scenario), field, "at most")
    assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adversarial.yaml", "plan.json"]  # nothing written


@pytest.mark.parametrize("kind", ["NaN priority", "alias bomb", "empty file", "python tag"])
def test_adversarial_scenarios_exit_2_in_a_subprocess(tmp_path, kind):
    result, scenario, field = _run_cli(tmp_path, "plan", kind)
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result.stderr, str(scenario), field)
    assert not (tmp_path / "out.json").exists()
