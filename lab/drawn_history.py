"""The drawn history of a drawn day: other days of its family, each with the demand that happened.

Benchmarks, training scripts and examples play drawn days (:func:`gpu_env.generators.generate`) and give the
live planner a history to learn from. That history is drawn too, by one rule that every script shares: past
day ``k`` of the day with seed ``s`` has seed ``HISTORY_SEED_OFFSET + s * MAX_HISTORY_DAYS + k``
(:func:`history_seeds`), so no past day is ever a played day, and the same seed gives the same past.

>>> history_seeds(3, 2)
[10000300, 10000301]
"""

from __future__ import annotations

from agents.live.forecast import NoiseModel, as_recorded
from gpu_env.generators import generate
from gpu_env.scenario import Scenario

__all__ = ["HISTORY_SEED_OFFSET", "MAX_HISTORY_DAYS", "history_seeds", "past_days"]

HISTORY_SEED_OFFSET = 10_000_000
MAX_HISTORY_DAYS = 100
"""Past day k of the day with seed s has seed ``HISTORY_SEED_OFFSET + s * MAX_HISTORY_DAYS + k``."""


def history_seeds(seed: int, days: int) -> list[int]:
    """Seeds of the past days of the day with this seed: never a played seed below ``HISTORY_SEED_OFFSET``."""
    if not 0 <= days <= MAX_HISTORY_DAYS:
        raise ValueError(f"history days: expected 0..{MAX_HISTORY_DAYS}, got {days}")
    return [HISTORY_SEED_OFFSET + seed * MAX_HISTORY_DAYS + k for k in range(days)]


def past_days(
    family: str, gpus: int, seed: int, days: int, sigma: float, num_jobs: int | None = None
) -> list[Scenario]:
    """The history of the day with this seed: other days of its family, each with the demand that happened.

    Each past day is drawn as a day of its own (``generate`` with its seed, at ``gpus`` GPUs) and recorded as a
    cluster's log holds it (:func:`agents.live.forecast.as_recorded`): its demand is the actual demand at the
    same forecast error (``NoiseModel(sigma).draw`` with its seed), its ``forecast`` the forecast made for it.
    """
    out = []
    for past_seed in history_seeds(seed, days):
        past = generate(family, past_seed, gpus=gpus, num_jobs=num_jobs)
        demand = NoiseModel(sigma).draw(past, past_seed)
        out.append(as_recorded(past, demand, f"{past.name}-past-{past_seed}"))
    return out
