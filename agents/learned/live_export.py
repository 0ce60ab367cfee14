"""The live policy's torch side: its actor's logits, the prior training starts from, and its export to ONNX.

``train_live.py`` and ``examples/live_ppo.py`` train a MaskablePPO (sb3-contrib) on GpuClusterLive-v0 with these;
the planner (:mod:`agents.rolling.live_ppo`) imports none of this: it runs the exported ONNX file, no torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents.rolling.live_policy import OBSERVATION_SIZE, action_offsets
from agents.rolling.live_ppo import CARD_FORMAT, card_spec


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
