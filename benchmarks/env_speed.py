"""Environment steps per second with a random masked policy, per family and at 64 GPUs x 30 jobs.

Each configuration runs whole episodes of the benchmark scenario of a family
(``generate(family, BENCHMARK_SEEDS[family])``) for about ``--seconds``: reset,
then ``action_masks()``, a uniform draw among the allowed actions and ``step``
until the episode ends. Three levels are timed:

* ``env``: :class:`gpu_env.env.GpuClusterEnv` itself (observation, info and mask on every step);
* ``core``: :class:`gpu_env.episode.Episode` alone (mask and transition; what an allocator drives);
* ``fresh``: the env with a generator source, so every reset draws a new 64 x 30 scenario;
* ``batch B``: :class:`gpu_env.batch.BatchEngine` with B episodes of the 64 x 30 scenario
  advanced together (masks, step and every observation key each step; an episode that ends
  restarts in the next step), against ``env`` measured in the same rounds (interleaved);
  ``batch B core`` leaves out the observation (masks and step only);
* ``make_vec B``: ``gymnasium.make_vec("GpuCluster-v0", num_envs=B, vectorization_mode="vector_entry_point")``
  (:class:`gpu_env.batch.vector_env.GpuClusterVectorEnv`, plans off: episode statistics in the infos),
  the Gymnasium loop (``action_masks()``, a uniform masked draw, ``step``, NEXT_STEP autoreset), in the same
  rounds; ``make_vec B plans`` with ``plans=True`` (every finished episode's plan dict and metrics in the infos).

Rates are steps per CPU-second of this process (``time.process_time``), which
other processes on a shared machine disturb less than wall time; wall-clock
rates are printed too. Resets count in the time, divided over the episode's steps.

Usage: ``taskset -c 0 .venv/bin/python benchmarks/env_speed.py [--seconds 2]`` (one core); writes
``benchmarks/results/env_speed.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gymnasium as gym

import gpu_env  # noqa: F401  (registers GpuCluster-v0)
from gpu_env.batch import BatchEngine
from gpu_env.batch.batch_observation import observe
from gpu_env.env import GpuClusterEnv
from gpu_env.episode import ActionLayout, Episode
from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, generate
from lab.benchmarking import write_report

RESULTS = Path(__file__).resolve().parent / "results" / "env_speed.md"
TARGET = 20_000  # steps per second at 64 x 30 (the first target of issue 2)
BATCH_TARGET = 20.0  # batched engine and make_vec at B = 256 over the single env (issue 11 section 1)
BATCH_SIZES = (1, 64, 256, 1024)


def run_env(env: GpuClusterEnv, seconds: float, seed: int) -> tuple[int, int, float, float]:
    """Episodes of the env for about ``seconds`` of CPU time: (steps, episodes, cpu s, wall s)."""
    rng = np.random.default_rng(seed)
    steps = episodes = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while time.process_time() - cpu0 < seconds:
        env.reset(seed=seed + episodes)
        done = False
        while not done:
            allowed = np.flatnonzero(env.action_masks())
            _, _, terminated, truncated, _ = env.step(allowed[rng.integers(allowed.size)])
            done = terminated or truncated
            steps += 1
        episodes += 1
    return steps, episodes, time.process_time() - cpu0, time.perf_counter() - wall0


def run_core(scenario, actions: str, seconds: float, seed: int) -> tuple[int, int, float, float]:
    """Episodes of the plain Episode (no observation) for about ``seconds`` of CPU time."""
    rows = sum(job.running_on is None for job in scenario.jobs)
    layout = ActionLayout.make(actions, rows, scenario.gpus)
    rng = np.random.default_rng(seed)
    steps = episodes = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while time.process_time() - cpu0 < seconds:
        ep = Episode(scenario, layout)
        while not ep.done:
            allowed = np.flatnonzero(ep.action_mask())
            ep.step(int(allowed[rng.integers(allowed.size)]))
            steps += 1
        episodes += 1
    return steps, episodes, time.process_time() - cpu0, time.perf_counter() - wall0


def run_batch(engine: BatchEngine, scenario, seconds: float, seed: int, full: bool) -> tuple[int, int, float, float]:
    """The batched engine for about ``seconds`` of CPU time; steps count the episodes that were running."""
    rng = np.random.default_rng(seed)
    steps = episodes = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while time.process_time() - cpu0 < seconds:
        masks = engine.action_masks()
        if full:
            observe(engine)
        actions = np.where(masks, rng.random(masks.shape), -1.0).argmax(axis=1)  # uniform among the allowed
        steps += int((~engine.state.done).sum())
        _, done = engine.step(actions)
        ended = np.flatnonzero(done)
        if ended.size:
            episodes += ended.size
            engine.reset(scenario, index=ended)
    return steps, episodes, time.process_time() - cpu0, time.perf_counter() - wall0


def run_vec(venv, seconds: float, seed: int) -> tuple[int, int, float, float]:
    """The make_vec loop for about ``seconds`` of CPU time; steps count the episodes that were not restarting."""
    rng = np.random.default_rng(seed)
    steps = episodes = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    venv.reset(seed=seed)
    ended = np.zeros(venv.num_envs, dtype=bool)
    while time.process_time() - cpu0 < seconds:
        masks = venv.action_masks()
        actions = np.where(masks, rng.random(masks.shape), -1.0).argmax(axis=1)  # uniform among the allowed
        steps += venv.num_envs - int(ended.sum())  # NEXT_STEP: a restarting episode's action is ignored
        _, _, terminated, truncated, _ = venv.step(actions)
        ended = terminated | truncated
        episodes += int(ended.sum())
    return steps, episodes, time.process_time() - cpu0, time.perf_counter() - wall0


def batch_rows(scenario, sizes: tuple[int, ...], seconds: float, rounds: int, seed: int, plans: bool) -> list[tuple]:
    """(level, steps / CPU-s, steps / wall-s, episodes) for the single env, the engine and make_vec, interleaved."""
    configs: dict[str, object] = {"env": GpuClusterEnv(scenario, actions="fit")}
    for B in sizes:
        engine = BatchEngine.for_scenarios([scenario], batch=B)
        configs[f"batch {B}"] = engine
        configs[f"batch {B} core"] = engine
        make = {"num_envs": B, "vectorization_mode": "vector_entry_point", "scenario": scenario}
        configs[f"make_vec {B}"] = gym.make_vec("GpuCluster-v0", **make)
        if plans:
            configs[f"make_vec {B} plans"] = gym.make_vec("GpuCluster-v0", plans=True, **make)
    totals = {name: [0, 0, 0.0, 0.0] for name in configs}
    for r in range(rounds):
        for name, target in configs.items():
            if name == "env":
                result = run_env(target, seconds / rounds, seed + r)
            elif name.startswith("make_vec"):
                result = run_vec(target, seconds / rounds, seed + r)
            else:
                result = run_batch(target, scenario, seconds / rounds, seed + r, full=not name.endswith("core"))
            for i, value in enumerate(result):
                totals[name][i] += value
    rows = [(name, steps / cpu, steps / wall, episodes) for name, (steps, episodes, cpu, wall) in totals.items()]
    order = {"env": 0, "batch": 1, "make_vec": 2}
    return sorted(rows, key=lambda row: (order[row[0].split()[0]], int(row[0].split()[1]) if " " in row[0] else 0))


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{model}, {os.cpu_count()} logical CPUs, load average {load:.2f} at the start; "
        f"Python {platform.python_version()}, numpy {np.__version__}, numba {_numba_version()}, "
        f"gymnasium {gym.__version__}; {calibration()}"
    )


def cores() -> str:
    """The CPUs this process may run on (``taskset -c 0`` pins it to one)."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(allowed) == 1:
        return f"CPU {allowed[0]} only"
    return f"{len(allowed) or os.cpu_count()} CPUs (not pinned: use taskset -c 0)"


def _numba_version() -> str:
    import numba

    return numba.__version__


def calibration() -> str:
    """CPU cost of trivial numpy calls here: the unit in which an env step is spent."""
    a = np.zeros((64, 40), dtype=np.int64)
    out = []
    for name, call in (("np.zeros(8)", lambda: np.zeros(8)), ("a 64x40 int add", lambda: a + 1)):
        n = 20_000
        cpu0 = time.process_time()
        for _ in range(n):
            call()
        out.append(f"{name} {1e6 * (time.process_time() - cpu0) / n:.2f} us")
    return "one call of " + ", of ".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="CPU seconds per configuration")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=list(BATCH_SIZES))
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds of the batch comparison")
    parser.add_argument("--no-plans", action="store_true", help="leave out make_vec with plans=True")
    args = parser.parse_args(argv)

    about = machine()
    rows = []

    def record(name: str, actions: str, level: str, result: tuple[int, int, float, float]) -> float:
        steps, episodes, cpu, wall = result
        rate = steps / cpu
        rows.append((name, actions, level, steps / max(episodes, 1), rate, steps / wall, 1e6 * cpu / steps))
        print(f"{name:22s} {actions:5s} {level:5s} {rate:9.0f} steps/CPU-s {steps / wall:9.0f} steps/s wall")
        return rate

    headline = {}
    for family in FAMILIES:
        sc = generate(family, BENCHMARK_SEEDS[family])
        name = f"{family} ({sc.gpus}x{len(sc.jobs)})"
        record(name, "fit", "env", run_env(GpuClusterEnv(sc, actions="fit"), args.seconds, args.seed))
        if family == "scale-64x30":
            headline["env fit"] = rows[-1][4]
            for actions in ("block",):
                record(name, actions, "env", run_env(GpuClusterEnv(sc, actions=actions), args.seconds, args.seed))
                headline[f"env {actions}"] = rows[-1][4]
            for actions in ("fit", "block"):
                headline[f"core {actions}"] = record(
                    name, actions, "core", run_core(sc, actions, args.seconds, args.seed)
                )
            fresh = GpuClusterEnv({"families": "scale-64x30"}, actions="fit")
            headline["fresh fit"] = record(name, "fit", "fresh", run_env(fresh, args.seconds, args.seed))

    scale = generate("scale-64x30", BENCHMARK_SEEDS["scale-64x30"])
    plans = not args.no_plans
    batched = batch_rows(scale, tuple(args.batch_sizes), args.seconds * args.rounds, args.rounds, args.seed, plans)
    single = batched[0][1]
    for name, rate, wall_rate, _ in batched:
        print(f"{name:16s} {rate:9.0f} steps/CPU-s {wall_rate:9.0f} steps/s wall  x{rate / single:.1f}")

    lines = [
        "# Environment speed",
        "",
        f"Machine: {about}.",
        "",
        "Random masked policy (uniform over the allowed actions), whole episodes, resets included;",
        "rates per CPU-second of the process and per wall-clock second. `env`: GpuClusterEnv (observation,",
        "info and mask every step); `core`: the plain Episode (mask and transition only); `fresh`: a new",
        "scenario drawn at every reset.",
        "",
        "| scenario | actions | level | steps / episode | steps / CPU-s | steps / wall-s | CPU us / step |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, actions, level, per_episode, rate, wall_rate, us in rows:
        lines.append(f"| {name} | {actions} | {level} | {per_episode:.1f} | {rate:.0f} | {wall_rate:.0f} | {us:.0f} |")
    met = "met" if headline["env fit"] >= TARGET else "missed"
    lines += [
        "",
        f"Target: {TARGET} steps/s at 64 GPUs x 30 jobs on one core: **{met}** on this machine "
        f"(env, fit actions: {headline['env fit']:.0f} steps/CPU-s; the plain episode: "
        f"{headline['core fit']:.0f}).",
        "",
        "## Batched engine and make_vec (gpu_env/batch)",
        "",
        f"scale-64x30 (64 GPUs x 30 jobs), FIT actions, one process on {cores()}; {args.rounds} interleaved rounds",
        f"of {args.seconds:g} CPU-s per configuration. Steps are episode-steps (B per call while all run). `env`: the",
        "single GpuClusterEnv (observation, info and mask each step); `batch B`: BatchEngine, masks, step and every",
        "observation key for all B episodes each call (episodes that end restart); `batch B core`: masks and step",
        'only; `make_vec B`: `gymnasium.make_vec("GpuCluster-v0", num_envs=B, vectorization_mode=',
        '"vector_entry_point")` stepped as Gymnasium does (`action_masks()`, `step`, NEXT_STEP autoreset; plans off,',
        "episode statistics in the infos); `make_vec B plans`: the same with `plans=True` (plan dicts and metrics of",
        "finished episodes in the infos).",
        "",
        "| level | steps / CPU-s | steps / wall-s | x single env (CPU-s) |",
        "| --- | --- | --- | --- |",
    ]
    for name, rate, wall_rate, _ in batched:
        lines.append(f"| {name} | {rate:.0f} | {wall_rate:.0f} | {rate / single:.1f} |")
    rates = {name: rate for name, rate, _, _ in batched}
    for level, what in (("batch 256", "the engine with observations"), ("make_vec 256", "make_vec, plans off")):
        if level in rates:
            ratio = rates[level] / single
            met = "met" if ratio >= BATCH_TARGET else "missed"
            lines += ["", f"Target: {BATCH_TARGET:g}x the single env at B = 256, {what}: **{met}** ({ratio:.1f}x)."]
    command = f"taskset -c 0 .venv/bin/python benchmarks/env_speed.py --seconds {args.seconds:g}"
    write_report(args.out, [*lines, ""], command + (" --no-plans" if args.no_plans else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
