"""GpuCluster-v0 with ``actions="list"``: each step names the next job of the queue, the rules place it.

The action space of the learned planner (``docs/environment.md``, "The list
action space"): a decision is cheap because the placement is not part of it.
The environment places the chosen job with the rules' own placement
(:mod:`gpu_env.listsched`: its earliest feasible start on the lowest free
block, or a start that takes real-time capacity when the job's value beats the
extra penalty), the same compiled step the planner's decoder runs.

>>> import gymnasium as gym
>>> import numpy as np
>>> import gpu_env
>>> env = gym.make("GpuCluster-v0", scenario="mixed-control", actions="list")
>>> obs, info = env.reset(seed=0)
>>> ret, done = 0.0, False
>>> while not done:
...     action = int(np.flatnonzero(obs["action_mask"])[0])
...     obs, reward, terminated, truncated, info = env.step(action)
...     ret += reward
...     done = terminated or truncated
>>> plan = env.unwrapped.plan()
>>> gpu_env.validate(env.unwrapped.scenario, plan)
[]
>>> abs(ret * info["reward_scale"] - gpu_env.compute_metrics(env.unwrapped.scenario, plan).objective) < 1e-6
True
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gpu_env.listsched import (
    CHOICE,
    MODES,
    ListInstance,
    Live,
    finish_after,
    fits_somewhere,
    new_live,
    new_scratch,
    take_turn,
)
from gpu_env.plan import Placement, Plan
from gpu_env.queue_features import CLUSTER_FEATURES, JOB_FEATURES, cluster_features, job_features
from gpu_env.sampler import ScenarioSampler, resolve_source
from gpu_env.scenario import Scenario

DYNAMIC_FEATURES: tuple[str, ...] = ("decided", "placed", "start", "fits")
"""Columns after :data:`~gpu_env.queue_features.JOB_FEATURES` in ``obs["jobs"]``: the job had its turn,
it is placed, its start / T (0 while unplaced), and whether it fits somewhere now (the mask)."""

PROGRESS_FEATURES: tuple[str, ...] = ("objective", "decided_share")
"""Columns after :data:`~gpu_env.queue_features.CLUSTER_FEATURES` in ``obs["cluster"]``: the plan's
objective so far / reward scale, and the share of the queue that had its turn."""


class InvalidListActionError(ValueError):
    """A list action the mask forbids, with ``invalid_action="raise"``."""


class GpuClusterListEnv(gym.Env):
    """Plan a GPU cluster's day by choosing the order of the queue; the rules place each job.

    ## Action Space

    ``Discrete(max_jobs)``: action ``i`` gives its turn to the i-th job to place
    (the jobs without ``running_on``, in file order). ``obs["action_mask"]`` and
    :meth:`action_masks` allow exactly the jobs that have not had their turn and
    have a start the rules allow (block free, capacity above the real-time ramp
    floors). A job whose turn places nothing is dropped from the queue: with
    ``trades="inline"`` when its only starts take real-time capacity worth more
    than the job, with ``"off"`` whenever its only starts take real-time
    capacity, and with ``"after"`` until the second turn at the episode's end.

    ## Observation Space

    ``jobs`` (max_jobs, F): :data:`~gpu_env.queue_features.JOB_FEATURES` then
    :data:`DYNAMIC_FEATURES`; ``cluster``: :data:`~gpu_env.queue_features.CLUSTER_FEATURES`
    then :data:`PROGRESS_FEATURES`; ``action_mask`` (max_jobs,) int8.

    ## Rewards

    The change of the plan's objective (SPEC section 3) divided by the reward
    scale (``G * T * w_max`` by default); the first step also pays the objective
    of the start (inherited work, the initial shortfall), so an episode's
    rewards add up to ``objective / reward_scale``.

    ## Episode End

    Terminated when no job the mask allows is left (when none is allowed from the
    start, the first step ends the episode, whatever its action). With
    ``trades="after"`` the jobs dropped for want of room then take a second turn
    in which they may take real-time capacity (most valuable first), inside the
    last step. Truncated after ``4 * (jobs + 1)`` steps, which only forbidden
    actions can reach.

    ## Arguments

    * ``scenario``: as :class:`gpu_env.env.GpuClusterEnv` (a path, a Scenario, families, a sampler).
    * ``trades``: ``"inline"`` (a job may take real-time capacity at its turn), ``"after"`` or ``"off"``.
    * ``max_jobs``: padded queue length (default the largest the source can produce).
    * ``reward_scale``: a number, or None for ``G * T * w_max`` of each scenario.
    * ``invalid_action``: ``"ignore"`` (nothing changes, reward 0, ``info["invalid_action"]``) or ``"raise"``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 2}

    def __init__(
        self,
        scenario: Any,
        *,
        trades: str = "inline",
        max_jobs: int | None = None,
        reward_scale: float | None = None,
        invalid_action: str = "ignore",
        render_mode: str | None = None,
    ) -> None:
        self.source = resolve_source(scenario)
        if trades not in MODES:
            raise ValueError(f"trades: expected one of {', '.join(MODES)}, got {trades!r}")
        if invalid_action not in ("ignore", "raise"):
            raise ValueError(f"invalid_action: expected 'ignore' or 'raise', got {invalid_action!r}")
        if reward_scale is not None and not reward_scale > 0:
            raise ValueError(f"reward_scale: expected a positive number, got {reward_scale}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode: expected one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.trades = trades
        self.fixed_reward_scale = reward_scale
        self.invalid_action = invalid_action
        self.render_mode = render_mode
        if isinstance(self.source, ScenarioSampler):
            limit = self.source.limits()["max_jobs"]
        else:
            limit = sum(job.running_on is None for job in self.source.jobs)
        if max_jobs is not None and max_jobs < 1:
            raise ValueError(f"max_jobs: expected a positive integer, got {max_jobs}")
        self.max_jobs = max(max_jobs or limit, 1)
        f, c = len(JOB_FEATURES) + len(DYNAMIC_FEATURES), len(CLUSTER_FEATURES) + len(PROGRESS_FEATURES)
        self.action_space = spaces.Discrete(self.max_jobs)
        self.observation_space = spaces.Dict(
            {
                "jobs": spaces.Box(-np.inf, np.inf, (self.max_jobs, f), dtype=np.float32),
                "cluster": spaces.Box(-np.inf, np.inf, (c,), dtype=np.float32),
                "action_mask": spaces.Box(0, 1, (self.max_jobs,), dtype=np.int8),
            }
        )
        self.scenario: Scenario | None = None
        self.inst: ListInstance | None = None
        self.live: Live | None = None
        self.rows = np.zeros(0, dtype=np.int64)
        self.reward_scale = 1.0
        self._mask = np.zeros(0, dtype=np.bool_)
        self._paid = 0.0
        self._steps = 0
        self._step_limit = 0
        self._finished = False
        self._scratch: Any = None
        self._fits = np.zeros(0, dtype=np.bool_)
        self._static_jobs = np.zeros((0, 0), dtype=np.float32)
        self._static_cluster = np.zeros(0, dtype=np.float32)

    # ------------------------------------------------------------------ the Gymnasium API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        """Start an episode; ``options={"scenario": ...}`` plans that scenario once."""
        super().reset(seed=seed)
        source = resolve_source(options["scenario"]) if options and options.get("scenario") is not None else self.source
        scenario = source.draw(self.np_random) if isinstance(source, ScenarioSampler) else source
        inst = ListInstance.build(scenario)
        rows = np.flatnonzero(inst.pending)
        if rows.size > self.max_jobs:
            raise ValueError(
                f"scenario {scenario.name!r}: {rows.size} jobs to place, more than max_jobs={self.max_jobs}"
            )
        self.scenario, self.inst, self.rows = scenario, inst, rows
        self.live = new_live(inst)
        self._scratch = new_scratch(inst)  # the compiled step's work space, reused by every step
        self._fits = np.zeros(inst.k.size, dtype=np.bool_)
        w_max = max((job.weight for job in scenario.jobs), default=1.0) or 1.0
        self.reward_scale = self.fixed_reward_scale or float(scenario.gpus * scenario.slots * w_max)
        self._static_jobs = job_features(scenario, inst)[rows]
        self._static_cluster = cluster_features(scenario, inst)
        self._paid = 0.0
        self._steps = 0
        self._step_limit = 4 * (rows.size + 1)
        self._finished = False
        self._update_mask()
        return self._observation(), self._info()

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        """Give the chosen job its turn; the reward is the objective's change / reward scale."""
        inst, live = self._require()
        self._steps += 1
        if not self._mask.any():  # nothing was allowed from the start: any action ends the episode
            return self._end(terminated=True)
        a = int(action)
        if not (0 <= a < self.rows.size and self._mask[a]):
            reason = "the mask forbids this job" if 0 <= a < self.rows.size else f"no job in row {a}"
            if self.invalid_action == "raise":
                raise InvalidListActionError(f"action {a}: {reason}")
            if self._steps >= self._step_limit:
                return self._end(terminated=False)
            return self._observation(), 0.0, False, False, {**self._info(), "invalid_action": reason}
        take_turn(inst, live, int(self.rows[a]), self.trades == "inline", CHOICE, self._scratch)
        self._update_mask()
        terminated = not self._mask.any()
        if terminated:
            return self._end(terminated=True)
        return self._observation(), self._pay(), False, False, self._info()

    def _pay(self) -> float:
        """The objective's change since the last step, / reward scale."""
        _, live = self._require()
        objective = float(live.money[0] - live.money[1])
        reward = (objective - self._paid) / self.reward_scale
        self._paid = objective
        return reward

    def _end(self, terminated: bool) -> tuple[dict, float, bool, bool, dict]:
        """The last step: with ``trades="after"`` the jobs left out take their second turn first."""
        inst, live = self._require()
        if terminated and self.trades == "after" and not self._finished:
            finish_after(inst, live, CHOICE, self._scratch)
        self._finished = True
        return self._observation(), self._pay(), terminated, not terminated, self._info()

    def action_masks(self) -> np.ndarray:
        """The jobs that may take their turn (sb3-contrib's MaskablePPO contract), padded to ``max_jobs``."""
        out = np.zeros(self.max_jobs, dtype=np.bool_)
        out[: self._mask.size] = self._mask
        return out

    def plan(self, scheduler: str = "env") -> Plan:
        """The plan so far (valid at every step)."""
        _, live = self._require()
        assert self.scenario is not None
        placements = [
            Placement(job.id, int(live.start[j]), tuple(range(int(live.first[j]), int(live.first[j]) + job.gpus)))
            for j, job in enumerate(self.scenario.jobs)
            if live.start[j] >= 0
        ]
        curves = {app.name: [int(x) for x in live.curves[a]] for a, app in enumerate(self.scenario.apps)}
        return Plan(self.scenario.name, scheduler, placements, curves)

    def render(self) -> str | None:
        """The plan so far as text (``render_mode="ansi"``)."""
        if self.render_mode != "ansi":
            return None
        from gpu_env.render import text_grid

        assert self.scenario is not None
        return text_grid(self.scenario, self.plan())

    # ------------------------------------------------------------------ helpers

    def _require(self) -> tuple[ListInstance, Live]:
        if self.inst is None or self.live is None:
            raise RuntimeError("call reset() before step()")
        return self.inst, self.live

    def _update_mask(self) -> None:
        inst, live = self._require()
        fits_somewhere(inst, live, self._fits, self._scratch)
        self._mask = self._fits[self.rows]

    def _observation(self) -> dict[str, np.ndarray]:
        inst, live = self._require()
        n = self.rows.size
        jobs = np.zeros(self.observation_space["jobs"].shape, dtype=np.float32)
        f = len(JOB_FEATURES)
        jobs[:n, :f] = self._static_jobs
        jobs[:n, f] = live.decided[self.rows]
        jobs[:n, f + 1] = live.start[self.rows] >= 0
        jobs[:n, f + 2] = np.maximum(live.start[self.rows], 0) / inst.slots
        jobs[:n, f + 3] = self._mask
        objective = float(live.money[0] - live.money[1])
        progress = [objective / self.reward_scale, float(live.decided[self.rows].mean()) if n else 1.0]
        cluster = np.concatenate([self._static_cluster, np.array(progress, dtype=np.float32)])
        return {"jobs": jobs, "cluster": cluster, "action_mask": self.action_masks().astype(np.int8)}

    def _info(self) -> dict[str, Any]:
        live = self.live
        objective = float(live.money[0] - live.money[1]) if live is not None else 0.0
        return {"action_mask": self.action_masks(), "reward_scale": self.reward_scale, "objective": objective}


def make_env(scenario: Any, *, actions: str = "fit", **kwargs: Any) -> gym.Env:
    """GpuCluster-v0's entry point: the list action space for ``actions="list"``, else FIT or BLOCK.

    (:class:`GpuClusterListEnv` and :class:`gpu_env.env.GpuClusterEnv`; the arguments are theirs.)
    """
    if actions == "list":
        return GpuClusterListEnv(scenario, **kwargs)
    from gpu_env.env import GpuClusterEnv

    return GpuClusterEnv(scenario, actions=actions, **kwargs)
