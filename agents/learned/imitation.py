"""Imitation of greedy: the demonstration datasets, the DAgger rounds, and the fit of the policy to them."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agents.learned.config import TrainConfig, sampler_spec
from agents.learned.teacher import teacher_actions, teacher_label
from gpu_env.files import atomic_path


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


def warm_start(
    model: Any,
    cfg: TrainConfig,
    limits: Any,
    run_dir: Path,
    device: str,
    resume: bool,
    progress: bool,
    on_eval: Callable[[Any, str, int], Any] | None = None,
) -> dict[str, Any]:
    """The imitation phase: fit the policy to greedy's demonstrations, then ``imitation.dagger_rounds`` of DAgger.

    The fitted model is saved as ``checkpoints/imitation.zip``; with ``resume``
    an existing one is loaded instead and nothing is redone, and the
    demonstrations cached in ``imitation_data.npz`` are reused.

    ``on_eval(policy, phase, round)``, when given, evaluates the policy after
    behaviour cloning (phase ``imitation``) and after every DAgger round (``dagger``).

    Returns:
        The phase's summary (samples, DAgger agreement per round, seconds); empty when resumed.
    """
    from torch.utils.tensorboard import SummaryWriter

    imitation_file = run_dir / "checkpoints" / "imitation.zip"
    if resume and imitation_file.exists():
        print(f"resuming after imitation from {imitation_file}")
        model.set_parameters(str(imitation_file), device=device)
        return {}
    summary: dict[str, Any] = {}
    t0 = time.perf_counter()
    cached = run_dir / "imitation_data.npz"
    summary["imitation_data_cached"] = bool(resume and cached.exists())
    if summary["imitation_data_cached"]:
        data = dict(np.load(cached))
    else:
        data = teacher_dataset(cfg, limits, cfg.seed + 1)
        with atomic_path(cached) as tmp:
            np.savez(tmp, **data)
    writer = SummaryWriter(str(run_dir / "tb" / "imitation"))
    imitate(model, data, cfg, writer, cfg.seed, progress)
    if on_eval is not None:
        on_eval(model.policy, "imitation", 0)
    summary["imitation_samples"] = int(data["actions"].shape[0])
    # DAgger: the policy plays, greedy labels what it reaches, the policy refits on everything so far
    for rnd in range(cfg.imitation.dagger_rounds):
        new, agreement = dagger_dataset(model, cfg, limits, cfg.seed + 1000 + rnd)
        writer.add_scalar("dagger/agreement", agreement, rnd)
        print(f"DAgger round {rnd + 1}: policy agreed with greedy on {agreement:.1%} of its states")
        data = {key: np.concatenate([data[key], new[key]]) for key in data}
        imitate(model, data, cfg, writer, cfg.seed + rnd + 1, progress, epochs=cfg.imitation.dagger_epochs)
        summary.setdefault("dagger_agreement", []).append(agreement)
        if on_eval is not None:
            on_eval(model.policy, "dagger", rnd + 1)
    writer.close()
    model.save(imitation_file)
    summary["imitation_samples_with_dagger"] = int(data["actions"].shape[0])
    summary["imitation_seconds"] = time.perf_counter() - t0
    return summary
