"""Before / after of an RL phase: two exported policies, ratio to greedy per family, on fixed instances.

For each family of the training config and each policy, the mean over instances of
objective / greedy's objective for the policy alone (greedy decoding, ``ppo --samples 1
--guard none``) and the best of 8 rollouts (``--samples 8 --guard none``, seed 0).
Two instance sets: ``eval`` (the training evaluation's, seeds from ``eval.seed``: the RL
phase chose its best policy on these) and ``fresh`` (seeds from ``--fresh-seed``, never
seen in training or selection). Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/rl_eval.py BEFORE.onnx AFTER.onnx \\
        [--config configs/train/rl.yaml] [--fresh 5] [--out benchmarks/results/rl_before_after.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from agents.learned.config import load_config
from agents.ppo import load_policy, rollout
from agents.registry import run_scheduler
from gpu_env.generators import generate


def ratios(policy_file: str, instances: list[tuple[str, object, float]], samples: int) -> dict[str, list[float]]:
    """Family -> ratios to greedy of the policy's best of ``samples`` rollouts (rollout 0 greedy decoding)."""
    policy = load_policy(policy_file)
    out: dict[str, list[float]] = {}
    for family, sc, greedy in instances:
        episode, _ = rollout(sc, policy.logits, policy.limits, samples=samples, seed=0)
        out.setdefault(family, []).append(episode.objective / greedy)
    return out


def main() -> None:
    """Measure and print (and write) the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--config", default="configs/train/rl.yaml")
    parser.add_argument("--fresh", type=int, default=5, help="fresh instances per family")
    parser.add_argument("--fresh-seed", type=int, default=20_000)
    parser.add_argument("--out", help="markdown file to write")
    args = parser.parse_args()
    cfg = load_config(args.config)
    sets = {
        "eval": [(f, cfg.eval.seed + i) for f in cfg.scenarios.families for i in range(cfg.eval.instances_per_family)],
        "fresh": [(f, args.fresh_seed + i) for f in cfg.scenarios.families for i in range(args.fresh)],
    }
    lines = ["| set | family | n | before, alone | after, alone | before, best of 8 | after, best of 8 |"]
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    result: dict[str, dict[str, dict[str, float]]] = {}
    paired: list[str] = []
    for name, seeds in sets.items():
        instances = []
        for family, seed in seeds:
            sc = generate(family, seed)
            instances.append((family, sc, run_scheduler("greedy", sc).metrics.objective))
        cols = {
            (which, samples): ratios(path, instances, samples)
            for which, path in (("before", args.before), ("after", args.after))
            for samples in (1, 8)
        }
        order = [("before", 1), ("after", 1), ("before", 8), ("after", 8)]
        for family in cfg.scenarios.families:
            vals = [float(np.mean(cols[key][family])) for key in order]
            lines.append(
                f"| {name} | {family} | {len(cols[order[0]][family])} | " + " | ".join(f"{v:.4f}" for v in vals) + " |"
            )
            result.setdefault(name, {})[family] = dict(zip([f"{w}_{s}" for w, s in order], vals, strict=True))
        means = [float(np.mean([np.mean(v) for v in cols[key].values()])) for key in order]
        worst = [float(min(min(v) for v in cols[key].values())) for key in order]
        lines.append(
            f"| {name} | **mean of families** | {len(instances)} | " + " | ".join(f"**{v:.4f}**" for v in means) + " |"
        )
        lines.append(f"| {name} | worst instance | | " + " | ".join(f"{v:.4f}" for v in worst) + " |")
        result[name]["mean"] = dict(zip([f"{w}_{s}" for w, s in order], means, strict=True))
        for samples, label in ((1, "alone"), (8, "best of 8")):
            before = np.concatenate([cols[("before", samples)][f] for f in cfg.scenarios.families])
            after = np.concatenate([cols[("after", samples)][f] for f in cfg.scenarios.families])
            diff = after - before
            se = diff.std(ddof=1) / np.sqrt(diff.size) if diff.size > 1 else float("nan")
            paired.append(
                f"- {name}, {label}: after - before = {diff.mean():+.4f} (standard error {se:.4f} over {diff.size} "
                f"instances); better on {(diff > 1e-9).sum()}, worse on {(diff < -1e-9).sum()}"
            )
    table = "\n".join(lines) + "\n\nPaired, per instance:\n\n" + "\n".join(paired)
    print(table)
    print(json.dumps(result))
    if args.out:
        head = (
            f"# RL phase: before and after (ratio to greedy's objective, mean per family)\n\n"
            f"before: `{args.before}`, after: `{args.after}`; instances: `eval` = the training evaluation's "
            f"(the RL phase picked its best policy on these), `fresh` = seeds {args.fresh_seed}.. (held out).\n"
            f"Command: `PYTHONPATH=. .venv/bin/python benchmarks/rl_eval.py {args.before} {args.after} "
            f"--config {args.config} --fresh {args.fresh} --fresh-seed {args.fresh_seed}`\n\n"
        )
        Path(args.out).write_text(head + table + "\n")


if __name__ == "__main__":
    main()
