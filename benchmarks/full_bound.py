"""Full mode's wall time against its time limit, from 32 to 1,024 GPUs (issue 25: the budget is a bound).

    .venv/bin/python benchmarks/full_bound.py                    # a 2 s limit, this checkout
    .venv/bin/python benchmarks/full_bound.py --limit 5 --code DIR  # another checkout (the code before, say)

For mixed-control and scale-64x30 (seed 0) at 32, 128, 512 and 1,024 GPUs, full mode runs with the
hint ``greedy`` and with ``auto``, one call after the other in one process (a thread that an earlier
call left behind still runs: the worst case for the next). It prints one line per call: the wall
seconds of ``full.plan``, the status, the mode, and what was late. No result file: the figures quoted in
docs/exact-mode.md are this script's output.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=2.0, help="full mode's time limit in seconds (default 2)")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout to import (default: this one)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.code))
    from agents import full
    from agents.options import PlanOptions
    from gpu_env.generators import generate

    print(f"limit {args.limit:g} s, code {args.code}")
    for gpus in (32, 128, 512, 1024):
        for family in ("mixed-control", "scale-64x30"):
            scenario = generate(family, 0, gpus=gpus)
            for hint in ("greedy", "auto"):
                started = time.perf_counter()
                plan = full.plan(scenario, PlanOptions(time_limit=args.limit), hint_source=hint)
                wall = time.perf_counter() - started
                late = plan.info.get("hint", {}).get("late", [])
                print(
                    f"{family:14s} {gpus:5d} GPUs {len(scenario.jobs):5d} jobs hint {hint:6s} wall {wall:6.2f} s "
                    f"status {plan.info.get('status')} mode {plan.info.get('mode')} late {late}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
