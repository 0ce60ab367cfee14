"""The live planner's futures carry demand, and its decisions are chosen by their expected value."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.live.allocator import ClusterState, decision_from_plan
from agents.live.anticipate import AnticipatingPlanner, Candidate, choose, commit_slot, live_planner
from agents.live.error_model import DEFAULT_RHO, ErrorModel, calibration
from agents.live.forecast import NoiseModel, as_recorded, with_demand
from agents.live.history import HistoryError
from agents.registry import run_scheduler
from agents.simulator import simulation
from gpu_env.generators import FAMILIES, generate
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import App, Job, JobType, Scenario
from gpu_env.validation import validate
from lab.variants import Ablated


def _past(curves: list[list[int]]) -> list[Scenario]:
    return [
        Scenario("past", gpus=8, slots=len(c), apps=(App("chat", tuple(c), ramp=8, initial=c[0], penalty=10.0),))
        for c in curves
    ]


def _today(slots: int) -> Scenario:
    return Scenario("today", gpus=8, slots=slots, apps=(App("chat", (2,) * slots, ramp=8, initial=2, penalty=10.0),))


# ----------------------------------------------------------------------------- the error model


def _recorded(pairs: list[tuple[list[int], list[int]]]) -> list[Scenario]:
    """Past days recorded as (forecast, demand that came)."""
    return [
        Scenario(
            "past",
            gpus=16,
            slots=len(a),
            apps=(App("chat", tuple(a), ramp=16, initial=a[0], penalty=10.0, forecast=tuple(f)),),
        )
        for f, a in pairs
    ]


def test_error_model_without_recorded_forecasts_reads_each_curve_against_the_others() -> None:
    """Past days 2, 4, 2 and 4, 2, 4 (no forecast): errors -1/2, 1, -1/2 and 1, -1/2, 1; level sqrt(5/8)."""
    model = ErrorModel.fit(_past([[2, 4, 2], [4, 2, 4]]), _today(3))
    assert model.source == "profile"
    assert model.prior[0] == pytest.approx(math.sqrt(5 / 8))
    assert model.rho[0] == 0.0  # an alternating error has autocorrelation -1, clipped at 0


def test_error_model_fits_the_recorded_errors() -> None:
    """Forecast 4, 4, 4 against 5, 6, 4: errors 1/4, 1/2, 0."""
    model = ErrorModel.fit(_recorded([([4, 4, 4], [5, 6, 4]), ([4, 4, 4], [4, 4, 4])]), _today(3))
    assert model.source == "recorded"
    assert model.prior[0] == pytest.approx(math.sqrt((1 / 16 + 1 / 4) / 6))
    assert model.paths.shape == (2, 1, 3)
    assert model.paths[0, 0].tolist() == pytest.approx([0.25, 0.5, 0.0])


def test_error_model_with_one_past_curve_and_no_forecast_has_no_prior() -> None:
    model = ErrorModel.fit(_past([[2, 4, 2]]), _today(3))
    assert model.source == "none" and model.prior[0] == 0.0 and model.rho[0] == DEFAULT_RHO


def test_a_history_that_mixes_recorded_and_unrecorded_days_is_refused_naming_the_field() -> None:
    days = [*_recorded([([4, 4, 4], [5, 6, 4])]), *_past([[2, 4, 2]])]
    with pytest.raises(HistoryError, match=r"b\.yaml: realtime\[0\]\.forecast: a past day must carry"):
        ErrorModel.fit(days, _today(3), sources=["a.yaml", "b.yaml"])
    with pytest.raises(HistoryError, match=r"realtime\[0\]\.forecast"):
        ErrorModel.fit(_past([[2, 4, 2], [4, 2, 4]]), _today(3), require_forecasts=True)


def test_level_mixes_the_prior_with_todays_errors() -> None:
    """Prior 0.2 counted as 4 slots, then 4 slots observed exact: sqrt(4 * 0.04 / 8)."""
    model = ErrorModel(np.zeros((0, 1, 8)), np.array([0.8]), np.array([0.2]))
    F = np.full((1, 8), 5)
    assert model.level(F, F[:, :4], 4)[0] == pytest.approx(math.sqrt(4 * 0.04 / 8))
    # one slot observed 50 % high, no prior: the level is 0.5
    bare = ErrorModel.none(1, 8)
    assert bare.level(F, np.array([[5, 5, 5, 15 / 2]]), 4)[0] == pytest.approx(math.sqrt(0.25 / 4))


def test_without_past_paths_the_paths_follow_the_ar1_law_from_the_error_now() -> None:
    """Lead 1: mean F (1 + rho e), sd F sigma sqrt(1 - rho^2), with e the last two slots' error."""
    model = ErrorModel(np.zeros((0, 1, 6)), np.array([0.5]), np.array([0.2]), prior_weight=1e9)  # the prior's level
    F = np.full((1, 6), 100)
    seen = np.array([[100, 100, 120, 120]])  # error now: +20 %
    rng = np.random.default_rng(0)
    paths = np.array([model.sample(rng, F, seen, 4, gpus=1000)[0] for _ in range(4000)])
    assert paths.shape == (4000, 2)
    assert paths[:, 0].mean() == pytest.approx(100 * (1 + 0.5 * 0.2), abs=0.5)
    assert paths[:, 0].std() == pytest.approx(100 * 0.2 * math.sqrt(1 - 0.25), rel=0.05)
    assert paths[:, 1].std() == pytest.approx(100 * 0.2 * math.sqrt(1 - 0.5**4), rel=0.05)  # wider at lead 2


def test_a_recorded_path_is_resampled_whole_and_started_where_today_is() -> None:
    """The one past day ran 50 % over its forecast all day (rho: the default 0.8, a flat path has no variation).
    Today has met its forecast so far: the future starts at today's error 0 and returns to the past day's +50 %
    as 0.8**h fades the gap: 10 (1 + 0.5 - 0.5 * 0.8**h) = 11, 11.8, 12.44."""
    model = ErrorModel.fit(_recorded([([10] * 6, [15] * 6)]), replace(_today(6), gpus=16))
    F = np.full((1, 6), 10)
    path = model.sample(np.random.default_rng(0), F, F[:, :3], 3, gpus=16)
    assert path.tolist() == [[11, 12, 12]]


def test_a_level_shift_that_happened_reaches_the_futures_as_often_as_it_happened() -> None:
    """Of two past days, one met its forecast and one stepped 50 % above it from slot 12: from a morning that met
    its forecast, about half the futures step up in the afternoon, and the 0.9 quantile is the step."""
    flat = ([10] * 24, [10] * 24)
    step = ([10] * 24, [10] * 12 + [15] * 12)
    model = ErrorModel.fit(_recorded([flat, step]), replace(_today(24), gpus=16))
    F = np.full((1, 24), 10)
    rng = np.random.default_rng(1)
    afternoons = np.array([model.sample(rng, F, F[:, :8], 8, gpus=16)[0, 8] for _ in range(400)])  # slot 16
    assert 0.35 < float(np.mean(afternoons >= 14)) < 0.65
    assert model.quantile(0.9, F, F[:, :8], 8, gpus=16)[0, 8] >= 14
    assert model.quantile(0.4, F, F[:, :8], 8, gpus=16)[0, 8] == 10


def test_sampled_paths_never_read_after_now_and_are_seeded() -> None:
    for model in (
        ErrorModel(np.zeros((0, 1, 6)), np.array([0.8]), np.array([0.3])),
        ErrorModel.fit(_recorded([([4] * 6, [5, 6, 4, 2, 3, 4]), ([4] * 6, [4] * 6)]), replace(_today(6), gpus=16)),
    ):
        F = np.full((1, 6), 4)
        a = model.sample(np.random.default_rng(3), F, np.array([[4, 5, 9, 9, 9, 9]]), 2, gpus=8)
        b = model.sample(np.random.default_rng(3), F, np.array([[4, 5, 0, 1, 2, 3]]), 2, gpus=8)
        assert a.tolist() == b.tolist()
        assert a.shape == (1, 4) and a.min() >= 0 and a.max() <= 8


def test_calibration_of_exact_days_covers_everything_and_of_noisy_days_near_the_nominal_rate() -> None:
    exact = _recorded([([4] * 12, [4] * 12)] * 3)
    table = calibration(exact, samples=8)
    assert np.all(table.coverage[~np.isnan(table.coverage)] == 1.0) and table.source == "recorded"
    day = generate("realtime-diurnal", seed=5, gpus=32)
    noisy = [as_recorded(day, NoiseModel(0.3).draw(day, s)) for s in range(8)]
    table = calibration(noisy, quantiles=(0.8,), leads=(1, 4), samples=32)
    assert table.cells.tolist()[0] > 0
    assert np.all((table.coverage > 0.55) & (table.coverage <= 1.0))
    assert "| 80% |" in table.table()


# ----------------------------------------------------------------------------- the rule


def test_choose_keeps_the_base_when_no_candidate_clears_the_bar() -> None:
    values = np.array([[10.0, 10.0, 10.0], [10.0, 10.0, 10.0], [9.0, 9.0, 9.0]])
    assert choose(values, 2.0, 0.0) == (0, 0.0, 0.0)


def test_choose_takes_the_best_sure_gain() -> None:
    """Candidate 1 gains 1 in every future (SE 0); candidate 2 gains 1.5 on average as a gamble (SE 1.5)."""
    values = np.array([[10.0, 10, 10, 10], [11, 11, 11, 11], [14, 8.5, 14, 9.5]])
    best, gain, se = choose(values, 2.0, 0.0)
    assert (best, gain, se) == (1, 1.0, 0.0)
    assert choose(values, 0.5, 0.0)[0] == 2  # a weaker bar takes the gamble
    assert choose(values, 0.0, 0.12)[0] == 2  # min_gain is a share of the base's value: a bar of 1.2 here


def test_choose_can_ask_a_departure_to_do_no_worse_in_most_futures() -> None:
    """Gains 3, 3, 3, -1: mean 2, SE 1; it is worse in one future of four."""
    values = np.array([[10.0, 10, 10, 10], [13, 13, 13, 9]])
    assert choose(values, 1.0, 0.0)[0] == 1
    assert choose(values, 1.0, 0.0, 0.75)[0] == 1
    assert choose(values, 1.0, 0.0, 1.0)[0] == 0
    assert choose(values, 1.0, 0.0, np.array([1.0]))[0] == 0


def test_commit_slot_hand_worked() -> None:
    """Slot 0: a started (4 GPUs x 1) and r running (2 GPUs x 2) earn 8, the app is 1 GPU short (penalty 10)."""
    jobs = (
        Job("a", JobType.TRAINING, 4, 2),
        Job("r", JobType.TRAINING, 2, 1, priority=2.0, running_on=(4, 5)),
        Job("b", JobType.TRAINING, 2, 2),
        Job("now-or-never", JobType.BATCH_INFERENCE, 2, 2, deadline=2),
        Job("later", JobType.TRAINING, 2, 1, release=2),
    )
    app = App("chat", (3, 3, 3, 3), ramp=2, initial=2, penalty=10.0)
    future = Scenario("f", gpus=8, slots=4, decay=0.5, apps=(app,), jobs=jobs)
    value, rest = commit_slot(future, [Placement("a", 0, (0, 1, 2, 3))], (2,))
    assert value == pytest.approx(4 * 1 + 2 * 2 - 10 * 1)
    assert rest is not None and rest.slots == 3 and rest.apps[0].initial == 2 and rest.apps[0].demand == (3, 3, 3)
    by_id = {j.id: j for j in rest.jobs}
    assert by_id["a"].running_on == (0, 1, 2, 3) and by_id["a"].duration == 1
    assert "r" not in by_id  # it ended with slot 0
    assert "now-or-never" not in by_id  # held now, it can no longer meet its deadline
    assert by_id["b"].release == 0 and by_id["later"].release == 1
    assert by_id["b"].weight == pytest.approx(0.5)  # slot 1 of the future is worth decay**1


@settings(max_examples=25, deadline=None)
@given(family=st.sampled_from(sorted(FAMILIES)), seed=st.integers(0, 10_000), cut=st.integers(0, 3))
def test_a_committed_slot_and_the_rest_make_a_valid_plan_of_exactly_that_value(
    family: str, seed: int, cut: int
) -> None:
    """A candidate (greedy's plan of a future, its starts and app GPUs now) committed, greedy's plan of the rest
    shifted by one slot: together a plan of the future that the validator accepts, worth exactly the value."""
    future = generate(family, seed, gpus=16, num_jobs=5)
    scenario = replace(future, decay=0.9, jobs=future.jobs[: len(future.jobs) - cut])
    plan = run_scheduler("greedy", scenario)
    candidate = Candidate.of("c", scenario, plan)
    value, rest = commit_slot(scenario, candidate.starts, candidate.app_gpus)
    assert rest is not None
    tail = run_scheduler("greedy", rest)
    running = {j.id for j in scenario.jobs if j.running_on is not None} | {p.job for p in candidate.starts}
    placements = [p for p in plan.placements if p.job in running and p.start == 0]
    placements += [Placement(p.job, p.start + 1, p.gpus) for p in tail.placements if p.job not in running]
    curves = {
        app.name: [candidate.app_gpus[i], *tail.curve(app.name, rest.slots).tolist()]
        for i, app in enumerate(scenario.apps)
    }
    combined = Plan(scenario.name, "committed", placements, curves)
    assert not validate(scenario, combined)
    assert compute_metrics(scenario, combined).objective == pytest.approx(value + tail.metrics.objective)


def _hedging_state(observed: tuple[int, int]) -> ClusterState:
    """8 GPUs; the app is forecast at 2 but came in at ``observed`` in the last two slots (penalty 10 a GPU-slot);
    a cheap 6-GPU job (worth 0.1 a GPU-slot) waits."""
    cheap = Job("cheap", JobType.TRAINING, 6, 4, priority=0.1)
    app = App("chat", (2, 2, 2, 2), ramp=8, initial=2, penalty=10.0)
    return ClusterState(
        gpus=8,
        horizon=4,
        queue=(cheap,),
        apps=(app,),
        day_forecast=((2,) * 6,),
        observed=((observed[0], observed[1]),),
    )


def test_demand_in_the_futures_holds_a_cheap_job_that_would_take_the_apps_gpus() -> None:
    """The state's forecast says 2, so the base plan starts the cheap job on 6 of the 8 GPUs. Today the app ran
    at 6 against a forecast of 2: in the futures its demand stays high, and a GPU-slot short costs 100 times
    what the job earns on it. Holding the job is worth more in every future: it is held, and the note says why."""
    state = _hedging_state((6, 6))
    scenario, _ = state.to_scenario()
    base = decision_from_plan(scenario, run_scheduler("greedy", scenario))
    assert [p.job for p in base.start_now] == ["cheap"]
    planner = Ablated(errors=ErrorModel.none(1), fill=False)
    decision = planner.decide(state, 2)
    assert decision.start_now == ()
    assert re.match(r"held: over \d+ futures", decision.why["cheap"])
    assert not validate(decision.scenario, decision.plan)


def test_an_exact_day_so_far_leaves_nothing_to_sample_and_the_base_decision_stands() -> None:
    state = _hedging_state((2, 2))
    planner = Ablated(errors=ErrorModel.none(1), fill=False)
    decision = planner.decide(state, 2)
    assert [p.job for p in decision.start_now] == ["cheap"] and decision.why == {}


def test_a_rule_that_is_unknown_is_refused() -> None:
    with pytest.raises(ValueError, match="rule"):
        AnticipatingPlanner(rule="vote")
    with pytest.raises(ValueError, match="lookahead"):
        Ablated(lookahead=0)


@settings(max_examples=6, deadline=None)
@given(family=st.sampled_from(sorted(FAMILIES)), seed=st.integers(0, 10_000), sigma=st.sampled_from([0.0, 0.3]))
def test_every_expectation_decision_is_valid_and_the_day_reproduces(family: str, seed: int, sigma: float) -> None:
    """Small days of every family, history from other seeds: every cycle's plan and the executed day validate."""
    day = generate(family, seed, gpus=16, num_jobs=6)
    past = [
        with_demand(p, NoiseModel(sigma).draw(p, s))
        for s, p in ((s, generate(family, s, gpus=16, num_jobs=6)) for s in (seed + 1, seed + 2))
    ]
    planner = live_planner("anticipate", history=past, day=day, samples=3, seed=seed)
    live, _ = simulation.simulate(day, planner, sigma=sigma, seed=seed)  # check=True: every cycle validated
    assert not validate(live.actual, live.executed)
    again, _ = simulation.simulate(day, planner, sigma=sigma, seed=seed)
    assert again.executed.placements == live.executed.placements
    assert again.executed.curves == live.executed.curves


def test_the_newsvendor_forecast_is_the_forecast_on_exact_days_and_the_rise_where_the_days_rose() -> None:
    """Penalty 10 against a worth of 1: the quantile 10/11. Exact past days and a morning on its forecast: the
    forecast itself. One of two past days ran 50 % high all day, and so has this morning: the quantile is the rise."""
    exact = _recorded([([10] * 6, [10] * 6)] * 2)
    today = replace(_today(6), gpus=16)
    F = np.full((1, 6), 10)
    rose = _recorded([([10] * 6, [10] * 6), ([10] * 6, [15] * 6)])
    for days, morning, expected in ((exact, F[:, :3], [10, 10, 10]), (rose, F[:, :3] + 5, [15] * 3)):
        planner = live_planner(history=days, day=today, forecast="newsvendor")
        assert planner.forecaster.q.tolist() == pytest.approx([10 / 11])
        assert planner.forecaster.forecast(F, morning, 3, 16).tolist() == [expected]
    assert planner.margin_label == "quantile 0.91"
