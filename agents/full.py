"""Full mode: the fast planner's plan, handed to CP-SAT as a complete hint and improved within the time limit.

The seed's full mode. A fast scheduler (by default ``"auto"``: the better plan of
the learned policy ``ppo``, when its policy file loads, and the heuristic
``greedy``; or any name of :data:`agents.registry.SCHEDULERS`)
plans first. Its plan becomes a value for every variable of the exact model
(:meth:`agents.cpsat.ScheduleModel.add_hint`), so CP-SAT starts from a feasible
solution of known objective and spends the rest of the time limit improving it
and proving a bound. The plan returned is never worse than the hint: when
CP-SAT ends without a better plan, the hint itself is returned.

Full mode chooses by the instance's size (:class:`Mode`): up to
:data:`agents.lns.LNS_ABOVE_JOBS` jobs CP-SAT gets the whole model (the seed's
behaviour, which proves the optimum of every benchmark scenario in seconds);
above it, large-neighbourhood search around CP-SAT (:mod:`agents.lns`) improves
the hint a region at a time. Either way the bound is the least of CP-SAT's bound
on the whole model and the certified LP relaxation (:mod:`agents.relaxation`),
``plan.info["bound_source"]`` says which, and ``plan.info["trace"]`` records
objective and bound over time.

A fallback is never silent: when ``"auto"`` cannot run a source (no loadable
policy for ``ppo``), one line on stderr says which hint was used and why, and
``plan.info["hint"]`` records the hint's scheduler, every candidate's objective
and the ``fallback`` reason.

**The time limit is a bound.** Full mode returns within ``time_limit`` plus
:data:`GRACE_SECONDS` at every size: the hint, the learned plan beside the search
and the LP bound are each planned in a thread and waited for until the deadline,
never after; the whole model's search is stopped before it starts and while it
runs. Whatever is late is named in ``plan.info["hint"]["late"]``: a late learned
plan or LP bound is left out (the bound is then the weaker one of prices 0); a hint
that no source finished in time gives the fallback plan (the running jobs, each app
held at what it holds now where that fits, else at its ramp floor) with status
``unknown``. A thread left behind runs to its end in the background, and at most one
learned plan beside the search runs at a time.

>>> from gpu_env.generators import generate
>>> plan(generate("training-heavy", seed=0)).info["status"]
'optimal'
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum
from typing import Any

import numpy as np

from agents import cpsat, lns
from agents.options import Guard, PlanOptions
from agents.ppo import PolicyError
from agents.registry import SchedulerUnavailableError, get_scheduler
from agents.relaxation import Bound, lagrangian_bound, lp_bound
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario
from gpu_env.validation import validate

DEFAULT_HINT_SOURCE = "auto"  # the better of greedy's plan and the learned policy's (when a policy loads)
AUTO_HINT_SOURCES = ("ppo", "greedy")
LNS_AUTO_HINT_SOURCES = ("greedy",)
"""``"auto"`` above the LNS switch starts from greedy at once (0.1-0.4 s) and plans with the learned policy beside
the search, in a thread (docs/exact-mode.md); its plan joins the search when it is worth more."""

GRACE_SECONDS = 1.0
"""Full mode returns within its time limit plus this: the work after the deadline is the final check of the plan
(validation, metrics: 0.07 s at 1,024 GPUs and 1,331 jobs), CP-SAT's own stop, and the model of a whole-model
search begun just before the deadline (0.2 s at 166 jobs). Measured overruns in docs/exact-mode.md."""
HINT_SHARE = 0.5
"""``"auto"`` waits for its last hint candidates until this share of the time limit once one is ready (so that
CP-SAT keeps the rest), until the deadline while none is."""
SEARCH_LEAST = 0.05  # seconds: with less left at the hint, CP-SAT on the whole model is not started


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
    hint_plan: Plan | None = None,
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
        hint_plan: The hint itself, planned already by ``hint_source`` (the Slurm loop's fast plan):
            nothing is planned for the hint, and the whole time limit goes to the search.

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
    # Above the switch the learned plan is planned beside the search, except under a deterministic budget,
    # where the hint waits for it (as at the seed's sizes) so that the run repeats.
    beside = search and hint_source == DEFAULT_HINT_SOURCE and deterministic_time is None and hint_plan is None
    sources = LNS_AUTO_HINT_SOURCES if beside else AUTO_HINT_SOURCES
    if hint_plan is not None:
        objective = round(compute_metrics(scenario, hint_plan).objective, 6)
        chosen = hint_plan, {"scheduler": hint_source, "candidates": {hint_source: objective}, "info": hint_plan.info}
    else:
        chosen = _bounded_hint(scenario, hint_source, options, sources, started, time_limit)
    if chosen[0] is None:
        return _late(scenario, search, chosen[1], None, started, time_limit)
    hint, record = chosen
    lp = _lp_beside(scenario, record)  # after the hint, which it would only slow down
    learned = _learned_beside(scenario, options, record) if beside else None
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
            learned,
            record,
            lp,
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
            lp,
            record,
        )
    if result.plan is not None:
        result.plan.info["hint"] = record
    result.runtime = time.perf_counter() - started
    return result


class _Background:
    """One piece of work in a daemon thread, waited for until a deadline and left behind when late."""

    def __init__(self, name: str, work: Callable[[], Any]) -> None:
        self.box: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, args=(work,), name=name, daemon=True)
        self.thread.start()

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            self.box["value"] = work()
        except BaseException as exc:  # raised again in the caller's thread by result(): never lost here
            self.box["error"] = exc

    def wait(self, until: float) -> bool:
        """Wait until the work is done or ``time.perf_counter()`` reaches ``until``; whether it is done."""
        self.thread.join(timeout=max(0.0, until - time.perf_counter()))
        return not self.thread.is_alive()

    def result(self) -> Any:
        """The work's value (its exception raised again)."""
        if "error" in self.box:
            raise self.box["error"]
        return self.box["value"]


_LP_LEFT_BEHIND: list[_Background] = []
"""LP bounds that a call left running at its deadline; while one runs, the next call takes the bound of prices 0."""


def _lp_beside(scenario: Scenario, record: dict[str, Any]) -> _Background | None:
    """The LP bound (:func:`agents.relaxation.lp_bound`) in a thread; None while one left behind still runs."""
    _LP_LEFT_BEHIND[:] = [b for b in _LP_LEFT_BEHIND if b.thread.is_alive()]
    if _LP_LEFT_BEHIND:
        record.setdefault("late", []).append("lp-bound")
        return None
    return _Background("full-lp-bound", lambda: lp_bound(scenario))


def _bound(background: _Background | None, scenario: Scenario, until: float, record: dict[str, Any] | None) -> Bound:
    """The LP bound when it is ready by ``until``, else the weaker bound of prices 0 (``record`` says it was late)."""
    if background is not None:
        if background.wait(until):
            return background.result()
        _LP_LEFT_BEHIND.append(background)
        if record is not None:
            record.setdefault("late", []).append("lp-bound")
    return Bound(lagrangian_bound(scenario, np.zeros(scenario.slots)), "lp-dual")


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
    lp: _Background | None,
    record: dict[str, Any],
) -> cpsat.Result:
    """The seed's full mode: CP-SAT on the whole model from the hint; the LP bound when it proves nothing.

    With less than :data:`SEARCH_LEAST` seconds left after the hint, CP-SAT is not started (the hint
    comes back, ``"search"`` late); the LP bound is the one ``lp`` has ready by the deadline.
    """
    hint_point = cpsat.TracePoint(time.perf_counter() - started, hint_objective, float("inf"))
    if time_limit - (time.perf_counter() - started) < SEARCH_LEAST:
        record.setdefault("late", []).append("search")
        result = cpsat.Result(cpsat.Status.UNKNOWN, None, None, None, 0.0, [])
    else:
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
        relaxed = _bound(lp, scenario, started + time_limit, record)
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
    learned: tuple[threading.Thread, dict[str, Any]] | None = None,
    record: dict[str, Any] | None = None,
    lp: _Background | None = None,
) -> cpsat.Result:
    """LNS from the hint (:func:`agents.lns.search`); with 2 workers or more, CP-SAT on the whole model beside it.

    ``learned`` is :func:`_learned_beside`'s thread: the learned policy's plan, planned beside the
    search; LNS continues from it when it arrives and is worth more, and it is returned when it is
    worth more than the search's plan (the call waits for it until the deadline, never after: late,
    it is left out and ``record["late"]`` says so). ``lp`` is the LP bound planned in a thread since
    the call began: the search waits for it until the deadline (late: the bound of prices 0).

    The portfolio (up to :data:`PORTFOLIO_MAX_JOBS` jobs): one thread runs CP-SAT on the whole model
    with ``workers - 1`` workers in :data:`WHOLE_ROUNDS` rounds, each hinted with the best plan either
    search has then (its search improves mid-size instances and may prove them, its bound may beat
    the LP's); the other runs LNS with one-worker sub-solves and continues from any better plan the
    whole model finds. Whichever proves the optimum first stops the other; the better plan is
    returned. With one worker, or above the portfolio's size, LNS runs alone (with one worker: repeatable).
    """
    deadline = started + time_limit
    whole: dict[str, Any] = {"results": []}
    stop = _Stop()
    thread = None
    if workers >= 2 and len(scenario.jobs) <= PORTFOLIO_MAX_JOBS:
        thread = _start_whole_model(
            scenario, hint, whole, stop, time_limit, workers, seed, deterministic_time, started, formulation
        )
    outcome = lns.search(
        scenario,
        hint,
        time_limit=time_limit,
        workers=1 if thread is not None else workers,
        seed=seed,
        deterministic_time=deterministic_time,
        max_moves=max_moves,
        started=started,
        bound=_bound(lp, scenario, deadline, record),
        formulation=formulation,
        stop=stop.event,
        incoming=lambda: whole.pop("plan", None) or (learned[1].pop("plan", None) if learned else None),
        outgoing=lambda found: whole.__setitem__("lns_plan", found),
    )
    trace = list(outcome.trace)
    plan, objective = outcome.plan, outcome.objective
    bounds: dict[str, float | None] = {"cpsat": None, outcome.bound.source: round(outcome.bound.value, 6)}
    bound, source = outcome.bound.value, outcome.bound.source
    portfolio: dict[str, Any] = {"lns": round(objective, 6), "adopted": outcome.adopted}
    if thread is not None:
        plan, objective, bound, source = _join_whole_model(
            thread, whole, stop, deadline, record, portfolio, trace, bounds, plan, objective, bound, source
        )
    if learned is not None:
        plan, objective = _join_learned(
            scenario, hint, learned, deadline, started, record, trace, plan, objective, bound
        )
    plan, objective, error = _checked_plan(scenario, hint, hint_objective, plan, objective)
    plan.scheduler = "full"
    bound = max(bound, objective)
    gap = cpsat.optimality_gap(objective, bound)
    status = cpsat.Status.OPTIMAL if gap is not None and gap <= 1e-9 else cpsat.Status.FEASIBLE
    trace = _merged(trace, time.perf_counter() - started)
    summary: dict[str, Any] = {
        "moves": len(outcome.moves),
        "accepted": sum(m.gain > _EPS for m in outcome.moves),
        "deterministic_time": round(outcome.deterministic_time, 6),
        "kinds": lns.summary(outcome.moves),
        "portfolio": portfolio,
    }
    if error is not None:
        summary["error"] = error
    plan.info = {
        **cpsat.plan_info(status, bound, gap),
        "bound_source": source,
        "bounds": bounds,
        "mode": Mode.LNS.value,
        "trace": cpsat.trace_info(trace),
        "lns": summary,
    }
    runtime = time.perf_counter() - started
    return cpsat.Result(status, plan, objective, bound, runtime, trace, 1, outcome.deterministic_time)


def _start_whole_model(
    scenario: Scenario,
    hint: Plan,
    whole: dict[str, Any],
    stop: _Stop,
    time_limit: float,
    workers: int,
    seed: int,
    deterministic_time: float | None,
    started: float,
    formulation: cpsat.Formulation | None,
) -> threading.Thread:
    """Start the portfolio's other search: :func:`_whole_rounds` with ``workers - 1`` workers, in a daemon thread.

    Args:
        scenario: The problem.
        hint: The plan the first round starts from.
        whole: Shared with the thread: its ``"results"``, the ``"plan"`` it offers LNS, the ``"lns_plan"``
            LNS offers it, and a ``"bug"`` it raised.
        stop: Stops its search.
        time_limit: Wall-clock seconds from ``started``.
        workers: The call's workers (the thread takes all but one).
        seed: CP-SAT's seed of the first round.
        deterministic_time: CP-SAT's deterministic time limit of each round.
        started: ``perf_counter`` when the call began.
        formulation: Model options.

    Returns:
        The thread, started.
    """
    thread = threading.Thread(
        target=_captured,
        args=(
            whole,
            _whole_rounds,
            *(scenario, hint, whole, stop, time_limit, workers - 1, seed, deterministic_time, started, formulation),
        ),
        name="full-whole-model",
        daemon=True,
    )
    thread.start()
    return thread


def _join_whole_model(
    thread: threading.Thread,
    whole: dict[str, Any],
    stop: _Stop,
    deadline: float,
    record: dict[str, Any] | None,
    portfolio: dict[str, Any],
    trace: list[cpsat.TracePoint],
    bounds: dict[str, float | None],
    plan: Plan,
    objective: float,
    bound: float,
    source: str,
) -> tuple[Plan, float, float, str]:
    """Stop the whole model's thread once LNS is done and take what its rounds found.

    The thread is waited for until the deadline (or :data:`JOIN_SLACK` from now); late, it is left
    behind and ``record["late"]`` says so. Each round's trace joins ``trace``, its bound
    ``bounds["cpsat"]`` (when least), and its plan replaces ``plan`` when worth more.

    Args:
        thread: :func:`_start_whole_model`'s thread.
        whole: What the thread shares (its ``"results"``, a ``"bug"`` it raised).
        stop: Stops its search.
        deadline: ``perf_counter`` at the call's time limit.
        record: The hint's record, or None.
        portfolio: ``plan.info["lns"]["portfolio"]``; gets ``"whole"`` and maybe ``"left_behind"``.
        trace: The trace so far; the rounds' points are added.
        bounds: Each source's bound; ``"cpsat"`` is set.
        plan: The best plan so far (LNS's).
        objective: Its objective.
        bound: The least bound so far.
        source: Which source gave it.

    Returns:
        The best plan, its objective, the least bound and its source.

    Raises:
        BaseException: What the thread raised (a bug), raised again.
    """
    stop.set()  # LNS is done (time, moves or a proof): the whole model stops too, started or not
    if not stop.join(thread, max(deadline, time.perf_counter() + JOIN_SLACK)):
        portfolio["left_behind"] = "the whole model's search did not stop by the deadline; its last round is left out"
        if record is not None:
            record.setdefault("late", []).append("whole-model")
    if "bug" in whole:
        raise whole["bug"]
    results: list[cpsat.Result] = list(whole["results"])
    portfolio["whole"] = [
        {"objective": None if r.objective is None else round(r.objective, 6), "status": r.status.value} for r in results
    ]
    for result in results:
        trace += result.trace
        if result.bound is not None and (bounds["cpsat"] is None or result.bound < bounds["cpsat"]):
            bounds["cpsat"] = round(result.bound, 6)
            if result.bound < bound:
                bound, source = result.bound, "cpsat"
        if result.plan is not None and result.objective is not None and result.objective > objective + _EPS:
            plan, objective = result.plan, result.objective
    return plan, objective, bound, source


def _join_learned(
    scenario: Scenario,
    hint: Plan,
    learned: tuple[threading.Thread, dict[str, Any]],
    deadline: float,
    started: float,
    record: dict[str, Any] | None,
    trace: list[cpsat.TracePoint],
    plan: Plan,
    objective: float,
    bound: float,
) -> tuple[Plan, float]:
    """Wait for the learned plan beside the search until the deadline; take it when it is worth more.

    Late, its thread is left behind (:data:`_LEFT_BEHIND`) and ``record["late"]`` says so, on stderr
    too. ``record`` gets the learned plan's objective among the candidates, or its ``"fallback"``
    reason (said on stderr).

    Args:
        scenario: The problem.
        hint: The hint (its ``scenario`` name goes to the plan taken).
        learned: :func:`_learned_beside`'s thread and the dict its plan lands in.
        deadline: ``perf_counter`` at the call's time limit.
        started: ``perf_counter`` when the call began.
        record: The hint's record, or None.
        trace: The trace so far; a point is added when the learned plan is taken.
        plan: The best plan so far.
        objective: Its objective.
        bound: The least bound so far.

    Returns:
        The best plan and its objective.

    Raises:
        BaseException: What the learned planner raised (a bug), raised again.
    """
    learned[0].join(timeout=max(0.0, deadline - time.perf_counter()))
    box = learned[1]
    if learned[0].is_alive():
        _LEFT_BEHIND.append(learned[0])
        box = {}  # not finished by the deadline: left out
        if record is not None:
            record.setdefault("late", []).append("ppo")
            print("full: the learned plan beside the search was not ready by the deadline; left out", file=sys.stderr)
    if "bug" in box:
        raise box["bug"]
    if record is not None and "objective" in box:
        record["candidates"]["ppo"] = round(box["objective"], 6)
        record["beside"] = "ppo"
    if record is not None and "error" in box:
        record["fallback"] = box["error"]
        print(f"full: no learned plan beside the search, fallback: {box['error']}", file=sys.stderr)
    if "final" in box and box["objective"] > objective + _EPS:
        plan = Plan(hint.scenario, "full", list(box["final"].placements), dict(box["final"].curves))
        plan.metrics = compute_metrics(scenario, plan)
        objective = plan.metrics.objective
        trace.append(cpsat.TracePoint(time.perf_counter() - started, objective, bound))
    return plan, objective


def _checked_plan(
    scenario: Scenario, hint: Plan, hint_objective: float, plan: Plan, objective: float
) -> tuple[Plan, float, str | None]:
    """The search's plan, or a copy of the hint when that plan breaks a rule or is worth less (a bug, said on stderr).

    Args:
        scenario: The problem.
        hint: The hint.
        hint_objective: Its objective.
        plan: The search's best plan.
        objective: Its objective.

    Returns:
        The plan returned, its objective, and why the search's plan was refused (None when it was not).
    """
    problems = validate(scenario, plan)
    error = None
    if problems or objective < hint_objective - _EPS:  # a bug: never return worse than the hint
        error = str(problems[0]) if problems else f"objective {objective} below the hint's {hint_objective}"
        print(f"full: plan refused ({error}), returning the hint", file=sys.stderr)
        plan = Plan(hint.scenario, "full", list(hint.placements), dict(hint.curves))
        plan.metrics = compute_metrics(scenario, plan)
        objective = plan.metrics.objective
    return plan, objective, error


PORTFOLIO_MAX_JOBS = 300
"""Above the LNS switch and up to this many jobs, with 2 workers or more, CP-SAT on the whole model runs beside LNS.

Measured (30 s, greedy hint, 2 workers): the whole model proved the optimum of scale-64x30 at 512 GPUs (240 jobs)
and reached 0.98-0.997 of the bound at 128 GPUs (141-166 jobs), but added nothing to the hint on priority-inversion
at 256 GPUs (192 jobs) or at 282 jobs and more; above 300 jobs its thread would only take a core from LNS."""

WHOLE_ROUNDS = 3
"""The portfolio's whole-model thread restarts CP-SAT this many times within the budget, each from the best plan
either search has then (a restart costs a presolve: 0.8 s at 128 GPUs)."""


def _whole_rounds(
    scenario: Scenario,
    hint: Plan,
    shared: dict[str, Any],
    stop: _Stop,
    time_limit: float,
    workers: int,
    seed: int,
    deterministic_time: float | None,
    started: float,
    formulation: cpsat.Formulation | None,
) -> None:
    """CP-SAT on the whole model in rounds, each hinted with the best plan so far; results go to ``shared``."""
    best = hint
    best_objective = compute_metrics(scenario, hint).objective
    for round_ in range(WHOLE_ROUNDS):
        if stop.is_set():
            return
        left = time_limit - (time.perf_counter() - started)
        if left < 1.0:
            return
        offered = shared.get("lns_plan")
        if offered is not None:
            value = compute_metrics(scenario, offered).objective
            if value > best_objective + _EPS:
                best, best_objective = offered, value
        end = time_limit if round_ == WHOLE_ROUNDS - 1 else time_limit - left + left / (WHOLE_ROUNDS - round_)
        result = cpsat.solve(
            scenario,
            time_limit=end,
            workers=workers,
            seed=seed + round_,
            deterministic_time=deterministic_time,
            hint=best,
            formulation=formulation,
            started=started,
            on_solver=stop.attach,
            on_plan=lambda found: shared.__setitem__("plan", found),
        )
        shared["results"].append(result)
        if result.plan is not None and result.objective is not None and result.objective > best_objective + _EPS:
            best, best_objective = result.plan, result.objective
        if result.status is cpsat.Status.OPTIMAL:
            stop.set()
            return


JOIN_SLACK = 0.1  # seconds a stopped thread may take beyond the deadline to end, before it is left behind


class _Stop:
    """A stop for a CP-SAT search in another thread that reaches it before the search starts and while it runs.

    :meth:`attach` is ``cpsat.solve``'s ``on_solver``, called just before the search: a stop set by
    then leaves the search no time at all. :meth:`set` stops a search already attached; since CP-SAT's
    ``stop_search`` does nothing in the moment between ``on_solver`` and the search's start,
    :meth:`join` repeats it while it waits for the thread.
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._solver: Any = None

    def is_set(self) -> bool:
        """Whether the stop was set."""
        return self.event.is_set()

    def attach(self, solver: Any) -> None:
        """The search about to start (``on_solver``); none at all when the stop is already set."""
        with self._lock:
            self._solver = solver
            if self.event.is_set():
                solver.parameters.max_time_in_seconds = 0.001
                solver.parameters.max_deterministic_time = 0.0

    def set(self) -> None:
        """Stop: no search starts from now on, the one attached stops."""
        with self._lock:
            self.event.set()
            if self._solver is not None:
                self._solver.stop_search()

    def join(self, thread: threading.Thread, until: float) -> bool:
        """Wait for ``thread`` until ``until`` (``perf_counter``), stopping its search again; whether it ended."""
        while thread.is_alive() and time.perf_counter() < until:
            with self._lock:
                if self.event.is_set() and self._solver is not None:
                    self._solver.stop_search()
            thread.join(timeout=min(0.05, max(0.0, until - time.perf_counter())))
        return not thread.is_alive()


def _skip_reason(name: str, exc: BaseException) -> str:
    """``name: first line of the error`` (its type where it has no message): how a skipped hint source is named."""
    text = str(exc)
    return f"{name}: {text.splitlines()[0] if text else type(exc).__name__}"


def _captured(box: dict[str, Any], function: Any, *args: Any) -> None:
    """Run ``function(*args)`` in a thread; an exception is kept in ``box["bug"]`` for the caller to raise again."""
    try:
        function(*args)
    except BaseException as exc:  # re-raised by the caller after join: a bug in a thread is never lost
        box["bug"] = exc


_LEFT_BEHIND: list[threading.Thread] = []
"""Learned plans beside the search that a call left running at its deadline; while one runs, no other starts."""


def _learned_beside(
    scenario: Scenario, options: PlanOptions, record: dict[str, Any] | None = None
) -> tuple[threading.Thread, dict[str, Any]] | None:
    """Start the learned policy (``ppo``, no guard) in a thread; its valid plan lands in the returned dict.

    Above the LNS switch the ``auto`` hint is greedy's, at once, and the learned plan joins when it
    is ready (measured: 2-7 s at 256 GPUs, 21-32 s at 1,024, and better than greedy's by 0.1-1.8 %
    on the priority-inversion, uniform-priority and scale-64x30 families). The dict gets
    ``"plan"`` (taken by LNS), ``"final"`` and ``"objective"``, or ``"error"`` (``"ppo: reason"``).
    None, and ``record["late"]`` says so, while one left behind by an earlier call still runs:
    threads are never stacked up by calls that each stop at their deadline.
    """
    _LEFT_BEHIND[:] = [t for t in _LEFT_BEHIND if t.is_alive()]
    if _LEFT_BEHIND:
        if record is not None:
            record.setdefault("late", []).append("ppo")
            record["beside"] = "ppo: not started, the one an earlier call left behind still runs"
        return None
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            found = get_scheduler("ppo")(scenario, replace(options, guard=Guard.NONE))
        except (PolicyError, SchedulerUnavailableError) as exc:  # no usable policy file or runtime
            box["error"] = _skip_reason("ppo", exc)
            return
        except BaseException as exc:  # a bug in the planner: raised again in the caller's thread, not lost here
            box["bug"] = exc
            return
        problems = validate(scenario, found)
        if problems:
            box["error"] = f"ppo: returned an invalid plan: {problems[0]}"
            return
        box["objective"] = compute_metrics(scenario, found).objective
        box["final"] = box["plan"] = found

    thread = threading.Thread(target=run, name="full-learned-hint", daemon=True)
    thread.start()
    return thread, box


def _merged(points: list[cpsat.TracePoint], end: float) -> list[cpsat.TracePoint]:
    """Points of several searches as one trace: in time order, the best objective and the least bound so far."""
    out: list[cpsat.TracePoint] = []
    best, least = -math.inf, math.inf
    for p in sorted(points, key=lambda p: p.seconds):
        best, least = max(best, p.objective), min(least, p.bound)
        out.append(cpsat.TracePoint(p.seconds, best, least))
    if out:
        out.append(cpsat.TracePoint(max(end, out[-1].seconds), best, least))
    return out


def choose_hint(
    scenario: Scenario, hint_source: str, options: PlanOptions, sources: tuple[str, ...] = AUTO_HINT_SOURCES
) -> tuple[Plan, dict[str, Any]]:
    """The hint plan and a record of how it was chosen.

    ``"auto"`` runs every scheduler of ``sources`` (``ppo`` with ``guard="none"``) and keeps the best
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
    found: dict[str, Any] = {}
    _run_sources(scenario, hint_source, options, sources, found)
    hint, record = _pick(scenario, hint_source, sources, found, [], 0.0)
    assert hint is not None  # every source ran: a plan, or the last source's error raised
    return hint, record


def _run_sources(
    scenario: Scenario, hint_source: str, options: PlanOptions, sources: tuple[str, ...], found: dict[str, Any]
) -> None:
    """Plan with the hint source, or each of ``sources`` for ``"auto"`` (greedy first: it is ready soonest).

    ``found[name]`` gets each plan, or the error that made a source skip (a bug propagates).
    """
    if hint_source != "auto":
        found[hint_source] = get_scheduler(hint_source)(scenario, options)
        return
    for name in sorted(sources, key=lambda n: n != "greedy"):
        # The learned candidate without its guard: greedy is a candidate of its own (not run twice).
        source_options = replace(options, guard=Guard.NONE) if name == "ppo" else options
        try:
            found[name] = get_scheduler(name)(scenario, source_options)
        except (PolicyError, SchedulerUnavailableError) as exc:  # no usable policy file or runtime; a bug propagates
            found[name] = exc


def _pick(
    scenario: Scenario,
    hint_source: str,
    sources: tuple[str, ...],
    found: dict[str, Any],
    late: list[str],
    waited: float,
) -> tuple[Plan | None, dict[str, Any]]:
    """The best plan found (the first of ``sources`` on a tie) and its record; None when no source was ready.

    Raises:
        PolicyError, SchedulerUnavailableError: Every source ran and none could (the last one's error).
    """
    names = (hint_source,) if hint_source != "auto" else sources
    best: tuple[float, str, Plan] | None = None
    candidates: dict[str, float] = {}
    failures: list[str] = []
    for name in names:
        if name not in found:
            failures.append(f"{name}: not ready within {waited:.3g} s")
            continue
        got = found[name]
        if isinstance(got, BaseException):
            failures.append(_skip_reason(name, got))
            continue
        objective = compute_metrics(scenario, got).objective
        candidates[name] = round(objective, 6)
        if best is None or objective > best[0] + _EPS:
            best = (objective, name, got)
    if best is None:
        if not late:
            raise found[names[-1]]  # every source ran and none could: the last one's error
        return None, {"scheduler": None, "candidates": candidates, "fallback": "; ".join(failures), "late": late}
    objective, name, hint = best
    record: dict[str, Any] = {"scheduler": name, "candidates": candidates, "info": hint.info}
    if failures:
        record["fallback"] = "; ".join(failures)
        print(f"full: hint from {name} (objective {objective:.2f}), fallback: {record['fallback']}", file=sys.stderr)
    if late:
        record["late"] = list(late)
    return hint, record


def _bounded_hint(
    scenario: Scenario,
    hint_source: str,
    options: PlanOptions,
    sources: tuple[str, ...],
    started: float,
    time_limit: float,
) -> tuple[Plan | None, dict[str, Any]]:
    """:func:`choose_hint` in a thread, waited for until the deadline (``"auto"``: see :data:`HINT_SHARE`).

    Returns:
        The hint and its record, naming the sources that were not ready in time (``"late"``); no hint
        (None) when none was.

    Raises:
        As :func:`choose_hint`, when its thread ended in time.
    """
    found: dict[str, Any] = {}
    work = _Background("full-hint", lambda: _run_sources(scenario, hint_source, options, sources, found))
    deadline = started + time_limit
    if hint_source == "auto" and len(sources) > 1:
        done = work.wait(started + HINT_SHARE * time_limit)
        if not done and not any(isinstance(v, Plan) for v in dict(found).values()):
            done = work.wait(deadline)
    else:
        done = work.wait(deadline)
    if done:
        work.result()  # a bug in a source, or the named source's own error, is raised here
    ready = dict(found)
    names = (hint_source,) if hint_source != "auto" else sources
    late = [n for n in names if n not in ready]
    return _pick(scenario, hint_source, sources, ready, late, time.perf_counter() - started)


def _late(
    scenario: Scenario,
    search: bool,
    record: dict[str, Any],
    bound: _Background | None,
    started: float,
    time_limit: float,
) -> cpsat.Result:
    """No hint by the deadline: the fallback plan (:func:`fallback_plan`), status ``unknown``, said on stderr."""
    plan = fallback_plan(scenario)
    objective = compute_metrics(scenario, plan).objective
    relaxed = _bound(bound, scenario, started + time_limit, record)
    value = max(relaxed.value, objective)
    gap = cpsat.optimality_gap(objective, value)
    seconds = time.perf_counter() - started
    trace = [cpsat.TracePoint(seconds, objective, value)]
    plan.metrics = compute_metrics(scenario, plan)
    plan.info = {
        **cpsat.plan_info(cpsat.Status.UNKNOWN, value, gap),
        "bound_source": relaxed.source,
        "bounds": {relaxed.source: round(relaxed.value, 6)},
        "mode": (Mode.LNS if search else Mode.WHOLE).value,
        "trace": cpsat.trace_info(trace),
        "hint": record,
    }
    print(
        f"full: no hint within the {time_limit:g} s time limit ({record['fallback']}); returning the fallback plan "
        "(nothing new starts)",
        file=sys.stderr,
    )
    return cpsat.Result(cpsat.Status.UNKNOWN, plan, objective, value, seconds, trace)


def fallback_plan(scenario: Scenario) -> Plan:
    """What full mode returns without a hint: the running jobs, nothing new, each app where it is if that fits.

    Each app is held at its ``initial`` for the whole horizon when the running jobs leave room for
    that; otherwise each goes down its ramp floor (:func:`agents.cpsat.fallback_plan`).
    """
    floor = cpsat.fallback_plan(scenario, "full")
    steady = Plan(
        floor.scenario, "full", list(floor.placements), {a.name: [a.initial] * scenario.slots for a in scenario.apps}
    )
    return steady if not validate(scenario, steady) else floor


def plan(
    scenario: Scenario,
    options: PlanOptions | None = None,
    hint_source: str = DEFAULT_HINT_SOURCE,
    hint_plan: Plan | None = None,
) -> Plan:
    """Full mode as a scheduler: ``hint_source``'s plan improved by CP-SAT within ``options.time_limit``.

    ``plan.info`` holds the solver status, the proven bound and the optimality gap,
    and under ``"hint"`` which scheduler's plan was the hint and why (:func:`choose_hint`).
    ``hint_plan``: that plan, planned already (see :func:`solve`).
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
        hint_plan=hint_plan,
    )
    if result.plan is None:  # solve returns at least the hint; this is a bug
        raise RuntimeError("full mode returned no plan")
    result.plan.scheduler = "full"
    return result.plan
