"""Steps per second of GpuClusterLive-v0: one env, random actions under the mask, each family's days.

    PYTHONPATH=. .venv/bin/python benchmarks/live_env_speed.py [--episodes 7] [--seed 0]

A step is one slot: the slot's state, the base plan (compiled greedy), the features, the decision (a second
greedy plan when a headroom is chosen, the fill) and the commit. ``baseline="greedy"`` adds one rolling greedy
day per reset (24 greedy plans). Wall time on this machine, one run: an indication, not a controlled figure.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.rolling.live_env import GpuClusterLiveEnv  # noqa: E402
from agents.rolling.live_policy import action_nvec, action_offsets  # noqa: E402
from gpu_env.generators import FAMILIES  # noqa: E402


def steps_per_second(baseline: str | None, episodes: int, seed: int) -> tuple[float, int]:
    """Steps per second over ``episodes`` episodes (resets included), and the steps taken."""
    env = GpuClusterLiveEnv(baseline=baseline)
    rng = np.random.default_rng(seed)
    nvec = action_nvec()
    offsets = action_offsets()
    families = list(FAMILIES)
    steps = 0
    began = time.perf_counter()
    for k in range(episodes):
        env.reset(seed=seed + k, options={"family": families[k % len(families)]})
        done = False
        while not done:
            mask = env.action_masks()
            action = [rng.choice(np.flatnonzero(mask[o : o + n])) for o, n in zip(offsets, nvec, strict=True)]
            _, _, done, _, _ = env.step(np.array(action))
            steps += 1
    return steps / (time.perf_counter() - began), steps


def main(argv: list[str] | None = None) -> int:
    """Print the steps per second of the single env, with and without the greedy baseline."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    GpuClusterLiveEnv(baseline=None).reset(seed=0)  # compile and load outside the measurement
    print(f"machine: {platform.platform()}, Python {platform.python_version()}")
    print("| env | episodes | steps | steps/s |\n| --- | ---: | ---: | ---: |")
    for baseline in (None, "greedy"):
        rate, steps = steps_per_second(baseline, args.episodes, args.seed)
        print(f"| GpuClusterLive-v0, baseline={baseline} | {args.episodes} | {steps} | {rate:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
