"""How the learned planner's rollouts explore: best of N under other sampling rules, paired against the shipped one.

The shipped planner (:func:`agents.ppo.rollout_batch`) takes the most likely
action in rollout 0 and samples the others from the masked softmax at
temperature 1. This script replays that loop with other rules, on fresh
draws (seeds from ``--seed``, never used by training or by
``benchmarks/ppo_benchmarks.py``), and reports the best of ``--samples``
rollouts as a ratio to greedy's objective, per family, with the paired
difference to the shipped rule:

* ``sample T``: the shipped rule with the logits divided by T;
* ``starts``: rollout i begins with the i-th most likely allowed first action
  (POMO's distinct starts), then takes the most likely action;
* ``starts + sample``: distinct starts, then the first half takes the most
  likely action and the other half samples.

A second table sweeps the number of rollouts (``--sweep``, the shipped rule): the best
rollout alone and with the greedy guard (the better of it and greedy's plan) as a ratio
to greedy, and the median time of the rollouts (``rollout_batch``) in this process.

Usage::

    PYTHONPATH=. taskset -c 0 .venv/bin/python benchmarks/ppo_sampling.py [--instances 15] [--seed 50000]
        [--samples 8] [--sweep 1,2,4,8,16] [--out benchmarks/results/ppo_sampling.md]
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import ppo  # noqa: E402
from agents.registry import run_scheduler  # noqa: E402
from gpu_env.batch.observe import observe  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import FAMILIES, generate  # noqa: E402
from gpu_env.scenario import Scenario  # noqa: E402

RULES: tuple[tuple[str, str, float], ...] = (
    ("sample T=1 (shipped)", "sample", 1.0),
    ("sample T=0.7", "sample", 0.7),
    ("sample T=0.85", "sample", 0.85),
    ("sample T=1.2", "sample", 1.2),
    ("starts", "starts", 1.0),
    ("starts + sample", "starts+sample", 1.0),
)


def best_of(sc: Scenario, policy: ppo.LoadedPolicy, rule: str, temperature: float, samples: int, seed: int) -> float:
    """The best objective of ``samples`` rollouts of ``policy`` on ``sc`` under ``rule``."""
    if rule == "sample":  # the planner's own rollouts, the logits divided by the temperature (T = 1: as shipped)

        def tempered(obs: dict[str, np.ndarray]) -> np.ndarray:
            return np.asarray(policy.logits(obs), dtype=np.float64) / temperature  # T = 1: the logits unchanged

        return float(ppo.rollout_batch(sc, tempered, policy.limits, samples=samples, seed=seed).objectives.max())
    engine = ppo.rollout_engine(sc, policy.limits, samples)
    rng = np.random.default_rng(seed)
    done = engine.state.done
    index = np.arange(samples)
    first = True
    while not done.all():
        live = np.flatnonzero(~done)  # as rollout_batch: finished rollouts skip the network and the draws
        masks = engine.action_masks()[live]
        obs = {key: value[live] for key, value in observe(engine, ppo.INPUTS).items()}
        logits = np.asarray(policy.logits(obs), dtype=np.float64)
        if first:  # distinct starts: the allowed first actions in logit order, repeated when fewer than samples
            order = np.argsort(-np.where(masks[0], logits[0], -np.inf), kind="stable")
            chosen = order[index % int(masks[0].sum())]
        elif rule == "starts":
            chosen = np.argmax(np.where(masks, logits, -np.inf), axis=1)
        else:  # starts + sample: the first half takes the most likely action, the other half samples
            chosen = ppo.choose_actions(logits / temperature, masks, live < max(1, samples // 2), rng)
        first = False
        actions = np.full(samples, engine.layout.advance, dtype=np.int64)
        actions[live] = chosen
        engine.step(actions)
    return float(engine.state.objective.max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=15, help="fresh instances per family")
    parser.add_argument("--seed", type=int, default=50_000, help="first generator seed of the fresh instances")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--policy", type=Path, default=None)
    parser.add_argument("--sweep", default="1,2,4,8,16", help="rollout counts of the second table")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables to this Markdown file")
    args = parser.parse_args(argv)
    policy = ppo.load_policy(args.policy)
    counts = [int(n) for n in args.sweep.split(",") if n]
    ratios: dict[str, dict[str, list[float]]] = {name: {} for name, _, _ in RULES}
    sweep: dict[int, list[tuple[float, float, float]]] = {n: [] for n in counts}  # (alone, guarded, ms)
    for family in FAMILIES:
        for seed in range(args.seed, args.seed + args.instances):
            sc = generate(family, seed)
            greedy = run_scheduler("greedy", sc).metrics.objective
            for name, rule, temperature in RULES:
                value = best_of(sc, policy, rule, temperature, args.samples, seed=0)
                ratios[name].setdefault(family, []).append(value / greedy)
            for n in counts:
                started = time.perf_counter()
                best = float(ppo.rollout_batch(sc, policy.logits, policy.limits, samples=n).objectives.max())
                ms = (time.perf_counter() - started) * 1e3
                sweep[n].append((best / greedy, max(best, greedy) / greedy, ms))
        print(f"{family}: done", file=sys.stderr)
    shipped = np.concatenate(list(ratios[RULES[0][0]].values()))
    command = shlex.join(["PYTHONPATH=.", ".venv/bin/python", "benchmarks/ppo_sampling.py", *(argv or sys.argv[1:])])
    lines = [
        f"Best of {args.samples} rollouts / greedy, mean per family over {args.instances} fresh instances "
        f"(seeds {args.seed}..{args.seed + args.instances - 1}), policy {policy.path.name} "
        f"({policy.sha256[:12]}); written by `{command}`.",
        "",
        "| rule | " + " | ".join(FAMILIES) + " | all | paired vs shipped (standard error) |",
        "| --- | " + " | ".join("---:" for _ in FAMILIES) + " | ---: | ---: |",
    ]
    for name, _, _ in RULES:
        values = np.concatenate(list(ratios[name].values()))
        diff = values - shipped
        paired = "" if name == RULES[0][0] else f"{diff.mean():+.4f} ({diff.std(ddof=1) / np.sqrt(diff.size):.4f})"
        cells = " | ".join(f"{np.mean(ratios[name][f]):.3f}" for f in FAMILIES)
        lines.append(f"| {name} | {cells} | {values.mean():.4f} | {paired} |")
    lines += [
        "",
        "Rollouts per plan (the shipped rule), the same instances: mean ratio to greedy of the best rollout "
        "('alone', `--guard none`) and of the better of it and greedy's plan ('greedy guard', as shipped), and the "
        "median ms of the rollouts (`agents.ppo.rollout_batch`) in this process; greedy's own time comes on top "
        "of the guarded form.",
        "",
        "| rollouts | alone / greedy | greedy guard / greedy | rollouts ms (median) |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for n in counts:
        rows = np.array(sweep[n])
        lines.append(f"| {n} | {rows[:, 0].mean():.4f} | {rows[:, 1].mean():.4f} | {np.median(rows[:, 2]):.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        write_text_atomic(args.out, "# Sampling rules of the learned planner\n\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
