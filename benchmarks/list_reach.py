"""How many proven optima the list action space reaches: each optimum replayed as an order and decoded.

    PYTHONPATH=. .venv/bin/python benchmarks/list_reach.py     # writes benchmarks/results/list_reach.md

Each plan CP-SAT proved optimal in ``agents/learned/data/optima.json.gz`` becomes a job order (its placed jobs
by start, then first GPU; the others after them by value: :func:`agents.learned.training.order_from_plan`), which
:func:`gpu_env.listsched.decode` places in each trade mode. "Reached" means the best of the three modes equals the
optimum (to 1e-6). Beside it:

* the same order decoded with each job's **preferred block** set to the optimum's (``decode(..., prefer=...)``):
  the list space extended by a block choice per job, with the choice an oracle's;
* the same with coarser choices a policy could output: a **block rule** per job (lowest, best-fit, node-fit or
  highest: the first that gives the optimum's block, :func:`gpu_env.listsched.rules_from_plan`), and a **position**
  per job on a grid of L levels over ``0..G-k`` (the optimum's first GPU rounded to the nearest level; the decoder
  takes the allowed free block nearest it) for L = 2, 4 and 16;
* greedy's four orderings decoded the same way (the best of the eight);
* where the plain replay misses, the first job (in the order) whose placement differs from the optimum's, by kind.

No time is measured: the numbers are the same on any machine.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.learned.optima import DEFAULT_PATH, load_optima  # noqa: E402
from agents.learned.training import greedy_orders, order_from_plan  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.listsched import (  # noqa: E402
    MODE_AFTER,
    MODE_INLINE,
    MODE_OFF,
    Decoded,
    ListInstance,
    decode,
    rules_from_plan,
)

OUT = ROOT / "benchmarks" / "results" / "list_reach.md"
MODES = np.array([MODE_OFF, MODE_INLINE, MODE_AFTER])
TOL = 1e-6


def first_difference(order: np.ndarray, decoded: Decoded, row: int, optimum: dict[int, tuple[int, int]]) -> str:
    """The kind of the first job, in ``order``, that a decoded plan places otherwise than the optimum."""
    for j in map(int, order):
        got = (int(decoded.start[row, j]), int(decoded.first[row, j]))
        placed = got[0] >= 0
        if j not in optimum and not placed:
            continue
        if j not in optimum:
            return "placed a job the optimum leaves out"
        if not placed:
            return "left out a job the optimum places"
        (t, a), (tg, ag) = optimum[j], got
        if (t, a) == (tg, ag):
            continue
        if t == tg:
            return "same start, another block"
        return "an earlier start" if tg < t else "a later start"
    return "the same placements (the real-time curves differ)"


LEVELS = (2, 4, 16)


def quantized(inst: ListInstance, optimum: dict[int, tuple[int, int]], levels: int) -> np.ndarray:
    """Each placed job's first GPU rounded to the nearest of ``levels`` evenly spaced positions over 0..G-k."""
    prefer = np.full(inst.k.size, -1, dtype=np.int64)
    for j, (_, a) in optimum.items():
        span = int(inst.gpus - inst.k[j])
        prefer[j] = round(round(a / span * (levels - 1)) / (levels - 1) * span) if span > 0 else 0
    return prefer


def main() -> int:
    """Measure and write the tables."""
    rows: dict[str, list[tuple[float, ...]]] = {}
    kinds: Counter[str] = Counter()
    for rec in load_optima(DEFAULT_PATH):
        if not rec.optimal:
            continue
        sc = rec.scenario()
        inst = ListInstance.build(sc)
        order = order_from_plan(inst, rec.placements)
        optimum = {int(j): (int(t), int(a)) for j, t, a in np.asarray(rec.placements, dtype=np.int64).reshape(-1, 3)}
        prefer = np.full(inst.k.size, -1, dtype=np.int64)
        for j, (_, a) in optimum.items():
            prefer[j] = a
        orders = np.array([order] * MODES.size)
        replay = decode(inst, orders, MODES)
        chosen = decode(inst, orders, MODES, prefer=prefer)
        labels = rules_from_plan(inst, order, rec.placements)
        by_rule = decode(inst, orders, MODES, rules=np.array([labels] * MODES.size))
        by_level = [decode(inst, orders, MODES, prefer=quantized(inst, optimum, q)) for q in LEVELS]
        greedy = [np.asarray(o, dtype=np.int64) for o in greedy_orders(sc)]
        modes = np.array([m for _ in greedy for m in (MODE_INLINE, MODE_AFTER)])
        heuristic = decode(inst, np.array([o for o in greedy for _ in (0, 1)]), modes)
        ratio = float(replay.objective.max()) / rec.objective
        with_blocks = float(chosen.objective.max()) / rec.objective
        if ratio < 1 - TOL:
            kinds[first_difference(order, replay, int(np.argmax(replay.objective)), optimum)] += 1
        rows.setdefault(sc.family or sc.name, []).append(
            (
                ratio >= 1 - TOL,
                ratio,
                with_blocks >= 1 - TOL,
                with_blocks,
                float(heuristic.objective.max()) / rec.objective,
                float(by_rule.objective.max()) / rec.objective >= 1 - TOL,
                *(float(d.objective.max()) / rec.objective >= 1 - TOL for d in by_level),
            )
        )
    lines = [
        "# Proven optima reached by the list action space",
        "",
        "`PYTHONPATH=. .venv/bin/python benchmarks/list_reach.py` (no timing: machine-independent).",
        "",
        "'Blocks chosen': the same order with each job's preferred block set to the optimum's (`decode(..., "
        "prefer=...)`), the list space extended by a block choice per job. 'Rules': a block rule per job (lowest, "
        "best-fit, node-fit, highest), the first that gives the optimum's block. 'L positions': the optimum's first "
        "GPU rounded to the nearest of L levels over 0..G-k, the decoder taking the allowed free block nearest it. "
        "Every choice is an oracle's (read from the optimum).",
        "",
        "| family | proven optima | reached exactly | optimum's order, of optimum | reached, blocks chosen "
        "| blocks chosen, of optimum | reached, rules | "
        + " | ".join(f"reached, {q} positions" for q in LEVELS)
        + " | greedy's orderings, of optimum |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in LEVELS) + " | ---: |",
    ]

    def row(name: str, v: np.ndarray) -> str:
        levels = " | ".join(f"{v[:, 6 + i].mean():.1%}" for i in range(len(LEVELS)))
        return (
            f"| {name} | {len(v)} | {v[:, 0].mean():.1%} | {v[:, 1].mean():.4f} | {v[:, 2].mean():.1%} "
            f"| {v[:, 3].mean():.4f} | {v[:, 5].mean():.1%} | {levels} | {v[:, 4].mean():.4f} |"
        )

    everything = []
    for family, values in rows.items():
        v = np.array(values, dtype=np.float64)
        everything.append(v)
        lines.append(row(family, v))
    lines.append(row("**all**", np.concatenate(everything)))
    lines += [
        "",
        "Where the plain replay misses, the first job (in the order) that it places otherwise than the optimum:",
        "",
        "| the decoder chose | optima |",
        "| --- | ---: |",
    ]
    lines += [f"| {kind} | {n} |" for kind, n in kinds.most_common()]
    write_text_atomic(OUT, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
