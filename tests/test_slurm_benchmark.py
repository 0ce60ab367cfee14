"""benchmarks/slurm_benchmark.py's pure parts: the days' Slurm requests, the static layout, scoring, the section."""

from __future__ import annotations

import pytest

import benchmarks.slurm_benchmark as sb
from gpu_env.generators import FAMILIES
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Placement, Plan
from tests.conftest import make_scenario

T0 = 1_000_000.0  # an epoch second that starts slot 0
SLOT = 60.0


def _scenario():
    return make_scenario(
        cluster={"gpus": 16, "node_size": 8},
        horizon={"slots": 6, "decay": 1.0},
        realtime=[{"name": "chat", "demand": [2, 3, 5, 5, 3, 2], "ramp": 2, "initial": 2, "penalty": 4}],
        jobs=[
            {"id": "run", "type": "training", "gpus": 4, "duration": 3, "running_on": [8, 9, 10, 11]},
            {"id": "a", "type": "training", "gpus": 2, "duration": 2, "release": 1, "priority": 3},
            {"id": "b", "type": "quantization", "gpus": 16, "duration": 1, "release": 0, "deadline": 3},
            {"id": "c", "type": "batch_inference", "gpus": 1, "duration": 2, "value": 10},
        ],
    )


def test_priority_orders_by_worth_and_is_never_zero():
    assert sb.slurm_priority(5.0) > sb.slurm_priority(2.5) > sb.slurm_priority(0.0001) == 1
    assert sb.slurm_priority(2.5) == 2500
    assert sb.slurm_priority(1e6) < 2**32 - 1  # the largest worth the scenarios allow still fits Slurm's field


def test_gres_within_a_node_and_whole_nodes_beyond():
    sc = _scenario()
    job = {j.id: j for j in sc.jobs}
    assert sb.gres_args(job["a"], 8) == ["--gres=gpu:2"]
    assert sb.gres_args(job["b"], 8) == ["-N2", "--gres=gpu:8"]
    assert sb.inherited_nodes(job["run"], 8) == {1: 4}
    assert sb.inherited_nodes(job["a"], 8) == {}


def test_static_layout_packs_the_peak_beside_the_inherited_jobs():
    sc = _scenario()
    assert sb.static_layout(sc) == [("chat", 1, 4), ("chat", 0, 1)]  # the fuller node first
    too_big = make_scenario(
        cluster={"gpus": 8, "node_size": 8},
        realtime=[{"name": "x", "demand": [2, 6, 6, 6, 6, 6], "ramp": 4, "initial": 2, "penalty": 1}],
        jobs=[{"id": "r", "type": "training", "gpus": 4, "duration": 2, "running_on": [0, 1, 2, 3]}],
    )
    with pytest.raises(ValueError, match="does not fit"):
        sb.static_layout(too_big)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_static_layout_fits_every_family_day(family):
    sc = sb._day_scenario(family, 7)
    pieces = sb.static_layout(sc)
    for app in sc.apps:
        assert sum(g for name, _, g in pieces if name == app.name) == max(app.demand)
    assert all(0 < g <= sc.node_size for _, _, g in pieces)


def test_slot_of_counts_a_start_in_the_nearest_slot_a_quarter_early():
    assert sb.slot_of(T0 - 5, T0, SLOT) == 0
    assert sb.slot_of(T0 + 44, T0, SLOT) == 0
    assert sb.slot_of(T0 + 46, T0, SLOT) == 1
    assert sb.slot_of(T0 + 2 * SLOT + 1, T0, SLOT) == 2


def test_score_side_is_compute_metrics_of_the_starts_in_their_window():
    sc = _scenario()
    starts = {"run": T0 - 8, "a": T0 + SLOT + 3, "b": T0 + 3 * SLOT + 2, "c": T0 + 7 * SLOT}
    curve = [2, 4, 5, 5, 3, 2]
    side = sb.score_side(sc, starts, T0, SLOT, {"chat": curve}, {"chat": 2})
    assert side.outside == ("b@3",)  # b's deadline 3 leaves it slots 0..2; c started after the day
    assert side.started == 2
    expected = compute_metrics(
        sc, Plan(sc.name, "x", [Placement("run", 0, (8, 9, 10, 11)), Placement("a", 1, (0, 1))], {"chat": curve})
    )
    assert side.metrics == expected
    assert side.ramp_violations == 0


def test_score_side_counts_the_ramp_violations_of_every_app():
    sc = _scenario()
    assert sb.score_side(sc, {}, T0, SLOT, {"chat": [5, 5, 1, 5, 3, 2]}, {"chat": 2}).ramp_violations == 3
    assert sb.score_side(sc, {}, T0, SLOT, {"chat": [5] * 6}, {"chat": 5}).ramp_violations == 0


def test_replace_section_keeps_the_other_sections():
    text = "# Title\n\n## One\n\nold one\n\n## Two\n\nkept\n"
    first = sb.replace_section(text, "## One", ["## One", "", "new", ""])
    assert first == "# Title\n\n## One\n\nnew\n\n## Two\n\nkept\n"
    last = sb.replace_section(text, "## Two", ["## Two", "", "again", ""])
    assert last == "# Title\n\n## One\n\nold one\n\n## Two\n\nagain\n"
    appended = sb.replace_section(text, "## Three", ["## Three", "", "x", ""])
    assert appended == text + "\n## Three\n\nx\n"
    assert sb.replace_section("", "## Three", ["## Three", "x"]) == "## Three\nx\n"


def test_a_live_day_is_scored_against_its_actual_demand():
    """A live day's record is scored on the realized day: served exactly the actual demand, gpualloc's side has no
    shortfall; served the forecast, it is charged where the actual demand came above it. Slurm alone holds the
    forecast's peak all day and is charged the actual demand above it."""
    family, seed = "realtime-diurnal", 7
    forecast = sb._day_scenario(family, seed)
    actual = sb.NoiseModel(0.3).draw(forecast, seed)
    T = forecast.slots
    raw = {
        "family": family,
        "seed": seed,
        "slots": 3,  # a smoke run's record: no hindsight or simulation is asked of it
        "t0": T0,
        "slot_seconds": SLOT,
        "starts": {"backfill": {}, "gpualloc": {}},
        "served": {a.name: [int(x) for x in actual[i]] for i, a in enumerate(forecast.apps)},
        "read_back": {a.name: [] for a in forecast.apps},
        "cycles": [],
        "live": {"sigma": 0.3, "runtime_model": "trace", "scheduler": "anticipate"},
    }
    exact = sb._score_day(raw)
    assert exact["gpualloc"].metrics.shortfall == 0 and "hindsight" not in exact
    raw["served"] = {a.name: list(a.demand) for a in forecast.apps}
    planned = sb._score_day(raw)
    over = sum(max(int(actual[i, t]) - a.demand[t], 0) for i, a in enumerate(forecast.apps) for t in range(T))
    assert over > 0 and planned["gpualloc"].metrics.shortfall == over
    peak_short = sum(max(int(actual[i, t]) - max(a.demand), 0) for i, a in enumerate(forecast.apps) for t in range(T))
    assert planned["backfill"].metrics.shortfall == peak_short
