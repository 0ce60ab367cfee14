"""Full mode: the fast planner's plan, handed to CP-SAT as a complete hint and improved within the time limit.

The seed's full mode. A fast scheduler (by default ``"auto"``: the better plan of
the learned policy ``ppo``, when its policy file loads, and the heuristic
``greedy``; or any name of :data:`agents.registry.SCHEDULERS`)
plans first. Its plan becomes a value for every variable of the exact model
(:meth:`agents.cpsat.ScheduleModel.add_hint`), so CP-SAT starts from a feasible
solution of known objective and spends the rest of the time limit improving it
and proving a bound. The plan returned is never worse than the hint: when
CP-SAT ends without a better plan, the hint itself is returned.

>>> from gpu_env.generators import generate
>>> plan(generate("training-heavy", seed=0)).info["status"]
'optimal'
"""

from __future__ import annotations

import time

from agents import cpsat
from agents.options import PlanOptions
from agents.registry import get_scheduler
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
        The result; its plan is the better of CP-SAT's best plan and the hint. The
        trace starts with the hint (its bound is infinite: nothing is proved yet).

    Raises:
        InvalidHintError: The hint scheduler's plan breaks a rule.
    """
    started = time.perf_counter()
    options = options or PlanOptions(time_limit=time_limit, seed=seed, workers=workers)
    hint_source, hint = _hint(scenario, hint_source, options)
    problems = validate(scenario, hint)
    if problems:
        raise InvalidHintError(f"{hint_source} returned an invalid plan: {problems[0]}")
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
        chosen = Plan(hint.scenario, "full", list(hint.placements), dict(hint.realtime))
        chosen.metrics = compute_metrics(scenario, chosen)
        bound = None if result.bound is None else max(result.bound, hint_objective)
        result.status, result.plan, result.objective, result.bound = status, chosen, hint_objective, bound
        chosen.info = cpsat.plan_info(status, bound, result.gap)
    result.runtime = time.perf_counter() - started
    return result


def _hint(scenario: Scenario, hint_source: str, options: PlanOptions) -> tuple[str, Plan]:
    """The hint plan and the scheduler that made it; ``"auto"``: the best of ``AUTO_HINT_SOURCES`` that run."""
    if hint_source != "auto":
        return hint_source, get_scheduler(hint_source)(scenario, options)
    best: tuple[float, str, Plan] | None = None
    for name in AUTO_HINT_SOURCES:
        try:
            candidate = get_scheduler(name)(scenario, options)
        except (ImportError, ValueError):  # no usable policy file (agents.ppo.PolicyError) or runtime: skip it
            if name == AUTO_HINT_SOURCES[-1] and best is None:
                raise
            continue
        objective = compute_metrics(scenario, candidate).objective
        if best is None or objective > best[0] + _EPS:
            best = (objective, name, candidate)
    return best[1], best[2]


def plan(scenario: Scenario, options: PlanOptions | None = None, hint_source: str = DEFAULT_HINT_SOURCE) -> Plan:
    """Full mode as a scheduler: ``hint_source``'s plan improved by CP-SAT within ``options.time_limit``.

    ``plan.info`` holds the solver status, the proven bound and the optimality gap.
    """
    options = options or PlanOptions()
    result = solve(
        scenario,
        time_limit=options.time_limit,
        workers=options.workers,
        seed=options.seed,
        hint_source=hint_source,
        options=options,
    )
    if result.plan is None:  # solve returns at least the hint; this is a bug
        raise RuntimeError("full mode returned no plan")
    result.plan.scheduler = "full"
    return result.plan
