"""Steps per second of GpuClusterLive-v0: the single env and the vector env, random actions under the mask.

    PYTHONPATH=. .venv/bin/python benchmarks/live_env_speed.py [--episodes 7] [--rounds 24] [--seed 0]
        [--single-only] [--profile 15]

A step is one slot of one day: the slot's state, the base plan (compiled greedy), the features, the decision
(a second greedy plan when a headroom is chosen, the fill) and the commit. ``baseline="greedy"`` adds one
rolling greedy day per reset (24 greedy plans). The single env plays ``--episodes`` days, the families in turn;
the vector env (:mod:`agents.rolling.live_vector_env`, N days, ``workers`` processes) takes ``--rounds`` steps
from a reset (its days drawn from all the families), and its rate is the sub-days' slot steps per second
(the reset included in the time, the workers started before it). Wall time on this machine, one run: an
indication, not a controlled figure. ``--profile N`` adds where a single-env step's time goes: cProfile of
``--episodes`` days (baseline None), the N project functions (``agents/``, ``gpu_env/``) with the most
cumulative time, per step (profiling adds its own overhead; nested functions' times are inside their callers').
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.benchmarking import machine  # noqa: E402
from agents.rolling.live_env import GpuClusterLiveEnv  # noqa: E402
from agents.rolling.live_policy import action_nvec, action_offsets  # noqa: E402
from agents.rolling.live_vector_env import GpuClusterLiveVectorEnv  # noqa: E402
from gpu_env.generators import FAMILIES  # noqa: E402

VECTOR_SIZES = ((8, 0), (8, 2), (16, 0), (16, 2))
"""The (N, workers) of the vector env's rows."""


def _random_masked(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One allowed action of one day's mask."""
    nvec, offsets = action_nvec(), action_offsets()
    return np.array([rng.choice(np.flatnonzero(mask[o : o + n])) for o, n in zip(offsets, nvec, strict=True)])


def steps_per_second(baseline: str | None, episodes: int, seed: int) -> tuple[float, int]:
    """Steps per second of the single env over ``episodes`` episodes (resets included), and the steps taken."""
    env = GpuClusterLiveEnv(baseline=baseline)
    rng = np.random.default_rng(seed)
    families = list(FAMILIES)
    steps = 0
    began = time.perf_counter()
    for k in range(episodes):
        env.reset(seed=seed + k, options={"family": families[k % len(families)]})
        done = False
        while not done:
            _, _, done, _, _ = env.step(_random_masked(env.action_masks(), rng))
            steps += 1
    return steps / (time.perf_counter() - began), steps


def vector_steps_per_second(
    baseline: str | None, num_envs: int, workers: int, rounds: int, seed: int
) -> tuple[float, int]:
    """Sub-day slot steps per second of the vector env over ``rounds`` steps from a reset, and the steps taken."""
    envs = GpuClusterLiveVectorEnv(num_envs, baseline=baseline, workers=workers)
    rng = np.random.default_rng(seed)
    steps = 0
    try:
        began = time.perf_counter()
        envs.reset(seed=seed)
        restarting = np.zeros(num_envs, dtype=bool)  # NEXT_STEP autoreset: this step restarts the day
        for _ in range(rounds):
            actions = np.stack([_random_masked(m, rng) for m in envs.action_masks()])
            _, _, terminated, truncated, _ = envs.step(actions)
            steps += int((~restarting).sum())
            restarting = terminated | truncated
        rate = steps / (time.perf_counter() - began)
    finally:
        envs.close()
    return rate, steps


def profile_table(episodes: int, seed: int, top: int) -> list[str]:
    """Markdown rows: the ``top`` project functions by cumulative time per single-env step (baseline None)."""
    profiler = cProfile.Profile()
    profiler.enable()
    _, steps = steps_per_second(None, episodes, seed)
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = []
    for (file, _, name), (_, calls, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        path = Path(file)
        if path.is_relative_to(ROOT) and path.parts[len(ROOT.parts)] in ("agents", "gpu_env"):
            rows.append((cumulative, calls, f"`{path.relative_to(ROOT)}` `{name}`"))
    total = stats.total_tt  # type: ignore[attr-defined]
    lines = [
        f"cProfile of {episodes} days, {steps} steps (baseline None): {1000 * total / steps:.2f} ms a step in all",
        "",
        "| function | calls per step | cumulative ms per step |",
        "| --- | ---: | ---: |",
    ]
    for cumulative, calls, label in sorted(rows, reverse=True)[:top]:
        lines.append(f"| {label} | {calls / steps:.2f} | {1000 * cumulative / steps:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print the steps per second of the single env and the vector env, with and without the greedy baseline."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--single-only", action="store_true", help="only the single env's rows")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="the N costliest functions of a step")
    args = parser.parse_args(argv)
    GpuClusterLiveEnv(baseline=None).reset(seed=0)  # compile and load outside the measurement
    print(f"machine: {machine()} (before)")
    print("| env | baseline | days | workers | steps | steps/s |\n| --- | --- | ---: | ---: | ---: | ---: |")
    for baseline in (None, "greedy"):
        rate, steps = steps_per_second(baseline, args.episodes, args.seed)
        print(f"| GpuClusterLiveEnv | {baseline} | 1 | - | {steps} | {rate:.0f} |", flush=True)
    if not args.single_only:
        for baseline in (None, "greedy"):
            for num_envs, workers in VECTOR_SIZES:
                rate, steps = vector_steps_per_second(baseline, num_envs, workers, args.rounds, args.seed)
                print(
                    f"| GpuClusterLiveVectorEnv | {baseline} | {num_envs} | {workers} | {steps} | {rate:.0f} |",
                    flush=True,
                )
    if args.profile:
        print("\n".join(["", *profile_table(args.episodes, args.seed, args.profile)]), flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
