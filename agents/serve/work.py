"""What a request computes, the same in a thread of the server (fast mode) and in a worker process (exact mode).

A :class:`Job` is picklable data: the checked scenario (a frozen
:class:`~gpu_env.scenario.Scenario`, checked once when the request was read), the
scheduler's name, the plan options. :func:`compute` runs it with the project's own
functions (:func:`agents.registry.run_scheduler`, :func:`agents.live.allocator.decide`,
:func:`gpu_env.validation.validate`) and returns plain JSON-ready data:

- ``plan``: ``Plan.to_dict()``, exactly what ``gpualloc plan`` writes;
- ``decide``: ``Decision.to_dict()``, this slot's decisions and the plan.

Every plan is validated before it leaves: a scheduler that produced an invalid
plan has a bug, and :class:`InvalidPlanError` says so (a 500 with the violations).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from agents.options import PlanOptions
from gpu_env.scenario import Scenario

Kind = Literal["plan", "decide"]

EXACT = frozenset({"cpsat", "full"})
"""Schedulers that run CP-SAT: each request runs in a worker process of its own, under its time limit."""


class InvalidPlanError(Exception):
    """A scheduler returned a plan that breaks a rule: a bug, answered with a 500 and logged."""


@dataclass(frozen=True)
class Job:
    """One scheduler's work for one request (picklable: it crosses into a worker process).

    Attributes:
        kind: ``plan`` or ``decide``.
        scenario: The checked scenario.
        scheduler: A name of :data:`agents.registry.SCHEDULERS`.
        options: The request's plan options, the server's ``--policy`` set.
        expired: For ``decide``: queued jobs left out of the state, their deadline past reach.
    """

    kind: Kind
    scenario: Scenario
    scheduler: str
    options: PlanOptions
    expired: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        """Whether it runs CP-SAT (and so in a worker process)."""
        return self.scheduler in EXACT


def compute(job: Job) -> dict[str, Any]:
    """Run one job; returns the plan document (``plan``) or the decision document (``decide``).

    Raises:
        InvalidPlanError: The scheduler's plan breaks a rule (a bug).
        PolicyError, SchedulerUnavailableError: The scheduler cannot run here (the server's setup).
    """
    from agents.fanout import warm_up_learned
    from agents.live.allocator import decision_from_plan
    from agents.registry import run_scheduler
    from gpu_env.validation import validate

    scenario = job.scenario
    warm_up_learned(job.scheduler, job.options)  # once per process; keeps one-time costs out of solve_ms
    plan = run_scheduler(job.scheduler, scenario, job.options)
    violations = validate(scenario, plan)
    if violations:
        lines = "; ".join(str(v) for v in violations[:10])
        raise InvalidPlanError(f"{job.scheduler} returned an invalid plan ({len(violations)} violations): {lines}")
    if job.kind == "decide":
        return decision_from_plan(scenario, plan, job.expired).to_dict()
    return plan.to_dict()


def with_policy(options: PlanOptions, policy: Any) -> PlanOptions:
    """The options with the server's policy file (None: the shipped one)."""
    return replace(options, policy=policy)
