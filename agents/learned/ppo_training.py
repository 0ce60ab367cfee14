"""The PPO phase: the vectorised environments, the MaskablePPO model (new or from a checkpoint) and its training."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agents.learned.config import TrainConfig, sampler_spec


def make_vec_env(cfg: TrainConfig, seed: int):
    """``n_envs`` environments in one process, each with its own seed, with episode statistics."""
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from gpu_env.env import GpuClusterEnv

    def make(i: int):
        def thunk():
            env = Monitor(GpuClusterEnv(sampler_spec(cfg)))
            env.reset(seed=seed + i)
            return env

        return thunk

    venv = DummyVecEnv([make(i) for i in range(cfg.n_envs)])
    venv.seed(seed)
    return venv


def new_model(cfg: TrainConfig, venv: Any, device: str, run_dir: Path) -> Any:
    """A fresh MaskablePPO model with the job-scorer policy and the configured hyperparameters."""
    from sb3_contrib import MaskablePPO

    from agents.learned.network import JobScorerPolicy

    p = cfg.ppo
    return MaskablePPO(
        JobScorerPolicy,
        venv,
        learning_rate=p.learning_rate,
        n_steps=p.n_steps,
        batch_size=p.batch_size,
        n_epochs=p.n_epochs,
        gamma=p.gamma,
        gae_lambda=p.gae_lambda,
        clip_range=p.clip_range,
        ent_coef=p.ent_coef,
        vf_coef=p.vf_coef,
        max_grad_norm=p.max_grad_norm,
        target_kl=p.target_kl,
        policy_kwargs={"hidden": cfg.network.hidden, "value_features": cfg.network.value_features},
        tensorboard_log=str(run_dir / "tb"),
        seed=cfg.seed,
        device=device,
        verbose=0,
    )


def load_model(checkpoint: Path, venv: Any, device: str, run_dir: Path) -> Any:
    """The MaskablePPO model of a checkpoint, on ``venv``, logging to the run's TensorBoard folder."""
    from sb3_contrib import MaskablePPO

    return MaskablePPO.load(checkpoint, env=venv, device=device, tensorboard_log=str(run_dir / "tb"))


def learn(model: Any, cfg: TrainConfig, limits: Any, run_dir: Path, resumed: bool, progress: bool) -> dict[str, Any]:
    """Train with PPO up to ``total_timesteps``, with checkpoints and periodic evaluation; evaluate at the end.

    Checkpoints go to ``run_dir/checkpoints`` every ``checkpoint_every`` steps and
    once at the end; the evaluation callback keeps the best policy as ``best.zip``.

    Returns:
        The phase's summary: steps, seconds, steps per second, the final evaluation and its history.
    """
    from stable_baselines3.common.callbacks import CallbackList, CheckpointCallback

    from agents.learned.evaluation import eval_instances, make_eval_callback

    ckpt_dir = run_dir / "checkpoints"
    instances = eval_instances(cfg)
    evaluator = make_eval_callback(cfg, instances, limits, run_dir)
    checkpoints = CheckpointCallback(max(1, cfg.checkpoint_every // cfg.n_envs), str(ckpt_dir), name_prefix="ppo")
    remaining = cfg.total_timesteps - model.num_timesteps
    t0 = time.perf_counter()
    if remaining > 0:
        model.learn(
            remaining,
            callback=CallbackList([checkpoints, evaluator]),
            tb_log_name="ppo",
            reset_num_timesteps=not resumed,
            progress_bar=progress,
        )
    ppo_seconds = time.perf_counter() - t0
    model.save(ckpt_dir / f"ppo_{model.num_timesteps}_steps.zip")
    evaluator.model = model
    final = evaluator.evaluate() if instances else {}
    return {
        "ppo_steps": int(model.num_timesteps),
        "ppo_seconds": ppo_seconds,
        "steps_per_second": (remaining / ppo_seconds) if remaining > 0 and ppo_seconds > 0 else None,
        "final_eval": final,
        "history": evaluator.history,
    }
