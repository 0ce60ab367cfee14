"""examples/live_ppo.py, the researcher's path to a live policy: a smoke run with a tiny budget, and its seeding."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.example_helpers import assert_same_seed_same_network, load_example, logged_scalars

TINY = ["--timesteps", "128", "--num-envs", "1", "--n-steps", "64", "--batch-size", "64", "--families", "mixed-control"]


@pytest.fixture
def example() -> Iterator[ModuleType]:
    yield from load_example("live_ppo.py", "live_ppo_example")


def test_smoke_run_trains_logs_and_plays_a_fresh_day(example: ModuleType, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    rows = example.main([*TINY, "--seed", "0", "--run-dir", str(run)])
    printed = capsys.readouterr().out
    assert "trained 128 timesteps on 1 envs, seed 0" in printed and (run / "model.zip").is_file()
    assert {"rollout/ep_rew_mean", "train/loss"} <= logged_scalars(run, "live_ppo_*/events.out.tfevents.*")
    (row,) = rows
    assert row["family"] == "mixed-control" and row["seed"] == 90_000 and row["valid"]
    assert row["trained"] == row["plan"].metrics.objective and row["greedy"] > 0 and row["anticipate"] > 0
    assert "| mixed-control | 90000 |" in printed


def test_same_seed_same_network_and_numbers(example: ModuleType, tmp_path: Path) -> None:
    assert_same_seed_same_network(example, tmp_path, TINY)
