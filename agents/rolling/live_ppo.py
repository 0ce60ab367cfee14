"""``live-ppo``: the live planner whose slot decisions come from a policy trained by PPO on GpuClusterLive-v0.

At each slot it builds the slot's view (:func:`agents.rolling.live_policy.view`: the base plan of the state
and the features a live system knows), asks the policy for its logits, takes the most likely allowed value
of each action dimension, and makes that decision (:func:`~agents.rolling.live_policy.decide_action`). The
policy is an ONNX file with a card beside it (``agents/policies/live.onnx``, ``live.json``), trained by
``train_live.py`` (sb3-contrib's MaskablePPO) and exported by :mod:`agents.learned.live_export`, read by the
learned planners' one loader (:mod:`agents.policy_files`); planning needs onnxruntime, never torch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents import policy_files
from agents.options import PlanOptions
from agents.policy_files import PolicyError, PolicyFile, PolicyKind
from agents.rolling.allocator import ClusterState, Decision
from agents.rolling.anticipate import LIVE_FORECAST
from agents.rolling.forecast import Corrector
from agents.rolling.live_policy import (
    AHEAD,
    HEADROOM,
    MAX_APPS,
    MAX_STARTS,
    OBSERVATION_SIZE,
    SlotView,
    action_nvec,
    decide_action,
    view,
)

POLICY = Path(__file__).resolve().parents[1] / "policies" / "live.onnx"
"""The shipped live policy (its card: the same name, ``.json``)."""
CARD_FORMAT = "gpualloc-live-policy/1"


LivePolicyError = PolicyError
"""The live policy file or its card cannot be used: the learned planners' one error (the CLIs report it, exit 2)."""


def card_spec() -> dict[str, Any]:
    """What a card must say for this code to read its policy: the view's sizes and the action's."""
    return {
        "observation_size": OBSERVATION_SIZE,
        "action_nvec": [int(n) for n in action_nvec()],
        "max_starts": MAX_STARTS,
        "max_apps": MAX_APPS,
        "headroom": list(HEADROOM),
        "ahead": AHEAD,
    }


def _check_card(card: dict[str, Any], card_file: Path) -> None:
    spec = card.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    for key, value in card_spec().items():
        if spec.get(key) != value:
            raise PolicyError(
                f"{card_file}: field 'spec.{key}': the policy was trained for {spec.get(key)!r}, "
                f"this code builds {value!r}"
            )


POLICY_FILES = PolicyKind("live policy", (CARD_FORMAT,), "train one with train_live.py", _check_card)
"""The live planner's policy files (:func:`agents.policy_files.load`)."""
_CACHE: dict[policy_files.CacheKey, PolicyFile] = {}
"""Loaded live policies by file version: every planner of the same file shares one session."""


def _loaded(policy: PolicyFile) -> PolicyFile:
    """The opened file, once the network has answered one observation with this code's logits."""
    try:  # one call at load, so that no cycle pays onnxruntime's first run
        (logits,) = policy.session.run(None, {"observation": np.zeros((1, OBSERVATION_SIZE), dtype=np.float32)})
    except Exception as exc:  # onnxruntime raises its own exception types
        raise PolicyError(f"{policy.path}: the policy does not read this code's observation ({exc})") from None
    if np.asarray(logits).shape != (1, int(action_nvec().sum())):
        raise PolicyError(
            f"{policy.path}: the policy answers {np.asarray(logits).shape[1:]} logits, this code reads "
            f"{int(action_nvec().sum())}"
        )
    return policy


def load_policy(path: str | Path | None = None) -> PolicyFile:
    """The live policy (default :data:`POLICY`), loaded once per file version, its card checked.

    Raises:
        PolicyError: The file or its card is missing, unreadable or made for another view.
    """
    return policy_files.load(POLICY if path is None else path, POLICY_FILES, _CACHE, _loaded)


@dataclass
class LivePPOPlanner:
    """The live planner of a trained live policy (module docstring).

    Attributes:
        path: The ONNX policy (its card beside it).
        name: How the planner is reported.
        base: The base planner the decisions are built on.
        forecaster: The demand forecast the rolling loop gives it (the live planner's, :data:`LIVE_FORECAST`).
        card: The policy's card, as read.
        policy_ms: Milliseconds of each policy call (for the benchmark).
    """

    path: Path = POLICY
    name: str = "live-ppo"
    base: str = "greedy"
    forecaster: Corrector = LIVE_FORECAST
    card: dict[str, Any] = field(default_factory=dict)
    policy_ms: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self._session: Any = None

    @classmethod
    def load(cls, path: str | Path | None = None, **kwargs: Any) -> LivePPOPlanner:
        """Read the policy (default :data:`POLICY`) and its card.

        Raises:
            PolicyError: The file or its card is missing, unreadable or made for another view.
        """
        planner = cls(Path(POLICY if path is None else path), **kwargs)
        planner._open()
        return planner

    def _open(self) -> None:
        policy = load_policy(self.path)
        self._session = policy.session
        self.card = policy.card

    def act(self, slot: SlotView) -> np.ndarray:
        """The policy's action for the slot: the most likely allowed value of each dimension."""
        if self._session is None:
            self._open()
        began = time.perf_counter()
        (logits,) = self._session.run(None, {"observation": slot.observation.reshape(1, -1)})
        self.policy_ms.append((time.perf_counter() - began) * 1000.0)
        return masked_argmax(np.asarray(logits, dtype=np.float64).reshape(-1), slot.mask)

    def decide(
        self,
        state: ClusterState,
        now: int,
        elapsed: Mapping[str, int] | None = None,
        options: PlanOptions | None = None,
    ) -> Decision:
        """This slot's decisions for the cluster state at slot ``now`` of the day."""
        slot = view(state, now, elapsed, base=self.base, options=options)
        return decide_action(slot, self.act(slot), base=self.base, options=options)


def masked_argmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per action dimension, the index of the largest logit among the values the mask allows."""
    nvec = action_nvec()
    out = np.zeros(len(nvec), dtype=np.int64)
    at = 0
    for i, n in enumerate(nvec):
        part = np.where(mask[at : at + n], logits[at : at + n], -np.inf)
        out[i] = int(np.argmax(part))
        at += n
    return out
