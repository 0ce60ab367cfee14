"""Full mode's fallbacks: no loadable policy, an invalid hint, CP-SAT ending below its hint; the packaged policy."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import pytest

from agents import cpsat, fifo, full, greedy, ppo, relaxation
from agents.options import PlanOptions
from agents.registry import run_scheduler
from gpu_env.generators import generate
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import Scenario
from gpu_env.validation import validate
from tests.conftest import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return generate("training-heavy", seed=0)


# ----------------------------------------------------------------------------- the shipped policy


def test_the_shipped_policy_is_package_data():
    folder = resources.files("agents") / "policies"
    assert (folder / "default.onnx").is_file() and (folder / "default.json").is_file()
    assert ppo.DEFAULT_POLICY == Path(str(folder / "default.onnx"))
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "agents.policies" in config["packages"]
    assert {"default.onnx", "default.json"} <= set(config["package-data"]["agents.policies"])
    assert not (ROOT / "policies").exists()  # one copy, inside the package


def test_with_the_shipped_policy_nothing_falls_back(scenario, capsys):
    result = full.solve(scenario, time_limit=HANG_GUARD_S, deterministic_time=0.0)
    assert capsys.readouterr().err == ""
    hint = result.plan.info["hint"]
    assert set(hint["candidates"]) == {"ppo", "greedy"} and "fallback" not in hint
    assert result.plan.info["status"] in {"optimal", "feasible"}


# ----------------------------------------------------------------------------- (a) the policy fails to load


def _corrupt_policy(tmp_path: Path) -> Path:
    """A policy whose card is the shipped one (it passes the card check) and whose ONNX file is garbage."""
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x00 not an onnx model")
    path.with_suffix(".json").write_text(ppo.DEFAULT_POLICY.with_suffix(".json").read_text())
    return path


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_corrupt_policy, "not a loadable ONNX policy"),
        (lambda tmp_path: tmp_path / "missing.onnx", "policy file not found"),
    ],
    ids=["corrupt", "missing"],
)
def test_no_loadable_policy_falls_back_to_greedy_and_says_so(scenario, tmp_path, capsys, make, reason):
    options = PlanOptions(time_limit=10_000, deterministic_time=0.5, policy=make(tmp_path))
    plan = run_scheduler("full", scenario, options)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1  # one line, naming the hint used and why
    assert err[0].startswith("full: hint from greedy") and "fallback: ppo:" in err[0] and reason in err[0]
    hint = plan.info["hint"]
    assert hint["scheduler"] == "greedy" and set(hint["candidates"]) == {"greedy"}
    assert hint["fallback"].startswith("ppo: ") and reason in hint["fallback"]
    assert validate(scenario, plan) == []
    assert plan.metrics.objective >= run_scheduler("greedy", scenario).metrics.objective - 1e-9
    assert Plan.from_dict(plan.to_dict()).info == plan.info  # the record reads back


def test_an_explicit_hint_source_is_not_a_fallback(scenario, capsys):
    result = full.solve(scenario, time_limit=HANG_GUARD_S, hint_source="greedy", deterministic_time=0.0)
    assert capsys.readouterr().err == ""
    assert result.plan.info["hint"]["scheduler"] == "greedy" and "fallback" not in result.plan.info["hint"]


def test_when_no_auto_source_runs_the_error_is_raised(scenario, tmp_path, monkeypatch):
    def broken(sc: Scenario, options: PlanOptions) -> Plan:
        raise ValueError("greedy is broken too")

    monkeypatch.setattr(greedy, "plan", broken)
    with pytest.raises(ValueError, match="greedy is broken too"):
        full.solve(
            scenario,
            time_limit=HANG_GUARD_S,
            options=PlanOptions(policy=tmp_path / "missing.onnx"),
            deterministic_time=0.0,
        )


# ----------------------------------------------------------------------------- (b) the hint is invalid


def _overlapping(sc: Scenario, options: PlanOptions) -> Plan:
    """FIFO's plan with every job moved to slot 0 on GPUs 0..k-1: rule 1 (one job per GPU) breaks."""
    plan = fifo.plan(sc, options)
    plan.placements = [Placement(p.job, 0, tuple(range(len(p.gpus)))) for p in plan.placements]
    return plan


@pytest.mark.parametrize("source", ["greedy", "auto"])
def test_an_invalid_hint_is_refused(scenario, monkeypatch, source):
    """Documented behaviour: full mode raises InvalidHintError naming the scheduler and the first violation."""
    monkeypatch.setattr(greedy, "plan", _overlapping)
    assert validate(scenario, _overlapping(scenario, PlanOptions()))  # the patched plan does break a rule
    options = PlanOptions(policy=Path("missing.onnx"))  # with "auto", greedy is then the only source
    with pytest.raises(full.InvalidHintError, match=r"greedy returned an invalid plan: rule 1"):
        full.solve(scenario, time_limit=HANG_GUARD_S, hint_source=source, options=options, deterministic_time=0.0)
    with pytest.raises(full.InvalidHintError):
        full.plan(scenario, PlanOptions(policy=Path("missing.onnx"), deterministic_time=0.5), hint_source=source)


# ----------------------------------------------------------------------------- (c) CP-SAT ends below its hint


def _cpsat_returning(status: cpsat.Status, plan: Plan | None, bound: float | None):
    """A stand-in for ``cpsat.solve`` that ends with ``plan`` (metrics filled) and ``status``."""

    def fake(sc: Scenario, **kwargs: object) -> cpsat.Result:
        objective = None if plan is None else plan.metrics.objective
        result = cpsat.Result(status, plan, objective, bound, 0.0)
        if plan is not None:
            plan.info = cpsat.plan_info(status, bound, result.gap)
        return result

    return fake


@pytest.mark.parametrize(
    ("status", "worse", "bound", "expected"),
    [
        (cpsat.Status.UNKNOWN, False, None, "feasible"),  # no plan, no bound
        (cpsat.Status.FEASIBLE, True, 1e6, "feasible"),  # a worse plan, a loose bound
        # "Optimal" at a lower exact objective (the scaled model's rounding): the hint is optimal too.
        (cpsat.Status.OPTIMAL, True, "worse", "optimal"),
    ],
    ids=["no-plan", "worse-plan", "optimal-below-hint"],
)
def test_cpsat_below_its_hint_returns_the_hint(scenario, monkeypatch, status, worse, bound, expected):
    hint = run_scheduler("greedy", scenario)
    worse_plan = run_scheduler("fifo", scenario) if worse else None
    if worse_plan is not None:
        assert worse_plan.metrics.objective < hint.metrics.objective - 1e-6  # FIFO is worse here
    if bound == "worse":
        bound = worse_plan.metrics.objective
    monkeypatch.setattr(cpsat, "solve", _cpsat_returning(status, worse_plan, bound))
    plan = full.plan(scenario, PlanOptions(time_limit=HANG_GUARD_S), hint_source="greedy")
    assert plan.scheduler == "full"
    assert plan.placements == hint.placements and plan.curves == hint.curves
    assert validate(scenario, plan) == []
    assert plan.metrics.objective == pytest.approx(hint.metrics.objective)
    assert plan.info["status"] == expected
    # Unproved: the least of CP-SAT's bound and the certified LP relaxation's, never below the plan returned.
    relaxed = relaxation.lp_bound(scenario).value
    if expected == "optimal":
        assert plan.info["bound_source"] == "cpsat" and "lp-dual" not in plan.info["bounds"]
        best = bound
    else:
        best = relaxed if bound is None else min(bound, relaxed)
        assert plan.info["bound_source"] == ("lp-dual" if best == relaxed else "cpsat")
    assert plan.info["bound"] == pytest.approx(max(best, hint.metrics.objective))
    assert (plan.info["gap"] > 0) == (best > hint.metrics.objective + 1e-6)
    assert plan.info["hint"]["scheduler"] == "greedy"
