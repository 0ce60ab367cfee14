"""The allocator's learned fast mode: roll out an exported policy (ONNX) on the batched engine, no torch.

The policy file is an ONNX model written by :mod:`agents.learned.export` with a JSON
card beside it (``default.onnx`` + ``default.json``). The shipped policy is
package data (``agents/policies/``), found with :mod:`importlib.resources`, so
an installed wheel plans without the repository. Planning loads it with
onnxruntime (one thread) and runs the rollouts as one batch of
:class:`gpu_env.batch.BatchEngine` episodes (:func:`rollout_batch`): one
onnxruntime call per decision for all of them, on the observations
:class:`gpu_env.observation.Encoder` would give; it applies the action masks
itself and decodes the chosen actions; stable-baselines3 and torch are never
imported. :func:`rollout_episodes` is the reference form, one
:class:`gpu_env.episode.Episode` per rollout.

``options.samples`` rollouts run per plan (default
:data:`~agents.options.DEFAULT_SAMPLES`): the first takes the most likely action
at every step, the others sample from the policy (seeded by ``options.seed``);
the most valuable plan wins, and only its plan is built. ``samples=1`` is the fastest. ``options.guard``
names a baseline computed too and returned when it is worth more: greedy as
shipped (the learned mode is never below the heuristic, nor FIFO), FIFO, or
none (the policy alone). ``plan.info`` records the samples, every candidate's objective and
the winner. Every plan is valid by construction (the masks allow only actions
that keep SPEC section 2) and is validated again in the tests.

>>> from gpu_env.generators import generate
>>> plan(generate("training-heavy", seed=0)).scheduler
'ppo'
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from agents.options import DEFAULT_SAMPLES as DEFAULT_SAMPLES  # re-exported: callers read it here
from agents.options import Guard, PlanOptions
from gpu_env.batch.engine import BatchEngine
from gpu_env.batch.observe import observe
from gpu_env.batch.state import Sizes
from gpu_env.episode import FIT_RULES, ActionLayout, ActionMode, Episode
from gpu_env.metrics import compute_metrics
from gpu_env.observation import (
    APP_CURVES,
    APP_FEATURES,
    GLOBAL_FEATURES,
    GPU_FEATURES,
    JOB_FEATURES,
    SLOT_FEATURES,
    Encoder,
    Limits,
)
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario

ENV_ID = "GpuCluster-v0"
CARD_FORMAT = "gpualloc-policy/1"
INPUTS: tuple[str, ...] = ("jobs", "gpus", "slots", "apps", "app_info", "globals")
# The shipped policy, package data of ``agents`` (pyproject.toml). pip installs a wheel's files on
# disk, so the resource is a path there; onnxruntime and the card check read it as a file.
DEFAULT_POLICY = Path(str(resources.files("agents").joinpath("policies", "default.onnx")))


class PolicyError(Exception):
    """The learned planner cannot run here: no usable policy file, or no onnxruntime.

    The policy file is missing, corrupt, or made for another environment, or onnxruntime does not import.
    Not a ``ValueError``: a handler that falls back on a bad policy file must not also swallow a
    ``ValueError`` raised by a bug inside the planner.
    """


def observation_spec() -> dict[str, Any]:
    """What a policy must have been trained on: feature names per observation key and the action layout."""
    return {
        "env": ENV_ID,
        "actions": ActionMode.FIT.value,
        "fit_rules": list(FIT_RULES),
        "inputs": list(INPUTS),
        "features": {
            "jobs": list(JOB_FEATURES),
            "gpus": list(GPU_FEATURES),
            "slots": list(SLOT_FEATURES),
            "apps": list(APP_CURVES),
            "app_info": list(APP_FEATURES),
            "globals": list(GLOBAL_FEATURES),
        },
        "reward_scale": "gpus * slots * w_max",
        "trade_realtime": True,
        "realtime": "cover",
    }


LogitsFn = Callable[[dict[str, np.ndarray]], np.ndarray]


@dataclass
class LoadedPolicy:
    """An exported policy ready to plan: its ONNX session and card.

    Attributes:
        path: The ONNX file.
        card: The card's contents.
        sha256: Hex SHA-256 of the ONNX file (what a plan records, not the machine's path).
        limits: The padded sizes the policy was trained with (observations are
            padded at least to these, so features are scaled as in training).
        logits: Batch of observations -> (B, n_actions) raw logits.
        warm: Whether :func:`warm_up` has planned with it in this process.
    """

    path: Path
    card: dict[str, Any]
    sha256: str
    limits: Limits
    logits: LogitsFn
    warm: bool = False


_CACHE: dict[tuple[str, float, float], LoadedPolicy] = {}


def card_path(policy: Path) -> Path:
    """The card beside a policy file: same name, ``.json``."""
    return Path(policy).with_suffix(".json")


def load_policy(path: str | os.PathLike[str] | None = None) -> LoadedPolicy:
    """Load (once per file version) an exported policy and check its card against this environment.

    Args:
        path: The ``.onnx`` file; default the shipped ``agents/policies/default.onnx``.

    Raises:
        PolicyError: The file or its card is missing or unreadable, or the card's
            observation spec differs from this environment's.
    """
    onnx_path = Path(path) if path is not None else DEFAULT_POLICY
    card_file = card_path(onnx_path)
    for file, what in ((onnx_path, "policy file"), (card_file, "policy card")):
        if not file.is_file():
            raise PolicyError(f"{file}: {what} not found (train one with train.py, or pass --policy)")
    key = (str(onnx_path.resolve()), onnx_path.stat().st_mtime, card_file.stat().st_mtime)
    if key in _CACHE:
        return _CACHE[key]
    card = _read_card(card_file)
    _check_spec(card, card_file)
    limits = _card_limits(card, card_file)
    logits = _onnx_logits(onnx_path, card)
    loaded = LoadedPolicy(onnx_path, card, hashlib.sha256(onnx_path.read_bytes()).hexdigest(), limits, logits)
    _CACHE[key] = loaded
    return loaded


def _read_card(card_file: Path) -> dict[str, Any]:
    try:
        card = json.loads(card_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PolicyError(f"{card_file}: not a readable JSON policy card ({exc})") from None
    if not isinstance(card, dict):
        raise PolicyError(f"{card_file}: expected a JSON object, got {type(card).__name__}")
    if card.get("format") != CARD_FORMAT:
        raise PolicyError(f"{card_file}: field 'format': expected {CARD_FORMAT!r}, got {card.get('format')!r}")
    return card


def _check_spec(card: dict[str, Any], card_file: Path) -> None:
    spec = card.get("observation_spec")
    if not isinstance(spec, dict):
        raise PolicyError(f"{card_file}: field 'observation_spec' missing or not an object")
    expected = observation_spec()
    for field, want in expected.items():
        got = spec.get(field)
        if field == "features" and isinstance(got, dict):
            for key, names in want.items():
                if got.get(key) != names:
                    raise PolicyError(
                        f"{card_file}: field 'observation_spec.features.{key}': the policy was trained on "
                        f"{got.get(key)}, this environment has {names}; retrain or export a matching policy"
                    )
        elif got != want:
            raise PolicyError(
                f"{card_file}: field 'observation_spec.{field}': the policy was trained with {got!r}, "
                f"this environment has {want!r}; retrain or export a matching policy"
            )


def _card_limits(card: dict[str, Any], card_file: Path) -> Limits:
    limits = card.get("limits")
    names = ("max_gpus", "max_jobs", "max_slots", "max_apps")
    if not isinstance(limits, dict) or not all(isinstance(limits.get(n), int) and limits[n] >= 1 for n in names):
        raise PolicyError(f"{card_file}: field 'limits': expected positive integers {', '.join(names)}")
    return Limits(**{n: limits[n] for n in names})


def _onnx_logits(onnx_path: Path, card: dict[str, Any]) -> LogitsFn:
    try:
        import onnxruntime as ort
    except ImportError as exc:  # a core dependency, but a broken install is the user's to fix, in one line
        raise PolicyError(f"{onnx_path}: onnxruntime does not import here ({exc}); pip install onnxruntime") from None

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types for corrupt files
        raise PolicyError(f"{onnx_path}: not a loadable ONNX policy ({str(exc).splitlines()[0]})") from None
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(INPUTS):
        raise PolicyError(f"{onnx_path}: expected {len(INPUTS)} inputs ({', '.join(INPUTS)}), the model has {names}")
    output = session.get_outputs()[0].name

    def logits(obs: dict[str, np.ndarray]) -> np.ndarray:
        return session.run([output], {name: obs[key] for name, key in zip(names, INPUTS, strict=True)})[0]

    return logits


def warm_up(path: str | os.PathLike[str] | None = None) -> None:
    """Pay this process's one-time costs of planning before anything is timed.

    Loads the policy (:func:`load_policy`) and plans one small generated scenario, so that the
    onnxruntime session, the engine's compiled kernels (numba compiles them on a machine's first
    use, 6-10 s, and loads them from its disk cache in later processes, about 0.5 s) and the
    imports are ready. Once per loaded policy (:func:`load_policy`'s cache: per file version); later calls
    return at once.

    Raises:
        PolicyError: The policy file is missing, corrupt, or does not match the environment.
    """
    policy = load_policy(path)
    if policy.warm:
        return
    from gpu_env.generators import generate

    # mixed-control has every kind of work (training, inference, real-time apps that jobs trade against), so every
    # compiled kernel runs here (a training-heavy plan left the real-time kernels for the first timed plan: 0.45 s).
    rollout_batch(generate("mixed-control", seed=0), policy.logits, policy.limits, samples=2)
    policy.warm = True


def policy_record(policy: LoadedPolicy) -> dict[str, str]:
    """What a plan records about the policy that made it: file name and hash, no path of this machine."""
    return {"file": policy.path.name, "sha256": policy.sha256}


# ----------------------------------------------------------------------------- rollouts


def padded_limits(scenario: Scenario, rows: int, base: Limits) -> Limits:
    """The training limits, grown where the scenario is larger (so features keep their training scale)."""
    return Limits(
        max_gpus=max(base.max_gpus, scenario.gpus),
        max_jobs=max(base.max_jobs, rows, 1),
        max_slots=max(base.max_slots, scenario.slots),
        max_apps=max(base.max_apps, len(scenario.apps), 1),
    )


def reward_scale(episode: Episode) -> float:
    """The environment's default reward scale: ``G * T * w_max``."""
    sc = episode.scenario
    return float(sc.gpus * sc.slots * episode.w_max)


def rollout_episodes(
    scenario: Scenario,
    logits_fn: LogitsFn,
    base_limits: Limits,
    samples: int = 1,
    seed: int = 0,
) -> list[Episode]:
    """Roll a policy out ``samples`` times on a scenario; one logits call per decision for all rollouts.

    Rollout 0 takes the most likely allowed action at every step; the others
    sample from the masked softmax with a generator seeded by ``seed``. This is
    the reference: one :class:`~gpu_env.episode.Episode` per rollout, stepped in
    a Python loop. Planning runs :func:`rollout_batch` (the same rollout 0, a
    different random stream for the samples); training's evaluation runs this,
    through :func:`rollout`.

    Args:
        scenario: The problem.
        logits_fn: Batch of observations (keys of ``INPUTS``) -> (B, n_actions) logits.
        base_limits: The padded sizes the policy was trained with.
        samples: Number of rollouts (at least 1).
        seed: Seed of the sampled rollouts.

    Returns:
        The finished episodes, rollout 0 first.
    """
    rows = sum(job.running_on is None for job in scenario.jobs)
    limits = padded_limits(scenario, rows, base_limits)
    layout = ActionLayout.make(ActionMode.FIT, limits.max_jobs, limits.max_gpus)
    first = Episode(scenario, layout)
    episodes = [first] + [first.copy() for _ in range(max(1, samples) - 1)]
    scale = reward_scale(first)
    encoders = [Encoder(ep, limits, scale) for ep in episodes]
    rng = np.random.default_rng(seed)
    advance = layout.advance
    active = [i for i, ep in enumerate(episodes) if not ep.done]
    while active:
        observed = [encoders[i].observe(copy=False) for i in active]
        batch = {key: np.stack([o[key] for o in observed]) for key in INPUTS}
        masks = np.stack([o["action_mask"] for o in observed]).astype(bool)
        logits = np.where(masks, logits_fn(batch), -np.inf)
        for b, i in enumerate(active):
            mask = masks[b]
            allowed = np.flatnonzero(mask)
            if allowed.size == 1:
                action = int(allowed[0])
            elif i == 0:
                action = int(np.argmax(logits[b]))
            else:
                z = logits[b, allowed]
                p = np.exp(z - z.max())
                action = int(allowed[rng.choice(allowed.size, p=p / p.sum())])
            if not mask[action]:  # cannot happen with finite logits; ADVANCE is always allowed until the end
                action = advance
            episodes[i].apply(action)
        active = [i for i in active if not episodes[i].done]
    return episodes


def rollout(
    scenario: Scenario,
    logits_fn: LogitsFn,
    base_limits: Limits,
    samples: int = 1,
    seed: int = 0,
) -> tuple[Episode, list[float]]:
    """The best of :func:`rollout_episodes` (the first on a tie), and every rollout's objective.

    Training evaluates its torch policy through this (``logits_fn``), planning through :func:`candidates`.
    """
    episodes = rollout_episodes(scenario, logits_fn, base_limits, samples=samples, seed=seed)
    objectives = [ep.objective for ep in episodes]
    return episodes[int(np.argmax(objectives))], objectives


@dataclass
class Rollouts:
    """The finished rollouts of one scenario, still in the batched engine (plans are built on demand).

    Attributes:
        engine: The engine; episode ``i`` is rollout ``i``, all done.
        objectives: (B,) each rollout's objective (the engine's, equal to its plan's metrics within 1e-9).
        decisions: Decisions taken, one onnxruntime call each for the whole batch.
    """

    engine: BatchEngine
    objectives: np.ndarray
    decisions: int

    def plan(self, i: int) -> Plan:
        """Rollout i's plan, named ``"ppo"``, with metrics."""
        return self.engine.plan(i, "ppo")


def rollout_engine(scenario: Scenario, base_limits: Limits, batch: int) -> BatchEngine:
    """A :class:`BatchEngine` of ``batch`` episodes of ``scenario``, reset, padded as :func:`rollout_episodes` pads."""
    rows = sum(job.running_on is None for job in scenario.jobs)
    limits = padded_limits(scenario, rows, base_limits)
    duration = max([job.duration for job in scenario.jobs] + [1])
    engine = BatchEngine(batch, Sizes.from_limits(limits, duration))
    engine.reset(scenario)
    return engine


def rollout_batch(
    scenario: Scenario,
    logits_fn: LogitsFn,
    base_limits: Limits,
    samples: int = 1,
    seed: int = 0,
) -> Rollouts:
    """Roll a policy out ``samples`` times on a scenario as one batch of the numpy engine.

    The rollouts are the episodes of one :class:`~gpu_env.batch.engine.BatchEngine`
    (B = ``samples``), padded as :func:`rollout_episodes` pads, so the policy sees
    :class:`~gpu_env.observation.Encoder`'s observations. Each decision is one
    ``logits_fn`` call for all the rollouts still running, with only the policy's inputs observed.
    Rollout 0 takes the most likely allowed action (the same as rollout 0 of
    :func:`rollout_episodes`); the others sample from the masked softmax, one
    uniform draw per rollout and decision from a generator seeded by ``seed``.
    Finished episodes stay in the batch, all masked; their actions are ignored.

    Args:
        scenario: The problem.
        logits_fn: Batch of observations (keys of ``INPUTS``) -> (B, n_actions) logits.
        base_limits: The padded sizes the policy was trained with.
        samples: Number of rollouts (at least 1).
        seed: Seed of the sampled rollouts.

    Returns:
        The finished rollouts.
    """
    batch = max(1, samples)
    engine = rollout_engine(scenario, base_limits, batch)
    rng = np.random.default_rng(seed)
    done = engine.state.done  # updated in place by the engine
    decisions = 0
    while not done.all():
        masks = engine.action_masks()
        obs = observe(engine, INPUTS)
        actions = np.full(batch, engine.layout.advance, dtype=np.int64)  # done episodes ignore theirs
        live = np.flatnonzero(~done)
        if live.size < batch:  # finished rollouts stay in the engine but skip the network
            obs = {key: value[live] for key, value in obs.items()}
        logits = np.asarray(logits_fn(obs), dtype=np.float64)
        actions[live] = choose_actions(logits, masks[live], live == 0, rng)
        engine.step(actions)
        decisions += 1
    return Rollouts(engine, engine.state.objective.copy(), decisions)


def choose_actions(logits: np.ndarray, masks: np.ndarray, greedy: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row: the masked argmax where ``greedy``, elsewhere a draw from the masked softmax.

    Args:
        logits: (n, A) raw logits.
        masks: (n, A) allowed actions, at least one per row.
        greedy: (n,) rows that take the most likely action.
        rng: Draws one uniform per row (greedy rows too, so the stream does not depend on which rows are greedy).

    Returns:
        (n,) allowed actions.
    """
    masked = np.where(masks, logits, -np.inf)
    if greedy.all():
        return np.argmax(masked, axis=1)
    draw = rng.random(masks.shape[0])
    weights = np.exp(masked - masked.max(axis=1, keepdims=True))  # 0 where masked
    cumulative = np.cumsum(weights, axis=1)
    # The first action whose cumulative weight exceeds the draw: an allowed one (its weight is > 0). Where
    # rounding leaves none (draw * total == total), the last allowed action.
    first_above = (cumulative <= (draw * cumulative[:, -1])[:, None]).sum(axis=1)
    last_allowed = masks.shape[1] - 1 - np.argmax(masks[:, ::-1], axis=1)
    return np.where(greedy, np.argmax(masked, axis=1), np.minimum(first_above, last_allowed))


def candidates(scenario: Scenario, policy: LoadedPolicy, samples: int, seed: int = 0) -> list[Plan]:
    """The policy's candidate plans for a scenario: one per rollout, with their metrics.

    :func:`plan` chooses among the same rollouts (:func:`rollout_batch`) but
    builds only the winner's plan; this builds every one, for inspection.

    Args:
        scenario: The problem.
        policy: A loaded policy (:func:`load_policy`).
        samples: Number of rollouts (at least 1); plan ``i`` is rollout ``i``, rollout 0 the most likely.
        seed: Seed of the sampled rollouts.

    Returns:
        ``samples`` valid plans named ``"ppo"``, each with ``metrics`` filled.
    """
    rollouts = rollout_batch(scenario, policy.logits, policy.limits, samples=samples, seed=seed)
    return [rollouts.plan(i) for i in range(rollouts.engine.batch)]


def _baseline(scenario: Scenario, guard: Guard, options: PlanOptions) -> Plan:
    if guard is Guard.FIFO:
        from agents import fifo

        baseline = fifo.plan(scenario, options)
    else:
        from agents import greedy

        baseline = greedy.plan(scenario, options)
    baseline.metrics = compute_metrics(scenario, baseline)
    return baseline


def plan(scenario: Scenario, options: PlanOptions | None = None) -> Plan:
    """The learned fast mode as a scheduler: the best of the policy's rollouts, or the guard's plan.

    Args:
        scenario: The problem.
        options: ``options.policy`` names the exported ``.onnx`` file (default the
            shipped one); ``options.samples`` rollouts run, seeded by ``options.seed``;
            ``options.guard`` names the baseline (FIFO, greedy or none) computed too
            and returned, under the name ``"ppo"``, when it is worth more than every rollout.

    Returns:
        The plan, with ``info``: ``policy`` (file and hash), ``samples`` (rollouts
        that ran), ``guard`` (the option's value), ``objectives`` (each rollout's
        objective, by sample index), ``guard_objective`` (the baseline's, absent
        with guard ``none``) and ``winner`` (the winning sample's index, or
        ``"fifo"``/``"greedy"`` when the guard's plan won).

    Raises:
        PolicyError: The policy file is missing, corrupt, or does not match the environment.
    """
    options = options or PlanOptions()
    policy = load_policy(options.policy)
    rollouts = rollout_batch(scenario, policy.logits, policy.limits, samples=options.samples, seed=options.seed)
    objectives = rollouts.objectives.tolist()
    winner: int | str = int(np.argmax(rollouts.objectives))  # the first on a tie: the most likely rollout first
    info: dict[str, Any] = {
        "policy": policy_record(policy),
        "samples": len(objectives),
        "guard": options.guard.value,
        "objectives": [round(o, 6) for o in objectives],
    }
    result: Plan | None = None
    if options.guard is not Guard.NONE:
        baseline = _baseline(scenario, options.guard, options)
        info["guard_objective"] = round(baseline.metrics.objective, 6)
        if baseline.metrics.objective > max(objectives) + 1e-9:
            result = Plan(scenario.name, "ppo", list(baseline.placements), dict(baseline.curves))
            result.metrics = baseline.metrics
            winner = options.guard.value
    if result is None:
        result = rollouts.plan(int(winner))  # only the winner's plan is built
    info["winner"] = winner
    result.info = info
    return result
