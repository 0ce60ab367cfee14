"""No wait on first use: ``gpualloc warm-up`` fills numba's cache, one specialisation serves every plan.

The decoder is compiled on a machine's first use and cached on disk; ``gpualloc warm-up`` (run by ``make`` once the
venv is built, and in a container's image build) moves that compile to install time. These tests check what holds at
any speed: which files the cache holds and whether a process compiled or loaded, never how long either took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents import cli, ppo
from agents.options import Guard, PlanOptions
from gpu_env import listsched
from gpu_env.generators import generate
from gpu_env.scenario import load_scenario
from gpu_env.validation import validate
from tests.conftest import HANG_GUARD_S, make_scenario, warm_up_line

ROOT = Path(__file__).resolve().parents[1]
COMPILED = hasattr(listsched._decode_all, "signatures")  # numba on (not GPUALLOC_NUMBA=0)
needs_numba = pytest.mark.skipif(not COMPILED, reason="numba is off (GPUALLOC_NUMBA=0): nothing is compiled")

FIRST_PLAN = """
import json
from agents import ppo
from gpu_env import listsched
from gpu_env.scenario import load_scenario
plan = ppo.plan(load_scenario("configs/scenarios/mixed-control.yaml"))
stats = listsched.compile_stats()
print(json.dumps({"loaded": stats.loaded, "built": stats.built, "placed": len(plan.placements)}))
"""


def fresh_cache_env(cache: Path) -> dict[str, str]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("GPUALLOC_NUMBA", None)
    return env


@needs_numba
def test_warm_up_fills_the_cache_and_the_next_process_plans_without_compiling(tmp_path):
    cache = tmp_path / "numba"
    env = fresh_cache_env(cache)
    warm = subprocess.run(
        [sys.executable, "-m", "agents.cli", "warm-up"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=HANG_GUARD_S, check=False,
    )  # fmt: skip
    assert warm.returncode == 0, warm.stderr
    assert "compiled and cached" in warm.stdout, warm.stdout
    # The decoder's entry point and its compiled callees have their index files in the cache now.
    index = {p.name.split("-")[0] for p in cache.rglob("*.nbi")}
    assert {"listsched._decode_all", "listsched._decode_one", "listsched._decide"} <= index, index
    first = subprocess.run(
        [sys.executable, "-c", FIRST_PLAN],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=HANG_GUARD_S, check=False,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    got = json.loads(first.stdout)
    assert got["placed"] > 0
    assert got["loaded"] == 1 and got["built"] == 0, got  # loaded from numba's cache, nothing compiled


def test_warm_up_says_what_it_did_on_one_line(capsys):
    out = warm_up_line(capsys)
    assert ("the decoder was" in out) if COMPILED else ("numba is off" in out)


def test_warm_up_with_a_missing_or_broken_policy_is_bad_input(capsys, tmp_path):
    assert cli.main(["warm-up", "--policy", str(tmp_path / "missing.onnx")]) == cli.EXIT_BAD_INPUT
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "--policy: no such file" in err
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    assert cli.main(["warm-up", "--policy", str(broken)]) == cli.EXIT_BAD_INPUT
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "gpualloc warm-up: error: --policy:" in err and "Traceback" not in err


@needs_numba
def test_one_specialisation_serves_every_plan():
    """Argument types are uniform: every kind of scenario and option reuses the decoder's one compiled version."""
    scenarios = [
        generate("mixed-control", seed=1),  # real-time apps, trades
        generate("training-heavy", seed=2, gpus=4, num_jobs=3),  # small
        generate("batch-fragmentation", seed=3),
        generate("scale-64x30", seed=0),
        generate("priority-inversion", seed=4),
        load_scenario(ROOT / "configs/scenarios/training-heavy.yaml"),  # inherited work
        make_scenario(jobs=[{"id": "a", "type": "training", "gpus": 2, "duration": 3}]),  # no apps, one job
    ]
    options = [
        PlanOptions(),
        PlanOptions(samples=1, guard=Guard.NONE),
        PlanOptions(samples=5, guard=Guard.GREEDY, seed=3),
    ]
    for sc in scenarios:
        for opt in options:
            assert validate(sc, ppo.plan(sc, opt)) == []
    compiled = {
        name: len(f.signatures)
        for name, f in vars(listsched).items()
        if hasattr(f, "signatures") and getattr(f, "py_func", None) is not None
    }
    assert compiled["_decode_all"] == 1, compiled
    assert all(n <= 1 for n in compiled.values()), compiled  # no literal or dtype variants of a helper either
