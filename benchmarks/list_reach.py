"""How many proven optima the list action space reaches: each optimum replayed as an order and decoded.

    PYTHONPATH=. .venv/bin/python benchmarks/list_reach.py     # writes benchmarks/results/list_reach.md

Each plan CP-SAT proved optimal in ``agents/learned/data/optima.json.gz`` becomes a job order (its placed jobs
by start, then first GPU; the others after them by value: :func:`agents.learned.training.order_from_plan`), which
:func:`gpu_env.listsched.decode` places in each trade mode. "Reached" means the best of the three modes equals the
optimum (to 1e-6). Beside it, greedy's four orderings decoded the same way (the best of the eight). No time is
measured: the numbers are the same on any machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.learned.optima import DEFAULT_PATH, load_optima  # noqa: E402
from agents.learned.training import greedy_orders, order_from_plan  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.listsched import MODE_AFTER, MODE_INLINE, MODE_OFF, ListInstance, decode  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "list_reach.md"


def main() -> int:
    """Measure and write the table."""
    rows: dict[str, list[tuple[bool, float, float]]] = {}
    for rec in load_optima(DEFAULT_PATH):
        if not rec.optimal:
            continue
        sc = rec.scenario()
        inst = ListInstance.build(sc)
        order = order_from_plan(inst, rec.placements)
        replay = decode(inst, np.array([order] * 3), np.array([MODE_OFF, MODE_INLINE, MODE_AFTER]))
        greedy = [np.asarray(o, dtype=np.int64) for o in greedy_orders(sc)]
        modes = np.array([m for _ in greedy for m in (MODE_INLINE, MODE_AFTER)])
        heuristic = decode(inst, np.array([o for o in greedy for _ in (0, 1)]), modes)
        ratio = float(replay.objective.max()) / rec.objective
        rows.setdefault(sc.family or sc.name, []).append(
            (ratio >= 1 - 1e-6, ratio, float(heuristic.objective.max()) / rec.objective)
        )
    lines = [
        "# Proven optima reached by the list action space",
        "",
        "`PYTHONPATH=. .venv/bin/python benchmarks/list_reach.py` (no timing: machine-independent).",
        "",
        "| family | proven optima | reached exactly | optimum's order, of optimum | greedy's orderings, of optimum |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    everything = []
    for family, values in rows.items():
        v = np.array(values, dtype=np.float64)
        everything.append(v)
        lines.append(f"| {family} | {len(v)} | {v[:, 0].mean():.1%} | {v[:, 1].mean():.4f} | {v[:, 2].mean():.4f} |")
    v = np.concatenate(everything)
    lines.append(f"| **all** | {len(v)} | {v[:, 0].mean():.1%} | {v[:, 1].mean():.4f} | {v[:, 2].mean():.4f} |")
    write_text_atomic(OUT, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
