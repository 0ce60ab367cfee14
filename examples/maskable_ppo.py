"""Train your own policy: sb3-contrib's MaskablePPO on GpuCluster-v0 with list actions, then plan the seven scenarios.

Read it top to bottom (CleanRL's habit): the arguments, the training draws, the
vector env, the model, training with TensorBoard, then the seven benchmark
scenarios planned by the trained policy and compared with greedy and with the
shipped learned planner.

    PYTHONPATH=. .venv/bin/python examples/maskable_ppo.py                       # the defaults (300k timesteps)
    PYTHONPATH=. .venv/bin/python examples/maskable_ppo.py --timesteps 20000 --num-envs 4 --seed 3
    .venv/bin/tensorboard --logdir runs/maskable_ppo                              # the curves

What it does:

* **Environment**: ``gymnasium.make("GpuCluster-v0", actions="list")``
  (``docs/environment.md``, "The list action space"): a step names the next job
  of the queue and the rules place it; the mask allows the jobs still to come
  that fit; an episode's rewards add up to the plan's objective over
  ``G * T * w_max``.
* **Vector env**: SB3's ``DummyVecEnv`` of ``--num-envs`` list envs (each in a
  ``Monitor``, for TensorBoard's ``rollout/ep_rew_mean``), built by SB3's
  ``make_vec_env``. The project's batched vector env and its SB3 adapter
  (:class:`lab.sb3_vec_env.BatchVecEnv`) step FIT actions only; sb3-contrib
  reads the list envs' masks through ``action_masks()``.
* **Training draws**: fresh instances of the seven generator families
  (:mod:`gpu_env.generators`) at their own sizes, drawn from the env's seeded
  generator at every reset. The seven benchmark scenarios are draws of the same
  families with the seeds written in their files; a draw with such a (family, seed)
  is thrown away and drawn again, so training never sees them.
* **Network** (``--policy rows``, the default): every job row is embedded by
  one MLP and scored with shared weights (:class:`JobRowsPolicy`), as the
  shipped scorer does; ``--policy mlp`` is SB3's ``MultiInputPolicy``.
* **Seeds**: the same ``--seed`` gives the same training draws, the same
  network and the same plans (torch on one thread, on the CPU).
* **The model file**: ``RUN_DIR/model.zip`` is SB3's own format (a zip that
  holds pickled Python objects). It is the researcher's artefact, for
  ``MaskablePPO.load`` in your own code: the allocator never unpickles a file and
  never loads this one. It plans with an ONNX policy and its card
  (``docs/learned-mode.md``, "The policy file and its card").
* **Evaluation** (``--eval``, the default): each of the seven scenarios is one
  episode, with the policy acting deterministically under the mask; its plan is
  checked by :func:`gpu_env.validation.validate` and compared with greedy and
  with the shipped learned planner (``ppo``, as shipped: 12 candidates and the
  FIFO guard; and ``ppo, one``: the shipped policy alone, one candidate, no
  guard), all through :func:`agents.registry.run_scheduler`. ``--out FILE``
  writes the table and the run's figures as Markdown.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import sb3_contrib
import stable_baselines3
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.policies import MaskableMultiInputActorCriticPolicy
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

import gpu_env  # registers GpuCluster-v0
from agents.options import PlanOptions
from agents.registry import run_scheduler
from gpu_env.generators import FAMILIES
from gpu_env.metrics import compute_metrics
from gpu_env.sampler import ScenarioSampler
from gpu_env.scenario import load_scenario
from gpu_env.validation import validate

# ---------------------------------------------------------------------------------------------- arguments

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Args:
    """The run's settings; every field is a command-line option (``--num-envs`` for ``num_envs``)."""

    timesteps: int = 300_000
    """Environment steps to train for (all envs together)."""
    num_envs: int = 8
    """Episodes stepped side by side."""
    seed: int = 1
    """Seed of the training draws, the network, the sampling and the evaluation."""
    run_dir: str = "runs/maskable_ppo"
    """TensorBoard logs and the model file go here."""
    device: str = "cpu"
    """``cpu`` or ``cuda`` (refused when torch sees no CUDA device: SB3 would fall back to the CPU silently)."""
    eval: bool = True
    """Plan the seven scenarios with the trained policy (``--no-eval``: train only)."""
    out: str | None = None
    """Write the results as Markdown to this file."""
    scenarios: str = str(ROOT / "configs" / "scenarios")
    """Folder of the seven benchmark scenarios (``<family>.yaml``)."""
    threads: int = 1
    """torch threads (1: the fastest here for a small MLP, and the same numbers every run)."""
    # PPO's hyperparameters: SB3's defaults except where the episodes are short and the return is the objective.
    n_steps: int = 256
    """Steps per env per rollout (a rollout is ``n_steps * num_envs`` steps)."""
    batch_size: int = 512
    """Minibatch size (capped at the rollout's size)."""
    n_epochs: int = 5
    """Passes over each rollout."""
    learning_rate: float = 3e-4
    """Adam's step size."""
    gamma: float = 1.0
    """Discount: 1, because an episode's undiscounted return is the plan's objective."""
    gae_lambda: float = 0.95
    """GAE's lambda."""
    ent_coef: float = 0.01
    """Entropy bonus."""
    policy: str = "rows"
    """``rows``: job rows scored with shared weights (:class:`JobRowsPolicy`); ``mlp``: SB3's MultiInputPolicy."""
    net: int = 128
    """Width of the value network's two hidden layers (and of the policy's with ``--policy mlp``)."""
    width: int = 64
    """Width of a job row's embedding (``--policy rows``)."""


def parse_args(argv: list[str] | None = None) -> Args:
    """The command line as :class:`Args`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in fields(Args):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        elif f.name in ("device", "policy"):
            choices = ("cpu", "cuda") if f.name == "device" else ("rows", "mlp")
            parser.add_argument(flag, choices=choices, default=default)
        else:
            kind = {int: int, float: float}.get(type(default), str)
            parser.add_argument(flag, type=kind, default=default)
    return Args(**vars(parser.parse_args(argv)))


# ---------------------------------------------------------------------------------------------- the network
# ``--policy rows`` (the default): one small MLP reads every job row (with the cluster's features beside it), and
# each job's logit comes from its own row and the mean of the allowed rows, with shared weights: the action is the
# row index, so the network scores jobs the way the shipped scorer does. ``--policy mlp``: SB3's MultiInputPolicy,
# an MLP over the flattened observation.


class JobRows(BaseFeaturesExtractor):
    """Per-job embeddings (B, max_jobs * width) followed by their mean over the allowed jobs (B, width)."""

    def __init__(self, observation_space: gym.spaces.Dict, width: int = 64) -> None:
        rows, features = observation_space["jobs"].shape
        cluster = observation_space["cluster"].shape[0]
        super().__init__(observation_space, features_dim=(rows + 1) * width)
        self.rows, self.width = rows, width
        self.embed = nn.Sequential(nn.Linear(features + cluster, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, (max_jobs + 1) * width): every row's embedding, then the allowed rows' mean."""
        jobs, cluster, mask = obs["jobs"], obs["cluster"], obs["action_mask"].float()
        h = self.embed(torch.cat([jobs, cluster[:, None, :].expand(-1, jobs.shape[1], -1)], dim=-1))
        pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1.0)
        return torch.cat([h.flatten(1), pooled], dim=1)


class RowLogits(nn.Module):
    """One logit per job row from its embedding and the pooled one (the same weights for every row)."""

    def __init__(self, rows: int, width: int) -> None:
        super().__init__()
        self.rows, self.width = rows, width
        self.score = nn.Sequential(nn.Linear(2 * width, width), nn.ReLU(), nn.Linear(width, 1))
        nn.init.orthogonal_(self.score[-1].weight, gain=0.01)  # near-uniform first policy, as SB3's own head
        nn.init.zeros_(self.score[-1].bias)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        """(B, max_jobs) logits (sb3-contrib masks them)."""
        h = latent[:, : self.rows * self.width].view(-1, self.rows, self.width)
        pooled = latent[:, None, self.rows * self.width :].expand(-1, self.rows, -1)
        return self.score(torch.cat([h, pooled], dim=-1)).squeeze(-1)


class JobRowsPolicy(MaskableMultiInputActorCriticPolicy):
    """MaskablePPO's policy with :class:`JobRows` features and :class:`RowLogits` as the action head."""

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        extractor = self.pi_features_extractor
        assert isinstance(extractor, JobRows)
        self.action_net = RowLogits(extractor.rows, extractor.width)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)


# ---------------------------------------------------------------------------------------------- setup


def setup(args: Args) -> Path:
    """Set torch's threads, check the device and make the run folder; returns the run folder."""
    torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device (install torch's CUDA build, or use --device cpu)")
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


# ---------------------------------------------------------------------------------------------- the seven scenarios


def seven_scenarios(folder: Path) -> list[gpu_env.Scenario]:
    """The seven benchmark scenarios (``<family>.yaml`` in ``folder``), in the order of the families.

    Loaded first: their (family, seed) pairs are kept out of training, and their queues size the observation.
    """
    return [load_scenario(folder / f"{name}.yaml") for name in FAMILIES]


# ---------------------------------------------------------------------------------------------- training draws


@dataclass(frozen=True)
class TrainingDraws(ScenarioSampler):
    """The seven families at their own sizes, never a (family, seed) of a benchmark scenario."""

    held_out: frozenset[tuple[str | None, int | None]] = frozenset()

    def draw(self, rng: np.random.Generator) -> gpu_env.Scenario:
        """A draw of the families, drawn again while it is a held-out (family, seed)."""
        while True:
            scenario = super().draw(rng)
            if (scenario.family, scenario.seed) not in self.held_out:
                return scenario


# ---------------------------------------------------------------------------------------------- the vector env


def vector_env(args: Args, seven: list[gpu_env.Scenario]) -> tuple[Any, int]:
    """``--num-envs`` list envs on the training draws, in SB3's ``DummyVecEnv``; returns it and ``max_jobs``.

    ``max_jobs`` (the observation's job rows) fits every training draw and every queue of the seven scenarios.
    """
    held_out = frozenset((s.family, s.seed) for s in seven)
    draws = TrainingDraws(tuple((name, 1.0) for name in FAMILIES), held_out=held_out)
    max_jobs = max(draws.limits()["max_jobs"], *(sum(j.running_on is None for j in s.jobs) for s in seven))
    env_kwargs = {"scenario": draws, "actions": "list", "max_jobs": max_jobs, "render_mode": None}
    envs = make_vec_env("GpuCluster-v0", n_envs=args.num_envs, seed=args.seed, env_kwargs=env_kwargs)
    print(
        f"GpuCluster-v0, list actions: {args.num_envs} envs, {envs.action_space.n} actions, "
        f"observation {{{', '.join(f'{k}: {v.shape}' for k, v in envs.observation_space.spaces.items())}}}"
    )
    return envs, max_jobs


# ---------------------------------------------------------------------------------------------- the model


def build_model(args: Args, envs: Any, run_dir: Path) -> MaskablePPO:
    """MaskablePPO with ``--policy``'s network and the run's hyperparameters, logging to ``run_dir``."""
    rollout = args.n_steps * args.num_envs
    if args.policy == "rows":
        policy: Any = JobRowsPolicy
        policy_kwargs: dict[str, Any] = {
            "features_extractor_class": JobRows,
            "features_extractor_kwargs": {"width": args.width},
            "net_arch": {"pi": [], "vf": [args.net, args.net]},
        }
    else:
        policy, policy_kwargs = "MultiInputPolicy", {"net_arch": [args.net, args.net]}
    return MaskablePPO(
        policy,
        envs,
        n_steps=args.n_steps,
        batch_size=min(args.batch_size, rollout),
        n_epochs=args.n_epochs,
        learning_rate=args.learning_rate,
        gamma=args.gamma,
        gae_lambda=args.gae_lambda,
        ent_coef=args.ent_coef,
        policy_kwargs=policy_kwargs,
        tensorboard_log=str(run_dir),
        seed=args.seed,
        device=args.device,
        verbose=0,
    )


# ---------------------------------------------------------------------------------------------- training


class Progress(BaseCallback):
    """One line per rollout: timesteps, time, and the mean return of the last 100 episodes."""

    def __init__(self, timesteps: int) -> None:
        super().__init__()
        self.timesteps = timesteps
        self.started = time.perf_counter()

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        returns = [info["r"] for info in self.model.ep_info_buffer]
        mean = f"{np.mean(returns):.4f}" if returns else "-"
        elapsed = time.perf_counter() - self.started
        print(
            f"  {self.num_timesteps:>8} / {self.timesteps} steps  {elapsed:7.1f} s  "
            f"{self.num_timesteps / max(elapsed, 1e-9):6.0f} steps/s  return (objective / G*T*w_max) {mean}",
            flush=True,
        )


def train(args: Args, model: MaskablePPO, run_dir: Path) -> tuple[float, float]:
    """Train for ``--timesteps`` and save ``run_dir/model.zip``; returns the ``learn`` call's wall and CPU seconds."""
    print(f"training MaskablePPO for {args.timesteps} timesteps (TensorBoard: {run_dir})", flush=True)
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=args.timesteps, callback=Progress(args.timesteps), tb_log_name="maskable_ppo")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    model.save(run_dir / "model.zip")  # SB3's pickle-based zip: your artefact; the allocator never loads it
    print(f"trained {model.num_timesteps} timesteps in {wall:.1f} s wall, {cpu:.1f} s CPU; model: {run_dir}/model.zip")
    return wall, cpu


# ---------------------------------------------------------------------------------------------- the seven, planned


def plan_scenario(model: MaskablePPO, scenario: gpu_env.Scenario, max_jobs: int, seed: int) -> dict[str, Any]:
    """One episode of ``scenario``, the policy deterministic under the mask; its plan checked and compared.

    Args:
        model: The trained model.
        scenario: A benchmark scenario.
        max_jobs: The observation's job rows (as in training).
        seed: The episode's reset seed.

    Returns:
        The table's row: the objectives (the policy's, greedy's, the shipped planner's, its policy alone),
        their ratios, the validation and the plan.
    """
    env = gym.make("GpuCluster-v0", scenario=scenario, actions="list", max_jobs=max_jobs).unwrapped
    obs, _ = env.reset(seed=seed)
    done = False
    while not done:
        action, _ = model.predict(obs, deterministic=True, action_masks=env.action_masks())
        obs, _, terminated, truncated, _ = env.step(int(action))
        done = terminated or truncated
    plan = env.plan("maskable_ppo")
    violations = validate(scenario, plan)
    objective = compute_metrics(scenario, plan).objective
    greedy = run_scheduler("greedy", scenario).metrics
    shipped = run_scheduler("ppo", scenario).metrics
    alone = run_scheduler("ppo", scenario, PlanOptions(samples=1, guard="none")).metrics
    assert greedy is not None and shipped is not None and alone is not None
    return {
        "scenario": scenario.name,
        "objective": objective,
        "greedy": greedy.objective,
        "ppo": shipped.objective,
        "ppo_one": alone.objective,
        "vs_greedy": objective / greedy.objective,
        "vs_ppo": objective / shipped.objective,
        "vs_ppo_one": objective / alone.objective,
        "valid": not violations,
        "violations": [str(v) for v in violations],
        "plan": plan,
    }


def plan_seven(
    model: MaskablePPO, seven: list[gpu_env.Scenario], max_jobs: int, seed: int
) -> tuple[list[dict[str, Any]], tuple[float, float, float]]:
    """Every scenario planned (:func:`plan_scenario`), the ratios logged to TensorBoard (``seven/*``).

    Returns:
        The rows, and the mean ratios to greedy, to ppo and to ppo alone.
    """
    rows: list[dict[str, Any]] = []
    for scenario in seven:
        rows.append(plan_scenario(model, scenario, max_jobs, seed))
        model.logger.record(f"seven/{scenario.name}_vs_greedy", rows[-1]["vs_greedy"])
    mean_greedy = float(np.mean([r["vs_greedy"] for r in rows]))
    mean_ppo = float(np.mean([r["vs_ppo"] for r in rows]))
    mean_one = float(np.mean([r["vs_ppo_one"] for r in rows]))
    model.logger.record("seven/mean_vs_greedy", mean_greedy)
    model.logger.record("seven/mean_vs_ppo", mean_ppo)
    model.logger.record("seven/mean_vs_ppo_one", mean_one)
    model.logger.dump(model.num_timesteps)
    return rows, (mean_greedy, mean_ppo, mean_one)


def results_table(rows: list[dict[str, Any]], means: tuple[float, float, float]) -> list[str]:
    """The Markdown table: a row per scenario, then the mean ratios."""
    mean_greedy, mean_ppo, mean_one = means
    table = [
        "| scenario | objective | greedy | ppo | ppo, one | / greedy | / ppo | / ppo, one | valid |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        table.append(
            f"| {r['scenario']} | {r['objective']:.2f} | {r['greedy']:.2f} | {r['ppo']:.2f} | {r['ppo_one']:.2f} "
            f"| {r['vs_greedy']:.4f} | {r['vs_ppo']:.4f} | {r['vs_ppo_one']:.4f} "
            f"| {'yes' if r['valid'] else 'NO: ' + '; '.join(r['violations'])} |"
        )
    table.append(f"| **mean** | | | | | **{mean_greedy:.4f}** | **{mean_ppo:.4f}** | **{mean_one:.4f}** | |")
    return table


def write_results(args: Args, command: str, timesteps: int, seconds: tuple[float, float], table: list[str]) -> None:
    """``--out``: the table and the run's figures (budget, times, hyperparameters, versions) as Markdown.

    Args:
        args: The run's settings (``args.out`` is the file).
        command: The command line that ran.
        timesteps: The timesteps trained.
        seconds: The ``learn`` call's wall and CPU seconds.
        table: :func:`results_table`'s lines.
    """
    wall, cpu = seconds
    rollout = args.n_steps * args.num_envs
    network = f"job rows {args.width} wide, value MLP {args.net}x{args.net}" if args.policy == "rows" else ""
    network = network or f"MLP {args.net}x{args.net}"
    versions = (
        f"Python {platform.python_version()}, torch {torch.__version__}, stable-baselines3 "
        f"{stable_baselines3.__version__}, sb3-contrib {sb3_contrib.__version__}, gymnasium {gym.__version__}"
    )
    text = [
        "# MaskablePPO on GpuCluster-v0 (list actions): the seven scenarios",
        "",
        f"Written by `{command}` (`examples/maskable_ppo.py`).",
        "",
        f"- Budget: {timesteps} timesteps, {args.num_envs} envs, seed {args.seed}, device {args.device}, "
        f"{args.threads} torch thread(s).",
        f"- Training: {wall:.1f} s wall, {cpu:.1f} s CPU (the `learn` call; this process).",
        f"- PPO: n_steps {args.n_steps}, batch {min(args.batch_size, rollout)}, epochs {args.n_epochs}, "
        f"lr {args.learning_rate}, gamma {args.gamma}, GAE {args.gae_lambda}, entropy {args.ent_coef}, "
        f"policy {args.policy} ({network}).",
        f"- {versions}; {os.cpu_count()} CPUs, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
        "at the end.",
        "- Objective: the trained policy's plan, one episode per scenario, deterministic and masked; "
        "greedy, ppo (the shipped learned planner: 12 candidates, FIFO guard) and ppo, one (the shipped "
        "policy alone: 1 candidate, no guard, with its promotion pass) through `run_scheduler`. "
        "valid: `gpu_env.validation.validate` found no violation.",
        "",
        *table,
        "",
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(text))
    print(f"results: {args.out}")


# ---------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Train, save, and (with ``--eval``) plan the seven scenarios; returns the table's rows."""
    args = parse_args(argv)
    command = shlex.join(["examples/maskable_ppo.py", *(sys.argv[1:] if argv is None else argv)])
    run_dir = setup(args)
    seven = seven_scenarios(Path(args.scenarios))
    envs, max_jobs = vector_env(args, seven)
    model = build_model(args, envs, run_dir)
    seconds = train(args, model, run_dir)
    if not args.eval:
        envs.close()
        return []
    rows, means = plan_seven(model, seven, max_jobs, args.seed)
    envs.close()
    table = results_table(rows, means)
    print("\n".join(table))
    if args.out:
        write_results(args, command, model.num_timesteps, seconds, table)
    return rows


if __name__ == "__main__":
    main()
