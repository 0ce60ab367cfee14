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
The order is the optimum's in every arm, so the block choice alone differs.

A second probe gives the block choice the state it lacks: at a job's turn, each free block is described by
:func:`gpu_env.placement.block_features` (how busy its neighbours are, its node's load, its position, whether it is
the lowest or the highest free one), and a linear score over them picks the block (the decoder's learned block
rule, :func:`gpu_env.placement.learned_block`). The weights are fitted by a conditional logit (softmax over the free
blocks at the optimum's start, cross-entropy against the optimum's, Adam, seeded) on the 180 training optima
replayed in order; the held-out 60 are decoded as above. Then the shipped planner's 12 candidates decode with it
(candidate 1 and every second sampled one on the learned rule, the others on the lowest) on 60 fresh instances per
family (seeds 41000..41059), beside the shipped planner, as ratios to greedy. No time is measured.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import greedy, ppo  # noqa: E402
from agents.learned.optima import DEFAULT_PATH, load_optima  # noqa: E402
from agents.learned.training import order_from_plan  # noqa: E402
from gpu_env import placement  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import FAMILIES, generate  # noqa: E402
from gpu_env.listsched import ListInstance, decode, fifo_replay  # noqa: E402
from gpu_env.placement import BLOCK_FEATURES, BLOCK_LEARNED, BLOCK_LOWEST  # noqa: E402
from gpu_env.queue_features import cluster_features, job_features  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "block_head_probe.md"
MODES = np.array([0, 1, 2])
HELD_OUT = 60
FRESH = range(41000, 41060)
EPOCHS = 1500
TOL = 1e-6


def free_block_states(inst: ListInstance, order: np.ndarray, placed: np.ndarray):
    """(features of each free block, index of the plan's) at each placed job's turn, the plan's earlier jobs in place.

    Only turns with at least two free blocks at the plan's start count.
    """
    where = {int(j): (int(t), int(a)) for j, t, a in placed}
    busy = inst.busy.copy()
    G, ns = inst.gpus, inst.node_size
    for j in map(int, order):
        if j not in where:
            continue
        t, a = where[j]
        k = int(inst.k[j])
        free = [
            b
            for b in range(G - k + 1)
            if placement.allowed_start(b, k, G, ns) and placement.block_free(inst, j, t, b, busy)
        ]
        if len(free) >= 2 and a in free:
            x = np.zeros((len(free), len(BLOCK_FEATURES)))
            for i, b in enumerate(free):
                placement.block_features(inst, j, t, b, free[0], free[-1], busy, x[i])
            yield x, free.index(a)
        placement.mark(busy, t, int(inst.d[j]), a, k)


def fit_block_weights(states: list[tuple[np.ndarray, int]], epochs: int = 300) -> tuple[np.ndarray, float]:
    """Conditional-logit weights of the learned block rule, and the final mean negative log-likelihood."""
    torch.manual_seed(0)
    w = torch.zeros(len(BLOCK_FEATURES), requires_grad=True)
    opt = torch.optim.Adam([w], 0.05)
    xs = [torch.tensor(x, dtype=torch.float32) for x, _ in states]
    for _ in range(epochs):
        loss = sum(-torch.log_softmax(x @ w, 0)[y] for x, (_, y) in zip(xs, states, strict=True)) / len(xs)
        loss = loss + 1e-3 * (w**2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return w.detach().numpy().astype(np.float64), float(loss.detach())


def planner_arms(weights: np.ndarray) -> dict[str, dict[str, float]]:
    """Mean ratio to greedy per family of the shipped planner and of its candidates half on the learned rule."""
    policy = ppo.load_policy()
    out: dict[str, dict[str, float]] = {}
    for family in FAMILIES:
        ratios: dict[str, list[float]] = {"shipped": [], "half the candidates learned": []}
        for seed in FRESH:
            sc = generate(family, seed)
            inst = ListInstance.build(sc)
            scores, logit = policy.score(job_features(sc, inst), inst.pending, cluster_features(sc, inst))
            orders, modes = ppo.candidate_orders(
                scores, logit, inst.pending, ppo.DEFAULT_SAMPLES, 0, policy.temperature
            )
            per = np.full(orders.shape[0], BLOCK_LOWEST, dtype=np.int64)
            per[1] = BLOCK_LEARNED
            per[3::2] = BLOCK_LEARNED
            fifo = float(fifo_replay(sc, inst).objective[0])
            base = greedy.solve(sc).objective
            for arm, rules in (("shipped", None), ("half the candidates learned", per)):
                found = decode(
                    inst,
                    orders,
                    modes,
                    promote_rounds=ppo.PROMOTE_ROUNDS,
                    rules=None if rules is None else np.repeat(rules[:, None], inst.k.size, axis=1),
                    block_weights=weights,
                )
                ratios[arm].append(max(float(found.objective.max()), fifo) / base)
        out[family] = {arm: float(np.mean(v)) for arm, v in ratios.items()}
    return out


def main() -> int:
    """Fit, decode, write the tables."""
    torch.manual_seed(0)
    records = [r for r in load_optima(DEFAULT_PATH) if r.optimal]
    held_out = set(np.random.default_rng(0).permutation(len(records))[:HELD_OUT].tolist())
    rows, targets, cases = [], [], []
    states: list[tuple[np.ndarray, int]] = []
    held_states: list[tuple[np.ndarray, int]] = []
    for i, rec in enumerate(records):
        sc = rec.scenario()
        inst = ListInstance.build(sc)
        jobs = job_features(sc, inst)
        features = np.concatenate([jobs, np.repeat(cluster_features(sc, inst)[None], jobs.shape[0], 0)], axis=1)
        placed = np.asarray(rec.placements, dtype=np.int64).reshape(-1, 3)
        cases.append((rec, inst, features, placed))
        turns = list(free_block_states(inst, order_from_plan(inst, rec.placements), placed))
        if i in held_out:
            held_states += turns
            continue
        states += turns
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
        "# A block choice for the policy, probed",
        "",
        "`PYTHONPATH=. .venv/bin/python benchmarks/block_head_probe.py` (no timing: machine-independent). "
        f"Training: {len(targets)} placed jobs of {len(records) - HELD_OUT} proven optima, final squared error "
        f"{float(loss.detach()):.4f} (the targets' variance {float(y.var()):.4f}); evaluation: the other "
        f"{HELD_OUT}, each decoded in its optimum's order.",
        "",
        "| blocks | reached exactly | of optimum |",
        "| --- | ---: | ---: |",
    ]
    weights, nll = fit_block_weights(states)
    arms["learned block rule (state-aware)"] = []
    for i, (rec, inst, _, _) in enumerate(cases):
        if i not in held_out:
            continue
        orders = np.array([order_from_plan(inst, rec.placements)] * MODES.size)
        rules = np.full((MODES.size, inst.k.size), BLOCK_LEARNED, dtype=np.int64)
        found = decode(inst, orders, MODES, rules=rules, block_weights=weights)
        arms["learned block rule (state-aware)"].append(float(found.objective.max()) / rec.objective)
    for arm, values in arms.items():
        v = np.array(values)
        lines.append(f"| {arm} | {np.mean(v >= 1 - TOL):.1%} | {v.mean():.4f} |")

    def accuracy(turns: list[tuple[np.ndarray, int]]) -> tuple[float, float]:
        """Share of turns where the learned rule's block is the optimum's, and where the lowest is."""
        hits = [int(np.argmax(x @ weights)) == y for x, y in turns]  # argmax: the first of equal scores
        return float(np.mean(hits)), float(np.mean([y == 0 for _, y in turns]))

    (fit_hit, fit_low), (held_hit, held_low) = accuracy(states), accuracy(held_states)
    lines += [
        "",
        f"The learned block rule: fitted on {len(states)} turns of the training optima with two free blocks or "
        f"more (final mean negative log-likelihood {nll:.4f}); weights "
        + ", ".join(f"{name} {w:+.2f}" for name, w in zip(BLOCK_FEATURES, weights, strict=True))
        + ". The optimum's block at a turn, as each rule would pick it (the optimum's earlier jobs in place):",
        "",
        "| turns | the learned rule's block is the optimum's | the lowest block is |",
        "| --- | ---: | ---: |",
        f"| training ({len(states)}) | {fit_hit:.1%} | {fit_low:.1%} |",
        f"| held out ({len(held_states)}) | {held_hit:.1%} | {held_low:.1%} |",
        "",
        f"The shipped planner with it, {len(FRESH)} fresh instances per family (seeds {FRESH.start}.."
        f"{FRESH.stop - 1}), mean ratio to greedy:",
        "",
        "| family | shipped | half the candidates learned |",
        "| --- | ---: | ---: |",
    ]
    per_family = planner_arms(weights)
    for family, v in per_family.items():
        lines.append(f"| {family} | {v['shipped']:.4f} | {v['half the candidates learned']:.4f} |")
    overall = {
        arm: np.mean([v[arm] for v in per_family.values()]) for arm in ("shipped", "half the candidates learned")
    }
    lines.append(f"| **all** | **{overall['shipped']:.4f}** | **{overall['half the candidates learned']:.4f}** |")
    write_text_atomic(OUT, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
