"""The learned planner's study scripts measure what they say: benchmarks/ppo_sampling.py and ppo_time_split.py."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

import benchmarks.ppo_sampling as sampling
import benchmarks.ppo_time_split as time_split
from agents import ppo
from gpu_env.batch.engine import BatchEngine
from gpu_env.generators import generate


@pytest.fixture(scope="module")
def policy() -> ppo.LoadedPolicy:
    return ppo.load_policy()


@pytest.mark.parametrize("family", ["mixed-control", "uniform-priority", "scale-64x30"])
def test_the_shipped_rule_is_the_planners_rollouts(policy, family):
    sc = generate(family, seed=50_001)
    shipped = ppo.rollout_batch(sc, policy.logits, policy.limits, samples=8, seed=0).objectives.max()
    assert sampling.best_of(sc, policy, "sample", 1.0, 8, seed=0) == shipped


def test_distinct_starts_take_distinct_first_actions(policy, monkeypatch):
    sc = generate("batch-fragmentation", seed=50_002)
    first: list[list[int]] = []
    real_step = BatchEngine.step

    def record(engine, actions):
        if not first:
            first.append([int(a) for a in actions])
        return real_step(engine, actions)

    monkeypatch.setattr(BatchEngine, "step", record)
    sampling.best_of(sc, policy, "starts", 1.0, 4, seed=0)
    engine = BatchEngine.for_scenarios([sc])
    allowed = int(engine.action_masks()[0].sum())
    assert len(set(first[0])) == min(4, allowed)


def test_the_sampling_study_writes_both_tables(tmp_path):
    out = tmp_path / "sampling.md"
    assert sampling.main(["--instances", "1", "--samples", "2", "--sweep", "1,2", "--out", str(out)]) == 0
    text = out.read_text()
    for name, _, _ in sampling.RULES:
        assert f"| {name} |" in text
    sweep = re.findall(r"^\| (\d+) \| ([\d.]+) \| ([\d.]+) \| [\d.]+ \|$", text, re.M)
    assert [int(n) for n, _, _ in sweep] == [1, 2]
    for _, alone, guarded in sweep:  # the guard returns the better of the rollouts and greedy's plan
        assert float(guarded) >= max(float(alone), 1.0) - 1e-4


def test_the_time_split_adds_up_and_leaves_the_planner_as_it_was(tmp_path, monkeypatch):
    # The clock is a controlled input, the same at any machine speed: each reading is TICK after the one before, and
    # each call of a timed part's own code takes WORK more. Parts timed apart (none inside another) then add up to at
    # most the total exactly (the rest, gaps of a TICK, is >= 0); a part timed twice would overshoot by a WORK a call.
    tick, work = 2.0**-16, 2.0**-8  # seconds, exact in binary; a TICK still shows as 0.02 ms in the table
    clock = SimpleNamespace(now=0.0)

    def perf_counter() -> float:
        clock.now += tick
        return clock.now

    def working(fn):
        def run(*args, **kwargs):
            clock.now += work
            return fn(*args, **kwargs)

        return run

    monkeypatch.setattr(time_split, "time", SimpleNamespace(perf_counter=perf_counter))
    parts = [(ppo, "observe"), (ppo, "choose_actions")] + [(BatchEngine, n) for n in ("step", "action_masks", "reset")]
    for owner, name in parts:
        monkeypatch.setattr(owner, name, working(getattr(owner, name)))
    before = (ppo.observe, ppo.choose_actions, BatchEngine.step, BatchEngine.action_masks, BatchEngine.reset)
    out = tmp_path / "split.md"
    assert time_split.main(["--plans", "1", "--samples", "2", "--out", str(out)]) == 0
    assert (ppo.observe, ppo.choose_actions, BatchEngine.step, BatchEngine.action_masks, BatchEngine.reset) == before
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ") and line[2] != "-"][1:]
    assert len(rows) == 2 * len(time_split.SCENARIOS)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        total = float(cells[3])
        *parts, rest = [float(c.split()[0]) for c in cells[5:-1]]  # the timed parts, then the rest of the total
        assert float(cells[-1]) > 0  # the winner's plan and its metrics, timed apart
        assert float(cells[4]) > 0  # greedy, timed
        assert total > 0 and parts[0] > 0  # onnxruntime ran
        assert all(p >= 0 for p in parts) and rest >= 0  # the parts do not overlap (no part timed twice)
