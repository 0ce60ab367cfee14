"""The training run's settings: the config dataclasses, their YAML loading and checks, and the device.

A config file is YAML whose keys are the fields below (nested sections for each
stage of the curriculum and for the evaluation). Every field is checked on load;
a bad file raises :class:`ConfigError` with one message naming the file and the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml


@dataclass
class StageConfig:
    """One stage of the curriculum: instances of some cluster sizes, self-labelling rounds over them."""

    instances: int = 0
    """Fresh instances drawn for this stage (0: the stage is skipped)."""
    sizes: tuple[int, ...] = (16, 32, 64)
    """Cluster sizes (GPUs), drawn uniformly; jobs scale with each family's jobs per GPU."""
    rounds: int = 0
    """Self-labelling rounds over every instance trained so far."""
    samples: int = 16
    """K: orders drawn per instance per round (their mean is the shared baseline of the policy gradient)."""
    pg_coef: float = 0.5
    """Weight of the policy-gradient term (PPO's clipped surrogate, or POMO's step) beside ListMLE on the labels."""


ALGORITHMS = ("ppo", "pomo")
"""The reinforcement step of a self-labelling round (:class:`RLConfig`)."""
RATIOS = ("job", "order")
"""How PPO's probability ratio of a drawn order is taken (:class:`RLConfig`)."""


@dataclass
class RLConfig:
    """The reinforcement step of every self-labelling round (``docs/learned-mode.md``, "Training")."""

    algorithm: str = "ppo"
    """``ppo``: the round's draws are stored with their log-probabilities, then ``epochs`` passes of PPO's clipped
    surrogate (advantages against the instance's group of draws). ``pomo``: one REINFORCE step per batch with the
    draws' mean as baseline (the recipe before PPO, kept for the comparison)."""
    epochs: int = 4
    """PPO: passes over the stored draws per round (the old log-probabilities fixed)."""
    clip: float = 0.2
    """PPO: the ratio is clipped to [1 - clip, 1 + clip]."""
    ratio: str = "job"
    """PPO: ``order``, the ratio of the whole order's Plackett-Luce probabilities; ``job``, its geometric mean per
    job (the log-ratio divided by the number of jobs, as GSPO does for sequences), so that a ratio means the same
    at 8 jobs and at 1,600."""
    entropy_coef: float = 0.0
    """PPO: weight of the entropy bonus (of the first pick and of the mode)."""


@dataclass
class EvalConfig:
    """A set of held-out instances the policy plans as the planner does (ratios to greedy).

    A run has two: ``validation``, scored after every round to choose the round exported, and ``eval``, scored
    once on that round and reported. Their seeds differ from each other and from training's.
    """

    instances: int = 70
    sizes: tuple[int, ...] = (8, 16, 24, 32, 48, 64)
    large_instances: int = 14
    large_sizes: tuple[int, ...] = (128, 256)
    seed: int = 10_000
    """Seed of the draws at ``sizes`` (``seed + 1``: at ``large_sizes``); training draws use the run's ``seed``."""
    samples: int = 16
    """Candidates decoded as the planner does (:func:`agents.ppo.candidate_orders`)."""


@dataclass
class TrainConfig:
    """Everything a training run needs; loaded from YAML."""

    seed: int = 0
    """Seed of every random draw (scenarios, networks, sampling)."""
    run_dir: str = "runs/list"
    export: str = "agents/policies/default.onnx"
    """Where the final policy is exported (its card beside it, .json)."""
    families: dict[str, float] = field(default_factory=dict)
    """Family name -> weight of drawing it."""
    optima: str | None = "lab/training/data/optima.json.gz"
    """Proven optima (:mod:`lab.training.optima`) imitated first; null: none."""
    optima_instances: int | None = None
    """Take only the first this many records of ``optima`` (null: all)."""
    hidden: int = 96
    """Width of the scorer's embeddings (:mod:`lab.training.scorer`)."""
    attention: int = 0
    """Self-attention blocks over the jobs (0: deep sets only)."""
    label_epochs: int = 1
    """ListMLE passes over the labels per self-labelling round (the first beside the policy gradient)."""
    learning_rate: float = 0.001
    batch: int = 32
    """Instances per gradient step."""
    temperature: float = 1.0
    """Gumbel temperature of the drawn orders, in training and in the shipped planner."""
    imitation_epochs: int = 30
    """ListMLE epochs on the first labels (optima and greedy's orders) before self-labelling."""
    small: StageConfig = field(default_factory=StageConfig)
    """The seed's sizes (8-64 GPUs), with the optima."""
    large: StageConfig = field(default_factory=lambda: StageConfig(sizes=(128, 256, 512, 1024)))
    """Cluster sizes, labels from greedy's orders and the policy's own draws."""
    rl: RLConfig = field(default_factory=RLConfig)
    """The reinforcement step of the self-labelling rounds."""
    validation: EvalConfig = field(default_factory=lambda: EvalConfig(seed=12_000))
    """The instances every round is scored on; the exported round is the best on them."""
    eval: EvalConfig = field(default_factory=lambda: EvalConfig(instances=140, large_instances=28))
    """The instances the exported policy is reported on, once, after the selection (the card's ``evaluation``)."""

    def draws(self) -> dict[str, tuple[tuple[int, ...], int, int]]:
        """(sizes, count, seed) of each draw of a run (:func:`lab.training.training.draw_scenarios`).

        ``small`` and ``large`` are training's stages, ``validation`` and ``validation_large`` the instances the
        rounds are selected on, ``eval`` and ``eval_large`` the instances the selected policy is reported on.
        """
        return {
            "small": (self.small.sizes, self.small.instances, self.seed),
            "large": (self.large.sizes, self.large.instances, self.seed + 1),
            "validation": (self.validation.sizes, self.validation.instances, self.validation.seed),
            "validation_large": (
                self.validation.large_sizes,
                self.validation.large_instances,
                self.validation.seed + 1,
            ),
            "eval": (self.eval.sizes, self.eval.instances, self.eval.seed),
            "eval_large": (self.eval.large_sizes, self.eval.large_instances, self.eval.seed + 1),
        }


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
    if base == "tuple[int, ...]":
        if not (
            isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            raise ConfigError(f"{where}: expected a non-empty list of integers, got {value!r}")
        return tuple(value)
    if base == "dict[str, float]":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = dict.fromkeys(value, 1.0)
        if not (isinstance(value, dict) and all(isinstance(v, int | float) for v in value.values())):
            raise ConfigError(f"{where}: expected a mapping family -> weight (or a list of families), got {value!r}")
        return {str(k): float(v) for k, v in value.items()}
    raise ConfigError(f"{where}: unsupported field type {annotation}")  # a bug in this file


def _build(cls: type, data: Any, source: str, prefix: str = "", default: Any = None) -> Any:
    """``cls`` from a mapping, each field checked; fields not given keep ``default``'s values (or the class's)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: field {prefix or '(top level)'}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"{source}: unknown field {where}{unknown[0]} (expected one of: {', '.join(fields)})")
    base = default if default is not None else cls()
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            continue
        where = f"{source}: field {prefix}{'.' if prefix else ''}{name}"
        current = getattr(base, name)
        if dataclasses.is_dataclass(current):
            kwargs[name] = _build(type(current), data[name], source, f"{prefix}{'.' if prefix else ''}{name}", current)
        else:
            kwargs[name] = _check_value(data[name], str(f.type), where)
    return dataclasses.replace(base, **kwargs)


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> TrainConfig:
    """Load and check a training config.

    Args:
        path: The YAML file.
        overrides: ``FIELD=VALUE`` items (``train.py --set``) that replace a field of the file, a dotted name for a
            field of a section (``rl.epochs=2``), the value read as YAML; checked as the file's own fields are.

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
    data = data or {}
    for item in overrides if isinstance(data, dict) else ():  # a file that is no mapping: _build says so
        _override(data, item, source)
    cfg = _build(TrainConfig, data, source)
    _check_ranges(cfg, source)
    return cfg


def _override(data: Any, item: str, source: str) -> None:
    """Set one ``FIELD=VALUE`` of :func:`load_config`'s ``overrides`` in the file's data."""
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"{source}: --set {item!r}: expected FIELD=VALUE (a dotted FIELD for a section's field)")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: --set {item!r}: not valid YAML ({str(exc).splitlines()[0]})") from None
    *sections, name = key.split(".")
    node = data
    for depth, section in enumerate(sections, start=1):
        node = node.setdefault(section, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{source}: --set {item!r}: field {'.'.join(sections[:depth])} is not a section")
    node[name] = value


def _check_ranges(cfg: TrainConfig, source: str) -> None:
    from gpu_env.generators import FAMILIES

    if not cfg.families:
        raise ConfigError(f"{source}: field families: expected at least one family")
    for name, weight in cfg.families.items():
        if name not in FAMILIES:
            raise ConfigError(f"{source}: field families: unknown family {name!r} ({', '.join(FAMILIES)})")
        if not weight > 0:
            raise ConfigError(f"{source}: field families.{name}: expected a positive weight, got {weight}")
    positive = {
        "hidden": cfg.hidden,
        "learning_rate": cfg.learning_rate,
        "batch": cfg.batch,
        "temperature": cfg.temperature,
        "small.samples": cfg.small.samples,
        "large.samples": cfg.large.samples,
        "validation.samples": cfg.validation.samples,
        "eval.samples": cfg.eval.samples,
    }
    for name, value in positive.items():
        if not value > 0:
            raise ConfigError(f"{source}: field {name}: expected a positive number, got {value}")
    not_negative = {
        "seed": cfg.seed,
        "validation.seed": cfg.validation.seed,
        "eval.seed": cfg.eval.seed,
        "imitation_epochs": cfg.imitation_epochs,
        "attention": cfg.attention,
        "optima_instances": cfg.optima_instances or 0,
        "label_epochs": cfg.label_epochs,
        "small.instances": cfg.small.instances,
        "small.rounds": cfg.small.rounds,
        "small.pg_coef": cfg.small.pg_coef,
        "large.instances": cfg.large.instances,
        "large.rounds": cfg.large.rounds,
        "large.pg_coef": cfg.large.pg_coef,
        "validation.instances": cfg.validation.instances,
        "validation.large_instances": cfg.validation.large_instances,
        "eval.instances": cfg.eval.instances,
        "eval.large_instances": cfg.eval.large_instances,
    }
    for name, value in not_negative.items():
        if value < 0:
            raise ConfigError(f"{source}: field {name}: expected a number >= 0, got {value}")
    if cfg.rl.algorithm not in ALGORITHMS:
        expected = ", ".join(ALGORITHMS)
        raise ConfigError(f"{source}: field rl.algorithm: expected one of {expected}, got {cfg.rl.algorithm!r}")
    if cfg.rl.ratio not in RATIOS:
        raise ConfigError(f"{source}: field rl.ratio: expected one of {', '.join(RATIOS)}, got {cfg.rl.ratio!r}")
    if cfg.rl.epochs < 1:
        raise ConfigError(f"{source}: field rl.epochs: expected an integer >= 1, got {cfg.rl.epochs}")
    if not 0 < cfg.rl.clip < 1:
        raise ConfigError(f"{source}: field rl.clip: expected a number in (0, 1), got {cfg.rl.clip}")
    if cfg.rl.entropy_coef < 0:
        raise ConfigError(f"{source}: field rl.entropy_coef: expected a number >= 0, got {cfg.rl.entropy_coef}")
    for name, sizes in (
        ("small.sizes", cfg.small.sizes),
        ("large.sizes", cfg.large.sizes),
        ("validation.sizes", cfg.validation.sizes),
        ("validation.large_sizes", cfg.validation.large_sizes),
        ("eval.sizes", cfg.eval.sizes),
        ("eval.large_sizes", cfg.eval.large_sizes),
    ):
        if any(g < 1 for g in sizes):
            raise ConfigError(f"{source}: field {name}: expected positive cluster sizes, got {list(sizes)}")
    _check_sets_apart(cfg, source)  # last: it draws from the seeds and sizes checked above


def draw_specs(families: dict[str, float], sizes: Sequence[int], count: int, seed: int) -> list[tuple[str, int, int]]:
    """(family, generator seed, GPUs) of ``count`` draws: families by weight, sizes uniformly, seeded by ``seed``."""
    rng = np.random.default_rng(seed)
    names = list(families)
    p = np.array([families[n] for n in names], dtype=np.float64)
    p = p / p.sum()
    out = []
    for _ in range(count):
        fam = names[int(rng.choice(len(names), p=p))]
        gpus = int(rng.choice(sizes))
        out.append((fam, int(rng.integers(0, 2**31 - 1)), gpus))
    return out


def _check_sets_apart(cfg: TrainConfig, source: str) -> None:
    """Training, validation and evaluation draw with seeds of their own and share no instance."""
    seeds = {
        "training": {cfg.seed, cfg.seed + 1},
        "validation": {cfg.validation.seed, cfg.validation.seed + 1},
        "eval": {cfg.eval.seed, cfg.eval.seed + 1},
    }
    keys = {
        "training": ("small", "large"),
        "validation": ("validation", "validation_large"),
        "eval": ("eval", "eval_large"),
    }
    draws = cfg.draws()
    specs = {name: {d for key in k for d in draw_specs(cfg.families, *draws[key])} for name, k in keys.items()}
    for a, b in (("validation", "training"), ("eval", "training"), ("eval", "validation")):
        if seeds[a] & seeds[b]:
            raise ConfigError(
                f"{source}: field {a}.seed: {sorted(seeds[a])} draw the {a} instances; "
                f"they must differ from the {b} seeds {sorted(seeds[b])}"
            )
        shared = sorted(specs[a] & specs[b])
        if shared:
            raise ConfigError(f"{source}: field {a}.seed: draws {shared[0]}, an instance of the {b} set too")


def as_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The config as plain JSON-able data (for the policy card)."""
    return dataclasses.asdict(cfg)


def choose_device(requested: str) -> str:
    """``cpu``, ``cuda`` (an error without CUDA) or ``auto`` (CUDA when available)."""
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: this torch build sees no CUDA device (install a CUDA build, see README)")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested
