"""Training the live chooser (:mod:`lab.live_chooser`): hindsight labels, DAgger, PPO, and the ONNX export.

The chooser commits one of ``anticipate``'s candidates each cycle. It is trained as the strong online learners
of dynamic problems are (Baty et al., Transportation Science 2024; Sinclair et al., *Hindsight Learning*,
ICML 2023), in three stages:

1. **Imitation of hindsight labels.** Training days are played by ``anticipate``. At every raced cycle each
   candidate is committed in a copy of the realized day and the rest of that day is played by the base decision
   (:func:`label_cycle`); the candidate whose copy earns most is the label, the race's pick unless another earns
   ``tie`` of the day's value more (:meth:`Cycle.target`). The network (:class:`ChooserNet`: one small MLP per
   candidate, a softmax over the cycle's candidates) is fitted by cross-entropy (:func:`imitate`).
2. **DAgger.** The chooser plays the training days; the states it reaches are labelled again and added to the
   set, and the network is fitted on all of it.
3. **PPO.** The chooser samples its choice from its softmax on the training days; the advantage of a choice is
   its realized gain over the race's pick (both labelled by rollouts of the realized day), normalized; the
   update is PPO's clipped surrogate (:func:`ppo_update`).

Days are played where the project fans work out (:mod:`agents.fanout`: serially, a process pool, or Ray):
:func:`day_task` plays one, with the network's weights as plain lists. ``train_live.py`` runs the stages, scores
each stage's network on validation days (the imitation stage included) and exports the best
(:func:`export_onnx`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.fanout import Task, TaskResult
from agents.live.allocator import ClusterState, Decision
from agents.live.anticipate import AnticipatingPlanner, live_planner
from agents.live.forecast import NoiseModel
from agents.live.runtimes import draw_runtimes
from agents.simulator.simulation import LiveDay, realized_day
from gpu_env.files import atomic_path, write_text_atomic
from gpu_env.generators import generate
from lab.drawn_history import past_days
from lab.live_chooser import (
    CARD_FORMAT,
    FEATURES,
    ChooserPlanner,
    Scorer,
    card_spec,
    load_policy,
    onnx_scorer,
    weighing_features,
)

__all__ = [
    "ChooserNet",
    "Cycle",
    "DayPlay",
    "DaySpec",
    "NumpyScorer",
    "day_task",
    "export_onnx",
    "imitate",
    "label_cycle",
    "play_day",
    "ppo_update",
]

HISTORY_DAYS = 8
"""Past days each played day's planner is fitted from (the live benchmark's default)."""
MODES = ("race", "argmax", "sample", "base")
"""How a played day commits: the race's pick (``anticipate``), the network's top score, a draw from its
softmax (PPO's rollouts), or the base decision."""


# ----------------------------------------------------------------------------- the data


@dataclass
class Cycle:
    """One raced cycle of a played day: each candidate's features, and what its copy of the realized day earned.

    Attributes:
        features: Shape (candidates, len(FEATURES)).
        realized: Shape (candidates,): the realized day's objective with the candidate committed now and the
            base decision after (empty where the cycle was not labelled).
        pick: The race's pick.
        action: The candidate the day committed.
        logp: Its log-probability under the network that chose it (0 where it was not drawn).
    """

    features: np.ndarray
    realized: np.ndarray
    pick: int
    action: int
    logp: float = 0.0

    def scale(self) -> float:
        """The race pick's realized value, at least 1: what gains are shares of."""
        return max(1.0, abs(float(self.realized[self.pick])))

    def gains(self) -> np.ndarray:
        """Each candidate's realized gain over the race's pick, as a share of it."""
        return (self.realized - self.realized[self.pick]) / self.scale()

    def target(self, tie: float) -> int:
        """The candidate to imitate: the best realized, the race's pick unless one earns ``tie`` more."""
        gains = self.gains()
        best = int(np.argmax(gains))
        return best if gains[best] > tie else self.pick

    def to_dict(self) -> dict[str, Any]:
        """Plain values (a fan-out task's result)."""
        return {
            "features": self.features.tolist(),
            "realized": self.realized.tolist(),
            "pick": self.pick,
            "action": self.action,
            "logp": self.logp,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Cycle:
        """The inverse of :meth:`to_dict`."""
        return cls(
            np.asarray(raw["features"], dtype=np.float32),
            np.asarray(raw["realized"], dtype=np.float64),
            int(raw["pick"]),
            int(raw["action"]),
            float(raw["logp"]),
        )


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
        for state, _ in copy.cycles():
            copy.commit(base(state, copy.t))
        out[i] = copy.result("label").metrics.objective
    return out


# ----------------------------------------------------------------------------- the network


@dataclass(frozen=True)
class NumpyScorer:
    """A :class:`ChooserNet`'s forward pass in numpy (fan-out workers and validation play with no torch).

    Attributes:
        layers: (weight (in, out), bias (out,)) per linear layer; ReLU between them; the input standardized.
        mean: Shape (F,): feature means. scale: Shape (F,): their spread (1 where constant).
    """

    layers: tuple[tuple[np.ndarray, np.ndarray], ...]
    mean: np.ndarray
    scale: np.ndarray

    def __call__(self, features: np.ndarray) -> np.ndarray:
        """Each candidate's score."""
        x = (np.asarray(features, dtype=np.float64) - self.mean) / self.scale
        for i, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if i < len(self.layers) - 1:
                x = np.maximum(x, 0.0)
        return x.reshape(-1)

    def to_dict(self) -> dict[str, Any]:
        """Plain values (a fan-out task's parameter, a card's record)."""
        return {
            "layers": [[w.tolist(), b.tolist()] for w, b in self.layers],
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> NumpyScorer:
        """The inverse of :meth:`to_dict`."""
        layers = tuple((np.asarray(w, dtype=np.float64), np.asarray(b, dtype=np.float64)) for w, b in raw["layers"])
        return cls(layers, np.asarray(raw["mean"], dtype=np.float64), np.asarray(raw["scale"], dtype=np.float64))


def _torch() -> Any:
    import torch

    return torch


class ChooserNet:
    """The chooser's network in torch: standardize, MLP, one score per candidate (training only).

    Args:
        mean: Feature means of the training set.
        scale: Their spread (1 where constant).
        hidden: Units in each hidden layer.
        seed: Seed of the initial weights.
        device: Where it trains (``cpu``, ``cuda``).
    """

    def __init__(
        self, mean: np.ndarray, scale: np.ndarray, hidden: int = 64, seed: int = 0, device: str = "cpu"
    ) -> None:
        torch = _torch()
        torch.manual_seed(seed)
        nn = torch.nn
        self.device = torch.device(device)
        self.mean = np.asarray(mean, dtype=np.float64)
        self.scale = np.asarray(scale, dtype=np.float64)
        self.module = nn.Sequential(
            nn.Linear(len(FEATURES), hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)
        ).to(self.device)

    @classmethod
    def for_cycles(cls, cycles: Sequence[Cycle], hidden: int = 64, seed: int = 0, device: str = "cpu") -> ChooserNet:
        """A new network standardized on the cycles' features."""
        X = np.concatenate([c.features for c in cycles]).astype(np.float64)
        spread = X.std(axis=0)
        return cls(X.mean(axis=0), np.where(spread > 1e-9, spread, 1.0), hidden, seed, device)

    def batch(self, cycles: Sequence[Cycle]) -> tuple[Any, Any]:
        """The cycles' standardized features padded to the most candidates, and the mask of real ones."""
        torch = _torch()
        most = max(c.features.shape[0] for c in cycles)
        x = np.zeros((len(cycles), most, len(FEATURES)), dtype=np.float32)
        mask = np.zeros((len(cycles), most), dtype=bool)
        for i, c in enumerate(cycles):
            n = c.features.shape[0]
            x[i, :n] = (c.features - self.mean) / self.scale
            mask[i, :n] = True
        return torch.as_tensor(x, device=self.device), torch.as_tensor(mask, device=self.device)

    def log_softmax(self, x: Any, mask: Any) -> Any:
        """Log-probabilities over each cycle's candidates (shape (cycles, most)); padding gets -inf."""
        torch = _torch()
        z = self.module(x).squeeze(-1).masked_fill(~mask, float("-inf"))
        return torch.log_softmax(z, dim=1)

    def scorer(self) -> NumpyScorer:
        """The same network in numpy."""
        linear = [m for m in self.module if hasattr(m, "weight")]
        layers = tuple(
            (m.weight.detach().cpu().numpy().T.astype(np.float64), m.bias.detach().cpu().numpy().astype(np.float64))
            for m in linear
        )
        return NumpyScorer(layers, self.mean.copy(), self.scale.copy())


def _minibatches(n: int, size: int, rng: np.random.Generator) -> list[np.ndarray]:
    return np.array_split(rng.permutation(n), max(1, n // size))


def imitate(
    net: ChooserNet,
    cycles: Sequence[Cycle],
    *,
    tie: float = 0.002,
    epochs: int = 60,
    lr: float = 3e-3,
    batch: int = 128,
    seed: int = 0,
) -> float:
    """Fit the network to the cycles' hindsight labels (cross-entropy over each cycle's candidates).

    Returns:
        The share of the cycles whose label the fitted network ranks first.
    """
    torch = _torch()
    usable = [c for c in cycles if c.features.shape[0] > 1]
    if not usable:
        raise ValueError("imitate: no labelled cycle with two or more candidates")
    x, mask = net.batch(usable)
    y = torch.as_tensor([c.target(tie) for c in usable], device=net.device)
    optimiser = torch.optim.Adam(net.module.parameters(), lr=lr, weight_decay=1e-4)
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        for idx in _minibatches(len(usable), batch, rng):
            i = torch.as_tensor(idx, device=net.device)
            optimiser.zero_grad()
            loss = torch.nn.functional.nll_loss(net.log_softmax(x[i], mask[i]), y[i])
            loss.backward()
            optimiser.step()
    with torch.no_grad():
        hits = (net.log_softmax(x, mask).argmax(dim=1) == y).float().mean()
    return float(hits)


def ppo_update(
    net: ChooserNet,
    cycles: Sequence[Cycle],
    *,
    clip: float = 0.2,
    epochs: int = 4,
    lr: float = 1e-3,
    batch: int = 128,
    seed: int = 0,
) -> dict[str, float]:
    """One PPO update from cycles whose choice was drawn from the network's softmax.

    The advantage of a cycle's choice is its realized gain over the race's pick (:meth:`Cycle.gains`),
    normalized over the batch; the loss is PPO's clipped surrogate on the ratio of the new probability of the
    choice to the one it was drawn with.

    Returns:
        The mean realized gain of the drawn choices over the race's picks, and the share that were not the pick.
    """
    torch = _torch()
    usable = [c for c in cycles if c.features.shape[0] > 1]
    if not usable:
        raise ValueError("ppo_update: no cycle with two or more candidates")
    raw = np.array([c.gains()[c.action] for c in usable])
    adv = torch.as_tensor((raw - raw.mean()) / (raw.std() + 1e-8), dtype=torch.float32, device=net.device)
    x, mask = net.batch(usable)
    action = torch.as_tensor([c.action for c in usable], device=net.device)
    old = torch.as_tensor([c.logp for c in usable], dtype=torch.float32, device=net.device)
    optimiser = torch.optim.Adam(net.module.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        for idx in _minibatches(len(usable), batch, rng):
            i = torch.as_tensor(idx, device=net.device)
            optimiser.zero_grad()
            logp = net.log_softmax(x[i], mask[i]).gather(1, action[i].unsqueeze(1)).squeeze(1)
            ratio = torch.exp(logp - old[i])
            surrogate = torch.min(ratio * adv[i], torch.clamp(ratio, 1 - clip, 1 + clip) * adv[i])
            (-surrogate.mean()).backward()
            optimiser.step()
    return {"mean_gain": float(raw.mean()), "departures": float(np.mean([c.action != c.pick for c in usable]))}


def export_onnx(net: ChooserNet, path: Path, card: dict[str, Any]) -> None:
    """The network as ONNX (input ``features`` (candidates, F), output ``scores`` (candidates,)) and its card.

    The standardization is part of the graph. Both files are written whole or not at all.
    """
    torch = _torch()
    net.module.cpu()

    class Export(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp = net.module
            self.register_buffer("mean", torch.as_tensor(net.mean, dtype=torch.float32))
            self.register_buffer("scale", torch.as_tensor(net.scale, dtype=torch.float32))

        def forward(self, features: Any) -> Any:
            return self.mlp((features - self.mean) / self.scale).reshape(-1)

    path = Path(path)
    with atomic_path(path) as tmp, torch.no_grad():
        torch.onnx.export(
            Export().eval(),
            (torch.zeros(3, len(FEATURES)),),
            str(tmp),
            input_names=["features"],
            output_names=["scores"],
            dynamic_axes={"features": {0: "candidates"}, "scores": {0: "candidates"}},
            dynamo=False,
            opset_version=17,
        )
    full = {"format": CARD_FORMAT, "file": path.name, "spec": card_spec(), **card}
    write_text_atomic(path.with_suffix(".json"), json.dumps(full, indent=2, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------- playing a day


@dataclass(frozen=True)
class DaySpec:
    """A drawn day to play: its family, seed, forecast error and runtime model."""

    family: str
    seed: int
    sigma: float
    runtime: str = "exact"


@dataclass
class DayPlay:
    """What one played day gave: its objective, its raced cycles (labelled where asked) and its departures.

    Attributes:
        objective: The executed day's objective.
        cycles: The raced cycles (:class:`Cycle`).
        departures: Cycles whose choice was neither the base decision nor the race's pick.
        departure_gains: With ``gains``, each departure's realized gain over the race's pick (rollouts of the
            realized day, the base decision after), as a share of the pick's.
        cycle_ms: Each re-planning cycle's time (weighing and choosing), milliseconds.
    """

    objective: float
    cycles: list[Cycle] = field(default_factory=list)
    departures: int = 0
    departure_gains: list[float] = field(default_factory=list)
    cycle_ms: list[float] = field(default_factory=list)


def day_planner(spec: DaySpec) -> tuple[Any, Any, dict[str, int], AnticipatingPlanner]:
    """The day, its realized twin, its actual runtimes, and ``anticipate`` fitted from the day's drawn history."""
    day = generate(spec.family, spec.seed)
    runtimes = draw_runtimes(day, spec.runtime, spec.seed)
    realized = realized_day(day, NoiseModel(spec.sigma).draw(day, spec.seed), runtimes)
    history = past_days(spec.family, day.gpus, spec.seed, HISTORY_DAYS, spec.sigma)
    planner = live_planner("anticipate", history=history, day=day, seed=spec.seed)
    return day, realized, runtimes, planner


def base_decider(planner: AnticipatingPlanner) -> Callable[[ClusterState, int], Decision]:
    """The base decision (greedy with the fill) of a state: the planner with nothing to sample."""
    plain = AnticipatingPlanner(base=planner.base, forecaster=planner.forecaster)
    return lambda state, now: plain.decide(state, now)


def play_day(
    spec: DaySpec,
    mode: str,
    scorer: Scorer | None = None,
    *,
    label: bool = False,
    draw_seed: int = 0,
    gains: bool = False,
    margin: float = 0.0,
) -> DayPlay:
    """Play one day live: each raced cycle commits what ``mode`` says (:data:`MODES`).

    Args:
        spec: The day.
        mode: ``race``, ``argmax``, ``sample`` or ``base``.
        scorer: The network (``argmax`` and ``sample``).
        label: Label every raced cycle by rollouts of the realized day (:func:`label_cycle`).
        draw_seed: Seed of the draws of ``sample``.
        gains: Measure each departure's realized gain over the race's pick (:attr:`DayPlay.departure_gains`).
        margin: ``argmax``: the chooser's margin over the race's pick (:class:`ChooserPlanner`).
    """
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
    if mode in ("argmax", "sample") and scorer is None:
        raise ValueError(f"mode {mode!r} needs a scorer")
    day, realized, runtimes, planner = day_planner(spec)
    live = LiveDay(day, realized, corrector=planner.forecaster, runtimes=runtimes)
    base = base_decider(planner)
    chooser = ChooserPlanner(planner, scorer or (lambda f: np.zeros(len(f))), day.slots, margin=margin)
    rng = np.random.default_rng([draw_seed, spec.seed])
    out = DayPlay(0.0)
    for state, ran in live.cycles():
        started = time.perf_counter()
        if mode == "base":
            decision = base(state, live.t)
            out.cycle_ms.append((time.perf_counter() - started) * 1000.0)
            live.commit(decision)
            continue
        weighing = planner.weigh(state, live.t, ran)
        if weighing.race is None:
            out.cycle_ms.append((time.perf_counter() - started) * 1000.0)
            live.commit(weighing.decision())
            continue
        features = weighing_features(weighing, planner.samples, state, live.t, day.slots)
        action, logp = weighing.pick, 0.0
        if mode == "argmax":
            action = chooser.choose(weighing, state, live.t)
        elif mode == "sample":
            z = np.asarray(scorer(features), dtype=np.float64)  # type: ignore[misc]
            p = np.exp(z - z.max())
            p /= p.sum()
            action = int(rng.choice(len(p), p=p))
            logp = float(math.log(max(p[action], 1e-12)))
        decision = weighing.decision(action)
        out.cycle_ms.append((time.perf_counter() - started) * 1000.0)
        departed = action not in (0, weighing.pick)
        out.departures += departed
        if gains and departed:
            both = label_cycle(live, [decision, weighing.decision(weighing.pick)], base)
            out.departure_gains.append(float((both[0] - both[1]) / max(1.0, abs(both[1]))))
        decisions = [weighing.decision(i) for i in range(len(weighing.candidates))] if label else []
        realized_values = label_cycle(live, decisions, base) if label else np.zeros(0)
        out.cycles.append(Cycle(features, realized_values, weighing.pick, action, logp))
        live.commit(decision)
    out.objective = live.result(mode).metrics.objective
    return out


def day_task(task: Task) -> TaskResult:
    """:func:`play_day` where the task landed (a task function of :mod:`agents.fanout`).

    ``params``: ``family``, ``sigma``, ``runtime``, ``mode``, ``label``, ``draw_seed``, ``gains``, ``margin``, and
    the network: ``scorer`` (:meth:`NumpyScorer.to_dict`) or ``policy`` (an exported file's path); the day's seed is
    the task's.
    """
    p = task.params
    spec = DaySpec(p["family"], task.seed, p["sigma"], p["runtime"])
    scorer: Scorer | None = None
    if p.get("scorer"):
        scorer = NumpyScorer.from_dict(p["scorer"])
    elif p.get("policy"):
        scorer = onnx_scorer(load_policy(p["policy"]))
    played = play_day(
        spec,
        p["mode"],
        scorer,
        label=p["label"],
        draw_seed=p.get("draw_seed", 0),
        gains=p.get("gains", False),
        margin=p.get("margin", 0.0),
    )
    values = {
        "objective": played.objective,
        "departures": played.departures,
        "departure_gains": played.departure_gains,
        "cycle_ms": played.cycle_ms,
        "cycles": [c.to_dict() for c in played.cycles] if p["label"] or p["mode"] != "race" else [],
    }
    return TaskResult(f"{spec.family}-{spec.seed}", p["mode"], task.seed, values=values)
