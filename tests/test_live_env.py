"""GpuClusterLive-v0 and the live-ppo planner: the rules as masks, rewards that add up to the day, seeding."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import gpu_env  # noqa: F401  (registers the environments)
from agents.learned.live_export import actor_logits
from agents.policy_files import PolicyError
from agents.rolling.anticipate import LIVE_FORECAST, AnticipatingPlanner, live_planner
from agents.rolling.forecast import NoiseModel
from agents.rolling.live_env import TRAIN_SEEDS, VALIDATION_SEEDS, GpuClusterLiveEnv, allowed, slot_rewards
from agents.rolling.live_policy import HEADROOM, MAX_STARTS, action_nvec, decide_action, view
from agents.rolling.live_ppo import POLICY, LivePPOPlanner, masked_argmax
from agents.rolling.runtimes import draw_runtimes
from agents.rolling.simulation import realized_day, rolling
from gpu_env.generators import FAMILIES, generate
from gpu_env.validation import validate

DAYS = [
    ("mixed-control", 3, 0.3, "trace"),
    ("realtime-diurnal", 5, 0.3, "exact"),
    ("batch-fragmentation", 2, 0.0, "trace"),
]


def _day(family: str, seed: int, sigma: float, model: str):
    day = generate(family, seed)
    runtimes = draw_runtimes(day, model, seed)
    return day, realized_day(day, NoiseModel(sigma).draw(day, seed), runtimes), runtimes


def _random_masked(env: GpuClusterLiveEnv, rng: np.random.Generator) -> np.ndarray:
    mask, nvec = env.action_masks(), action_nvec()
    offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
    return np.array([rng.choice(np.flatnonzero(mask[o : o + n])) for o, n in zip(offsets, nvec, strict=True)])


def test_the_environment_is_registered_and_passes_gymnasiums_checker() -> None:
    env = gym.make("GpuClusterLive-v0", families=("mixed-control",), baseline=None)
    check_env(env.unwrapped, skip_render_check=True)
    assert env.action_space.nvec.tolist() == [2] * MAX_STARTS + [len(HEADROOM)] * 3


@pytest.mark.parametrize(("family", "seed", "sigma", "model"), DAYS)
def test_the_rewards_of_an_episode_add_up_to_the_executed_days_objective(family, seed, sigma, model) -> None:
    """Random actions under the mask, every slot's plan validated: the rewards sum to the realized objective."""
    env = GpuClusterLiveEnv(baseline=None, check=True)
    env.reset(seed=0, options={"family": family, "seed": seed, "sigma": sigma, "runtime_model": model})
    rng = np.random.default_rng(seed)
    total, done, info = 0.0, False, {}
    while not done:
        _, reward, done, _, info = env.step(_random_masked(env, rng))
        total += reward
    result = info["result"]
    assert total == pytest.approx(info["objective"], rel=1e-9, abs=1e-9)
    assert validate(result.actual, result.executed) == []
    assert info["objective"] == result.metrics.objective


def test_against_greedy_the_return_is_the_days_gain_over_rolling_greedy_as_a_share_of_it() -> None:
    env = GpuClusterLiveEnv(baseline="greedy")
    env.reset(seed=0, options={"family": "priority-inversion", "seed": 4, "sigma": 0.3, "runtime_model": "trace"})
    rng = np.random.default_rng(1)
    total, done, info = 0.0, False, {}
    while not done:
        _, reward, done, _, info = env.step(_random_masked(env, rng))
        total += reward
    greedy = info["greedy_objective"]
    assert total == pytest.approx((info["objective"] - greedy) / greedy, rel=1e-9, abs=1e-12)


def test_slot_rewards_of_rolling_greedy_add_up_to_its_objective() -> None:
    day, actual, runtimes = _day("training-heavy", 7, 0.3, "trace")
    sim = rolling(day, "greedy", actual, runtimes=runtimes)
    assert slot_rewards(sim).sum() == pytest.approx(sim.metrics.objective, rel=1e-12)


@dataclass
class _Zeros:
    """A live planner that takes the action of all zeros at every slot."""

    name: str = "zeros"
    base: str = "greedy"
    forecaster: object = LIVE_FORECAST

    def decide(self, state, now, elapsed=None, options=None):
        return decide_action(view(state, now, elapsed), np.zeros(len(action_nvec()), dtype=np.int64))


@pytest.mark.parametrize(("family", "seed", "sigma", "model"), DAYS)
def test_the_action_of_all_zeros_is_the_live_planners_base_decision(family, seed, sigma, model) -> None:
    """Nothing held, no headroom: greedy's plan with the idle GPUs given to the apps, as anticipate's base is."""
    day, actual, runtimes = _day(family, seed, sigma, model)
    base = AnticipatingPlanner(arrivals=None, runtimes=None, demand=None)  # nothing to sample: its base decision
    ours = rolling(day, _Zeros(), actual, runtimes=runtimes)
    theirs = rolling(day, base, actual, runtimes=runtimes)
    assert ours.executed.placements == theirs.executed.placements
    assert ours.executed.curves == theirs.executed.curves


@settings(max_examples=25, deadline=None)
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    seed=st.integers(0, 10_000),
    actions=st.lists(st.lists(st.integers(0, 3), min_size=11, max_size=11), min_size=24, max_size=24),
)
def test_any_action_gives_a_plan_that_keeps_the_rules(family: str, seed: int, actions: list[list[int]]) -> None:
    """Any action (values the mask forbids are read as 0): every slot's plan passes the validator."""
    env = GpuClusterLiveEnv(families=(family,), baseline=None, check=True)
    env.reset(seed=seed, options={"seed": seed, "sigma": 0.3, "runtime_model": "trace"})
    done, info = False, {}
    for raw in actions:
        if done:
            break
        action = np.minimum(np.array(raw), action_nvec() - 1)
        _, _, done, _, info = env.step(action)
    if done:
        assert validate(info["result"].actual, info["result"].executed) == []


def test_made_without_arguments_a_reset_seeds_the_day() -> None:
    env = gym.make("GpuClusterLive-v0")
    _, info = env.reset(seed=4)
    _, again = gym.make("GpuClusterLive-v0").reset(seed=4)
    about = ("family", "seed", "sigma", "runtime_model")
    assert info["family"] in FAMILIES and info["seed"] in TRAIN_SEEDS
    assert [info[k] for k in about] == [again[k] for k in about]
    assert {tuple(env.reset(seed=s)[1][k] for k in about) for s in range(4)} != {tuple(info[k] for k in about)}


def test_the_info_mask_is_a_tuple_of_int8_masks_and_action_masks_stays_flat() -> None:
    env = GpuClusterLiveEnv(families=("realtime-diurnal",), baseline=None)
    _, info = env.reset(seed=0)
    masks = info["action_mask"]
    assert isinstance(masks, tuple) and [len(m) for m in masks] == action_nvec().tolist()
    assert all(m.dtype == np.int8 for m in masks)
    flat = env.action_masks()
    assert flat.dtype == bool and flat.shape == (int(action_nvec().sum()),)
    np.testing.assert_array_equal(np.concatenate(masks).astype(bool), flat)


@settings(max_examples=6, deadline=None)
@given(family=st.sampled_from(sorted(FAMILIES)), seed=st.integers(0, 10_000))
def test_every_action_sampled_under_the_info_mask_is_legal(family: str, seed: int) -> None:
    """``action_space.sample(mask=info["action_mask"])`` draws only allowed values, to the day's last slot."""
    env = gym.make("GpuClusterLive-v0", families=(family,), baseline=None)
    _, info = env.reset(seed=seed)
    env.action_space.seed(seed)
    done = False
    while not done:
        action = env.action_space.sample(mask=info["action_mask"])
        assert all(info["action_mask"][d][v] == 1 for d, v in enumerate(action))
        decide_action(env.unwrapped._view, action)  # raises on a value the mask forbids
        _, _, done, _, info = env.step(action)
        assert info["ignored"] == 0
    assert validate(env.unwrapped.actual, info["result"].executed) == []


def test_a_value_the_mask_forbids_is_read_as_zero_and_counted() -> None:
    env = GpuClusterLiveEnv(baseline=None)
    env.reset(seed=0, options={"family": "uniform-priority", "seed": 1, "sigma": 0.0, "runtime_model": "exact"})
    slot = env._view
    action = np.ones(len(action_nvec()), dtype=np.int64)
    cleaned, ignored = allowed(slot, action)
    starts, apps = len(slot.starts), len(slot.state.apps)
    assert ignored == (MAX_STARTS - starts) + (3 - apps)
    assert cleaned[:starts].tolist() == [1] * starts and cleaned[starts:MAX_STARTS].tolist() == [0] * (
        MAX_STARTS - starts
    )
    with pytest.raises(ValueError, match="not allowed by the mask"):
        decide_action(slot, action)


def test_the_same_seed_draws_the_same_days_and_the_same_rewards() -> None:
    def episode(seed: int) -> list[float]:
        env = GpuClusterLiveEnv(baseline="greedy")
        env.reset(seed=seed)
        rng = np.random.default_rng(0)
        rewards, done = [], False
        while not done:
            _, r, done, _, info = env.step(_random_masked(env, rng))
            rewards.append(r)
        return [info["family"], info["seed"], info["sigma"], info["runtime_model"], *rewards]

    assert episode(11) == episode(11)
    assert episode(11) != episode(12)


def test_training_days_are_never_the_days_the_benchmarks_score() -> None:
    """Played days have seeds below 100,000 (the benchmarks' 70,000 on): neither they nor their past days (the
    history seeds online_benchmark draws for them) are ever a training or a validation day."""
    from agents.rolling.drawn_history import history_seeds

    assert set(TRAIN_SEEDS).isdisjoint(VALIDATION_SEEDS)
    largest_past_day = max(history_seeds(99_999, 100))
    assert largest_past_day < min(TRAIN_SEEDS) and max(TRAIN_SEEDS) < min(VALIDATION_SEEDS)


# ----------------------------------------------------------------------------- the live-ppo planner


def test_masked_argmax_takes_the_largest_allowed_value_of_each_dimension() -> None:
    nvec = action_nvec()
    logits = np.zeros(int(nvec.sum()))
    logits[1] = 5.0  # hold the first start ...
    mask = np.ones(int(nvec.sum()), dtype=bool)
    mask[3] = False  # ... the second start's hold is forbidden, however likely
    logits[3] = 9.0
    logits[2 * MAX_STARTS + 2] = 1.0  # the first app's headroom level 2
    action = masked_argmax(logits, mask)
    assert action[0] == 1 and action[1] == 0 and action[MAX_STARTS] == 2


@pytest.mark.skipif(not POLICY.is_file(), reason="no shipped live policy (agents/policies/live.onnx)")
def test_the_shipped_live_policy_plans_a_day_by_name_and_keeps_the_rules() -> None:
    planner = live_planner("live-ppo")
    day, actual, runtimes = _day("mixed-control", 70_001, 0.3, "trace")
    sim = rolling(day, planner, actual, runtimes=runtimes)  # validates every slot's plan
    assert validate(actual, sim.executed) == [] and len(planner.policy_ms) == day.slots
    again = rolling(day, live_planner("live-ppo"), actual, runtimes=runtimes)
    assert again.metrics.objective == sim.metrics.objective


def test_a_missing_or_mismatched_policy_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="live policy file not found"):
        LivePPOPlanner.load(tmp_path / "none.onnx")
    onnx = tmp_path / "p.onnx"
    onnx.write_bytes(b"not onnx")
    (tmp_path / "p.json").write_text(json.dumps({"format": "gpualloc-live-policy/1", "spec": {"observation_size": 3}}))
    with pytest.raises(PolicyError, match=r"spec\.observation_size': the policy was trained for 3"):
        LivePPOPlanner.load(onnx)
    (tmp_path / "p.json").write_text("{")
    with pytest.raises(PolicyError, match="not a readable JSON policy card"):
        LivePPOPlanner.load(onnx)


def test_the_experts_decision_becomes_the_action_that_stands_for_it() -> None:
    """anticipate's chosen candidate as the live action: its holds as hold bits, its headroom as every app's level."""
    from dataclasses import replace

    from train_live import expert_action

    env = GpuClusterLiveEnv(baseline=None)
    env.reset(seed=0, options={"family": "mixed-control", "seed": 3, "sigma": 0.3, "runtime_model": "trace"})
    slot = env._view
    while len(slot.starts) < 2:  # a slot with two start-now jobs
        env.step(np.zeros(len(action_nvec()), dtype=np.int64))
        slot = env._view
    base = decide_action(slot, np.zeros(len(action_nvec()), dtype=np.int64))
    first, second = slot.starts[0].job, slot.starts[1].job
    assert expert_action(slot, base).tolist() == [0] * len(action_nvec())
    held = expert_action(slot, replace(base, chosen=f"holding {second}"))
    assert held[:2].tolist() == [0, 1] and held[2:].sum() == 0
    every = expert_action(slot, replace(base, chosen="holding all"))
    assert every[: len(slot.starts)].tolist() == [1] * len(slot.starts)
    level = expert_action(slot, replace(base, chosen="headroom 2"))
    assert level[MAX_STARTS : MAX_STARTS + len(slot.state.apps)].tolist() == [HEADROOM.index(2.0)] * len(
        slot.state.apps
    )
    assert first != second


def test_an_exported_live_policy_round_trips_into_a_new_model(tmp_path: Path) -> None:
    """export() then train_live.init_actor(): the new model's actor gives the same logits as the exported file."""
    torch = pytest.importorskip("torch")
    sb3_contrib = pytest.importorskip("sb3_contrib")
    from agents.learned.live_export import export
    from train_live import init_actor

    env = GpuClusterLiveEnv(families=("mixed-control",), baseline=None)
    first = sb3_contrib.MaskablePPO("MlpPolicy", env, seed=0, device="cpu")
    with torch.no_grad():  # distinct biases (fresh ones are all zero, and the exporter merges equal constants)
        for name, value in first.policy.named_parameters():
            if name.endswith("bias"):
                value.uniform_(-0.1, 0.1)
    export(first.policy, tmp_path / "p.onnx", {"note": "test"})
    second = sb3_contrib.MaskablePPO("MlpPolicy", env, seed=1, device="cpu")
    init_actor(second.policy, tmp_path / "p.onnx")
    obs, _ = env.reset(seed=0, options={"seed": 1, "sigma": 0.3, "runtime_model": "trace"})
    x = torch.as_tensor(obs).reshape(1, -1)

    def logits(policy):
        with torch.no_grad():
            return actor_logits(policy, x).numpy()

    assert np.allclose(logits(first.policy), logits(second.policy))
    planner = LivePPOPlanner.load(tmp_path / "p.onnx")
    assert planner.card["note"] == "test"
    (onnx_logits,) = planner._session.run(None, {"observation": obs.reshape(1, -1)})
    assert np.allclose(onnx_logits, logits(first.policy), atol=1e-5)


def test_the_cli_names_a_missing_live_policy_in_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    """``gpualloc simulate --scheduler live-ppo`` without a policy file: one line naming the file, exit 2."""
    from agents import cli
    from agents.rolling import live_ppo

    monkeypatch.setattr(live_ppo, "POLICY", tmp_path / "none.onnx")
    scenario = Path(__file__).resolve().parents[1] / "configs" / "scenarios" / "mixed-control.yaml"
    code = cli.main(["simulate", str(scenario), "--scheduler", "live-ppo"])
    err = capsys.readouterr().err
    assert code == 2 and "--scheduler live-ppo:" in err and "none.onnx: live policy file not found" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
