"""Export a trained policy to ONNX (one file, no code inside) with a JSON card beside it.

The ONNX model takes the observation arrays of :data:`agents.ppo.INPUTS`, each
with a batch axis, and returns the raw action logits and the critic's value.
The batch, job, GPU, slot and app axes are dynamic, so one file plans any
cluster and queue size. Masks are not applied inside: the planner applies them.

The card (``<name>.json``) records what the planner checks before use (the
observation spec of :func:`agents.ppo.observation_spec`, the padded sizes used
in training) and what a reader wants to know (config, seed, steps, evaluation).
"""

from __future__ import annotations

import json
import os
import platform
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.learned.network import INPUTS, ExportModule, JobScorerPolicy
from agents.ppo import CARD_FORMAT, observation_spec
from gpu_env.files import atomic_path, write_text_atomic
from gpu_env.observation import Limits

OPSET = 18


def example_inputs(limits: Limits, batch: int = 2) -> tuple[torch.Tensor, ...]:
    """Zero observations of the given padded sizes, in the order of ``INPUTS`` (shapes for tracing)."""
    from gpu_env.observation import shapes

    shape = shapes(limits, 1)
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.rand((batch, *shape[key]), generator=gen) for key in INPUTS)


def export_onnx(policy: JobScorerPolicy, path: Path, limits: Limits) -> None:
    """Write the policy's logits and value as one ONNX file (weights inside, dynamic sizes)."""
    module = ExportModule(policy).cpu().eval()
    args = example_inputs(limits)
    axes: dict[str, dict[int, str]] = {
        "jobs": {0: "batch", 1: "jobs"},
        "gpus": {0: "batch", 1: "gpus"},
        "slots": {0: "batch", 1: "slots"},
        "apps": {0: "batch", 1: "apps", 2: "slots"},
        "app_info": {0: "batch", 1: "apps"},
        "globals": {0: "batch"},
        "logits": {0: "batch", 1: "actions"},
        "value": {0: "batch"},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=list(INPUTS),
            output_names=["logits", "value"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
            external_data=False,
        )


def write_card(path: Path, card: dict[str, Any]) -> None:
    """Write the card atomically (nothing half-written on failure)."""
    write_text_atomic(path, json.dumps(card, indent=2, sort_keys=False) + "\n")


def export_policy(
    policy: JobScorerPolicy,
    path: str | os.PathLike[str],
    limits: Limits,
    *,
    config: dict[str, Any] | None = None,
    seed: int | None = None,
    steps: int | None = None,
    evaluation: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Export ``policy`` to ``path`` (``.onnx``) and its card to ``path`` with ``.json``; check the round trip.

    Args:
        policy: The trained policy.
        path: Where to write the ONNX file.
        limits: The padded sizes used in training (the planner pads at least to them).
        config: The training config, as a plain dict.
        seed: The training seed.
        steps: Environment steps of PPO training.
        evaluation: Evaluation results to record.
        extra: More fields for the card.

    Returns:
        The card.

    Raises:
        RuntimeError: ONNX and torch disagree on the exported logits.
    """
    path = Path(path)
    with atomic_path(path) as tmp:  # checked before it replaces the file
        export_onnx(policy, tmp, limits)
        check = max_logit_difference(policy, tmp, limits)
        if not check < 1e-3:
            raise RuntimeError(f"{path}: ONNX and torch logits differ by {check:g}")
    import onnxruntime

    card = {
        "format": CARD_FORMAT,
        "file": path.name,
        "observation_spec": observation_spec(),
        "limits": {
            "max_gpus": limits.max_gpus,
            "max_jobs": limits.max_jobs,
            "max_slots": limits.max_slots,
            "max_apps": limits.max_apps,
        },
        "network": {
            "class": "agents.learned.network.JobScorer",
            "hidden": policy.features_extractor.net.hidden,
            "value_features": policy.features_extractor.net.value_features,
            "parameters": int(sum(p.numel() for p in policy.parameters())),
        },
        "seed": seed,
        "training_steps": steps,
        "config": config,
        "evaluation": evaluation,
        "export_check": {"max_logit_difference": check},
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__,
            "opset": OPSET,
        },
        **(extra or {}),
    }
    write_card(path.with_suffix(".json"), card)
    return card


def max_logit_difference(policy: JobScorerPolicy, onnx_path: Path, limits: Limits) -> float:
    """Largest difference between torch and onnxruntime logits on random observations (also at larger sizes)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    module = ExportModule(policy).cpu().eval()
    worst = 0.0
    bigger = Limits(limits.max_gpus * 2, limits.max_jobs * 2, limits.max_slots, limits.max_apps + 1)
    for lim in (limits, bigger):
        args = example_inputs(lim, batch=3)
        with torch.no_grad():
            expected = module(*args)[0].numpy()
        got = session.run(["logits"], {k: a.numpy() for k, a in zip(INPUTS, args, strict=True)})[0]
        worst = max(worst, float(np.abs(expected - got).max()))
    return worst
