"""On a CUDA machine: engine, rollout and PPO-update throughput on CUDA against CPU, and one training run on the GPU.

One unattended script for scarce GPU time (issue 11 section 4); it finishes in a
few minutes and writes ``benchmarks/results/cuda.md``. On the 64 GPUs x 30 jobs
scenario it measures:

* **engine**: episode-steps per wall second of the batched engine (:class:`gpu_env.batch.BatchEngine`,
  its numba kernels on the CPU) with a uniform masked policy (masks, every observation key, step,
  restarts), at several B: the CPU baseline the GPU-side numbers below are read against;
* **rollout**: engine + the policy network (:class:`agents.learned.network.JobScorer`) + a masked
  sample each step: the network on the CPU, against the network on CUDA (the engine stays on the
  CPU; its observations are copied to the device and the actions back each step);
* **update**: PPO updates of the same network on real engine observations (clipped surrogate on
  masked logits, value loss, entropy, backward, Adam): updates and samples per second at
  minibatches of 1024 and 4096, CPU against CUDA;
* **train**: ``train.py --config configs/train/smoke.yaml --device cuda`` (every stage) with its
  wall time and exit status.

Rates are wall-clock (CUDA work is synchronised before each clock read); CPU torch runs with
``torch.get_num_threads()`` threads, as found. A measurement that fails is recorded with its
error and the script goes on, so one run always leaves a result file.

Without CUDA the script prints one line and exits 0. ``--cpu-only`` runs every CPU-side
measurement (and the training run with ``--device cpu``) to prove the script works on a machine
without a GPU; it writes ``benchmarks/results/cuda_cpu_only.md``.

Usage: ``.venv/bin/python benchmarks/cuda_check.py [--cpu-only] [--seconds 4]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results" / "cuda.md"
ENGINE_SIZES = (256, 1024, 4096)
ROLLOUT_SIZES = (1024, 4096)
MINIBATCHES = (1024, 4096)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _scenario():
    from gpu_env.generators import BENCHMARK_SEEDS, generate

    return generate("scale-64x30", BENCHMARK_SEEDS["scale-64x30"])


def _engine(batch: int):
    """The batched engine (numba kernels, CPU) on the benchmark scenario, and that scenario."""
    from gpu_env.batch import BatchEngine

    sc = _scenario()
    return BatchEngine.for_scenarios([sc], batch=batch), sc


def engine_rate(batch: int, seconds: float) -> float:
    """Episode-steps per wall second of the engine under a uniform masked policy, every observation key each step."""
    from gpu_env.batch.observe import buffers, observe

    engine, sc = _engine(batch)
    out = buffers(engine)
    rng = np.random.default_rng(0)

    def one() -> int:
        masks = engine.action_masks()
        observe(engine, out=out)
        actions = np.where(masks, rng.random(masks.shape), -1.0).argmax(axis=1)
        running = int((~engine.state.done).sum())
        _, done = engine.step(actions)
        ended = np.flatnonzero(done)
        if ended.size:
            engine.reset(sc, index=ended)
        return running

    for _ in range(3):
        one()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += one()
    return steps / (time.perf_counter() - start)


def rollout(device: str, batch: int, seconds: float, hidden: int) -> float:
    """Episode-steps per wall second of engine (CPU) + policy network on ``device`` + masked sample."""
    import torch

    from agents.learned.network import INPUTS, JobScorer
    from gpu_env.batch.observe import buffers, observe

    engine, sc = _engine(batch)
    out = buffers(engine, (*INPUTS, "action_mask"))
    net = JobScorer(hidden=hidden).to(device).eval()
    gen = torch.Generator(device=device).manual_seed(0)

    def one() -> int:
        obs = observe(engine, out=out)
        with torch.no_grad():
            logits, _ = net(*[torch.as_tensor(obs[key], device=device) for key in INPUTS])
            mask = torch.as_tensor(obs["action_mask"], device=device).bool()
            logits = torch.where(mask, logits, torch.full_like(logits, -1e9))
            actions = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0]
        running = int((~engine.state.done).sum())
        _, done = engine.step(actions.cpu().numpy())
        ended = np.flatnonzero(done)
        if ended.size:
            engine.reset(sc, index=ended)
        return running

    for _ in range(3):
        one()
    _sync(device)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += one()
    _sync(device)
    return steps / (time.perf_counter() - start)


def collect(samples: int) -> dict[str, np.ndarray]:
    """``samples`` observations of random masked rollouts on the engine (the update benchmark's data)."""
    from agents.learned.network import INPUTS
    from gpu_env.batch import BatchEngine
    from gpu_env.batch.observe import observe
    from gpu_env.generators import BENCHMARK_SEEDS, generate

    sc = generate("scale-64x30", BENCHMARK_SEEDS["scale-64x30"])
    engine = BatchEngine.for_scenarios([sc], batch=512)
    rng = np.random.default_rng(0)
    parts: dict[str, list[np.ndarray]] = {}
    taken = 0
    while taken < samples:
        obs = observe(engine, (*INPUTS, "action_mask"))
        masks = obs["action_mask"].astype(bool)
        actions = np.where(masks, rng.random(masks.shape), -1.0).argmax(axis=1)
        running = ~engine.state.done
        for key, value in obs.items():
            parts.setdefault(key, []).append(value[running])
        parts.setdefault("actions", []).append(actions[running])
        taken += int(running.sum())
        _, done = engine.step(actions)
        ended = np.flatnonzero(done)
        if ended.size:
            engine.reset(sc, index=ended)
    return {key: np.concatenate(value)[:samples] for key, value in parts.items()}


def updates(device: str, data: dict[str, np.ndarray], minibatch: int, seconds: float, hidden: int) -> float:
    """PPO minibatch updates per wall second on ``device``."""
    import torch

    from agents.learned.network import INPUTS, JobScorer

    torch.manual_seed(0)
    net = JobScorer(hidden=hidden).to(device)
    value = torch.nn.Linear(net.value_features, 1).to(device)
    opt = torch.optim.Adam([*net.parameters(), *value.parameters()], lr=3e-4)
    n = next(iter(data.values())).shape[0]
    tensors = {key: torch.as_tensor(value_, device=device) for key, value_ in data.items()}
    old_logp = torch.full((n,), -2.0, device=device)
    advantages = torch.randn(n, device=device)
    returns = torch.randn(n, device=device)

    def one(index: torch.Tensor) -> None:
        logits, features = net(*[tensors[key][index] for key in INPUTS])
        mask = tensors["action_mask"][index].bool()
        logits = torch.where(mask, logits, torch.full_like(logits, -1e9))
        logp_all = torch.log_softmax(logits, -1)
        logp = logp_all.gather(1, tensors["actions"][index].long()[:, None])[:, 0]
        ratio = torch.exp(logp - old_logp[index])
        adv = advantages[index]
        policy = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
        entropy = -(torch.where(mask, logp_all.exp() * logp_all, torch.zeros_like(logp_all))).sum(-1).mean()
        loss = policy + 0.5 * ((value(features)[:, 0] - returns[index]) ** 2).mean() - 0.01 * entropy
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
        opt.step()

    gen = torch.Generator(device="cpu").manual_seed(0)
    for _ in range(2):
        one(torch.randint(n, (minibatch,), generator=gen).to(device))
    _sync(device)
    count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        one(torch.randint(n, (minibatch,), generator=gen).to(device))
        count += 1
        if count % 4 == 0:
            _sync(device)
    _sync(device)
    return count / (time.perf_counter() - start)


def train(device: str, config: str, timeout: float) -> tuple[int | str, float, str]:
    """Run train.py once: (exit status or 'timeout', wall seconds, last output line)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(ROOT / "train.py"), "--config", config, "--device", device]
        cmd += ["--run-dir", tmp, "--export", str(Path(tmp) / "policy.onnx")]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout", time.perf_counter() - start, ""
        lines = [
            line
            for line in (proc.stdout + proc.stderr).splitlines()
            if any(c.isalpha() for c in line) and "%|" not in line
        ]
        return proc.returncode, time.perf_counter() - start, (lines[-1] if lines else "")[:160]


def measure(label: str, run, unit: str = "steps/s", fmt: str = "{:,.0f}") -> str:
    """Run one measurement and return its table cell; a failure becomes the cell (the script goes on)."""
    try:
        value = run()
    except Exception as exc:
        print(f"{label}: FAILED {type(exc).__name__}: {exc}")
        return f"failed: {type(exc).__name__}: {str(exc)[:80]}"
    print(f"{label}: {fmt.format(value)} {unit}")
    return fmt.format(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-only", action="store_true", help="no CUDA needed: measure the CPU side only")
    parser.add_argument("--seconds", type=float, default=4.0, help="wall seconds per measurement")
    parser.add_argument("--hidden", type=int, default=64, help="network width (configs/train/default.yaml: 64)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's own choice)")
    parser.add_argument("--train-config", default="configs/train/smoke.yaml")
    parser.add_argument("--train-timeout", type=float, default=240.0)
    parser.add_argument(
        "--out", type=Path, help="default benchmarks/results/cuda.md (cuda_cpu_only.md with --cpu-only)"
    )
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = RESULTS.with_name("cuda_cpu_only.md") if args.cpu_only else RESULTS

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu_only:
        print("cuda_check: no CUDA device here (torch.cuda.is_available() is False); nothing measured", end="")
        print(" (--cpu-only runs the CPU side)")
        return 0
    devices = ["cpu"] + (["cuda"] if cuda and not args.cpu_only else [])
    import numba

    about = (
        f"{platform.node() or 'host'}: {os.cpu_count()} logical CPUs, torch {torch.__version__} "
        f"({torch.get_num_threads()} CPU threads), numpy {np.__version__}, numba {numba.__version__}"
    )
    if cuda:
        about += f", GPU {torch.cuda.get_device_name(0)}"
    print(about)
    lines = ["# CUDA check", "", f"Machine: {about}.", ""]
    if args.cpu_only:
        lines += ["**CPU-only run** (`--cpu-only`): the CUDA columns are absent; this proves the script runs.", ""]

    lines += [
        "## Engine",
        "",
        "Uniform masked policy, every observation key each step (filled in place); episode-steps per wall",
        "second of the batched engine (numba kernels) on the CPU.",
        "",
        "| B | engine (CPU) |",
        "| --- | --- |",
    ]
    for batch in ENGINE_SIZES:
        cell = measure(f"engine B={batch}", lambda b=batch: engine_rate(b, args.seconds))
        lines.append(f"| {batch} | {cell} |")

    lines += [
        "",
        "## Rollout: engine + policy",
        "",
        f"Engine (CPU), JobScorer(hidden={args.hidden}) and a masked sample each step; `cpu`: the network on",
        "the CPU; `cuda`: the network on the GPU (observations copied there, actions back, each step).",
        "Episode-steps per wall second.",
        "",
        "| B | " + " | ".join(devices) + " |",
        "| --- |" + " --- |" * len(devices),
    ]
    for batch in ROLLOUT_SIZES:
        cells = [
            measure(f"rollout B={batch} {device}", lambda d=device, b=batch: rollout(d, b, args.seconds, args.hidden))
            for device in devices
        ]
        lines.append(f"| {batch} | " + " | ".join(cells) + " |")

    data = collect(8192)
    lines += [
        "",
        "## PPO updates",
        "",
        f"JobScorer(hidden={args.hidden}) + a value head, clipped surrogate on masked logits, value loss,",
        "entropy, backward, gradient clipping, Adam; minibatches drawn from 8,192 engine observations on",
        "the device. Updates per wall second (times the minibatch: samples per second).",
        "",
        "| minibatch | " + " | ".join(devices) + " |",
        "| --- |" + " --- |" * len(devices),
    ]
    for minibatch in MINIBATCHES:
        cells = [
            measure(
                f"update minibatch={minibatch} {device}",
                lambda d=device, m=minibatch: updates(d, data, m, args.seconds, args.hidden),
                unit=f"updates/s (x {minibatch} samples)",
                fmt="{:.2f}",
            )
            for device in devices
        ]
        lines.append(f"| {minibatch} | " + " | ".join(cells) + " |")

    device = "cpu" if args.cpu_only else "cuda"
    status, wall, last = train(device, args.train_config, args.train_timeout)
    print(f"train {args.train_config} --device {device}: status {status}, {wall:.1f} s")
    lines += [
        "",
        "## One training run",
        "",
        f"`train.py --config {args.train_config} --device {device}`: exit status {status}, {wall:.1f} s wall.",
        f"Last line: `{last}`" if last else "",
        "",
        f"Reproduce: `.venv/bin/python benchmarks/cuda_check.py{' --cpu-only' if args.cpu_only else ''} "
        f"--seconds {args.seconds:g}{f' --threads {args.threads}' if args.threads else ''}`.",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")
    return 0 if status == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
