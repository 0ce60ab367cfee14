"""Metrics of SPEC section 3 on hand-worked examples."""

from __future__ import annotations

import pytest

from gpu_env.metrics import compute_metrics, placement_value
from gpu_env.plan import Placement, Plan
from gpu_env.validation import validate
from tests.conftest import make_scenario


def worked():
    # G=4, T=4, decay 1/2; one app with demand [1, 2, 2, 0]; A: 2 GPUs x 3 slots at priority 2;
    # B: 1 GPU x 2 slots with value 6 (so w = 6 / (1 * 2) = 3, overriding its priority 7).
    s = make_scenario(
        horizon={"slots": 4, "decay": 0.5},
        realtime=[{"name": "rt", "demand": [1, 2, 2, 0], "ramp": 1, "initial": 1, "penalty": 10}],
        jobs=[
            {"id": "A", "type": "training", "gpus": 2, "duration": 3, "priority": 2},
            {"id": "B", "type": "quantization", "gpus": 1, "duration": 2, "priority": 7, "value": 6},
        ],
    )
    # A starts at 2 and runs past the horizon (slots 2, 3, 4); the app is short by 1 in slot 2 and
    # over-reserved by 1 in slot 3.
    plan = Plan("tiny", "hand", [Placement("A", 2, (0, 1)), Placement("B", 0, (3,))], {"rt": [1, 2, 1, 1]})
    return s, plan


def test_hand_worked_metrics():
    s, plan = worked()
    assert validate(s, plan) == []
    m = compute_metrics(s, plan)
    # A: w*k*(0.5**2 + 0.5**3) = 2*2*0.375 = 1.5 (slot 4 lies past the horizon); B: 3*1*(1 + 0.5) = 4.5.
    assert m.job_value == pytest.approx(6.0)
    assert m.shortfall == 1  # slot 2: demand 2, served 1
    assert m.objective == pytest.approx(6.0 - 10 * 1)
    # held inside the horizon: A 2x2 + B 1x2 = 6; served min(D, r) = 1+2+1+0 = 4 (the idle reserve in slot 3
    # does not count); 10 / (4 * 4).
    assert m.utilization == pytest.approx(10 / 16)
    assert (m.completed, m.placed, m.jobs) == (1, 2, 2)  # A ends at 5 > T


def test_decay_weights_each_slot():
    s, _ = worked()
    a = s.jobs[0]
    assert placement_value(a, 0, s) == pytest.approx(2 * 2 * (1 + 0.5 + 0.25))
    assert placement_value(a, 3, s) == pytest.approx(2 * 2 * 0.125)


def test_value_override_sets_weight():
    s, _ = worked()
    assert s.jobs[1].weight == pytest.approx(3.0)
    assert s.jobs[0].weight == pytest.approx(2.0)


def test_empty_plan_pays_every_demand():
    s, _ = worked()
    m = compute_metrics(s, Plan("tiny", "none", [], {"rt": [0, 0, 0, 0]}))
    assert m.shortfall == 5 and m.objective == pytest.approx(-50.0) and m.utilization == 0.0
