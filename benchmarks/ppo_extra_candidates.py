"""What extra candidates would add to the learned planner: the FIFO-seeded sweep and greedy's own orderings.

    PYTHONPATH=. .venv/bin/python benchmarks/ppo_extra_candidates.py   # writes results/ppo_extra_candidates.md

Greedy keeps two moves the learned planner's candidates lack: a sweep that starts from FIFO's placements (the
FIFO seed) and its fixed orderings (by priority and by realisable value). Here each is added to the shipped
planner's 12 candidates inside the same compiled call (:func:`gpu_env.listsched.decode`, promotion and the FIFO
guard as shipped), on the fresh instances of ``benchmarks/ppo_benchmarks.py`` (a): 30 per family at its own size,
seeds 20000..20029. Objectives as ratios to greedy's, per instance, then the mean. No time is measured; the
decodes per plan are counted.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import greedy, ppo  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import FAMILIES, generate  # noqa: E402
from gpu_env.listsched import MODE_AFTER, MODE_INLINE, ListInstance, decode, fifo_replay  # noqa: E402
from gpu_env.queue_features import cluster_features, job_features  # noqa: E402
from gpu_env.scenario import Scenario  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "ppo_extra_candidates.md"
SEEDS = range(20000, 20030)
ARMS = ("shipped", "+ FIFO seed", "+ greedy's 2 orderings", "+ both")


def _row(order: list[int], width: int) -> np.ndarray:
    row = np.full(width, -1, dtype=np.int64)
    row[: len(order)] = order
    return row


def objective(sc: Scenario, policy: ppo.LoadedPolicy, fifo_seed: bool, orderings: bool) -> tuple[float, int]:
    """The shipped planner's objective with the extra candidates, and the number of candidates decoded."""
    inst = ListInstance.build(sc)
    scores, mode_logit = policy.score(job_features(sc, inst), inst.pending, cluster_features(sc, inst))
    orders, modes = ppo.candidate_orders(
        scores, mode_logit, inst.pending, ppo.DEFAULT_SAMPLES, 0, policy.temperature
    )  # fmt: skip
    rows, row_modes = list(orders), list(modes)
    keys = greedy.JobKeys.of(sc, inst.first_value)
    if orderings:
        for name in ("weight", "value"):
            rows.append(_row(greedy.ORDERINGS[name](keys), orders.shape[1]))
            row_modes.append(MODE_INLINE)
    fifo = fifo_replay(sc, inst)
    seed = None
    if fifo_seed:  # last, as decode takes the seed: FIFO's placements, then the jobs FIFO left out
        rows.append(_row(greedy.ORDERINGS["arrival"](keys), orders.shape[1]))
        row_modes.append(MODE_AFTER)
        seed = (fifo.start[0], fifo.first[0])
    found = decode(inst, np.array(rows), np.array(row_modes), promote_rounds=ppo.PROMOTE_ROUNDS, seed=seed)
    return max(float(found.objective.max()), float(fifo.objective[0])), len(rows)


def main() -> int:
    """Measure and write the table."""
    policy = ppo.load_policy()
    lines = [
        "# Extra candidates for the learned planner",
        "",
        "`PYTHONPATH=. .venv/bin/python benchmarks/ppo_extra_candidates.py` (no timing: machine-independent). "
        f"Policy SHA-256 `{policy.sha256[:12]}...`; 30 fresh instances per family (seeds 20000..20029); mean ratio "
        "to greedy's objective.",
        "",
        "| family | " + " | ".join(ARMS) + " |",
        "| --- | " + " | ".join("---:" for _ in ARMS) + " |",
    ]
    totals: dict[str, list[float]] = {arm: [] for arm in ARMS}
    counts: dict[str, int] = {}
    for family in FAMILIES:
        ratios: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for s in SEEDS:
            sc = generate(family, s)
            base = greedy.solve(sc).objective
            for arm, (fifo_seed, orderings) in zip(ARMS, ((0, 0), (1, 0), (0, 1), (1, 1)), strict=True):
                value, n = objective(sc, policy, bool(fifo_seed), bool(orderings))
                ratios[arm].append(value / base)
                counts[arm] = n
        for arm in ARMS:
            totals[arm] += ratios[arm]
        lines.append(f"| {family} | " + " | ".join(f"{np.mean(ratios[a]):.4f}" for a in ARMS) + " |")
        print(lines[-1], flush=True)
    lines.append("| **all** | " + " | ".join(f"**{np.mean(totals[a]):.4f}**" for a in ARMS) + " |")
    lines.append("| candidates decoded | " + " | ".join(str(counts[a]) for a in ARMS) + " |")
    lines += [
        "",
        "Promotion works on the best candidate before it, so an extra candidate can lower a family's mean slightly "
        "(the promoted plan of another candidate may have been better).",
    ]
    write_text_atomic(OUT, "\n".join(lines) + "\n")
    print("\n".join(lines[-4:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
