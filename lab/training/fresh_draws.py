"""Fresh instances for the fast mode's benchmarks: drawn at seeds that training never drew, and checked.

:func:`training_draws` lists every (family, seed, GPUs) that training with a config drew; :func:`check_fresh`
stops a benchmark whose instances are among them. Reads the training config of a checkout (``configs/train/``).
"""

from __future__ import annotations

from pathlib import Path

from gpu_env.generators import FAMILIES, generate
from gpu_env.scenario import Scenario

__all__ = ["FRESH_SEED", "TRAIN_CONFIG", "check_fresh", "fresh", "training_draws"]

ROOT = Path(__file__).resolve().parents[2]
TRAIN_CONFIG = ROOT / "configs" / "train" / "default.yaml"
"""The shipped policy's training config."""
FRESH_SEED = 20_000
"""First seed of the fresh instances of the fast mode's benchmarks (quality, equal time)."""


def training_draws(config: Path = TRAIN_CONFIG) -> set[tuple[str, int, int]]:
    """Every (family, generator seed, GPUs) that training with ``config`` drew, labelled or evaluated on.

    ``train.py``'s four draws (``TrainConfig.draws``: the two stages and the two held-out sets) are listed by
    :func:`~lab.training.training.draw_specs`, the function ``draw_scenarios`` generates from, without
    generating them. The optima cache's records (:mod:`lab.training.optima`,
    seeds 50000-56999) are read from the cache file the config names.
    """
    from lab.training.train_config import load_config
    from lab.training.training import draw_specs

    cfg = load_config(config)
    draws = {d for call in cfg.draws().values() for d in draw_specs(cfg.families, *call)}
    if cfg.optima:
        from lab.training.optima import read_document

        path = Path(cfg.optima) if Path(cfg.optima).is_absolute() else ROOT / cfg.optima
        draws.update((r["family"], int(r["seed"]), int(r["gpus"])) for r in read_document(path)["records"])
    return draws


def check_fresh(instances: list[Scenario]) -> None:
    """Raise ``SystemExit`` if any instance's (family, seed, GPUs) is among :func:`training_draws`."""
    used = training_draws()
    clash = sorted({(sc.family, sc.seed, sc.gpus) for sc in instances} & used)
    if clash:
        raise SystemExit(f"benchmark instances drawn in training: {clash[:5]}; pick other seeds")


def fresh(family: str, seed: int, gpus: int | None = None) -> Scenario:
    """A fresh instance (the family's own size when ``gpus`` is None), named after its family, size and seed."""
    size = gpus if gpus is not None else FAMILIES[family].gpus
    return generate(family, seed, gpus=gpus, name=f"{family}-{size}-{seed}")
