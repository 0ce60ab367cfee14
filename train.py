"""Train the learned fast mode: imitation warm start, then MaskablePPO on GpuCluster-v0, then export.

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
3. **Export** of the best policy to ONNX with its card (``agents/export.py``).

Everything lands under ``run_dir``: TensorBoard events in ``tb/``,
checkpoints in ``checkpoints/`` (``--resume`` continues from the latest), the
best policy as ``best.zip``. Bad config files give one line naming the file and
field, and exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

# ----------------------------------------------------------------------------- config


@dataclass
class ScenarioConfig:
    """Where training scenarios come from (``gpu_env.sampler.ScenarioSampler``)."""

    families: dict[str, float] = field(default_factory=dict)
    """Family name -> weight of drawing it."""
    gpus: list[int] | None = None
    """[low, high] cluster sizes, or None for each family's own."""
    jobs: list[int] | None = None
    """[low, high] job counts, or None for the family's jobs per GPU."""


@dataclass
class NetworkConfig:
    """The job scorer's sizes (``agents/policy_net.py``)."""

    hidden: int = 64
    """Width of every embedding."""
    value_features: int = 64
    """Width of the critic's features."""


@dataclass
class PPOConfig:
    """MaskablePPO hyperparameters (SB3 names)."""

    learning_rate: float = 1e-4
    n_steps: int = 256
    """Steps per environment per rollout."""
    batch_size: int = 256
    n_epochs: int = 4
    gamma: float = 1.0
    """1: the return of an episode is its plan's objective."""
    gae_lambda: float = 0.95
    clip_range: float = 0.1
    ent_coef: float = 0.001
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = 0.02


@dataclass
class ImitationConfig:
    """Warm start by behaviour cloning of greedy's plans (0 episodes: none)."""

    episodes: int = 0
    """Scenarios planned by the teacher."""
    epochs: int = 10
    batch_size: int = 256
    learning_rate: float = 1e-3
    value_weight: float = 0.5
    """Weight of the critic's regression to the teacher's returns."""
    dagger_rounds: int = 0
    """DAgger rounds after behaviour cloning (0: none): the policy plays, greedy labels the states it reaches."""
    dagger_episodes: int = 200
    """Scenarios the policy plays per DAgger round."""
    dagger_epochs: int = 4
    """Epochs over all the data gathered so far after each DAgger round."""


@dataclass
class EvalConfig:
    """Periodic evaluation on fixed instances."""

    instances_per_family: int = 2
    every_steps: int = 10_000
    """Environment steps between evaluations."""
    seed: int = 10_000
    """Instance seeds are seed, seed + 1, ... (apart from training draws)."""
    optimum_time_limit: float = 0.0
    """CP-SAT seconds per instance for the best known objective (0: greedy's stands in)."""


@dataclass
class TrainConfig:
    """Everything a training run needs; loaded from YAML."""

    seed: int = 0
    """Seed of every random draw (scenarios, networks, sampling)."""
    total_timesteps: int = 100_000
    """PPO environment steps (imitation not counted)."""
    n_envs: int = 4
    """Environments stepped together (one process)."""
    checkpoint_every: int = 10_000
    """Environment steps between checkpoints."""
    run_dir: str = "runs/default"
    export: str = "agents/policies/default.onnx"
    """Where the final policy is exported (its card beside it, .json)."""
    scenarios: ScenarioConfig = field(default_factory=ScenarioConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    imitation: ImitationConfig = field(default_factory=ImitationConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


class ConfigError(ValueError):
    """A config file that breaks the format; the message names the file and the field."""


def _check_value(value: Any, annotation: str, where: str) -> Any:
    """Check (and coerce int -> float) one scalar field against its annotation string."""
    optional = annotation.endswith("| None")
    base = annotation.replace(" | None", "")
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{where}: expected {base}, got null")
    if base == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if base == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if base == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if base == "list[int]":
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)):
            raise ConfigError(f"{where}: expected [low, high] integers, got {value!r}")
        return value
    if base == "dict[str, float]":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = dict.fromkeys(value, 1.0)
        if not (isinstance(value, dict) and all(isinstance(v, int | float) for v in value.values())):
            raise ConfigError(f"{where}: expected a mapping family -> weight (or a list of families), got {value!r}")
        return {str(k): float(v) for k, v in value.items()}
    raise ConfigError(f"{where}: unsupported field type {annotation}")  # a bug in this file


def _build(cls: type, data: Any, source: str, prefix: str = "") -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: field {prefix or '(top level)'}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"{source}: unknown field {where}{unknown[0]} (expected one of: {', '.join(fields)})")
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            continue
        where = f"{source}: field {prefix}{'.' if prefix else ''}{name}"
        if dataclasses.is_dataclass(f.default_factory if f.default_factory is not dataclasses.MISSING else None):
            kwargs[name] = _build(f.default_factory, data[name], source, f"{prefix}{'.' if prefix else ''}{name}")
        else:
            kwargs[name] = _check_value(data[name], str(f.type), where)
    return cls(**kwargs)


def load_config(path: str | Path) -> TrainConfig:
    """Load and check a training config.

    Raises:
        ConfigError: Unreadable YAML, an unknown field, a wrong type or an impossible value.
    """
    source = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({str(exc).splitlines()[0]})") from None
    cfg = _build(TrainConfig, data or {}, source)
    _check_ranges(cfg, source)
    return cfg


def _check_ranges(cfg: TrainConfig, source: str) -> None:
    from gpu_env.generators import FAMILIES

    if not cfg.scenarios.families:
        raise ConfigError(f"{source}: field scenarios.families: expected at least one family")
    for name, weight in cfg.scenarios.families.items():
        if name not in FAMILIES:
            raise ConfigError(f"{source}: field scenarios.families: unknown family {name!r} ({', '.join(FAMILIES)})")
        if not weight > 0:
            raise ConfigError(f"{source}: field scenarios.families.{name}: expected a positive weight, got {weight}")
    for name, bounds in (("gpus", cfg.scenarios.gpus), ("jobs", cfg.scenarios.jobs)):
        if bounds is not None and not 1 <= bounds[0] <= bounds[1]:
            raise ConfigError(f"{source}: field scenarios.{name}: expected 1 <= low <= high, got {bounds}")
    positive = {
        "total_timesteps": cfg.total_timesteps,
        "n_envs": cfg.n_envs,
        "checkpoint_every": cfg.checkpoint_every,
        "network.hidden": cfg.network.hidden,
        "network.value_features": cfg.network.value_features,
        "ppo.n_steps": cfg.ppo.n_steps,
        "ppo.batch_size": cfg.ppo.batch_size,
        "ppo.n_epochs": cfg.ppo.n_epochs,
        "ppo.learning_rate": cfg.ppo.learning_rate,
        "imitation.epochs": cfg.imitation.epochs,
        "imitation.batch_size": cfg.imitation.batch_size,
        "eval.every_steps": cfg.eval.every_steps,
    }
    for name, value in positive.items():
        if not value > 0:
            raise ConfigError(f"{source}: field {name}: expected a positive value, got {value}")
    counts = {
        "imitation.episodes": cfg.imitation.episodes,
        "imitation.dagger_rounds": cfg.imitation.dagger_rounds,
        "imitation.dagger_episodes": cfg.imitation.dagger_episodes,
        "imitation.dagger_epochs": cfg.imitation.dagger_epochs,
        "eval.instances_per_family": cfg.eval.instances_per_family,
    }
    for name, value in counts.items():
        if value < 0:
            raise ConfigError(f"{source}: field {name}: expected 0 or more, got {value}")
    if not 0 < cfg.ppo.gamma <= 1 or not 0 < cfg.ppo.gae_lambda <= 1:
        raise ConfigError(f"{source}: field ppo.gamma / ppo.gae_lambda: expected values in (0, 1]")


# ----------------------------------------------------------------------------- the environment


def sampler_spec(cfg: TrainConfig) -> dict[str, Any]:
    """The environment's ``scenario=`` mapping for the configured families and sizes."""
    spec: dict[str, Any] = {"families": dict(cfg.scenarios.families)}
    if cfg.scenarios.gpus is not None:
        spec["gpus"] = list(cfg.scenarios.gpus)
    if cfg.scenarios.jobs is not None:
        spec["jobs"] = list(cfg.scenarios.jobs)
    return spec


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


# ----------------------------------------------------------------------------- the imitation teacher


def teacher_actions(episode: Any, reference: Any, least_overlap: bool = True) -> list[int]:
    """Replay a reference plan in the episode's FIT action space; returns the actions (the episode is played).

    At each clock the rows the reference starts at or before the clock and that
    can start now are placed (earliest reference start first), each on the fit
    rule that gives the reference's block, else on the rule whose block overlaps
    the blocks the reference still has to place least (``least_overlap``; else
    on the lowest-index rule); then ADVANCE.
    """
    sc = episode.scenario
    index = {job.id: i for i, job in enumerate(sc.jobs)}
    row_of = {int(r): n for n, r in enumerate(episode.rows)}
    target = {}
    for p in reference.placements:
        i = index[p.job]
        if i in row_of:
            target[row_of[i]] = (p.start, p.gpus[0])
    actions = []
    while not episode.done:
        action = _teacher_action(episode, target, least_overlap)
        episode.step(action)
        actions.append(action)
    return actions


def _teacher_action(episode: Any, target: dict[int, tuple[int, int]], least_overlap: bool = True) -> int:
    """The teacher's action now, given its (start, first GPU) per row: a due row that can start now, else ADVANCE.

    Due rows (reference start at or before the clock) are taken earliest start first, then lowest first GPU.
    """
    now = np.flatnonzero(episode.now)
    due = sorted((r for r in now if r in target and target[r][0] <= episode.clock), key=lambda r: target[r])
    if not due:
        return episode.layout.advance
    row = int(due[0])
    options = episode.options()[row]
    same = np.flatnonzero(options == target[row][1])
    if same.size:
        option = int(same[0])
    else:
        option = _least_overlap(episode, row, options, target) if least_overlap else 0
    return episode.layout.encode(row, option)


def _least_overlap(episode: Any, row: int, options: np.ndarray, target: dict[int, tuple[int, int]]) -> int:
    t, d, k = episode.clock, int(episode.d[row]), int(episode.k[row])
    best = (float("inf"), 0)
    for option, first in enumerate(options):
        overlap = 0
        for other, (start, gpu) in target.items():
            if other == row or episode.placed[other]:
                continue
            k2, d2 = int(episode.k[other]), int(episode.d[other])
            gpus = max(0, min(first + k, gpu + k2) - max(first, gpu))
            slots = max(0, min(t + d, start + d2) - max(t, start))
            overlap += gpus * slots
        best = min(best, (overlap, option))
    return best[1]


class _Demonstrations:
    """Observations, masks, labels and returns-to-go, gathered episode by episode (the datasets' keys)."""

    def __init__(self) -> None:
        from agents.ppo import INPUTS

        self.store: dict[str, list[np.ndarray]] = {key: [] for key in (*INPUTS, "action_mask")}
        self.actions: list[int] = []
        self.returns: list[float] = []

    def add(self, obs: dict[str, np.ndarray], label: int) -> None:
        """One state and the teacher's label for it."""
        for key, rows in self.store.items():
            rows.append(obs[key])
        self.actions.append(label)

    def end_episode(self, rewards: list[float]) -> None:
        """The rewards of the episode's steps, in order (one per state added since the last call)."""
        self.returns.extend(np.cumsum(rewards[::-1])[::-1].tolist())

    def arrays(self) -> dict[str, np.ndarray]:
        """Everything as stacked arrays, plus ``actions`` and ``returns``."""
        data = {key: np.stack(rows) for key, rows in self.store.items()}
        data["actions"] = np.array(self.actions, dtype=np.int64)
        data["returns"] = np.array(self.returns, dtype=np.float32)
        return data


def teacher_dataset(cfg: TrainConfig, limits: Any, seed: int) -> dict[str, np.ndarray]:
    """Observations, teacher actions, masks and returns-to-go from ``imitation.episodes`` fresh scenarios.

    Two replays of greedy's plan are tried per scenario (the second always
    takes the lowest-index rule when greedy's block is not offered); the better
    one is the demonstration.
    """
    from tqdm import tqdm

    from agents import greedy
    from agents.ppo import reward_scale
    from gpu_env.episode import ActionLayout, ActionMode, Episode
    from gpu_env.observation import Encoder
    from gpu_env.sampler import ScenarioSampler

    sampler = ScenarioSampler.from_spec(sampler_spec(cfg))
    rng = np.random.default_rng(seed)
    layout = ActionLayout.make(ActionMode.FIT, limits.max_jobs, limits.max_gpus)
    demos = _Demonstrations()
    for _ in tqdm(range(cfg.imitation.episodes), desc="imitation data", mininterval=5):
        sc = sampler.draw(rng)
        reference = greedy.plan(sc)
        best = None
        for variant in (0, 1):
            ep = Episode(sc, layout)
            acts = teacher_actions(ep, reference, least_overlap=variant == 0)
            if best is None or ep.objective > best[0]:
                best = (ep.objective, acts)
        ep = Episode(sc, layout)
        scale = reward_scale(ep)
        enc = Encoder(ep, limits, scale)
        rewards = []
        for action in best[1]:
            demos.add(enc.observe(), action)
            rewards.append(ep.step(action) / scale)
        demos.end_episode(rewards)
    return demos.arrays()


def imitate(
    model: Any,
    data: dict[str, np.ndarray],
    cfg: TrainConfig,
    writer: Any,
    seed: int,
    progress: bool = True,
    epochs: int | None = None,
) -> None:
    """Fit the policy to the teacher's actions (masked cross-entropy) and the critic to its returns.

    ``epochs`` overrides ``imitation.epochs``.
    """
    import torch
    from tqdm import tqdm

    from agents.ppo import INPUTS

    policy = model.policy
    device = policy.device
    n = data["actions"].shape[0]
    ic = cfg.imitation
    optimizer = torch.optim.Adam(policy.parameters(), lr=ic.learning_rate)
    gen = np.random.default_rng(seed)
    policy.set_training_mode(True)
    for epoch in tqdm(range(epochs or ic.epochs), desc="imitation epochs", disable=not progress):
        order = gen.permutation(n)
        losses, accs = [], []
        for lo in range(0, n, ic.batch_size):
            idx = order[lo : lo + ic.batch_size]
            obs = {key: torch.as_tensor(data[key][idx], device=device) for key in INPUTS}
            masks = data["action_mask"][idx].astype(bool)
            acts = torch.as_tensor(data["actions"][idx], device=device)
            # one forward pass: masked logits for the actor, the critic's value beside them
            latent_pi, latent_vf = policy.mlp_extractor(policy.extract_features(obs, policy.features_extractor))
            logits = policy.action_net(latent_pi).masked_fill(~torch.as_tensor(masks, device=device), -1e8)
            values = policy.value_net(latent_vf).flatten()
            target = torch.as_tensor(data["returns"][idx], device=device)
            value_loss = torch.nn.functional.mse_loss(values, target)
            loss = torch.nn.functional.cross_entropy(logits, acts) + ic.value_weight * value_loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.ppo.max_grad_norm)
            optimizer.step()
            accs.append((logits.argmax(dim=1) == acts).float().mean().item())
            losses.append(loss.item())
        writer.add_scalar("imitation/loss", np.mean(losses), epoch)
        writer.add_scalar("imitation/accuracy", np.mean(accs), epoch)
    policy.set_training_mode(False)


def teacher_label(episode: Any) -> int:
    """Greedy's action at the episode's current state, for DAgger: greedy re-plans the rest of the day from here.

    The state becomes a rolling-horizon sub-problem (:func:`agents.rolling.state_at`:
    the jobs placed so far run on their GPUs, the others wait in the queue, the
    real-time curves continue from the clock); greedy plans it. The label places
    the job that greedy starts now on the lowest first GPU, on the fit rule that
    gives greedy's block or else the one that overlaps greedy's other blocks
    least (as :func:`teacher_actions`); ADVANCE when greedy starts nothing now
    that the environment allows now.
    """
    from agents.allocator import decide
    from agents.rolling import state_at

    sc = episode.scenario
    clock = episode.clock
    so_far = episode.plan("dagger")
    started = {p.job: (p.start, tuple(p.gpus)) for p in so_far.placements}
    started.update({job.id: (0, tuple(job.running_on)) for job in sc.jobs if job.running_on is not None})
    curves = np.array([so_far.curve(app.name, sc.slots) for app in sc.realtime], dtype=np.int64)
    curves = curves.reshape(len(sc.realtime), sc.slots)
    decision = decide(state_at(sc, clock, started, curves, sc.demand[:, clock:], "all"), "greedy")
    index = {job.id: i for i, job in enumerate(sc.jobs)}
    row_of = {int(r): n for n, r in enumerate(episode.rows)}
    target = {}
    for p in decision.plan.placements:
        row = row_of.get(index.get(p.job, -1))
        if row is not None and not episode.placed[row]:
            target[row] = (clock + p.start, p.gpus[0])
    return _teacher_action(episode, target)


def dagger_dataset(model: Any, cfg: TrainConfig, limits: Any, seed: int) -> tuple[dict[str, np.ndarray], float]:
    """The states the policy reaches on ``imitation.dagger_episodes`` fresh scenarios, labelled by greedy.

    The policy plays its most likely action; the returns-to-go are its own.

    Returns:
        The data (the keys of :func:`teacher_dataset`) and the share of states
        where the policy already chose the teacher's action.
    """
    from tqdm import tqdm

    from agents.ppo import reward_scale
    from gpu_env.episode import ActionLayout, ActionMode, Episode
    from gpu_env.observation import Encoder
    from gpu_env.sampler import ScenarioSampler

    sampler = ScenarioSampler.from_spec(sampler_spec(cfg))
    rng = np.random.default_rng(seed)
    layout = ActionLayout.make(ActionMode.FIT, limits.max_jobs, limits.max_gpus)
    demos = _Demonstrations()
    agree = 0
    for _ in tqdm(range(cfg.imitation.dagger_episodes), desc="DAgger data", mininterval=5):
        ep = Episode(sampler.draw(rng), layout)
        scale = reward_scale(ep)
        enc = Encoder(ep, limits, scale)
        rewards = []
        while not ep.done:
            obs = enc.observe()
            label = teacher_label(ep)
            demos.add(obs, label)
            mask = obs["action_mask"][None].astype(bool)
            chosen, _ = model.predict({k: v[None] for k, v in obs.items()}, action_masks=mask, deterministic=True)
            action = int(chosen[0])
            agree += action == label
            rewards.append(ep.step(action) / scale)
        demos.end_episode(rewards)
    return demos.arrays(), agree / max(1, len(demos.actions))


# ----------------------------------------------------------------------------- evaluation


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


def evaluate_policy(policy: Any, instances: list[EvalInstance], limits: Any) -> dict[str, float]:
    """The policy's most-likely-action plan on each instance, as ratios per family (and overall)."""
    import torch

    from agents.ppo import INPUTS, rollout

    def logits_fn(obs: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            tensors = [torch.as_tensor(obs[k], device=policy.device) for k in INPUTS]
            return policy.features_extractor.net(*tensors)[0].cpu().numpy()

    rows: dict[str, list[tuple[float, float, float]]] = {}
    below_fifo = 0
    for inst in instances:
        episode, _ = rollout(inst.scenario, logits_fn, limits)
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
                (run_dir / "best.json").write_text(json.dumps(result, indent=2))
            return result

    return PolicyEval()


# ----------------------------------------------------------------------------- the run


def latest_checkpoint(folder: Path) -> Path | None:
    """The checkpoint with the most steps in ``folder`` (``ppo_<steps>_steps.zip``), if any."""
    found = []
    for path in folder.glob("ppo_*_steps.zip"):
        m = re.fullmatch(r"ppo_(\d+)_steps\.zip", path.name)
        if m:
            found.append((int(m.group(1)), path))
    return max(found)[1] if found else None


def choose_device(requested: str) -> str:
    """``cpu``, ``cuda`` (an error without CUDA) or ``auto`` (CUDA when available)."""
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: this torch build sees no CUDA device (install a CUDA build, see README)")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def train(
    cfg: TrainConfig, device: str = "cpu", resume: bool = False, export: bool = True, progress: bool = True
) -> dict[str, Any]:
    """Run the stages of the module docstring; returns a summary (steps, times, evaluation)."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import CallbackList, CheckpointCallback
    from torch.utils.tensorboard import SummaryWriter

    from agents.export import export_policy
    from agents.policy_net import JobScorerPolicy

    # Seeding: one seed for numpy, torch, the environments and the imitation data.
    torch.set_num_threads(1)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    run_dir = Path(cfg.run_dir)
    ckpt_dir = run_dir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2))
    started = time.perf_counter()
    summary: dict[str, Any] = {"device": device}

    venv = make_vec_env(cfg, cfg.seed)
    limits = venv.envs[0].unwrapped.limits
    latest = latest_checkpoint(ckpt_dir) if resume else None
    imitation_file = ckpt_dir / "imitation.zip"
    p = cfg.ppo
    if latest is not None:
        print(f"resuming from {latest}")
        model = MaskablePPO.load(latest, env=venv, device=device, tensorboard_log=str(run_dir / "tb"))
    else:
        model = MaskablePPO(
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
        if cfg.imitation.episodes > 0:
            if resume and imitation_file.exists():
                print(f"resuming after imitation from {imitation_file}")
                model.set_parameters(str(imitation_file), device=device)
            else:
                t0 = time.perf_counter()
                cached = run_dir / "imitation_data.npz"
                summary["imitation_data_cached"] = bool(resume and cached.exists())
                if summary["imitation_data_cached"]:
                    data = dict(np.load(cached))
                else:
                    data = teacher_dataset(cfg, limits, cfg.seed + 1)
                    np.savez(cached, **data)
                writer = SummaryWriter(str(run_dir / "tb" / "imitation"))
                imitate(model, data, cfg, writer, cfg.seed, progress)
                summary["imitation_samples"] = int(data["actions"].shape[0])
                # DAgger: the policy plays, greedy labels what it reaches, the policy refits on everything so far
                for rnd in range(cfg.imitation.dagger_rounds):
                    new, agreement = dagger_dataset(model, cfg, limits, cfg.seed + 1000 + rnd)
                    writer.add_scalar("dagger/agreement", agreement, rnd)
                    print(f"DAgger round {rnd + 1}: policy agreed with greedy on {agreement:.1%} of its states")
                    data = {key: np.concatenate([data[key], new[key]]) for key in data}
                    imitate(model, data, cfg, writer, cfg.seed + rnd + 1, progress, epochs=cfg.imitation.dagger_epochs)
                    summary.setdefault("dagger_agreement", []).append(agreement)
                writer.close()
                model.save(imitation_file)
                summary["imitation_samples_with_dagger"] = int(data["actions"].shape[0])
                summary["imitation_seconds"] = time.perf_counter() - t0

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
            reset_num_timesteps=latest is None,
            progress_bar=progress,
        )
    ppo_seconds = time.perf_counter() - t0
    model.save(ckpt_dir / f"ppo_{model.num_timesteps}_steps.zip")
    evaluator.model = model
    final = evaluator.evaluate() if instances else {}
    summary.update(
        {
            "ppo_steps": int(model.num_timesteps),
            "ppo_seconds": ppo_seconds,
            "steps_per_second": (remaining / ppo_seconds) if remaining > 0 and ppo_seconds > 0 else None,
            "final_eval": final,
            "history": evaluator.history,
        }
    )
    if export:
        best = run_dir / "best.zip"
        chosen = MaskablePPO.load(best, device="cpu") if best.exists() else model
        best_eval = json.loads((run_dir / "best.json").read_text()) if (run_dir / "best.json").exists() else final
        card = export_policy(
            chosen.policy.to("cpu"),
            cfg.export,
            limits,
            config=dataclasses.asdict(cfg),
            seed=cfg.seed,
            steps=int(chosen.num_timesteps),
            evaluation={"instances": "eval.instances_per_family per family, seeds from eval.seed", **best_eval},
            extra={"training": summary},  # with the evaluation history (a few dozen numbers)
        )
        summary["export"] = {"path": cfg.export, "steps": card["training_steps"]}
    summary["seconds"] = time.perf_counter() - started
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    venv.close()
    return summary


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
