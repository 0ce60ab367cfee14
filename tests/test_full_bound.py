"""Full mode's time limit is a bound (issue 25): whatever is late is left out and named, never waited for.

Lateness is made with work that cannot finish: a hint source, a learned planner or an LP bound that
waits on an event the test sets only at its end, under a small wall limit; the CP-SAT searches run on
deterministic time. No assertion is made on wall time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from agents import cpsat, full, relaxation
from agents.options import PlanOptions
from agents.registry import get_scheduler, run_scheduler
from gpu_env.generators import generate
from gpu_env.metrics import compute_metrics
from gpu_env.validation import validate
from tests.conftest import HANG_GUARD_S

LATE_LIMIT = 0.3  # seconds of wall time full mode gets where something is made late (no assertion on it)


@pytest.fixture
def never() -> Iterator[threading.Event]:
    """An event set only when the test ends: work waiting on it is late for any limit, then lets go."""
    gate = threading.Event()
    yield gate
    gate.set()


def _blocking(gate: threading.Event, started: threading.Event | None = None):
    def plan(scenario, options):
        if started is not None:
            started.set()
        gate.wait(HANG_GUARD_S)
        raise RuntimeError("released at the end of the test")

    return plan


def _instant(scenario):
    """Greedy's plan, planned before the call: a source that does no work under the limit."""
    planned = run_scheduler("greedy", scenario)
    return lambda sc, options: planned


def _with(monkeypatch, **blocked) -> None:
    """``full.get_scheduler`` answering ``name -> function`` for the names given, the registry for the rest."""
    monkeypatch.setattr(full, "get_scheduler", lambda name: blocked.get(name) or get_scheduler(name))


def test_a_hint_that_never_comes_gives_the_fallback_with_a_stated_status(monkeypatch, never, capsys) -> None:
    sc = generate("mixed-control", seed=1)
    _with(monkeypatch, greedy=_blocking(never))
    plan = full.plan(sc, PlanOptions(time_limit=LATE_LIMIT), hint_source="greedy")
    assert validate(sc, plan) == []
    info = plan.info
    assert info["status"] == "unknown"
    assert info["hint"]["scheduler"] is None and info["hint"]["late"] == ["greedy"]
    assert info["hint"]["fallback"].startswith("greedy: not ready within")
    assert info["bound"] >= plan.metrics.objective - 1e-9
    running = {j.id for j in sc.jobs if j.running_on is not None}
    assert {p.job for p in plan.placements} == running  # nothing new starts
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("full: no hint within the 0.3 s time limit"), err


def test_the_fallback_keeps_each_app_where_it_is_when_that_fits() -> None:
    sc = generate("mixed-control", seed=1)
    plan = full.fallback_plan(sc)
    assert validate(sc, plan) == []
    assert all(plan.curves[a.name] == [a.initial] * sc.slots for a in sc.apps)
    floor = cpsat.fallback_plan(sc, "full")  # each app down its ramp: never worth more
    assert compute_metrics(sc, plan).objective >= compute_metrics(sc, floor).objective - 1e-9


def test_auto_takes_the_candidates_ready_and_names_the_late_one(monkeypatch, never, capsys) -> None:
    sc = generate("training-heavy", seed=0)
    _with(monkeypatch, ppo=_blocking(never), greedy=_instant(sc))
    result = full.solve(sc, time_limit=LATE_LIMIT, deterministic_time=0.0)
    hint = result.plan.info["hint"]
    assert hint["scheduler"] == "greedy" and set(hint["candidates"]) == {"greedy"}
    assert hint["late"] == ["ppo"] and "ppo: not ready within" in hint["fallback"]
    assert result.objective >= run_scheduler("greedy", sc).metrics.objective - 1e-9
    assert validate(sc, result.plan) == []
    assert "fallback: ppo: not ready within" in capsys.readouterr().err


def test_a_learned_plan_beside_the_search_that_never_comes_is_left_out(monkeypatch, never) -> None:
    """Above the LNS switch: the search ends (two moves), the learned thread is waited for until the deadline only,
    and while it still runs a second call starts none (no threads stacked up)."""
    sc = generate("uniform-priority", seed=23, gpus=192)  # 192 jobs: LNS, the learned plan beside it
    running = threading.Event()
    _with(monkeypatch, ppo=_blocking(never, running), greedy=_instant(sc))
    bound = relaxation.lp_bound(sc)
    monkeypatch.setattr(full, "lp_bound", lambda scenario: bound)  # no work under the limit
    first = full.solve(sc, time_limit=LATE_LIMIT, workers=1, max_moves=2)
    assert running.wait(HANG_GUARD_S)  # the learned planner was started (and waits)
    hint = first.plan.info["hint"]
    assert hint["scheduler"] == "greedy" and "ppo" in hint["late"] and "ppo" not in hint["candidates"]
    assert validate(sc, first.plan) == [] and first.objective >= hint["candidates"]["greedy"] - 1e-6
    second = full.solve(sc, time_limit=LATE_LIMIT, workers=1, max_moves=1)
    again = second.plan.info["hint"]
    assert "ppo" in again["late"] and again["beside"].startswith("ppo: not started")
    never.set()  # the learned thread ends (its error is its own: left behind, it is nobody's result)
    for thread in list(full._LEFT_BEHIND):
        thread.join(HANG_GUARD_S)
    assert not any(t.is_alive() for t in full._LEFT_BEHIND)


def test_a_late_lp_bound_gives_the_bound_of_prices_zero(monkeypatch, never) -> None:
    sc = generate("mixed-control", seed=1)

    def late_bound(scenario):
        never.wait(HANG_GUARD_S)
        raise RuntimeError("released at the end of the test")

    monkeypatch.setattr(full, "lp_bound", late_bound)
    _with(monkeypatch, greedy=_instant(sc))
    result = full.solve(sc, time_limit=LATE_LIMIT, hint_source="greedy", deterministic_time=0.0)
    info = result.plan.info
    assert "lp-bound" in info["hint"]["late"]
    assert info["bound"] >= result.objective - 1e-9 and validate(sc, result.plan) == []


def test_a_stop_set_before_the_search_leaves_it_no_time() -> None:
    """The whole model of 166 jobs with no limit but a far wall clock: stopped before it starts, it does no work."""
    sc = generate("mixed-control", seed=0, gpus=128)
    stop = full._Stop()
    stop.set()
    result = cpsat.solve(sc, time_limit=HANG_GUARD_S, workers=1, on_solver=stop.attach)
    assert result.status in (cpsat.Status.UNKNOWN, cpsat.Status.FEASIBLE)
    assert result.deterministic_time <= 1e-3  # CP-SAT's own, machine-independent measure of work


def test_a_stop_set_during_the_search_ends_it() -> None:
    """The same model searched with no limit in a thread: the stop, set once the search is attached, ends it."""
    sc = generate("mixed-control", seed=0, gpus=128)
    stop = full._Stop()
    attached = threading.Event()
    box: dict = {}

    def on_solver(solver) -> None:
        stop.attach(solver)
        attached.set()

    def search() -> None:
        box["result"] = cpsat.solve(sc, time_limit=HANG_GUARD_S, workers=1, on_solver=on_solver)

    thread = threading.Thread(target=search, daemon=True)
    thread.start()
    assert attached.wait(HANG_GUARD_S)
    stop.set()
    assert stop.join(thread, until=time.perf_counter() + HANG_GUARD_S)  # it ended long before the hang guard
    assert "result" in box


def test_full_in_the_loop_is_seeded_by_the_fast_plan(monkeypatch) -> None:
    """``run --scheduler greedy --budget B`` plans greedy's plan first, then full improves that very plan."""
    from agents.slurm import loop

    planned: list[str] = []
    real = loop.run_scheduler

    def recording(name, scenario, options=None):
        planned.append(name)
        return real(name, scenario, options)

    monkeypatch.setattr(loop, "run_scheduler", recording)
    monkeypatch.setattr(full, "_run_sources", None)  # full plans no hint of its own
    sc = generate("training-heavy", seed=0)
    greedy = real("greedy", sc)
    plan = loop.plan_with("full", sc, PlanOptions(time_limit=HANG_GUARD_S, deterministic_time=0.01), hint="greedy")
    assert planned == ["greedy"] and plan.scheduler == "full"
    assert plan.info["hint"]["scheduler"] == "greedy"
    assert plan.info["hint"]["candidates"] == {"greedy": round(greedy.metrics.objective, 6)}
    assert plan.metrics.objective >= greedy.metrics.objective - 1e-9


def test_a_budget_the_fast_plan_uses_up_leaves_the_fast_plan() -> None:
    from agents.slurm import loop

    sc = generate("training-heavy", seed=0)
    plan = loop.plan_with("full", sc, PlanOptions(time_limit=loop.FULL_LEAST_SECONDS / 2), hint="greedy")
    assert plan.scheduler == "greedy" and plan.info["full"].startswith("not run: greedy took")
    assert validate(sc, plan) == []
