"""The learned live chooser: ``anticipate``'s candidates, ranked by a network from what the futures say of each.

Each cycle the expectation rule (:class:`agents.live.anticipate.AnticipatingPlanner`) makes its candidate
decisions for this slot (the base decision, the plan as made, holds, hedges at margins both ways, plans of
sampled futures) and races them over sampled futures (:meth:`~agents.live.anticipate.AnticipatingPlanner.weigh`).
The race commits a departure only where its paired gain clears a bar. The chooser reads the same race and
commits the candidate a network scores highest (:class:`ChooserPlanner`), from these features of each candidate
(:func:`candidate_features`, :data:`FEATURES`):

- what the first ``samples`` futures say of it: its paired gain over the base decision as a share of the base's
  value (mean, standard error, 10th / 50th / 90th percentiles), its mean rank among the candidates, how often
  it is best, its mean regret to the best, how often it does no worse than the base;
- what kind of decision it is (the base, the plan as made, holding one job, holding all, a hedge with its
  margin in error levels, a sampled future's plan), and whether it is the race's own pick;
- the state: the slot's place in the day, the queue, the apps' error level, how many candidates there are.

The network is a small MLP applied to each candidate (the same weights for every candidate; the scores are
compared within the cycle). It is trained by :mod:`lab.training.chooser_training` (imitation of hindsight labels,
DAgger, then PPO with the realized gain over the race's pick as the advantage) and exported as ONNX with its
card; planning reads it through the learned planners' one loader (:mod:`agents.policy_files`) and needs
onnxruntime, never torch. The cycle costs the race's (the network adds well under a millisecond).

Horizon convention: the slot's place in the day is ``now / day_slots``, where ``now`` is the slot of the day
(0 at the day's first slot) and ``day_slots`` the day's length. A Slurm state whose horizon runs past the day's
end gives the same ``now`` and ``day_slots`` (:func:`day_fraction`), so the same state reads the same features
in the simulator, the environment and the Slurm loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from agents import policy_files
from agents.live.allocator import ClusterState, Decision
from agents.live.anticipate import AnticipatingPlanner, Weighing
from agents.options import PlanOptions
from agents.policy_files import PolicyError, PolicyFile, PolicyKind

__all__ = [
    "CARD_FORMAT",
    "FEATURES",
    "POLICY",
    "ChooserPlanner",
    "Departures",
    "candidate_features",
    "day_fraction",
    "load_policy",
    "onnx_scorer",
]

POLICY = Path(__file__).resolve().parent / "policies" / "live_chooser.onnx"
"""The shipped chooser (its card: the same name, ``.json``)."""
CARD_FORMAT = "gpualloc-live-chooser/1"

KINDS = ("base", "plan as made", "holding one", "holding all", "margin", "future")
"""The kinds of candidate (:func:`kind_of`)."""
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
    "race_pick",
)
STATE = ("slot_of_day", "queue", "error_level", "candidates")
FEATURES = (*STATS, *(f"kind_{k}" for k in KINDS), *STATE)
"""Each candidate's features, in the network's input order."""

Scorer = Callable[[np.ndarray], np.ndarray]
"""``scorer(features)``: shape (candidates, len(FEATURES)) float32 -> each candidate's score, shape (candidates,)."""


def kind_of(label: str) -> tuple[str, float]:
    """A candidate's kind (:data:`KINDS`) from its label and, for a hedge, its margin in error levels.

    >>> kind_of("margin -1"), kind_of("holding j3"), kind_of("the base plan")
    (('margin', -1.0), ('holding one', 0.0), ('base', 0.0))
    """
    if label == "the base plan":
        return "base", 0.0
    if label in ("the plan as made", "the fill"):
        return "plan as made", 0.0
    if label == "holding all":
        return "holding all", 0.0
    if label.startswith("holding "):
        return "holding one", 0.0
    if label.startswith("margin q"):  # the newsvendor quantile, as error levels of a normal law
        return "margin", NormalDist().inv_cdf(float(label.split()[1][1:]))
    if label.startswith("margin "):
        return "margin", float(label.split()[1])
    return "future", 0.0


def day_fraction(now: int, day_slots: int) -> float:
    """The slot's place in the day, 0 at its first slot, clipped to [0, 1] (the horizon convention above)."""
    return min(1.0, max(0.0, now / max(day_slots, 1)))


def candidate_features(
    values: np.ndarray,
    labels: Sequence[str],
    pick: int,
    state: ClusterState,
    now: int,
    day_slots: int,
) -> np.ndarray:
    """Shape (candidates, len(FEATURES)): what the futures say about each candidate, and the state.

    Args:
        values: Shape (candidates, futures): each candidate's objective in each future, row 0 the base
            decision, every candidate scored in every future.
        labels: Each candidate's label (:class:`agents.live.anticipate.Candidate`).
        pick: The race's pick (index into the candidates).
        state: The state the candidates were made for.
        now: The slot of the day (0: its first slot).
        day_slots: Slots in the day.
    """
    values = np.asarray(values, dtype=np.float64)
    C, K = values.shape
    scale = max(1.0, abs(float(values[0].mean())))
    gain = (values - values[0]) / scale
    best = values.max(axis=0)
    order = (-values).argsort(axis=0).argsort(axis=0)  # 0 = best in that future
    out = np.zeros((C, len(FEATURES)), dtype=np.float32)
    out[:, 0] = gain.mean(axis=1)
    out[:, 1] = gain.std(axis=1, ddof=1) / np.sqrt(K) if K > 1 else 0.0
    out[:, 2:5] = np.quantile(gain, [0.1, 0.5, 0.9], axis=1).T
    out[:, 5] = order.mean(axis=1) / max(C - 1, 1)
    out[:, 6] = (values >= best - 1e-9).mean(axis=1)
    out[:, 7] = ((best - values) / scale).mean(axis=1)
    out[:, 8] = (gain >= -1e-9).mean(axis=1)
    out[pick, 10] = 1.0
    for i, label in enumerate(labels):
        kind, z = kind_of(label)
        out[i, 9] = z
        out[i, len(STATS) + KINDS.index(kind)] = 1.0
    error = float(np.mean(state.error_level)) if len(state.error_level) else 0.0
    out[:, -4:] = (day_fraction(now, day_slots), len(state.queue) / 10.0, error, C / 10.0)
    return out


def weighing_features(weighing: Weighing, samples: int, state: ClusterState, now: int, day_slots: int) -> np.ndarray:
    """:func:`candidate_features` of a raced weighing, over the first ``samples`` futures (all candidates' own)."""
    assert weighing.race is not None
    values = weighing.race.values[:, :samples]
    labels = [c.label for c in weighing.candidates]
    return candidate_features(values, labels, weighing.pick, state, now, day_slots)


# ----------------------------------------------------------------------------- the exported network


def card_spec() -> dict[str, Any]:
    """What a card must say for this code to read its network: the features, in order."""
    return {"features": list(FEATURES)}


def _check_card(card: dict[str, Any], card_file: Path) -> None:
    spec = card.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    for key, value in card_spec().items():
        if spec.get(key) != value:
            raise PolicyError(
                f"{card_file}: field 'spec.{key}': the chooser was trained on {spec.get(key)!r}, "
                f"this code builds {value!r}"
            )


POLICY_FILES = PolicyKind("live chooser policy", (CARD_FORMAT,), "train one with train_live.py", _check_card)
"""The chooser's policy files (:func:`agents.policy_files.load`)."""
_CACHE: dict[policy_files.CacheKey, PolicyFile] = {}


def _loaded(policy: PolicyFile) -> PolicyFile:
    """The opened file, once the network has scored two candidates of this code's features."""
    try:  # one call at load, so that no cycle pays onnxruntime's first run
        (scores,) = policy.session.run(None, {"features": np.zeros((2, len(FEATURES)), dtype=np.float32)})
    except Exception as exc:  # onnxruntime raises its own exception types
        raise PolicyError(f"{policy.path}: the chooser does not read this code's features ({exc})") from None
    if np.asarray(scores).shape != (2,):
        raise PolicyError(f"{policy.path}: the chooser answers shape {np.asarray(scores).shape}, this code reads (2,)")
    return policy


def load_policy(path: str | Path | None = None) -> PolicyFile:
    """The chooser (default :data:`POLICY`), loaded once per file version, its card checked.

    Raises:
        PolicyError: The file or its card is missing, unreadable or made for other features.
    """
    return policy_files.load(POLICY if path is None else path, POLICY_FILES, _CACHE, _loaded)


def onnx_scorer(policy: PolicyFile) -> Scorer:
    """The scorer of an opened chooser file."""

    def score(features: np.ndarray) -> np.ndarray:
        (scores,) = policy.session.run(None, {"features": np.asarray(features, dtype=np.float32)})
        return np.asarray(scores, dtype=np.float64)

    return score


# ----------------------------------------------------------------------------- the planner


@dataclass
class Departures:
    """What a chooser did, cycle by cycle: how often it left the base decision and the race's pick.

    Attributes:
        cycles: Cycles with two or more candidates raced.
        from_base: Of those, the cycles whose choice is not the base decision.
        from_race: ... and not the race's pick either (the learned departures).
        slots: The slots of the day of the learned departures.
    """

    cycles: int = 0
    from_base: int = 0
    from_race: int = 0
    slots: list[int] = field(default_factory=list)


@dataclass
class ChooserPlanner:
    """The live planner that commits the candidate a network ranks first (module docstring).

    Attributes:
        planner: The expectation rule whose candidates and race it reads.
        scorer: The network (:func:`onnx_scorer`, or a training network's).
        day_slots: Slots in the day (the horizon convention).
        name: How the planner is reported.
        margin: How far (in score) the top candidate must rank above the race's pick to be committed instead of
            it (0: the top candidate always; chosen on validation days with the network, read from its card).
        departures: What it did so far (:class:`Departures`).
    """

    planner: AnticipatingPlanner
    scorer: Scorer
    day_slots: int = 24
    name: str = "live-chooser"
    margin: float = 0.0
    departures: Departures = field(default_factory=Departures)

    @property
    def forecaster(self) -> Any:
        """The demand forecast the rolling loop gives it: the expectation rule's."""
        return self.planner.forecaster

    def choose(self, weighing: Weighing, state: ClusterState, now: int) -> int:
        """The candidate to commit: the top-scored one, or the race's pick where the top one is not ``margin`` above it.

        Where nothing was raced: 0, the base decision.
        """
        if weighing.race is None:
            return 0
        features = weighing_features(weighing, self.planner.samples, state, now, self.day_slots)
        scores = self.scorer(features)
        pick = int(np.argmax(scores))
        if scores[pick] - scores[weighing.pick] < self.margin:
            pick = weighing.pick
        self.departures.cycles += 1
        self.departures.from_base += pick != 0
        if pick not in (0, weighing.pick):
            self.departures.from_race += 1
            self.departures.slots.append(now)
        return pick

    def decide(
        self,
        state: ClusterState,
        now: int,
        elapsed: Mapping[str, int] | None = None,
        options: PlanOptions | None = None,
    ) -> Decision:
        """This slot's decisions: the expectation rule's weighing, the network's choice."""
        weighing = self.planner.weigh(state, now, elapsed, options)
        return weighing.decision(self.choose(weighing, state, now))

    @classmethod
    def load(
        cls, planner: AnticipatingPlanner, day_slots: int, path: str | Path | None = None, name: str = "live-chooser"
    ) -> ChooserPlanner:
        """The planner with the shipped chooser (or the one at ``path``) and its card's ``margin``.

        Raises:
            PolicyError: The file or its card cannot be used.
        """
        policy = load_policy(path)
        return cls(planner, onnx_scorer(policy), day_slots, name, float(policy.card.get("margin", 0.0)))
