"""The learned fast mode: export round trip, valid plans on every family, no torch when planning, clear errors."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agents import ppo
from agents.cli import main as cli_main
from agents.options import Guard, PlanOptions
from agents.registry import SCHEDULERS, run_scheduler
from gpu_env.episode import ActionLayout, ActionMode, Episode
from gpu_env.generators import FAMILIES, generate
from gpu_env.metrics import compute_metrics
from gpu_env.observation import Encoder
from gpu_env.scenario import save_scenario
from gpu_env.validation import validate
from tests.conftest import HANG_GUARD_S, make_scenario

ROOT = Path(__file__).resolve().parent.parent
torch = pytest.importorskip("torch")
pytest.importorskip("sb3_contrib")


def tiny_model(families=("training-heavy", "mixed-control", "scale-64x30"), hidden: int = 16):
    """An untrained job scorer whose logits are spread out (no near-ties between actions)."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from agents.learned.network import JobScorerPolicy
    from gpu_env.env import GpuClusterEnv

    torch.manual_seed(0)
    env = GpuClusterEnv({"families": list(families)})
    model = MaskablePPO(
        JobScorerPolicy,
        DummyVecEnv([lambda: env]),
        n_steps=32,
        batch_size=32,
        policy_kwargs={"hidden": hidden, "value_features": hidden},
        device="cpu",
        seed=0,
    )
    net = model.policy.features_extractor.net
    with torch.no_grad():
        for head in (net.job_head, net.advance_head[-1]):
            head.weight.normal_(0.0, 1.0)
    return model, env.limits


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(model, limits, onnx path) of a tiny untrained policy exported once for the module."""
    from agents.learned.export import export_policy

    model, limits = tiny_model()
    path = tmp_path_factory.mktemp("policy") / "tiny.onnx"
    export_policy(model.policy, path, limits, config={"test": True}, seed=0, steps=0)
    return model, limits, path


def test_registered_after_greedy():
    names = list(SCHEDULERS)
    assert names.index("ppo") == names.index("greedy") + 1


def test_card_records_spec_limits_and_provenance(exported):
    _, limits, path = exported
    card = json.loads(path.with_suffix(".json").read_text())
    assert card["format"] == ppo.CARD_FORMAT
    assert card["observation_spec"] == ppo.observation_spec()
    assert card["limits"]["max_gpus"] == limits.max_gpus
    assert card["seed"] == 0 and card["training_steps"] == 0 and card["config"] == {"test": True}
    assert card["export_check"]["max_logit_difference"] < 1e-4
    assert path.stat().st_size < 2_000_000


def test_onnx_and_torch_choose_the_same_actions(exported):
    """Round trip: masked argmax of the ONNX logits equals SB3's deterministic masked prediction."""
    model, limits, path = exported
    policy = ppo.load_policy(path)
    checked = 0
    for family in ("training-heavy", "mixed-control", "scale-64x30"):
        sc = generate(family, seed=3)
        layout = ActionLayout.make(ActionMode.FIT, limits.max_jobs, limits.max_gpus)
        ep = Episode(sc, layout)
        enc = Encoder(ep, limits, ppo.reward_scale(ep))
        while not ep.done:
            obs = enc.observe()
            mask = obs["action_mask"].astype(bool)
            batch = {k: v[None] for k, v in obs.items()}
            onnx_logits = policy.logits({k: batch[k] for k in ppo.INPUTS})[0]
            onnx_action = int(np.argmax(np.where(mask, onnx_logits, -np.inf)))
            torch_action, _ = model.predict(batch, action_masks=mask[None], deterministic=True)
            assert onnx_action == int(torch_action[0])
            ep.step(onnx_action)
            checked += 1
    assert checked > 30


@pytest.mark.parametrize("family", list(FAMILIES))
def test_plans_validate_on_every_family(exported, family):
    _, _, path = exported
    sc = generate(family, seed=7)
    plan = ppo.plan(sc, PlanOptions(policy=path, samples=3, guard="none"))  # the policy's own plans
    assert plan.scheduler == "ppo" and plan.info["winner"] in range(3)
    assert validate(sc, plan) == []
    # The plan carries its own metrics (SPEC section 3, gpu_env.metrics), and they are those of the winning
    # rollout: the engine's objective of that rollout, the best of the three.
    assert plan.metrics == compute_metrics(sc, plan)
    objectives = plan.info["objectives"]
    assert len(objectives) == 3 and objectives[plan.info["winner"]] == max(objectives)
    assert plan.metrics.objective == pytest.approx(max(objectives), abs=1e-6)
    assert validate(sc, run_scheduler("ppo", sc, PlanOptions(policy=path))) == []


def test_guards_keep_their_baseline_and_no_guard_keeps_the_policy(exported):
    """An untrained policy plans worse than FIFO somewhere; the FIFO guard then returns FIFO's plan,
    the greedy guard greedy's, and no guard the policy's own plan all the same."""
    _, _, path = exported
    fired = {"fifo": 0, "greedy": 0}
    for family in FAMILIES:
        sc = generate(family, seed=11)
        raw = ppo.plan(sc, PlanOptions(policy=path, samples=1, guard=Guard.NONE))
        assert raw.info["winner"] == 0 and raw.info["samples"] == 1 and "guard_objective" not in raw.info
        assert validate(sc, raw) == []
        for guard in ("fifo", "greedy"):
            guarded = ppo.plan(sc, PlanOptions(policy=path, samples=1, guard=guard))
            baseline = run_scheduler(guard, sc)
            assert guarded.metrics.objective == pytest.approx(max(raw.metrics.objective, baseline.metrics.objective))
            assert validate(sc, guarded) == [] and guarded.scheduler == "ppo"
            assert guarded.metrics == compute_metrics(sc, guarded)
            assert guarded.info["guard_objective"] == pytest.approx(baseline.metrics.objective)
            if guarded.info["winner"] == guard:
                assert guarded.placements == baseline.placements
                assert raw.metrics.objective < baseline.metrics.objective  # no guard kept the worse plan: its own
                fired[guard] += 1
            else:
                assert guarded.info["winner"] == 0 and guarded.placements == raw.placements
    assert fired["fifo"] > 0 and fired["greedy"] > fired["fifo"]


def test_metrics_of_a_forced_plan_by_hand(exported):
    """Only inherited work, so every rollout ends with the same plan, whose worth is worked by hand.

    G = 4, T = 4, decay 0.5; ``inh`` holds GPUs 2-3 for slots 0-2 (worth 1 * 2 * (1 + 0.5 + 0.25) = 3.5);
    ``chat`` wants 3, 3, 0, 0 from an initial 3 with ramp 1, but jobs leave only 2 GPUs in slots 0-2, and
    from 2 the ramp comes down to 1 in slot 2 at the least, so the least-shortfall curve is 2, 2, 1, 0:
    shortfall 2, penalty 5 * 2 = 10, objective 3.5 - 10 = -6.5; the GPU reserved in slot 2 serves nothing,
    so utilisation is (6 job GPU-slots + 2 + 2 served) / 16 = 10/16.
    """
    _, _, path = exported
    sc = make_scenario(
        cluster={"gpus": 4, "node_size": 2},
        horizon={"slots": 4, "decay": 0.5},
        realtime=[{"name": "chat", "demand": [3, 3, 0, 0], "ramp": 1, "initial": 3, "penalty": 5}],
        jobs=[{"id": "inh", "type": "batch_inference", "gpus": 2, "duration": 3, "running_on": [2, 3]}],
    )
    plan = ppo.plan(sc, PlanOptions(policy=path, samples=3, guard="none"))
    assert [(p.job, p.start, tuple(p.gpus)) for p in plan.placements] == [("inh", 0, (2, 3))]
    assert plan.curves == {"chat": [2, 2, 1, 0]}
    m = plan.metrics
    assert (m.job_value, m.shortfall, m.objective) == (3.5, 2, -6.5)
    assert m.utilization == 10 / 16 and (m.placed, m.completed, m.jobs) == (1, 1, 1)
    assert plan.info["objectives"] == [-6.5] * 3 and plan.info["winner"] == 0
    assert validate(sc, plan) == []


def test_larger_clusters_and_queues_than_in_training(exported):
    """Dynamic axes: 128 GPUs and 60 jobs (the policy saw at most 64 GPUs and 30 jobs)."""
    _, limits, path = exported
    sc = generate("scale-64x30", seed=1, gpus=128, num_jobs=60)
    assert sc.gpus > limits.max_gpus
    plan = run_scheduler("ppo", sc, PlanOptions(policy=path))
    assert validate(sc, plan) == []
    assert plan.metrics.placed > 0


def test_sampled_rollouts_keep_the_best(exported):
    _, _, path = exported
    sc = generate("mixed-control", seed=2)
    loaded = ppo.load_policy(path)
    one, objectives_one = ppo.rollout(sc, loaded.logits, loaded.limits, samples=1)
    best, objectives = ppo.rollout(sc, loaded.logits, loaded.limits, samples=6, seed=4)
    assert len(objectives) == 6 and objectives[0] == pytest.approx(objectives_one[0])
    assert best.objective == pytest.approx(max(objectives))
    assert best.objective >= one.objective - 1e-9
    _, objectives_again = ppo.rollout(sc, loaded.logits, loaded.limits, samples=6, seed=4)
    assert objectives_again == objectives  # seeded
    assert validate(sc, best.plan()) == []


def test_planning_imports_neither_torch_nor_stable_baselines(exported):
    _, _, path = exported
    code = (
        "import sys\n"
        "from agents.registry import run_scheduler\n"
        "from agents.options import PlanOptions\n"
        "from gpu_env.generators import generate\n"
        f"plan = run_scheduler('ppo', generate('mixed-control', seed=1), PlanOptions(policy={str(path)!r}))\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'stable_baselines3', 'sb3_contrib')]\n"
        "print(plan.metrics.placed, bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _copy(path: Path, folder: Path) -> Path:
    target = folder / path.name
    shutil.copy(path, target)
    shutil.copy(path.with_suffix(".json"), target.with_suffix(".json"))
    return target


def test_mismatched_spec_is_refused(exported, tmp_path):
    path = _copy(exported[2], tmp_path)
    card_file = path.with_suffix(".json")
    card = json.loads(card_file.read_text())
    card["observation_spec"]["features"]["jobs"] = card["observation_spec"]["features"]["jobs"][:-1]
    card_file.write_text(json.dumps(card))
    with pytest.raises(ppo.PolicyError, match=r"observation_spec\.features\.jobs"):
        ppo.load_policy(path)
    card["observation_spec"] = {**ppo.observation_spec(), "env": "GpuCluster-v9"}
    card_file.write_text(json.dumps(card))
    with pytest.raises(ppo.PolicyError, match=r"tiny\.json: field 'observation_spec\.env'"):
        ppo.load_policy(path)


def test_corrupt_or_missing_files_are_refused(exported, tmp_path):
    path = _copy(exported[2], tmp_path)
    path.write_bytes(b"not an onnx model")
    with pytest.raises(ppo.PolicyError, match="not a loadable ONNX policy"):
        ppo.load_policy(path)
    other = tmp_path / "other"
    other.mkdir()
    path = _copy(exported[2], other)
    path.with_suffix(".json").write_text("{not json")
    with pytest.raises(ppo.PolicyError, match="not a readable JSON policy card"):
        ppo.load_policy(path)
    path.with_suffix(".json").unlink()
    with pytest.raises(ppo.PolicyError, match="policy card not found"):
        ppo.load_policy(path)
    with pytest.raises(ppo.PolicyError, match="policy file not found"):
        ppo.load_policy(tmp_path / "nothing.onnx")


def test_cli_reports_a_corrupt_policy_without_traceback(exported, tmp_path, capsys):
    path = _copy(exported[2], tmp_path)
    path.write_bytes(b"\x00garbage")
    scenario = tmp_path / "s.yaml"
    save_scenario(generate("training-heavy", seed=0), scenario)
    code = cli_main(["plan", str(scenario), "-s", "ppo", "--policy", str(path)])
    err = capsys.readouterr().err
    assert code != 0
    assert "--policy" in err and "not a loadable ONNX policy" in err and "Traceback" not in err


def test_shipped_policy_plans_every_benchmark_family():
    card = json.loads(ppo.DEFAULT_POLICY.with_suffix(".json").read_text())
    assert card["observation_spec"] == ppo.observation_spec()
    assert ppo.DEFAULT_POLICY.stat().st_size < 3_000_000
    digest = hashlib.sha256(ppo.DEFAULT_POLICY.read_bytes()).hexdigest()
    for family in FAMILIES:
        sc = generate(family, seed=2026)
        plan = run_scheduler("ppo", sc)
        assert validate(sc, plan) == []
        assert plan.metrics.placed > 0
        # The plan names the policy by file name and content hash, never by a path of this machine.
        assert plan.info["policy"] == {"file": "default.onnx", "sha256": digest}


def test_shipped_policy_was_trained_with_the_documented_config():
    """The shipped card's config is configs/train/rl.yaml (RL from init_from), whose card is default.yaml's run."""
    import dataclasses
    import hashlib

    from agents.learned.config import load_config

    card = json.loads(ppo.DEFAULT_POLICY.with_suffix(".json").read_text())
    config = dataclasses.asdict(load_config(ROOT / "configs" / "train" / "rl.yaml"))
    assert card["config"] == config
    assert card["seed"] == config["seed"] and card["config"]["export"] == "agents/policies/default.onnx"
    assert card["phases"][-1] == "rl" and card["training_steps"] == card["training"]["rl_steps"] > 0
    # The warm start is the file named by init_from, and its card is the run of default.yaml.
    init = ROOT / config["init_from"]
    assert card["training"]["init_from"]["sha256"] == hashlib.sha256(init.read_bytes()).hexdigest()
    init_card = json.loads(init.with_suffix(".json").read_text())
    before = dataclasses.asdict(load_config(ROOT / "configs" / "train" / "default.yaml"))
    # Fields added to the config after that policy was trained (the RL phase, init_from) must keep the phases
    # they control off in default.yaml, so its card's config still describes the run.
    added = {key: before.pop(key) for key in set(before) - set(init_card["config"])}
    assert set(added) <= {"rl", "init_from"}
    assert added.get("rl", {"steps": 0})["steps"] == 0 and added.get("init_from") is None
    # default.yaml now exports where rl.yaml starts from; the run exported to the shipped path of its day
    assert before.pop("export") == config["init_from"]
    assert init_card["config"].pop("export") == "agents/policies/default.onnx"
    assert init_card["config"] == before


def test_full_mode_takes_the_better_hint():
    from agents import full

    sc = generate("training-heavy", seed=0)
    result = full.solve(sc, deterministic_time=0.0)
    greedy = run_scheduler("greedy", sc).metrics.objective
    learned = run_scheduler("ppo", sc, PlanOptions(guard="none")).metrics.objective  # auto: ppo without its guard
    assert result.trace[0].objective == pytest.approx(max(greedy, learned))
    assert result.objective >= max(greedy, learned) - 1e-9
    hint = result.plan.info["hint"]
    assert hint["candidates"] == {"ppo": pytest.approx(learned), "greedy": pytest.approx(greedy)}
    assert hint["scheduler"] == ("ppo" if learned > greedy + 1e-9 else "greedy") and "fallback" not in hint
