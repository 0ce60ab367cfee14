"""Every scheduler by name, behind one face: ``plan(scenario, options) -> Plan``.

Adding a scheduler to the CLI and to ``evaluate.py`` is one line in ``SCHEDULERS``.
Modules are imported on first use, so a scheduler whose optional dependency is
missing does not stop the others.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable

from agents.options import PlanOptions
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario

Scheduler = Callable[[Scenario, PlanOptions], Plan]

# name -> "module:function"; the order is the order of report columns.
SCHEDULERS: dict[str, str] = {
    "fifo": "agents.fifo:plan",
    "backfill": "agents.backfill:plan",
    "greedy": "agents.greedy:plan",
    "ppo": "agents.ppo:plan",
    "ppo-stepwise": "agents.ppo_stepwise:plan",
    "cpsat": "agents.cpsat:plan",
    "full": "agents.full:plan",
}


OWN_PACKAGES = ("agents", "gpu_env")


class UnknownSchedulerError(ValueError):
    """A scheduler name that is not in SCHEDULERS."""


class SchedulerUnavailableError(Exception):
    """A scheduler whose module needs a third-party package that is not installed here."""


def get_scheduler(name: str) -> Scheduler:
    """The plan function of a scheduler.

    Raises:
        UnknownSchedulerError: No scheduler has this name.
        SchedulerUnavailableError: Its module needs a package that is not installed. Any other
            ImportError (one of this project's own modules, a name missing from a module) is a bug
            and propagates as it is.
    """
    if name not in SCHEDULERS:
        raise UnknownSchedulerError(f"unknown scheduler {name!r} (expected one of: {', '.join(SCHEDULERS)})")
    module, function = SCHEDULERS[name].split(":")
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if not missing or missing in OWN_PACKAGES:
            raise
        raise SchedulerUnavailableError(f"{name!r} needs the package {missing!r}, which is not installed") from exc
    return getattr(loaded, function)


def available_schedulers() -> list[str]:
    """Schedulers whose modules import here (optional dependencies installed)."""
    names = []
    for name in SCHEDULERS:
        try:
            get_scheduler(name)
        except SchedulerUnavailableError:
            continue
        names.append(name)
    return names


def run_scheduler(name: str, scenario: Scenario, options: PlanOptions | None = None, *, metrics: bool = True) -> Plan:
    """Plan with a scheduler, timing it and attaching the plan's metrics.

    ``metrics=False`` leaves ``plan.metrics`` None, for a hot path that reads only the placements and curves.
    """
    scheduler = get_scheduler(name)
    options = options or PlanOptions()
    started = time.perf_counter()
    plan = scheduler(scenario, options)
    plan.solve_ms = (time.perf_counter() - started) * 1000.0
    plan.scheduler = name
    if metrics:
        plan.metrics = compute_metrics(scenario, plan)
    return plan
