"""What the benchmark scripts share: the machine line, one-core pinning, Markdown tables, checked plans, best known.

The scripts in ``benchmarks/`` import the library only (this module included), never one another; each states its
own experiment. Times in their reports are wall clock on a shared machine, so each report carries
:func:`machine`'s line (the load average at the time) beside its figures.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from agents.options import PlanOptions
from gpu_env.files import write_text_atomic
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario
from gpu_env.validation import validate

__all__ = ["EPS", "best_known", "checked", "machine", "one_core", "results_header", "table", "write_report"]

EPS = 1e-6
"""Objectives closer than this are equal (a plan "below" another is below by more)."""


def machine() -> str:
    """The platform, Python, the CPU count and the load average now: the header line of a timed report."""
    load = "n/a" if not hasattr(os, "getloadavg") else ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load}"


@contextmanager
def one_core() -> Iterator[None]:
    """Pinned to one CPU core inside; the process's CPUs given back afterwards (later sections fan out again)."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if cpus is not None:
        os.sched_setaffinity(0, {sorted(cpus)[0]})
    try:
        yield
    finally:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)


def table(head: Sequence[str], rows: Sequence[Sequence[object]], right: int = 1) -> str:
    """A Markdown table; columns from ``right`` on are right-aligned.

    >>> print(table(["planner", "ratio"], [["greedy", "0.98"]]), end="")
    | planner | ratio |
    | --- | ---: |
    | greedy | 0.98 |
    """
    lines = ["| " + " | ".join(head) + " |"]
    lines.append("| " + " | ".join("---" if i < right else "---:" for i in range(len(head))) + " |")
    lines += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def commit() -> str:
    """The checkout's commit (``unknown`` outside a git work tree), with ``+changes`` when it has uncommitted ones."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "-uno"], cwd=root, capture_output=True, text=True)
    except OSError:
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + (" +changes" if dirty.stdout.strip() else "")


def results_header(command: str, what: str, when: str, note: str = "") -> str:
    """The first lines of a results file: what, the command, when, on what (``note`` closes the machine's line)."""
    return (
        f"# {what}\n\nWritten by `{command}` on {when} (Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs shared with other work: wall times swing with the load{note}).\n\n"
    )


def write_report(path: Path, lines: Sequence[str], command: str) -> None:
    """Write a report's lines and a last one with the command that reproduces it; say where on stdout."""
    write_text_atomic(path, "\n".join([*lines, f"Reproduce: `{command}`.", ""]))
    print(f"wrote {path}")


def checked(sc: Scenario, plan: Plan) -> Plan:
    """``plan`` if it passes the validator on ``sc``; ``RuntimeError`` naming the planner and the first problem."""
    problems = validate(sc, plan)
    if problems:
        raise RuntimeError(f"{plan.scheduler} plan invalid on {sc.name}: {problems[0]}")
    return plan


def best_known(
    sc: Scenario, policy: Path, values: list[float], time_limit: float, deterministic_time: float | None
) -> tuple[float, float | None, str, bool]:
    """(best known, full mode's objective, its status, proven): full mode's and ``values``' best.

    Proven: CP-SAT proved its plan optimal and no planner beat it. ``time_limit`` 0: no full mode.
    """
    from agents import full  # CP-SAT (ortools) only when asked: the scripts that need none import this module too

    best = max(values)
    if time_limit <= 0:
        return best, None, "not run", False
    options = PlanOptions(time_limit=time_limit, policy=policy, deterministic_time=deterministic_time)
    result = full.solve(sc, time_limit=time_limit, options=options, deterministic_time=deterministic_time)
    if result.plan is not None:
        checked(sc, result.plan)
    status = result.status.value
    if result.objective is None:
        return best, None, status, False
    proven = status == "optimal" and result.objective >= best - EPS
    return max(best, result.objective), result.objective, status, proven
