"""PPO against the former POMO step: trained policies side by side on the evaluation draws of their config.

    PYTHONPATH=. .venv/bin/python benchmarks/ppo_vs_pomo.py \\
        --arm pomo=runs/compare-pomo/policy.onnx --arm ppo=agents/policies/default.onnx \\
        [--arm NAME=POLICY ...] [--config configs/train/default.yaml] [--best-time-limit 2] \\
        [--deterministic-time 1.0] [--out benchmarks/results/ppo_vs_pomo.md]

Each arm is a policy exported by ``train.py``; its card says how it was trained
(the config's ``rl``, the rounds, the orders drawn and decoded by the
reinforcement rounds, the seconds). The instances are the ``eval`` draws of
``--config`` (seeds apart from training's and from the validation draws that
chose each arm's round, :meth:`agents.learned.config.TrainConfig.draws`; the
script checks that every arm's config draws the same evaluation instances).
Per instance and arm: the policy alone (one candidate, ``samples=1,
guard="none"``) and as shipped (12 candidates, the FIFO guard), through
:func:`agents.registry.run_scheduler`; greedy; and, at the seed's sizes, full
mode with ``--best-time-limit`` s (one worker, ``--deterministic-time`` work
units, so the same on any machine) for the best known. At 128-1,024 GPUs the
best known is the best of the planners here. Ratios are per instance, then the
mean; the paired differences against the first arm have their standard error
over the instances.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import full  # noqa: E402
from agents.learned.config import load_config  # noqa: E402
from agents.learned.training import draw_scenarios  # noqa: E402
from agents.options import Guard, PlanOptions  # noqa: E402
from agents.registry import run_scheduler  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.scenario import Scenario  # noqa: E402
from gpu_env.validation import validate  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "ppo_vs_pomo.md"
CONFIG = ROOT / "configs" / "train" / "default.yaml"


@dataclass
class Arm:
    """A trained policy and what its card says of its training."""

    name: str
    policy: Path
    card: dict = field(repr=False)

    @property
    def trained(self) -> str:
        cfg, last = self.card["config"], self.card["history"][-1]
        rl = cfg["rl"]
        if rl["algorithm"] == "ppo":
            step = f"PPO, {rl['epochs']} epochs, clip {rl['clip']}, ratio per {rl['ratio']}"
        else:
            step = "POMO (one REINFORCE step per batch)"
        chosen = self.card["selection"]
        return (
            f"{step}; rounds {cfg['small']['rounds']} + {cfg['large']['rounds']}, seed {cfg['seed']}; "
            f"{last['draws']:,} orders decoded; {last['seconds']:.0f} s; selected: {chosen['phase']} round "
            f"{chosen['step']}"
        )


def load_arm(text: str) -> Arm:
    name, _, path = text.partition("=")
    if not path:
        raise SystemExit(f"--arm {text!r}: expected NAME=POLICY.onnx")
    policy = Path(path)
    card = json.loads(policy.with_suffix(".json").read_text())
    if "selection" not in card:
        raise SystemExit(f"{policy}: its card has no 'selection' (trained before validation sets: retrain it)")
    return Arm(name, policy, card)


def _objective(sc: Scenario, scheduler: str, options: PlanOptions) -> float:
    plan = run_scheduler(scheduler, sc, options)
    problems = validate(sc, plan)
    if problems:
        raise SystemExit(f"{sc.name}: {scheduler} gave an invalid plan: {problems[0]}")
    return float(plan.metrics.objective)


def measure(
    instances: list[Scenario], arms: list[Arm], best_time: float, deterministic_time: float, large: bool
) -> dict[str, np.ndarray]:
    """Objectives per instance: greedy, best known, and each arm alone and as shipped."""
    out: dict[str, list[float]] = {"greedy": [], "best": []}
    for sc in instances:
        greedy = _objective(sc, "greedy", PlanOptions())
        values = [greedy]
        out["greedy"].append(greedy)
        for arm in arms:
            alone = _objective(sc, "ppo", PlanOptions(policy=arm.policy, samples=1, guard=Guard.NONE))
            shipped = _objective(sc, "ppo", PlanOptions(policy=arm.policy))
            out.setdefault(f"{arm.name}/alone", []).append(alone)
            out.setdefault(f"{arm.name}/shipped", []).append(shipped)
            values += [alone, shipped]
        best = max(values)
        if not large and best_time > 0:
            options = PlanOptions(time_limit=best_time, policy=arms[0].policy, workers=1)
            result = full.solve(sc, time_limit=best_time, options=options, deterministic_time=deterministic_time)
            if result.objective is not None:
                if result.plan is not None and validate(sc, result.plan):
                    raise SystemExit(f"{sc.name}: full mode gave an invalid plan")
                best = max(best, float(result.objective))
        out["best"].append(best)
    return {k: np.array(v) for k, v in out.items()}


def _mean_se(x: np.ndarray) -> str:
    se = x.std(ddof=1) / np.sqrt(x.size) if x.size > 1 else 0.0
    return f"{x.mean():+.4f} ± {se:.4f}"


def report(arms: list[Arm], small: dict[str, np.ndarray], large: dict[str, np.ndarray], header: list[str]) -> str:
    lines = [*header, "", "## Training", "", "| arm | how it was trained |", "| --- | --- |"]
    lines += [f"| {arm.name} | {arm.trained} |" for arm in arms]
    n_small, n_large = small["greedy"].size, large["greedy"].size
    lines += [
        "",
        f"## Quality on the evaluation draws ({n_small} at 8-64 GPUs, {n_large} at 128-1,024 GPUs)",
        "",
        "Mean per-instance ratio. 'one': the policy alone (one candidate); 'shipped': 12 candidates and the FIFO "
        "guard. Best known at 8-64 GPUs: full mode and every plan here; at 128-1,024 GPUs: every plan here.",
        "",
        "| arm | one / greedy | shipped / greedy | one / best | shipped / best | large: one / greedy "
        "| large: shipped / greedy |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for arm in arms:
        a, s = small[f"{arm.name}/alone"], small[f"{arm.name}/shipped"]
        la, ls = large[f"{arm.name}/alone"], large[f"{arm.name}/shipped"]
        g, b, lg = small["greedy"], small["best"], large["greedy"]
        cells = [(a / g).mean(), (s / g).mean(), (a / b).mean(), (s / b).mean(), (la / lg).mean(), (ls / lg).mean()]
        lines.append(f"| {arm.name} | " + " | ".join(f"{c:.4f}" for c in cells) + " |")
    first = arms[0]
    lines += [
        "",
        f"Paired differences against {first.name} (mean ± standard error over the instances, of the ratios to greedy):",
        "",
        "| arm | one, 8-64 | shipped, 8-64 | one, 128-1,024 | shipped, 128-1,024 |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for arm in arms[1:]:
        cells = []
        for data in (small, large):
            g = data["greedy"]
            for kind in ("alone", "shipped"):
                cells.append(_mean_se(data[f"{arm.name}/{kind}"] / g - data[f"{first.name}/{kind}"] / g))
        lines.append(f"| {arm.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _shown(path: Path) -> str:
    """A path as the results file shows it: relative to the repository where it lies inside."""
    resolved = path.resolve()
    return resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else path.as_posix()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arm", action="append", required=True, help="NAME=POLICY.onnx (the first is the reference)")
    parser.add_argument("--config", default=str(CONFIG), help="the training config whose eval draws are planned")
    parser.add_argument("--best-time-limit", type=float, default=2.0, help="full mode's seconds (0: none)")
    parser.add_argument("--deterministic-time", type=float, default=1.0, help="full mode's work units")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    arms = [load_arm(a) for a in args.arm]
    cfg = load_config(args.config)
    draws = cfg.draws()
    for arm in arms:
        theirs = arm.card["config"]["eval"]
        if (theirs["seed"], list(theirs["sizes"])) != (cfg.eval.seed, list(cfg.eval.sizes)):
            raise SystemExit(f"{arm.policy}: trained with other evaluation draws than {args.config}")
    began = time.perf_counter()
    small_sc = draw_scenarios(cfg.families, *draws["eval"])
    large_sc = draw_scenarios(cfg.families, *draws["eval_large"])
    small = measure(small_sc, arms, args.best_time_limit, args.deterministic_time, large=False)
    large = measure(large_sc, arms, args.best_time_limit, args.deterministic_time, large=True)
    command = "PYTHONPATH=. .venv/bin/python benchmarks/ppo_vs_pomo.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    header = [
        "# PPO against the former POMO step, side by side",
        "",
        f"- Command: `{command}`",
        f"- Instances: the `eval` draws of `{_shown(Path(args.config))}` (seeds {cfg.eval.seed}/"
        f"{cfg.eval.seed + 1}); no arm's training or round selection saw them.",
        f"- Machine: {platform.platform()}, Python {platform.python_version()}; {time.perf_counter() - began:.0f} s.",
    ]
    text = report(arms, small, large, header)
    write_text_atomic(Path(args.out), text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
