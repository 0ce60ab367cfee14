"""Where the learned planner's time goes, stage by stage, beside greedy's whole plan.

    taskset -c 0 .venv/bin/python benchmarks/ppo_stages.py [--rounds 200]   # writes results/ppo_stages.md

For each of the seven benchmark scenarios, in this one warm process, each round times (``time.perf_counter``) the
stages of :func:`agents.ppo.plan` as shipped (12 candidates, the FIFO guard) one after the other: the decoder's
arrays (:meth:`gpu_env.listsched.ListInstance.build`), the scorer's features
(:func:`gpu_env.queue_features.job_features` and ``cluster_features``), the ONNX call, the candidate orders, the
compiled decode of the 12 candidates with promotion, the FIFO guard's replay and the winner's plan; then
``ppo.plan`` whole and ``greedy.solve`` whole. Cells are medians over the rounds, in milliseconds. The table says
which of the planner's costs a faster learned mode would have to cut: the ones outside the decode are fixed per
plan, whatever the number of candidates.
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

from agents import greedy, ppo  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import FAMILIES  # noqa: E402
from gpu_env.listsched import ListInstance, decode, fifo_replay  # noqa: E402
from gpu_env.queue_features import cluster_features, job_features  # noqa: E402
from gpu_env.scenario import load_scenario  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "ppo_stages.md"
STAGES = ("arrays", "features", "scorer", "orders", "decode 12", "fifo guard", "winner's plan")


def stages(name: str, rounds: int) -> dict[str, float]:
    """Median milliseconds of each stage, of ``ppo.plan`` and of ``greedy.solve`` on one scenario."""
    sc = load_scenario(ROOT / "configs" / "scenarios" / f"{name}.yaml")
    policy = ppo.load_policy()
    keys = (*STAGES, "ppo.plan", "greedy.solve")
    times: dict[str, list[float]] = {key: [] for key in keys}
    tick = time.perf_counter
    for r in range(rounds + 2):  # 2 warm-up rounds
        marks = [tick()]
        inst = ListInstance.build(sc)
        marks.append(tick())
        jobs, cluster = job_features(sc, inst), cluster_features(sc, inst)
        marks.append(tick())
        scores, mode_logit = policy.score(jobs, inst.pending, cluster)
        marks.append(tick())
        orders, modes = ppo.candidate_orders(
            scores, mode_logit, inst.pending, ppo.DEFAULT_SAMPLES, 0, policy.temperature
        )  # fmt: skip
        marks.append(tick())
        decoded = decode(inst, orders, modes, promote_rounds=ppo.PROMOTE_ROUNDS)
        marks.append(tick())
        fifo_replay(sc, inst)
        marks.append(tick())
        decoded.plan(decoded.best, sc, "ppo")
        marks.append(tick())
        ppo.plan(sc)
        marks.append(tick())
        greedy.solve(sc)
        marks.append(tick())
        if r >= 2:
            for key, a, b in zip(keys, marks[:-1], marks[1:], strict=True):
                times[key].append((b - a) * 1e3)
    return {key: float(np.median(v)) for key, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    """Measure and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args(argv)
    policy = ppo.load_policy()
    lines = [
        "# The learned planner's time by stage",
        "",
        f"- Command: `taskset -c 0 .venv/bin/python benchmarks/ppo_stages.py --rounds {args.rounds}`",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- Machine: {platform.platform()}, Python {platform.python_version()}",
        f"- Policy SHA-256 `{policy.sha256[:12]}...`; medians over {args.rounds} rounds, ms.",
        "",
        "| scenario | " + " | ".join(STAGES) + " | sum | ppo.plan | greedy.solve | decode 12 / greedy.solve |",
        "| --- | " + " | ".join("---:" for _ in STAGES) + " | ---: | ---: | ---: | ---: |",
    ]
    for name in FAMILIES:  # the seven benchmark scenarios: one file per generator family
        m = stages(name, args.rounds)
        total = sum(m[s] for s in STAGES)
        cells = " | ".join(f"{m[s]:.3f}" for s in STAGES)
        lines.append(
            f"| {name} | {cells} | {total:.3f} | {m['ppo.plan']:.3f} | {m['greedy.solve']:.3f} "
            f"| {m['decode 12'] / m['greedy.solve']:.2f} |"
        )
        print(lines[-1], flush=True)
    write_text_atomic(OUT, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
