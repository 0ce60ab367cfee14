"""Where a batched engine call spends its time: ms per call of each part, one core, at 64 GPUs x 30 jobs.

Runs the loop of ``env_speed.py`` (masks, every observation key, a uniform masked draw, step,
resets of the episodes that end) on :class:`gpu_env.batch.BatchEngine` and times each part with
``time.process_time``: the observation keys one by one, the step and, inside it, the placement,
the search, the clock move and the free runs.

Usage: ``PYTHONPATH=. taskset -c 0 .venv/bin/python benchmarks/engine_profile.py [--batch 256] [--calls 300]``;
``GPUALLOC_NUMBA=0`` in the environment profiles the array code instead of the numba kernels.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gpu_env.batch.engine as engine_module
from gpu_env.batch import BatchEngine, kernels
from gpu_env.batch import observe as observe_module
from gpu_env.generators import BENCHMARK_SEEDS, generate

OBSERVE = ("_jobs", "_gpus", "_slots", "_apps", "_globals")
INSIDE_STEP = ("_place", "_search", "_move_clock", "_free_runs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args(argv)
    sc = generate("scale-64x30", BENCHMARK_SEEDS["scale-64x30"])
    engine = BatchEngine.for_scenarios([sc], batch=args.batch)
    rng = np.random.default_rng(0)
    spent: dict[str, float] = {}

    def timed(name, f, *a):
        c = time.process_time()
        out = f(*a)
        spent[name] = spent.get(name, 0.0) + time.process_time() - c
        return out

    for name in INSIDE_STEP:
        original = getattr(engine_module.BatchEngine, name)

        def wrapped(self, *a, _f=original, _n=name):
            return timed(_n, _f, self, *a)

        setattr(engine_module.BatchEngine, name, wrapped)
    for call in range(args.calls + 20):
        if call == 20:
            spent.clear()
        masks = timed("action_masks", engine.action_masks)
        for key in OBSERVE:
            timed(key, getattr(observe_module, key), engine)
        timed("grid copy", engine.state.grid.copy)
        actions = np.where(masks, rng.random(masks.shape), -1.0).argmax(axis=1)
        _, done = timed("step", engine.step, actions)
        ended = np.flatnonzero(done)
        if ended.size:
            timed("reset", engine.reset, sc, ended)
    total = sum(v for k, v in spent.items() if k not in INSIDE_STEP)
    print(f"B={args.batch}, kernels {'numba' if kernels.ENABLED else 'off (array code)'}: ms per call")
    for name, value in sorted(spent.items(), key=lambda kv: -kv[1]):
        inside = "  (inside step)" if name in INSIDE_STEP else ""
        print(f"  {name:14s} {1e3 * value / args.calls:6.3f}{inside}")
    print(f"  {'total':14s} {1e3 * total / args.calls:6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
