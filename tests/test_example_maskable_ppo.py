"""examples/maskable_ppo.py, the researcher's path: a smoke run with a tiny budget, and its seeding."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from gpu_env.generators import FAMILIES
from gpu_env.scenario import load_scenario
from gpu_env.validation import validate
from tests.example_helpers import assert_same_seed_same_network, load_example, logged_scalars

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--timesteps", "256", "--num-envs", "2", "--n-steps", "64"]


@pytest.fixture
def example() -> Iterator[ModuleType]:
    yield from load_example("maskable_ppo.py", "maskable_ppo_example")


def test_smoke_run_trains_logs_and_plans_the_seven_scenarios(example: ModuleType, tmp_path: Path, capsys) -> None:
    run, out = tmp_path / "run", tmp_path / "results.md"
    rows = example.main([*TINY, "--seed", "0", "--run-dir", str(run), "--out", str(out)])
    printed = capsys.readouterr().out

    # It trained the budget and saved the model.
    assert "trained 256 timesteps" in printed and (run / "model.zip").is_file()
    # TensorBoard: SB3's curves and the seven scenarios' ratios, in one run folder.
    tags = logged_scalars(run, "maskable_ppo_*/events.out.tfevents.*")
    assert {"rollout/ep_rew_mean", "train/loss", "seven/mean_vs_greedy", "seven/mean_vs_ppo"} <= tags
    # One valid plan per benchmark scenario, checked again here against the scenario files.
    assert [r["scenario"] for r in rows] == list(FAMILIES)
    for r in rows:
        scenario = load_scenario(ROOT / "configs" / "scenarios" / f"{r['scenario']}.yaml")
        assert r["valid"] and validate(scenario, r["plan"]) == []
        assert r["plan"].placements  # the policy placed jobs
        assert r["vs_greedy"] == pytest.approx(r["objective"] / r["greedy"])
        assert r["vs_ppo"] == pytest.approx(r["objective"] / r["ppo"])
    # The table, printed and written.
    for name in FAMILIES:
        assert f"| {name} |" in printed
    assert "| **mean** |" in printed
    text = out.read_text()
    assert "| scenario | objective | greedy | ppo |" in text and "256 timesteps, 2 envs, seed 0" in text


def test_same_seed_same_network(example: ModuleType, tmp_path: Path) -> None:
    assert_same_seed_same_network(example, tmp_path, TINY)
