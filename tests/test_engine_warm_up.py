"""No wait on the first ``gymnasium.make_vec``: ``gpualloc warm-up`` compiles the batched engine's kernels too.

``gpu_env.batch.warm_up`` plays one small vector-env episode, so that every kernel the vector env and the engine call
is in numba's disk cache; a later process, on other scenarios and options, then loads them and compiles nothing.
Checked by numba's dispatcher statistics (cache hits and misses), never by how long anything took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_env import batch
from gpu_env.batch import kernels
from tests.conftest import warm_up_line

ROOT = Path(__file__).resolve().parents[1]
COMPILED = batch.compile_stats().compiled  # numba on (not GPUALLOC_NUMBA=0)
needs_numba = pytest.mark.skipif(not COMPILED, reason="numba is off (GPUALLOC_NUMBA=0): nothing is compiled")
TIMEOUT_S = 300

WARM_UP = """
import json
from gpu_env import batch
stats = batch.warm_up()
print(json.dumps({"loaded": stats.loaded, "built": stats.built, "line": stats.describe()}))
"""

# Other scenarios, sources and options than the warm-up's: a family sampler, a scenario file with inherited work,
# trade_realtime off, plans and copies on, and the engine driven directly with only some observation keys.
FIRST_USE = """
import json, sys
import gymnasium, numpy as np
import gpu_env
from gpu_env import batch
from gpu_env.batch import BatchEngine
from gpu_env.batch.batch_observation import observe
from gpu_env.generators import generate

def play(venv, steps):
    rng = np.random.default_rng(1)
    venv.reset(seed=1)
    ended = 0
    for _ in range(steps):
        masks = venv.action_masks()
        _, _, terminated, truncated, _ = venv.step(np.where(masks, rng.random(masks.shape), -1.0).argmax(axis=1))
        ended += int((terminated | truncated).sum())
    return ended

ended = play(gymnasium.make_vec(
    "GpuCluster-v0", num_envs=3, vectorization_mode="vector_entry_point", scenario=["scale-64x30", "mixed-control"],
    trade_realtime=False, plans=True, copy=True), 60)
ended += play(gymnasium.make_vec(
    "GpuCluster-v0", num_envs=2, vectorization_mode="vector_entry_point",
    scenario="configs/scenarios/training-heavy.yaml"), 60)
engine = BatchEngine.for_scenarios([generate("batch-fragmentation", seed=3)], batch=2)
observe(engine, keys=("jobs", "action_mask"))
engine.step(engine.action_masks().argmax(axis=1))
misses = {}
for name in ("gpu_env.batch._kernels", "gpu_env.placement"):
    for attr, f in vars(sys.modules[name]).items():
        stats = getattr(f, "stats", None)
        if stats is not None and sum(stats.cache_misses.values()):
            misses[f"{name}.{attr}"] = sum(stats.cache_misses.values())
stats = batch.compile_stats()
print(json.dumps({"ended": ended, "loaded": stats.loaded, "built": stats.built, "misses": misses}))
"""


def run_python(code: str, cache: Path) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("GPUALLOC_NUMBA", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_numba
def test_engine_warm_up_fills_the_cache_and_the_next_process_compiles_no_kernel(tmp_path):
    cache = tmp_path / "numba"
    warm = run_python(WARM_UP, cache)
    assert warm["built"] == len(kernels.KERNELS) and warm["loaded"] == 0, warm  # an empty cache: all compiled here
    assert "compiled and cached" in warm["line"], warm
    index = {p.name.split("-")[0] for p in cache.rglob("*.nbi")}
    assert {f"_kernels.{name}" for name in kernels.KERNELS} <= index, index
    first = run_python(FIRST_USE, cache)
    assert first["ended"] > 0, first
    assert first["misses"] == {}, first  # not one kernel, nor a compiled rule it calls, compiled at first use
    assert first["built"] == 0 and first["loaded"] == len(kernels.KERNELS), first


def test_engine_warm_up_reports_its_kernels():
    stats = batch.warm_up()
    if COMPILED:
        assert stats.loaded + stats.built >= len(kernels.KERNELS), stats  # each kernel loaded or compiled
        assert "the batched engine's kernels were" in stats.describe()
        assert f"{stats.loaded} loaded, {stats.built} compiled" in stats.describe()
    else:
        assert (stats.loaded, stats.built) == (0, 0) and "numba is off" in stats.describe()


def test_warm_up_line_reports_the_decoder_and_the_engine(capsys):
    out = warm_up_line(capsys)
    assert ("the batched engine's kernels were" in out) if COMPILED else ("the batched engine runs as plain" in out)
