"""The first ``gymnasium.make_vec`` run of a fresh process: episodes finished in a few seconds, and what numba compiled.

Builds ``gymnasium.make_vec("GpuCluster-v0", num_envs=B, vectorization_mode="vector_entry_point")`` on the
benchmark scenario of ``scale-64x30`` and runs the masked random loop of ``benchmarks/env_speed.py`` for
``--seconds`` of wall time, counted from before the build (so a compile at first use is inside the measurement).
Then prints one JSON line: the episodes finished, the steps, and for every compiled function of the engine (and
of the compiled rules and decoder it inlines) numba's cache hits and misses in this process.

Run it in a new process after ``gpualloc warm-up`` (``benchmarks/results/engine_warm_up.md`` has the commands)::

    export NUMBA_CACHE_DIR=$(mktemp -d)
    .venv/bin/gpualloc warm-up
    PYTHONPATH=. .venv/bin/python benchmarks/engine_warm_up.py      # the first process
    PYTHONPATH=. .venv/bin/python benchmarks/engine_warm_up.py      # the second
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def dispatcher_stats() -> dict[str, dict[str, int]]:
    """name -> {"hits", "misses", "signatures"} for every numba dispatcher of the engine, the rules and the decoder."""
    out: dict[str, dict[str, int]] = {}
    for module_name in ("gpu_env.batch._kernels", "gpu_env.placement", "gpu_env.listsched"):
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name, f in vars(module).items():
            stats = getattr(f, "stats", None)
            if stats is None or getattr(f, "py_func", None) is None or f.py_func.__module__ != module_name:
                continue
            hits, misses = sum(stats.cache_hits.values()), sum(stats.cache_misses.values())
            if hits or misses or f.signatures:
                out[f"{module_name.rsplit('.', 1)[-1]}.{name}"] = {
                    "hits": hits,
                    "misses": misses,
                    "signatures": len(f.signatures),
                }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="wall seconds, counted from before make_vec")
    parser.add_argument("--num-envs", type=int, default=64, help="B")
    args = parser.parse_args(argv)

    wall0, cpu0 = time.perf_counter(), time.process_time()
    import gymnasium as gym
    import numpy as np

    import gpu_env  # noqa: F401  (registers GpuCluster-v0)
    from gpu_env.generators import BENCHMARK_SEEDS, generate

    scenario = generate("scale-64x30", BENCHMARK_SEEDS["scale-64x30"])
    venv = gym.make_vec(
        "GpuCluster-v0", num_envs=args.num_envs, vectorization_mode="vector_entry_point", scenario=scenario
    )
    rng = np.random.default_rng(0)
    venv.reset(seed=0)
    first_step = None
    steps = episodes = 0
    while time.perf_counter() - wall0 < args.seconds:
        masks = venv.action_masks()
        actions = np.where(masks, rng.random(masks.shape), -1.0).argmax(axis=1)  # uniform among the allowed
        _, _, terminated, truncated, _ = venv.step(actions)
        if first_step is None:
            first_step = time.perf_counter() - wall0
        steps += args.num_envs
        episodes += int((terminated | truncated).sum())
    stats = dispatcher_stats()
    engine = {k: v for k, v in stats.items() if k.startswith("_kernels.")}
    print(
        json.dumps(
            {
                "episodes": episodes,
                "steps": steps,
                "wall_s": round(time.perf_counter() - wall0, 2),
                "cpu_s": round(time.process_time() - cpu0, 2),
                "first_step_s": round(first_step or 0.0, 2),
                "engine_hits": sum(v["hits"] for v in engine.values()),
                "engine_misses": sum(v["misses"] for v in engine.values()),
                "compiled_here": sorted(k for k, v in stats.items() if v["misses"]),
                "dispatchers": stats,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
