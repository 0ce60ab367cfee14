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
from tests.conftest import HANG_GUARD_S  # noqa: E402

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
        assert cfg.total_timesteps + cfg.rl.steps > 0 and cfg.scenarios.families


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"n_envs": "four"}, "field n_envs: expected an integer"),
        ({"ppo": {"learning_rate": "fast"}}, "field ppo.learning_rate: expected a number"),
        ({"ppo": {"gama": 0.9}}, "unknown field ppo.gama"),
        ({"colour": "red"}, "unknown field colour"),
        ({"scenarios": {"families": {"nope": 1}}}, "field scenarios.families: unknown family 'nope'"),
        ({"scenarios": {"families": {"training-heavy": 1}, "gpus": [8]}}, "field scenarios.gpus: expected"),
        ({"total_timesteps": -1}, "field total_timesteps: expected 0 or more"),
        ({"rl": {"steps": 10, "rollouts": 1}}, "field rl.rollouts: the shared baseline needs at least 2 sampled"),
        ({"init_from": "no/such.onnx"}, "field init_from: no such file"),
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
        [sys.executable, "train.py", "--config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
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
    result = subprocess.run(
        [sys.executable, "train.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S
    )
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
    expected |= {"eval/training-heavy/vs_greedy", "eval/mixed-control/vs_greedy", "rl/loss", "rl/mean_return"}
    assert expected <= tags


def test_smoke_run_history_has_every_phase(smoke_run):
    _, run_dir, _ = smoke_run
    card = json.loads((run_dir / "policy.json").read_text())
    phases = [entry["phase"] for entry in card["training"]["history"]]
    assert card["phases"] == ["imitation", "dagger", "ppo", "rl"]
    assert phases[0] == "imitation" and phases[-1] == "rl" and "dagger" in phases and "ppo" in phases
    assert all("training-heavy/vs_greedy" in entry for entry in card["training"]["history"])
    assert card["training"]["rl_steps"] >= 300


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


def test_rl_warm_started_from_an_exported_policy(smoke_run, tmp_path):
    """init_from: no imitation and no MaskablePPO, the RL phase starts from the file's weights and history."""
    _, run_dir, _ = smoke_run
    config = smoke_config(tmp_path)
    data = yaml.safe_load(config.read_text())
    data.update(init_from=str(run_dir / "policy.onnx"), total_timesteps=0)
    config.write_text(yaml.safe_dump(data))
    run_train("--config", str(config), "--device", "cpu")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "imitation_samples" not in summary and "ppo_steps" not in summary
    assert summary["init_from"]["file"].endswith("policy.onnx")
    sources = {(e["phase"], e.get("source")) for e in summary["history"]}
    assert ("imitation", "init_from card") in sources and ("rl", None) in sources
    # the RL phase's first evaluation is of the file's policy: the smoke run's last (best) RL evaluation
    first = next(e for e in summary["history"] if e["phase"] == "rl" and "source" not in e)
    card = json.loads((run_dir / "policy.json").read_text())
    assert first["mean_vs_greedy"] == pytest.approx(card["evaluation"]["mean_vs_greedy"], abs=1e-9)


# ----------------------------------------------------------------------------- the RL phase's pieces


def test_pomo_advantage_is_zero_mean_per_instance():
    from agents.learned.rl import pomo_advantages

    # two instances, K = 3: returns 1, 2, 6 (mean 3) and 10, 10, 10 (mean 10)
    adv = pomo_advantages(np.array([1.0, 2.0, 6.0, 10.0, 10.0, 10.0]), rollouts=3)
    assert adv.tolist() == [-2.0, -1.0, 3.0, 0.0, 0.0, 0.0]
    rng = np.random.default_rng(0)
    adv = pomo_advantages(rng.normal(size=8 * 5), rollouts=5).reshape(8, 5)
    assert np.abs(adv.sum(axis=1)).max() < 1e-12


def test_greedy_first_rollout_is_out_of_the_baseline_and_the_reference_for_self_imitation():
    from agents.learned.rl import sampled_advantages, self_imitation_targets

    # instance 0: greedy decoding 5, samples 1, 2, 6 (mean 3); instance 1: greedy 9, samples 4, 8, 3 (mean 5)
    returns = np.array([5.0, 1.0, 2.0, 6.0, 9.0, 4.0, 8.0, 3.0])
    adv, sampled = sampled_advantages(returns, rollouts=4, fixed=1)
    assert adv.tolist() == [0.0, -2.0, -1.0, 3.0, 0.0, -1.0, 3.0, -2.0]
    assert sampled.tolist() == [False, True, True, True, False, True, True, True]
    # the best sample beats the greedy decoding on instance 0 only (6 > 5; 8 < 9)
    assert self_imitation_targets(returns, 4, fixed=1).tolist() == [0, 0, 0, 1, 0, 0, 0, 0]
    # without a greedy rollout the reference is the mean of all K: the best of each instance (6 > 3.5, 9 > 6)
    assert self_imitation_targets(returns, 4, fixed=0).tolist() == [0, 0, 0, 1, 1, 0, 0, 0]


def test_self_imitation_per_episode_weighs_episodes_alike():
    from agents.learned.rl import self_imitation_weights

    imitate = torch.tensor([True, True, False])
    episode = torch.tensor([0, 0, 0, 1, 2, 2])  # episode 0 took 3 decisions, 1 took 1, 2 (not imitated) took 2
    assert self_imitation_weights(imitate, episode, per_episode=False).tolist() == [1, 1, 1, 1, 0, 0]
    # 4 imitated decisions over 2 imitated episodes: each episode weighs 2 in all (2/3 per decision of episode 0)
    w = self_imitation_weights(imitate, episode, per_episode=True)
    assert w[:3].tolist() == pytest.approx([2 / 3] * 3) and w[3].item() == pytest.approx(2.0)
    assert w[:4].mean().item() == pytest.approx(1.0) and w[4:].tolist() == [0, 0]


def _onnx_and_torch_logits(onnx_file: Path, obs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    import onnxruntime as ort

    from agents.learned.network import INPUTS
    from agents.learned.rl import load_onnx_weights

    policy = load_onnx_weights(onnx_file)
    with torch.no_grad():
        expected = policy(*(torch.as_tensor(obs[k]) for k in INPUTS))[0].numpy()
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    got = session.run(["logits"], {n: obs[k] for n, k in zip(names, INPUTS, strict=True)})[0]
    return expected, got


def test_warm_start_from_the_shipped_onnx_gives_its_logits():
    """The shipped files' initializers loaded into torch: the same logits as onnxruntime, within 1e-5 (relative).

    The weights load bit for bit (the round-trip test below); what is left is float32 rounding in two different
    kernels, which grows with the logits' size (1.3e-5 absolute on a logit of 26 for the RL policy: 1.3e-6 relative).
    """
    from agents.ppo import DEFAULT_POLICY, load_policy
    from gpu_env.batch import BatchEngine, Sizes
    from gpu_env.batch.observe import observe

    limits = load_policy(DEFAULT_POLICY).limits
    scenarios = [generate(f, 3) for f in ("training-heavy", "realtime-diurnal", "batch-fragmentation")]
    engine = BatchEngine(len(scenarios), Sizes.from_limits(limits, 2 * limits.max_slots))
    engine.reset(scenarios)
    rng = np.random.default_rng(0)
    for _ in range(5):  # states along a random masked trajectory, not only the start
        mask = engine.action_masks()
        engine.step(np.array([rng.choice(np.flatnonzero(m)) if m.any() else 0 for m in mask]))
    obs = observe(engine)
    for onnx_file in (DEFAULT_POLICY, ROOT / "configs" / "train" / "init" / "dagger.onnx"):
        expected, got = _onnx_and_torch_logits(onnx_file, obs)
        assert expected.shape == got.shape == (3, engine.n_actions)
        assert np.all(np.abs(expected - got) <= 1e-5 * np.maximum(1.0, np.abs(got))), onnx_file.name


def test_warm_start_round_trips_an_exported_policy(tmp_path):
    """A small random policy exported, then loaded back: the same logits (another hidden size too)."""
    from agents.learned.export import example_inputs, export_policy
    from agents.learned.network import INPUTS
    from agents.learned.rl import ActorCritic, load_onnx_weights
    from gpu_env.observation import Limits

    torch.manual_seed(1)
    policy = ActorCritic(hidden=16, value_features=8)
    limits = Limits(max_gpus=16, max_jobs=6, max_slots=8, max_apps=1)
    export_policy(policy, tmp_path / "p.onnx", limits)
    loaded = load_onnx_weights(tmp_path / "p.onnx")
    for key, value in policy.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
    obs = {k: a.numpy() for k, a in zip(INPUTS, example_inputs(limits, batch=4), strict=True)}
    expected, got = _onnx_and_torch_logits(tmp_path / "p.onnx", obs)
    assert np.abs(expected - got).max() < 1e-5


def test_load_onnx_weights_rejects_another_network(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from agents.learned.rl import load_onnx_weights

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "other",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [
            helper.make_tensor("net.job_embed.0.bias", TensorProto.FLOAT, [2], [0.0, 0.0]),
            helper.make_tensor("value_net.weight", TensorProto.FLOAT, [1, 2], [0.0, 0.0]),
        ],
    )
    onnx.save(helper.make_model(graph), tmp_path / "other.onnx")
    with pytest.raises(ValueError, match="weights do not match the job scorer"):
        load_onnx_weights(tmp_path / "other.onnx")


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
