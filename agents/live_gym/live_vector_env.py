"""GpuClusterLive-v0 vectorized: Gymnasium's own ``SyncVectorEnv`` and ``AsyncVectorEnv``, with sb3-contrib's masks.

``gymnasium.make_vec("GpuClusterLive-v0", num_envs=N)`` returns :func:`make_live_vec`'s vector env: N days of
:class:`~agents.live_gym.live_env.GpuClusterLiveEnv` (the same arguments) in Gymnasium's ``SyncVectorEnv``, or
with ``workers=k > 0`` its ``AsyncVectorEnv`` (one worker process per day, Gymnasium's design). Either adds
one method, ``action_masks()``: the (N, ``sum(nvec)``) bool masks (sb3-contrib's contract), read from the last
call's infos, so that no mask costs a round trip to a worker. ``vectorization_mode="sync"`` or ``"async"``
gives Gymnasium's classes as they are (``envs.call("action_masks")`` then reads the masks).

Everything else is Gymnasium's: ``NEXT_STEP`` autoreset (the step after a day's last slot draws the sub-env's
next day, ignores its action and returns reward 0), infos as dicts of arrays with ``_key`` masks (the single
env's keys; ``action_mask`` an object array of each day's tuple of int8 masks, ``result`` an object array),
``reset(seed=s)`` seeding day i with ``s + i``. The same seed gives the same days and rewards, sync or async.

A custom vector env (N days split over k worker processes) was measured against these and was not faster on
this 2-vCPU machine (docs/environment.md, "The vector env"); Gymnasium's own replaced it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

from agents.live_gym.live_env import GpuClusterLiveEnv


def flat_masks(masks: Sequence[tuple[np.ndarray, ...]]) -> np.ndarray:
    """Each day's tuple of per-dimension int8 masks (``infos["action_mask"]``) as one (N, sum(nvec)) bool array."""
    return np.stack([np.concatenate(day).astype(bool) for day in masks])


class _MasksFromInfos:
    """``action_masks()`` for a Gymnasium vector env of live days: the masks of the last reset or step's infos."""

    _masks: np.ndarray

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Gymnasium's reset; keeps the days' masks."""
        obs, infos = super().reset(seed=seed, options=options)  # type: ignore[misc]
        self._masks = flat_masks(infos["action_mask"])
        return obs, infos

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Gymnasium's step; keeps the days' masks."""
        obs, rewards, terminated, truncated, infos = super().step(actions)  # type: ignore[misc]
        self._masks = flat_masks(infos["action_mask"])
        return obs, rewards, terminated, truncated, infos

    def action_masks(self) -> np.ndarray:
        """(N, ``sum(nvec)``) bool: the allowed values of each day's action dimensions, concatenated.

        Raises:
            RuntimeError: Before the first reset.
        """
        if not hasattr(self, "_masks"):
            raise RuntimeError("call reset() before action_masks()")
        return self._masks.copy()


class LiveSyncVectorEnv(_MasksFromInfos, SyncVectorEnv):
    """Gymnasium's ``SyncVectorEnv`` of live days, with ``action_masks()``."""


class LiveAsyncVectorEnv(_MasksFromInfos, AsyncVectorEnv):
    """Gymnasium's ``AsyncVectorEnv`` of live days (a process per day), with ``action_masks()``."""


def make_live_vec(
    num_envs: int, *, workers: int = 0, context: str | None = None, **env_kwargs: Any
) -> LiveSyncVectorEnv | LiveAsyncVectorEnv:
    """N GpuClusterLive-v0 days in Gymnasium's vector env (the registration's ``vector_entry_point``).

    Args:
        num_envs: N.
        workers: 0 steps the days in this process (``SyncVectorEnv``); more runs each day in its own worker
            process (``AsyncVectorEnv``: Gymnasium starts one per day, whatever the number).
        context: The multiprocessing start method of the workers (default: the platform's).
        **env_kwargs: :class:`~agents.live_gym.live_env.GpuClusterLiveEnv`'s arguments.

    Raises:
        ValueError: An argument the single env refuses, ``num_envs < 1`` or ``workers < 0``.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs: expected at least 1, got {num_envs}")
    if workers < 0:
        raise ValueError(f"workers: expected 0 (in-process) or more, got {workers}")
    GpuClusterLiveEnv(**env_kwargs)  # refuses here what the single env refuses, before any worker starts
    make = functools.partial(GpuClusterLiveEnv, **env_kwargs)
    if workers == 0:
        return LiveSyncVectorEnv([make] * num_envs)
    return LiveAsyncVectorEnv([make] * num_envs, context=context)
