"""A candidate chooser for the live planner, learned from hindsight labels: features, labels and the network.

Each cycle the live planner (:class:`agents.rolling.anticipate.AnticipatingPlanner`) weighs a few candidate
decisions for this slot over the same sampled futures. A chooser reads, for each candidate, what the futures
say about it (:func:`candidate_features`: its paired gain over the base decision, mean, spread and quantiles,
its rank and regret future by future, how often it is best, what kind of decision it is) with a few features
of the state, and scores it; the planner commits the top-scored candidate.

It is trained as the strong online learners of dynamic problems are (Baty et al., Transportation Science
2024; Sinclair et al., *Hindsight Learning*, ICML 2023): by imitation of **hindsight labels**. At every cycle
of a training day, each candidate is committed in a copy of the day and the rest of the realized day is
played with the base decision (:func:`label_cycle`); the candidate whose copy earns most is the label (the base
decision where none earns more than ``tie`` of the day's value). The network is one small MLP applied to each
candidate (shared weights), a softmax over the cycle's candidates, trained by cross-entropy
(:func:`fit`). It runs in numpy at plan time (:class:`Chooser`): no torch, no file beyond its weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from agents.rolling.allocator import ClusterState, Decision, decision_from_plan
from agents.rolling.simulation import LiveDay

__all__ = ["FEATURES", "Chooser", "LabelledCycle", "candidate_features", "fit", "label_cycle"]

KINDS = ("base", "plan as made", "holding one", "holding all", "margin", "future")
STATS = (
    "gain_mean",
    "gain_se",
    "gain_q10",
    "gain_q50",
    "gain_q90",
    "rank_mean",
    "share_best",
    "regret_mean",
    "share_no_worse",
    "margin_z",
)
STATE = ("slot_of_day", "queue", "error_level", "candidates")
FEATURES = (*STATS, *(f"kind_{k}" for k in KINDS), *STATE)
"""Each candidate's features, in the network's input order."""


def kind_of(label: str) -> tuple[str, float]:
    """A candidate's kind (:data:`KINDS`) and, for a hedge, its margin in error levels."""
    if label == "the base plan":
        return "base", 0.0
    if label in ("the plan as made", "the fill"):
        return "plan as made", 0.0
    if label == "holding all":
        return "holding all", 0.0
    if label.startswith("holding "):
        return "holding one", 0.0
    if label.startswith("margin "):
        return "margin", float(label.split()[1])
    return "future", 0.0


def candidate_features(
    values: np.ndarray, labels: Sequence[str], state: ClusterState, now: int, day_slots: int
) -> np.ndarray:
    """Shape (candidates, len(FEATURES)): what the futures say about each candidate, and the state.

    Args:
        values: Shape (candidates, futures): each candidate's objective in each future, row 0 the base decision.
        labels: Each candidate's label (:class:`agents.rolling.anticipate.Candidate`).
        state: The state the candidates were made for.
        now: The slot of the day.
        day_slots: Slots in the day.
    """
    values = np.asarray(values, dtype=np.float64)
    C, K = values.shape
    scale = max(1.0, abs(float(values[0].mean())))
    gain = (values - values[0]) / scale
    best = values.max(axis=0)
    order = (-values).argsort(axis=0).argsort(axis=0)  # 0 = best in that future
    out = np.zeros((C, len(FEATURES)))
    out[:, 0] = gain.mean(axis=1)
    out[:, 1] = gain.std(axis=1, ddof=1) / np.sqrt(K) if K > 1 else 0.0
    out[:, 2:5] = np.quantile(gain, [0.1, 0.5, 0.9], axis=1).T
    out[:, 5] = order.mean(axis=1) / max(C - 1, 1)
    out[:, 6] = (values >= best - 1e-9).mean(axis=1)
    out[:, 7] = ((best - values) / scale).mean(axis=1)
    out[:, 8] = (gain >= -1e-9).mean(axis=1)
    for i, label in enumerate(labels):
        kind, z = kind_of(label)
        out[i, 9] = z
        out[i, len(STATS) + KINDS.index(kind)] = 1.0
    error = float(np.mean(state.error_level)) if state.error_level else 0.0
    out[:, -4:] = (now / max(day_slots, 1), len(state.queue) / 10.0, error, C / 10.0)
    return out


@dataclass
class LabelledCycle:
    """One cycle of a training day: each candidate's features and what its copy of the day earned.

    Attributes:
        features: Shape (candidates, len(FEATURES)).
        realized: Shape (candidates,): the realized day's objective with the candidate committed now and the
            base decision after.
        labels: The candidates' labels.
    """

    features: np.ndarray
    realized: np.ndarray
    labels: tuple[str, ...] = field(default=())

    def target(self, tie: float) -> int:
        """The candidate to imitate: the best realized, the base decision unless one earns ``tie`` of it more."""
        base = float(self.realized[0])
        best = int(np.argmax(self.realized))
        return best if self.realized[best] > base + tie * max(1.0, abs(base)) else 0


def label_cycle(
    day: LiveDay, decisions: Sequence[Decision], base: Callable[[ClusterState, int], Decision]
) -> np.ndarray:
    """Each decision committed now in a copy of the day, the rest played by ``base``: the realized objectives.

    Args:
        day: The day at the cycle (not changed).
        decisions: The candidates' decisions for this slot.
        base: The base decision of a state at a slot (the rest of each copy).
    """
    out = np.zeros(len(decisions))
    for i, decision in enumerate(decisions):
        copy = day.fork()
        copy.commit(decision)
        while not copy.done:
            if not copy.replans:
                copy.commit(None)
                continue
            state, _ = copy.state()
            copy.commit(base(state, copy.t))
        out[i] = copy.result("label").metrics.objective
    return out


def as_decision(scenario: object, plan: object, expired: tuple[str, ...]) -> Decision:
    """A candidate's plan as this slot's decision."""
    return decision_from_plan(scenario, plan, expired)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Chooser:
    """The learned scorer: a two-layer MLP on each candidate's standardized features (numpy at plan time).

    Attributes:
        mean: Shape (F,): feature means of the training set.
        scale: Shape (F,): their standard deviations (1 where constant).
        w1: Shape (F, H). b1: Shape (H,). w2: Shape (H,). b2: The output bias.
    """

    mean: np.ndarray
    scale: np.ndarray
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: float

    def scores(self, features: np.ndarray) -> np.ndarray:
        """Each candidate's score (higher: chosen)."""
        x = (np.asarray(features, dtype=np.float64) - self.mean) / self.scale
        h = np.maximum(0.0, x @ self.w1 + self.b1)
        return h @ self.w2 + self.b2

    def choose(self, features: np.ndarray) -> int:
        """The top-scored candidate."""
        return int(np.argmax(self.scores(features)))


def fit(
    cycles: Sequence[LabelledCycle], *, tie: float = 0.002, hidden: int = 32, epochs: int = 300, seed: int = 0
) -> Chooser:
    """Imitation of the hindsight labels: a softmax over each cycle's candidates, cross-entropy, Adam (torch).

    Cycles with one candidate teach nothing and are skipped.
    """
    import torch

    torch.manual_seed(seed)
    usable = [c for c in cycles if c.features.shape[0] > 1]
    if not usable:
        raise ValueError("fit: no cycle with two or more candidates")
    X = np.concatenate([c.features for c in usable])
    mean = X.mean(axis=0)
    scale = np.where(X.std(axis=0) > 1e-9, X.std(axis=0), 1.0)
    net = torch.nn.Sequential(torch.nn.Linear(X.shape[1], hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
    optimiser = torch.optim.Adam(net.parameters(), lr=3e-3, weight_decay=1e-4)
    batches = [
        (torch.tensor((c.features - mean) / scale, dtype=torch.float32), torch.tensor(c.target(tie))) for c in usable
    ]
    for _ in range(epochs):
        optimiser.zero_grad()
        loss = torch.stack(
            [torch.nn.functional.cross_entropy(net(x).reshape(1, -1), y.reshape(1)) for x, y in batches]
        ).mean()
        loss.backward()
        optimiser.step()
    first, second = net[0], net[2]
    return Chooser(
        mean,
        scale,
        first.weight.detach().numpy().T.astype(np.float64),
        first.bias.detach().numpy().astype(np.float64),
        second.weight.detach().numpy().reshape(-1).astype(np.float64),
        float(second.bias.detach().numpy()[0]),
    )
