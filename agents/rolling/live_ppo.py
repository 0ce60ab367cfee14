"""``live-ppo``: the live planner whose slot decisions come from a policy trained by PPO on GpuClusterLive-v0.

At each slot it builds the slot's view (:func:`agents.rolling.live_policy.view`: the base plan of the state
and the features a live system knows), asks the policy for its logits, takes the most likely allowed value
of each action dimension, and makes that decision (:func:`~agents.rolling.live_policy.decide_action`). The
policy is an ONNX file with a card beside it (``agents/policies/live.onnx``, ``live.json``), trained by
``train_live.py`` (sb3-contrib's MaskablePPO); planning needs onnxruntime, never torch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.options import PlanOptions
from agents.ppo import PolicyError
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
    action_offsets,
    decide_action,
    view,
)

POLICY = Path(__file__).resolve().parents[1] / "policies" / "live.onnx"
"""The shipped live policy (its card: the same name, ``.json``)."""
CARD_FORMAT = "gpualloc-live-policy/1"


class LivePolicyError(PolicyError):
    """The live policy file or its card cannot be used (the message names the file and what is wrong).

    A :class:`agents.ppo.PolicyError`, so that the CLIs report it as they report the fast mode's policy.
    """


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
            LivePolicyError: The file or its card is missing, unreadable or made for another view.
        """
        planner = cls(Path(POLICY if path is None else path), **kwargs)
        planner._open()
        return planner

    def _open(self) -> None:
        card_path = self.path.with_suffix(".json")
        if not self.path.is_file():
            raise LivePolicyError(f"{self.path}: no live policy there (train one: python train_live.py)")
        try:
            card = json.loads(card_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise LivePolicyError(f"{card_path}: the live policy's card cannot be read ({exc})") from None
        if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
            raise LivePolicyError(f"{card_path}: format: expected {CARD_FORMAT!r}, got {card.get('format')!r}")
        want = card_spec()
        for key, value in want.items():
            if card.get("spec", {}).get(key) != value:
                raise LivePolicyError(
                    f"{card_path}: spec.{key}: the policy was trained for {card.get('spec', {}).get(key)!r}, "
                    f"this code builds {value!r}"
                )
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        try:
            self._session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise LivePolicyError(f"{self.path}: onnxruntime cannot load it ({exc})") from None
        try:  # one call at load, so that no cycle pays onnxruntime's first run
            (logits,) = self._session.run(None, {"observation": np.zeros((1, OBSERVATION_SIZE), dtype=np.float32)})
        except Exception as exc:
            raise LivePolicyError(f"{self.path}: the policy does not read this code's observation ({exc})") from None
        if np.asarray(logits).shape != (1, int(action_nvec().sum())):
            raise LivePolicyError(
                f"{self.path}: the policy answers {np.asarray(logits).shape[1:]} logits, this code reads "
                f"{int(action_nvec().sum())}"
            )
        self.card = card

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


def actor_logits(policy: Any, observation: Any) -> Any:
    """The logits of an SB3 (MaskablePPO) policy's actor for a batch of observations (a torch tensor).

    The path ``live-ppo`` plans with once exported (:func:`export`); training and the example read it too.
    """
    features = policy.extract_features(observation, policy.pi_features_extractor)
    return policy.action_net(policy.mlp_extractor.forward_actor(features))


def prefer_base(policy: Any, prior: float) -> None:
    """Raise the logit of each dimension's value 0 (start as planned, no headroom) by ``prior``.

    A policy that starts from the base decision: its values are e^prior times likelier than each other value.
    """
    import torch

    with torch.no_grad():
        policy.action_net.bias[torch.as_tensor(action_offsets())] += prior


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


def export(policy: Any, path: str | Path, card: Mapping[str, Any]) -> None:
    """Write an SB3 (MaskablePPO) policy's logits as ONNX, and its card beside it (both whole or not at all).

    Args:
        policy: ``model.policy`` of a MaskablePPO with a flat Box observation and a MultiDiscrete action.
        path: The ``.onnx`` file.
        card: What the card says besides :func:`card_spec` and the format (training, validation, seeds).
    """
    import torch

    from gpu_env.files import atomic_path, write_text_atomic

    class Logits(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, observation: torch.Tensor) -> torch.Tensor:
            return actor_logits(self.inner, observation)

    path = Path(path)
    module = Logits(policy).to("cpu").eval()
    dummy = torch.zeros(1, OBSERVATION_SIZE, dtype=torch.float32)
    with atomic_path(path) as tmp, torch.no_grad():
        torch.onnx.export(
            module,
            (dummy,),
            str(tmp),
            input_names=["observation"],
            output_names=["logits"],
            dynamic_axes={"observation": {0: "batch"}, "logits": {0: "batch"}},
            dynamo=False,
            opset_version=17,
        )
    text = json.dumps({"format": CARD_FORMAT, "file": path.name, "spec": card_spec(), **card}, indent=2) + "\n"
    write_text_atomic(path.with_suffix(".json"), text)
