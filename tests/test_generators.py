"""The seven scenario families: seeded, sized as SPEC section 5 says, and shaped as the issue asks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, generate
from gpu_env.scenario import load_scenario

GPUS = {  # SPEC section 5: each family's GPUs, all in nodes of 8
    "mixed-control": 16,
    "training-heavy": 8,
    "realtime-diurnal": 32,
    "batch-fragmentation": 16,
    "priority-inversion": 24,
    "uniform-priority": 16,
    "scale-64x30": 64,
}
CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "scenarios"


def test_the_seven_families_exist_with_their_sizes():
    assert set(FAMILIES) == set(GPUS)
    for name, gpus in GPUS.items():
        s = generate(name, seed=1)
        assert (s.gpus, s.node_size, s.slots) == (gpus, 8, 24)
        assert s.family == name and s.seed == 1
    assert len(generate("scale-64x30", seed=1).jobs) == 30


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_same_seed_same_scenario_other_seed_other(family: str):
    assert generate(family, 7) == generate(family, 7)
    assert generate(family, 7) != generate(family, 8)


@settings(max_examples=40, deadline=None)
@given(family=st.sampled_from(sorted(FAMILIES)), seed=st.integers(0, 100_000))
def test_families_draw_well_formed_contended_days(family: str, seed: int):
    s = generate(family, seed)
    for job in s.jobs:
        assert job.gpus & (job.gpus - 1) == 0, "job sizes are powers of two"
        assert job.gpus <= s.gpus
    assert s.apps, "one or more real-time apps"
    for app in s.apps:
        d = np.array(app.demand)
        assert d.max() > d.min(), "a day-shaped curve has a peak and a trough"
        assert d.max() <= s.gpus
    assert any(job.running_on for job in s.jobs), "some inherited running jobs"
    if family == "uniform-priority":
        assert {job.weight for job in s.jobs} == {1.0}


def test_deadlines_appear_across_seeds():
    for family in FAMILIES:
        assert any(job.deadline is not None for seed in range(10) for job in generate(family, seed).jobs)


def test_priority_inversion_puts_long_cheap_jobs_first():
    s = generate("priority-inversion", BENCHMARK_SEEDS["priority-inversion"])
    pending = [job for job in s.jobs if job.running_on is None]
    first = pending[: len(pending) // 3]
    assert all(job.weight == 1.0 and job.duration >= 10 for job in first)
    assert max(job.weight for job in pending) > 1.0


def test_sizes_can_be_overridden():
    s = generate("mixed-control", 3, gpus=32, num_jobs=40)
    assert s.gpus == 32 and len(s.jobs) == 40
    small = generate("scale-64x30", 3, gpus=16)
    assert small.gpus == 16 and all(job.gpus <= 16 for job in small.jobs)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_shipped_benchmark_scenarios_are_the_generated_ones(family: str):
    path = CONFIGS / f"{family}.yaml"
    assert path.exists(), f"{path} is missing: run `gpualloc generate {family} --seed {BENCHMARK_SEEDS[family]}`"
    assert load_scenario(path) == generate(family, BENCHMARK_SEEDS[family])
