"""Where a learned plan spends its time: ms per plan in each part of ``agents.ppo.rollout_batch``, one core.

Wraps the parts of one batched rollout with wall-clock timers (the onnxruntime call,
``engine.step``, ``observe``, ``engine.action_masks``, ``choose_actions``, the engine's reset)
and plans each scenario ``--plans`` times after two warm-up plans, with the policy
alone (``--guard none``), at 1 and at ``--samples`` rollouts. The greedy heuristic's
median plan time on the same scenario, measured in the same process, is printed beside it.

Usage::

    PYTHONPATH=. taskset -c 0 .venv/bin/python benchmarks/ppo_time_split.py [--plans 20] [--samples 8]
        [--out benchmarks/results/ppo_time_split.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import ppo  # noqa: E402
from agents.registry import run_scheduler  # noqa: E402
from gpu_env.batch.engine import BatchEngine  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.metrics import compute_metrics  # noqa: E402
from gpu_env.scenario import load_scenario  # noqa: E402

SCENARIOS = ("mixed-control", "training-heavy", "batch-fragmentation", "scale-64x30")
PARTS = ("onnxruntime", "engine.step", "observe", "masks", "choose_actions", "reset")


class Timers:
    """Seconds spent in each wrapped callable, summed until :meth:`clear`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - started

        return timed

    def clear(self) -> None:
        self.seconds.clear()


def split(name: str, samples: int, plans: int, policy: ppo.LoadedPolicy, timers: Timers) -> dict[str, float]:
    """Mean ms per plan of each part of the rollouts, their total and the decisions, over ``plans`` plans."""
    sc = load_scenario(ROOT / "configs" / "scenarios" / f"{name}.yaml")
    logits = timers.wrap("onnxruntime", policy.logits)
    for _ in range(2):
        ppo.rollout_batch(sc, logits, policy.limits, samples=samples)
    timers.clear()
    started = time.perf_counter()
    decisions, building = 0, 0.0
    for _ in range(plans):
        rollouts = ppo.rollout_batch(sc, logits, policy.limits, samples=samples)
        decisions = rollouts.decisions
        built = time.perf_counter()  # what ppo.plan does after the rollouts: the winner's plan, then its metrics
        compute_metrics(sc, rollouts.plan(int(rollouts.objectives.argmax())))
        building += time.perf_counter() - built
    total = (time.perf_counter() - started - building) / plans * 1e3
    out = {part: timers.seconds[part] / plans * 1e3 for part in PARTS}
    out["total"] = total
    out["decisions"] = decisions
    out["plan"] = building / plans * 1e3
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=20)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    policy = ppo.load_policy()
    timers = Timers()
    with instrumented(timers):
        lines = table(policy, timers, args.plans, args.samples)
    header = (
        f"ms per plan in `agents.ppo.rollout_batch` (the rollouts; building the winner's plan and its metrics "
        f"comes after them, in the last column), mean of {args.plans} plans after 2 warm-up plans, `--guard none`, "
        "policy "
        f"{policy.path.name} ({policy.sha256[:12]}), numba kernels {_numba()}, "
        f"Python {platform.python_version()}; written by `PYTHONPATH=. taskset -c 0 .venv/bin/python "
        f"benchmarks/ppo_time_split.py --plans {args.plans} --samples {args.samples}`."
    )
    text = "\n".join([header, "", *lines]) + "\n"
    print(text)
    if args.out is not None:
        write_text_atomic(args.out, "# Where a learned plan spends its time\n\n" + text)
    return 0


@contextmanager
def instrumented(timers: Timers) -> Iterator[None]:
    """Wrap the parts where ``rollout_batch`` looks them up (module attributes, engine methods); restore them after."""
    saved = [
        (ppo, "observe", "observe"),
        (ppo, "choose_actions", "choose_actions"),
        (BatchEngine, "step", "engine.step"),
        (BatchEngine, "action_masks", "masks"),
        (BatchEngine, "reset", "reset"),
    ]
    originals = [getattr(owner, attr) for owner, attr, _ in saved]
    try:
        for (owner, attr, part), original in zip(saved, originals, strict=True):
            setattr(owner, attr, timers.wrap(part, original))
        yield
    finally:
        for (owner, attr, _), original in zip(saved, originals, strict=True):
            setattr(owner, attr, original)


def table(policy: ppo.LoadedPolicy, timers: Timers, plans: int, samples: int) -> list[str]:
    """The Markdown table: one row per scenario and rollout count (1 and ``samples``)."""
    lines = [
        "| scenario | samples | decisions | total ms | greedy ms | "
        + " | ".join(PARTS)
        + " | rest (Python between calls) | winner's plan + metrics ms (after the rollouts) |",
        "| --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in PARTS) + " | ---: | ---: |",
    ]
    for name in SCENARIOS:
        sc = load_scenario(ROOT / "configs" / "scenarios" / f"{name}.yaml")
        greedy_ms = []
        for _ in range(plans + 2):
            started = time.perf_counter()
            run_scheduler("greedy", sc)
            greedy_ms.append((time.perf_counter() - started) * 1e3)
        for count in sorted({1, samples}):
            row = split(name, count, plans, policy, timers)
            parts = [row[p] for p in PARTS]
            rest = row["total"] - sum(parts)
            cells = " | ".join(f"{v:.2f} ({v / row['total']:.0%})" for v in parts)
            lines.append(
                f"| {name} | {count} | {row['decisions']:.0f} | {row['total']:.2f} "
                f"| {statistics.median(greedy_ms[2:]):.2f} | {cells} | {rest:.2f} ({rest / row['total']:.0%}) "
                f"| {row['plan']:.2f} |"
            )
            print(lines[-1], file=sys.stderr)
    return lines


def _numba() -> str:
    """``GPUALLOC_NUMBA=0`` runs the engine's kernels as plain Python."""
    return "off (plain Python)" if os.environ.get("GPUALLOC_NUMBA", "1") == "0" else "on"


if __name__ == "__main__":
    raise SystemExit(main())
