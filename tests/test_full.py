"""Full mode and the packaged policy it hints with."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import pytest

from agents import full, ppo
from gpu_env.generators import generate
from gpu_env.scenario import Scenario

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return generate("training-heavy", seed=0)


# ----------------------------------------------------------------------------- the shipped policy


def test_the_shipped_policy_is_package_data():
    folder = resources.files("agents") / "policies"
    assert (folder / "default.onnx").is_file() and (folder / "default.json").is_file()
    assert ppo.DEFAULT_POLICY == Path(str(folder / "default.onnx"))
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "agents.policies" in config["packages"]
    assert {"default.onnx", "default.json"} <= set(config["package-data"]["agents.policies"])
    assert not (ROOT / "policies").exists()  # one copy, inside the package


def test_with_the_shipped_policy_nothing_falls_back(scenario, capsys):
    result = full.solve(scenario, deterministic_time=0.0)
    assert capsys.readouterr().err == ""
    hint = result.plan.info["hint"]
    assert set(hint["candidates"]) == {"ppo", "greedy"} and "fallback" not in hint
    assert result.plan.info["status"] in {"optimal", "feasible"}
