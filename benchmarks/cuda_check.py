"""On a CUDA machine: the queue scorer's training throughput on CUDA against the CPU, and one training run on the GPU.

One unattended script for scarce GPU time; it finishes in a few minutes and writes
``benchmarks/results/cuda.md``. It measures:

* **update**: gradient steps of :class:`lab.training.scorer.QueueScorer` on real training items
  (ListMLE on the labels plus PPO's clipped surrogate over K stored orders, backward, Adam), at
  several batch sizes and network widths: instances per second, CPU against CUDA. The decoder
  (numba, CPU) is not in the loop: this is the part a GPU can speed up;
* **forward**: scoring 1,024-GPU queues (480 jobs) per second, CPU against CUDA;
* **train**: ``train.py --config configs/train/smoke.yaml --device cuda`` (every stage) with its wall
  time and exit status.

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
BATCHES = (32, 128, 512)
WIDTHS = (96, 256)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _items(count: int, gpus: tuple[int, ...], seed: int) -> list:
    from gpu_env.generators import FAMILIES
    from lab.training import training as tr

    families = dict.fromkeys(FAMILIES, 1.0)
    return [tr.prepare(s) for s in tr.draw_scenarios(families, gpus, count, seed)]


def _rate(step, seconds: float, device: str) -> float:
    """Calls of ``step`` per second: one warm-up call, then as many as fit in ``seconds``."""
    step()
    _sync(device)
    n, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        step()
        n += 1
    _sync(device)
    return n / (time.perf_counter() - began)


def update_rate(items: list, batch: int, hidden: int, device: str, seconds: float) -> float:
    """Instances per second through PPO's steps: ListMLE + the clipped surrogate (orders drawn outside the clock)."""
    import torch

    from lab.training import training as tr
    from lab.training.scorer import QueueScorer, order_log_prob

    torch.manual_seed(0)
    model = QueueScorer(hidden).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    chunk = [items[i % len(items)] for i in range(batch)]
    jobs, mask, cluster = tr.collate(chunk, device)
    labels, lengths = tr.pad_orders([it.label for it in chunk], device)
    rng = np.random.default_rng(0)
    k = 16
    drawn = [o for it in chunk for o in tr.sample_orders(np.zeros(it.jobs.shape[0]), it.pending, k, rng, 1.0)]
    orders, order_lengths = tr.pad_orders(drawn, device)
    after = torch.zeros(batch * k, device=device)
    advantage = torch.randn(batch * k, device=device)
    with torch.no_grad():
        scores, mode = model(jobs, mask, cluster)
        old = tr.draw_log_prob(
            scores.repeat_interleave(k, dim=0), mode.repeat_interleave(k), orders, order_lengths, after, 1.0, True
        )

    def step() -> None:
        scores, mode = model(jobs, mask, cluster)
        listmle = -(order_log_prob(scores, labels, lengths) / lengths.clamp(min=1)).mean()
        new = tr.draw_log_prob(
            scores.repeat_interleave(k, dim=0), mode.repeat_interleave(k), orders, order_lengths, after, 1.0, True
        )
        loss = listmle - 0.5 * tr.clipped_surrogate(new - old, advantage, 0.2)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return batch * _rate(step, seconds, device)


def forward_rate(items: list, device: str, seconds: float) -> float:
    """Large queues scored per second (batch 1, no gradient)."""
    import torch

    from lab.training import training as tr
    from lab.training.scorer import QueueScorer

    model = QueueScorer(96).to(device).eval()
    jobs, mask, cluster = tr.collate(items[:1], device)

    def step() -> None:
        with torch.no_grad():
            model(jobs, mask, cluster)

    return _rate(step, seconds, device)


def train_run(device: str) -> tuple[int, float, str]:
    """The smoke config on ``device``: (exit status, seconds, last stderr line)."""
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        data = yaml.safe_load((ROOT / "configs" / "train" / "smoke.yaml").read_text())
        data["run_dir"] = str(Path(tmp) / "run")
        data["export"] = str(Path(tmp) / "run" / "policy.onnx")
        config = Path(tmp) / "smoke.yaml"
        config.write_text(yaml.safe_dump(data))
        began = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "train.py", "--config", str(config), "--device", device],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        lines = out.stderr.strip().splitlines()
        return out.returncode, time.perf_counter() - began, lines[-1] if lines else ""


def main(argv: list[str] | None = None) -> int:
    """Measure, write the result file, exit 0 (failures are recorded in the file)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-only", action="store_true", help="no CUDA columns: prove the script runs here")
    parser.add_argument("--seconds", type=float, default=4.0, help="wall seconds per rate measurement")
    args = parser.parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu_only:
        print("cuda_check: no CUDA device here; nothing measured (--cpu-only proves the script runs)")
        return 0
    devices = ["cpu"] + ([] if args.cpu_only else ["cuda"])
    out = RESULTS.with_name("cuda_cpu_only.md") if args.cpu_only else RESULTS
    gpu = torch.cuda.get_device_name(0) if cuda and not args.cpu_only else "none"
    lines = [
        "# CUDA check",
        "",
        f"`.venv/bin/python benchmarks/cuda_check.py{' --cpu-only' if args.cpu_only else ''}`, "
        f"{args.seconds:g} s per rate. Machine: {platform.machine()}, GPU {gpu}, torch {torch.__version__} "
        f"({torch.get_num_threads()} CPU threads).",
        "",
    ]
    if args.cpu_only:
        lines += ["**CPU-only run** (`--cpu-only`): the CUDA columns are absent; this proves the script runs.", ""]
    small = _items(64, (16, 32, 64), seed=1)
    large = _items(1, (1024,), seed=2)
    lines += [
        "## Update: ListMLE + PPO gradient steps",
        "",
        "Instances per second (64-GPU-size queues, K = 16 drawn orders each).",
        "",
        "| hidden | batch | " + " | ".join(devices) + " |",
        "| ---: | ---: | " + " | ".join("---:" for _ in devices) + " |",
    ]
    for hidden in WIDTHS:
        for batch in BATCHES:
            cells = []
            for device in devices:
                try:
                    cells.append(f"{update_rate(small, batch, hidden, device, args.seconds):,.0f}")
                except Exception as exc:  # recorded, the script goes on (one run always leaves a file)
                    cells.append(f"failed: {type(exc).__name__}: {exc}".replace("|", "/")[:120])
            lines.append(f"| {hidden} | {batch} | " + " | ".join(cells) + " |")
    lines += ["", "## Forward: one 1,024-GPU queue", "", "| " + " | ".join(devices) + " |"]
    lines += ["| " + " | ".join("---:" for _ in devices) + " |"]
    cells = []
    for device in devices:
        try:
            cells.append(f"{forward_rate(large, device, args.seconds):,.0f} /s")
        except Exception as exc:  # recorded, the script goes on
            cells.append(f"failed: {type(exc).__name__}".replace("|", "/"))
    lines.append("| " + " | ".join(cells) + " |")
    device = "cpu" if args.cpu_only else "cuda"
    code, seconds, last = train_run(device)
    lines += [
        "",
        "## Train",
        "",
        f"`train.py --config configs/train/smoke.yaml --device {device}`: exit {code} in {seconds:.1f} s.",
        f"Last line: `{last}`",
    ]
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
