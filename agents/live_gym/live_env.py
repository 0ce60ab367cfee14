"""GpuClusterLive-v0: one day played live, a slot a step (docs/environment.md, "The live day").

Each episode is a day of a generator family, drawn from the family's history: days of seeds that stand for
the cluster's past (:data:`TRAIN_SEEDS`), never the days a planner is evaluated on (the live benchmark's
seeds, :data:`VALIDATION_SEEDS`, the scenario files' seeds). The day happens as the simulator plays it
(:class:`agents.simulator.simulation.LiveDay`): jobs appear at their release, the actual demand is drawn
around the forecast (``NoiseModel(sigma)``), and jobs end at their actual runtimes (``runtime_model``).

A step is one slot. The observation and the action are :mod:`agents.live_gym.live_policy`'s: what a live
system knows at the slot, and a hold bit per start-now job of the base plan with a headroom level per app.
The base planner places everything else, and the masks are the rules: ``action_masks()`` (the dimensions'
bool masks concatenated, sb3-contrib's contract) and ``info["action_mask"]`` (a tuple of one int8 mask per
dimension, what ``env.action_space.sample(mask=info["action_mask"])`` takes). A value a mask forbids is read
as 0 (:func:`allowed`). The reward of a step is what its
slot of the realized day earns (:func:`~agents.live_gym.live_policy.slot_reward`): with ``baseline=None``
the rewards of an episode add up to the executed day's objective. With ``baseline="greedy"`` (the default
for training) each slot's reward has rolling greedy's reward of the same slot of the same day taken off,
and is divided by rolling greedy's objective: the episode's return is the day's gain over rolling greedy
as a share of it (an input-dependent baseline, as Decima's: the same arrivals, demand and runtimes on
both sides).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from agents.live.anticipate import LIVE_FORECAST
from agents.live.forecast import NoiseModel
from agents.live.runtimes import draw_runtimes
from agents.live_gym.live_policy import (
    HIGH,
    LOW,
    OBSERVATION_SIZE,
    SlotView,
    action_nvec,
    action_offsets,
    decide_action,
    dimension_masks,
    inherited_value,
    slot_reward,
    view,
)
from agents.simulator.simulation import LiveDay, Simulation, realized_day, rolling
from gpu_env.generators import FAMILIES, generate
from gpu_env.scenario import Scenario
from gpu_env.validation import validate

TRAIN_SEEDS = range(20_000_000, 20_100_000)
"""Seeds of the days an environment draws by default: the families' past, played by no benchmark."""
VALIDATION_SEEDS = range(30_000_000, 30_000_100)
"""Seeds of the days a checkpoint is chosen on (never trained on, never evaluated on)."""
BASELINES = (None, "greedy")


class GpuClusterLiveEnv(gym.Env):
    """One live day of a family, a slot a step (module docstring).

    Args:
        families: The families days are drawn from (each equally often).
        sigma: The forecast error of the actual demand, or several to draw from.
        runtime_model: ``exact`` or ``trace``, or several to draw from.
        seeds: The seeds days are drawn from (default :data:`TRAIN_SEEDS`).
        baseline: None (rewards add up to the objective) or ``greedy`` (module docstring).
        base: The base planner.
        check: Validate every slot's plan against its state (a broken rule raises).
        render_mode: None (nothing to render).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self,
        families: Sequence[str] = tuple(FAMILIES),
        *,
        sigma: float | Sequence[float] = (0.0, 0.3),
        runtime_model: str | Sequence[str] = ("exact", "trace"),
        seeds: Sequence[int] = TRAIN_SEEDS,
        baseline: str | None = "greedy",
        base: str = "greedy",
        check: bool = False,
        render_mode: str | None = None,
    ) -> None:
        unknown = [f for f in families if f not in FAMILIES]
        if unknown or not families:
            raise ValueError(f"families: expected some of {', '.join(FAMILIES)}, got {list(families)}")
        if baseline not in BASELINES:
            raise ValueError(f"baseline: expected None or 'greedy', got {baseline!r}")
        if render_mode is not None:
            raise ValueError("GpuClusterLive-v0 renders nothing (render_mode must be None)")
        self.families = tuple(families)
        self.sigmas = (float(sigma),) if isinstance(sigma, int | float) else tuple(float(s) for s in sigma)
        self.models = (runtime_model,) if isinstance(runtime_model, str) else tuple(runtime_model)
        self.seeds = seeds
        self.baseline = baseline
        self.base = base
        self.check = check
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(LOW, HIGH, shape=(OBSERVATION_SIZE,), dtype=np.float32)
        self.action_space = gym.spaces.MultiDiscrete(action_nvec())
        self.day: Scenario | None = None
        self.actual: Scenario | None = None
        self._live: LiveDay | None = None
        self._view: SlotView | None = None
        self._baseline = np.zeros(0)
        self._scale = 1.0
        self._about: dict[str, Any] = {}

    # ------------------------------------------------------------------------- gymnasium

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Draw a day (or play the one ``options`` names: ``family``, ``seed``, ``sigma``, ``runtime_model``)."""
        super().reset(seed=seed)
        options = dict(options or {})
        rng = self.np_random
        family = options.get("family") or self.families[int(rng.integers(len(self.families)))]
        day_seed = int(options["seed"]) if "seed" in options else int(self.seeds[int(rng.integers(len(self.seeds)))])
        sigma = float(options.get("sigma", self.sigmas[int(rng.integers(len(self.sigmas)))]))
        model = options.get("runtime_model") or self.models[int(rng.integers(len(self.models)))]
        day = generate(family, day_seed)
        demand = NoiseModel(sigma).draw(day, day_seed)
        runtimes = draw_runtimes(day, model, day_seed)
        self.play(day, realized_day(day, demand, runtimes), runtimes)
        self._about = {"family": family, "seed": day_seed, "sigma": sigma, "runtime_model": model}
        return self._view.observation.copy(), self._info()  # type: ignore[union-attr]

    def play(
        self, day: Scenario, actual: Scenario, runtimes: dict[str, int] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start the episode on a given day and its realized day (what :meth:`reset` does with a drawn one).

        Returns:
            The first observation and its info, as :meth:`reset` does.
        """
        self.day, self.actual = day, actual
        self._live = LiveDay(day, actual, corrector=LIVE_FORECAST, runtimes=runtimes)
        self._baseline = np.zeros(day.slots)
        self._scale = 1.0
        if self.baseline == "greedy":
            greedy = rolling(day, "greedy", actual, corrector=LIVE_FORECAST, runtimes=runtimes, check=False)
            self._baseline = slot_rewards(greedy)
            self._scale = max(abs(greedy.metrics.objective), 1.0)
            self.greedy_objective = greedy.metrics.objective
        self._about = {}
        self._observe()
        return self._view.observation.copy(), self._info()  # type: ignore[union-attr]

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Commit this slot as the action decides; the reward is what the slot earns (module docstring)."""
        live, slot = self._live, self._view
        if live is None or slot is None or live.done:
            raise RuntimeError("step() before reset(), or after the day's last slot")
        action, ignored = allowed(slot, action)
        decision = decide_action(slot, action, base=self.base)
        if self.check:
            problems = validate(decision.scenario, decision.plan)
            if problems:
                raise RuntimeError(f"slot {live.t}: the plan breaks a rule: {problems[0]}")
        t = live.t
        record = live.commit(decision)
        earned = slot_reward(self.actual, record.started, record.app_gpus, t)  # type: ignore[arg-type]
        if t == 0:
            earned += inherited_value(self.actual)  # type: ignore[arg-type]
        reward = (earned - float(self._baseline[t])) / self._scale
        terminated = live.done
        info: dict[str, Any]
        if terminated:
            self._view = None
            result = live.result("live-env")
            info = {**self._about, "slot": t, "objective": result.metrics.objective, "result": result}
            if self.baseline == "greedy":
                info["greedy_objective"] = self.greedy_objective
            obs = np.zeros(OBSERVATION_SIZE, dtype=np.float32)
            info["action_mask"] = dimension_masks(np.ones(int(action_nvec().sum()), dtype=bool))
        else:
            self._observe()
            obs = self._view.observation.copy()  # type: ignore[union-attr]
            info = self._info()
        info["ignored"] = ignored
        return obs, float(reward), terminated, False, info

    def action_masks(self) -> np.ndarray:
        """The allowed values of each action dimension, concatenated (sb3-contrib's MaskablePPO reads it)."""
        if self._view is None:
            return np.ones(int(action_nvec().sum()), dtype=bool)
        return self._view.mask.copy()

    # ------------------------------------------------------------------------- inside

    def _observe(self) -> None:
        state, ran = self._live.state()  # type: ignore[union-attr]
        self._view = view(state, self._live.t, ran, base=self.base)  # type: ignore[union-attr]

    def _info(self) -> dict[str, Any]:
        mask = dimension_masks(self._view.mask)  # type: ignore[union-attr]
        return {**self._about, "slot": self._live.t, "action_mask": mask}  # type: ignore[union-attr]


def allowed(slot: SlotView, action: np.ndarray | Sequence[int]) -> tuple[np.ndarray, int]:
    """The action with each value its mask forbids read as 0 (start as planned, no headroom), and how many were.

    A hold of a job that does not start now, or a headroom for an app the cluster does not have, means
    nothing: it is ignored (``info["ignored"]`` counts them), as an unmasked sample of the space may hold them.
    """
    action = np.asarray(action, dtype=np.int64).reshape(-1).copy()
    nvec = action_nvec()
    if action.shape != nvec.shape:
        raise ValueError(f"action: expected {len(nvec)} values, got {action.shape[0]}")
    offsets = action_offsets()
    bad = (action < 0) | (action >= nvec)
    bad |= ~slot.mask[offsets + np.clip(action, 0, nvec - 1)]
    action[bad] = 0
    return action, int(bad.sum())


def slot_rewards(simulation: Simulation) -> np.ndarray:
    """Each slot's reward of an executed live day (:func:`slot_reward`; slot 0 with the inherited jobs)."""
    actual = simulation.actual
    out = np.array([slot_reward(actual, r.started, r.app_gpus, r.slot) for r in simulation.slots], dtype=np.float64)
    if out.size:
        out[0] += inherited_value(actual)
    return out
