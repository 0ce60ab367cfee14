"""The training run's settings: the config dataclasses, their YAML loading and checks, and the device.

A config file is YAML whose keys are the fields below (nested sections for each
stage of the curriculum and for the evaluation). Every field is checked on load;
a bad file raises :class:`ConfigError` with one message naming the file and the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    """K: orders drawn per instance per round (their mean is the POMO baseline)."""
    pg_coef: float = 0.5
    """Weight of the POMO policy-gradient term beside ListMLE on the labels."""


@dataclass
class EvalConfig:
    """Held-out instances the policy is scored on after each round (ratios to greedy)."""

    instances: int = 70
    sizes: tuple[int, ...] = (8, 16, 24, 32, 48, 64)
    large_instances: int = 14
    large_sizes: tuple[int, ...] = (128, 256)
    seed: int = 10_000
    """Seed of the held-out draws (training draws use ``seed`` of the run)."""
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
    optima: str | None = "agents/learned/data/optima.json.gz"
    """Proven optima (:mod:`agents.learned.optima`) imitated first; null: none."""
    optima_instances: int | None = None
    """Take only the first this many records of ``optima`` (null: all)."""
    hidden: int = 96
    """Width of the scorer's embeddings (:mod:`agents.learned.scorer`)."""
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
    eval: EvalConfig = field(default_factory=EvalConfig)

    def draws(self) -> dict[str, tuple[tuple[int, ...], int, int]]:
        """(sizes, count, seed) of each draw of a run (:func:`agents.learned.training.draw_scenarios`).

        ``small`` and ``large`` are training's stages, ``eval`` and ``eval_large`` its held-out instances.
        """
        return {
            "small": (self.small.sizes, self.small.instances, self.seed),
            "large": (self.large.sizes, self.large.instances, self.seed + 1),
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
        "eval.samples": cfg.eval.samples,
    }
    for name, value in positive.items():
        if not value > 0:
            raise ConfigError(f"{source}: field {name}: expected a positive number, got {value}")
    not_negative = {
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
        "eval.instances": cfg.eval.instances,
        "eval.large_instances": cfg.eval.large_instances,
    }
    for name, value in not_negative.items():
        if value < 0:
            raise ConfigError(f"{source}: field {name}: expected a number >= 0, got {value}")
    draws = cfg.draws()
    drawn = {draws["small"][2], draws["large"][2]}  # the training draws' seeds
    if cfg.eval.seed in drawn or cfg.eval.seed + 1 in drawn:
        raise ConfigError(
            f"{source}: field eval.seed: {cfg.eval.seed} and {cfg.eval.seed + 1} draw the held-out instances; "
            f"they must differ from the training seeds {sorted(drawn)}"
        )
    for name, sizes in (
        ("small.sizes", cfg.small.sizes),
        ("large.sizes", cfg.large.sizes),
        ("eval.sizes", cfg.eval.sizes),
        ("eval.large_sizes", cfg.eval.large_sizes),
    ):
        if any(g < 1 for g in sizes):
            raise ConfigError(f"{source}: field {name}: expected positive cluster sizes, got {list(sizes)}")


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
