"""GpuClusterLive-v0's vector env: sub-days play as the single env, workers change nothing, errors reach the parent."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import gpu_env  # noqa: F401  (registers the environments)
from agents.rolling.live_env import GpuClusterLiveEnv
from agents.rolling.live_policy import OBSERVATION_SIZE, action_nvec, action_offsets
from agents.rolling.live_vector_env import GpuClusterLiveVectorEnv

SMALL = {"families": ("mixed-control",), "sigma": 0.3, "runtime_model": "trace"}


def _random_masked(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One allowed action per row of ``masks``."""
    nvec, offsets = action_nvec(), action_offsets()
    return np.array(
        [[rng.choice(np.flatnonzero(m[o : o + n])) for o, n in zip(offsets, nvec, strict=True)] for m in masks]
    )


def _play(envs: GpuClusterLiveVectorEnv, seed: int, steps: int) -> list[tuple[np.ndarray, ...]]:
    """Reset with ``seed`` and take ``steps`` random masked steps: each call's arrays."""
    rng = np.random.default_rng(seed)
    obs, _ = envs.reset(seed=seed)
    out = [(obs, envs.action_masks())]
    for _ in range(steps):
        obs, rewards, terminated, truncated, info = envs.step(_random_masked(envs.action_masks(), rng))
        out.append((obs, rewards, terminated, truncated, envs.action_masks(), info["slot"], info["ignored"]))
    return out


def test_make_vec_builds_it_with_the_single_envs_spaces_batched() -> None:
    envs = gym.make_vec("GpuClusterLive-v0", num_envs=3, vectorization_mode="vector_entry_point", **SMALL)
    assert isinstance(envs.unwrapped, GpuClusterLiveVectorEnv)
    obs, info = envs.reset(seed=1)
    assert obs.shape == (3, OBSERVATION_SIZE) and obs.dtype == np.float32
    assert envs.action_masks().shape == (3, int(action_nvec().sum())) and envs.action_masks().dtype == bool
    assert envs.action_space.shape == (3, len(action_nvec()))
    assert info["action_mask"].shape == (3, int(action_nvec().sum())) and info["_slot"].all()
    envs.close()


def test_each_sub_day_plays_as_the_single_env_with_its_seed_across_the_autoreset() -> None:
    """Day i of reset(seed=s) is the single env's reset(seed=s + i); after a day's end the next step restarts it."""
    n, seed = 2, 11
    envs = GpuClusterLiveVectorEnv(n, baseline="greedy", **SMALL)
    singles = [GpuClusterLiveEnv(baseline="greedy", **SMALL) for _ in range(n)]
    obs, _ = envs.reset(seed=seed)
    for i, single in enumerate(singles):
        np.testing.assert_array_equal(obs[i], single.reset(seed=seed + i)[0])
    slots = singles[0].day.slots  # type: ignore[union-attr]
    rng = np.random.default_rng(0)
    ended = [False] * n
    restarts = 0
    for _ in range(slots + 2):
        actions = _random_masked(envs.action_masks(), rng)
        obs, rewards, terminated, _, _ = envs.step(actions)
        for i, single in enumerate(singles):
            if ended[i]:
                expected_obs, expected_reward, expected_done = single.reset()[0], 0.0, False
                restarts += 1
            else:
                expected_obs, expected_reward, expected_done, _, _ = single.step(actions[i])
            ended[i] = expected_done
            np.testing.assert_array_equal(obs[i], expected_obs)
            assert rewards[i] == expected_reward and terminated[i] == expected_done
            np.testing.assert_array_equal(envs.action_masks()[i], single.action_masks())
    assert restarts == n  # every day ended within the day's slots and restarted at the next step
    envs.close()


def test_workers_give_the_same_arrays_as_in_process() -> None:
    in_process = GpuClusterLiveVectorEnv(3, baseline="greedy", **SMALL)
    pooled = GpuClusterLiveVectorEnv(3, baseline="greedy", workers=2, **SMALL)
    try:
        for mine, theirs in zip(_play(in_process, 5, 6), _play(pooled, 5, 6), strict=True):
            for a, b in zip(mine, theirs, strict=True):
                np.testing.assert_array_equal(a, b)
    finally:
        in_process.close()
        pooled.close()


def test_a_workers_error_is_raised_in_the_parent_with_its_message_and_close_ends_the_workers() -> None:
    envs = GpuClusterLiveVectorEnv(2, baseline=None, workers=2, **SMALL)
    envs.reset(seed=0)
    with pytest.raises(RuntimeError, match=r"live-day worker 0 .*action: expected 11 values, got 10"):
        envs.step(np.zeros((2, 10), dtype=np.int64))
    processes = list(envs._processes)
    envs.close()
    assert processes and not any(p.is_alive() for p in processes)
    with pytest.raises(RuntimeError, match="closed"):
        envs.step(np.zeros((2, 11), dtype=np.int64))


def test_the_single_envs_refusals_and_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="families"):
        GpuClusterLiveVectorEnv(2, families=("no-such-family",))
    with pytest.raises(ValueError, match="workers"):
        GpuClusterLiveVectorEnv(2, workers=-1)
    with pytest.raises(ValueError, match="num_envs"):
        GpuClusterLiveVectorEnv(0)
