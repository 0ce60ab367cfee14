"""Steps per second of the two RL trainers on the batched engine, on the same families, batch and network.

* ``pomo``: :mod:`agents.learned.rl` (own loop: one torch call per decision for all
  episodes, PPO's clipped loss over the decisions that had a choice);
* ``maskableppo``: sb3-contrib's MaskablePPO through :class:`gpu_env.batch.sb3.BatchVecEnv`
  with the job-scorer policy, ``n_envs`` = the same batch, one rollout of ``n_steps`` per update.

Both train from the shipped policy's weights for about ``--steps`` engine steps, one
thread, and report wall and process-CPU steps per second (process CPU is the figure to
trust on a shared machine). Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/rl_speed.py --steps 30000 --instances 32 --rollouts 8 --epochs 2
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from agents.learned.config import TrainConfig, load_config, sampler_spec
from agents.learned.rl import collect, engine_sizes, load_onnx_weights, ppo_update
from agents.ppo import DEFAULT_POLICY
from gpu_env.batch import BatchEngine
from gpu_env.observation import Limits
from gpu_env.sampler import ScenarioSampler


def pomo(cfg: TrainConfig, limits: Limits, steps: int) -> dict[str, float]:
    """The own loop: collect + update until ``steps`` engine steps."""
    policy = load_onnx_weights(DEFAULT_POLICY)
    sampler = ScenarioSampler.from_spec(sampler_spec(cfg))
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)
    engine = BatchEngine(cfg.rl.instances * cfg.rl.rollouts, engine_sizes(limits, cfg))
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.rl.learning_rate)
    done, t_collect, t_update = 0, 0.0, 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    while done < steps:
        t = time.perf_counter()
        batch = collect(policy, engine, [sampler.draw(rng) for _ in range(cfg.rl.instances)], cfg.rl.rollouts, gen)
        t_collect += time.perf_counter() - t
        t = time.perf_counter()
        ppo_update(policy, opt, batch, cfg, rng)
        t_update += time.perf_counter() - t
        done += batch["steps"]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "steps": done,
        "wall_steps_per_s": done / wall,
        "cpu_steps_per_s": done / cpu,
        "collect_share": t_collect / wall,
        "update_share": t_update / wall,
    }


def maskableppo(cfg: TrainConfig, limits: Limits, steps: int) -> dict[str, float]:
    """MaskablePPO through the SB3 adapter, same batch, PPO settings of the config's rl section."""
    from sb3_contrib import MaskablePPO

    from agents.learned.network import JobScorerPolicy
    from gpu_env.batch.sb3 import BatchVecEnv
    from gpu_env.batch.vector_env import GpuClusterVectorEnv

    n = cfg.rl.instances * cfg.rl.rollouts
    venv = BatchVecEnv(
        GpuClusterVectorEnv(
            n,
            sampler_spec(cfg),
            max_gpus=limits.max_gpus,
            max_jobs=limits.max_jobs,
            max_slots=limits.max_slots,
            max_apps=limits.max_apps,
        )
    )
    n_steps = 32
    model = MaskablePPO(
        JobScorerPolicy,
        venv,
        learning_rate=cfg.rl.learning_rate,
        n_steps=n_steps,
        batch_size=cfg.rl.minibatch,
        n_epochs=cfg.rl.epochs,
        gamma=1.0,
        policy_kwargs={"hidden": 64, "value_features": 64},
        device="cpu",
        seed=0,
    )
    src = load_onnx_weights(DEFAULT_POLICY)
    model.policy.features_extractor.net.load_state_dict(src.net.state_dict())
    model.policy.value_net.load_state_dict(src.value_net.state_dict())
    total = max(n * n_steps, steps - steps % (n * n_steps))
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(total)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"steps": total, "wall_steps_per_s": total / wall, "cpu_steps_per_s": total / cpu}


def main() -> None:
    """Measure both trainers and print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/train/rl.yaml")
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--which", default="pomo,maskableppo")
    parser.add_argument("--instances", type=int, default=32, help="M (batch = M x K)")
    parser.add_argument("--rollouts", type=int, default=8, help="K")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(args.config)
    # PPO settings as measured: the config's learning rate and clip, no self-imitation, no teacher
    cfg.rl.instances, cfg.rl.rollouts, cfg.rl.epochs = args.instances, args.rollouts, args.epochs
    cfg.rl.minibatch = 1024
    cfg.rl.self_imitation, cfg.rl.teacher, cfg.rl.pg_coef = 0.0, False, 1.0
    limits = Limits(max_gpus=64, max_jobs=30, max_slots=24, max_apps=2)
    out = {"batch": cfg.rl.instances * cfg.rl.rollouts, "threads": 1}
    for name in args.which.split(","):
        out[name] = {"pomo": pomo, "maskableppo": maskableppo}[name](cfg, limits, args.steps)
        print(json.dumps(out[name]), flush=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
