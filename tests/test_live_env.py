"""GpuClusterLive-v0: the rules as masks, rewards that add up to the day, seeding."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import gpu_env  # noqa: F401  (registers the environments)
from agents.live.anticipate import LIVE_FORECAST, AnticipatingPlanner
from agents.live.forecast import NoiseModel
from agents.live.runtimes import draw_runtimes
from agents.live_gym.live_env import TRAIN_SEEDS, VALIDATION_SEEDS, GpuClusterLiveEnv, allowed, slot_rewards
from agents.live_gym.live_policy import HEADROOM, MAX_STARTS, action_nvec, decide_action, masked_argmax, view
from agents.simulator.simulation import realized_day, rolling
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
    base = AnticipatingPlanner(arrivals=None, runtimes=None, errors=None)  # nothing to sample: its base decision
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
    from lab.drawn_history import history_seeds

    assert set(TRAIN_SEEDS).isdisjoint(VALIDATION_SEEDS)
    largest_past_day = max(history_seeds(99_999, 100))
    assert largest_past_day < min(TRAIN_SEEDS) and max(TRAIN_SEEDS) < min(VALIDATION_SEEDS)


# ----------------------------------------------------------------------------- acting under the mask


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
