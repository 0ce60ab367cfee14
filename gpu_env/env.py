"""GpuCluster-v0: the allocation problem as a Gymnasium environment."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gpu_env.episode import ActionLayout, ActionMode, Episode, InvalidActionError
from gpu_env.generators import FAMILIES
from gpu_env.observation import Encoder, Limits, shapes
from gpu_env.sampler import ScenarioSampler, resolve_source
from gpu_env.scenario import Scenario

BaseCurvesFn = Callable[[Scenario], np.ndarray]

DEFAULT_SCENARIO: tuple[str, ...] = tuple(FAMILIES)
"""What ``scenario=`` defaults to: the seven generator families, each equally often, at their own sizes."""


class InvalidAction(StrEnum):
    """What a step does with an action that the mask forbids."""

    IGNORE = "ignore"  # nothing changes; the step earns 0 and says why in info["invalid_action"]
    RAISE = "raise"  # raise InvalidActionError


class GpuClusterEnv(gym.Env):
    """Plan a GPU cluster's day: which job starts when on which GPUs, around real-time demand.

    ## Description

    A scenario (SPEC section 1) is G GPUs in nodes, T hourly slots, real-time
    apps with demand curves, and jobs that each need a contiguous block of k GPUs
    for d slots. The environment builds a plan one decision at a time. A clock
    walks through the horizon; a placement action starts one pending job at the
    clock, and ADVANCE moves the clock to the next slot at which some pending job
    can start. Inherited work (``running_on``) is placed before the first step.
    Real-time curves are derived from the jobs: each app is served as much of its
    demand as the jobs leave room for under its ramp (highest penalty first). An
    episode's plan is valid at every step and ``info["plan"]`` holds it at the end.

    ## Action Space

    ``Discrete(max_jobs * width + 1)``. Action ``row * width + option`` starts the
    job of that row (the row-th job to place, in file order) at the clock:

    * ``actions="fit"`` (default): ``width = 3`` placement rules, the lowest-index
      free block (``first``, FIFO's rule), the block in the shortest run of free
      GPUs of its node (``best``) and the highest-index free block (``last``).
      The action space does not depend on the cluster size.
    * ``actions="block"``: ``width = max_gpus``; the option is the block's first
      GPU. Every valid plan is reachable.

    The last action, ``max_jobs * width``, is ADVANCE. ``action_masks()`` (bool, the
    sb3-contrib contract) and ``info["action_mask"]`` (int8, the form
    ``env.action_space.sample(mask=info["action_mask"])`` takes) allow an action exactly when
    it keeps the plan valid (SPEC section 2) and the episode completable; ADVANCE
    is always allowed until the episode ends. A forbidden action changes nothing,
    earns 0 and sets ``info["invalid_action"]`` to the reason (``invalid_action="raise"``
    raises instead).

    ## Observation Space

    A ``Dict`` of float32 ``Box`` arrays padded to ``max_gpus``, ``max_jobs``,
    ``max_slots`` and ``max_apps`` (see :mod:`gpu_env.observation` for every column):
    ``jobs`` (one row per job: size, duration, weight, release, deadline, earliest
    feasible start, value now, real-time cost, fragmentation of each fit rule, a
    validity flag), ``grid`` (GPUs x slots from the clock: placed and inherited
    work), ``gpus``, ``slots`` (load, real-time, demand and free capacity per
    slot), ``apps`` (each app's demand, allocation and ramp floor), ``app_info``,
    ``globals`` (clock, sizes, objective so far) and ``action_mask`` (int8).

    ## Rewards

    The change in the plan's objective (SPEC section 3: priority-weighted job value
    less the real-time shortfall penalty) divided by ``reward_scale``; the first
    step also pays what the plan is worth before any action (inherited work and
    the initial shortfall). The undiscounted return of an episode is therefore
    exactly ``objective / reward_scale``. The default scale is ``G * T * w_max``
    (every GPU-slot at the scenario's largest job weight): a return of 1 would be
    a full cluster of the most valuable work.

    ## Starting State

    Inherited jobs placed, real-time curves covering demand where capacity allows,
    the clock at the first slot where some job can start. With a generator as
    ``scenario``, each ``reset(seed=...)`` draws a fresh scenario from ``self.np_random``.

    ## Episode End

    Terminated when no pending job can start at any slot from the clock on (after
    the last useful placement or ADVANCE). A valid episode takes at most
    ``jobs + T + 1`` steps; it is truncated after ``4 * (jobs + T + 1)`` steps,
    which only forbidden actions can reach. At the end ``info["plan"]`` is the plan
    as SPEC's JSON (with metrics) and ``info["metrics"]`` its metrics.

    ## Arguments

    * ``scenario``: a path, a :class:`~gpu_env.scenario.Scenario`, a family name,
      a list of families (or (name, weight) pairs), a mapping
      ``{"families": ..., "gpus": [lo, hi], "jobs": [lo, hi]}`` or a
      :class:`~gpu_env.sampler.ScenarioSampler`; default :data:`DEFAULT_SCENARIO`, the seven
      generator families at their own sizes (``gym.make("GpuCluster-v0")`` draws a day of one of them
      at each reset, seeded by ``reset(seed=...)``).
    * ``actions``: ``"fit"`` or ``"block"`` (through ``gymnasium.make``, ``"list"`` gives
      :class:`gpu_env.list_env.GpuClusterListEnv`, the learned planner's action space).
    * ``trade_realtime``: placements may lower real-time curves (paying the
      penalty); when False jobs use only capacity the real-time curves leave.
    * ``base_curves``: ``"cover"`` (serve the demand) or a function of the scenario
      that returns base curves (apps x T) keeping rule 6, e.g.
      ``agents.fifo.peak_reservation``.
    * ``max_gpus``, ``max_jobs``, ``max_slots``, ``max_apps``: padded sizes;
      default the largest the source can produce.
    * ``reward_scale``: a number, or None for ``G * T * w_max`` of each scenario.
    * ``invalid_action``: ``"ignore"`` or ``"raise"``.
    * ``render_mode``: ``"ansi"`` (text grid) or ``"rgb_array"`` (the report's figure).

    ## Version History

    * v0: initial version; ``info["action_mask"]`` int8 (was bool) and a default ``scenario``.

    >>> import gymnasium as gym
    >>> import gpu_env
    >>> env = gym.make("GpuCluster-v0", scenario="training-heavy")
    >>> obs, info = env.reset(seed=0)
    >>> env.action_space.seed(0)
    0
    >>> done, ret = False, 0.0
    >>> while not done:
    ...     action = env.action_space.sample(mask=info["action_mask"])
    ...     obs, reward, terminated, truncated, info = env.step(action)
    ...     ret += reward
    ...     done = terminated or truncated
    >>> from gpu_env.plan import Plan
    >>> from gpu_env.validation import validate
    >>> validate(env.unwrapped.episode.scenario, Plan.from_dict(info["plan"]))
    []
    >>> abs(ret * info["reward_scale"] - info["plan"]["metrics"]["objective"]) < 1e-3
    True
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 2}

    def __init__(
        self,
        scenario: Any = DEFAULT_SCENARIO,
        *,
        actions: str = "fit",
        trade_realtime: bool = True,
        base_curves: str | BaseCurvesFn = "cover",
        max_gpus: int | None = None,
        max_jobs: int | None = None,
        max_slots: int | None = None,
        max_apps: int | None = None,
        reward_scale: float | None = None,
        invalid_action: str = "ignore",
        render_mode: str | None = None,
    ) -> None:
        self.source = resolve_source(scenario)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode: expected one of {self.metadata['render_modes']}, got {render_mode!r}")
        if invalid_action not in tuple(InvalidAction):
            raise ValueError(f"invalid_action: expected 'ignore' or 'raise', got {invalid_action!r}")
        if not (base_curves == "cover" or callable(base_curves)):
            raise ValueError(f"base_curves: expected 'cover' or a function of the scenario, got {base_curves!r}")
        if actions not in {mode.value for mode in ActionMode}:
            raise ValueError(f"actions: expected 'fit', 'block' or 'list', got {actions!r}")
        if reward_scale is not None and not reward_scale > 0:
            raise ValueError(f"reward_scale: expected a positive number, got {reward_scale}")
        self.render_mode = render_mode
        self.trade_realtime = bool(trade_realtime)
        self.base_curves = base_curves
        self.fixed_reward_scale = reward_scale
        self.invalid_action = InvalidAction(invalid_action)

        sizes = self._source_limits()
        given = {"max_gpus": max_gpus, "max_jobs": max_jobs, "max_slots": max_slots, "max_apps": max_apps}
        for name, value in given.items():
            if value is not None:
                if value < 1 and not (name == "max_apps" and value == 0):
                    raise ValueError(f"{name}: expected a positive integer, got {value}")
                sizes[name] = value
        sizes["max_apps"] = max(sizes["max_apps"], 1)  # keep every Box non-empty
        sizes["max_jobs"] = max(sizes["max_jobs"], 1)
        self.limits = Limits(**sizes)
        self.layout = ActionLayout.make(ActionMode(actions), self.limits.max_jobs, self.limits.max_gpus)

        self.action_space = spaces.Discrete(self.layout.n)
        boxes = {}
        for key, shape in shapes(self.limits, self.layout.n).items():
            if key in ("action_mask", "grid"):
                boxes[key] = spaces.Box(0, 1, shape, dtype=np.int8 if key == "action_mask" else np.float32)
            else:
                boxes[key] = spaces.Box(-np.inf, np.inf, shape, dtype=np.float32)
        self.observation_space = spaces.Dict(boxes)
        self.episode: Episode | None = None
        self.encoder: Encoder | None = None
        self.reward_scale = 1.0
        self._steps = 0
        self._step_limit = 0

    def _source_limits(self) -> dict[str, int]:
        if isinstance(self.source, ScenarioSampler):
            return self.source.limits()
        sc = self.source
        return {
            "max_gpus": sc.gpus,
            "max_jobs": sum(job.running_on is None for job in sc.jobs),
            "max_slots": sc.slots,
            "max_apps": len(sc.apps),
        }

    # ------------------------------------------------------------------ the Gymnasium API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        """Start an episode; ``options={"scenario": ...}`` plans that scenario (path or Scenario) once."""
        super().reset(seed=seed)
        if options and options.get("scenario") is not None:
            scenario = resolve_source(options["scenario"])
            if isinstance(scenario, ScenarioSampler):
                scenario = scenario.draw(self.np_random)
        elif isinstance(self.source, ScenarioSampler):
            scenario = self.source.draw(self.np_random)
        else:
            scenario = self.source
        base = None if self.base_curves == "cover" else self.base_curves(scenario)
        episode = Episode(scenario, self.layout, trade_realtime=self.trade_realtime, base_curves=base)
        self.reward_scale = self.fixed_reward_scale or float(scenario.gpus * scenario.slots * episode.w_max)
        self.encoder = Encoder(episode, self.limits, self.reward_scale)
        self.episode = episode
        self._steps = 0
        self._step_limit = 4 * (episode.rows.size + scenario.slots + 1)
        return self._observation(), self._info()

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        """Take an action (see the class docstring); a forbidden one changes nothing."""
        ep = self._require_episode()
        action = int(action)
        problem = ep.action_problem(action)
        if problem is not None:
            if self.invalid_action is InvalidAction.RAISE:
                raise InvalidActionError(problem)
            reward = 0.0
        else:
            reward = ep.apply(action) / self.reward_scale
        self._steps += 1
        terminated = ep.done
        truncated = not terminated and self._steps >= self._step_limit
        info = self._info(end=terminated or truncated)
        if problem is not None:
            info["invalid_action"] = problem
        return self._observation(), reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """Bool mask over the actions: True where allowed (sb3-contrib's ``MaskablePPO`` contract)."""
        return self._require_episode().action_mask()

    def render(self) -> str | np.ndarray | None:
        """The plan so far: a text grid (``ansi``) or the report's allocation figure as RGB (``rgb_array``)."""
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='ansi' or 'rgb_array'")
            return None
        ep = self._require_episode()
        from gpu_env import render

        plan = ep.plan()
        if self.render_mode == "ansi":
            status = "ended" if ep.done else f"clock at slot {ep.clock}"
            return f"{render.text_grid(ep.scenario, plan)}\n{status}\n"
        ax = render.plot_allocation(ep.scenario, plan)
        if not ep.done:
            ax.axvline(ep.clock, color="black", linewidth=1.5, linestyle=":")
        fig = ax.figure
        fig.canvas.draw()
        image = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
        import matplotlib.pyplot as plt

        plt.close(fig)
        return image

    # ------------------------------------------------------------------ helpers

    def _require_episode(self) -> Episode:
        if self.episode is None:
            raise RuntimeError("call reset() before step(), action_masks() or render()")
        return self.episode

    def _observation(self) -> dict[str, np.ndarray]:
        return self.encoder.observe()

    def _info(self, end: bool = False) -> dict[str, Any]:
        ep = self._require_episode()
        info: dict[str, Any] = {
            "action_mask": ep.action_mask().astype(np.int8),  # what Discrete.sample(mask=) takes
            "clock": ep.clock,
            "objective": ep.objective,
            "reward_scale": self.reward_scale,
            "scenario": ep.scenario.name,
        }
        if end:
            plan = ep.plan()
            info["plan"] = plan.to_dict()
            info["metrics"] = plan.metrics.to_dict() if plan.metrics else None
        return info
