"""Where a batched engine call spends its time: ms per call of each part, one core, at 64 GPUs x 30 jobs.

Runs the loop of ``env_speed.py`` (masks, every observation key, a uniform masked draw, step,
resets of the episodes that end) on :class:`gpu_env.batch.BatchEngine` and times each part with
``time.process_time``: the masks, the observation keys one by one (filled into buffers in place,
as the vector env does), the step (one kernel, :func:`gpu_env.batch.kernels.step_into`) and the resets.

Usage: ``PYTHONPATH=. taskset -c 0 .venv/bin/python benchmarks/engine_profile.py [--batch 256] [--calls 300]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpu_env.batch import BatchEngine
from gpu_env.batch.observe import KEYS, buffers, observe
from gpu_env.generators import BENCHMARK_SEEDS, generate


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

    out = buffers(engine)
    for call in range(args.calls + 20):
        if call == 20:  # the first calls load (or compile) the kernels
            spent.clear()
        masks = timed("action_masks", engine.action_masks)
        for key in KEYS:
            timed(key, observe, engine, [key], {key: out[key]})
        actions = np.where(masks, rng.random(masks.shape), -1.0).argmax(axis=1)
        _, done = timed("step", engine.step, actions)
        ended = np.flatnonzero(done)
        if ended.size:
            timed("reset", engine.reset, sc, ended)
    total = sum(spent.values())
    print(f"B={args.batch}: ms per call")
    for name, value in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {name:14s} {1e3 * value / args.calls:6.3f}")
    print(f"  {'total':14s} {1e3 * total / args.calls:6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
