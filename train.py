"""Train the learned fast mode: imitate proven optima, self-label and POMO over a curriculum of sizes, export.

Read top to bottom. Usage::

    .venv/bin/python train.py --config configs/train/default.yaml [--device cpu|cuda|auto] [--no-export]

Stages (:mod:`agents.learned.training` holds the pieces):

1. **Labels.** The proven optima of ``optima`` (CP-SAT at the seed's sizes,
   :mod:`agents.learned.optima`) replayed into the list action space, and
   ``small.instances`` fresh draws; every instance's first label is the best
   decode of the optimum's order and greedy's orderings.
2. **Imitation.** ``imitation_epochs`` of ListMLE on those labels.
3. **Self-labelling + POMO at the seed's sizes** (``small.rounds``): each round
   draws ``small.samples`` orders per instance from the scores, keeps a draw
   that beats its label, and steps on ListMLE plus the policy gradient with the
   draws' mean as baseline.
4. **Cluster sizes** (``large``): ``large.instances`` draws at 128-1,024 GPUs
   join, and ``large.rounds`` more rounds run over everything.
5. **Export** of the best scorer (by the held-out evaluation after each round)
   to ONNX with its card (:mod:`agents.learned.export`).

After every round the policy plans the held-out instances of ``eval`` (seeds
apart from training) as the planner does; the ratios to greedy go to
TensorBoard (``run_dir/tb``: ``eval/alone``, ``eval/shipped``, per family) and to
the card's ``history``. Bad config files give one line naming the file and
field, and exit code 2.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from agents.learned.config import ConfigError, TrainConfig, as_dict, choose_device, load_config
from agents.learned.optima import OptimaError
from gpu_env.files import write_text_atomic


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def train(cfg: TrainConfig, device: str = "cpu", export: bool = True) -> dict[str, Any]:
    """Run the stages of the module docstring; returns a summary (history, evaluation, seconds)."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    from agents.learned import training as tr
    from agents.learned.export import export_policy
    from agents.learned.scorer import QueueScorer

    began = time.perf_counter()
    tr.seed_everything(cfg.seed)
    run_dir = Path(cfg.run_dir)
    writer = SummaryWriter(str(run_dir / "tb"))

    # 1. Labels: proven optima, then fresh draws at the seed's sizes.
    items: list[tr.Item] = []
    if cfg.optima:
        from agents.learned.optima import load_optima

        optima = Path(cfg.optima)
        if not optima.is_absolute() and not optima.exists():
            optima = Path(__file__).resolve().parent / optima  # the repository's own copy
        records = load_optima(optima)[: cfg.optima_instances]
        for rec in records:
            proven = rec.objective if rec.optimal else None
            items.append(tr.prepare(rec.scenario(), rec.placements, proven))
        _log(f"labels: {len(records)} CP-SAT plans from {cfg.optima} ({sum(r.optimal for r in records)} proven)")
    draws = cfg.draws()
    items += [tr.prepare(s) for s in tr.draw_scenarios(cfg.families, *draws["small"])]
    held = [tr.prepare(s) for s in tr.draw_scenarios(cfg.families, *draws["eval"])]
    held_large = [tr.prepare(s) for s in tr.draw_scenarios(cfg.families, *draws["eval_large"])]
    took = time.perf_counter() - began
    _log(f"instances: {len(items)} training, {len(held)} + {len(held_large)} held out ({took:.0f} s)")

    model = QueueScorer(cfg.hidden, cfg.attention).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    history: list[dict[str, Any]] = []
    best: dict[str, Any] = {"score": -np.inf}

    def evaluate(phase: str, step: int) -> None:
        small = tr.evaluate_policy(model, held, cfg.eval.samples, cfg.temperature)
        large = tr.evaluate_policy(model, held_large, cfg.eval.samples, cfg.temperature) if held_large else small
        labels = float(np.mean([it.label_objective / it.scale for it in items]))
        record = {
            "phase": phase,
            "step": step,
            "labels_vs_greedy": round(labels, 5),
            "alone_vs_greedy": round(small.alone, 5),
            "shipped_vs_greedy": round(small.shipped, 5),
            "large_alone_vs_greedy": round(large.alone, 5),
            "large_shipped_vs_greedy": round(large.shipped, 5),
            "below_greedy": small.below_greedy + (large.below_greedy if held_large else 0),
            "seconds": round(time.perf_counter() - began, 1),
        }
        history.append(record)
        for key in (
            "labels_vs_greedy",
            "alone_vs_greedy",
            "shipped_vs_greedy",
            "large_alone_vs_greedy",
            "large_shipped_vs_greedy",
        ):
            writer.add_scalar(f"eval/{key}", record[key], step)
        for fam, (alone, shipped) in small.per_family.items():
            writer.add_scalar(f"eval/{fam}/alone", alone, step)
            writer.add_scalar(f"eval/{fam}/shipped", shipped, step)
        _log(
            f"{phase:>10} {step:4d}  labels {labels:.4f}  held out: alone {small.alone:.4f} shipped {small.shipped:.4f}"
            f"  large: alone {large.alone:.4f} shipped {large.shipped:.4f}  ({record['seconds']:.0f} s)"
        )
        score = small.alone + small.shipped + large.alone + large.shipped
        if score > best["score"]:
            best.update(score=score, state=copy.deepcopy(model.state_dict()), record=record)

    # 2. Imitation of the first labels.
    losses = tr.fit_imitation(model, optimizer, items, cfg.imitation_epochs, cfg.batch, cfg.seed)
    for epoch, loss in enumerate(losses):
        writer.add_scalar("imitation/loss", loss, epoch)
    step = 0
    evaluate("imitation", step)

    # 3-4. Self-labelling and POMO, then the cluster sizes join.
    rng = np.random.default_rng(cfg.seed)
    for stage, stage_cfg in (("small", cfg.small), ("large", cfg.large)):
        if stage == "large" and stage_cfg.instances:
            drawn = tr.draw_scenarios(cfg.families, *draws["large"])
            items += [tr.prepare(s) for s in drawn]
            _log(f"large: {len(drawn)} instances at {list(stage_cfg.sizes)} GPUs join")
        for _ in range(stage_cfg.rounds):
            step += 1
            stats = tr.self_label_round(
                model, optimizer, items, stage_cfg.samples, rng, cfg.temperature, stage_cfg.pg_coef, cfg.batch
            )
            if cfg.label_epochs > 1:
                tr.fit_imitation(model, optimizer, items, cfg.label_epochs - 1, cfg.batch, cfg.seed + step)
            writer.add_scalar("train/loss", stats.loss, step)
            writer.add_scalar("train/labels_improved", stats.improved, step)
            evaluate(stage, step)
    writer.close()

    model.load_state_dict(best["state"])
    summary = {
        "device": device,
        "history": history,
        "best": best["record"],
        "instances": len(items),
        "seconds": round(time.perf_counter() - began, 1),
    }
    write_text_atomic(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    if export:
        export_policy(
            model.cpu(),
            cfg.export,
            temperature=cfg.temperature,
            config=as_dict(cfg),
            seed=cfg.seed,
            history=history,
            evaluation=best["record"],
        )
        _log(f"exported {cfg.export} (best: {best['record']['phase']} round {best['record']['step']})")
    return summary


def main(argv: list[str] | None = None) -> int:
    """The command line: train with a config; exit 2 with one line on a bad config or optima file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/train/default.yaml", help="training config (YAML)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"), help="where the scorer trains")
    parser.add_argument("--no-export", action="store_true", help="train and report, write no policy file")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config)
        device = choose_device(args.device)
        train(cfg, device=device, export=not args.no_export)
    except (ConfigError, OptimaError) as exc:
        print(f"train.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
