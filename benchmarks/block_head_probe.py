"""Can a one-pass head choose the optimum's blocks? A probe before building one into the scorer.

    PYTHONPATH=. .venv/bin/python benchmarks/block_head_probe.py   # writes results/block_head_probe.md

The list space reaches 96.7 % of the proven optima when each job's first GPU is the optimum's, and 91.7 % when it
is the optimum's rounded to 16 positions (``benchmarks/list_reach.py``). The queue scorer sees each job once,
before any is placed, so a block output of it would be a function of the job's features and the cluster's
(:mod:`gpu_env.queue_features`), the scorer's inputs. This probe fits such a function: an MLP (2 x 64, seeded) from
those features to the optimum's relative position ``a / (G - k)``, by squared error, on 180 of the 240 proven
optima of ``agents/learned/data/optima.json.gz``; on the other 60 (a seeded split) each optimum's own order is
decoded (the three trade modes, the best) with the predicted positions as preferences (``decode(..., prefer=...)``),
raw and rounded to 16 levels, beside the lowest free block (no preference) and the optimum's blocks (the oracle).
The order is the optimum's in every arm, so the block choice alone differs. No time is measured.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.learned.optima import DEFAULT_PATH, load_optima  # noqa: E402
from agents.learned.training import order_from_plan  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.listsched import ListInstance, decode  # noqa: E402
from gpu_env.queue_features import cluster_features, job_features  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "block_head_probe.md"
MODES = np.array([0, 1, 2])
HELD_OUT = 60
EPOCHS = 1500
TOL = 1e-6


def main() -> int:
    """Fit, decode, write the table."""
    torch.manual_seed(0)
    records = [r for r in load_optima(DEFAULT_PATH) if r.optimal]
    held_out = set(np.random.default_rng(0).permutation(len(records))[:HELD_OUT].tolist())
    rows, targets, cases = [], [], []
    for i, rec in enumerate(records):
        sc = rec.scenario()
        inst = ListInstance.build(sc)
        jobs = job_features(sc, inst)
        features = np.concatenate([jobs, np.repeat(cluster_features(sc, inst)[None], jobs.shape[0], 0)], axis=1)
        placed = np.asarray(rec.placements, dtype=np.int64).reshape(-1, 3)
        cases.append((rec, inst, features, placed))
        if i in held_out:
            continue
        for j, _, a in placed:
            span = int(inst.gpus - inst.k[j])
            if span > 0:
                rows.append(features[j])
                targets.append(a / span)
    x = torch.tensor(np.array(rows), dtype=torch.float32)
    y = torch.tensor(np.array(targets), dtype=torch.float32)
    relu, linear = torch.nn.ReLU, torch.nn.Linear
    net = torch.nn.Sequential(linear(x.shape[1], 64), relu(), linear(64, 64), relu(), linear(64, 1))
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    for _ in range(EPOCHS):
        loss = ((torch.sigmoid(net(x).squeeze(-1)) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    arms: dict[str, list[float]] = {"lowest free block": [], "predicted": [], "predicted, 16 levels": [], "oracle": []}
    for i, (rec, inst, features, placed) in enumerate(cases):
        if i not in held_out:
            continue
        orders = np.array([order_from_plan(inst, rec.placements)] * MODES.size)
        with torch.no_grad():
            pos = torch.sigmoid(net(torch.tensor(features, dtype=torch.float32)).squeeze(-1)).numpy()
        span = np.maximum(inst.gpus - inst.k, 0)
        oracle = np.full(inst.k.size, -1, dtype=np.int64)
        oracle[placed[:, 0]] = placed[:, 2]
        prefs = {
            "lowest free block": None,
            "predicted": np.where(inst.pending, np.round(pos * span), -1).astype(np.int64),
            "predicted, 16 levels": np.where(inst.pending, np.round(np.round(pos * 15) / 15 * span), -1).astype(
                np.int64
            ),
            "oracle": oracle,
        }
        for arm, prefer in prefs.items():
            arms[arm].append(float(decode(inst, orders, MODES, prefer=prefer).objective.max()) / rec.objective)
    lines = [
        "# A one-pass block head, probed",
        "",
        "`PYTHONPATH=. .venv/bin/python benchmarks/block_head_probe.py` (no timing: machine-independent). "
        f"Training: {len(targets)} placed jobs of {len(records) - HELD_OUT} proven optima, final squared error "
        f"{float(loss.detach()):.4f} (the targets' variance {float(y.var()):.4f}); evaluation: the other "
        f"{HELD_OUT}, each decoded in its optimum's order.",
        "",
        "| blocks | reached exactly | of optimum |",
        "| --- | ---: | ---: |",
    ]
    for arm, values in arms.items():
        v = np.array(values)
        lines.append(f"| {arm} | {np.mean(v >= 1 - TOL):.1%} | {v.mean():.4f} |")
    write_text_atomic(OUT, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
