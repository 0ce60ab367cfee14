"""GpuCluster-v0 with actions="list": the checker, rewards against the objective, stepping an order against the
decoder, forbidden actions, the mask against the occupancy grid, the entry point and its argument checks."""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_env  # noqa: F401  (registers GpuCluster-v0)
from gpu_env.env import GpuClusterEnv
from gpu_env.generators import FAMILIES, generate
from gpu_env.list_env import DYNAMIC_FEATURES, GpuClusterListEnv, InvalidListActionError, make_env
from gpu_env.listsched import MODES, ListInstance, decode
from gpu_env.metrics import compute_metrics
from gpu_env.objective import ramp_floors
from gpu_env.occupancy import Occupancy
from gpu_env.scenario import Scenario
from gpu_env.validation import validate
from tests.conftest import make_scenario

families = st.sampled_from(sorted(FAMILIES))
seeds = st.integers(0, 10_000)
sizes = st.sampled_from((8, 16))


def quiet(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def list_env(sc: Scenario, **kwargs: Any) -> GpuClusterListEnv:
    env = gym.make("GpuCluster-v0", scenario=sc, actions="list", **kwargs).unwrapped
    assert isinstance(env, GpuClusterListEnv)
    return env


def pending(sc: Scenario) -> list[int]:
    return [i for i, job in enumerate(sc.jobs) if job.running_on is None]


def placed(env: GpuClusterListEnv) -> dict[str, tuple[int, tuple[int, ...]]]:
    return {p.job: (p.start, p.gpus) for p in env.plan().placements}


def reference_mask(env: GpuClusterListEnv, decided: set[int]) -> np.ndarray:
    """The mask by its definition: each undecided job that :meth:`Occupancy.feasible` allows somewhere with the
    plan so far on the grid and the real-time curves at their ramp floors."""
    sc = env.scenario
    assert sc is not None
    grid = Occupancy(sc)
    for p in env.plan().placements:
        grid.place(sc.job_index(p.job), p.start, p.gpus[0])
    grid.curves = ramp_floors(sc)
    out = np.zeros(env.max_jobs, dtype=np.bool_)
    for row, j in enumerate(pending(sc)):
        out[row] = j not in decided and bool(grid.feasible(sc.jobs[j]).any())
    return out


def run_order(env: GpuClusterListEnv, order: list[int]) -> tuple[float, int]:
    """Step through ``order``: at each step the first job of it that the mask allows. Returns (return, steps)."""
    sc = env.scenario
    assert sc is not None
    rows = {j: row for row, j in enumerate(pending(sc))}
    total, steps, terminated = 0.0, 0, False
    while not terminated:
        mask = env.action_masks()
        action = next(rows[j] for j in order if mask[rows[j]])
        _, reward, terminated, truncated, info = env.step(action)
        assert not truncated and "invalid_action" not in info
        total += reward
        steps += 1
    return total, steps


# ----------------------------------------------------------------------------- the checker


@pytest.mark.parametrize("trades", sorted(MODES))
@pytest.mark.parametrize("family", ["mixed-control", "batch-fragmentation", "realtime-diurnal"])
def test_gymnasium_check_env(trades: str, family: str):
    from gymnasium.utils.env_checker import check_env

    env = list_env(generate(family, 0, gpus=16), trades=trades, max_jobs=40)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checker's warnings are failures here, but for the unbounded features
        warnings.filterwarnings("ignore", message=".*Box observation space m.*")
        check_env(env, skip_render_check=True)


def test_check_env_on_a_sampler():
    from gymnasium.utils.env_checker import check_env

    env = gym.make("GpuCluster-v0", scenario=["mixed-control", "training-heavy"], actions="list").unwrapped
    assert isinstance(env, GpuClusterListEnv)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Box observation space m.*")
        check_env(env, skip_render_check=True)


def test_observation_layout_and_determinism():
    sc = generate("mixed-control", 2, gpus=16)
    a, b = list_env(sc, max_jobs=30), list_env(sc, max_jobs=30)
    obs_a, info_a = a.reset(seed=3)
    obs_b, _ = b.reset(seed=3)
    n = len(pending(sc))
    assert obs_a["jobs"].shape[0] == 30 and obs_a["action_mask"].shape == (30,)
    assert not obs_a["action_mask"][n:].any() and not obs_a["jobs"][n:].any()  # padding rows
    assert np.array_equal(obs_a["action_mask"], info_a["action_mask"].astype(np.int8))
    fits = obs_a["jobs"][:n, -len(DYNAMIC_FEATURES) + DYNAMIC_FEATURES.index("fits")]
    assert np.array_equal(fits, obs_a["action_mask"][:n])
    rng = np.random.default_rng(0)
    done = False
    while not done:
        action = int(rng.choice(np.flatnonzero(a.action_masks())))
        obs_a, r_a, done, _, _ = a.step(action)
        obs_b, r_b, _, _, _ = b.step(action)
        assert r_a == r_b
        for key in obs_a:
            assert np.array_equal(obs_a[key], obs_b[key])
    assert a.plan().placements == b.plan().placements


# ----------------------------------------------------------------------------- rewards and plans


@quiet(25)
@given(family=families, seed=seeds, gpus=sizes, trades=st.sampled_from(sorted(MODES)), policy=seeds)
def test_rewards_add_up_to_the_objective(family: str, seed: int, gpus: int, trades: str, policy: int):
    sc = generate(family, seed, gpus=gpus)
    env = list_env(sc, trades=trades)
    rng = np.random.default_rng(policy)
    _, info = env.reset(seed=seed)
    total, terminated, steps = 0.0, False, 0
    while not terminated:
        mask = env.action_masks()
        assert mask.any(), "every action masked before the episode ended"
        assert np.array_equal(mask, info["action_mask"])
        _, reward, terminated, truncated, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        assert not truncated and "invalid_action" not in info
        total += reward
        steps += 1
        plan = env.plan()
        assert validate(sc, plan) == []  # valid at every step
        assert info["objective"] == pytest.approx(compute_metrics(sc, plan).objective, rel=1e-9, abs=1e-6)
    assert steps <= len(pending(sc))
    objective = compute_metrics(sc, env.plan()).objective
    assert total == pytest.approx(objective / info["reward_scale"], rel=1e-9, abs=1e-9)
    assert info["reward_scale"] == pytest.approx(sc.gpus * sc.slots * max(job.weight for job in sc.jobs))


@quiet(25)
@given(family=families, seed=seeds, gpus=sizes, trades=st.sampled_from(sorted(MODES)), data=st.data())
def test_stepping_an_order_is_decoding_it(family: str, seed: int, gpus: int, trades: str, data: st.DataObject):
    # Exact: a job the mask forbids has no start even with the curves at their floors, and the grid only fills, so
    # it never fits again; its turn in the decoder (first pass, or the second one with trades="after") places
    # nothing either. So skipping it, as the stepped order does, changes nothing.
    sc = generate(family, seed, gpus=gpus)
    order = data.draw(st.permutations(pending(sc)), label="order")
    env = list_env(sc, trades=trades)
    env.reset(seed=0)
    total, _ = run_order(env, order)
    dec = decode(ListInstance.build(sc), np.array([order]), np.array([MODES[trades]]))
    assert placed(env) == {p.job: (p.start, p.gpus) for p in dec.plan(0, sc, "list").placements}
    assert env.plan().curves == dec.plan(0, sc, "list").curves
    assert total * env.reward_scale == pytest.approx(dec.objective[0], rel=1e-9, abs=1e-6)
    assert compute_metrics(sc, env.plan()).objective == pytest.approx(dec.objective[0], rel=1e-6, abs=1e-6)


def test_a_job_whose_turn_places_nothing_is_dropped():
    # One app holds both GPUs (demand 2, floor 0): job A fits only by taking its capacity, and the penalty (5 per
    # GPU-slot) beats A's value (2). Its turn places nothing; with trades off the mask still allowed it (block free,
    # room above the floors), then drops it.
    sc = make_scenario(
        cluster={"gpus": 2, "node_size": 2},
        horizon={"slots": 2},
        realtime=[{"name": "chat", "demand": [2, 2], "ramp": 2, "initial": 2, "penalty": 5}],
        jobs=[{"id": "A", "type": "training", "gpus": 2, "duration": 1, "priority": 1}],
    )
    for trades in MODES:
        env = list_env(sc, trades=trades)
        obs, _ = env.reset(seed=0)
        assert obs["action_mask"].tolist() == [1]
        _, reward, terminated, _, _ = env.step(0)
        assert terminated and reward == 0.0 and env.plan().placements == []
        assert env.action_masks().tolist() == [False]


# ----------------------------------------------------------------------------- forbidden actions


def test_forbidden_actions_are_ignored_or_raise():
    sc = generate("mixed-control", 1, gpus=16)
    n = len(pending(sc))
    env = list_env(sc, max_jobs=n + 3)
    obs, _ = env.reset(seed=0)
    first = int(np.flatnonzero(env.action_masks())[0])
    obs, _, _, _, _ = env.step(first)
    before = (env.plan().placements, env.plan().curves, env.live.money.copy())
    for action in (first, n, n + 2):  # decided, and padding rows
        again, reward, terminated, truncated, info = env.step(action)
        assert reward == 0.0 and not terminated and not truncated
        assert info.get("invalid_action")
        for key in obs:
            assert np.array_equal(again[key], obs[key])
        assert (env.plan().placements, env.plan().curves) == before[:2]
        assert np.array_equal(env.live.money, before[2])
    strict = list_env(sc, max_jobs=n + 3, invalid_action="raise")
    strict.reset(seed=0)
    strict.step(first)
    for action in (first, n):
        with pytest.raises(InvalidListActionError, match=f"action {action}"):
            strict.step(action)
    # An allowed action still works after a refused one, and the episode ends as the ignoring one does.
    rest = [j for j in pending(sc) if j != pending(sc)[first]]
    run_order(env, rest)
    run_order(strict, rest)
    assert env.plan().placements == strict.plan().placements


def test_step_before_reset_raises():
    env = GpuClusterListEnv(generate("mixed-control", 0, gpus=8))
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


# ----------------------------------------------------------------------------- the mask


@quiet(25)
@given(family=families, seed=seeds, gpus=sizes, trades=st.sampled_from(sorted(MODES)), policy=seeds)
def test_mask_allows_exactly_the_jobs_that_fit_above_the_floors(
    family: str, seed: int, gpus: int, trades: str, policy: int
):
    sc = generate(family, seed, gpus=gpus)
    env = list_env(sc, trades=trades, max_jobs=len(pending(sc)) + 2)
    env.reset(seed=0)
    rng = np.random.default_rng(policy)
    rows = pending(sc)
    decided: set[int] = set()
    terminated = False
    while True:
        mask = env.action_masks()
        assert np.array_equal(mask, reference_mask(env, decided))
        if terminated:
            break
        row = int(rng.choice(np.flatnonzero(mask)))
        decided.add(rows[row])
        _, _, terminated, _, _ = env.step(row)
    assert not env.action_masks().any()


def test_mask_on_a_hand_made_state():
    # 2 GPUs, 3 slots; an app whose floor is 1 GPU in slot 0 (initial 2, ramp 1); job B (2 GPUs, 1 slot) cannot start
    # at 0 however the app is served, only from slot 1; C (1 GPU, 3 slots) only at 0.
    sc = make_scenario(
        cluster={"gpus": 2, "node_size": 2},
        horizon={"slots": 3},
        realtime=[{"name": "chat", "demand": [0, 0, 0], "ramp": 1, "initial": 2, "penalty": 1}],
        jobs=[
            {"id": "B", "type": "training", "gpus": 2, "duration": 1, "priority": 1},
            {"id": "C", "type": "training", "gpus": 1, "duration": 3, "priority": 1},
        ],
    )
    env = list_env(sc)
    env.reset(seed=0)
    assert env.action_masks().tolist() == [True, True]
    env.step(1)  # C at slot 0 on GPU 0 (the app's floor takes the other GPU in slot 0)
    assert placed(env) == {"C": (0, (0,))}
    assert env.action_masks().tolist() == [False, False]  # B needs both GPUs, C holds one in every slot


# ----------------------------------------------------------------------------- the entry point and its arguments


def test_entry_point_dispatches():
    fit = gym.make("GpuCluster-v0", scenario="mixed-control")
    assert isinstance(fit.unwrapped, GpuClusterEnv)
    listed = gym.make("GpuCluster-v0", scenario="mixed-control", actions="list")
    assert isinstance(listed.unwrapped, GpuClusterListEnv)
    assert isinstance(make_env(generate("mixed-control", 0, gpus=8), actions="list"), GpuClusterListEnv)
    assert isinstance(make_env(generate("mixed-control", 0, gpus=8), actions="block"), GpuClusterEnv)
    obs, _ = listed.reset(seed=0)
    assert listed.observation_space.contains(obs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"trades": "x"}, "trades"),
        ({"max_jobs": 0}, "max_jobs"),
        ({"max_jobs": -3}, "max_jobs"),
        ({"invalid_action": "warn"}, "invalid_action"),
        ({"reward_scale": 0.0}, "reward_scale"),
        ({"render_mode": "human"}, "render_mode"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, Any], field: str):
    with pytest.raises(ValueError, match=field):
        gym.make("GpuCluster-v0", scenario=generate("mixed-control", 0, gpus=8), actions="list", **kwargs)


def test_more_jobs_than_max_jobs():
    small, large = generate("mixed-control", 0, gpus=8), generate("mixed-control", 0, gpus=16)
    env = list_env(small)
    assert env.max_jobs == len(pending(small))
    with pytest.raises(ValueError, match="max_jobs"):
        env.reset(seed=0, options={"scenario": large})
    with pytest.raises(ValueError, match="max_jobs"):
        list_env(large, max_jobs=3).reset(seed=0)


def test_options_scenario_plans_that_scenario_once():
    small, other = generate("mixed-control", 0, gpus=8), generate("training-heavy", 1, gpus=8)
    env = list_env(small, max_jobs=30)
    env.reset(seed=0, options={"scenario": other})
    assert env.scenario is other
    env.reset(seed=0)
    assert env.scenario is small


def test_render_ansi():
    sc = generate("mixed-control", 0, gpus=8)
    env = list_env(sc, render_mode="ansi")
    env.reset(seed=0)
    env.step(int(np.flatnonzero(env.action_masks())[0]))
    text = env.render()
    assert isinstance(text, str) and text
    assert list_env(replace(sc)).render() is None


def test_an_episode_with_nothing_allowed_ends_at_its_first_step():
    """An app whose ramp floor holds the only GPU at the only slot the job may start: nothing fits."""
    from gpu_env.scenario import App, Job, JobType, Scenario

    sc = Scenario(
        name="blocked",
        gpus=2,
        slots=2,
        node_size=2,
        slot_minutes=60.0,
        decay=1.0,
        apps=(App(name="rt", demand=(1, 0), initial=2, ramp=1, penalty=5.0),),
        jobs=(Job(id="a", type=JobType.TRAINING, gpus=2, duration=1, deadline=1),),
    )
    env = GpuClusterListEnv(sc)
    obs, _ = env.reset(seed=0)
    assert not obs["action_mask"].any()
    _, reward, terminated, truncated, info = env.step(0)
    assert terminated and not truncated
    assert reward * info["reward_scale"] == pytest.approx(compute_metrics(sc, env.plan()).objective)
