"""An SB3 ``VecEnv`` over the batched engine, so that sb3-contrib's MaskablePPO trains on it.

SB3 vector envs reset an episode in the step that ends it and keep the last
observation in ``infos[i]["terminal_observation"]``; Gymnasium's NEXT_STEP
vector envs do not. :class:`BatchVecEnv` drives the engine of a
:class:`~gpu_env.batch.vector_env.GpuClusterVectorEnv` with SB3's convention,
and answers ``env_method("action_masks")`` (what ``get_action_masks`` calls)
from one (N, A) array instead of N Python calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv

from gpu_env.batch.vector_env import GpuClusterVectorEnv


class BatchVecEnv(VecEnv):
    """SB3's VecEnv API on a :class:`GpuClusterVectorEnv` (same-step autoreset, terminal observations in infos)."""

    def __init__(self, venv: GpuClusterVectorEnv) -> None:
        """Wrap a vector env (it is reset here and stepped only through this adapter)."""
        self.venv = venv
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        self._actions = np.zeros(venv.num_envs, dtype=np.int64)
        self._seed: int | None = None

    def reset(self) -> dict[str, np.ndarray]:
        """Start every episode; infos go to ``reset_infos``."""
        obs, _ = self.venv.reset(seed=self._seed)
        self._seed = None
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return {key: value.copy() for key, value in obs.items()}  # SB3 keeps them past the next step

    def step_async(self, actions: np.ndarray) -> None:
        """Keep the actions for :meth:`step_wait`."""
        self._actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)

    def step_wait(self) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Step every episode; those that end restart at once (their last observation in the infos)."""
        venv, engine = self.venv, self.venv.engine
        raw, done = engine.step(self._actions)
        rewards = (raw / engine.state.reward_scale).astype(np.float32)
        truncated = ~done & (engine.state.steps >= venv.step_limit)
        ended = done | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        index = np.flatnonzero(ended)
        if index.size:
            last = venv.current_observation()
            for i in index.tolist():
                plan = engine.plan(i)
                infos[i] = {
                    "terminal_observation": {key: value[i].copy() for key, value in last.items()},
                    "TimeLimit.truncated": bool(truncated[i]),
                    "plan": plan.to_dict(),
                }
            venv.start_episodes(index)
        # Fresh arrays: SB3 keeps this observation while it steps again (the vector env refills its buffers).
        obs = {key: value.copy() for key, value in venv.current_observation().items()}
        return obs, rewards, ended, infos

    def action_masks(self) -> np.ndarray:
        """(N, n_actions) bool."""
        return self.venv.action_masks()

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list[Any]:
        """``action_masks`` from the engine in one array; no other method exists per episode."""
        if method_name != "action_masks":
            raise AttributeError(f"BatchVecEnv episodes have no method {method_name!r}")
        return list(self.action_masks()[self._indices(indices)])

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        """The vector env's attribute, once per requested episode."""
        return [getattr(self.venv, attr_name)] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        """Set an attribute of the vector env."""
        setattr(self.venv, attr_name, value)

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        """No episode is wrapped."""
        return [False] * len(self._indices(indices))

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seed the next reset."""
        self._seed = seed
        return [seed] * self.num_envs

    def close(self) -> None:
        """Nothing to release."""

    def _indices(self, indices: Any) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)
