"""The training run's settings: the config dataclasses, their YAML loading and checks, and the device.

A config file is YAML whose keys are the fields below (nested sections for
the scenario sampler, the network, PPO, imitation and evaluation). Every field
is checked on load; a bad file raises :class:`ConfigError` with one message
naming the file and the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass
class ScenarioConfig:
    """Where training scenarios come from (``gpu_env.sampler.ScenarioSampler``)."""

    families: dict[str, float] = field(default_factory=dict)
    """Family name -> weight of drawing it."""
    gpus: list[int] | None = None
    """[low, high] cluster sizes, or None for each family's own."""
    jobs: list[int] | None = None
    """[low, high] job counts, or None for the family's jobs per GPU."""


@dataclass
class NetworkConfig:
    """The job scorer's sizes (:mod:`agents.learned.network`)."""

    hidden: int = 64
    """Width of every embedding."""
    value_features: int = 64
    """Width of the critic's features."""


@dataclass
class PPOConfig:
    """MaskablePPO hyperparameters (SB3 names)."""

    learning_rate: float = 1e-4
    n_steps: int = 256
    """Steps per environment per rollout."""
    batch_size: int = 256
    n_epochs: int = 4
    gamma: float = 1.0
    """1: the return of an episode is its plan's objective."""
    gae_lambda: float = 0.95
    clip_range: float = 0.1
    ent_coef: float = 0.001
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = 0.02


@dataclass
class ImitationConfig:
    """Warm start by behaviour cloning of greedy's plans (0 episodes: none)."""

    episodes: int = 0
    """Scenarios planned by the teacher."""
    epochs: int = 10
    batch_size: int = 256
    learning_rate: float = 1e-3
    value_weight: float = 0.5
    """Weight of the critic's regression to the teacher's returns."""
    dagger_rounds: int = 0
    """DAgger rounds after behaviour cloning (0: none): the policy plays, greedy labels the states it reaches."""
    dagger_episodes: int = 200
    """Scenarios the policy plays per DAgger round."""
    dagger_epochs: int = 4
    """Epochs over all the data gathered so far after each DAgger round."""


@dataclass
class EvalConfig:
    """Periodic evaluation on fixed instances."""

    instances_per_family: int = 2
    every_steps: int = 10_000
    """Environment steps between evaluations."""
    seed: int = 10_000
    """Instance seeds are seed, seed + 1, ... (apart from training draws)."""
    optimum_time_limit: float = 0.0
    """CP-SAT seconds per instance for the best known objective (0: greedy's stands in)."""


@dataclass
class RLConfig:
    """The RL phase on the batched engine (:mod:`agents.learned.rl`): masked PPO with a POMO shared baseline."""

    steps: int = 0
    """Engine steps (decisions of all episodes together); 0: no RL phase."""
    instances: int = 32
    """Fresh scenarios per update."""
    rollouts: int = 8
    """K: episodes per scenario per update; they share the baseline (their mean return)."""
    learning_rate: float = 1e-5
    epochs: int = 2
    """Passes over each update's decisions."""
    minibatch: int = 1024
    """Decisions per gradient step."""
    clip_range: float = 0.2
    ent_coef: float = 0.0
    max_grad_norm: float = 0.5
    pg_coef: float = 1.0
    """Weight of PPO's clipped policy-gradient loss (POMO advantages)."""
    self_imitation: float = 0.0
    """Weight of self-improvement (0: none): rollout 0 of each instance decodes greedily, and the best
    sampled rollout, where it beats rollout 0, is imitated (cross-entropy on its decisions)."""
    per_episode: bool = False
    """Self-imitation weighs every imitated episode alike (else every decision alike: long episodes weigh more)."""
    teacher: bool = False
    """One rollout per instance replays greedy's plan (a candidate for self-imitation, not a policy sample)."""
    eval_every: int = 100_000
    """Engine steps between evaluations on the fixed instances."""


@dataclass
class TrainConfig:
    """Everything a training run needs; loaded from YAML."""

    seed: int = 0
    """Seed of every random draw (scenarios, networks, sampling)."""
    total_timesteps: int = 100_000
    """MaskablePPO environment steps (imitation not counted); 0: no MaskablePPO phase."""
    n_envs: int = 4
    """Environments stepped together (one process)."""
    checkpoint_every: int = 10_000
    """Environment steps between checkpoints."""
    run_dir: str = "runs/default"
    export: str = "agents/policies/default.onnx"
    """Where the final policy is exported (its card beside it, .json)."""
    scenarios: ScenarioConfig = field(default_factory=ScenarioConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    imitation: ImitationConfig = field(default_factory=ImitationConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    init_from: str | None = None
    """An exported policy (.onnx) to start from instead of imitation and MaskablePPO (its weights, no pickle)."""


class ConfigError(ValueError):
    """A config file that breaks the format; the message names the file and the field."""


def _check_value(value: Any, annotation: str, where: str) -> Any:
    """Check (and coerce int -> float) one scalar field against its annotation string."""
    optional = annotation.endswith("| None")
    base = annotation.replace(" | None", "")
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{where}: expected {base}, got null")
    if base == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if base == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if base == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if base == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if base == "list[int]":
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)):
            raise ConfigError(f"{where}: expected [low, high] integers, got {value!r}")
        return value
    if base == "dict[str, float]":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = dict.fromkeys(value, 1.0)
        if not (isinstance(value, dict) and all(isinstance(v, int | float) for v in value.values())):
            raise ConfigError(f"{where}: expected a mapping family -> weight (or a list of families), got {value!r}")
        return {str(k): float(v) for k, v in value.items()}
    raise ConfigError(f"{where}: unsupported field type {annotation}")  # a bug in this file


def _build(cls: type, data: Any, source: str, prefix: str = "") -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: field {prefix or '(top level)'}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"{source}: unknown field {where}{unknown[0]} (expected one of: {', '.join(fields)})")
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            continue
        where = f"{source}: field {prefix}{'.' if prefix else ''}{name}"
        if dataclasses.is_dataclass(f.default_factory if f.default_factory is not dataclasses.MISSING else None):
            kwargs[name] = _build(f.default_factory, data[name], source, f"{prefix}{'.' if prefix else ''}{name}")
        else:
            kwargs[name] = _check_value(data[name], str(f.type), where)
    return cls(**kwargs)


def load_config(path: str | Path) -> TrainConfig:
    """Load and check a training config.

    Raises:
        ConfigError: Unreadable YAML, an unknown field, a wrong type or an impossible value.
    """
    source = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({str(exc).splitlines()[0]})") from None
    cfg = _build(TrainConfig, data or {}, source)
    _check_ranges(cfg, source)
    return cfg


def _check_ranges(cfg: TrainConfig, source: str) -> None:
    from gpu_env.generators import FAMILIES

    if not cfg.scenarios.families:
        raise ConfigError(f"{source}: field scenarios.families: expected at least one family")
    for name, weight in cfg.scenarios.families.items():
        if name not in FAMILIES:
            raise ConfigError(f"{source}: field scenarios.families: unknown family {name!r} ({', '.join(FAMILIES)})")
        if not weight > 0:
            raise ConfigError(f"{source}: field scenarios.families.{name}: expected a positive weight, got {weight}")
    for name, bounds in (("gpus", cfg.scenarios.gpus), ("jobs", cfg.scenarios.jobs)):
        if bounds is not None and not 1 <= bounds[0] <= bounds[1]:
            raise ConfigError(f"{source}: field scenarios.{name}: expected 1 <= low <= high, got {bounds}")
    positive = {
        "n_envs": cfg.n_envs,
        "checkpoint_every": cfg.checkpoint_every,
        "network.hidden": cfg.network.hidden,
        "network.value_features": cfg.network.value_features,
        "ppo.n_steps": cfg.ppo.n_steps,
        "ppo.batch_size": cfg.ppo.batch_size,
        "ppo.n_epochs": cfg.ppo.n_epochs,
        "ppo.learning_rate": cfg.ppo.learning_rate,
        "imitation.epochs": cfg.imitation.epochs,
        "imitation.batch_size": cfg.imitation.batch_size,
        "eval.every_steps": cfg.eval.every_steps,
        "rl.instances": cfg.rl.instances,
        "rl.rollouts": cfg.rl.rollouts,
        "rl.learning_rate": cfg.rl.learning_rate,
        "rl.epochs": cfg.rl.epochs,
        "rl.minibatch": cfg.rl.minibatch,
        "rl.clip_range": cfg.rl.clip_range,
        "rl.eval_every": cfg.rl.eval_every,
        "rl.max_grad_norm": cfg.rl.max_grad_norm,
    }
    for name, value in positive.items():
        if not value > 0:
            raise ConfigError(f"{source}: field {name}: expected a positive value, got {value}")
    counts = {
        "total_timesteps": cfg.total_timesteps,
        "rl.steps": cfg.rl.steps,
        "rl.pg_coef": cfg.rl.pg_coef,
        "rl.self_imitation": cfg.rl.self_imitation,
        "rl.ent_coef": cfg.rl.ent_coef,
        "imitation.episodes": cfg.imitation.episodes,
        "imitation.dagger_rounds": cfg.imitation.dagger_rounds,
        "imitation.dagger_episodes": cfg.imitation.dagger_episodes,
        "imitation.dagger_epochs": cfg.imitation.dagger_epochs,
        "eval.instances_per_family": cfg.eval.instances_per_family,
    }
    for name, value in counts.items():
        if value < 0:
            raise ConfigError(f"{source}: field {name}: expected 0 or more, got {value}")
    if cfg.init_from is not None and not Path(cfg.init_from).is_file():
        raise ConfigError(f"{source}: field init_from: no such file {cfg.init_from!r}")
    fixed = (cfg.rl.self_imitation > 0) + cfg.rl.teacher
    if cfg.rl.steps > 0 and cfg.rl.rollouts < 2 + fixed:
        raise ConfigError(
            f"{source}: field rl.rollouts: the shared baseline needs at least 2 sampled rollouts per instance"
            f" (plus one for the greedy decoding with self_imitation, one for the teacher), got {cfg.rl.rollouts}"
        )
    if not 0 < cfg.ppo.gamma <= 1 or not 0 < cfg.ppo.gae_lambda <= 1:
        raise ConfigError(f"{source}: field ppo.gamma / ppo.gae_lambda: expected values in (0, 1]")


def sampler_spec(cfg: TrainConfig) -> dict[str, Any]:
    """The environment's ``scenario=`` mapping for the configured families and sizes."""
    spec: dict[str, Any] = {"families": dict(cfg.scenarios.families)}
    if cfg.scenarios.gpus is not None:
        spec["gpus"] = list(cfg.scenarios.gpus)
    if cfg.scenarios.jobs is not None:
        spec["jobs"] = list(cfg.scenarios.jobs)
    return spec


def choose_device(requested: str) -> str:
    """``cpu``, ``cuda`` (an error without CUDA) or ``auto`` (CUDA when available)."""
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: this torch build sees no CUDA device (install a CUDA build, see README)")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested
