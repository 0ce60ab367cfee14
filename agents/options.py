"""What a caller may tell any scheduler; each scheduler reads the fields it needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PlanOptions:
    """Options shared by every scheduler's ``plan(scenario, options) -> Plan``.

    Attributes:
        time_limit: Seconds an anytime scheduler may spend (exact and full modes).
        seed: Seed for every random draw a scheduler makes.
        workers: Parallel workers for schedulers that use them.
        policy: An exported policy file for the learned scheduler.
    """

    time_limit: float = 10.0
    seed: int = 0
    workers: int = 1
    policy: Path | None = None
