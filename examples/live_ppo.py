"""Train a live policy: MaskablePPO on GpuClusterLive-v0, then play fresh days against the shipped live planner.

Read it top to bottom (CleanRL's habit): the arguments, the environment, the model, training with
TensorBoard, then fresh days played by the trained policy beside rolling greedy and the shipped live planner
(``anticipate``, fitted from 8 past days of the family).

    PYTHONPATH=. .venv/bin/python examples/live_ppo.py                       # the defaults (50k timesteps)
    PYTHONPATH=. .venv/bin/python examples/live_ppo.py --timesteps 5000 --families mixed-control --seed 3
    .venv/bin/tensorboard --logdir runs/live_ppo_example                      # the curves

What it does:

* **Environment**: ``gymnasium.make("GpuClusterLive-v0")`` (docs/environment.md, "The live day"): a step is a
  slot of a day played live; the action holds some of the base plan's start-now jobs and sets a headroom
  level per app; the masks are the rules. Days are drawn from the families' past
  (:data:`agents.live_gym.live_env.TRAIN_SEEDS`), and each reward has rolling greedy's on the same slot of the
  same day taken off (``baseline="greedy"``): an episode's return is the day's gain over rolling greedy as a
  share of it.
* **Model**: sb3-contrib's MaskablePPO with SB3's MLP policy; the logits of the base decision (nothing held,
  no headroom) start ``--prior`` above the others, so that exploration starts from the base decision.
* **Seeds**: the same ``--seed`` gives the same days, the same network and the same numbers (torch on one
  thread, on the CPU).
* **The model file**: ``RUN_DIR/model.zip`` is SB3's own format (pickled Python objects), for
  ``MaskablePPO.load`` in your own code; the allocator never unpickles a file. (The project's own learned live
  planner chooses among ``anticipate``'s candidates instead of learning raw actions: ``train_live.py``.)
* **Evaluation** (``--eval``, the default): ``--days`` fresh days per family (seeds 90,000 on, which no
  training draws), at ``--sigma`` with ``--runtime-model``; each executed day is checked by the validator
  against its realized day.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sb3_contrib import MaskablePPO
from stable_baselines3.common.env_util import make_vec_env

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import gpu_env  # noqa: E402, F401  (registers GpuClusterLive-v0)
from agents.live.anticipate import live_planner  # noqa: E402
from agents.live.forecast import NoiseModel  # noqa: E402
from agents.live.runtimes import draw_runtimes  # noqa: E402
from agents.live_gym.live_env import GpuClusterLiveEnv  # noqa: E402
from agents.live_gym.live_policy import action_offsets, masked_argmax  # noqa: E402
from agents.simulator.simulation import realized_day, rolling  # noqa: E402
from gpu_env.generators import FAMILIES, generate  # noqa: E402
from gpu_env.validation import validate  # noqa: E402
from lab.drawn_history import past_days  # noqa: E402

# ---------------------------------------------------------------------------------------------- arguments

FRESH_SEEDS = 90_000
"""The first seed of the days played after training (no training or validation draw has it)."""


@dataclass
class Args:
    """The run's settings; every field is a command-line option (``--num-envs`` for ``num_envs``)."""

    timesteps: int = 50_000
    """Environment steps to train for (all envs together)."""
    num_envs: int = 4
    """Days stepped side by side."""
    seed: int = 0
    """Seed of the training days, the network, the sampling and the evaluation."""
    families: str = ",".join(FAMILIES)
    """Families the days are drawn from (comma-separated)."""
    run_dir: str = "runs/live_ppo_example"
    """TensorBoard logs and the model file go here."""
    prior: float = 3.0
    """Initial logit of the base decision's values, above the others."""
    n_steps: int = 256
    """Steps per env per rollout."""
    batch_size: int = 256
    """Minibatch size."""
    learning_rate: float = 3e-4
    """Adam's step size."""
    threads: int = 1
    """torch threads (1: the same numbers every run)."""
    eval: bool = True
    """Play fresh days after training (``--no-eval``: train only)."""
    days: int = 1
    """Fresh days per family."""
    sigma: float = 0.3
    """Forecast error of the fresh days."""
    runtime_model: str = "trace"
    """Runtime model of the fresh days (``exact`` or ``trace``)."""


def parse_args(argv: list[str] | None = None) -> Args:
    """The command line as :class:`Args`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in fields(Args):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            kind = {"int": int, "float": float, "str": str}[str(f.type)]
            parser.add_argument(flag, type=kind, default=f.default)
    return Args(**vars(parser.parse_args(argv)))


# ---------------------------------------------------------------------------------------------- training


def train(args: Args) -> MaskablePPO:
    """MaskablePPO on ``--num-envs`` live days at a time, TensorBoard curves in ``--run-dir``."""
    families = tuple(f for f in args.families.split(",") if f)
    env_kwargs = {"families": families, "sigma": (0.0, 0.3), "runtime_model": ("exact", "trace")}
    vec = make_vec_env(GpuClusterLiveEnv, n_envs=args.num_envs, seed=args.seed, env_kwargs=env_kwargs)
    model = MaskablePPO(
        "MlpPolicy",
        vec,
        n_steps=args.n_steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        gamma=1.0,
        tensorboard_log=args.run_dir,
        seed=args.seed,
        device="cpu",
    )
    prefer_base(model.policy, args.prior)  # the base decision first: every dimension's value 0 starts likelier
    model.learn(total_timesteps=args.timesteps, tb_log_name="live_ppo")
    model.save(Path(args.run_dir) / "model.zip")
    print(f"trained {model.num_timesteps} timesteps on {args.num_envs} envs, seed {args.seed}")
    return model


def actor_logits(policy: Any, observation: torch.Tensor) -> torch.Tensor:
    """The actor's logits of a MaskablePPO policy (flat Box observation, MultiDiscrete action), unmasked."""
    features = policy.extract_features(observation, policy.pi_features_extractor)
    return policy.action_net(policy.mlp_extractor.forward_actor(features))


def prefer_base(policy: Any, prior: float) -> None:
    """Raise the logit of each dimension's value 0 (start as planned, no headroom) by ``prior``.

    A policy that starts from the base decision: its values are e^prior times likelier than each other value.
    """
    with torch.no_grad():
        policy.action_net.bias[torch.as_tensor(action_offsets())] += prior


# ---------------------------------------------------------------------------------------------- fresh days


def act(model: MaskablePPO, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The policy's action: the most likely allowed value of each dimension."""
    with torch.no_grad():
        logits = actor_logits(model.policy, torch.as_tensor(obs, dtype=torch.float32).reshape(1, -1))
    return masked_argmax(logits.numpy().reshape(-1).astype(np.float64), mask)


def fresh_days(model: MaskablePPO, args: Args) -> list[dict[str, Any]]:
    """Each fresh day played by the trained policy, rolling greedy and ``anticipate``."""
    rows = []
    env = GpuClusterLiveEnv(baseline=None)
    for family in (f for f in args.families.split(",") if f):
        for k in range(args.days):
            seed = FRESH_SEEDS + k
            day = generate(family, seed)
            runtimes = draw_runtimes(day, args.runtime_model, seed)
            actual = realized_day(day, NoiseModel(args.sigma).draw(day, seed), runtimes)
            obs, info = env.play(day, actual, runtimes)
            done = False
            while not done:
                obs, _, done, _, info = env.step(act(model, obs, env.action_masks()))
            trained = info["result"]
            greedy = rolling(day, "greedy", actual, runtimes=runtimes)
            past = past_days(family, day.gpus, seed, 8, args.sigma)
            shipped = rolling(
                day, live_planner("anticipate", history=past, day=day, seed=seed), actual, runtimes=runtimes
            )
            row = {
                "family": family,
                "seed": seed,
                "trained": trained.metrics.objective,
                "greedy": greedy.metrics.objective,
                "anticipate": shipped.metrics.objective,
                "valid": validate(actual, trained.executed) == [],
                "plan": trained.executed,
            }
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Train, then play the fresh days; returns their rows (the table is printed)."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    model = train(args)
    if not args.eval:
        return []
    rows = fresh_days(model, args)
    columns = ["trained", "greedy", "anticipate"]
    print(f"\nfresh days at sigma {args.sigma:g}, {args.runtime_model} runtimes (objective; ratio to rolling greedy)")
    print("| family | seed | " + " | ".join(columns) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in columns) + " |")
    for r in rows:
        cells = [f"{r[c]:.1f} ({r[c] / r['greedy']:.3f})" if r["greedy"] > 0 else f"{r[c]:.1f}" for c in columns]
        print(f"| {r['family']} | {r['seed']} | " + " | ".join(cells) + " |")
    return rows


if __name__ == "__main__":
    main()
