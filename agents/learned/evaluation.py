"""Evaluation during training: fixed instances per family, the policy's ratios against FIFO, greedy and the best.

At every ``eval.every_steps`` environment steps a callback plans the instances
with the policy's most likely actions, logs the ratios to TensorBoard and keeps
the best policy so far (``best.zip`` and ``best.json`` in the run folder).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.learned.config import TrainConfig
from gpu_env.files import write_text_atomic


@dataclass
class EvalInstance:
    """A fixed evaluation scenario and its reference objectives."""

    family: str
    scenario: Any
    fifo: float
    greedy: float
    best: float
    proven: bool


def eval_instances(cfg: TrainConfig) -> list[EvalInstance]:
    """``instances_per_family`` instances per family with FIFO, greedy and best known objectives."""
    from agents.registry import run_scheduler
    from gpu_env.generators import generate

    out = []
    for family in cfg.scenarios.families:
        for i in range(cfg.eval.instances_per_family):
            sc = generate(family, cfg.eval.seed + i)
            fifo = run_scheduler("fifo", sc).metrics.objective
            greedy = run_scheduler("greedy", sc).metrics.objective
            best, proven = greedy, False
            if cfg.eval.optimum_time_limit > 0:
                from agents.options import PlanOptions

                plan = run_scheduler("full", sc, PlanOptions(time_limit=cfg.eval.optimum_time_limit))
                best = max(best, plan.metrics.objective)
                proven = plan.info.get("status") == "optimal"
            out.append(EvalInstance(family, sc, fifo, greedy, best, proven))
    return out


def evaluate_policy(policy: Any, instances: list[EvalInstance], limits: Any, samples: int = 1) -> dict[str, float]:
    """The policy's plan on each instance, as ratios per family (and overall).

    Args:
        policy: An SB3 job-scorer policy or an :class:`~agents.learned.rl.ActorCritic`.
        instances: The fixed instances.
        limits: The policy's observation limits.
        samples: 1: the most likely action at every step (the policy alone, greedy decoding);
            more: the best of that rollout and ``samples - 1`` sampled ones (seed 0), as ``ppo --guard none`` plans.
    """
    import torch

    from agents.ppo import INPUTS, rollout

    net = policy.features_extractor.net
    device = next(net.parameters()).device

    def logits_fn(obs: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            tensors = [torch.as_tensor(obs[k], device=device) for k in INPUTS]
            return net(*tensors)[0].cpu().numpy()

    rows: dict[str, list[tuple[float, float, float]]] = {}
    below_fifo = 0
    for inst in instances:
        episode, _ = rollout(inst.scenario, logits_fn, limits, samples=samples)
        obj = episode.objective
        below_fifo += obj < inst.fifo - 1e-6
        rows.setdefault(inst.family, []).append((obj / inst.greedy, obj / inst.fifo, obj / inst.best))
    result = {}
    for family, values in rows.items():
        a = np.array(values)
        result[f"{family}/vs_greedy"] = float(a[:, 0].mean())
        result[f"{family}/vs_fifo"] = float(a[:, 1].mean())
        result[f"{family}/vs_best"] = float(a[:, 2].mean())
    for what in ("vs_greedy", "vs_fifo", "vs_best"):
        result[f"mean_{what}"] = float(np.mean([v for k, v in result.items() if k.endswith(f"/{what}")]))
    result["below_fifo"] = float(below_fifo)
    return result


def make_eval_callback(cfg: TrainConfig, instances: list[EvalInstance], limits: Any, run_dir: Path):
    """A callback that evaluates every ``eval.every_steps`` steps, logs to TensorBoard and keeps the best policy."""
    from stable_baselines3.common.callbacks import BaseCallback

    class PolicyEval(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.last = -1
            self.best = -np.inf
            self.history: list[dict[str, float]] = []
            best_file = run_dir / "best.json"
            if best_file.exists():
                self.best = json.loads(best_file.read_text())["mean_vs_best"]

        def _on_training_start(self) -> None:
            self.last = self.num_timesteps - cfg.eval.every_steps  # evaluate the starting policy first

        def _on_step(self) -> bool:
            if instances and self.num_timesteps - self.last >= cfg.eval.every_steps:
                self.last = self.num_timesteps
                self.evaluate()
            return True

        def evaluate(self) -> dict[str, float]:
            result = evaluate_policy(self.model.policy, instances, limits)
            for key, value in result.items():
                self.logger.record(f"eval/{key}", value)
            self.logger.dump(self.num_timesteps)
            result["steps"] = self.num_timesteps
            self.history.append(result)
            if result["mean_vs_best"] > self.best:
                self.best = result["mean_vs_best"]
                self.model.save(run_dir / "best.zip")
                write_text_atomic(run_dir / "best.json", json.dumps(result, indent=2))
            return result

    return PolicyEval()


class PhaseRecorder:
    """Evaluations through every phase: TensorBoard scalars ``eval/<family>/vs_greedy`` (and the others) and a history.

    Each evaluation gets the next point of one TensorBoard step axis (``run_dir/tb/phases``)
    and a history entry labelled with its phase (``imitation``, ``dagger``, ``ppo``, ``rl``)
    and the phase's own step count.

    Args:
        instances: The fixed evaluation instances.
        limits: The policy's observation limits.
        run_dir: The run folder.
    """

    def __init__(self, instances: list[EvalInstance], limits: Any, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.instances = instances
        self.limits = limits
        self.writer = SummaryWriter(str(run_dir / "tb" / "phases"))
        self.history: list[dict[str, Any]] = []

    def __call__(self, policy: Any, phase: str, step: int) -> dict[str, float]:
        """Evaluate ``policy`` (greedy decoding), log it and record it; returns the results."""
        if not self.instances:
            return {"mean_vs_greedy": 0.0}
        result = evaluate_policy(policy, self.instances, self.limits)
        point = len(self.history)
        for key, value in result.items():
            self.writer.add_scalar(f"eval/{key}", value, point)
        self.writer.flush()
        self.history.append({"phase": phase, "steps": step, **result})
        return result

    def close(self) -> None:
        """Flush and close the TensorBoard writer."""
        self.writer.close()
