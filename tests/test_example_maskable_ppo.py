"""examples/maskable_ppo.py, the researcher's path: a smoke run with a tiny budget, and its seeding."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from gpu_env.generators import FAMILIES
from gpu_env.scenario import load_scenario
from gpu_env.validation import validate

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "maskable_ppo.py"
TINY = ["--timesteps", "256", "--num-envs", "2", "--n-steps", "64"]


@pytest.fixture
def example() -> Iterator[ModuleType]:
    torch = pytest.importorskip("torch")
    pytest.importorskip("sb3_contrib")
    pytest.importorskip("tensorboard")
    spec = importlib.util.spec_from_file_location("maskable_ppo_example", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses and SB3's pickles look the module up by name
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    yield module
    torch.set_num_threads(threads)  # main() sets one thread; the rest of the session keeps its own
    del sys.modules[spec.name]


def test_smoke_run_trains_logs_and_plans_the_seven_scenarios(example: ModuleType, tmp_path: Path, capsys) -> None:
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    run, out = tmp_path / "run", tmp_path / "results.md"
    rows = example.main([*TINY, "--seed", "0", "--run-dir", str(run), "--out", str(out)])
    printed = capsys.readouterr().out

    # It trained the budget and saved the model.
    assert "trained 256 timesteps" in printed and (run / "model.zip").is_file()
    # TensorBoard: SB3's curves and the seven scenarios' ratios, in one run folder.
    events = sorted(run.glob("maskable_ppo_*/events.out.tfevents.*"))
    assert len(events) == 1
    accumulator = EventAccumulator(str(events[0].parent), size_guidance={SCALARS: 0})
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
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
    import torch
    from sb3_contrib import MaskablePPO

    def trained(seed: int, name: str) -> list[torch.Tensor]:
        example.main([*TINY, "--seed", str(seed), "--run-dir", str(tmp_path / name), "--no-eval"])
        return list(MaskablePPO.load(tmp_path / name / "model.zip", device="cpu").policy.state_dict().values())

    first, again, other = trained(0, "a"), trained(0, "b"), trained(1, "c")
    assert all(torch.equal(x, y) for x, y in zip(first, again, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(first, other, strict=True))
