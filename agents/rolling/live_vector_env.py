"""GpuClusterLive-v0 as a Gymnasium ``VectorEnv``: N live days stepped in one call.

``gymnasium.make_vec("GpuClusterLive-v0", num_envs=N, vectorization_mode="vector_entry_point", workers=k, ...)``
returns a :class:`GpuClusterLiveVectorEnv`: N days of :class:`~agents.rolling.live_env.GpuClusterLiveEnv` (the
same arguments, the same spaces per day). Each day is played by its own single env, so a sub-day plays exactly
as the single env with the same seed; the vector env only batches the calls. With ``workers=0`` the days are
stepped one after another in this process; with ``workers=k`` they are split into k slices, each stepped by
its own worker process (commands and arrays through pipes), the slices at the same time.

Gymnasium 1.x conventions, as :mod:`gpu_env.batch.vector_env`: ``NEXT_STEP`` autoreset (the step after a
day's last slot draws the sub-env's next day, ignores its action and returns reward 0, not terminated);
infos are dicts of arrays, each key with a ``_key`` bool mask of the days that have it. Every step's infos
hold the single env's keys (``family``, ``seed``, ``sigma``, ``runtime_model``, ``slot``, ``action_mask``,
``ignored``; at a day's end ``objective`` and, with the greedy baseline, ``greedy_objective``) except
``result`` (the executed day's :class:`~agents.rolling.simulation.Simulation`, left in the sub-env rather
than sent through a pipe at every day's end). ``action_masks()`` returns the (N, ``sum(nvec)``) bool masks
(sb3-contrib's contract).

Seeding: ``reset(seed=s)`` resets day i with seed ``s + i`` (a list of N seeds gives each its own); the
days drawn after an autoreset come from each sub-env's own generator. The same seed gives the same days and
rewards whatever ``workers`` is.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any, ClassVar

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from agents.rolling.live_env import TRAIN_SEEDS, GpuClusterLiveEnv
from agents.rolling.live_policy import OBSERVATION_SIZE, action_nvec
from gpu_env.generators import FAMILIES

LEFT_IN_THE_SUB_ENV = ("result",)
"""Info keys of the single env that the vector env does not return."""


class LiveDays:
    """Some live days stepped one after another in this process, with NEXT_STEP autoreset.

    What a :class:`GpuClusterLiveVectorEnv` steps in-process, and what each of its workers steps.

    Args:
        count: How many days.
        env_kwargs: The arguments of each :class:`GpuClusterLiveEnv`.
    """

    def __init__(self, count: int, env_kwargs: dict[str, Any]) -> None:
        self.envs = [GpuClusterLiveEnv(**env_kwargs) for _ in range(count)]
        self.ended = np.zeros(count, dtype=bool)  # ended at the last step: restarts at the next
        self.masks = np.ones((count, int(action_nvec().sum())), dtype=bool)

    def reset(
        self, seeds: Sequence[int | None], options: dict[str, Any] | None
    ) -> tuple[np.ndarray, list[dict[str, Any]], np.ndarray]:
        """Reset every day (day i with ``seeds[i]``): observations, infos and masks."""
        obs = np.zeros((len(self.envs), OBSERVATION_SIZE), dtype=np.float32)
        infos = []
        for i, env in enumerate(self.envs):
            obs[i], info = env.reset(seed=seeds[i], options=options)
            infos.append(_sendable(info))
            self.masks[i] = env.action_masks()
        self.ended[:] = False
        return obs, infos, self.masks.copy()

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]], np.ndarray]:
        """Step every day (a day that ended at the last step draws its next day instead)."""
        count = len(self.envs)
        obs = np.zeros((count, OBSERVATION_SIZE), dtype=np.float32)
        rewards = np.zeros(count, dtype=np.float64)
        terminated = np.zeros(count, dtype=bool)
        truncated = np.zeros(count, dtype=bool)
        infos = []
        for i, env in enumerate(self.envs):
            if self.ended[i]:
                obs[i], info = env.reset()
                self.ended[i] = False
            else:
                obs[i], rewards[i], terminated[i], truncated[i], info = env.step(actions[i])
                self.ended[i] = terminated[i] or truncated[i]
            infos.append(_sendable(info))
            self.masks[i] = env.action_masks()
        return obs, rewards, terminated, truncated, infos, self.masks.copy()


class GpuClusterLiveVectorEnv(VectorEnv):
    """N GpuClusterLive-v0 days stepped in one call (see the module docstring).

    Args:
        num_envs: N.
        families: As :class:`GpuClusterLiveEnv`'s.
        sigma: As :class:`GpuClusterLiveEnv`'s.
        runtime_model: As :class:`GpuClusterLiveEnv`'s.
        seeds: As :class:`GpuClusterLiveEnv`'s.
        baseline: As :class:`GpuClusterLiveEnv`'s.
        base: As :class:`GpuClusterLiveEnv`'s.
        check: As :class:`GpuClusterLiveEnv`'s.
        workers: 0 steps the days in this process; k > 0 splits them over k worker processes (at most N).
        context: The multiprocessing start method of the workers (default: the platform's).
        render_mode: None (nothing to render).

    Raises:
        ValueError: An argument the single env refuses, ``num_envs < 1`` or ``workers < 0``.
    """

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(
        self,
        num_envs: int,
        families: Sequence[str] = tuple(FAMILIES),
        *,
        sigma: float | Sequence[float] = (0.0, 0.3),
        runtime_model: str | Sequence[str] = ("exact", "trace"),
        seeds: Sequence[int] = TRAIN_SEEDS,
        baseline: str | None = "greedy",
        base: str = "greedy",
        check: bool = False,
        workers: int = 0,
        context: str | None = None,
        render_mode: str | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs: expected at least 1, got {num_envs}")
        if workers < 0:
            raise ValueError(f"workers: expected 0 (in-process) or more, got {workers}")
        env_kwargs: dict[str, Any] = {
            "families": tuple(families),
            "sigma": sigma,
            "runtime_model": runtime_model,
            "seeds": seeds,
            "baseline": baseline,
            "base": base,
            "check": check,
            "render_mode": render_mode,
        }
        single = GpuClusterLiveEnv(**env_kwargs)  # refuses what the single env refuses
        self.num_envs = num_envs
        self.render_mode = None
        self.single_observation_space = single.observation_space
        self.single_action_space = single.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.workers = min(workers, num_envs)
        self._masks = np.ones((num_envs, int(action_nvec().sum())), dtype=bool)
        self._slices = [s for s in np.array_split(np.arange(num_envs), max(self.workers, 1))]
        self._days: LiveDays | None = None
        self._pipes: list[Connection] = []
        self._processes: list[multiprocessing.process.BaseProcess] = []
        if self.workers == 0:
            self._days = LiveDays(num_envs, env_kwargs)
        else:
            ctx = multiprocessing.get_context(context)
            for index in self._slices:
                parent, child = ctx.Pipe()
                process = ctx.Process(target=_work, args=(child, len(index), env_kwargs), daemon=True)
                process.start()
                child.close()
                self._pipes.append(parent)
                self._processes.append(process)

    # ------------------------------------------------------------------ the VectorEnv API

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every day: day i with seed ``seed + i`` (or ``seed[i]``); ``options`` go to every day."""
        if seed is None or isinstance(seed, int):
            seeds: list[int | None] = [None if seed is None else seed + i for i in range(self.num_envs)]
            super().reset(seed=seed)
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"seed: expected {self.num_envs} seeds, got {len(seeds)}")
        parts = self._run("reset", [([seeds[i] for i in index], options) for index in self._slices])
        obs = np.concatenate([p[0] for p in parts])
        self._masks = np.concatenate([p[2] for p in parts])
        return obs, self._merge([info for p in parts for info in p[1]])

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every day with its row of ``actions`` (N, number of action dimensions)."""
        actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs, -1)
        parts = self._run("step", [(actions[index],) for index in self._slices])
        obs, rewards, terminated, truncated = (np.concatenate([p[k] for p in parts]) for k in range(4))
        self._masks = np.concatenate([p[5] for p in parts])
        return obs, rewards, terminated, truncated, self._merge([info for p in parts for info in p[4]])

    def action_masks(self) -> np.ndarray:
        """(N, ``sum(nvec)``) bool: the allowed values of each day's action dimensions, concatenated."""
        return self._masks.copy()

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the workers (each is asked to stop, then waited for, then ended if it does not)."""
        for pipe in self._pipes:
            try:
                pipe.send(("close", ()))
            except (BrokenPipeError, OSError):
                pass
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join()
        for pipe in self._pipes:
            pipe.close()
        self._pipes, self._processes = [], []

    # ------------------------------------------------------------------ inside

    def _run(self, command: str, args: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Run ``command`` on every slice (in this process, or on all the workers at once)."""
        if self._days is not None:
            return [getattr(self._days, command)(*args[0])]
        if not self._pipes:
            raise RuntimeError("the vector env is closed")
        for pipe, arg in zip(self._pipes, args, strict=True):
            pipe.send((command, arg))
        answers = [pipe.recv() for pipe in self._pipes]
        for k, (ok, answer) in enumerate(answers):
            if not ok:
                raise RuntimeError(f"live-day worker {k} (days {self._slices[k].tolist()}) failed: {answer}")
        return [answer for _, answer in answers]

    def _merge(self, infos: list[dict[str, Any]]) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for i, info in enumerate(infos):
            merged = self._add_info(merged, info, i)
        return merged


def _sendable(info: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in info.items() if key not in LEFT_IN_THE_SUB_ENV}


def _work(pipe: Connection, count: int, env_kwargs: dict[str, Any]) -> None:
    """A worker: step its slice of days as the parent asks; an error goes back as its message and traceback."""
    days: LiveDays | None = None
    failure = ""
    try:
        days = LiveDays(count, env_kwargs)
    except Exception as error:  # reported to the parent at its first command
        failure = _message(error)
    while True:
        try:
            command, args = pipe.recv()
        except (EOFError, OSError):
            return
        if command == "close":
            return
        if days is None:
            pipe.send((False, failure))
            continue
        try:
            pipe.send((True, getattr(days, command)(*args)))
        except Exception as error:  # reported to the parent
            pipe.send((False, _message(error)))


def _message(error: Exception) -> str:
    """The error in one line, then the worker's traceback."""
    return f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
