"""A stepwise policy on fresh draws: one decode and as shipped, per family, as ratios to greedy's objective.

    PYTHONPATH=. .venv/bin/python benchmarks/stepwise_fresh.py [--policy agents/policies/stepwise.onnx]
        [--per-family 10] [--seed 95000] [--planner-seeds 3] [--gpus N]

Instances: ``--per-family`` draws per family (seeds ``--seed`` on, none of them training's, validation's, test's or
another benchmark's) at its own size or at ``--gpus``; each planned with ``--planner-seeds`` planner seeds. Every plan
is validated. Quality only (no timing): the numbers do not depend on the machine. To compare two feature sets, run
the script from each commit's tree (``PYTHONPATH`` the tree, the script by path).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import greedy, stepwise  # noqa: E402
from agents.options import Guard, PlanOptions  # noqa: E402
from gpu_env.generators import FAMILIES, generate  # noqa: E402
from gpu_env.metrics import compute_metrics  # noqa: E402
from gpu_env.validation import validate  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Print a Markdown table of the policy's ratios to greedy per family."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=Path, default=None, help="the ONNX file (default: the shipped one)")
    parser.add_argument("--per-family", type=int, default=10)
    parser.add_argument("--seed", type=int, default=95_000)
    parser.add_argument("--planner-seeds", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=None)
    args = parser.parse_args(argv)
    print(f"policy: {args.policy or 'shipped'}; {args.per_family} draws per family from seed {args.seed}, "
          f"{args.planner_seeds} planner seeds each")  # fmt: skip
    print("| family | runs | one decode / greedy | as shipped / greedy | worst as shipped |")
    print("| --- | ---: | ---: | ---: | ---: |")
    every: dict[str, list[float]] = {"one": [], "shipped": []}
    for family in FAMILIES:
        one: list[float] = []
        shipped: list[float] = []
        for i in range(args.per_family):
            sc = generate(family, args.seed + i, gpus=args.gpus)
            base = compute_metrics(sc, greedy.plan(sc, PlanOptions())).objective
            for s in range(args.planner_seeds):
                for out, options in (
                    (one, PlanOptions(policy=args.policy, samples=1, guard=Guard.NONE, seed=s)),
                    (shipped, PlanOptions(policy=args.policy, seed=s)),
                ):
                    plan = stepwise.plan(sc, options)
                    problems = validate(sc, plan)
                    if problems:
                        raise SystemExit(f"{family} seed {args.seed + i}: the plan breaks a rule: {problems[0]}")
                    out.append(compute_metrics(sc, plan).objective / base)
        every["one"] += one
        every["shipped"] += shipped
        print(f"| {family} | {len(one)} | {np.mean(one):.4f} | {np.mean(shipped):.4f} | {np.min(shipped):.4f} |")
    print(f"| **all** | {len(every['one'])} | **{np.mean(every['one']):.4f}** | **{np.mean(every['shipped']):.4f}** | "
          f"{np.min(every['shipped']):.4f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
