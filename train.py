"""Train the learned fast mode: imitate proven optima, then self-label and PPO over a curriculum of sizes, export.

Read top to bottom. Usage::

    .venv/bin/python train.py --config configs/train/default.yaml [--device cpu|cuda|auto] [--no-export]
        [--set FIELD=VALUE ...]   # e.g. --set rl.algorithm=pomo --set run_dir=runs/pomo

Stages (:mod:`lab.training.training` holds the pieces):

1. **Labels.** The proven optima of ``optima`` (CP-SAT at the seed's sizes,
   :mod:`lab.training.optima`) replayed into the list action space, and
   ``small.instances`` fresh draws; every instance's first label is the best
   decode of the optimum's order and greedy's orderings.
2. **Imitation** (pre-training). ``imitation_epochs`` of ListMLE on those labels.
3. **Self-labelling + PPO at the seed's sizes** (``small.rounds``): each round
   draws ``small.samples`` orders per instance from the scores, keeps a draw
   that beats its label, and runs ``rl.epochs`` passes over the stored draws:
   ListMLE on the labels plus PPO's clipped surrogate, the advantages against
   the instance's group of draws (``rl.algorithm: pomo`` takes the former
   single REINFORCE step instead).
4. **Cluster sizes** (``large``): ``large.instances`` draws at 128-1,024 GPUs
   join, and ``large.rounds`` more rounds run over everything.
5. **Selection and evaluation.** After every round the policy plans the
   ``validation`` instances as the planner does; the best round is kept. It
   alone then plans the ``eval`` instances, once. Three sets of seeds apart:
   training's, validation's, evaluation's (``TrainConfig.draws``).
6. **Export** of the selected scorer to ONNX with its card
   (:mod:`lab.training.export`): every round's validation figures
   (``history``), the round chosen (``selection``) and the evaluation
   (``evaluation``).

TensorBoard (``run_dir/tb``): ``validation/*`` per round (ratios to greedy, per
family too), ``eval/*`` of the selected round, ``train/*`` (loss, labels
improved) and ``ppo/*`` (clip fraction, approximate KL, explained variance of
the group-mean baseline, entropy, surrogate) per round. Bad config files give
one line naming the file and field, and exit code 2.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpu_env.files import write_text_atomic
from lab.training.optima import OptimaError
from lab.training.train_config import ConfigError, TrainConfig, as_dict, choose_device, load_config

if TYPE_CHECKING:
    import torch
    from torch.utils.tensorboard import SummaryWriter

    from lab.training.scorer import QueueScorer
    from lab.training.training import Item

SCORED = ("alone_vs_greedy", "shipped_vs_greedy", "large_alone_vs_greedy", "large_shipped_vs_greedy")
"""A round's figures on the validation instances whose sum selects the round exported."""


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class _Run:
    """What the stages of one run share: the scorer, its instances, the clocks and every round's figures.

    Attributes:
        cfg: The run's configuration.
        model: The scorer being trained.
        writer: TensorBoard's writer (``run_dir/tb``).
        items: The training instances and their labels (the cluster sizes join them in stage 4).
        validation: The validation instances at the seed's sizes.
        validation_large: The validation instances at cluster sizes.
        began: ``time.perf_counter()`` at the start of the run.
        cpu_began: ``time.process_time()`` at the start of the run.
        history: Every round's validation record, in order.
        best: The best round so far: its ``score``, and once a round is measured its ``state`` and ``record``.
        decoded: Orders drawn and decoded by the reinforcement rounds so far (a record's ``draws``).
    """

    cfg: TrainConfig
    model: QueueScorer
    writer: SummaryWriter
    items: list[Item]
    validation: list[Item]
    validation_large: list[Item]
    began: float
    cpu_began: float
    history: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] = field(default_factory=lambda: {"score": -np.inf})
    decoded: int = 0


def _optima_items(cfg: TrainConfig) -> list[Item]:
    """Stage 1's first labels: the proven optima of ``cfg.optima`` replayed as orders (none without the file)."""
    from lab.training import training as tr

    items: list[Item] = []
    if cfg.optima:
        from lab.training.optima import load_optima

        optima = Path(cfg.optima)
        if not optima.is_absolute() and not optima.exists():
            optima = Path(__file__).resolve().parent / optima  # the repository's own copy
        records = load_optima(optima)[: cfg.optima_instances]
        for rec in records:
            proven = rec.objective if rec.optimal else None
            items.append(tr.prepare(rec.scenario(), rec.placements, proven))
        _log(f"labels: {len(records)} CP-SAT plans from {cfg.optima} ({sum(r.optimal for r in records)} proven)")
    return items


def _prepared(cfg: TrainConfig, draw: tuple[tuple[int, ...], int, int]) -> list[Item]:
    """The instances of one of ``cfg.draws()``'s draws (sizes, count, seed), each with its first label."""
    from lab.training import training as tr

    return [tr.prepare(s) for s in tr.draw_scenarios(cfg.families, *draw)]


def _measure(run: _Run, held: list[Item], held_large: list[Item], samples: int) -> dict[str, Any]:
    """The policy's figures on ``held`` and ``held_large`` (ratios to greedy; the seed's sizes stand in for none).

    Args:
        run: The run whose scorer plans.
        held: Instances at the seed's sizes.
        held_large: Instances at cluster sizes (may be empty).
        samples: Orders drawn per instance.

    Returns:
        The ratios to greedy, the count of instances below greedy, and the per-family ratios (``per_family``).
    """
    from lab.training import training as tr

    small = tr.evaluate_policy(run.model, held, samples, run.cfg.temperature)
    large = tr.evaluate_policy(run.model, held_large, samples, run.cfg.temperature) if held_large else small
    return {
        "alone_vs_greedy": round(small.alone, 5),
        "shipped_vs_greedy": round(small.shipped, 5),
        "large_alone_vs_greedy": round(large.alone, 5),
        "large_shipped_vs_greedy": round(large.shipped, 5),
        "below_greedy": small.below_greedy + (large.below_greedy if held_large else 0),
        "per_family": {f: [round(a, 5), round(b, 5)] for f, (a, b) in small.per_family.items()},
    }


def _validate(run: _Run, phase: str, step: int) -> None:
    """Measure the round on the validation instances: record it, log it, and keep it if it is the best so far."""
    labels = float(np.mean([it.label_objective / it.scale for it in run.items]))
    figures = _measure(run, run.validation, run.validation_large, run.cfg.validation.samples)
    per_family = figures.pop("per_family")
    record = {"phase": phase, "step": step, "draws": run.decoded, "labels_vs_greedy": round(labels, 5), **figures}
    record["seconds"] = round(time.perf_counter() - run.began, 1)
    record["cpu_seconds"] = round(time.process_time() - run.cpu_began, 1)  # of this process: load-independent
    run.history.append(record)
    for key in ("labels_vs_greedy", *SCORED):
        run.writer.add_scalar(f"validation/{key}", record[key], step)
    for fam, (alone, shipped) in per_family.items():
        run.writer.add_scalar(f"validation/{fam}/alone", alone, step)
        run.writer.add_scalar(f"validation/{fam}/shipped", shipped, step)
    _log(
        f"{phase:>10} {step:4d}  labels {labels:.4f}  validation: alone {record['alone_vs_greedy']:.4f} "
        f"shipped {record['shipped_vs_greedy']:.4f}  large: alone {record['large_alone_vs_greedy']:.4f} "
        f"shipped {record['large_shipped_vs_greedy']:.4f}  ({record['seconds']:.0f} s)"
    )
    score = sum(record[key] for key in SCORED)
    if score > run.best["score"]:
        run.best.update(score=score, state=copy.deepcopy(run.model.state_dict()), record=record)


def _imitate(run: _Run, optimizer: torch.optim.Optimizer) -> None:
    """Stage 2: ``imitation_epochs`` of ListMLE on the first labels, then validation as round 0."""
    from lab.training import training as tr

    cfg = run.cfg
    losses = tr.fit_imitation(run.model, optimizer, run.items, cfg.imitation_epochs, cfg.batch, cfg.seed)
    for epoch, loss in enumerate(losses):
        run.writer.add_scalar("imitation/loss", loss, epoch)
    _validate(run, "imitation", 0)


def _reinforce(run: _Run, optimizer: torch.optim.Optimizer, draws: dict[str, tuple[tuple[int, ...], int, int]]) -> None:
    """Stages 3-4: self-labelling and the reinforcement step (PPO) round by round, then the cluster sizes join.

    Args:
        run: The run; its instances, history and best round grow.
        optimizer: The scorer's optimizer.
        draws: ``run.cfg.draws()`` (``large`` is the cluster sizes' draw).
    """
    from lab.training import training as tr

    cfg, model, items, writer = run.cfg, run.model, run.items, run.writer
    rng = np.random.default_rng(cfg.seed)
    step = 0
    for stage, stage_cfg in (("small", cfg.small), ("large", cfg.large)):
        if stage == "large" and stage_cfg.instances:
            drawn = tr.draw_scenarios(cfg.families, *draws["large"])
            items += [tr.prepare(s) for s in drawn]
            _log(f"large: {len(drawn)} instances at {list(stage_cfg.sizes)} GPUs join")
        for _ in range(stage_cfg.rounds):
            step += 1
            stats = tr.reinforce_round(
                model, optimizer, items, stage_cfg.samples, rng, cfg.temperature, stage_cfg.pg_coef, cfg.batch, cfg.rl
            )
            run.decoded += len(items) * stage_cfg.samples
            if cfg.label_epochs > 1:
                tr.fit_imitation(model, optimizer, items, cfg.label_epochs - 1, cfg.batch, cfg.seed + step)
            writer.add_scalar("train/loss", stats.loss, step)
            writer.add_scalar("train/labels_improved", stats.improved, step)
            writer.add_scalar("train/mean_gain", stats.mean_gain, step)
            if isinstance(stats, tr.PPOStats):
                for key in ("clip_fraction", "approx_kl", "explained_variance", "entropy", "surrogate"):
                    writer.add_scalar(f"ppo/{key}", getattr(stats, key), step)
            _validate(run, stage, step)


def _evaluate(run: _Run, draws: dict[str, tuple[tuple[int, ...], int, int]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Stage 5: the selected round plans the evaluation instances, once; closes the TensorBoard writer.

    Args:
        run: The run; its scorer is left with the selected round's weights.
        draws: ``run.cfg.draws()`` (``eval`` and ``eval_large`` are the evaluation's draws).

    Returns:
        The selection (the round chosen on validation) and the evaluation, as the card records them.
    """
    cfg, best = run.cfg, run.best
    run.model.load_state_dict(best["state"])
    evaluation_items = _prepared(cfg, draws["eval"])
    evaluation_large = _prepared(cfg, draws["eval_large"])
    evaluation = {
        "set": "eval",
        "seed": cfg.eval.seed,
        "instances": [len(evaluation_items), len(evaluation_large)],
        "phase": best["record"]["phase"],
        "step": best["record"]["step"],
        **_measure(run, evaluation_items, evaluation_large, cfg.eval.samples),
    }
    for key in SCORED:
        run.writer.add_scalar(f"eval/{key}", evaluation[key], best["record"]["step"])
    run.writer.close()
    selection = {
        "set": "validation",
        "seed": cfg.validation.seed,
        "instances": [len(run.validation), len(run.validation_large)],
        "criterion": " + ".join(SCORED),
        **best["record"],
    }
    _log(
        f"selected {selection['phase']} round {selection['step']}; evaluation ({len(evaluation_items)} + "
        f"{len(evaluation_large)}): alone {evaluation['alone_vs_greedy']:.4f} shipped "
        f"{evaluation['shipped_vs_greedy']:.4f}  large: alone {evaluation['large_alone_vs_greedy']:.4f} "
        f"shipped {evaluation['large_shipped_vs_greedy']:.4f}"
    )
    return selection, evaluation


def _export(run: _Run, selection: dict[str, Any], evaluation: dict[str, Any]) -> None:
    """Stage 6: the selected scorer to ONNX (``cfg.export``) with its card."""
    from lab.training.export import export_policy

    cfg, best = run.cfg, run.best
    export_policy(
        run.model.cpu(),
        cfg.export,
        temperature=cfg.temperature,
        config=as_dict(cfg),
        seed=cfg.seed,
        history=run.history,
        selection=selection,
        evaluation=evaluation,
    )
    _log(f"exported {cfg.export} (best: {best['record']['phase']} round {best['record']['step']})")


def train(cfg: TrainConfig, device: str = "cpu", export: bool = True) -> dict[str, Any]:
    """Run the stages of the module docstring; returns a summary (history, evaluation, seconds)."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    from lab.training import training as tr
    from lab.training.scorer import QueueScorer

    began, cpu_began = time.perf_counter(), time.process_time()
    tr.seed_everything(cfg.seed)
    run_dir = Path(cfg.run_dir)
    writer = SummaryWriter(str(run_dir / "tb"))

    # 1. Labels: proven optima, then fresh draws at the seed's sizes.
    items = _optima_items(cfg)
    draws = cfg.draws()
    items += _prepared(cfg, draws["small"])
    validation = _prepared(cfg, draws["validation"])
    validation_large = _prepared(cfg, draws["validation_large"])
    took = time.perf_counter() - began
    _log(f"instances: {len(items)} training, {len(validation)} + {len(validation_large)} validation ({took:.0f} s)")

    model = QueueScorer(cfg.hidden, cfg.attention).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    run = _Run(cfg, model, writer, items, validation, validation_large, began, cpu_began)

    _imitate(run, optimizer)  # 2. Imitation of the first labels.
    _reinforce(run, optimizer, draws)  # 3-4. Self-labelling and PPO, then the cluster sizes join.
    selection, evaluation = _evaluate(run, draws)  # 5. The selected round plans the evaluation instances.
    summary = {
        "device": device,
        "history": run.history,
        "best": run.best["record"],
        "selection": selection,
        "evaluation": evaluation,
        "instances": len(items),
        "seconds": round(time.perf_counter() - began, 1),
    }
    write_text_atomic(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    if export:
        _export(run, selection, evaluation)  # 6. Export with the card.
    return summary


def main(argv: list[str] | None = None) -> int:
    """The command line: train with a config; exit 2 with one line on a bad config or optima file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/train/default.yaml", help="training config (YAML)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"), help="where the scorer trains")
    parser.add_argument("--no-export", action="store_true", help="train and report, write no policy file")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="replace a field of the config (dotted for a section's: rl.algorithm=pomo); repeatable",
    )
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.set)
        device = choose_device(args.device)
        train(cfg, device=device, export=not args.no_export)
    except (ConfigError, OptimaError) as exc:
        print(f"train.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
