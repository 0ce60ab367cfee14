"""The live planner's departure rule on synthetic races: false departures where departing gains nothing, and power.

Each race has a base decision and ``--challengers`` challengers scored over the same futures (common random
numbers): every candidate's value in future ``k`` is a common draw ``N(100, 10)`` plus, for a challenger, its own
noise ``N(0, 1)`` and its true gain (the first challenger's gain is ``--gains``, the others' 0). A rule departs
when it takes a challenger; where the true gain is 0, every departure is false. Rules:

- ``fixed``: the old rule: 8 futures, a bar of 2 standard errors (:func:`agents.rolling.race.choose`);
- ``race 8-16``, ``race 8-32``: :func:`agents.rolling.race.race` with its bar (2 standard errors shared among
  the challengers, on Student's t), 8 futures first and up to 16 or 32 where the candidates are close, a
  challenger dropped when its gain plus 1 (or 2) standard errors cannot clear the bar.

Run::

    PYTHONPATH=. .venv/bin/python benchmarks/race_rule.py

Writes ``benchmarks/results/race_rule.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.rolling.race import race  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "race_rule.md"
RULES = {
    "fixed (8 futures, 2 SE)": {"first": 8, "most": 8, "corrected": False},
    "race 8-16, drop at 2 SE": {"first": 8, "most": 16, "corrected": True, "drop": 2.0},
    "race 8-16, drop at 1 SE (shipped)": {"first": 8, "most": 16, "corrected": True, "drop": 1.0},
    "race 8-32, drop at 1 SE": {"first": 8, "most": 32, "corrected": True, "drop": 1.0},
}


def measure(rule: dict[str, object], gain: float, challengers: int, races: int) -> tuple[float, float, float]:
    """(share of races that depart, share that take the challenger with the gain, mean evaluations per race)."""
    most = int(rule["most"])  # type: ignore[call-overload]
    departed = right = scored = 0
    for seed in range(races):
        rng = np.random.default_rng(seed)
        common = rng.normal(100.0, 10.0, most)
        rows = [common] + [common + rng.normal(0.0, 1.0, most) + (gain if i == 0 else 0.0) for i in range(challengers)]
        table = np.vstack(rows)
        result = race(
            lambda c, k, t=table: float(t[c, k]),
            challengers + 1,
            first=int(rule["first"]),  # type: ignore[call-overload]
            most=most,
            min_gain=0.0,
            corrected=bool(rule["corrected"]),
            drop=float(rule.get("drop", 1.0)),  # type: ignore[arg-type]
        )
        departed += result.best != 0
        right += result.best == 1
        scored += result.scored
    return departed / races, right / races, scored / races


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=400, help="races per cell (400)")
    parser.add_argument("--challengers", type=int, default=4, help="challengers per race (4)")
    parser.add_argument("--gains", default="0,0.5,1", help="true gains of the first challenger, in noise SDs")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    gains = [float(x) for x in args.gains.split(",")]
    lines = [
        "# The departure rule on synthetic races",
        "",
        f"- Command: `PYTHONPATH=. .venv/bin/python benchmarks/race_rule.py --races {args.races} "
        f"--challengers {args.challengers} --gains {args.gains}`",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M %Z')}",
        "",
        f"{args.challengers} challengers against the base decision, {args.races} seeded races per cell; values "
        "N(100, 10) common to all candidates in a future, each challenger's own noise N(0, 1); the first "
        "challenger's true gain as given (the others gain 0). Gain 0: every departure is false.",
        "",
        "| rule | true gain (noise SDs) | departs | takes the right one | evaluations per race |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, rule in RULES.items():
        for gain in gains:
            departs, right, scored = measure(rule, gain, args.challengers, args.races)
            lines.append(f"| {name} | {gain:g} | {departs:.2%} | {right:.2%} | {scored:.1f} |")
    text = "\n".join(lines) + "\n"
    write_text_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
