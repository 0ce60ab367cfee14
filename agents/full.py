"""Full mode: the fast planner's plan, handed to CP-SAT as a complete hint and improved within the time limit.

The seed's full mode. A fast scheduler (by default ``"auto"``: the better plan of
the learned policy ``ppo``, when its policy file loads, and the heuristic
``greedy``; or any name of :data:`agents.registry.SCHEDULERS`)
plans first. Its plan becomes a value for every variable of the exact model
(:meth:`agents.cpsat.ScheduleModel.add_hint`), so CP-SAT starts from a feasible
solution of known objective and spends the rest of the time limit improving it
and proving a bound. The plan returned is never worse than the hint: when
CP-SAT ends without a better plan, the hint itself is returned.

A fallback is never silent: when ``"auto"`` cannot run a source (no loadable
policy for ``ppo``), one line on stderr says which hint was used and why, and
``plan.info["hint"]`` records the hint's scheduler, every candidate's objective
and the ``fallback`` reason.

>>> from gpu_env.generators import generate
>>> plan(generate("training-heavy", seed=0)).info["status"]
'optimal'
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from typing import Any

from agents import cpsat
from agents.options import Guard, PlanOptions
from agents.ppo import PolicyError
from agents.registry import SchedulerUnavailableError, get_scheduler
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario
from gpu_env.validation import validate

DEFAULT_HINT_SOURCE = "auto"  # the better of greedy's plan and the learned policy's (when a policy loads)
AUTO_HINT_SOURCES = ("ppo", "greedy")
_EPS = 1e-9


class InvalidHintError(ValueError):
    """The hint source returned a plan that breaks a rule (a bug in that scheduler)."""


def solve(
    scenario: Scenario,
    *,
    time_limit: float = 10.0,
    workers: int = 1,
    seed: int = 0,
    hint_source: str = DEFAULT_HINT_SOURCE,
    options: PlanOptions | None = None,
    deterministic_time: float | None = None,
    formulation: cpsat.Formulation | None = None,
    use_hint: bool = True,
    use_cutoff: bool = False,
) -> cpsat.Result:
    """Plan with ``hint_source``, then improve its plan with CP-SAT until ``time_limit`` (hint time included).

    Args:
        scenario: The problem.
        time_limit: Wall-clock seconds for the whole call.
        workers: CP-SAT workers.
        seed: CP-SAT ``random_seed`` (and the hint scheduler's seed).
        hint_source: Name of the scheduler whose plan is the hint.
        options: Options for the hint scheduler (its ``policy``, for a learned one).
        deterministic_time: Also stop CP-SAT after this much deterministic time.
        formulation: Model options.
        use_hint: Hand the plan to CP-SAT as a hint of every variable.
        use_cutoff: Require CP-SAT's plans to reach the plan's objective (a constraint).

    Returns:
        The result; its plan is the better of CP-SAT's best plan and the hint, and
        its ``info`` holds the solver's status, bound and gap and, under ``"hint"``,
        :func:`choose_hint`'s record. The trace starts with the hint (its bound is
        infinite: nothing is proved yet).

    Raises:
        InvalidHintError: The hint scheduler's plan breaks a rule.
    """
    started = time.perf_counter()
    options = options or PlanOptions(time_limit=time_limit, seed=seed, workers=workers)
    hint, record = choose_hint(scenario, hint_source, options)
    problems = validate(scenario, hint)
    if problems:
        raise InvalidHintError(f"{record['scheduler']} returned an invalid plan: {problems[0]}")
    hint_objective = compute_metrics(scenario, hint).objective
    hint_point = cpsat.TracePoint(time.perf_counter() - started, hint_objective, float("inf"))
    result = cpsat.solve(
        scenario,
        time_limit=time_limit,
        workers=workers,
        seed=seed,
        deterministic_time=deterministic_time,
        hint=hint if use_hint else None,
        cutoff=hint if use_cutoff else None,
        formulation=formulation,
        started=started,
    )
    result.trace.insert(0, hint_point)
    if result.objective is None or result.objective < hint_objective - _EPS:
        proved = result.status is cpsat.Status.OPTIMAL and (
            result.objective is None or hint_objective >= result.objective - _EPS
        )
        status = cpsat.Status.OPTIMAL if proved else cpsat.Status.FEASIBLE
        chosen = Plan(hint.scenario, "full", list(hint.placements), dict(hint.curves))
        chosen.metrics = compute_metrics(scenario, chosen)
        bound = None if result.bound is None else max(result.bound, hint_objective)
        result.status, result.plan, result.objective, result.bound = status, chosen, hint_objective, bound
        chosen.info = cpsat.plan_info(status, bound, result.gap)
    if result.plan is not None:
        result.plan.info["hint"] = record
    result.runtime = time.perf_counter() - started
    return result


def choose_hint(scenario: Scenario, hint_source: str, options: PlanOptions) -> tuple[Plan, dict[str, Any]]:
    """The hint plan and a record of how it was chosen.

    ``"auto"`` runs every scheduler of ``AUTO_HINT_SOURCES`` (``ppo`` with ``guard="none"``) and keeps the best
    plan (the first on a tie). A source that cannot run (no loadable policy file,
    :class:`agents.ppo.PolicyError`, or a missing package,
    :class:`agents.registry.SchedulerUnavailableError`) is skipped, and the skip is said in one
    line on stderr. Any other exception is a bug in a source and propagates.

    Returns:
        The plan, and ``{"scheduler", "candidates", "info"}``: the source used, the
        objective of each candidate that ran, the hint plan's own ``info``; with
        ``"fallback"`` (``"name: reason"`` of each skipped source) when one failed.

    Raises:
        PolicyError, SchedulerUnavailableError: No source could run (the last one's error).
    """
    if hint_source != "auto":
        hint = get_scheduler(hint_source)(scenario, options)
        objective = compute_metrics(scenario, hint).objective
        return hint, {"scheduler": hint_source, "candidates": {hint_source: round(objective, 6)}, "info": hint.info}
    best: tuple[float, str, Plan] | None = None
    candidates: dict[str, float] = {}
    failures: list[str] = []
    for name in AUTO_HINT_SOURCES:
        # The learned candidate without its guard: greedy is a candidate of its own (not run twice).
        source_options = replace(options, guard=Guard.NONE) if name == "ppo" else options
        try:
            candidate = get_scheduler(name)(scenario, source_options)
        except (PolicyError, SchedulerUnavailableError) as exc:  # no usable policy file or runtime; a bug propagates
            if name == AUTO_HINT_SOURCES[-1] and best is None:
                raise
            failures.append(f"{name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
            continue
        objective = compute_metrics(scenario, candidate).objective
        candidates[name] = round(objective, 6)
        if best is None or objective > best[0] + _EPS:
            best = (objective, name, candidate)
    assert best is not None  # the last source either ran or raised
    objective, name, hint = best
    record: dict[str, Any] = {"scheduler": name, "candidates": candidates, "info": hint.info}
    if failures:
        record["fallback"] = "; ".join(failures)
        print(f"full: hint from {name} (objective {objective:.2f}), fallback: {record['fallback']}", file=sys.stderr)
    return hint, record


def plan(scenario: Scenario, options: PlanOptions | None = None, hint_source: str = DEFAULT_HINT_SOURCE) -> Plan:
    """Full mode as a scheduler: ``hint_source``'s plan improved by CP-SAT within ``options.time_limit``.

    ``plan.info`` holds the solver status, the proven bound and the optimality gap,
    and under ``"hint"`` which scheduler's plan was the hint and why (:func:`choose_hint`).
    """
    options = options or PlanOptions()
    result = solve(
        scenario,
        time_limit=options.time_limit,
        workers=options.workers,
        seed=options.seed,
        hint_source=hint_source,
        options=options,
        deterministic_time=options.deterministic_time,
    )
    if result.plan is None:  # solve returns at least the hint; this is a bug
        raise RuntimeError("full mode returned no plan")
    result.plan.scheduler = "full"
    return result.plan
