"""Training (agents.learned and train.py): config checking, the imitation teacher, a smoke run of train.py
(TensorBoard, checkpoints, export, resume)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("sb3_contrib")

from agents import greedy  # noqa: E402
from agents.learned import teacher  # noqa: E402
from agents.learned.checkpoints import latest_checkpoint  # noqa: E402
from agents.learned.config import ConfigError, choose_device, load_config  # noqa: E402
from agents.registry import run_scheduler  # noqa: E402
from gpu_env.episode import ActionLayout, ActionMode, Episode  # noqa: E402
from gpu_env.generators import generate  # noqa: E402
from gpu_env.validation import validate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "configs" / "train" / "smoke.yaml"


def smoke_config(tmp_path: Path) -> Path:
    data = yaml.safe_load(SMOKE.read_text())
    data["run_dir"] = str(tmp_path / "run")
    data["export"] = str(tmp_path / "run" / "policy.onnx")
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# ----------------------------------------------------------------------------- config


def test_shipped_configs_load():
    for path in (ROOT / "configs" / "train").glob("*.yaml"):
        cfg = load_config(path)
        assert cfg.total_timesteps > 0 and cfg.scenarios.families


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"n_envs": "four"}, "field n_envs: expected an integer"),
        ({"ppo": {"learning_rate": "fast"}}, "field ppo.learning_rate: expected a number"),
        ({"ppo": {"gama": 0.9}}, "unknown field ppo.gama"),
        ({"colour": "red"}, "unknown field colour"),
        ({"scenarios": {"families": {"nope": 1}}}, "field scenarios.families: unknown family 'nope'"),
        ({"scenarios": {"families": {"training-heavy": 1}, "gpus": [8]}}, "field scenarios.gpus: expected"),
        ({"total_timesteps": 0}, "field total_timesteps: expected a positive value"),
        ({"imitation": {"episodes": -1}}, "field imitation.episodes: expected 0 or more"),
    ],
)
def test_bad_configs_name_file_and_field(tmp_path, change, message):
    data = yaml.safe_load(SMOKE.read_text())
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict) and key != "scenarios":
            data[key].update(value)
        else:
            data[key] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_bad_config_exits_2_without_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("seed: [1\n")
    result = subprocess.run(
        [sys.executable, "train.py", "--config", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert "bad.yaml: not valid YAML" in result.stderr and "Traceback" not in result.stderr


def test_cuda_without_cuda_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ConfigError, match="--device cuda"):
        choose_device("cuda")
    assert choose_device("auto") == "cpu"


# ----------------------------------------------------------------------------- the teacher


@pytest.mark.parametrize("family", ["training-heavy", "realtime-diurnal"])
def test_teacher_replays_greedy_in_the_action_space(family):
    """On these families the replay reaches greedy's objective exactly (measured: every seed 0-4)."""
    sc = generate(family, seed=0)
    reference = greedy.plan(sc)
    ep = Episode(sc, ActionLayout.make(ActionMode.FIT, 40, sc.gpus))
    actions = teacher.teacher_actions(ep, reference)
    assert ep.done and len(actions) == ep.steps
    assert validate(sc, ep.plan()) == []
    assert ep.objective == pytest.approx(run_scheduler("greedy", sc).metrics.objective)


def test_dagger_labels_are_greedy_replanning_from_the_state():
    """At the first state the label starts a job greedy starts at slot 0; following the labels makes a valid plan
    worth at least greedy's (greedy re-planned at every step; measured: equal on training-heavy, seeds 0-4)."""
    sc = generate("training-heavy", seed=0)
    reference = greedy.plan(sc)
    ep = Episode(sc, ActionLayout.make(ActionMode.FIT, 40, sc.gpus))
    first = ep.layout.decode(teacher.teacher_label(ep))
    now = {p.job for p in reference.placements if p.start == 0}
    assert first is not None and sc.jobs[int(ep.rows[first[0]])].id in now
    while not ep.done:
        label = teacher.teacher_label(ep)
        assert ep.action_mask()[label]
        ep.step(label)
    assert validate(sc, ep.plan()) == []
    assert ep.objective >= run_scheduler("greedy", sc).metrics.objective - 1e-6


def test_dagger_label_is_advance_when_greedy_keeps_the_gpus_free():
    """A cheap job could start now but would block a valuable one released next slot: greedy waits, so ADVANCE."""
    from gpu_env.scenario import Job, JobType, Scenario

    jobs = (
        Job("cheap", JobType.BATCH_INFERENCE, 2, 3),
        Job("rich", JobType.TRAINING, 2, 2, release=1, priority=10.0, deadline=3),
    )
    sc = Scenario("wait", gpus=2, slots=4, jobs=jobs)
    assert {p.job: p.start for p in greedy.plan(sc).placements}.get("rich") == 1
    ep = Episode(sc, ActionLayout.make(ActionMode.FIT, 4, sc.gpus))
    assert ep.clock == 0 and ep.action_mask()[ep.layout.encode(0, 0)]  # cheap may start now
    assert teacher.teacher_label(ep) == ep.layout.advance


# ----------------------------------------------------------------------------- the smoke run


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("smoke")
    config = smoke_config(tmp)
    result = run_train("--config", str(config), "--device", "cpu")
    return config, tmp / "run", result


def run_train(*args: str) -> subprocess.CompletedProcess:
    """train.py in a subprocess, as a user runs it; it must succeed."""
    result = subprocess.run([sys.executable, "train.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_smoke_run_writes_tensorboard_events(smoke_run):
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    _, run_dir, _ = smoke_run
    tags = set()
    for events in (run_dir / "tb").rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events.parent), size_guidance={SCALARS: 0})
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
    expected = {"time/fps", "eval/mean_vs_greedy", "eval/training-heavy/vs_fifo", "imitation/loss", "dagger/agreement"}
    assert expected <= tags


def test_smoke_run_checkpoints_and_exports(smoke_run):
    _, run_dir, _ = smoke_run
    assert latest_checkpoint(run_dir / "checkpoints") is not None
    card = json.loads((run_dir / "policy.json").read_text())
    assert card["seed"] == 0 and card["config"]["total_timesteps"] == 256
    assert card["training_steps"] > 0 and "mean_vs_greedy" in card["evaluation"]
    from agents.options import PlanOptions

    sc = generate("training-heavy", seed=5)
    plan = run_scheduler("ppo", sc, PlanOptions(policy=run_dir / "policy.onnx"))
    assert validate(sc, plan) == []


def test_resume_continues_from_the_latest_checkpoint(smoke_run):
    config, run_dir, _ = smoke_run
    run_train("--config", str(config), "--device", "cpu", "--resume", "--no-export", "--timesteps", "384")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ppo_steps"] >= 384
    assert "imitation_samples" not in summary  # not redone
    assert latest_checkpoint(run_dir / "checkpoints").name == f"ppo_{summary['ppo_steps']}_steps.zip"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_training_on_cuda(tmp_path):
    config = smoke_config(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["imitation"]["episodes"] = 2
    config.write_text(yaml.safe_dump(data))
    run_train("--config", str(config), "--device", "cuda")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["device"] == "cuda" and summary["ppo_steps"] >= data["total_timesteps"]
    assert np.isfinite(summary["final_eval"]["mean_vs_greedy"])
