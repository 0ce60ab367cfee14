"""Training the queue scorer: imitation of proven optima, then self-labelling and PPO on the compiled decoder.

Every phase works on *labels*: for each training instance, the best job order
(and trade mode) known so far, with the objective the decoder reaches with it.

1. **Labels to start from.** Where CP-SAT proved an optimum
   (:mod:`lab.training.optima`), its plan replayed into the list action space:
   the placed jobs by start (then first GPU), the others after them by value
   (:func:`order_from_plan`). Everywhere, greedy's weight, value, density and
   deadline orders too (:func:`greedy_orders`); the best decode of them is the instance's first label.
2. **Imitation.** The scorer is fitted to the labels by ListMLE: the
   Plackett-Luce likelihood of the label order (:func:`lab.training.scorer.order_log_prob`),
   and the mode logit to the label's mode.
3. **Self-labelling and PPO.** Each round draws K orders per instance from the
   current scores (Gumbel-top-k: Plackett-Luce samples) and a mode each,
   decodes them all in one compiled call per instance, and replaces a label
   when a draw beats it (SLIM's self-labelling). The draws are stored with
   their log-probabilities (:func:`draw_log_prob`) and their advantages: the
   reward less the mean of the instance's K draws (POMO's shared baseline)
   (:func:`collect_draws`). Then several epochs of PPO over them in batches of
   instances of similar length, the advantages normalised over each batch
   (:func:`ppo_round`): ListMLE on the labels plus the clipped
   surrogate (:func:`clipped_surrogate`), the old log-probabilities fixed.
   :func:`self_label_round` is the former step, kept for the comparison
   (``rl.algorithm: pomo``): one REINFORCE step per batch against the same
   baseline, the draws used once.
4. **Curriculum over sizes.** Later stages add larger clusters (128-1,024 GPUs),
   where no optimum is known and the labels come from greedy's orders and the
   policy's own best draws.

Everything is seeded: the instances, the draws and torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from gpu_env.generators import generate
from gpu_env.listsched import MODE_AFTER, MODE_INLINE, ListInstance, decode
from gpu_env.queue_features import cluster_features, job_features
from gpu_env.scenario import Scenario
from lab.training.scorer import QueueScorer, order_log_prob
from lab.training.train_config import RLConfig, draw_specs


@dataclass
class Item:
    """One training instance with its features and its label.

    Attributes:
        scenario: The scenario.
        inst: Its decoder arrays.
        jobs: (n, F) job features.
        cluster: (C,) cluster features.
        pending: (m,) indices of the jobs to order.
        scale: Objective scale, ``|greedy's objective|`` (at least 1e-6): rewards and the evaluation's ratios
            are objective / scale (a ratio to greedy where greedy's objective is positive, as on every
            generated family measured).
        label: (m,) the best order known.
        label_mode: Its trade mode.
        label_objective: The decoder's objective with it.
        optimum: The proven optimum's objective, when CP-SAT proved one.
        greedy: Greedy's objective (the heuristic as shipped).
    """

    scenario: Scenario
    inst: ListInstance
    jobs: np.ndarray
    cluster: np.ndarray
    pending: np.ndarray
    scale: float
    label: np.ndarray
    label_mode: int
    label_objective: float
    optimum: float | None = None
    greedy: float = 0.0


def order_from_plan(inst: ListInstance, placements: np.ndarray) -> np.ndarray:
    """A plan's jobs as a list-scheduling order: placed ones by (start, first GPU), then the rest by value.

    Args:
        inst: The scenario's decoder arrays.
        placements: (p, 3) rows of (job index, start, first GPU) of the placed non-inherited jobs.

    Returns:
        (m,) every pending job once.
    """
    placed = {int(j): (int(t), int(a)) for j, t, a in np.asarray(placements, dtype=np.int64).reshape(-1, 3)}
    pending = np.flatnonzero(inst.pending)
    first = sorted((j for j in pending if j in placed), key=lambda j: (*placed[j], j))
    rest = sorted((j for j in pending if j not in placed), key=lambda j: (-inst.first_value[j], j))
    return np.array(first + rest, dtype=np.int64)


def greedy_orders(scenario: Scenario) -> list[list[int]]:
    """Greedy's weight, value, density and deadline orders of a scenario (:func:`agents.greedy.orderings`)."""
    from agents import greedy

    return greedy.orderings(scenario, ("weight", "value", "density", "deadline"))


def prepare(scenario: Scenario, placements: np.ndarray | None = None, optimum: float | None = None) -> Item:
    """An instance with its features and its first label (the best decode of the optimum's and greedy's orders)."""
    from agents import greedy

    inst = ListInstance.build(scenario)
    orders = [np.array(o, dtype=np.int64) for o in greedy_orders(scenario)]
    if placements is not None:
        orders.insert(0, order_from_plan(inst, placements))
    pending = np.flatnonzero(inst.pending)
    m = pending.size
    rows = np.array([np.asarray(o, dtype=np.int64)[:m] for o in orders for _ in (0, 1)]).reshape(-1, m)
    modes = np.array([mode for _ in orders for mode in (MODE_INLINE, MODE_AFTER)], dtype=np.int64)
    decoded = decode(inst, rows, modes)
    b = decoded.best
    g = greedy.solve(scenario).objective
    return Item(
        scenario=scenario,
        inst=inst,
        jobs=job_features(scenario, inst),
        cluster=cluster_features(scenario, inst),
        pending=pending,
        scale=max(abs(g), 1e-6),
        label=rows[b].copy(),
        label_mode=int(modes[b]),
        label_objective=float(decoded.objective[b]),
        optimum=optimum,
        greedy=float(g),
    )


def draw_scenarios(families: dict[str, float], sizes: Sequence[int], count: int, seed: int) -> list[Scenario]:
    """The scenarios of :func:`draw_specs`."""
    return [generate(fam, seed=s, gpus=gpus) for fam, s, gpus in draw_specs(families, sizes, count, seed)]


# ----------------------------------------------------------------------------- batches


def collate(
    items: Sequence[Item], device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Padded (B, n, F) job features, (B, n) mask of pending jobs and (B, C) cluster features, on ``device``."""
    n = max(it.jobs.shape[0] for it in items)
    F = items[0].jobs.shape[1]
    jobs = np.zeros((len(items), n, F), dtype=np.float32)
    mask = np.zeros((len(items), n), dtype=np.float32)
    for b, it in enumerate(items):
        jobs[b, : it.jobs.shape[0]] = it.jobs
        mask[b, it.pending] = 1.0
    cluster = np.stack([it.cluster for it in items])
    return tuple(torch.from_numpy(x).to(device) for x in (jobs, mask, cluster))  # type: ignore[return-value]


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """One gradient step on ``loss``, the gradient's norm clipped to 1."""
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def pad_orders(orders: Sequence[np.ndarray], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    L = max(max((o.size for o in orders), default=0), 1)
    out = np.zeros((len(orders), L), dtype=np.int64)
    lengths = np.zeros(len(orders), dtype=np.int64)
    for i, o in enumerate(orders):
        out[i, : o.size] = o
        lengths[i] = o.size
    return torch.from_numpy(out).to(device), torch.from_numpy(lengths).to(device)


def imitation_loss(model: QueueScorer, items: Sequence[Item]) -> torch.Tensor:
    """Mean ListMLE of the labels (per job, so long queues do not dominate) plus the mode's cross-entropy."""
    dev = _device(model)
    scores, mode = model(*collate(items, dev))
    return _label_loss(scores, mode, items)


def _label_loss(scores: torch.Tensor, mode: torch.Tensor, items: Sequence[Item]) -> torch.Tensor:
    """:func:`imitation_loss` on scores and mode logits the model already gave for ``items``."""
    dev = scores.device
    orders, lengths = pad_orders([it.label for it in items], dev)
    logp = order_log_prob(scores, orders, lengths) / lengths.clamp(min=1)
    target = torch.tensor([1.0 if it.label_mode == MODE_AFTER else 0.0 for it in items], device=dev)
    mode_loss = torch.nn.functional.binary_cross_entropy_with_logits(mode, target)
    return -logp.mean() + 0.1 * mode_loss


def sample_orders(
    scores: np.ndarray, pending: np.ndarray, k: int, rng: np.random.Generator, temperature: float
) -> np.ndarray:
    """(k, m) Gumbel-top-k orders of the pending jobs under ``scores`` (n,)."""
    s = scores[pending].astype(np.float64)
    g = -np.log(-np.log(rng.random((k, pending.size)) + 1e-300) + 1e-300)
    return pending[np.argsort(-(s[None] + temperature * g), axis=1, kind="stable")]


@dataclass
class RoundStats:
    """What one self-labelling round did."""

    improved: int = 0
    mean_gain: float = 0.0  # mean over instances of (the K draws' best - the label before the round) / scale
    loss: float = 0.0


def self_label_round(
    model: QueueScorer,
    optimizer: torch.optim.Optimizer,
    items: Sequence[Item],
    k: int,
    rng: np.random.Generator,
    temperature: float,
    pg_coef: float,
    batch: int,
) -> RoundStats:
    """Draw k orders per instance, decode, update labels, and take ListMLE + POMO steps over the items."""
    stats = RoundStats()
    ratios = []
    dev = _device(model)
    model.train()
    for lo in range(0, len(items), batch):
        chunk = items[lo : lo + batch]
        jobs, mask, cluster = collate(chunk, dev)
        scores, mode_logit = model(jobs, mask, cluster)
        s_np = scores.detach().cpu().numpy()
        p_after = torch.sigmoid(mode_logit).detach().cpu().numpy()
        all_orders, all_modes, rewards = [], [], []
        for b, it in enumerate(chunk):
            orders = sample_orders(s_np[b], it.pending, k, rng, temperature)
            modes = np.where(rng.random(k) < p_after[b], MODE_AFTER, MODE_INLINE).astype(np.int64)
            dec = decode(it.inst, orders, modes)
            best = dec.best
            ratios.append(float(dec.objective[best]) / it.scale - it.label_objective / it.scale)
            if dec.objective[best] > it.label_objective + 1e-9:
                it.label = orders[best].copy()
                it.label_mode = int(modes[best])
                it.label_objective = float(dec.objective[best])
                stats.improved += 1
            all_orders.append(orders)
            all_modes.append(modes)
            rewards.append(dec.objective / it.scale)
        loss = _label_loss(scores, mode_logit, chunk)  # the labels as this round left them
        if pg_coef > 0:
            reward = torch.tensor(np.stack(rewards), dtype=torch.float32, device=dev)  # (B, k)
            adv = reward - reward.mean(dim=1, keepdim=True)
            adv = adv / (adv.std() + 1e-6)
            B = len(chunk)
            flat = [o for orders in all_orders for o in orders]
            orders_t, lengths = pad_orders(flat, dev)
            rep = scores.repeat_interleave(k, dim=0)
            logp = order_log_prob(rep, orders_t, lengths).view(B, k) / lengths.view(B, k).clamp(min=1)
            after = torch.tensor(np.stack(all_modes) == MODE_AFTER, dtype=torch.float32, device=dev)
            logp_mode = -torch.nn.functional.binary_cross_entropy_with_logits(
                mode_logit.unsqueeze(1).expand(B, k), after, reduction="none"
            )
            pg = -((logp + logp_mode) * adv).mean()
            loss = loss + pg_coef * pg
        _step(model, optimizer, loss)
        stats.loss += float(loss.detach()) * len(chunk)
    stats.loss /= max(len(items), 1)
    stats.mean_gain = float(np.mean(ratios)) if ratios else 0.0
    return stats


@dataclass
class Draws:
    """One instance's draws of a PPO round, stored for the epochs over them.

    Attributes:
        orders: (k, m) the drawn orders.
        after: (k,) 1.0 where the draw's mode is :data:`~gpu_env.listsched.MODE_AFTER`.
        reward: (k,) objective / scale of each draw.
        advantage: (k,) reward less the group's mean (POMO's shared baseline); :func:`ppo_round` divides it by
            the standard deviation of those over each batch.
        old_log_prob: (k,) log-probability of each draw (order and mode) under the policy that drew it,
            per job where ``RLConfig.ratio`` is ``job``.
    """

    orders: np.ndarray
    after: np.ndarray
    reward: np.ndarray
    advantage: np.ndarray
    old_log_prob: np.ndarray | None


@dataclass
class PPOStats(RoundStats):
    """What one PPO round did, beside the self-labelling (the TensorBoard scalars ``ppo/*``)."""

    surrogate: float = 0.0  # mean clipped surrogate objective (to be maximised) over the epochs
    clip_fraction: float = 0.0  # share of draws whose ratio left [1 - clip, 1 + clip], over the epochs
    approx_kl: float = 0.0  # mean of (ratio - 1) - log ratio over the last epoch: KL(old || new), estimated
    explained_variance: float = 0.0  # 1 - Var(reward - group mean) / Var(reward) over the round's draws
    entropy: float = 0.0  # mean entropy of the first pick (per log of the pending jobs) and of the mode


def draw_log_prob(
    scores: torch.Tensor,
    mode_logit: torch.Tensor,
    orders: torch.Tensor,
    lengths: torch.Tensor,
    after: torch.Tensor,
    temperature: float,
    per_job: bool,
) -> torch.Tensor:
    """Log-probability of drawn (order, mode) pairs under the policy that draws them.

    An order is a Plackett-Luce draw from ``scores / temperature`` (:func:`sample_orders`' Gumbel-top-k), the mode
    a Bernoulli draw from ``sigmoid(mode_logit)``.

    Args:
        scores: (D, n) scores, one row per draw.
        mode_logit: (D,) mode logits.
        orders: (D, L) padded orders.
        lengths: (D,) jobs per order.
        after: (D,) 1.0 where the draw's mode is ``after``.
        temperature: The Gumbel temperature.
        per_job: Divide the order's log-probability by its number of jobs.

    Returns:
        (D,) log-probabilities.
    """
    logp = order_log_prob(scores / temperature, orders, lengths)
    if per_job:
        logp = logp / lengths.clamp(min=1)
    mode = -torch.nn.functional.binary_cross_entropy_with_logits(mode_logit, after, reduction="none")
    return logp + mode


def clipped_surrogate(log_ratio: torch.Tensor, advantage: torch.Tensor, clip: float) -> torch.Tensor:
    """PPO's clipped surrogate objective (to be maximised): mean of min(r A, clip(r, 1 - clip, 1 + clip) A)."""
    ratio = log_ratio.exp()
    return torch.min(ratio * advantage, ratio.clamp(1.0 - clip, 1.0 + clip) * advantage).mean()


def _entropy(scores: torch.Tensor, mode_logit: torch.Tensor, mask: torch.Tensor, temperature: float) -> torch.Tensor:
    """(B,) entropy of the first pick (divided by the log of the pending jobs) plus that of the mode."""
    logp = torch.log_softmax(scores / temperature, dim=1)
    first = -(logp.exp() * torch.where(mask > 0, logp, torch.zeros_like(logp))).sum(dim=1)
    first = first / torch.log(mask.sum(dim=1).clamp(min=2.0))
    p = torch.sigmoid(mode_logit)
    mode = torch.nn.functional.binary_cross_entropy_with_logits(mode_logit, p.detach(), reduction="none")
    return first + mode


def collect_draws(
    model: QueueScorer,
    items: Sequence[Item],
    k: int,
    rng: np.random.Generator,
    temperature: float,
    batch: int,
    per_job: bool,
    stats: RoundStats,
) -> list[Draws]:
    """Draw and decode k orders per instance with the current policy; a draw beating its label replaces it.

    The draws' rewards, advantages (against the instance's group) and log-probabilities are stored for
    :func:`ppo_round`'s epochs; ``stats`` counts the improved labels.
    """
    dev = _device(model)
    model.eval()
    out: list[Draws] = []
    gains = []
    with torch.no_grad():
        for lo in range(0, len(items), batch):
            chunk = items[lo : lo + batch]
            scores, mode_logit = model(*collate(chunk, dev))
            s_np = scores.cpu().numpy()
            p_after = torch.sigmoid(mode_logit).cpu().numpy()
            drawn = []
            for b, it in enumerate(chunk):
                orders = sample_orders(s_np[b], it.pending, k, rng, temperature)
                modes = np.where(rng.random(k) < p_after[b], MODE_AFTER, MODE_INLINE).astype(np.int64)
                dec = decode(it.inst, orders, modes)
                best = dec.best
                gains.append(float(dec.objective[best] - it.label_objective) / it.scale)
                if dec.objective[best] > it.label_objective + 1e-9:
                    it.label = orders[best].copy()
                    it.label_mode = int(modes[best])
                    it.label_objective = float(dec.objective[best])
                    stats.improved += 1
                reward = dec.objective / it.scale
                after = (modes == MODE_AFTER).astype(np.float32)
                drawn.append(Draws(orders, after, reward, reward - reward.mean(), None))
            orders_t, lengths = pad_orders([o for d in drawn for o in d.orders], dev)
            logp = draw_log_prob(
                scores.repeat_interleave(k, dim=0),
                mode_logit.repeat_interleave(k),
                orders_t,
                lengths,
                torch.from_numpy(np.concatenate([d.after for d in drawn])).to(dev),
                temperature,
                per_job,
            )
            for d, row in zip(drawn, logp.view(len(chunk), k).cpu().numpy(), strict=True):
                d.old_log_prob = row
            out += drawn
    stats.mean_gain = float(np.mean(gains)) if gains else 0.0
    return out


def explained_variance(rewards: Sequence[np.ndarray]) -> float:
    """1 - Var(reward - group mean) / Var(reward) over every draw: the share of the rewards' spread explained.

    The baseline of a draw is the mean of its instance's group (POMO's shared baseline): 1 where the draws of an
    instance never differ, 0 where the baselines explain nothing.
    """
    r = np.concatenate(list(rewards)) if rewards else np.zeros(0)
    if r.size < 2 or not r.var() > 0:
        return 0.0
    residual = np.concatenate([x - x.mean() for x in rewards])
    return float(1.0 - residual.var() / r.var())


def ppo_round(
    model: QueueScorer,
    optimizer: torch.optim.Optimizer,
    items: Sequence[Item],
    k: int,
    rng: np.random.Generator,
    temperature: float,
    pg_coef: float,
    batch: int,
    rl: RLConfig,
) -> PPOStats:
    """One self-labelling round with PPO: draw and store, then ``rl.epochs`` passes of the clipped surrogate.

    Each pass takes the batches of ``batch`` instances of similar length in a new order; a step's loss is ListMLE
    on the labels (as the draws left them) plus ``pg_coef`` times the negated clipped surrogate, less
    ``rl.entropy_coef`` times the entropy. The old log-probabilities are those of the policy that drew.
    """
    stats = PPOStats()
    per_job = rl.ratio == "job"
    draws = collect_draws(model, items, k, rng, temperature, batch, per_job, stats)
    stats.explained_variance = explained_variance([d.reward for d in draws])
    dev = _device(model)
    model.train()
    # Batches of instances of similar length (an order is padded to its batch's longest), in a new order each epoch.
    by_length = np.argsort([it.pending.size for it in items], kind="stable")
    batches = [by_length[lo : lo + batch] for lo in range(0, len(items), batch)]
    steps = clipped = seen = 0
    for _ in range(rl.epochs):
        kl_sum, kl_n = 0.0, 0
        for b in rng.permutation(len(batches)):
            idx = batches[b]
            chunk = [items[i] for i in idx]
            jobs, mask, cluster = collate(chunk, dev)
            scores, mode_logit = model(jobs, mask, cluster)
            loss = _label_loss(scores, mode_logit, chunk)
            flat = [o for i in idx for o in draws[i].orders]
            orders_t, lengths = pad_orders(flat, dev)
            counts = torch.tensor([draws[i].orders.shape[0] for i in idx], device=dev)
            after = torch.from_numpy(np.concatenate([draws[i].after for i in idx])).to(dev)
            new = draw_log_prob(
                scores.repeat_interleave(counts, dim=0),
                mode_logit.repeat_interleave(counts),
                orders_t,
                lengths,
                after,
                temperature,
                per_job,
            )
            old = torch.from_numpy(np.concatenate([draws[i].old_log_prob for i in idx])).to(dev)
            centred = np.concatenate([draws[i].advantage for i in idx])
            # Normalised over the batch, whose instances have similar lengths: over the whole round, the small
            # instances' spread would drown the large ones' (POMO's step normalised over its batch too).
            adv = torch.from_numpy((centred / (centred.std() + 1e-6)).astype(np.float32)).to(dev)
            log_ratio = new - old
            ratio = log_ratio.exp()
            surrogate = clipped_surrogate(log_ratio, adv, rl.clip)
            entropy = _entropy(scores, mode_logit, mask, temperature).mean()
            loss = loss - pg_coef * surrogate - rl.entropy_coef * entropy
            _step(model, optimizer, loss)
            with torch.no_grad():
                clipped += int(((ratio - 1.0).abs() > rl.clip).sum())
                seen += ratio.numel()
                kl_sum += float(((ratio - 1.0) - log_ratio).sum())
                kl_n += ratio.numel()
            steps += 1
            stats.loss += float(loss.detach()) * len(chunk)
            stats.surrogate += float(surrogate.detach())
            stats.entropy += float(entropy.detach())
        stats.approx_kl = kl_sum / max(kl_n, 1)
    stats.loss /= max(len(items) * rl.epochs, 1)
    stats.surrogate /= max(steps, 1)
    stats.entropy /= max(steps, 1)
    stats.clip_fraction = clipped / max(seen, 1)
    return stats


def reinforce_round(
    model: QueueScorer,
    optimizer: torch.optim.Optimizer,
    items: Sequence[Item],
    k: int,
    rng: np.random.Generator,
    temperature: float,
    pg_coef: float,
    batch: int,
    rl: RLConfig,
) -> RoundStats:
    """One self-labelling round with the step ``rl.algorithm`` names: :func:`ppo_round` or :func:`self_label_round`."""
    if rl.algorithm == "ppo":
        return ppo_round(model, optimizer, items, k, rng, temperature, pg_coef, batch, rl)
    return self_label_round(model, optimizer, items, k, rng, temperature, pg_coef, batch)


def fit_imitation(
    model: QueueScorer, optimizer: torch.optim.Optimizer, items: Sequence[Item], epochs: int, batch: int, seed: int
) -> list[float]:
    """Epochs of ListMLE on the labels; returns the mean loss per epoch."""
    rng = np.random.default_rng(seed)
    losses = []
    model.train()
    for _ in range(epochs):
        perm = rng.permutation(len(items))
        total = 0.0
        for lo in range(0, len(items), batch):
            chunk = [items[i] for i in perm[lo : lo + batch]]
            loss = imitation_loss(model, chunk)
            _step(model, optimizer, loss)
            total += float(loss.detach()) * len(chunk)
        losses.append(total / max(len(items), 1))
    return losses


# ----------------------------------------------------------------------------- evaluation


@dataclass
class Evaluation:
    """The policy on held-out instances, as ratios to greedy's objective (per instance, then the mean)."""

    alone: float  # one candidate: the argmax order in the preferred mode, with the decoder's promotion pass
    shipped: float  # ``samples`` candidates
    below_greedy: int  # instances where ``samples`` candidates fall below greedy
    per_family: dict[str, tuple[float, float]] = field(default_factory=dict)


def evaluate_policy(
    model: QueueScorer, items: Sequence[Item], samples: int, temperature: float, seed: int = 0
) -> Evaluation:
    """Decode the argmax order and ``samples`` candidates as the planner does (:func:`agents.ppo.candidate_orders`)."""
    from agents.ppo import PROMOTE_ROUNDS, candidate_orders

    model.eval()
    dev = _device(model)
    alone, shipped, below = [], [], 0
    fam: dict[str, list[tuple[float, float]]] = {}
    with torch.no_grad():
        for it in items:
            jobs, mask, cluster = collate([it], dev)
            scores, mode = model(jobs, mask, cluster)
            orders, modes = candidate_orders(
                scores[0].cpu().numpy(), float(mode[0]), it.inst.pending, samples, seed, temperature
            )
            dec = decode(it.inst, orders, modes, promote_rounds=PROMOTE_ROUNDS)
            a = float(decode(it.inst, orders[:1], modes[:1], promote_rounds=PROMOTE_ROUNDS).objective[0]) / it.scale
            s = float(dec.objective.max()) / it.scale
            alone.append(a)
            shipped.append(s)
            below += float(dec.objective.max()) < it.greedy - 1e-9 * max(1.0, abs(it.greedy))
            fam.setdefault(it.scenario.family or it.scenario.name, []).append((a, s))
    return Evaluation(
        alone=float(np.mean(alone)),
        shipped=float(np.mean(shipped)),
        below_greedy=int(below),
        per_family={f: (float(np.mean([x[0] for x in v])), float(np.mean([x[1] for x in v]))) for f, v in fam.items()},
    )


def seed_everything(seed: int) -> None:
    """Seed torch (numpy draws take their own generators)."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)


__all__ = [
    "Draws",
    "Evaluation",
    "Item",
    "PPOStats",
    "RoundStats",
    "clipped_surrogate",
    "collate",
    "collect_draws",
    "draw_log_prob",
    "draw_scenarios",
    "draw_specs",
    "evaluate_policy",
    "explained_variance",
    "fit_imitation",
    "imitation_loss",
    "order_from_plan",
    "ppo_round",
    "prepare",
    "reinforce_round",
    "sample_orders",
    "seed_everything",
    "self_label_round",
]
