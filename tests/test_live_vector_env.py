"""GpuClusterLive-v0 vectorized by Gymnasium: sub-days play as the single env, async changes nothing, masks sample."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import gpu_env  # noqa: F401  (registers the environments)
from agents.live_gym.live_env import GpuClusterLiveEnv
from agents.live_gym.live_policy import OBSERVATION_SIZE, action_nvec, action_offsets
from agents.live_gym.live_vector_env import LiveAsyncVectorEnv, LiveSyncVectorEnv, make_live_vec

SMALL = {"families": ("mixed-control",), "sigma": 0.3, "runtime_model": "trace"}


def _random_masked(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One allowed action per row of ``masks``."""
    nvec, offsets = action_nvec(), action_offsets()
    return np.array(
        [[rng.choice(np.flatnonzero(m[o : o + n])) for o, n in zip(offsets, nvec, strict=True)] for m in masks]
    )


def _play(envs: gym.vector.VectorEnv, seed: int, steps: int) -> list[tuple[np.ndarray, ...]]:
    """Reset with ``seed`` and take ``steps`` random masked steps: each call's arrays."""
    rng = np.random.default_rng(seed)
    obs, _ = envs.reset(seed=seed)
    out = [(obs, envs.action_masks())]
    for _ in range(steps):
        obs, rewards, terminated, truncated, info = envs.step(_random_masked(envs.action_masks(), rng))
        out.append((obs, rewards, terminated, truncated, envs.action_masks(), info["slot"], info["ignored"]))
    return out


def test_make_vec_builds_gymnasiums_own_vector_env_with_the_single_envs_spaces_batched() -> None:
    envs = gym.make_vec("GpuClusterLive-v0", num_envs=3, **SMALL)
    assert isinstance(envs.unwrapped, LiveSyncVectorEnv) and isinstance(envs.unwrapped, gym.vector.SyncVectorEnv)
    obs, info = envs.reset(seed=1)
    assert obs.shape == (3, OBSERVATION_SIZE) and obs.dtype == np.float32
    assert envs.action_masks().shape == (3, int(action_nvec().sum())) and envs.action_masks().dtype == bool
    assert envs.single_action_space.shape == (len(action_nvec()),) and info["_slot"].all()
    for i, day_mask in enumerate(info["action_mask"]):  # each day's tuple of int8 masks, as the single env's
        assert all(m.dtype == np.int8 for m in day_mask)
        np.testing.assert_array_equal(np.concatenate(day_mask).astype(bool), envs.action_masks()[i])
        action = envs.single_action_space.sample(mask=day_mask)
        assert all(day_mask[d][v] == 1 for d, v in enumerate(action))
    envs.close()


def test_gymnasiums_plain_modes_work_and_read_the_masks_by_call() -> None:
    for mode in ("sync", "async"):
        envs = gym.make_vec("GpuClusterLive-v0", num_envs=2, vectorization_mode=mode, baseline=None, **SMALL)
        try:
            _, info = envs.reset(seed=3)
            masks = np.stack(envs.call("action_masks"))
            assert masks.shape == (2, int(action_nvec().sum()))
            np.testing.assert_array_equal(masks, [np.concatenate(m).astype(bool) for m in info["action_mask"]])
        finally:
            envs.close()


def test_each_sub_day_plays_as_the_single_env_with_its_seed_across_the_autoreset() -> None:
    """Day i of reset(seed=s) is the single env's reset(seed=s + i); after a day's end the next step restarts it."""
    n, seed = 2, 11
    envs = make_live_vec(n, baseline="greedy", **SMALL)
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


def test_async_workers_give_the_same_arrays_as_in_process() -> None:
    in_process = make_live_vec(3, baseline="greedy", **SMALL)
    pooled = make_live_vec(3, baseline="greedy", workers=2, **SMALL)
    assert isinstance(pooled, LiveAsyncVectorEnv)
    try:
        for mine, theirs in zip(_play(in_process, 5, 6), _play(pooled, 5, 6), strict=True):
            for a, b in zip(mine, theirs, strict=True):
                np.testing.assert_array_equal(a, b)
    finally:
        in_process.close()
        pooled.close()


@pytest.mark.filterwarnings("ignore::UserWarning")  # Gymnasium's own report of the worker's error
def test_a_workers_error_is_raised_in_the_parent_with_its_message() -> None:
    envs = make_live_vec(2, baseline=None, workers=1, **SMALL)
    try:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match=r"action: expected 11 values, got 10"):
            envs.step(np.zeros((2, 10), dtype=np.int64))
    finally:
        envs.close()


def test_the_single_envs_refusals_and_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="families"):
        make_live_vec(2, families=("no-such-family",))
    with pytest.raises(ValueError, match="workers"):
        make_live_vec(2, workers=-1)
    with pytest.raises(ValueError, match="num_envs"):
        make_live_vec(0)
    with pytest.raises(RuntimeError, match="reset"):
        make_live_vec(1, **SMALL).action_masks()
