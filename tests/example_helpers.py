"""The researcher's examples (examples/*.py) under test: each loaded as a module, its TensorBoard run, its seeding.

Each needs torch, sb3-contrib and tensorboard: a test that loads one is skipped without them.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(script: str, name: str) -> Iterator[ModuleType]:
    """For a fixture to ``yield from``: ``examples/<script>`` loaded as module ``name``, unloaded afterwards."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sb3_contrib")
    pytest.importorskip("tensorboard")
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses and SB3's pickles look the module up by name
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    yield module
    torch.set_num_threads(threads)  # main() sets one thread; the rest of the session keeps its own
    del sys.modules[spec.name]


def logged_scalars(run: Path, pattern: str) -> set[str]:
    """The scalars' tags of the one TensorBoard events file under ``run`` matching ``pattern``."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    (events,) = sorted(run.glob(pattern))
    accumulator = EventAccumulator(str(events.parent), size_guidance={SCALARS: 0})
    accumulator.Reload()
    return set(accumulator.Tags()["scalars"])


def assert_same_seed_same_network(example: ModuleType, tmp_path: Path, tiny: list[str]) -> None:
    """Trained twice with one seed the example's network is the same, trained with another seed it is not."""
    import torch
    from sb3_contrib import MaskablePPO

    def trained(seed: int, name: str) -> list[torch.Tensor]:
        example.main([*tiny, "--seed", str(seed), "--run-dir", str(tmp_path / name), "--no-eval"])
        return list(MaskablePPO.load(tmp_path / name / "model.zip", device="cpu").policy.state_dict().values())

    first, again, other = trained(0, "a"), trained(0, "b"), trained(1, "c")
    assert all(torch.equal(x, y) for x, y in zip(first, again, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(first, other, strict=True))
