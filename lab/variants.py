"""The live planner's variants: each named variant and how to build it, for the live benchmarks' arms.

The shipped planner (:class:`agents.live.anticipate.AnticipatingPlanner`) has the fields a site sets; the rule's
fixed settings (the fill, the race's bar, the rollouts, the candidates) are constants of its class. A variant that
changes one of them, for the ablations of docs/rolling.md, is an :class:`Ablated` planner: the same planner with
those settings as fields. :data:`LIVE` names every variant with what it is fitted on, :data:`LIVE_OPTIONS` the
settings each ablation changes, and :func:`build` makes one (``lab.live_arms`` plays them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from agents.live.anticipate import (
    DEFAULT_CONFIDENCE,
    DEFAULT_FILL_Z,
    DEFAULT_MIN_GAIN,
    AnticipatingPlanner,
    live_planner,
)
from gpu_env.scenario import Scenario


@dataclass(frozen=True)
class Ablated(AnticipatingPlanner):
    """The live planner with its rule's fixed settings as fields (the defaults are the shipped planner's).

    Attributes:
        lookahead: Slots ahead in which arrivals are sampled (None: the rest of the day).
        fill: Give the GPUs the plan leaves idle to the real-time apps (:func:`agents.live.fill.fill_idle`).
        fill_z: ... up to the forecast plus this many observed relative error SDs
            (:func:`agents.live.fill.fill_ceiling`).
        confidence: Expectation: standard errors a departure from the base decision must clear.
        min_gain: Expectation: share of the base decision's value a departure must gain.
        corrected: Expectation: the race's bar is shared among the challengers and read off Student's t
            (:func:`agents.live.race.critical`); False: ``confidence`` standard errors as they are.
        rollout: What plans the rest of each future: ``base`` (the base planner) or ``fast`` (greedy's one
            sweep, :data:`agents.greedy.FAST`).
        fill_within_ramp: Raise an app at most one ramp step above the plan's curve, so that every raised
            GPU can be given back to a job in the next slot.
        min_share: Expectation: share of the futures in which a departure must do at least as well.
        base_fill: The base decision has its curves raised into idle GPUs (the fill); False: the base
            decision is the base planner's own (rolling greedy's), and the fill is one more candidate.
        newsvendor: Expectation: the apps planned at the newsvendor quantile of the error model's paths is a
            candidate (the hedge the penalty asks for: ``penalty / (penalty + worth)``, about 0.9).
    """

    lookahead: int | None = None
    fill: bool = True
    fill_z: float = DEFAULT_FILL_Z
    confidence: float = DEFAULT_CONFIDENCE
    min_gain: float = DEFAULT_MIN_GAIN
    rollout: str = "base"
    corrected: bool = True
    fill_within_ramp: bool = False
    base_fill: bool = True
    min_share: float = 0.0
    newsvendor: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.lookahead is not None and self.lookahead < 1:
            raise ValueError(f"lookahead: expected an integer >= 1 or None, got {self.lookahead}")
        if not (math.isfinite(self.confidence) and self.confidence >= 0 and self.min_gain >= 0):
            raise ValueError("confidence and min_gain: expected numbers >= 0")
        if self.rollout not in ("base", "fast"):
            raise ValueError(f"rollout: expected base or fast, got {self.rollout!r}")


def ablated(planner: AnticipatingPlanner, **changes: Any) -> Ablated:
    """The planner as an :class:`Ablated` one, with ``changes`` to any of its fields or fixed settings."""
    kept = {f.name: getattr(planner, f.name) for f in fields(planner) if f.init}
    return Ablated(**{**kept, **changes})


LIVE: dict[str, tuple[bool, str, str]] = {
    "anticipate": (True, "auto", "anticipate"),
    "anticipate-nohist": (False, "auto", "anticipate"),
    "anticipate-residual": (True, "residual", "anticipate"),
    "anticipate-backtest": (True, "backtest", "anticipate"),
    "anticipate-record": (True, "record", "anticipate"),
    "anticipate-point": (True, "point", "anticipate"),
    "anticipate-histfc": (True, "history", "anticipate"),
    "anticipate-newsvendor": (True, "newsvendor", "anticipate"),
    "anticipate-consensus": (True, "corrector", "anticipate-consensus"),
}
"""The live planner's variants: name -> (fitted from the history, its demand forecast (``auto``: rolling greedy's,
the corrected forecast one error level above, the level measured from the raw errors; ``residual``: the same with
the level measured from what the correction leaves; ``backtest``: the forecast and margin that cost least on the past
days played as if live; ``record``: the same, updated by today's record; ``point``: the corrected forecast, no
margin; :func:`agents.live.anticipate.forecast_of`), the live planner's name: the expectation rule, or the
consensus vote it replaced)."""
LIVE_OPTIONS: dict[str, dict[str, Any]] = {
    "anticipate-fixed": {"most_samples": 8, "corrected": False},
    "anticipate-fast": {"rollout": "fast"},
    "anticipate-no-hedges": {"margins": ()},
    "anticipate-no-future-plans": {"future_plans": 0},
    "anticipate-record-fast": {"forecast": "record", "forecaster": {"prior_cells": 12.0}},
    "anticipate-today-margin": {"forecaster": {"errors": None}},
    "anticipate-half-margin": {"forecaster": {"margin": 0.5}},
    "anticipate-bar-1": {"confidence": 1.0},
    "anticipate-no-newsvendor": {"newsvendor": False},
    "anticipate-base": {"arrivals": None, "runtimes": None, "errors": None},
}
"""Variants of ``anticipate`` that change one setting of its rule, for the ablations of docs/rolling.md:
``-fixed`` the fixed rule (8 futures, a bar of 2 standard errors), ``-fast`` rollouts by greedy's
one sweep, ``-no-hedges`` no plans at margins around the point forecast among the candidates, ``-no-newsvendor`` no
plan at the newsvendor quantile among them, ``-today-margin`` the base forecast's margin from today's errors alone
(not the error model's level), ``-half-margin`` half an error level of margin, ``-bar-1`` a departure bar of one
standard error, ``-no-future-plans``
no plans of sampled futures among them, ``-base`` its base decision (greedy with the fill) at every cycle: nothing is
sampled, so no candidate is raced (:meth:`agents.live.anticipate.AnticipatingPlanner.weigh`)."""
for _name, _options in LIVE_OPTIONS.items():
    LIVE[_name] = (True, _options.get("forecast", "auto"), "anticipate")


def build(variant: str, day: Scenario, past: Sequence[Scenario], samples: int, seed: int, name: str) -> Any:
    """The live planner of a variant of :data:`LIVE` for a day, fitted on ``past`` where the variant says.

    A variant that changes one of the rule's fixed settings is :func:`ablated`; the others are the shipped planner.
    """
    with_history, forecast, kind = LIVE[variant]
    planner = live_planner(
        kind, history=past if with_history else (), day=day, samples=samples, seed=seed, forecast=forecast
    )
    planner = replace(planner, name=name)
    changes = dict(LIVE_OPTIONS.get(variant, {}))
    changes.pop("forecast", None)
    if "forecaster" in changes:
        planner = replace(planner, forecaster=replace(planner.forecaster, **changes.pop("forecaster")))
    shipped = {f.name for f in fields(planner) if f.init}
    return replace(planner, **changes) if set(changes) <= shipped else ablated(planner, **changes)
