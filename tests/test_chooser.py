"""The candidate chooser's features, labels and fitting (agents/learned/chooser.py)."""

from __future__ import annotations

import numpy as np
import pytest

from agents.learned.chooser import FEATURES, KINDS, STATS, LabelledCycle, candidate_features, fit, kind_of, label_cycle
from agents.rolling.allocator import ClusterState
from agents.rolling.anticipate import AnticipatingPlanner
from agents.rolling.forecast import NoiseModel, with_demand
from agents.rolling.simulation import LiveDay, rolling
from gpu_env.generators import generate


def test_features_hand_worked() -> None:
    """Base 10, 10; a hold 12, 9: gains +0.2 and -0.1 of the base's value (mean 0.05), best in one future of two."""
    values = np.array([[10.0, 10.0], [12.0, 9.0]])
    state = ClusterState(gpus=8, horizon=4, error_level=(0.2,))
    f = candidate_features(values, ("the base plan", "holding j1"), state, 6, 24)
    assert f.shape == (2, len(FEATURES))
    col = {name: i for i, name in enumerate(FEATURES)}
    assert f[1, col["gain_mean"]] == pytest.approx(0.05)
    assert f[1, col["share_best"]] == pytest.approx(0.5) and f[0, col["share_best"]] == pytest.approx(0.5)
    assert f[1, col["regret_mean"]] == pytest.approx(0.05)  # (0 + 1) / 2 / 10
    assert f[1, col["kind_holding one"]] == 1.0 and f[0, col["kind_base"]] == 1.0
    assert f[0, col["slot_of_day"]] == pytest.approx(0.25) and f[0, col["error_level"]] == pytest.approx(0.2)
    assert kind_of("margin -1") == ("margin", -1.0) and len(STATS) + len(KINDS) + 4 == len(FEATURES)


def test_the_target_is_the_base_unless_a_candidate_earns_clearly_more() -> None:
    cycle = LabelledCycle(np.zeros((3, len(FEATURES))), np.array([100.0, 100.1, 99.0]))
    assert cycle.target(0.002) == 0
    assert LabelledCycle(cycle.features, np.array([100.0, 101.0, 99.0])).target(0.002) == 1


def test_fit_learns_a_separable_choice() -> None:
    """The candidate whose gain is positive earned more in every cycle: the fitted chooser picks it."""
    rng = np.random.default_rng(0)
    cycles = []
    for _ in range(40):
        features = rng.normal(0, 1, (3, len(FEATURES)))
        best = int(rng.integers(3))
        features[:, 0] = -1.0
        features[best, 0] = 1.0
        realized = np.full(3, 100.0)
        realized[best] = 110.0
        cycles.append(LabelledCycle(features, realized))
    chooser = fit(cycles, epochs=200)
    assert all(chooser.choose(c.features) == int(np.argmax(c.realized)) for c in cycles)


def test_a_label_of_the_base_decision_is_the_base_day() -> None:
    """Committing the base decision now and playing the base after is exactly the base planner's day."""
    day = generate("training-heavy", 3)
    actual = with_demand(day, NoiseModel(0.3).draw(day, 3))
    base = AnticipatingPlanner()
    live = LiveDay(day, actual, corrector=base.forecaster)
    for _ in range(5):
        state, ran = live.state()
        live.commit(base.decide(state, live.t, ran))
    state, ran = live.state()
    value = label_cycle(live, [base.decide(state, live.t, ran)], lambda s, t: base.decide(s, t))
    assert value[0] == pytest.approx(rolling(day, base, actual).metrics.objective)
