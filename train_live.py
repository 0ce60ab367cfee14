"""Train the live chooser: hindsight labels, DAgger, PPO; chosen on validation days; exported as ONNX with its card.

The chooser (:mod:`lab.live_chooser`) commits one of ``anticipate``'s candidates each cycle, ranked by a
network from what the sampled futures say of each. Read top to bottom. Usage::

    .venv/bin/python train_live.py [--train-days 12] [--valid-days 3] [--dagger-rounds 2] [--ppo-rounds 3]
        [--parallel 2] [--device cpu|cuda|auto] [--export lab/policies/live_chooser.onnx] [--no-export]

1. **Days.** Training days are drawn days of the seven families (seeds ``TRAIN_SEED``.., ``--train-days`` per
   family), validation days other seeds again (``VALID_SEED``..), each at forecast error ``--sigma`` with
   every runtime model of ``--runtimes``; each day's ``anticipate`` is fitted from 8 drawn past days
   (:func:`lab.drawn_history.past_days`), as the live benchmark fits it. The live benchmark's days
   (seeds 70000.. and 98000..) are never seen here.
2. **Imitation** of hindsight labels on the days ``anticipate`` plays (:func:`lab.training.chooser_training.imitate`).
3. **DAgger**: ``--dagger-rounds`` times, the chooser plays the training days, the states it reaches are
   labelled and added, and the network is fitted again on all of it.
4. **PPO**: ``--ppo-rounds`` times, the chooser draws its choices from its softmax on the training days, each
   choice's realized gain over the race's pick is its advantage (:func:`lab.training.chooser_training.ppo_update`).
5. **Selection.** Every stage's network (the imitated one included) plays the validation days at each margin of
   :data:`MARGINS` (the score by which its top candidate must beat the race's pick to be committed); the pair
   with the best mean ratio to ``anticipate`` on the same days is kept, and the card records every pair's
   figures and departure rate.
6. **Export** of the kept network to ONNX with its card (:func:`lab.training.chooser_training.export_onnx`).

Days are played where ``--parallel`` / ``--ray`` say (:mod:`agents.fanout`); progress is printed per stage.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.arguments import add_fanout_options, fanout_backend, int_at_least  # noqa: E402
from agents.fanout import FanoutError, Task, run_tasks  # noqa: E402
from gpu_env.generators import FAMILIES  # noqa: E402
from lab.live_chooser import FEATURES, POLICY  # noqa: E402
from lab.training.chooser_training import ChooserNet, Cycle, NumpyScorer, day_task, export_onnx, imitate, ppo_update  # noqa: E402

TRAIN_SEED = 60000
VALID_SEED = 61000
"""First seed of the training and the validation days (the live benchmark plays 70000.. and 98000..)."""


MARGINS = (0.0, 1.0, 2.0, 4.0)
"""The margins over the race's pick (in score) each stage's network is validated with (:class:`ChooserPlanner`)."""


@dataclass
class Stage:
    """One stage's network, a margin, and what they scored on the validation days."""

    name: str
    scorer: NumpyScorer
    margin: float = 0.0
    ratio: float = 0.0
    worst: float = 0.0
    departures: float = 0.0
    days: int = 0


def day_specs(first: int, days: int, sigma: float, runtimes: Sequence[str]) -> list[tuple[str, int, float, str]]:
    """(family, seed, sigma, runtime model) of every day of a set."""
    return [(f, first + k, sigma, r) for f in FAMILIES for k in range(days) for r in runtimes]


def play(
    specs: Sequence[tuple[str, int, float, str]],
    mode: str,
    scorer: NumpyScorer | None,
    backend: Any,
    *,
    label: bool = False,
    draw_seed: int = 0,
    margin: float = 0.0,
) -> list[dict[str, Any]]:
    """Each day played by ``mode`` where the backend runs it: objective, departures and (labelled) cycles."""
    params = {
        "mode": mode,
        "label": label,
        "draw_seed": draw_seed,
        "margin": margin,
        "scorer": scorer.to_dict() if scorer else None,
    }
    tasks = [
        Task(f"{f}-{s}", "live-chooser", s, params={"family": f, "sigma": sigma, "runtime": r, **params})
        for f, s, sigma, r in specs
    ]
    run = run_tasks(tasks, backend, function=day_task)
    if not run.ok:
        raise RuntimeError(f"{len(run.failures)} days failed: {run.failures[0]}")
    return [r.values for r in run.results]


def cycles_of(rows: Sequence[dict[str, Any]]) -> list[Cycle]:
    """The labelled cycles of played days."""
    return [Cycle.from_dict(c) for row in rows for c in row["cycles"]]


def validate_stage(stage: Stage, specs: Sequence[Any], anticipate: np.ndarray, backend: Any) -> None:
    """The stage's network plays the validation days at its margin; its ratio to ``anticipate``, and departures."""
    rows = play(specs, "argmax", stage.scorer, backend, margin=stage.margin)
    ratio = np.array([r["objective"] for r in rows]) / np.maximum(anticipate, 1e-9)
    cycles = sum(len(r["cycles"]) for r in rows)
    stage.ratio, stage.worst = float(ratio.mean()), float(ratio.min())
    stage.departures = sum(r["departures"] for r in rows) / max(cycles, 1)
    stage.days = len(rows)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-days", type=int_at_least(1), default=12, help="training days per family")
    parser.add_argument("--valid-days", type=int_at_least(1), default=3, help="validation days per family")
    parser.add_argument("--sigma", type=float, default=0.3, help="forecast error of every day")
    parser.add_argument("--runtimes", nargs="+", default=["exact", "trace"], choices=["exact", "trace"])
    parser.add_argument("--dagger-rounds", type=int_at_least(0), default=2)
    parser.add_argument("--ppo-rounds", type=int_at_least(0), default=3)
    parser.add_argument("--tie", type=float, default=0.002, help="share a label must gain over the race's pick")
    parser.add_argument("--hidden", type=int_at_least(1), default=64)
    parser.add_argument("--epochs", type=int_at_least(1), default=60, help="imitation epochs per fit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (cuda where there is one)")
    parser.add_argument("--export", type=Path, default=POLICY, help="the ONNX file (its card beside it)")
    parser.add_argument("--no-export", action="store_true", help="train and report, write no policy")
    add_fanout_options(parser)
    return parser.parse_args(argv)


def shown(path: Path) -> str:
    """A path as a card records it: relative to the repository where it lies inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def device_of(name: str) -> str:
    """The torch device: ``auto`` is cuda where there is one."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("train_live.py: --device cuda: no CUDA device here")
    return name


def main(argv: Sequence[str] | None = None) -> int:
    """Train, select and export the chooser (module docstring); 0 on success, 2 on bad arguments."""
    args = parse(argv)
    try:
        backend = fanout_backend(args)
    except FanoutError as exc:
        print(f"train_live.py: {exc}", file=sys.stderr)
        return 2
    device = device_of(args.device)
    started = time.time()

    def say(text: str) -> None:
        print(f"[{time.time() - started:6.0f} s] {text}", flush=True)

    train = day_specs(TRAIN_SEED, args.train_days, args.sigma, args.runtimes)
    valid = day_specs(VALID_SEED, args.valid_days, args.sigma, args.runtimes)
    anticipate = np.array([r["objective"] for r in play(valid, "race", None, backend)])
    base = np.array([r["objective"] for r in play(valid, "base", None, backend)])
    say(f"validation: {len(valid)} days; the base decision earns {np.mean(base / anticipate):.4f} of anticipate")
    data = cycles_of(play(train, "race", None, backend, label=True))
    say(f"labelled {len(data)} cycles of {len(train)} training days played by anticipate")
    net = ChooserNet.for_cycles(data, args.hidden, args.seed, device)
    hits = imitate(net, data, tie=args.tie, epochs=args.epochs, seed=args.seed)
    stages = [Stage("imitation", net.scorer())]
    say(f"imitation: the label ranked first on {hits:.1%} of the training cycles")
    for k in range(args.dagger_rounds):
        data += cycles_of(play(train, "argmax", net.scorer(), backend, label=True))
        hits = imitate(net, data, tie=args.tie, epochs=max(1, args.epochs // 2), seed=args.seed + k + 1)
        stages.append(Stage(f"dagger {k + 1}", net.scorer()))
        say(f"DAgger round {k + 1}: {len(data)} cycles; the label ranked first on {hits:.1%}")
    for k in range(args.ppo_rounds):
        drawn = cycles_of(play(train, "sample", net.scorer(), backend, label=True, draw_seed=k + 1))
        info = ppo_update(net, drawn, seed=args.seed + k)
        stages.append(Stage(f"ppo {k + 1}", net.scorer()))
        say(
            f"PPO round {k + 1}: {len(drawn)} drawn choices, {info['departures']:.1%} not the race's pick, "
            f"mean realized gain over it {info['mean_gain']:+.4f}"
        )
    stages = [Stage(s.name, s.scorer, margin) for s in stages for margin in MARGINS]
    for stage in stages:
        validate_stage(stage, valid, anticipate, backend)
        say(
            f"{stage.name}, margin {stage.margin:g}: {stage.ratio:.4f} of anticipate (worst day {stage.worst:.3f}), "
            f"departs {stage.departures:.1%}"
        )
    best = max(stages, key=lambda s: s.ratio)
    say(f"kept: {best.name}, margin {best.margin:g}")
    card = {
        "kept": best.name,
        "margin": best.margin,
        "validation": [vars(s) | {"scorer": None} for s in stages],
        "base_on_validation": float(np.mean(base / anticipate)),
        "settings": {k: (shown(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "train_seeds": [TRAIN_SEED, TRAIN_SEED + args.train_days - 1],
        "valid_seeds": [VALID_SEED, VALID_SEED + args.valid_days - 1],
        "labelled_cycles": len(data),
        "device": device,
        "machine": platform.platform(),
        "seconds": round(time.time() - started, 1),
        "features": list(FEATURES),
    }
    if not args.no_export:
        kept = ChooserNet(best.scorer.mean, best.scorer.scale, args.hidden, args.seed)
        load_weights(kept, best.scorer)
        export_onnx(kept, args.export, card)
        say(f"wrote {args.export} and its card")
    else:
        print(json.dumps(card, indent=2))
    return 0


def load_weights(net: ChooserNet, scorer: NumpyScorer) -> None:
    """Set a torch network's weights from a numpy scorer of the same shape."""
    import torch

    linear = [m for m in net.module if hasattr(m, "weight")]
    with torch.no_grad():
        for m, (w, b) in zip(linear, scorer.layers, strict=True):
            m.weight.copy_(torch.as_tensor(w.T, dtype=torch.float32))
            m.bias.copy_(torch.as_tensor(b, dtype=torch.float32))


if __name__ == "__main__":
    raise SystemExit(main())
