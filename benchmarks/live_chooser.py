"""Does a chooser learned from hindsight labels pick the live planner's candidates better than the expectation rule?

An experiment (issue "The learned live planner reads what the futures say"; :mod:`agents.learned.chooser`):

1. **Labels.** Training days (``--train-days`` per family, seeds 60000.., forecast error ``--sigma``, exact
   runtimes, 8 past days each) are played by ``anticipate``. At every cycle with two or more candidates, each
   candidate's values over the first 8 futures give its features, and each candidate is committed in a copy
   of the day whose rest is played by the base decision (greedy with the fill): the realized objectives label
   the cycle.
2. **Imitation.** One small MLP scores each candidate; a softmax over the cycle's candidates is fitted to the
   best realized candidate by cross-entropy (:func:`agents.learned.chooser.fit`).
3. **Validation.** Days of other seeds (``--valid-days`` per family, seeds 61000..) are played by the base
   decision alone, by ``anticipate`` and by the learned chooser (which commits its top-scored candidate every
   cycle, over the same 8 futures), each on the same realized day. The table gives each planner's objective
   against ``anticipate``'s, day by day, and how often each departs from the base decision.

Run::

    PYTHONPATH=. .venv/bin/python benchmarks/live_chooser.py --train-days 4 --valid-days 2

Writes ``benchmarks/results/live_chooser.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.learned.chooser import Chooser, LabelledCycle, as_decision, candidate_features, fit, label_cycle  # noqa: E402
from agents.registry import run_scheduler  # noqa: E402
from agents.rolling.allocator import ClusterState, Decision  # noqa: E402
from agents.rolling.anticipate import AnticipatingPlanner, live_planner  # noqa: E402
from agents.rolling.drawn_history import past_days  # noqa: E402
from agents.rolling.forecast import NoiseModel  # noqa: E402
from agents.rolling.runtimes import draw_runtimes  # noqa: E402
from agents.rolling.simulation import LiveDay, realized_day  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import FAMILIES, generate  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "live_chooser.md"
FUTURES = 8


@dataclass
class Cycle:
    """What a cycle weighs: the candidates, their decisions and their values over the futures."""

    labels: tuple[str, ...]
    decisions: list[Decision]
    values: np.ndarray
    features: np.ndarray


def weigh(planner: AnticipatingPlanner, state: ClusterState, now: int, ran: dict[str, int], day_slots: int) -> Cycle:
    """The planner's candidates for the state, each scored in the same first futures."""
    scenario, expired = state.to_scenario()
    plain = run_scheduler(planner.base, scenario)
    filled = planner._filled(scenario, plain, state, now)
    demand = planner._demand_inputs(state, now, scenario)
    if not planner.anticipates and demand is None:
        candidates = [planner.candidates(scenario, state, now, plain, filled, None, None, ran)[0]]
    else:
        candidates = planner.candidates(scenario, state, now, plain, filled, demand, None, ran)
    decisions = [as_decision(scenario, c.plan, expired) for c in candidates]
    labels = tuple(c.label for c in candidates)
    if len(candidates) < 2:
        return Cycle(labels, decisions, np.zeros((1, FUTURES)), np.zeros((1, 0)))
    futures = [planner._future(scenario, now, ran, demand, k) for k in range(FUTURES)]
    values = np.array([[planner.value(f, c, None) for f in futures] for c in candidates])
    return Cycle(labels, decisions, values, candidate_features(values, labels, state, now, day_slots))


def base_decider(planner: AnticipatingPlanner) -> Any:
    """The base decision (greedy with the fill) of a state: the planner with nothing to sample."""
    plain = AnticipatingPlanner(base=planner.base, forecaster=planner.forecaster)
    return lambda state, now: plain.decide(state, now)


def setup(family: str, seed: int, sigma: float) -> tuple[Any, Any, dict[str, int], AnticipatingPlanner]:
    day = generate(family, seed)
    runtimes = draw_runtimes(day, "exact", seed)
    realized = realized_day(day, NoiseModel(sigma).draw(day, seed), runtimes)
    planner = live_planner(history=past_days(family, day.gpus, seed, 8, sigma), day=day, seed=seed)
    return day, realized, runtimes, planner


def label_day(family: str, seed: int, sigma: float) -> list[LabelledCycle]:
    """Every labelled cycle of one training day played by ``anticipate``."""
    day, realized, runtimes, planner = setup(family, seed, sigma)
    live = LiveDay(day, realized, corrector=planner.forecaster, runtimes=runtimes)
    base = base_decider(planner)
    out = []
    while not live.done:
        if not live.replans:
            live.commit(None)
            continue
        state, ran = live.state()
        cycle = weigh(planner, state, live.t, ran, day.slots)
        if len(cycle.decisions) > 1:
            realized_values = label_cycle(live, cycle.decisions, base)
            out.append(LabelledCycle(cycle.features, realized_values, cycle.labels))
        live.commit(planner.decide(state, live.t, ran))
    return out


def play(family: str, seed: int, sigma: float, how: str, chooser: Chooser | None) -> tuple[float, int, int]:
    """One validation day played by ``how`` (base, anticipate, chooser): objective, departures, cycles."""
    day, realized, runtimes, planner = setup(family, seed, sigma)
    live = LiveDay(day, realized, corrector=planner.forecaster, runtimes=runtimes)
    base = base_decider(planner)
    departures = cycles = 0
    while not live.done:
        if not live.replans:
            live.commit(None)
            continue
        state, ran = live.state()
        cycles += 1
        if how == "base":
            decision = base(state, live.t)
        elif how == "anticipate":
            decision = planner.decide(state, live.t, ran)
            departures += bool(decision.chosen)
        else:
            cycle = weigh(planner, state, live.t, ran, day.slots)
            pick = chooser.choose(cycle.features) if chooser is not None and len(cycle.decisions) > 1 else 0
            decision = cycle.decisions[pick]
            departures += pick != 0
        live.commit(decision)
    return live.result(how).metrics.objective, departures, cycles


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-days", type=int, default=4)
    parser.add_argument("--valid-days", type=int, default=2)
    parser.add_argument("--sigma", type=float, default=0.3)
    parser.add_argument("--tie", type=float, default=0.002, help="share of the base's value a label must gain")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    started = time.time()
    cycles: list[LabelledCycle] = []
    for family in FAMILIES:
        for k in range(args.train_days):
            cycles += label_day(family, 60000 + k, args.sigma)
        print(f"labelled {family}: {len(cycles)} cycles ({time.time() - started:.0f} s)", flush=True)
    targets = [c.target(args.tie) for c in cycles]
    chooser = fit(cycles, tie=args.tie)
    train_hits = np.mean([chooser.choose(c.features) == t for c, t in zip(cycles, targets, strict=True)])
    rows = []
    for family in FAMILIES:
        for k in range(args.valid_days):
            seed = 61000 + k
            result = {how: play(family, seed, args.sigma, how, chooser) for how in ("base", "anticipate", "chooser")}
            rows.append((family, seed, result))
            print(f"{family} {seed}: " + ", ".join(f"{h} {v[0]:.1f}" for h, v in result.items()), flush=True)
    anticipate = np.array([r[2]["anticipate"][0] for r in rows])
    lines = [
        "# A chooser learned from hindsight labels, against the expectation rule",
        "",
        f"- Command: `PYTHONPATH=. .venv/bin/python benchmarks/live_chooser.py --train-days {args.train_days} "
        f"--valid-days {args.valid_days} --sigma {args.sigma:g} --tie {args.tie:g}`",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M %Z')}; {time.time() - started:.0f} s",
        "",
        f"Training: {args.train_days} days per family (seeds 60000..), forecast error {args.sigma:g}, exact runtimes, "
        f"{len(cycles)} labelled cycles; the label is the base decision in "
        f"{np.mean([t == 0 for t in targets]):.1%} of them; the fitted chooser agrees with the label on "
        f"{train_hits:.1%} of the training cycles.",
        "",
        f"Validation: {args.valid_days} days per family (seeds 61000..), each played by every planner on the same "
        "realized day. Objective as a share of `anticipate`'s on the same day; departures: cycles whose decision "
        "is not the base decision.",
        "",
        "| planner | mean share of anticipate | days > 0.02 below | days > 0.02 above | departures / cycles |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for how in ("base", "anticipate", "chooser"):
        values = np.array([r[2][how][0] for r in rows])
        share = values / np.maximum(anticipate, 1e-9)
        dep = sum(r[2][how][1] for r in rows)
        cyc = sum(r[2][how][2] for r in rows)
        lines.append(
            f"| {how} | {share.mean():.4f} | {(share < 0.98).sum()} | {(share > 1.02).sum()} | {dep} / {cyc} |"
        )
    text = "\n".join(lines) + "\n"
    write_text_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
