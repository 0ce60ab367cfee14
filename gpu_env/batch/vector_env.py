"""GpuCluster-v0 as a Gymnasium ``VectorEnv`` over the batched engine.

``gymnasium.make_vec("GpuCluster-v0", num_envs=N, vectorization_mode="vector_entry_point", scenario=...)``
returns a :class:`GpuClusterVectorEnv`: N episodes of
:class:`gpu_env.env.GpuClusterEnv` (same arguments, same spaces per episode)
advanced by one :class:`~gpu_env.batch.engine.BatchEngine` call per step.

Gymnasium 1.x conventions: ``NEXT_STEP`` autoreset (the step after an
episode's last one restarts it, ignores its action and returns reward 0);
infos are dicts of arrays, each key with a ``_key`` bool mask of the episodes
that have it. Every step's infos hold ``action_mask`` (N, n_actions),
``objective``, ``clock`` and ``reward_scale``. The step that ends an episode
adds ``episode``: a dict of (N,) arrays computed for all finished episodes at
once (``objective``, ``job_value``, ``penalty``, ``shortfall`` and
``utilization`` as in the plan's metrics, ``r`` the episode's return and ``l``
its length; 0 where ``_episode`` is False). Plans are built on request:
:meth:`GpuClusterVectorEnv.plan` (also ``envs.call("plan", i)``) returns episode
i's plan with its metrics, and ``plans=True`` puts every finished episode's plan
dict and metrics into ``info["plan"]`` and ``info["metrics"]`` (object arrays,
the single env's values), as the single env does, at a cost in speed.

Observations are written into the same arrays at every step (``copy=False``,
the default, as ``SyncVectorEnv(copy=False)``): an array returned by one call
holds the next call's values after it, and ``grid`` is a read-only view of the
engine's own grid. Keep a copy to hold on to one (``copy=True`` returns fresh
arrays). ``action_masks()`` returns the (N, n_actions) bool masks
(sb3-contrib's contract).

Supported: ``actions="fit"``, ``realtime="cover"``, with or without ``trade_realtime``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from gpu_env.batch.batch_observation import buffers, observe
from gpu_env.batch.engine import BatchEngine
from gpu_env.batch.state import Sizes
from gpu_env.env import GpuClusterEnv
from gpu_env.plan import Plan
from gpu_env.sampler import ScenarioSampler, resolve_source
from gpu_env.scenario import Scenario

EPISODE_KEYS: tuple[str, ...] = ("objective", "job_value", "penalty", "shortfall", "utilization", "r", "l")
"""The arrays of ``info["episode"]``."""


class GpuClusterVectorEnv(VectorEnv):
    """N GpuCluster-v0 episodes in one batched engine (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(
        self,
        num_envs: int,
        scenario: Any,
        *,
        actions: str = "fit",
        trade_realtime: bool = True,
        realtime: Any = "cover",
        max_gpus: int | None = None,
        max_jobs: int | None = None,
        max_slots: int | None = None,
        max_apps: int | None = None,
        max_duration: int | None = None,
        reward_scale: float | None = None,
        plans: bool = False,
        copy: bool = False,
        render_mode: str | None = None,
    ) -> None:
        """Build the engine, the spaces and the observation buffers.

        Args:
            num_envs: N.
            scenario: As :class:`~gpu_env.env.GpuClusterEnv`'s (a scenario, a path, families or a sampler).
            actions: ``"fit"`` only.
            trade_realtime: As the env's.
            realtime: ``"cover"`` only.
            max_gpus: Padded sizes, as the env's.
            max_jobs: Padded sizes, as the env's.
            max_slots: Padded sizes, as the env's.
            max_apps: Padded sizes, as the env's.
            max_duration: The longest job duration the grid holds; default the source's.
            reward_scale: As the env's.
            plans: Put each finished episode's plan dict and metrics into ``info["plan"]`` and
                ``info["metrics"]`` (slower); :meth:`plan` gives any episode's plan either way.
            copy: Return fresh observation arrays at each call instead of the same buffers refilled.
            render_mode: None (no rendering).

        Raises:
            ValueError: An unsupported option.
        """
        if actions != "fit" or realtime != "cover":
            raise ValueError("the batched engine supports actions='fit' and realtime='cover' only")
        if render_mode is not None:
            raise ValueError("render_mode: the vector env does not render; render a single GpuClusterEnv")
        self.num_envs = num_envs
        self.render_mode = None
        self.plans = bool(plans)
        self.copy = bool(copy)
        single = GpuClusterEnv(
            scenario,
            trade_realtime=trade_realtime,
            max_gpus=max_gpus,
            max_jobs=max_jobs,
            max_slots=max_slots,
            max_apps=max_apps,
            reward_scale=reward_scale,
        )
        self.source = resolve_source(scenario)
        self.limits = single.limits
        self.single_observation_space = single.observation_space
        self.single_action_space = single.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        duration = max_duration or _longest(self.source, self.limits.max_slots)
        sizes = Sizes.from_limits(self.limits, duration)
        self.engine = BatchEngine(num_envs, sizes, trade_realtime=trade_realtime, reward_scale=reward_scale)
        self.step_limit = np.zeros(num_envs, dtype=np.int64)  # truncation step of each episode
        self._ended = np.ones(num_envs, dtype=bool)  # ended at the last step: restarts at the next
        self._returns = np.zeros(num_envs, dtype=np.float64)  # sum of the rewards of each running episode
        self._obs = buffers(self.engine, [key for key in self.single_observation_space if key != "grid"])
        grid = self.engine.state.grid.view()
        grid.flags.writeable = False  # the engine's own grid (only observations read it): never copied
        self._obs["grid"] = grid
        self._obs = {key: self._obs[key] for key in self.single_observation_space}  # the space's key order
        self._masks = self._obs["action_mask"].view(bool)  # the same bytes as the observation's int8 mask

    # ------------------------------------------------------------------ the VectorEnv API

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start every episode (``options={"scenario": ...}`` plans that scenario in all)."""
        if isinstance(seed, list):
            seed = seed[0]
        super().reset(seed=seed)
        scenario = None
        if options and options.get("scenario") is not None:
            scenario = resolve_source(options["scenario"])
        self.start_episodes(np.arange(self.num_envs), scenario)
        obs = self.current_observation()
        return obs, self._infos(np.zeros(self.num_envs, dtype=bool))

    def step(
        self, actions: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One action per episode; episodes that ended at the last step restart instead."""
        engine = self.engine
        state = engine.state
        restart = np.flatnonzero(self._ended)
        actions = np.asarray(actions, dtype=np.int64)
        running = ~self._ended
        if restart.size:
            self.start_episodes(restart)
            actions = actions.copy()
            actions[restart] = -1  # ignored: the engine earns 0 for a forbidden action
        raw, done = engine.step(actions)
        rewards = raw / state.reward_scale
        if restart.size:
            state.steps[restart] = 0  # the ignored action is no step
        self._returns += rewards
        terminated = done & running
        truncated = ~done & running & (state.steps >= self.step_limit)
        self._ended = terminated | truncated
        obs = self.current_observation()
        return obs, rewards, terminated, truncated, self._infos(self._ended)

    def action_masks(self) -> np.ndarray:
        """(N, n_actions) bool: True where allowed (all False for an episode that has ended until it restarts)."""
        return self.engine.action_masks()

    def plan(self, i: int) -> Plan:
        """Episode i's plan so far, with its metrics (after the step that ends it, until the next: its last plan)."""
        return self.engine.plan(i)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The vector env's method ``name`` called with the arguments (or its attribute): ``call("plan", i)``.

        The episodes are rows of one engine, not objects, so unlike ``SyncVectorEnv.call`` (which calls
        every sub-env) this calls the one batched method, whose arguments say which episode.
        """
        attribute = getattr(self, name)
        return attribute(*args, **kwargs) if callable(attribute) else attribute

    # ------------------------------------------------------------------ helpers

    def start_episodes(self, index: np.ndarray, scenario: Scenario | ScenarioSampler | None = None) -> None:
        """Start new episodes in ``index``: from ``scenario`` (a scenario or a sampler), else from the source."""
        source = scenario if scenario is not None else self.source
        if isinstance(source, ScenarioSampler):
            scenarios = [source.draw(self.np_random) for _ in index]
        else:
            scenarios = [source] * index.size
        self.engine.reset(scenarios, index)
        state = self.engine.state
        self.step_limit[index] = 4 * (state.n_rows[index] + state.slots[index] + 1)
        self._ended[index] = False
        self._returns[index] = 0.0

    def current_observation(self) -> dict[str, np.ndarray]:
        """The observation buffers, refilled (fresh copies with ``copy=True``)."""
        observe(self.engine, out=self._obs)
        if self.copy:
            return {key: value.copy() for key, value in self._obs.items()}
        return dict(self._obs)

    def _infos(self, ended: np.ndarray) -> dict[str, Any]:
        state = self.engine.state
        every = np.ones(self.num_envs, dtype=bool)
        infos: dict[str, Any] = {
            "action_mask": self._masks.copy() if self.copy else self._masks,
            "_action_mask": every,
            "clock": state.clock.copy(),
            "_clock": every,
            "objective": state.objective.copy(),
            "_objective": every,
            "reward_scale": state.reward_scale.copy(),
            "_reward_scale": every,
        }
        index = np.flatnonzero(ended)
        if index.size:
            infos["episode"] = self._statistics(index)
            infos["_episode"] = ended.copy()
            if self.plans:
                plans = np.full(self.num_envs, None, dtype=object)
                metrics = np.full(self.num_envs, None, dtype=object)
                for i in index.tolist():
                    plan = self.engine.plan(i)
                    plans[i] = plan.to_dict()
                    metrics[i] = plan.metrics.to_dict() if plan.metrics else None
                infos.update({"plan": plans, "_plan": ended.copy(), "metrics": metrics, "_metrics": ended.copy()})
        return infos

    def _statistics(self, index: np.ndarray) -> dict[str, np.ndarray]:
        """``info["episode"]``: (N,) arrays, filled for the episodes ``index`` in one pass (0 elsewhere).

        The values of ``compute_metrics`` (objective, job value, penalty, shortfall, utilization) read
        off the state: job GPU-slots inside the horizon are the load's, real-time GPU-slots served
        ``min(demand, curve)``.
        """
        s = self.engine.state
        demand, curves = s.demand[index], s.curves[index]
        served = np.minimum(demand, curves).sum(axis=(1, 2))
        held = s.load[index].sum(axis=1)
        values = {
            "objective": s.objective[index],
            "job_value": s.job_value[index],
            "penalty": s.shortfall_cost[index],
            "shortfall": np.maximum(0, demand - curves).sum(axis=(1, 2)),
            "utilization": (held + served) / (s.gpus[index] * s.slots[index]),
            "r": self._returns[index],
            "l": s.steps[index],
        }
        out: dict[str, np.ndarray] = {}
        for key in EPISODE_KEYS:
            column = np.zeros(self.num_envs, dtype=values[key].dtype)
            column[index] = values[key]
            out[key] = column
        return out


def _longest(source: Scenario | ScenarioSampler, slots: int) -> int:
    """The longest job duration a source can produce: a scenario's own, or twice the horizon for a sampler."""
    if isinstance(source, Scenario):
        return max([job.duration for job in source.jobs] + [1])
    return 2 * slots  # families draw durations within the horizon (checked: Sizes.fits names any that is not)
