"""Command-line arguments shared by ``gpualloc`` and ``evaluate.py``: typed parsers and the plan options."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

from agents.options import Guard, PlanOptions


def positive_float(text: str) -> float:
    """Argparse type: a finite number above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def int_at_least(minimum: int) -> Callable[[str], int]:
    """Argparse type: an integer no less than ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def guard_name(text: str) -> Guard:
    """Argparse type: a :class:`Guard` by its value."""
    try:
        return Guard(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(Guard)}, got {text!r}") from None


def add_plan_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The arguments behind :class:`PlanOptions`: --time-limit, --workers, --seed, --policy, --samples, --guard."""
    parser.add_argument(
        "--time-limit",
        type=positive_float,
        default=PlanOptions.time_limit,
        metavar="S",
        help=f"seconds per plan for anytime schedulers (default: {PlanOptions.time_limit:g})",
    )
    parser.add_argument(
        "--workers", type=int_at_least(1), default=1, metavar="N", help="parallel solver workers (default: 1)"
    )
    parser.add_argument(
        "--seed", type=int_at_least(0), default=0, metavar="N", help="seed for every random draw (default: 0)"
    )
    parser.add_argument("--policy", type=Path, metavar="PATH", help="exported policy for the learned scheduler")
    parser.add_argument(
        "--samples",
        type=int_at_least(1),
        default=PlanOptions.samples,
        metavar="N",
        help=f"rollouts of the learned scheduler: the most likely one and N-1 sampled (default: {PlanOptions.samples})",
    )
    parser.add_argument(
        "--guard",
        type=guard_name,
        default=PlanOptions.guard,
        metavar="|".join(Guard),
        help="baseline the learned scheduler returns when it is worth more than every rollout "
        f"(default: {PlanOptions.guard})",
    )


def plan_options(args: argparse.Namespace) -> PlanOptions:
    """The PlanOptions that :func:`add_plan_options` arguments describe."""
    return PlanOptions(
        time_limit=args.time_limit,
        seed=args.seed,
        workers=args.workers,
        policy=args.policy,
        samples=args.samples,
        guard=args.guard,
    )
