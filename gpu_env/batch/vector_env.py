"""GpuCluster-v0 as a Gymnasium ``VectorEnv`` over the batched engine.

``gymnasium.make_vec("GpuCluster-v0", num_envs=N, vectorization_mode="vector_entry_point", scenario=...)``
returns a :class:`GpuClusterVectorEnv`: N episodes of
:class:`gpu_env.env.GpuClusterEnv` (same arguments, same spaces per episode)
advanced by one :class:`~gpu_env.batch.engine.BatchEngine` call per step.

Gymnasium 1.x conventions: ``NEXT_STEP`` autoreset (the step after an
episode's last one restarts it, ignores its action and returns reward 0);
infos are dicts of arrays, each key with a ``_key`` bool mask of the episodes
that have it. Every step's infos hold ``action_mask`` (N, n_actions),
``objective``, ``clock`` and ``reward_scale``; the last step of an episode also
holds ``plan`` (an object array: the single env's ``info["plan"]`` dict where
``_plan`` is True) and ``metrics``. ``action_masks()`` returns the (N,
n_actions) bool masks (sb3-contrib's contract).

Supported: ``actions="fit"``, ``realtime="cover"``, with or without
``trade_realtime``. ``device`` None or ``"cpu"``: the numpy engine, numpy
arrays out. ``device="cuda"`` (``"cuda:N"``), or ``"torch"`` for the torch
engine on the CPU: :class:`~gpu_env.batch.torch_engine.TorchEngine`, and
observations, rewards, terminated, truncated, ``action_masks()`` and the
infos' arrays are torch tensors on that device (the ``_key`` masks, plans and
metrics stay on the host); actions may be a tensor there.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from gpu_env.batch.engine import BatchEngine
from gpu_env.batch.observe import KEYS, observe
from gpu_env.batch.state import Sizes
from gpu_env.env import GpuClusterEnv
from gpu_env.sampler import ScenarioSampler, resolve_source
from gpu_env.scenario import Scenario


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
        device: str | None = None,
        render_mode: str | None = None,
    ) -> None:
        """Build the engine and the spaces.

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
            device: None or ``"cpu"`` (numpy engine), ``"torch"`` (torch engine on the CPU), ``"cuda[:N]"``.
            render_mode: None (no rendering).

        Raises:
            ValueError: An unsupported option (or CUDA asked for where there is none).
        """
        if actions != "fit" or realtime != "cover":
            raise ValueError("the batched engine supports actions='fit' and realtime='cover' only")
        self.device = _torch_device(device)
        if render_mode is not None:
            raise ValueError("render_mode: the vector env does not render; render a single GpuClusterEnv")
        self.num_envs = num_envs
        self.render_mode = None
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
        if self.device is None:
            self.engine = BatchEngine(num_envs, sizes, trade_realtime=trade_realtime, reward_scale=reward_scale)
            self._limit = np.zeros(num_envs, dtype=np.int64)  # truncation step of each episode
            self._ended = np.ones(num_envs, dtype=bool)  # ended at the last step: restarts at the next
        else:
            import torch

            from gpu_env.batch.torch_engine import TorchEngine

            self.engine = TorchEngine(
                num_envs, sizes, trade_realtime=trade_realtime, reward_scale=reward_scale, device=self.device
            )
            self._limit = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
            self._ended = torch.ones(num_envs, dtype=torch.bool, device=self.device)

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
        self._start(np.arange(self.num_envs), scenario)
        return self._observation(), self._infos(self._ended & False)

    def step(
        self, actions: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One action per episode; episodes that ended at the last step restart instead."""
        engine = self.engine
        if self.device is not None:
            return self._step_torch(actions)
        restart = np.flatnonzero(self._ended)
        actions = np.asarray(actions, dtype=np.int64).copy()
        if restart.size:
            self._start(restart)
            actions[restart] = -1  # ignored: the engine earns 0 for a forbidden action
        running = np.ones(self.num_envs, dtype=bool)
        running[restart] = False
        raw, done = engine.step(actions)
        rewards = (raw / engine.state.reward_scale).astype(np.float64)
        if restart.size:
            engine.state.steps[restart] = 0  # the ignored action is no step
        terminated = done & running
        truncated = ~done & running & (engine.state.steps >= self._limit)
        self._ended = terminated | truncated
        return self._observation(), rewards, terminated, truncated, self._infos(self._ended)

    def _step_torch(self, actions: Any) -> tuple[dict[str, Any], Any, Any, Any, dict[str, Any]]:
        """:meth:`step` on the torch engine's tensors (same logic)."""
        import torch

        engine = self.engine
        restart = torch.nonzero(self._ended).flatten()
        actions = torch.as_tensor(actions, device=self.device).to(torch.int64).clone()
        running = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        if restart.numel():
            self._start(restart.cpu().numpy())
            actions[restart] = -1
            running[restart] = False
        raw, done = engine.step(actions)
        rewards = raw / engine.state.reward_scale
        if restart.numel():
            engine.state.steps[restart] = 0
        terminated = done & running
        truncated = ~done & running & (engine.state.steps >= self._limit)
        self._ended = terminated | truncated
        return self._observation(), rewards, terminated, truncated, self._infos(self._ended)

    def action_masks(self) -> np.ndarray:
        """(N, n_actions) bool: True where allowed (all False for an episode that has ended until it restarts)."""
        return self.engine.action_masks()

    # ------------------------------------------------------------------ helpers

    def _start(self, index: np.ndarray, scenario: Scenario | ScenarioSampler | None = None) -> None:
        source = scenario if scenario is not None else self.source
        if isinstance(source, ScenarioSampler):
            scenarios = [source.draw(self.np_random) for _ in index]
        else:
            scenarios = [source] * index.size
        self.engine.reset(scenarios, index)
        state = self.engine.state
        if self.device is not None:
            import torch

            index = torch.as_tensor(index, device=self.device)
        self._limit[index] = 4 * (state.n_rows[index] + state.slots[index] + 1)
        self._ended[index] = False

    def _observation(self) -> dict[str, Any]:
        if self.device is not None:
            from gpu_env.batch import torch_engine

            return torch_engine.observe(self.engine, KEYS)
        return observe(self.engine, KEYS)

    def _infos(self, ended: Any) -> dict[str, Any]:
        state = self.engine.state
        every = np.ones(self.num_envs, dtype=bool)
        infos: dict[str, Any] = {
            "action_mask": self.engine.action_masks(),
            "_action_mask": every,
            "clock": state.clock.clone() if self.device is not None else state.clock.copy(),
            "_clock": every,
            "objective": state.objective.clone() if self.device is not None else state.objective.copy(),
            "_objective": every,
            "reward_scale": state.reward_scale.clone() if self.device is not None else state.reward_scale.copy(),
            "_reward_scale": every,
        }
        if self.device is not None:
            ended = ended.cpu().numpy()
        if ended.any():
            plans = np.full(self.num_envs, None, dtype=object)
            metrics = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(ended).tolist():
                plan = self.engine.plan(i)
                plans[i] = plan.to_dict()
                metrics[i] = plan.metrics.to_dict() if plan.metrics else None
            infos.update({"plan": plans, "_plan": ended.copy(), "metrics": metrics, "_metrics": ended.copy()})
        return infos


def _torch_device(device: Any) -> Any:
    """None for the numpy engine (``None`` or ``"cpu"``), else the torch device (``"torch"`` = torch on the CPU).

    Raises:
        ValueError: CUDA asked for where there is none, or an unknown device.
    """
    if device is None or device == "cpu":
        return None
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is in the train extra
        raise ValueError(f"device {device!r}: the torch engine needs torch (pip install -e .[train])") from exc
    if device == "torch":
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device: expected None, 'cpu', 'torch' or 'cuda[:N]', got {device!r}") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: no CUDA device here (torch.cuda.is_available() is False)")
    if dev.type not in ("cuda", "cpu"):
        raise ValueError(f"device: expected None, 'cpu', 'torch' or 'cuda[:N]', got {device!r}")
    return dev


def _longest(source: Scenario | ScenarioSampler, slots: int) -> int:
    """The longest job duration a source can produce: a scenario's own, or twice the horizon for a sampler."""
    if isinstance(source, Scenario):
        return max([job.duration for job in source.jobs] + [1])
    return 2 * slots  # families draw durations within the horizon (checked: Sizes.fits names any that is not)
