"""What a caller may tell any scheduler; each scheduler reads the fields it needs."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class Guard(StrEnum):
    """The baseline the learned scheduler computes too, returning its plan when it is worth more.

    Attributes:
        NONE: No baseline: the policy's own best candidate, always.
        FIFO: FIFO's plan (well under a millisecond): the learned mode never falls below the baseline.
        GREEDY: Greedy's plan (milliseconds): the learned mode never falls below the heuristic.
    """

    NONE = "none"
    FIFO = "fifo"
    GREEDY = "greedy"


DEFAULT_SAMPLES = 12
"""Candidate orders per learned plan as shipped: the argmax order in both trade modes and 10 Gumbel draws.
Measured with the former POMO-trained policy on 140 fresh instances at 8-64 GPUs: 8, 12 and 16 candidates reach
1.0089, 1.0103 and 1.0105 of greedy's objective, with 0.59, 0.77 and 1.0 of 16's decode time (docs/learned-mode.md)."""
DEFAULT_GUARD = Guard.FIFO
"""The learned scheduler's guard as shipped: FIFO, so the learned mode is never below FIFO, for FIFO's time (a
fraction of a millisecond at the seed's sizes; benchmarks/results/ppo.md, (b))."""


@dataclass(frozen=True)
class PlanOptions:
    """Options shared by every scheduler's ``plan(scenario, options) -> Plan``.

    Attributes:
        time_limit: Seconds an anytime scheduler may spend (exact and full modes).
        seed: Seed for every random draw a scheduler makes.
        workers: Parallel workers for schedulers that use them.
        policy: An exported policy file for the learned scheduler.
        samples: Candidate job orders of the learned scheduler (at least 1): the first is
            the argmax order of the policy's scores, the others are drawn from them.
        guard: The baseline the learned scheduler returns instead when it is
            worth more (a :class:`Guard` or its value: ``"none"``, ``"fifo"``, ``"greedy"``).
        deterministic_time: Also stop the exact solver after this much CP-SAT
            deterministic time (machine-independent work; None: no such limit). With one
            worker and a seed, the same plan on any machine at any load, as long as
            ``time_limit`` is not reached first: how tests make time a controlled input.

    Raises:
        ValueError: ``samples`` is not an integer >= 1, ``guard`` is not a guard's
            name, or ``deterministic_time`` is not a positive number; the message names the field.
    """

    time_limit: float = 10.0
    seed: int = 0
    workers: int = 1
    policy: Path | None = None
    samples: int = DEFAULT_SAMPLES
    guard: Guard = DEFAULT_GUARD
    deterministic_time: float | None = None

    def __post_init__(self) -> None:
        try:
            samples = None if isinstance(self.samples, bool) else operator.index(self.samples)
        except TypeError:
            samples = None
        if samples is None or samples < 1:
            raise ValueError(f"samples: expected an integer >= 1, got {self.samples!r}")
        object.__setattr__(self, "samples", samples)
        try:
            guard = Guard(self.guard)
        except ValueError:
            names = ", ".join(g.value for g in Guard)
            raise ValueError(f"guard: expected one of {names}, got {self.guard!r}") from None
        object.__setattr__(self, "guard", guard)
        dtime = self.deterministic_time
        if dtime is not None and (isinstance(dtime, bool) or not isinstance(dtime, int | float) or not dtime > 0):
            raise ValueError(f"deterministic_time: expected a positive number or None, got {dtime!r}")
