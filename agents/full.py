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

import math
import sys
import time
from dataclasses import replace
from enum import StrEnum
from typing import Any

from agents import cpsat, lns
from agents.options import Guard, PlanOptions
from agents.registry import get_scheduler
from agents.relaxation import lp_bound
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario
from gpu_env.validation import validate

DEFAULT_HINT_SOURCE = "auto"  # the better of greedy's plan and the learned policy's (when a policy loads)
AUTO_HINT_SOURCES = ("ppo", "greedy")
LNS_AUTO_HINT_SOURCES = ("greedy",)
"""``"auto"`` above the LNS switch: greedy alone. The learned policy's 8 rollouts take 2 s at 256 GPUs and 21-32 s
at 1,024 (measured, docs/exact-mode.md), the whole budget; greedy takes 0.1-0.4 s and LNS passes the difference."""


class Mode(StrEnum):
    """How full mode improves its hint."""

    AUTO = "auto"  # LNS above agents.lns.LNS_ABOVE_JOBS jobs, else the whole model
    WHOLE = "whole"  # one CP-SAT model of the whole problem (the seed's full mode)
    LNS = "lns"  # large-neighbourhood search around CP-SAT (agents/lns.py)


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
    mode: Mode | str = Mode.AUTO,
    max_moves: int | None = None,
) -> cpsat.Result:
    """Plan with ``hint_source``, then improve its plan with CP-SAT until ``time_limit`` (hint time included).

    Args:
        scenario: The problem.
        time_limit: Wall-clock seconds for the whole call.
        workers: CP-SAT workers.
        seed: CP-SAT ``random_seed`` (and the hint scheduler's seed, and the neighbourhoods' draws).
        hint_source: Name of the scheduler whose plan is the hint.
        options: Options for the hint scheduler (its ``policy``, for a learned one).
        deterministic_time: Also stop CP-SAT after this much deterministic time (with LNS: the sum
            over the sub-solves, the repeatable budget).
        formulation: Model options.
        use_hint: Hand the plan to CP-SAT as a hint of every variable (whole model).
        use_cutoff: Require CP-SAT's plans to reach the plan's objective (a constraint; whole model).
        mode: ``"whole"`` (one CP-SAT model of everything), ``"lns"`` (large-neighbourhood search,
            :mod:`agents.lns`) or ``"auto"``: LNS above :data:`agents.lns.LNS_ABOVE_JOBS` jobs.
        max_moves: With LNS, stop after this many sub-solves.

    Returns:
        The result; its plan is the better of CP-SAT's best plan and the hint, and
        its ``info`` holds the solver's status, bound (the least of CP-SAT's and the
        LP relaxation's, :mod:`agents.relaxation`; ``bound_source`` says which) and gap,
        the ``mode``, the ``trace`` (seconds, objective, bound; the hint first, its
        bound null) and, under ``"hint"``, :func:`choose_hint`'s record.

    Raises:
        InvalidHintError: The hint scheduler's plan breaks a rule.
    """
    started = time.perf_counter()
    options = options or PlanOptions(time_limit=time_limit, seed=seed, workers=workers)
    mode = Mode(mode)
    search = mode is Mode.LNS or (mode is Mode.AUTO and lns.use_lns(scenario))
    sources = LNS_AUTO_HINT_SOURCES if search else AUTO_HINT_SOURCES
    hint, record = choose_hint(scenario, hint_source, options, sources)
    problems = validate(scenario, hint)
    if problems:
        raise InvalidHintError(f"{record['scheduler']} returned an invalid plan: {problems[0]}")
    hint_objective = compute_metrics(scenario, hint).objective
    if search:
        result = _search(
            scenario,
            hint,
            hint_objective,
            time_limit,
            workers,
            seed,
            deterministic_time,
            max_moves,
            started,
            formulation,
        )
    else:
        result = _whole(
            scenario,
            hint,
            hint_objective,
            time_limit,
            workers,
            seed,
            deterministic_time,
            use_hint,
            use_cutoff,
            started,
            formulation,
        )
    if result.plan is not None:
        result.plan.info["hint"] = record
    result.runtime = time.perf_counter() - started
    return result


def _whole(
    scenario: Scenario,
    hint: Plan,
    hint_objective: float,
    time_limit: float,
    workers: int,
    seed: int,
    deterministic_time: float | None,
    use_hint: bool,
    use_cutoff: bool,
    started: float,
    formulation: cpsat.Formulation | None,
) -> cpsat.Result:
    """The seed's full mode: CP-SAT on the whole model from the hint; the LP bound when it proves nothing."""
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
    assert result.plan is not None and result.objective is not None  # at least the hint
    bounds: dict[str, float | None] = {"cpsat": None if result.bound is None else round(result.bound, 6)}
    source = "cpsat"
    if result.status is not cpsat.Status.OPTIMAL:  # CP-SAT proved nothing: the LP relaxation may do better
        relaxed = lp_bound(scenario)
        bounds["lp-dual"] = round(relaxed.value, 6)
        if result.bound is None or relaxed.value < result.bound:
            result.bound, source = max(relaxed.value, result.objective), "lp-dual"
    end = time.perf_counter() - started
    result.trace.append(cpsat.TracePoint(end, result.objective, math.inf if result.bound is None else result.bound))
    result.plan.info = {
        **cpsat.plan_info(result.status, result.bound, result.gap),
        "bound_source": source,
        "bounds": bounds,
        "mode": Mode.WHOLE.value,
        "trace": cpsat.trace_info(result.trace),
    }
    return result


def _search(
    scenario: Scenario,
    hint: Plan,
    hint_objective: float,
    time_limit: float,
    workers: int,
    seed: int,
    deterministic_time: float | None,
    max_moves: int | None,
    started: float,
    formulation: cpsat.Formulation | None,
) -> cpsat.Result:
    """LNS from the hint (:func:`agents.lns.search`), its bound the certified LP relaxation."""
    outcome = lns.search(
        scenario,
        hint,
        time_limit=time_limit,
        workers=workers,
        seed=seed,
        deterministic_time=deterministic_time,
        max_moves=max_moves,
        started=started,
        formulation=formulation,
    )
    plan, objective = outcome.plan, outcome.objective
    problems = validate(scenario, plan)
    error = None
    if problems or objective < hint_objective - _EPS:  # a bug in agents/lns.py: never return worse than the hint
        error = str(problems[0]) if problems else f"objective {objective} below the hint's {hint_objective}"
        print(f"full: LNS plan refused ({error}), returning the hint", file=sys.stderr)
        plan = Plan(hint.scenario, "full", list(hint.placements), dict(hint.curves))
        plan.metrics = compute_metrics(scenario, plan)
        objective = plan.metrics.objective
    bound = max(outcome.bound.value, objective)
    gap = cpsat.optimality_gap(objective, bound)
    status = cpsat.Status.OPTIMAL if gap is not None and gap <= 1e-9 else cpsat.Status.FEASIBLE
    summary = {
        "moves": len(outcome.moves),
        "accepted": sum(m.gain > _EPS for m in outcome.moves),
        "deterministic_time": round(outcome.deterministic_time, 6),
        "kinds": lns.summary(outcome.moves),
    }
    if error is not None:
        summary["error"] = error
    plan.info = {
        **cpsat.plan_info(status, bound, gap),
        "bound_source": outcome.bound.source,
        "bounds": {"cpsat": None, outcome.bound.source: round(outcome.bound.value, 6)},
        "mode": Mode.LNS.value,
        "trace": cpsat.trace_info(outcome.trace),
        "lns": summary,
    }
    runtime = time.perf_counter() - started
    return cpsat.Result(status, plan, objective, bound, runtime, outcome.trace, 1, outcome.deterministic_time)


def choose_hint(
    scenario: Scenario, hint_source: str, options: PlanOptions, sources: tuple[str, ...] = AUTO_HINT_SOURCES
) -> tuple[Plan, dict[str, Any]]:
    """The hint plan and a record of how it was chosen.

    ``"auto"`` runs every scheduler of ``sources`` (``ppo`` with ``guard="none"``) and keeps the best
    plan (the first on a tie). A source that cannot run (no loadable policy file,
    :class:`agents.ppo.PolicyError`, or a missing runtime) is skipped, and the
    skip is said in one line on stderr.

    Returns:
        The plan, and ``{"scheduler", "candidates", "info"}``: the source used, the
        objective of each candidate that ran, the hint plan's own ``info``; with
        ``"fallback"`` (``"name: reason"`` of each skipped source) when one failed.

    Raises:
        ImportError, ValueError: No source could run (the last one's error).
    """
    if hint_source != "auto":
        hint = get_scheduler(hint_source)(scenario, options)
        objective = compute_metrics(scenario, hint).objective
        return hint, {"scheduler": hint_source, "candidates": {hint_source: round(objective, 6)}, "info": hint.info}
    best: tuple[float, str, Plan] | None = None
    candidates: dict[str, float] = {}
    failures: list[str] = []
    for name in sources:
        # The learned candidate without its guard: greedy is a candidate of its own (not run twice).
        source_options = replace(options, guard=Guard.NONE) if name == "ppo" else options
        try:
            candidate = get_scheduler(name)(scenario, source_options)
        except (ImportError, ValueError) as exc:  # no usable policy file (agents.ppo.PolicyError) or runtime
            if name == sources[-1] and best is None:
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
