"""What extra candidates would add to the learned planner: the FIFO-seeded sweep and greedy's own orderings.

    PYTHONPATH=. .venv/bin/python benchmarks/ppo_extra_candidates.py   # writes results/ppo_extra_candidates.md
    PYTHONPATH=. .venv/bin/python benchmarks/ppo_extra_candidates.py --seeds 41000 60 \
        --out benchmarks/results/ppo_extra_candidates_fresh.md          # a second set, 60 per family

Greedy keeps two moves the learned planner's candidates lack: a sweep that starts from FIFO's placements (the
FIFO seed) and its fixed orderings (by priority and by realisable value). Here each is added to the shipped
planner's 12 candidates inside the same compiled call (:func:`gpu_env.listsched.decode`, promotion and the FIFO
guard as shipped), on the fresh instances of ``benchmarks/ppo_benchmarks.py`` (a): 30 per family at its own size,
seeds 20000..20029. Objectives as ratios to greedy's, per instance, then the mean. No time is measured; the
decodes per plan are counted. The last arm adds no candidate: the sampled ones decode with other block rules
(:data:`ROTATION`), a block choice across candidates instead of per job.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import greedy, ppo  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import FAMILIES, generate  # noqa: E402
from gpu_env.listsched import BLOCK_RULES, MODE_AFTER, MODE_INLINE, ListInstance, decode, fifo_replay  # noqa: E402
from gpu_env.queue_features import cluster_features, job_features  # noqa: E402
from gpu_env.scenario import Scenario  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "ppo_extra_candidates.md"
SEEDS = range(20000, 20030)
ARMS = ("shipped", "+ FIFO seed", "+ greedy's 2 orderings", "+ both", "block rules across candidates")
ROTATION = ("lowest", "lowest", "highest", "best_fit")
"""The last arm's block rules: the sampled candidates (2 onwards) take these in turn, the two argmax ones the
lowest; the same 12 candidates, no extra decode."""


def _row(order: list[int], width: int) -> np.ndarray:
    row = np.full(width, -1, dtype=np.int64)
    row[: len(order)] = order
    return row


def objective(
    sc: Scenario, policy: ppo.LoadedPolicy, fifo_seed: bool, orderings: bool, rotate: bool = False
) -> tuple[float, int]:
    """The shipped planner's objective with the extra candidates, and the number of candidates decoded.

    ``rotate``: the sampled candidates take the block rules of :data:`ROTATION` in turn.
    """
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
    rules = None
    if rotate:
        codes = np.array([BLOCK_RULES[r] for r in ROTATION])
        per_candidate = np.full(len(rows), BLOCK_RULES["lowest"], dtype=np.int64)
        per_candidate[2:] = codes[np.arange(len(rows) - 2) % codes.size]
        rules = np.repeat(per_candidate[:, None], inst.k.size, axis=1)
    found = decode(inst, np.array(rows), np.array(row_modes), promote_rounds=ppo.PROMOTE_ROUNDS, seed=seed, rules=rules)
    return max(float(found.objective.max()), float(fifo.objective[0])), len(rows)


def argv_is_default(args: argparse.Namespace) -> bool:
    """Whether the arguments are the defaults (the table's command line then names none)."""
    return tuple(args.seeds) == (SEEDS.start, len(SEEDS)) and args.out == OUT


def main(argv: list[str] | None = None) -> int:
    """Measure and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs=2, type=int, metavar=("FIRST", "COUNT"), default=(SEEDS.start, len(SEEDS)))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    first, count = args.seeds
    seeds = range(first, first + count)
    command = "" if argv_is_default(args) else f" --seeds {first} {count} --out {args.out}"
    policy = ppo.load_policy()
    lines = [
        "# Extra candidates for the learned planner",
        "",
        f"`PYTHONPATH=. .venv/bin/python benchmarks/ppo_extra_candidates.py{command}` (no timing: "
        "machine-independent). "
        f"Policy SHA-256 `{policy.sha256[:12]}...`; {count} fresh instances per family (seeds {first}.."
        f"{first + count - 1}); mean ratio "
        "to greedy's objective.",
        "",
        "| family | " + " | ".join(ARMS) + " |",
        "| --- | " + " | ".join("---:" for _ in ARMS) + " |",
    ]
    totals: dict[str, list[float]] = {arm: [] for arm in ARMS}
    counts: dict[str, int] = {}
    for family in FAMILIES:
        ratios: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for s in seeds:
            sc = generate(family, s)
            base = greedy.solve(sc).objective
            settings = ((0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0), (0, 0, 1))
            for arm, (fifo_seed, orderings, rotate) in zip(ARMS, settings, strict=True):
                value, n = objective(sc, policy, bool(fifo_seed), bool(orderings), bool(rotate))
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
    write_text_atomic(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines[-4:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
