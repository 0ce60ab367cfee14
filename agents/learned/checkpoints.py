"""The run's saved policies: the latest checkpoint to resume from, and the export of the best policy."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from agents.learned.config import TrainConfig


def latest_checkpoint(folder: Path) -> Path | None:
    """The checkpoint with the most steps in ``folder`` (``ppo_<steps>_steps.zip``), if any."""
    found = []
    for path in folder.glob("ppo_*_steps.zip"):
        m = re.fullmatch(r"ppo_(\d+)_steps\.zip", path.name)
        if m:
            found.append((int(m.group(1)), path))
    return max(found)[1] if found else None


def export_best(model: Any, cfg: TrainConfig, limits: Any, run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """Export the best policy of the run (``best.zip``, else ``model``) to ``cfg.export`` with its card.

    The card records the config, the seed, the policy's steps, its evaluation
    (``best.json``, else the final one in ``summary``) and the training summary so far.

    Returns:
        Where the policy went and its training steps.
    """
    from sb3_contrib import MaskablePPO

    from agents.learned.export import export_policy

    best = run_dir / "best.zip"
    chosen = MaskablePPO.load(best, device="cpu") if best.exists() else model
    best_file = run_dir / "best.json"
    best_eval = json.loads(best_file.read_text()) if best_file.exists() else summary["final_eval"]
    card = export_policy(
        chosen.policy.to("cpu"),
        cfg.export,
        limits,
        config=dataclasses.asdict(cfg),
        seed=cfg.seed,
        steps=int(chosen.num_timesteps),
        evaluation={"instances": "eval.instances_per_family per family, seeds from eval.seed", **best_eval},
        extra={"training": summary},  # with the evaluation history (a few dozen numbers)
    )
    return {"path": cfg.export, "steps": card["training_steps"]}
