"""The RL phase on the batched engine: masked PPO with a POMO shared baseline (a CleanRL-style loop, CPU or CUDA).

Every update draws ``rl.instances`` fresh scenarios from the configured
families and plays each ``rl.rollouts`` times (K) in one
:class:`~gpu_env.batch.engine.BatchEngine`: ``instances * rollouts`` episodes
advance together, one torch call per decision for all of them. The return of
an episode is its plan's objective over the reward scale (the undiscounted sum
of its rewards). Following POMO (Kwon et al. 2020), the K rollouts of an
instance share a baseline: the advantage of every decision of an episode is its
return minus the mean return of the K rollouts of the same instance, so no
critic is needed and the signal is "better or worse than the policy's own
average on this very instance". Advantages are divided by their standard
deviation over the batch (which keeps them zero-mean per instance). The policy
then takes ``rl.epochs`` passes of PPO's clipped objective over the decisions
(those with more than one allowed action), in minibatches.

The phase starts from the network it is given: the imitation + DAgger warm
start of this run, or an exported policy's weights (``init_from``, read from
the ONNX file's initializers by :func:`load_onnx_weights`, no pickle). Every
``rl.eval_every`` engine steps the policy plans the fixed evaluation instances
and the best policy so far (by mean ratio to greedy) is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from agents.learned.config import TrainConfig, sampler_spec
from agents.learned.network import INPUTS, JobScorer
from gpu_env.batch import BatchEngine, Sizes
from gpu_env.batch.observe import observe
from gpu_env.observation import Limits
from gpu_env.sampler import ScenarioSampler

_NEG = -1e9


class ActorCritic(nn.Module):
    """The job scorer and the critic's last layer: the exported model's weights, under the same names.

    Args:
        hidden: Width of every embedding.
        value_features: Width of the critic's features.
    """

    def __init__(self, hidden: int = 64, value_features: int = 64) -> None:
        super().__init__()
        self.net = JobScorer(hidden, value_features)
        self.value_net = nn.Linear(value_features, 1)

    @property
    def features_extractor(self) -> ActorCritic:
        """``self``: so ``policy.features_extractor.net`` reads the same as on an SB3 policy."""
        return self

    @property
    def device(self) -> torch.device:
        """Where the weights are."""
        return next(self.parameters()).device

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, value) of a batch of observations in the order of ``INPUTS``."""
        logits, features = self.net(*inputs)
        return logits, self.value_net(features)


def from_sb3(policy: Any) -> ActorCritic:
    """A copy of an SB3 :class:`~agents.learned.network.JobScorerPolicy`'s weights as an :class:`ActorCritic`."""
    net = policy.features_extractor.net
    model = ActorCritic(net.hidden, net.value_features)
    model.net.load_state_dict(net.state_dict())
    model.value_net.load_state_dict(policy.value_net.state_dict())
    return model.to(policy.device)


def load_onnx_weights(path: str | Path) -> ActorCritic:
    """An :class:`ActorCritic` with the weights of an exported policy (its ONNX initializers).

    Named initializers load by name. The exporter folds the weights of linear
    layers applied to 3-D inputs into anonymous ``MatMul`` operands (transposed);
    each is named after the bias its ``MatMul`` output is added to.

    Raises:
        ValueError: The file's weights do not fill the network exactly (a different architecture).
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    weights = {name: value for name, value in init.items() if not name.startswith("onnx::")}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    for node in graph.node:
        if node.op_type != "MatMul" or node.input[1] not in init or not node.input[1].startswith("onnx::"):
            continue
        for add in consumers.get(node.output[0], []):
            bias = [name for name in add.input if name.endswith(".bias") and name in init]
            if add.op_type == "Add" and bias:
                weights[bias[0][: -len(".bias")] + ".weight"] = init[node.input[1]].T
    hidden = int(weights["net.job_embed.0.bias"].shape[0])
    value_features = int(weights["value_net.weight"].shape[1])
    policy = ActorCritic(hidden, value_features)
    expected = policy.state_dict()
    if set(weights) != set(expected) or any(weights[k].shape != tuple(expected[k].shape) for k in expected):
        missing = sorted(set(expected) - set(weights))
        raise ValueError(f"{path}: weights do not match the job scorer (missing {missing[:3]}, found {len(weights)})")
    policy.load_state_dict({k: torch.tensor(np.array(v, dtype=np.float32)) for k, v in weights.items()})
    return policy


def pomo_advantages(returns: np.ndarray, rollouts: int) -> np.ndarray:
    """Return minus the mean return of the same instance's rollouts (episodes grouped K by K, in order).

    Args:
        returns: (M * K,) returns; episodes ``i * K .. i * K + K - 1`` play instance i.
        rollouts: K.

    Returns:
        (M * K,) advantages, zero-mean within every group of K.
    """
    grouped = np.asarray(returns, dtype=np.float64).reshape(-1, rollouts)
    return (grouped - grouped.mean(axis=1, keepdims=True)).reshape(-1)


def sampled_advantages(returns: np.ndarray, rollouts: int, fixed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The POMO advantages of the sampled rollouts, and which episodes are sampled.

    The first ``fixed`` rollouts of each instance are not samples of the policy
    (rollout 0: its greedy decoding; rollout 1: the teacher's replay): they get
    advantage 0 and stay out of the shared baseline (the mean of the K - fixed samples).

    Returns:
        (M * K,) advantages and (M * K,) bool (True: a sampled rollout, trained on by the policy gradient).
    """
    grouped = np.asarray(returns, dtype=np.float64).reshape(-1, rollouts)
    sampled = np.ones_like(grouped, dtype=bool)
    sampled[:, :fixed] = False
    adv = np.zeros_like(grouped)
    rest = rollouts - fixed
    adv[:, fixed:] = pomo_advantages(grouped[:, fixed:].reshape(-1), rest).reshape(-1, rest)
    return adv.reshape(-1), sampled.reshape(-1)


def self_imitation_targets(returns: np.ndarray, rollouts: int, fixed: int = 0) -> np.ndarray:
    """Episodes to imitate: per instance, the best rollout after the greedy decoding, when it beats the reference.

    With ``fixed`` >= 1 the reference is rollout 0 (the policy's greedy decoding)
    and the candidates are rollouts 1..K-1 (the teacher's replay and the samples);
    with ``fixed`` = 0 the reference is the mean of the K rollouts. Ties go to the first.

    Returns:
        (M * K,) bool.
    """
    grouped = np.asarray(returns, dtype=np.float64).reshape(-1, rollouts)
    lo = 1 if fixed else 0
    best = lo + grouped[:, lo:].argmax(axis=1)
    rows = np.arange(grouped.shape[0])
    reference = grouped[:, 0] if fixed else grouped.mean(axis=1)
    out = np.zeros_like(grouped, dtype=bool)
    better = grouped[rows, best] > reference + 1e-9
    out[rows[better], best[better]] = True
    return out.reshape(-1)


def self_imitation_weights(imitate: torch.Tensor, episode: torch.Tensor, per_episode: bool) -> torch.Tensor:
    """Weight of each decision in the self-imitation loss.

    Args:
        imitate: (B,) bool, the episodes to imitate.
        episode: (N,) the episode of each decision.
        per_episode: Every imitated episode gets the same total weight (its decisions share it);
            else every decision of an imitated episode weighs 1.

    Returns:
        (N,) float32; the weights of imitated decisions average 1 in both cases.
    """
    weight = imitate.to(torch.float32)[episode]
    if not per_episode or not bool((weight > 0).any()):
        return weight
    counts = torch.bincount(episode, minlength=imitate.shape[0]).to(torch.float32)
    share = counts[imitate].sum() / imitate.sum()  # decisions per imitated episode, on average
    return weight * share / counts[episode]


def teacher_rollouts(scenarios: list[Any], sizes: Sizes) -> list[list[int]]:
    """Greedy's plan of each scenario replayed in the engine's FIT action space.

    The replay is :func:`~agents.learned.teacher.teacher_actions`'s, on a reference episode of the engine's layout.
    """
    from agents import greedy
    from agents.learned.teacher import teacher_actions
    from gpu_env.episode import ActionLayout, ActionMode, Episode

    layout = ActionLayout.make(ActionMode.FIT, sizes.jobs, sizes.gpus)
    return [teacher_actions(Episode(sc, layout), greedy.plan(sc)) for sc in scenarios]


def masked_log_probs(logits: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """Log-softmax over the allowed actions (forbidden ones get about -1e9)."""
    return torch.log_softmax(torch.where(masks, logits, torch.full_like(logits, _NEG)), dim=-1)


def engine_sizes(limits: Limits, cfg: TrainConfig) -> Sizes:
    """The engine's padded sizes: the policy's limits, grown to hold every training draw (2 x the horizon long)."""
    drawn = ScenarioSampler.from_spec(sampler_spec(cfg)).limits()
    grown = Limits(
        max_gpus=max(limits.max_gpus, drawn["max_gpus"]),
        max_jobs=max(limits.max_jobs, drawn["max_jobs"]),
        max_slots=max(limits.max_slots, drawn["max_slots"]),
        max_apps=max(limits.max_apps, drawn["max_apps"]),
    )
    return Sizes.from_limits(grown, 2 * grown.max_slots)


def collect(
    policy: ActorCritic,
    engine: BatchEngine,
    scenarios: list[Any],
    rollouts: int,
    generator: torch.Generator,
    greedy_first: bool = False,
    forced: dict[int, list[int]] | None = None,
) -> dict[str, Any]:
    """Play ``rollouts`` episodes of each scenario to the end; the decisions with a choice, and the returns.

    Args:
        policy: The policy.
        engine: An engine of ``len(scenarios) * rollouts`` episodes.
        scenarios: The instances; episodes ``i * K .. i * K + K - 1`` play scenario i.
        rollouts: K.
        generator: Torch generator of the sampled actions.
        greedy_first: Rollout 0 of every instance takes the most likely action (the planner's rollout 0).
        forced: Episode -> the actions it takes (the teacher's replay), in order.

    Returns:
        key -> tensor over the decisions (the inputs, ``masks``, ``actions``, ``log_probs``, ``episode``:
        which episode took each), ``returns`` (B,): objectives over the reward scale, ``objectives`` (B,)
        and ``steps`` (engine steps).
    """
    device = policy.device
    engine.reset([sc for sc in scenarios for _ in range(rollouts)])
    B = engine.batch
    returns = np.zeros(B)
    kept: dict[str, list[Any]] = {k: [] for k in (*INPUTS, "masks", "actions", "log_probs", "episode")}
    steps = 0
    taken = np.zeros(B, dtype=np.int64)
    forced = forced or {}
    while not engine.state.done.all():
        alive = np.flatnonzero(~engine.state.done)
        obs = observe(engine, INPUTS)
        masks = engine.action_masks()[alive]
        with torch.no_grad():
            tensors = [torch.as_tensor(obs[k][alive], device=device) for k in INPUTS]
            mask_t = torch.as_tensor(masks, device=device)
            logp = masked_log_probs(policy.net(*tensors)[0], mask_t)
            chosen = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
            if greedy_first:
                first = torch.as_tensor(alive % rollouts == 0, device=device)
                chosen = torch.where(first, logp.argmax(dim=1), chosen)
            if forced:
                replay = [(j, forced[int(e)][taken[e]]) for j, e in enumerate(alive) if int(e) in forced]
                if replay:
                    rows, acts = zip(*replay, strict=True)
                    chosen[list(rows)] = torch.as_tensor(acts, device=device)
            chosen_logp = logp.gather(1, chosen[:, None]).squeeze(1)
        actions = np.full(B, engine.n_actions - 1, dtype=np.int64)
        actions[alive] = chosen.cpu().numpy()
        rewards, _ = engine.step(actions)
        taken[alive] += 1
        returns[alive] += rewards[alive]
        steps += alive.size
        choice = masks.sum(axis=1) > 1  # one allowed action: nothing to learn
        if choice.any():
            pick = torch.as_tensor(np.flatnonzero(choice), device=device)
            for key, tensor in zip(INPUTS, tensors, strict=True):
                kept[key].append(tensor[pick])
            kept["masks"].append(mask_t[pick])
            kept["actions"].append(chosen[pick])
            kept["log_probs"].append(chosen_logp[pick])
            kept["episode"].append(torch.as_tensor(alive[choice], device=device))
    out: dict[str, Any] = {key: torch.cat(values) for key, values in kept.items()}
    out["returns"] = returns / engine.state.reward_scale
    out["objectives"] = engine.state.objective.copy()
    out["steps"] = steps
    return out


def fixed_rollouts(cfg: TrainConfig) -> int:
    """Leading rollouts per instance that are not samples: the greedy decoding (with self-imitation), the teacher."""
    return (1 if cfg.rl.self_imitation > 0 else 0) + (1 if cfg.rl.teacher else 0)


def ppo_update(
    policy: ActorCritic,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, Any],
    cfg: TrainConfig,
    rng: np.random.Generator,
) -> dict[str, float]:
    """PPO's clipped objective with the POMO advantages, ``rl.epochs`` passes in minibatches.

    Returns:
        Mean loss, entropy, approximate KL and clip fraction of the last pass.
    """
    r = cfg.rl
    fixed = fixed_rollouts(cfg)
    adv_episode, sampled = sampled_advantages(batch["returns"], r.rollouts, fixed)
    adv_episode = adv_episode / (adv_episode[sampled].std() + 1e-8)
    imitate = self_imitation_targets(batch["returns"], r.rollouts, fixed)
    device = policy.device
    advantages = torch.as_tensor(adv_episode, dtype=torch.float32, device=device)[batch["episode"]]
    pg_weight = torch.as_tensor(sampled, dtype=torch.float32, device=device)[batch["episode"]]
    sil_weight = self_imitation_weights(torch.as_tensor(imitate, device=device), batch["episode"], r.per_episode)
    n = advantages.shape[0]
    stats: dict[str, list[float]] = {"loss": [], "entropy": [], "approx_kl": [], "clip_fraction": [], "sil_loss": []}
    for _ in range(r.epochs):
        stats = {key: [] for key in stats}
        order = torch.as_tensor(rng.permutation(n), device=device)
        for lo in range(0, n, r.minibatch):
            idx = order[lo : lo + r.minibatch]
            logits = policy.net(*(batch[k][idx] for k in INPUTS))[0]
            logp_all = masked_log_probs(logits, batch["masks"][idx])
            logp = logp_all.gather(1, batch["actions"][idx, None]).squeeze(1)
            ratio = (logp - batch["log_probs"][idx]).exp()
            adv = advantages[idx]
            clipped = ratio.clamp(1 - r.clip_range, 1 + r.clip_range)
            w = pg_weight[idx]
            pg_loss = -(torch.min(ratio * adv, clipped * adv) * w).sum() / w.sum().clamp(min=1.0)
            sil = sil_weight[idx]
            sil_loss = -(logp * sil).sum() / (sil > 0).sum().clamp(min=1)
            p = logp_all.exp()
            entropy = -(p * torch.where(batch["masks"][idx], logp_all, torch.zeros_like(logp_all))).sum(-1).mean()
            loss = r.pg_coef * pg_loss + r.self_imitation * sil_loss - r.ent_coef * entropy
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), r.max_grad_norm)
            optimizer.step()
            with torch.no_grad():
                log_ratio = logp - batch["log_probs"][idx]
                stats["approx_kl"].append(float(((ratio - 1) - log_ratio).mean()))
                stats["clip_fraction"].append(float(((ratio - 1).abs() > r.clip_range).float().mean()))
            stats["loss"].append(loss.item())
            stats["entropy"].append(entropy.item())
            stats["sil_loss"].append(sil_loss.item())
    return {key: float(np.mean(values)) if values else 0.0 for key, values in stats.items()}


def train_rl(
    policy: ActorCritic,
    cfg: TrainConfig,
    limits: Limits,
    evaluate: Callable[[ActorCritic, str, int], dict[str, float]],
    writer: Any,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the RL phase for ``rl.steps`` engine steps; returns its summary and the best policy's state.

    Args:
        policy: The starting policy (trained in place).
        cfg: The run's config (``rl`` section, families, seed).
        limits: The policy's observation limits (the engine pads at least to them).
        evaluate: ``(policy, phase, step) -> results``; logs and records one evaluation.
        writer: A TensorBoard ``SummaryWriter`` for the training scalars.
        progress: Print a line per evaluation.

    Returns:
        ``rl_steps``, ``rl_seconds``, ``rl_steps_per_second`` (engine steps per second, updates included),
        ``rl_updates``, ``rl_start_eval``, ``rl_best_eval`` and ``best_state`` (a state dict).
    """
    r = cfg.rl
    sampler = ScenarioSampler.from_spec(sampler_spec(cfg))
    rng = np.random.default_rng(cfg.seed + 7)
    generator = torch.Generator(device=policy.device).manual_seed(cfg.seed + 7)
    engine = BatchEngine(r.instances * r.rollouts, engine_sizes(limits, cfg))
    optimizer = torch.optim.Adam(policy.parameters(), lr=r.learning_rate, eps=1e-5)
    start = evaluate(policy, "rl", 0)
    best_score, best_state = start["mean_vs_greedy"], _copy_state(policy)
    steps, updates, next_eval = 0, 0, r.eval_every
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    while steps < r.steps:
        scenarios = [sampler.draw(rng) for _ in range(r.instances)]
        forced = {}
        if r.teacher:
            slot = fixed_rollouts(cfg) - 1
            for i, actions in enumerate(teacher_rollouts(scenarios, engine.sizes)):
                forced[i * r.rollouts + slot] = actions
        greedy_first = r.self_imitation > 0
        batch = collect(policy, engine, scenarios, r.rollouts, generator, greedy_first=greedy_first, forced=forced)
        stats = ppo_update(policy, optimizer, batch, cfg, rng)
        steps += batch["steps"]
        updates += 1
        grouped = batch["returns"].reshape(-1, r.rollouts)
        writer.add_scalar("rl/mean_return", float(grouped.mean()), steps)
        writer.add_scalar("rl/best_of_k_gain", float((grouped.max(1) - grouped.mean(1)).mean()), steps)
        writer.add_scalar("rl/first_rollout_return", float(grouped[:, 0].mean()), steps)
        writer.add_scalar("rl/best_beats_first", float((grouped[:, 1:].max(1) > grouped[:, 0] + 1e-9).mean()), steps)
        if r.teacher:
            slot = fixed_rollouts(cfg) - 1
            writer.add_scalar("rl/teacher_return", float(grouped[:, slot].mean()), steps)
            writer.add_scalar("rl/first_vs_teacher", float(grouped[:, 0].mean() / grouped[:, slot].mean()), steps)
        for key, value in stats.items():
            writer.add_scalar(f"rl/{key}", value, steps)
        writer.add_scalar("rl/steps_per_second", steps / max(time.perf_counter() - t0, 1e-9), steps)
        if steps >= next_eval or steps >= r.steps:
            next_eval = steps + r.eval_every
            result = evaluate(policy, "rl", steps)
            if result["mean_vs_greedy"] > best_score:
                best_score, best_state = result["mean_vs_greedy"], _copy_state(policy)
            if progress:
                rate = steps / (time.perf_counter() - t0)
                print(
                    f"rl {steps} steps ({rate:.0f}/s), eval mean vs greedy {result['mean_vs_greedy']:.4f}"
                    f" (best {best_score:.4f}), kl {stats['approx_kl']:.4f}",
                    flush=True,
                )
    seconds = time.perf_counter() - t0
    return {
        "rl_steps": steps,
        "rl_updates": updates,
        "rl_seconds": seconds,
        "rl_cpu_seconds": time.process_time() - cpu0,
        "rl_steps_per_second": steps / seconds if seconds > 0 else None,
        "rl_start_eval": start,
        "rl_best_mean_vs_greedy": best_score,
        "best_state": best_state,
    }


def _copy_state(policy: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().cpu() for k, v in policy.state_dict().items()}
