"""examples/live_ppo.py, the researcher's path to a live policy: a smoke run with a tiny budget, and its seeding."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "live_ppo.py"
TINY = ["--timesteps", "128", "--num-envs", "1", "--n-steps", "64", "--batch-size", "64", "--families", "mixed-control"]


@pytest.fixture
def example() -> Iterator[ModuleType]:
    torch = pytest.importorskip("torch")
    pytest.importorskip("sb3_contrib")
    pytest.importorskip("tensorboard")
    spec = importlib.util.spec_from_file_location("live_ppo_example", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    yield module
    torch.set_num_threads(threads)
    del sys.modules[spec.name]


def test_smoke_run_trains_logs_and_plays_a_fresh_day(example: ModuleType, tmp_path: Path, capsys) -> None:
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    run = tmp_path / "run"
    rows = example.main([*TINY, "--seed", "0", "--run-dir", str(run)])
    printed = capsys.readouterr().out
    assert "trained 128 timesteps on 1 envs, seed 0" in printed and (run / "model.zip").is_file()
    (events,) = sorted(run.glob("live_ppo_*/events.out.tfevents.*"))
    accumulator = EventAccumulator(str(events.parent), size_guidance={SCALARS: 0})
    accumulator.Reload()
    assert {"rollout/ep_rew_mean", "train/loss"} <= set(accumulator.Tags()["scalars"])
    (row,) = rows
    assert row["family"] == "mixed-control" and row["seed"] == 90_000 and row["valid"]
    assert row["trained"] == row["plan"].metrics.objective and row["greedy"] > 0 and row["anticipate"] > 0
    assert "| mixed-control | 90000 |" in printed


def test_same_seed_same_network_and_numbers(example: ModuleType, tmp_path: Path) -> None:
    import torch
    from sb3_contrib import MaskablePPO

    def trained(seed: int, name: str) -> list[torch.Tensor]:
        example.main([*TINY, "--seed", str(seed), "--run-dir", str(tmp_path / name), "--no-eval"])
        return list(MaskablePPO.load(tmp_path / name / "model.zip", device="cpu").policy.state_dict().values())

    first, again, other = trained(0, "a"), trained(0, "b"), trained(1, "c")
    assert all(torch.equal(x, y) for x, y in zip(first, again, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(first, other, strict=True))
