"""Train the learned fast mode: imitation warm start, MaskablePPO, RL on the batched engine, then export.

Read top to bottom (CleanRL style). Usage::

    .venv/bin/python train.py --config configs/train/default.yaml [--device cpu|cuda|auto] [--resume]

Stages:

1. **Imitation** (optional, ``imitation.episodes > 0``): the greedy heuristic
   (``agents/greedy.py``) plans each of a set of fresh scenarios; its plan is
   replayed in the environment's action space (at each clock, the jobs greedy
   starts there, on the fit rule that gives greedy's block, or the one that
   overlaps greedy's later blocks least) and the policy is fitted to those
   actions (cross-entropy over the masked logits) and its critic to the
   returns. It gives PPO a start near the heuristic instead of near random.
   With ``imitation.dagger_rounds`` (DAgger, Ross et al. 2011) the policy then
   plays fresh scenarios, greedy re-plans from every state the policy reaches
   and labels it, and the policy refits on all the data so far: it learns to
   recover from its own mistakes instead of only from the teacher's states.
2. **PPO** (``sb3_contrib.MaskablePPO``), the final stage, on scenarios drawn
   afresh at every reset from the configured families. At intervals the policy
   plans fixed evaluation instances per family; its objective against FIFO,
   greedy and the best known plan (CP-SAT with a short limit) goes to
   TensorBoard, and the best policy so far is kept.
3. **RL on the batched engine** (``rl.steps > 0``, :mod:`agents.learned.rl`):
   a CleanRL-style loop of masked PPO where K rollouts of each fresh instance
   share their mean return as baseline (POMO), optionally with self-imitation
   of the best rollout (and a replay of greedy's plan among the candidates).
   With ``init_from: FILE.onnx`` the run starts here from an exported policy's
   weights instead of imitation and MaskablePPO.
4. **Export** of the best policy to ONNX with its card (:mod:`agents.learned.export`).

Every phase evaluates the policy on the fixed instances: TensorBoard
``run_dir/tb/phases`` (``eval/<family>/vs_greedy`` ...) and the card's
``training.history``, each entry labelled with its phase.

The phases live in :mod:`agents.learned` (``config``, ``teacher`` and
``imitation``, ``ppo_training``, ``rl``, ``evaluation``, ``checkpoints``, ``network``,
``export``); this script runs them in order. Everything lands under
``run_dir``: TensorBoard events in ``tb/``, checkpoints in ``checkpoints/``
(``--resume`` continues from the latest), the best policy as ``best.zip``.
Bad config files give one line naming the file and field, and exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from agents.learned.checkpoints import export_best, latest_checkpoint
from agents.learned.config import ConfigError, TrainConfig, choose_device, load_config
from agents.learned.imitation import warm_start
from agents.learned.ppo_training import learn, load_model, make_vec_env, new_model
from gpu_env.files import write_text_atomic
from gpu_env.observation import Limits


def sha256_of(path: Path) -> str:
    """The file's SHA-256 (hex)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train(
    cfg: TrainConfig, device: str = "cpu", resume: bool = False, export: bool = True, progress: bool = True
) -> dict[str, Any]:
    """Run the stages of the module docstring; returns a summary (steps, times, evaluation)."""
    import torch

    from agents.learned.evaluation import PhaseRecorder, eval_instances
    from agents.learned.rl import from_sb3, load_onnx_weights, train_rl

    # Seeding: one seed for numpy, torch, the environments and the imitation data.
    torch.set_num_threads(1)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    run_dir = Path(cfg.run_dir)
    ckpt_dir = run_dir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / "config.json", json.dumps(dataclasses.asdict(cfg), indent=2))
    started = time.perf_counter()
    summary: dict[str, Any] = {"device": device}

    if cfg.init_from is not None:
        # 0. Warm start from an exported policy: its weights (ONNX initializers) and its card's limits and history.
        policy = load_onnx_weights(cfg.init_from).to(device)
        card = json.loads(Path(cfg.init_from).with_suffix(".json").read_text())
        limits = Limits(**card["limits"])
        summary["init_from"] = {"file": str(cfg.init_from), "sha256": sha256_of(Path(cfg.init_from))}
        recorder = PhaseRecorder(eval_instances(cfg), limits, run_dir)
        for entry in card.get("training", {}).get("history", []):  # a card before phase labels: MaskablePPO's
            recorder.history.append({"phase": entry.get("phase", "ppo"), **entry, "source": "init_from card"})
        model = None
    else:
        # The environments and the model: the latest checkpoint with --resume, else a new one.
        venv = make_vec_env(cfg, cfg.seed)
        limits = venv.envs[0].unwrapped.limits
        recorder = PhaseRecorder(eval_instances(cfg), limits, run_dir)
        latest = latest_checkpoint(ckpt_dir) if resume else None
        if latest is not None:
            print(f"resuming from {latest}")
            model = load_model(latest, venv, device, run_dir)
        else:
            model = new_model(cfg, venv, device, run_dir)
            # 1. Imitation of greedy, then DAgger (a resumed run loads checkpoints/imitation.zip instead).
            if cfg.imitation.episodes > 0:
                summary.update(warm_start(model, cfg, limits, run_dir, device, resume, progress, on_eval=recorder))
        # 2. MaskablePPO on the single env, with checkpoints and periodic evaluation (best policy kept as best.zip).
        if cfg.total_timesteps > 0 or latest is not None:
            summary.update(learn(model, cfg, limits, run_dir, resumed=latest is not None, progress=progress))
            recorder.history += [{"phase": "ppo", **entry} for entry in summary.get("history", [])]
        venv.close()
        policy = from_sb3(model.policy)

    # 3. RL on the batched engine: masked PPO, K rollouts per instance with a shared baseline (POMO).
    if cfg.rl.steps > 0:
        rl = train_rl(policy, cfg, limits, recorder, recorder.writer, progress)
        policy.load_state_dict(rl.pop("best_state"))
        summary.update(rl)
    summary["history"] = recorder.history
    recorder.close()

    # 4. Export of the best policy with its card.
    if export:
        if model is not None and cfg.rl.steps == 0:
            summary["export"] = export_best(model, cfg, limits, run_dir, summary)
        else:
            summary["export"] = export_rl(policy, cfg, limits, summary)
    summary["seconds"] = time.perf_counter() - started
    write_text_atomic(run_dir / "summary.json", json.dumps(summary, indent=2, default=float))
    return summary


def export_rl(policy: Any, cfg: TrainConfig, limits: Limits, summary: dict[str, Any]) -> dict[str, Any]:
    """Export the RL phase's best policy to ``cfg.export`` with its card (config, phases, history)."""
    from agents.learned.export import export_policy

    rl_entries = [e for e in summary["history"] if e["phase"] == "rl" and "source" not in e]
    best = max(rl_entries, key=lambda e: e["mean_vs_greedy"]) if rl_entries else summary["history"][-1]
    phases = list(dict.fromkeys(e["phase"] for e in summary["history"]))
    card = export_policy(
        policy.to("cpu"),
        cfg.export,
        limits,
        config=dataclasses.asdict(cfg),
        seed=cfg.seed,
        steps=int(summary.get("rl_steps", 0)),
        evaluation={"instances": "eval.instances_per_family per family, seeds from eval.seed", **best},
        extra={"phases": phases, "training": summary},
    )
    return {"path": cfg.export, "steps": card["training_steps"]}


def main(argv: list[str] | None = None) -> int:
    """Command line: ``train.py --config FILE [--device cpu|cuda|auto] [--resume] [--no-export]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/train/default.yaml", help="YAML training config")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"))
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in run_dir")
    parser.add_argument("--no-export", action="store_true", help="skip the ONNX export at the end")
    parser.add_argument("--run-dir", help="override run_dir")
    parser.add_argument("--export", help="override export (the .onnx path)")
    parser.add_argument("--timesteps", type=int, help="override total_timesteps")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config)
        if args.run_dir:
            cfg.run_dir = args.run_dir
        if args.export:
            cfg.export = args.export
        if args.timesteps is not None:
            cfg.total_timesteps = args.timesteps
        device = choose_device(args.device)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary = train(cfg, device=device, resume=args.resume, export=not args.no_export)
    print(json.dumps({k: v for k, v in summary.items() if k != "history"}, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
