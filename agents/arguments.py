"""Command-line arguments shared by ``gpualloc``, ``evaluate.py`` and the benchmarks: typed parsers and options."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.backends import LOCAL_RAY, RAY_INSTALL_HINT, Backend, FanoutError, check_cpu_budget
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


def add_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    flag: str,
    kind: Callable[[str], Any],
    default: Any,
    metavar: str,
    text: str,
) -> None:
    """An option of one value whose help is ``text`` and its default: ``(default: 8)``.

    A float default is written as ``:g`` writes it (``10``, ``0.5``), None as ``none``.
    """
    shown = "none" if default is None else f"{default:g}" if isinstance(default, float) else default
    parser.add_argument(flag, type=kind, default=default, metavar=metavar, help=f"{text} (default: {shown})")


def add_plan_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The arguments behind :class:`PlanOptions`, one per field.

    --time-limit, --deterministic-time, --workers, --seed, --policy, --samples, --guard.
    """
    add_option(
        parser, "--time-limit", positive_float, PlanOptions.time_limit, "S", "seconds per plan for anytime schedulers"
    )
    add_option(
        parser,
        "--deterministic-time",
        positive_float,
        None,
        "D",
        "also stop CP-SAT after D units of its deterministic time: with --workers 1, the same plan at any machine load",
    )
    add_option(parser, "--workers", int_at_least(1), 1, "N", "parallel solver workers")
    add_option(parser, "--seed", int_at_least(0), 0, "N", "seed for every random draw")
    parser.add_argument("--policy", type=Path, metavar="PATH", help="exported policy for the learned scheduler")
    add_option(
        parser,
        "--samples",
        int_at_least(1),
        PlanOptions.samples,
        "N",
        "candidate job orders of the learned scheduler: the argmax order and N-1 drawn from its scores",
    )
    add_option(
        parser,
        "--guard",
        guard_name,
        PlanOptions.guard,
        "|".join(Guard),
        "baseline the learned scheduler returns when it is worth more than every candidate",
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
        deterministic_time=args.deterministic_time,
    )


def add_fanout_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The arguments behind :func:`fanout_backend`: --parallel, --ray [ADDRESS], --task-timeout.

    ``--parallel`` and ``--ray`` are exclusive. ``--parallel N`` runs N tasks at once, each
    with ``--workers`` CP-SAT threads, so ``N x --workers`` must fit the machine's CPUs. On
    Ray each task asks for ``--workers`` CPUs and Ray runs as many at once as the cluster has.
    """
    add_option(
        parser,
        "--parallel",
        int_at_least(1),
        1,
        "N",
        "run N tasks at once in a local process pool; N x --workers must not exceed the CPUs",
    )
    parser.add_argument(
        "--ray",
        nargs="?",
        const=LOCAL_RAY,
        default=None,
        metavar="ADDRESS",
        help=f"run tasks on Ray: a local Ray, or the running cluster at ADDRESS (needs {RAY_INSTALL_HINT}); "
        "each task takes --workers CPUs",
    )
    add_option(
        parser,
        "--task-timeout",
        positive_float,
        None,
        "S",
        "report a task still running after S seconds as failed; keep it above --time-limit",
    )


def fanout_backend(args: argparse.Namespace) -> Backend:
    """The backend that :func:`add_fanout_options` arguments describe, checked before any task runs.

    Raises:
        FanoutError: ``--parallel`` with ``--ray``; ``--parallel x --workers`` above the CPUs
            (:class:`~agents.backends.OversubscribedError`); ``--ray`` without Ray installed
            (:class:`~agents.backends.RayNotInstalledError`). One line each: exit status 2.
    """
    if args.ray is not None:
        if args.parallel > 1:
            raise FanoutError("--parallel and --ray: choose one (Ray runs as many tasks at once as its CPUs allow)")
        return Backend.ray(args.ray)
    check_cpu_budget(args.parallel, getattr(args, "workers", 1))
    return Backend.pool(args.parallel)


def parse_floats(text: str) -> tuple[float, ...]:
    """Comma-separated numbers >= 0 (``0,0.3``), for ``--sigmas`` and the like."""
    values = tuple(float(x) for x in text.split(",") if x.strip())
    if not values or any(not math.isfinite(x) or x < 0 for x in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers >= 0, got {text!r}")
    return values


def parse_names(text: str) -> tuple[str, ...]:
    """Comma-separated names (``exact,trace``), blanks dropped."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def family_names(text: str) -> list[str]:
    """Comma-separated generator families (:data:`gpu_env.generators.FAMILIES`), at least one, each known."""
    from gpu_env.generators import FAMILIES

    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in FAMILIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected family names ({', '.join(FAMILIES)}), got {text!r}")
    return names


def gpu_counts(text: str) -> list[int]:
    """Comma-separated GPU counts, at least one, each at least 1."""
    try:
        sizes = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated GPU counts, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated GPU counts >= 1, got {text!r}")
    return sizes
