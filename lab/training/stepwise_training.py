"""Training the stepwise policy (:mod:`gpu_env.stepwise`): imitation of the optima's orders, then PPO.

The network (:class:`StepScorer`) has two parts. Its **static** part maps each job's
:data:`~gpu_env.queue_features.JOB_FEATURES` and the :data:`~gpu_env.queue_features.CLUSTER_FEATURES` to a hidden
row, once per plan; its **step head** (``w_step``, ``w_out``, ``b_out``) adds the job's
:data:`~gpu_env.stepwise.STEP_FEATURES` at each turn inside the compiled decoder and scores it. Training runs the
compiled rollouts (:func:`gpu_env.stepwise.roll`) and computes the same scores in torch from what they recorded.

1. **Imitation.** Each turn of a rollout forced along the best order known for an instance (the decoder's best of
   the CP-SAT optimum's order and greedy's orders, :func:`lab.training.training.prepare`) is labelled with the
   window's job that comes first in that order; cross-entropy over the window.
2. **PPO.** Per instance, ``rollouts`` candidates are sampled from the policy (softmax over the window, Gumbel-max
   in the compiled rollout); each turn's advantage is its episode's objective less the mean of the instance's
   rollouts, over greedy's objective (a shared baseline, as POMO's); the clipped surrogate is maximised for a few
   epochs, with an entropy bonus. With ``multi_start`` (POMO's multiple starts) each pair of rollouts forces a first
   job from the window; that forced turn is left out of the loss.

The checkpoint kept is the one whose one-decode plans (argmax, promoted) earn most on validation draws; it is
exported by :func:`export_stepwise` (ONNX with a card).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from agents.ppo_stepwise import CARD_FORMAT, INPUTS, OUTPUTS, observation_spec, priority_base
from gpu_env import stepwise
from gpu_env.files import atomic_path
from gpu_env.listsched import MODE_AFTER, MODE_INLINE, decode
from gpu_env.queue_features import CLUSTER_FEATURES, JOB_FEATURES
from gpu_env.scenario import Scenario
from gpu_env.stepwise import STEP_FEATURES, StepHead
from lab.training.export import write_card
from lab.training.training import Item, clipped_surrogate, prepare

OPSET = 18
RANK = STEP_FEATURES.index("window_rank")


class StepScorer(nn.Module):
    """Static rows per job, and the step head the compiled decoder evaluates each turn.

    At initialisation the score falls with the window rank and nothing else: the argmax decode is greedy's
    priority sweep, and training starts from the heuristic.
    """

    def __init__(self, hidden: int = 16, width: int = 32) -> None:
        super().__init__()
        self.hidden = hidden
        self.width = width
        self.static = nn.Sequential(
            nn.Linear(len(JOB_FEATURES) + len(CLUSTER_FEATURES), width),
            nn.ReLU(),
            nn.Linear(width, hidden),
        )
        self.w_step = nn.Parameter(torch.randn(len(STEP_FEATURES), hidden) * 0.01)
        self.w_out = nn.Parameter(torch.randn(hidden) * 0.01)
        self.b_out = nn.Parameter(torch.zeros(1))
        with torch.no_grad():  # unit 0 carries "earlier in the window first" at the start
            last = self.static[-1]
            last.weight.mul_(0.01)
            last.bias.zero_()
            last.bias[0] = 1.0
            self.w_step[:, 0] = 0.0
            self.w_step[RANK, 0] = -0.9
            self.w_out[0] = 4.0

    def rows(self, jobs: torch.Tensor, cluster: torch.Tensor) -> torch.Tensor:
        """(n, J) jobs and (C,) cluster -> (n, H) static rows."""
        x = torch.cat([jobs, cluster.expand(jobs.shape[0], -1)], dim=-1)
        return self.static(x)

    def forward(
        self, jobs: torch.Tensor, cluster: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The exported graph: (static rows, w_step, w_out, b_out)."""
        return self.rows(jobs, cluster), self.w_step * 1.0, self.w_out * 1.0, self.b_out * 1.0

    def scores(self, rows: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """(S, L, H) static rows of the window's jobs and (S, L, D) their step features -> (S, L) scores."""
        hidden = torch.relu(rows + features @ self.w_step)
        return hidden @ self.w_out + self.b_out

    def head(self) -> StepHead:
        """The step head as the compiled decoder reads it."""
        with torch.no_grad():
            return StepHead(
                self.w_step.detach().double().numpy().copy(),
                self.w_out.detach().double().numpy().copy(),
                self.b_out.detach().double().numpy().copy(),
            )


# ----------------------------------------------------------------------------- instances


@dataclass
class Case:
    """A training or validation instance: :class:`~lab.training.training.Item` plus the stepwise inputs."""

    item: Item
    base: np.ndarray  # (m,) priority order
    jobs: torch.Tensor  # (n, J)
    cluster: torch.Tensor  # (C,)
    teacher: np.ndarray  # (n,) preference along the best known order (imitation)


def make_case(scenario: Scenario, placements: np.ndarray | None = None, optimum: float | None = None) -> Case:
    """A scenario as a training case (its best known order from the optimum's placements where given)."""
    item = prepare(scenario, placements, optimum)
    base = priority_base(scenario, item.inst)
    teacher = np.full(len(scenario.jobs), -1e9)
    teacher[item.label] = -np.arange(item.label.size, dtype=np.float64)
    return Case(
        item,
        base,
        torch.as_tensor(item.jobs, dtype=torch.float32),
        torch.as_tensor(item.cluster, dtype=torch.float32),
        teacher,
    )


def static_rows(model: StepScorer, case: Case) -> np.ndarray:
    """The case's static rows as the compiled decoder reads them."""
    with torch.no_grad():
        return model.rows(case.jobs, case.cluster).double().numpy()


# ----------------------------------------------------------------------------- batches


@dataclass
class Turns:
    """Recorded turns of many rollouts: what the loss needs."""

    case: list[int]  # per turn: which case
    window: np.ndarray  # (S, L) job indices, -1 padding
    features: np.ndarray  # (S, L, D)
    chosen: np.ndarray  # (S,)
    advantage: np.ndarray  # (S,)


def collect(rollouts: Sequence[tuple[int, stepwise.Rollout, float, bool]]) -> Turns:
    """(case index, rollout, advantage, forced first turn) as one batch of turns.

    A forced first turn (POMO's multiple starts) is not the policy's choice: it is left out.
    """
    case, window, features, chosen, advantage = [], [], [], [], []
    for c, r, adv, forced in rollouts:
        lo, n = int(forced), r.turns
        case.extend([c] * (n - lo))
        window.append(r.window[lo:n])
        features.append(r.features[lo:n])
        chosen.append(r.chosen[lo:n])
        advantage.append(np.full(n - lo, adv))
    return Turns(
        case,
        np.concatenate(window),
        np.concatenate(features),
        np.concatenate(chosen),
        np.concatenate(advantage),
    )


def log_probs(model: StepScorer, cases: Sequence[Case], turns: Turns, idx: np.ndarray) -> tuple[torch.Tensor, ...]:
    """(log-prob of each chosen job, entropy of each turn's window) for the turns ``idx``."""
    case_of = np.asarray(turns.case)[idx]
    used = np.unique(case_of)
    offsets = np.zeros(len(cases) + 1, dtype=np.int64)
    parts = []
    at = 0
    for c in used:
        offsets[c] = at
        parts.append(model.rows(cases[c].jobs, cases[c].cluster))
        at += cases[c].jobs.shape[0]
    rows = torch.cat(parts) if parts else torch.zeros((0, model.hidden))
    window = turns.window[idx]
    mask_np = window >= 0
    flat = torch.as_tensor(offsets[case_of][:, None] + np.maximum(window, 0))
    row_t = rows[flat]  # (S, L, H)
    feats = torch.as_tensor(turns.features[idx], dtype=torch.float32)
    mask = torch.as_tensor(mask_np)
    scores = model.scores(row_t, feats).masked_fill(~mask, -1e9)
    logp = torch.log_softmax(scores, dim=-1)
    chosen = torch.as_tensor(turns.chosen[idx])
    picked = logp.gather(1, chosen[:, None]).squeeze(1)
    entropy = -(logp.exp() * logp.masked_fill(~mask, 0.0)).sum(-1)
    return picked, entropy


# ----------------------------------------------------------------------------- imitation and PPO


def teacher_turns(model: StepScorer, cases: Sequence[Case]) -> Turns:
    """Every case's turns along its best known order (both trade modes are the label's)."""
    out = []
    head = model.head()
    for c, case in enumerate(cases):
        r = stepwise.roll(
            case.item.inst, case.base, static_rows(model, case), head, case.item.label_mode, forced=case.teacher
        )
        out.append((c, r, 1.0, False))
    return collect(out)


def imitate(
    model: StepScorer, cases: Sequence[Case], epochs: int, lr: float = 3e-3, batch: int = 512, seed: int = 0
) -> list[float]:
    """Cross-entropy on the teacher's turns; the mean loss of each epoch."""
    turns = teacher_turns(model, cases)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(epochs):
        perm = rng.permutation(turns.chosen.size)
        total = 0.0
        for s in range(0, perm.size, batch):
            idx = perm[s : s + batch]
            picked, _ = log_probs(model, cases, turns, idx)
            loss = -picked.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * idx.size
        losses.append(total / max(perm.size, 1))
    return losses


def one_decode(model: StepScorer, case: Case, promote_rounds: int = 2) -> float:
    """The one-decode plan's objective (argmax in inline trades, promoted), as the planner's ``samples=1``."""
    inst = case.item.inst
    order = stepwise.orders(
        inst, case.base, static_rows(model, case), model.head(), np.array([MODE_INLINE]), np.zeros(1)
    )
    return float(decode(inst, order, np.array([MODE_INLINE]), promote_rounds=promote_rounds).objective[0])


def validate_ratio(model: StepScorer, cases: Sequence[Case]) -> float:
    """Mean one-decode objective over greedy's (:attr:`Item.scale`) on ``cases``."""
    return float(np.mean([one_decode(model, c) / c.item.scale for c in cases]))


@dataclass
class PPOConfig:
    """PPO's settings (``train_stepwise.py`` passes its own: 300 iterations by default)."""

    iterations: int = 200
    cases_per_iteration: int = 16
    rollouts: int = 8
    epochs: int = 4
    minibatch: int = 1024
    lr: float = 1e-3
    clip: float = 0.2
    entropy: float = 0.003
    validate_every: int = 10
    # POMO's multiple starts: rollouts 2s and 2s + 1 (both trade modes) take window position s at their first turn,
    # which is left out of the loss (not the policy's choice).
    multi_start: bool = False


def ppo(
    model: StepScorer,
    train: Sequence[Case],
    valid: Sequence[Case],
    config: PPOConfig,
    seed: int = 0,
    log: Callable[[dict[str, float]], None] | None = None,
    keep_initial: bool = True,
) -> tuple[dict[str, torch.Tensor], list[dict[str, float]]]:
    """PPO on sampled rollouts; returns the best validation checkpoint's state and the history.

    ``log`` receives each validation record (iteration, validation ratio, mean advantage spread, seconds). Without
    ``keep_initial`` only checkpoints PPO has trained may be kept (the starting point is reported, not kept).
    """
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    start = validate_ratio(model, valid)
    best = start if keep_initial else -np.inf
    history = [{"iteration": 0, "valid": start, "seconds": 0.0}]
    if log:
        log(history[-1])
    started = time.perf_counter()
    for it in range(1, config.iterations + 1):
        head = model.head()
        chosen_cases = rng.choice(len(train), size=min(config.cases_per_iteration, len(train)), replace=False)
        rollouts = []
        spread = []
        for c in chosen_cases:
            case = train[c]
            rows = static_rows(model, case)
            batch, forced = [], []
            starts = min(config.rollouts // 2, case.base.size, stepwise.WINDOW) if config.multi_start else 0
            for r in range(config.rollouts):
                mode = MODE_INLINE if r % 2 == 0 else MODE_AFTER
                first = r // 2 if r // 2 < starts else -1  # each start in both trade modes
                noise = int(rng.integers(2**31))
                batch.append(stepwise.roll(case.item.inst, case.base, rows, head, mode, 1.0, noise, first=first))
                forced.append(first >= 0)
            values = np.array([b.objective for b in batch]) / case.item.scale
            adv = values - values.mean()
            spread.append(float(values.std()))
            rollouts.extend((int(c), b, float(a), f) for b, a, f in zip(batch, adv, forced, strict=True))
        turns = collect(rollouts)
        scale = max(float(np.std(turns.advantage)), 1e-6)
        with torch.no_grad():
            old, _ = log_probs(model, train, turns, np.arange(turns.chosen.size))
        for _ in range(config.epochs):
            perm = rng.permutation(turns.chosen.size)
            for s in range(0, perm.size, config.minibatch):
                idx = perm[s : s + config.minibatch]
                picked, entropy = log_probs(model, train, turns, idx)
                adv_t = torch.as_tensor(turns.advantage[idx] / scale, dtype=torch.float32)
                surrogate = clipped_surrogate(picked - old[idx], adv_t, config.clip)
                loss = -surrogate - config.entropy * entropy.mean()
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
        if it % config.validate_every == 0 or it == config.iterations:
            ratio = validate_ratio(model, valid)
            record = {
                "iteration": it,
                "valid": ratio,
                "spread": float(np.mean(spread)),
                "seconds": round(time.perf_counter() - started, 1),
            }
            history.append(record)
            if log:
                log(record)
            if ratio > best + 1e-9:
                best = ratio
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return best_state, history


# ----------------------------------------------------------------------------- export


def _check_names(path: Path) -> None:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outputs = [o.name for o in session.get_outputs()]
    if outputs != list(OUTPUTS):
        raise RuntimeError(f"{path}: the export named its outputs {outputs}, not {list(OUTPUTS)}")


def export_stepwise(model: StepScorer, path: Path, temperature: float, card_extra: dict[str, Any]) -> dict[str, Any]:
    """Write the network as one ONNX file (weights inside; dynamic job axis) and its card beside it.

    Raises:
        RuntimeError: ONNX and torch disagree on the outputs.
    """
    import onnxruntime

    path = Path(path)
    module = model.cpu().eval()
    jobs = torch.rand((7, len(JOB_FEATURES)), generator=torch.Generator().manual_seed(0))
    cluster = torch.rand((len(CLUSTER_FEATURES),), generator=torch.Generator().manual_seed(1))
    with atomic_path(path) as tmp:
        tmp.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                (jobs, cluster),
                str(tmp),
                input_names=list(INPUTS),
                output_names=list(OUTPUTS),
                dynamic_axes={"jobs": {0: "jobs"}, "static": {0: "jobs"}},
                opset_version=OPSET,
                dynamo=False,
                external_data=False,
                do_constant_folding=False,  # keeps the head's outputs as named nodes, not bare initializers
            )
        _check_names(tmp)
        session = onnxruntime.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
        got = session.run(None, {"jobs": jobs.numpy(), "cluster": cluster.numpy()})
        with torch.no_grad():
            want = [t.numpy() for t in module(jobs, cluster)]
        check = max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True))
        if not check < 1e-4:
            raise RuntimeError(f"{path}: ONNX and torch outputs differ by {check:g}")
    network = {"class": "lab.training.stepwise_training.StepScorer", "hidden": model.hidden, "width": model.width}
    export_check = {"max_output_difference": check}
    return write_card(
        path, model, CARD_FORMAT, observation_spec(), temperature, network, card_extra, export_check, OPSET
    )
