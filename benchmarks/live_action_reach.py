"""How far the live policy's action space reaches: a clairvoyant chooser of its actions against the planners.

    PYTHONPATH=. .venv/bin/python benchmarks/live_action_reach.py [--days 2] [--seed-base 95000] [--out FILE]

A policy of GpuClusterLive-v0 departs from the base decision (greedy's plan with the fill) one slot at a time:
it holds some start-now jobs or plans the apps with headroom. The **clairvoyant chooser** takes at every slot
the candidate action (train_live.py's :func:`candidate_actions`: the base, each single hold, all holds, each
headroom level) whose rollout on the realized day itself, with the base decision in every later slot, earns
the most (:func:`hindsight_action`, margin 0), and plays on with it. It knows the day's future, so no policy
that sees only the present does better by choosing one slot at a time in this way: it bounds what learning
can win in this action space. Beside it, on the same realized days: rolling greedy, the base decision alone
(the action of all zeros), and the shipped live planner ``anticipate`` (fitted from 8 past days). Each is a
share of the day's hindsight optimum (online_benchmark's :func:`hindsight`: CP-SAT, one worker,
deterministic time 2). Fresh days: seeds from ``--seed-base``, which no training or validation draw has.
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

from agents.rolling.anticipate import LIVE_FORECAST, live_planner  # noqa: E402
from agents.rolling.drawn_history import past_days  # noqa: E402
from agents.rolling.forecast import NoiseModel  # noqa: E402
from agents.rolling.hindsight import benchmark_reference  # noqa: E402
from agents.rolling.live_labels import hindsight_action, play_base  # noqa: E402
from agents.rolling.live_policy import decide_action, view  # noqa: E402
from agents.rolling.runtimes import draw_runtimes  # noqa: E402
from agents.rolling.simulation import LiveDay, realized_day, rolling  # noqa: E402
from gpu_env.generators import FAMILIES, generate  # noqa: E402
from gpu_env.validation import validate  # noqa: E402

SETTINGS = ((0.0, "exact"), (0.3, "trace"))


def clairvoyant(day, actual, runtimes) -> tuple[float, int, int]:
    """The clairvoyant chooser's day: its objective, the slots it departed from the base, the slots."""
    live = LiveDay(day, actual, corrector=LIVE_FORECAST, runtimes=runtimes)
    departed = 0
    while not live.done:
        state, ran = live.state()
        slot = view(state, live.t, ran)
        action = hindsight_action(live, slot, 0.0)
        departed += int(np.any(action != 0))
        live.commit(decide_action(slot, action))
    result = live.result("clairvoyant")
    assert validate(actual, result.executed) == [], "the clairvoyant chooser's day breaks a rule"
    return result.metrics.objective, departed, day.slots


def base_only(day, actual, runtimes) -> float:
    """The base decision at every slot (the action of all zeros)."""
    return play_base(LiveDay(day, actual, corrector=LIVE_FORECAST, runtimes=runtimes))


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write it with ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=2, help="days per family and setting")
    parser.add_argument("--seed-base", type=int, default=95_000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = []
    began = time.perf_counter()
    for sigma, model in SETTINGS:
        for family in FAMILIES:
            for k in range(args.days):
                seed = args.seed_base + k
                day = generate(family, seed)
                runtimes = draw_runtimes(day, model, seed)
                actual = realized_day(day, NoiseModel(sigma).draw(day, seed), runtimes)
                best = benchmark_reference(actual)
                planner = live_planner(
                    "anticipate", history=past_days(family, day.gpus, seed, 8, sigma), day=day, seed=seed
                )
                c, departed, slots = clairvoyant(day, actual, runtimes)
                row = {
                    "sigma": sigma,
                    "model": model,
                    "family": family,
                    "seed": seed,
                    "greedy": rolling(day, "greedy", actual, runtimes=runtimes).metrics.objective / best,
                    "base": base_only(day, actual, runtimes) / best,
                    "anticipate": rolling(day, planner, actual, runtimes=runtimes).metrics.objective / best,
                    "clairvoyant": c / best,
                    "departed": departed / slots,
                }
                rows.append(row)
                print(
                    f"{family} seed {seed} sigma {sigma:g} {model}: greedy {row['greedy']:.3f} base {row['base']:.3f} "
                    f"anticipate {row['anticipate']:.3f} clairvoyant {row['clairvoyant']:.3f} "
                    f"({departed} of {slots} slots departed)",
                    file=sys.stderr,
                    flush=True,
                )
    lines = [
        f"Command: `PYTHONPATH=. .venv/bin/python benchmarks/live_action_reach.py --days {args.days} "
        f"--seed-base {args.seed_base}` ({(time.perf_counter() - began) / 60:.1f} min, one run).",
        "",
        "| σ, runtimes | days | rolling greedy | base decision | anticipate | clairvoyant chooser "
        "| slots it departed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for sigma, model in SETTINGS:
        sel = [r for r in rows if r["sigma"] == sigma and r["model"] == model]
        mean = {
            k: float(np.mean([r[k] for r in sel])) for k in ("greedy", "base", "anticipate", "clairvoyant", "departed")
        }
        lines.append(
            f"| {sigma:g}, {model} | {len(sel)} | {mean['greedy']:.3f} | {mean['base']:.3f} | {mean['anticipate']:.3f} "
            f"| {mean['clairvoyant']:.3f} | {100 * mean['departed']:.1f} % |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        from gpu_env.files import write_text_atomic

        write_text_atomic(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
