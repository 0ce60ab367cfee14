"""Train the stepwise policy (``ppo-stepwise``): imitation of the optima's orders, then PPO, chosen on validation.

Read top to bottom. Usage::

    .venv/bin/python train_stepwise.py [--iterations 300] [--imitate-epochs 20] [--seed 0] [--device cpu]
        [--run-dir runs/stepwise] [--export agents/policies/stepwise.onnx] [--no-export]
    .venv/bin/tensorboard --logdir runs/stepwise        # the curves

1. **Instances.** Imitation: the 252 instances of the optima cache (``lab/training/data/optima.json.gz``, CP-SAT
   plans at 8-64 GPUs). PPO: those and ``--train-per-family`` fresh draws per family at its own size, seeds
   :data:`TRAIN_SEED` on, and ``--large-per-family`` at ``--large-gpus`` GPUs. Validation: ``--valid-per-family``
   per family at its own size and 1 at ``--large-gpus``, seeds :data:`VALID_SEED` on. Evaluation, reported in the
   card and never used to choose: ``--test-per-family`` per family, seeds :data:`TEST_SEED` on. The benchmarks'
   instances (seeds 20000-21999) are none of these (:func:`check_disjoint`).
2. **Network.** :class:`lab.training.stepwise_training.StepScorer`; it starts as greedy's priority sweep.
3. **Imitation** for ``--imitate-epochs`` epochs (:func:`lab.training.stepwise_training.imitate`).
4. **PPO** for ``--iterations`` (:func:`lab.training.stepwise_training.ppo`): ``--cases`` instances per iteration,
   ``--rollouts`` sampled candidates each (``--multi-start``: each pair forces a first job, POMO's multiple
   starts), advantages against the instance's mean; every ``--validate-every``
   iterations the one-decode plans on the validation instances, as a ratio to greedy's objective. The
   checkpoint kept is the best of those PPO has trained (iteration 0, imitation alone, is reported, not kept).
5. **Temperature** of the planner's sampled candidates: the one of ``--temperatures`` whose 12-candidate plans
   earn most on the validation instances.
6. **Export** to ONNX with its card (:func:`lab.training.stepwise_training.export_stepwise`).

TensorBoard (``--run-dir``): ``imitation/loss``, ``validation/vs_greedy``, ``train/spread`` per validation.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpu_env.generators import FAMILIES, generate  # noqa: E402
from gpu_env.scenario import Scenario  # noqa: E402

POLICY = ROOT / "agents" / "policies" / "stepwise.onnx"
TRAIN_SEED = 70_000
VALID_SEED = 80_000
TEST_SEED = 90_000
BENCHMARK_SEEDS = range(20_000, 22_000)


def draws(seed0: int, per_family: int, gpus: int | None = None) -> list[Scenario]:
    """``per_family`` draws of every family from ``seed0`` on (at its own size, or at ``gpus``)."""
    return [generate(f, seed0 + s, gpus=gpus) for f in sorted(FAMILIES) for s in range(per_family)]


def check_disjoint(*sets: list[Scenario]) -> None:
    """Raise ``SystemExit`` when two sets share a (family, seed, GPUs) or one meets the benchmarks' seeds."""
    seen: dict[tuple[str, int, int], int] = {}
    for i, scenarios in enumerate(sets):
        for sc in scenarios:
            key = (sc.family, sc.seed, sc.gpus)
            if sc.seed in BENCHMARK_SEEDS:
                raise SystemExit(f"train_stepwise: {key} is a benchmark instance")
            if seen.setdefault(key, i) != i:
                raise SystemExit(f"train_stepwise: {key} is in two of the training, validation and test sets")


def sampled_ratio(model: Any, cases: list[Any], temperature: float, samples: int = 12) -> float:
    """Mean objective over greedy's of the planner's ``samples`` candidates at ``temperature`` (promoted, grouped)."""
    from agents import ppo_stepwise as planner
    from lab.training import stepwise_training as learned

    values = []
    for case in cases:
        rows = learned.static_rows(model, case)
        found = planner.decode_candidates(case.item.inst, case.base, rows, model.head(), samples, 0, temperature)
        values.append(float(found.objective.max()) / case.item.scale)
    return float(np.mean(values))


def _shown(path: Path) -> str:
    """A path as the card records it: relative to the repository when inside it (no machine's folders in the card)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    """Train, choose and export the stepwise policy (module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--imitate-epochs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=("cpu",), help="the network is tiny: CPU only")
    parser.add_argument("--train-per-family", type=int, default=60)
    parser.add_argument("--large-per-family", type=int, default=4)
    parser.add_argument("--large-gpus", type=int, default=128)
    parser.add_argument("--valid-per-family", type=int, default=4)
    parser.add_argument("--test-per-family", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=16, help="units of the step head")
    parser.add_argument("--width", type=int, default=32, help="units of the static part's first layer")
    parser.add_argument("--cases", type=int, default=16, help="instances per PPO iteration")
    parser.add_argument("--rollouts", type=int, default=8, help="sampled candidates per instance")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--entropy", type=float, default=0.003)
    parser.add_argument("--validate-every", type=int, default=10)
    parser.add_argument(
        "--multi-start", action="store_true", help="POMO's multiple starts: each pair of rollouts forces a first job"
    )
    parser.add_argument("--temperatures", default="0.5,1,2,4")
    parser.add_argument("--run-dir", type=Path, default=ROOT / "runs" / "stepwise")
    parser.add_argument("--export", type=Path, default=POLICY)
    parser.add_argument("--no-export", action="store_true")
    args = parser.parse_args(argv)

    import torch
    from torch.utils.tensorboard import SummaryWriter

    from lab.training import stepwise_training as learned
    from lab.training.optima import load_optima

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    started = time.perf_counter()
    optima = load_optima()
    train_sc = draws(TRAIN_SEED, args.train_per_family) + draws(TRAIN_SEED, args.large_per_family, args.large_gpus)
    valid_sc = draws(VALID_SEED, args.valid_per_family) + draws(VALID_SEED, 1, args.large_gpus)
    test_sc = draws(TEST_SEED, args.test_per_family)
    check_disjoint(train_sc + [r.scenario() for r in optima], valid_sc, test_sc)
    print(f"train_stepwise: building {len(optima)} + {len(train_sc)} training, {len(valid_sc)} validation, "
          f"{len(test_sc)} test instances", flush=True)  # fmt: skip
    imitation_cases = [
        learned.make_case(r.scenario(), r.placements, r.objective if r.optimal else None) for r in optima
    ]
    train = imitation_cases + [learned.make_case(sc) for sc in train_sc]
    valid = [learned.make_case(sc) for sc in valid_sc]
    test = [learned.make_case(sc) for sc in test_sc]
    writer = SummaryWriter(str(args.run_dir))
    model = learned.StepScorer(hidden=args.hidden, width=args.width)
    initial = learned.validate_ratio(model, valid)
    print(f"train_stepwise: at initialisation (greedy's priority sweep, promoted) {initial:.4f} of greedy", flush=True)
    losses = learned.imitate(model, imitation_cases, args.imitate_epochs, seed=args.seed)
    for i, loss in enumerate(losses):
        writer.add_scalar("imitation/loss", loss, i)
    imitated = learned.validate_ratio(model, valid)
    print(f"train_stepwise: imitation loss {losses[0]:.3f} -> {losses[-1]:.3f}; validation {imitated:.4f}", flush=True)

    def log(record: dict[str, float]) -> None:
        it = int(record["iteration"])
        writer.add_scalar("validation/vs_greedy", record["valid"], it)
        if "spread" in record:
            writer.add_scalar("train/spread", record["spread"], it)
        print(f"train_stepwise: iteration {it}: validation {record['valid']:.4f} ({record['seconds']} s)", flush=True)

    config = learned.PPOConfig(
        iterations=args.iterations,
        cases_per_iteration=args.cases,
        rollouts=args.rollouts,
        lr=args.learning_rate,
        entropy=args.entropy,
        validate_every=args.validate_every,
        multi_start=args.multi_start,
    )
    state, history = learned.ppo(model, train, valid, config, seed=args.seed, log=log, keep_initial=False)
    model.load_state_dict(state)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    torch.save(state, args.run_dir / "kept.pt")  # the kept checkpoint's weights (a training artefact, not shipped)
    kept = max((h for h in history if h["iteration"] > 0), key=lambda h: h["valid"])
    temps = [float(x) for x in args.temperatures.split(",")]
    by_temp = {t: sampled_ratio(model, valid, t) for t in temps}
    temperature = max(by_temp, key=lambda t: by_temp[t])
    one = learned.validate_ratio(model, test)
    many = sampled_ratio(model, test, temperature)
    print(f"train_stepwise: kept iteration {kept['iteration']} ({kept['valid']:.4f}); temperature {temperature} "
          f"({', '.join(f'{t:g}: {v:.4f}' for t, v in by_temp.items())}); test: one decode {one:.4f}, "
          f"12 candidates {many:.4f} of greedy ({time.perf_counter() - started:.0f} s)", flush=True)  # fmt: skip
    writer.close()
    if args.no_export:
        return 0
    card = learned.export_stepwise(
        model,
        args.export,
        temperature,
        {
            "seed": args.seed,
            "config": {k: (_shown(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "history": {"imitation_loss": losses, "initial": initial, "imitated": imitated, "ppo": history},
            "selection": {"iteration": kept["iteration"], "valid": kept["valid"], "temperatures": by_temp},
            "evaluation": {"instances": len(test), "one_decode_vs_greedy": one, "candidates_vs_greedy": many},
            "seconds": round(time.perf_counter() - started, 1),
        },
    )
    print(f"train_stepwise: wrote {args.export} and its card ({card['network']['parameters']} parameters)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
