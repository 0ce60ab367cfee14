"""The live planner's variants (lab/variants.py): the ablation knobs live there, not in the shipped planner."""

from __future__ import annotations

from dataclasses import fields

import pytest

from agents.live.anticipate import AnticipatingPlanner, live_planner
from agents.live.forecast import NoiseModel
from agents.simulator.simulation import realized_day, rolling
from gpu_env.generators import generate
from lab.variants import LIVE, LIVE_OPTIONS, Ablated, ablated, build

FIXED = {f.name for f in fields(Ablated)} - {f.name for f in fields(AnticipatingPlanner)}


def test_the_fixed_settings_are_no_field_of_the_shipped_planner_and_default_alike():
    assert FIXED >= {"fill", "fill_z", "confidence", "min_gain", "rollout", "corrected", "newsvendor", "lookahead"}
    shipped, variant = AnticipatingPlanner(), Ablated()
    assert all(getattr(shipped, name) == getattr(variant, name) for name in FIXED)
    with pytest.raises(TypeError):
        AnticipatingPlanner(fill=False)  # type: ignore[call-arg]


def test_every_variant_changes_settings_the_planners_have():
    known = {f.name for f in fields(Ablated)} | {"forecast", "forecaster"}
    assert all(set(changes) <= known for changes in LIVE_OPTIONS.values())
    assert set(LIVE_OPTIONS) <= set(LIVE)


def test_a_variant_is_ablated_only_where_it_changes_a_fixed_setting():
    day = generate("mixed-control", 3, gpus=8)
    assert type(build("anticipate", day, (), 2, 0, "anticipate")) is AnticipatingPlanner
    assert type(build("anticipate-no-hedges", day, (), 2, 0, "x")) is AnticipatingPlanner  # margins: a site field
    fast = build("anticipate-fast", day, (), 2, 0, "anticipate-fast")
    assert type(fast) is Ablated and fast.rollout == "fast" and fast.name == "anticipate-fast"
    with pytest.raises(ValueError, match="rollout"):
        ablated(fast, rollout="slow")


def test_the_ablated_planner_with_the_defaults_plays_a_day_as_the_shipped_one():
    day = generate("mixed-control", 5, gpus=8)
    actual = realized_day(day, NoiseModel(sigma=0.3).draw(day, 5))
    shipped = live_planner("anticipate", day=day, samples=2, seed=1)
    runs = [rolling(day, planner, actual) for planner in (shipped, ablated(shipped))]
    assert runs[0].metrics.objective == runs[1].metrics.objective
    assert runs[0].executed.placements == runs[1].executed.placements
    assert runs[0].executed.curves == runs[1].executed.curves
