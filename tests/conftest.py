"""Shared fixtures: small scenarios built in code."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_env.scenario import Scenario, scenario_from_dict


def make_scenario(**overrides: Any) -> Scenario:
    """A scenario from a dict, with a small default cluster; overrides replace top-level keys."""
    data: dict[str, Any] = {
        "name": "tiny",
        "cluster": {"gpus": 4, "node_size": 4},
        "horizon": {"slots": 6},
        "jobs": [],
    }
    data.update(overrides)
    return scenario_from_dict(data, "tiny.yaml")


@pytest.fixture
def tiny() -> Scenario:
    return make_scenario()
