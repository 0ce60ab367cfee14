"""Export a trained queue scorer to ONNX (one file, weights inside) with a JSON card beside it.

The ONNX model takes :data:`agents.ppo.INPUTS` (``jobs`` (B, n, F), ``mask``
(B, n), ``cluster`` (B, C)) and returns :data:`agents.ppo.OUTPUTS` (``scores``
(B, n), ``mode`` (B,)). The batch and job axes are dynamic, so one file plans
any queue. The card (``<name>.json``) records what the planner checks before use
(:func:`agents.ppo.observation_spec`), the Gumbel temperature, and what a reader
wants to know (config, seed, training history on the validation instances, the
round selected on them, its evaluation on instances of their own, versions).
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

from agents.ppo import CARD_FORMAT, INPUTS, OUTPUTS, observation_spec
from gpu_env.files import atomic_path, write_text_atomic
from gpu_env.queue_features import CLUSTER_FEATURES, JOB_FEATURES
from lab.training.scorer import QueueScorer

OPSET = 18


def example_inputs(jobs: int = 7, batch: int = 2, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random inputs of the given sizes (shapes for tracing and for the round-trip check)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand((batch, jobs, len(JOB_FEATURES)), generator=gen)
    mask = (torch.rand((batch, jobs), generator=gen) > 0.2).float()
    mask[:, 0] = 1.0
    cluster = torch.rand((batch, len(CLUSTER_FEATURES)), generator=gen)
    return x, mask, cluster


def export_onnx(model: QueueScorer, path: Path) -> None:
    """Write the scorer as one ONNX file (weights inside, dynamic batch and job axes)."""
    module = model.cpu().eval()
    axes: dict[str, dict[int, str]] = {
        "jobs": {0: "batch", 1: "jobs"},
        "mask": {0: "batch", 1: "jobs"},
        "cluster": {0: "batch"},
        "scores": {0: "batch", 1: "jobs"},
        "mode": {0: "batch"},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            example_inputs(),
            str(path),
            input_names=list(INPUTS),
            output_names=list(OUTPUTS),
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
            external_data=False,
        )


def max_score_difference(model: QueueScorer, onnx_path: Path) -> float:
    """Largest difference between torch and onnxruntime scores and mode logits on random inputs of several sizes."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    module = model.cpu().eval()
    worst = 0.0
    for jobs, batch in ((7, 2), (1, 1), (480, 1)):
        args = example_inputs(jobs, batch, seed=jobs)
        with torch.no_grad():
            expected = [t.numpy() for t in module(*args)]
        got = session.run(list(OUTPUTS), {k: a.numpy() for k, a in zip(INPUTS, args, strict=True)})
        for e, g in zip(expected, got, strict=True):
            keep = e > -1e8  # masked rows hold -1e9 in both
            worst = max(worst, float(np.abs(np.where(keep, e - g, 0.0)).max()))
    return worst


def export_policy(
    model: QueueScorer,
    path: str | os.PathLike[str],
    *,
    temperature: float,
    config: dict[str, Any] | None = None,
    seed: int | None = None,
    history: list[dict[str, Any]] | None = None,
    selection: dict[str, Any] | None = None,
    evaluation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Export ``model`` to ``path`` (``.onnx``) and its card to ``path`` with ``.json``; check the round trip.

    Args:
        model: The trained scorer.
        path: Where to write the ONNX file.
        temperature: Gumbel temperature the planner draws orders with.
        config: The training config, as plain data.
        seed: The training seed.
        history: Per-round training records (their figures on the validation instances).
        selection: The round exported and the validation instances it was chosen on.
        evaluation: The exported round on instances of its own, never used to choose it.

    Returns:
        The card.

    Raises:
        RuntimeError: ONNX and torch disagree on the exported scores.
    """
    path = Path(path)
    with atomic_path(path) as tmp:  # checked before it replaces the file
        export_onnx(model, tmp)
        check = max_score_difference(model, tmp)
        if not check < 1e-3:
            raise RuntimeError(f"{path}: ONNX and torch scores differ by {check:g}")
    network = {"class": "lab.training.scorer.QueueScorer", "hidden": model.hidden, "attention": model.attention}
    extra = {"seed": seed, "config": config, "history": history, "selection": selection, "evaluation": evaluation}
    export_check = {"max_score_difference": check}
    return write_card(path, model, CARD_FORMAT, observation_spec(), temperature, network, extra, export_check, OPSET)


def write_card(
    path: Path,
    model: torch.nn.Module,
    card_format: str,
    spec: dict[str, Any],
    temperature: float,
    network: dict[str, Any],
    extra: dict[str, Any],
    export_check: dict[str, float],
    opset: int,
) -> dict[str, Any]:
    """Write the card of the policy exported to ``path`` beside it (``path`` with ``.json``) and return it.

    The card's keys, in order: ``format``, ``file``, ``observation_spec``, ``temperature``, ``network``
    (``parameters`` counted on ``model`` last), those of ``extra``, ``export_check``, ``versions``.

    Args:
        path: The exported ONNX file.
        model: The network exported.
        card_format: The card's format (the planner's ``CARD_FORMAT``).
        spec: What the planner checks the policy was trained on (its ``observation_spec()``).
        temperature: Gumbel temperature the planner draws orders with.
        network: The network's class and sizes.
        extra: What the training run records (seed, config, history, ...).
        export_check: The round trip's largest difference between ONNX and torch, by name.
        opset: The ONNX opset of the export.
    """
    import onnxruntime

    card = {
        "format": card_format,
        "file": path.name,
        "observation_spec": spec,
        "temperature": temperature,
        "network": {**network, "parameters": int(sum(p.numel() for p in model.parameters()))},
        **extra,
        "export_check": export_check,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__.split("+")[0],
            "onnxruntime": onnxruntime.__version__,
            "opset": opset,
        },
    }
    write_text_atomic(path.with_suffix(".json"), json.dumps(card, indent=2) + "\n")
    return card
