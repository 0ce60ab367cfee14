"""Rolling horizon: the noise model, the loop's invariants, open loop against rolling, the allocator API."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents import live, simulator
from agents.cli import main
from agents.live import allocator
from agents.live.allocator import ClusterState, RunningJob, decide
from agents.options import PlanOptions
from agents.registry import SCHEDULERS, available_schedulers
from agents.report import rolling as report
from agents.report.statistics import mean_ci
from agents.simulator import simulation
from gpu_env.generators import generate
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import App, Job, JobType, ScenarioError, load_scenario, save_scenario
from gpu_env.validation import validate
from tests.conftest import make_app, make_job, make_scenario

EXACT = ["cpsat", "full"]  # OR-Tools is a hard dependency (pyproject.toml): no silent skip when it is missing
# Time is a controlled input: no re-plan ever reaches its wall limit, and CP-SAT stops after a deterministic time
# (machine-independent work; one worker, a seed: the same search at any machine speed or load) far above what the
# small days here take to prove, so each re-plan is proven, or not, the same way on every run.
SOLVE = PlanOptions(time_limit=10_000.0, workers=1, deterministic_time=10.0)


def test_every_scheduler_imports():
    assert available_schedulers() == list(SCHEDULERS)


def _flat_day():
    """8 GPUs, 6 slots, a flat real-time demand of 2, every job released at 0 (all fit)."""
    return make_scenario(
        cluster={"gpus": 8, "node_size": 8},
        horizon={"slots": 6, "decay": 0.99},
        realtime=[make_app("chat", [2] * 6, ramp=1, initial=2, penalty=10)],
        jobs=[
            make_job("etl", 2, 2, type="batch_inference", running_on=[6, 7]),
            make_job("a", 4, 3, priority=2),
            make_job("b", 2, 2, type="quantization"),
        ],
    )


def _surprise_day():
    """A flat forecast of 2 GPUs; small jobs arrive through the day."""
    return make_scenario(
        cluster={"gpus": 8, "node_size": 8},
        horizon={"slots": 8, "decay": 0.99},
        realtime=[make_app("chat", [2] * 8, ramp=2, initial=2, penalty=10)],
        jobs=[make_job(f"j{i}", 2, 2, type="batch_inference", release=r) for i, r in enumerate((0, 0, 2, 4, 5))],
    )


SURPRISE = np.array([[2, 2, 2, 6, 6, 6, 2, 2]])  # a peak nobody forecast, in slots 3-5


# ----------------------------------------------------------------------------- the noise model


def test_zero_error_draws_the_forecast_exactly():
    sc = generate("realtime-diurnal", 1)
    assert np.array_equal(live.NoiseModel(sigma=0.0).draw(sc, 7), sc.demand)


def test_noise_is_seeded_bounded_and_grows_with_sigma():
    sc = generate("mixed-control", 2)
    model = live.NoiseModel(sigma=0.3)
    assert np.array_equal(model.draw(sc, 4), model.draw(sc, 4))
    assert not np.array_equal(model.draw(sc, 4), model.draw(sc, 5))
    for seed in range(5):
        a = model.draw(sc, seed)
        assert a.min() >= 0 and a.max() <= sc.gpus and a.dtype == np.int64

    def error(sigma: float) -> float:
        draws = [live.NoiseModel(sigma=sigma).draw(sc, s) for s in range(20)]
        return float(np.mean([np.abs(d - sc.demand).sum() for d in draws]))

    assert error(0.05) < error(0.2) < error(0.5)


def test_peaks_come_early_and_late():
    sc = make_scenario(
        cluster={"gpus": 32},
        horizon={"slots": 24},
        realtime=[make_app("x", [2] * 10 + [20] + [2] * 13, ramp=4, penalty=1)],
    )
    model = live.NoiseModel(sigma=0.4, rho=0.8, shift=4.0)
    peaks = {int(np.argmax(model.draw(sc, s)[0])) for s in range(30)}
    assert min(peaks) < 10 < max(peaks)


def test_bad_noise_parameters_are_refused():
    with pytest.raises(ValueError, match="sigma"):
        live.NoiseModel(sigma=-0.1)
    with pytest.raises(ValueError, match="rho"):
        live.NoiseModel(rho=1.0)
    with pytest.raises(ValueError, match="correction"):
        live.Corrector(method="oracle")


# ----------------------------------------------------------------------------- the corrector


def test_ratio_correction_carries_the_observed_error_forward():
    forecast = np.array([[2, 2, 2, 2, 2, 2]])
    actual = np.array([[4, 4, 0, 0, 0, 0]])
    c = live.Corrector(method="ratio", rho=0.8, window=2, margin=0.0)
    # Observed sum 8 against forecast 4: e = 1, then 2 * (1 + 0.8**h).
    assert c.forecast(forecast, actual, 2, gpus=16).tolist() == [[4, 3, 3, 3]]
    assert c.forecast(forecast, actual, 0, gpus=16).tolist() == forecast.tolist()
    assert live.Corrector(method="none").forecast(forecast, actual, 2, 16).tolist() == [[2, 2, 2, 2]]
    # Zero forecast: the error is a difference.
    zero = np.zeros((1, 4), dtype=np.int64)
    seen = np.array([[2, 2, 0, 0]])
    assert live.Corrector(margin=0.0).forecast(zero, seen, 2, 16).tolist() == [[2, 1]]  # 2*0.8, 2*0.64


def test_margin_grows_with_the_observed_error_and_the_lead():
    forecast = np.full((1, 8), 10)
    actual = np.array([[13, 7, 13, 7, 0, 0, 0, 0]])  # errors +-30 %, no bias over the last two slots
    out = live.Corrector(margin=1.0, rho=0.8).forecast(forecast, actual, 4, gpus=64)[0]
    # sigma_hat = 0.3: 10 * (1 + 0.3 * sqrt(1 - 0.64**h)) rises with the lead h.
    assert out.tolist() == [12, 12, 13, 13]
    assert out[0] > 10 and list(out) == sorted(out)


def test_a_known_error_level_sets_the_margin_before_anything_is_observed():
    forecast = np.full((1, 4), 10)
    told = live.Corrector(margin=1.0, prior_sigma=0.2)
    assert told.forecast(forecast, forecast, 0, gpus=64).tolist() == [[12, 12, 12, 12]]
    assert live.Corrector(margin=1.0).forecast(forecast, forecast, 0, gpus=64).tolist() == [[10, 10, 10, 10]]
    # Observed errors of 0 pull the prior down: sqrt(4 * 0.04 / (4 + 2)) = 0.163 at full weight.
    out = told.forecast(forecast, forecast, 2, gpus=64)[0]
    assert out.tolist() == [11, 11]


# ----------------------------------------------------------------------------- open loop against rolling


@pytest.mark.parametrize("scheduler", ["fifo", "greedy", *EXACT])
def test_exact_forecast_rolling_equals_open_loop(scheduler: str):
    sc = _flat_day()
    roll, fixed = simulator.simulate(sc, scheduler, sigma=0.0, seed=3, options=SOLVE)
    assert np.array_equal(roll.actual.demand, sc.demand)
    assert roll.metrics.objective == pytest.approx(fixed.metrics.objective, abs=1e-6)
    assert roll.metrics.shortfall == fixed.metrics.shortfall == 0
    assert not validate(roll.actual, roll.executed)


@pytest.mark.parametrize("scheduler", EXACT)
def test_exact_planner_rolling_is_time_consistent(scheduler: str):
    """An optimal planner that knows the day's jobs re-plans the rest of its own optimum: the objective is equal.

    This holds only if the sub-problem at each slot scores exactly the day's objective over the
    remaining slots (decay counted from now, job worth scaled by decay**t).
    """
    sc = make_scenario(
        cluster={"gpus": 8, "node_size": 4},
        horizon={"slots": 8, "decay": 0.9},
        realtime=[make_app("chat", [1, 2, 4, 4, 3, 2, 1, 1], ramp=1, initial=1, penalty=3)],
        jobs=[
            make_job("run", 2, 3, running_on=[0, 1], priority=2),
            make_job("a", 4, 4, priority=1),
            make_job("b", 2, 2, type="batch_inference", release=1, priority=3),
            make_job("c", 1, 3, type="quantization", release=2, deadline=7, value=9),
            make_job("d", 4, 2, type="batch_inference", release=3, priority=2),
        ],
    )
    # A late job worth 4 per GPU-slot against a penalty of 3: at slot 3 it is worth 4 * 0.8**3 = 2.05 in
    # the day's objective, so the demand should win; a planner that valued it at 4 "now" would take it.
    late = make_scenario(
        cluster={"gpus": 2},
        horizon={"slots": 6, "decay": 0.8},
        realtime=[make_app("api", [0, 0, 0, 2, 2, 2], ramp=2, initial=0, penalty=3)],
        jobs=[make_job("late", 2, 3, release=3, priority=4)],
    )
    options = SOLVE
    for scenario in (sc, late):
        roll, fixed = simulator.simulate(
            scenario, scheduler, sigma=0.0, reveal="all", options=options, corrector=live.Corrector(margin=0.0)
        )
        assert roll.metrics.objective == pytest.approx(fixed.metrics.objective, abs=1e-6)
    assert roll.metrics.shortfall == 0 and roll.metrics.placed == 0


@pytest.mark.parametrize("scheduler", ["fifo", "greedy", *EXACT])
def test_surprise_peak_is_served_better_by_rolling(scheduler: str):
    sc = _surprise_day()
    roll, fixed = simulator.simulate(sc, scheduler, actual_demand=SURPRISE, options=SOLVE)
    assert fixed.metrics.shortfall == 12  # the open-loop plan follows the forecast through the peak
    assert roll.metrics.shortfall < fixed.metrics.shortfall
    assert roll.metrics.objective > fixed.metrics.objective
    assert not validate(roll.actual, roll.executed) and not validate(fixed.actual, fixed.executed)
    # The allocation rises only after the peak is seen, and no faster than the ramp.
    curve = roll.executed.curves["chat"]
    assert curve[3] == 2 and curve[4] > 2


# ----------------------------------------------------------------------------- invariants of the loop


def _check_loop(sc, sim: simulator.Simulation, states: list[ClusterState], reveal: str) -> None:
    """Every committed slot and every state handed to the planner obeys the rules of the loop."""
    by_id = {job.id: job for job in sc.jobs}
    committed: dict[str, tuple[int, tuple[int, ...]]] = {
        job.id: (0, job.running_on) for job in sc.jobs if job.running_on is not None
    }
    state_at = {int(s.name.rsplit("@", 1)[1]): s for s in states}
    previous = {app.name: app.initial for app in sc.apps}
    for record in sim.slots:
        t = record.slot
        state = state_at.get(t)
        if state is not None:
            # Running jobs are pinned where they were committed, with what remains of them.
            running = {r.job.id: r for r in state.running}
            expected = {j: v for j, v in committed.items() if v[0] <= t < v[0] + by_id[j].duration}
            assert set(running) == set(expected)
            for job_id, r in running.items():
                start, gpus = committed[job_id]
                assert r.gpus == gpus
                assert r.remaining == start + by_id[job_id].duration - t
            # The queue holds only jobs not started, and (revealed at release) already released.
            for job in state.queue:
                assert job.id not in committed
                if reveal == "release":
                    assert by_id[job.id].release <= t and job.release == 0
        for p in record.started:
            job = by_id[p.job]
            assert p.start == t >= job.release, "never started before its release"
            assert p.job not in committed, "started once"
            committed[p.job] = (t, p.gpus)
        load = sum(len(committed[j][1]) for j in record.running)
        assert load + sum(record.app_gpus.values()) <= sc.gpus
        for app in sc.apps:
            assert abs(record.app_gpus[app.name] - previous[app.name]) <= app.ramp
            previous[app.name] = record.app_gpus[app.name]
    # The executed plan is exactly what was committed, and it is valid against the actual demand.
    assert {p.job: (p.start, tuple(p.gpus)) for p in sim.executed.placements} == committed
    assert not validate(sim.actual, sim.executed)


def _spy(monkeypatch) -> list[ClusterState]:
    states: list[ClusterState] = []

    def spying(state, scheduler="greedy", options=None):
        states.append(state)
        return decide(state, scheduler, options)

    monkeypatch.setattr(simulation, "decide", spying)
    return states


@settings(max_examples=25, deadline=None)
@given(
    family=st.sampled_from(["mixed-control", "realtime-diurnal", "batch-fragmentation", "priority-inversion"]),
    seed=st.integers(0, 10_000),
    sigma=st.sampled_from([0.0, 0.15, 0.4]),
    every=st.integers(1, 4),
    reveal=st.sampled_from(["release", "all"]),
)
def test_loop_never_starts_early_nor_moves_a_running_job(family, seed, sigma, every, reveal):
    sc = generate(family, seed, gpus=16, num_jobs=12)
    with pytest.MonkeyPatch.context() as mp:
        states = _spy(mp)
        roll, _ = simulator.simulate(sc, "fifo", sigma=sigma, seed=seed, replan_every=every, reveal=reveal)
    assert roll.replans == len(states) == -(-sc.slots // every)
    _check_loop(sc, roll, states, reveal)


@pytest.mark.parametrize("family", ["mixed-control", "priority-inversion"])
def test_loop_invariants_hold_for_greedy(family: str, monkeypatch):
    sc = generate(family, 11, gpus=16, num_jobs=14)
    states = _spy(monkeypatch)
    roll, fixed = simulator.simulate(sc, "greedy", sigma=0.25, seed=2, replan_every=2)
    _check_loop(sc, roll, states, "release")
    assert not validate(fixed.actual, fixed.executed)


def test_a_planner_that_breaks_the_rules_is_caught(monkeypatch):
    monkeypatch.setitem(SCHEDULERS, "broken", "tests.test_rolling:_broken_plan")
    with pytest.raises(simulator.RollingError, match="broken at slot 0"):
        simulator.simulate(_flat_day(), "broken")


def _broken_plan(scenario, options=None):
    """Moves the running job: rule 5 broken."""
    return Plan(scenario.name, "broken", [Placement("etl", 0, (0, 1))], {"chat": [2] * scenario.slots})


# ----------------------------------------------------------------------------- files


def test_simulation_files_validate_and_reload(tmp_path: Path):
    sc = generate("mixed-control", 4, gpus=16, num_jobs=10)
    roll, fixed = simulator.simulate(sc, "fifo", sigma=0.2, seed=1)
    written = report.write_simulation(tmp_path, roll, fixed, {"sigma": 0.2, "seed": 1})
    names = {p.name for p in written}
    assert {"actual.yaml", "executed.json", "open_loop.json", "metrics.json", "simulation.png"} <= names
    actual = load_scenario(tmp_path / "actual.yaml")
    assert np.array_equal(actual.demand, roll.actual.demand)
    executed = Plan.load(tmp_path / "executed.json")
    assert not validate(actual, executed)
    data = json.loads((tmp_path / "metrics.json").read_text())
    assert data["rolling"]["objective"] == pytest.approx(roll.metrics.objective, abs=1e-5)
    assert data["validation"] == {"executed": [], "open_loop": []}
    assert len(data["slots"]) == sc.slots


# ----------------------------------------------------------------------------- comparisons


def test_mean_ci_by_hand():
    mean, ci = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and ci == pytest.approx(4.303 / np.sqrt(3))
    assert np.isnan(mean_ci([5.0])[1])


def test_compare_pairs_modes_on_the_same_actual_demand():
    sc = generate("training-heavy", 3)
    rows = simulator.compare([sc], ["fifo"], [0.0, 0.3], [0, 1])
    # sigma 0 draws the forecast whatever the seed: one seed only, so one outcome is not counted twice
    assert len(rows) == 6 and all(r["valid"] for r in rows)
    summary = report.summarise(rows)
    assert [(e["sigma"], e["seeds"]) for e in summary] == [(0.0, 1), (0.3, 2)]
    table = report.markdown_table(summary)
    assert table.count("\n") == 4 and "training-heavy" in table
    pooled = report.pooled(rows)
    assert [e["pairs"] for e in pooled] == [1, 2]
    for seed in (0, 1, 7):  # the reason: every seed draws the same day at sigma 0
        assert (live.NoiseModel(0.0).draw(sc, seed) == sc.demand).all()


# ----------------------------------------------------------------------------- the allocator API


def _state(**overrides) -> ClusterState:
    data = {
        "gpus": 8,
        "horizon": 4,
        "running": (RunningJob(Job("etl", JobType.BATCH_INFERENCE, 2, 5), gpus=(0, 1), remaining=2),),
        "queue": (
            Job("sft", JobType.TRAINING, 2, 3, priority=2.0),
            Job("eval", JobType.BATCH_INFERENCE, 4, 2, release=1),
        ),
        "apps": (App("chat", demand=(2, 3, 3, 2), ramp=1, initial=2, penalty=8.0),),
    }
    data.update(overrides)
    return ClusterState(**data)


def test_decide_returns_this_slots_starts_and_allocation():
    d = decide(_state(), "fifo")
    assert [(p.job, p.gpus) for p in d.start_now] == [("sft", (2, 3))]
    assert d.app_gpus_now == {"chat": 3}  # FIFO reserves the forecast peak
    assert d.waiting == ("eval",)
    assert not validate(d.scenario, d.plan)
    assert json.loads(json.dumps(d.to_dict()))["start_now"] == [{"job": "sft", "gpus": [2, 3]}]
    g = decide(_state(), "greedy")
    assert g.app_gpus_now == {"chat": 2} and not validate(g.scenario, g.plan)


def test_expired_jobs_are_left_out_and_value_is_scaled():
    late = Job("late", JobType.QUANTIZATION, 1, 3, deadline=2)
    scenario, expired = _state(queue=(late,), value_scale=0.5).to_scenario()
    assert expired == ("late",)
    assert scenario.job_index("late") == -1
    assert scenario.jobs[0].weight == pytest.approx(0.5)  # etl: priority 1 scaled by 0.5


def test_a_state_that_breaks_the_rules_names_the_field():
    clash = (
        RunningJob(Job("x", JobType.TRAINING, 2, 3), gpus=(0, 1), remaining=1),
        RunningJob(Job("y", JobType.TRAINING, 2, 3), gpus=(1, 2), remaining=1),
    )
    with pytest.raises(ScenarioError, match=r"jobs\[1\]\.running_on"):
        _state(running=clash).to_scenario()
    scenario = allocator.state_from_mapping(
        {"name": "now", "cluster": {"gpus": 4}, "horizon": {"slots": 2}, "jobs": []}, "state.json"
    )
    assert allocator.decide(scenario, "fifo").start_now == ()


def _manager_day():
    """4 GPUs in one node, 4 slots, no decay; chat needs 1 GPU a slot; 'run' holds GPU 3 in slots 0-1."""
    return make_scenario(
        cluster={"gpus": 4, "node_size": 4},
        horizon={"slots": 4},
        realtime=[make_app("chat", [1, 1, 1, 1], ramp=1, initial=1, penalty=10)],
        jobs=[
            make_job("run", 1, 2, running_on=[3]),
            make_job("a", 2, 2, priority=1),
            make_job("late", 1, 2, type="quantization", deadline=2, priority=0.5),
            make_job("b", 2, 2, type="batch_inference", release=1, priority=3),
            make_job("c", 1, 1, type="quantization", release=2, deadline=3),
        ],
    )


@pytest.mark.parametrize("scheduler", ["fifo", "greedy", *EXACT])
def test_decide_slot_after_slot_carries_the_state_and_keeps_its_commitments(scheduler: str):
    # A cluster manager's loop: each slot it hands decide() what runs (with the slots left), the queue
    # (release and deadline counted from now) and the apps (forecast from now, allocation now), then
    # starts what decide() says. Worked by hand: slot 0 leaves 2 GPUs (chat 1, run 1), so 'a' starts and
    # 'late' (which must start at 0) does not fit beside it (a is worth 4, late 1); at slot 1 'late'
    # can no longer meet its deadline and the cluster is full (chat, run, a); at slot 2 'run' and 'a'
    # are done: 'b' (2 GPUs) and 'c' (1 GPU, must start at 2) start beside chat; slot 3 has nothing new.
    # Day objective: run 1*2 + a 2*2 + b 3*2*2 + c 1 = 19, no shortfall.
    day = _manager_day()
    started: dict[str, tuple[int, tuple[int, ...]]] = {"run": (0, (3,))}
    expired: set[str] = set()
    allocation = day.apps[0].initial
    curve, log = [], []
    for now in range(day.slots):
        running = tuple(
            RunningJob(job, started[job.id][1], started[job.id][0] + job.duration - now)
            for job in day.jobs
            if job.id in started and started[job.id][0] + job.duration > now
        )
        queue = tuple(
            replace(
                job,
                release=max(0, job.release - now),
                deadline=None if job.deadline is None else job.deadline - now,
            )
            for job in day.jobs
            if job.id not in started and job.id not in expired
        )
        apps = tuple(replace(app, demand=app.demand[now:], initial=allocation) for app in day.apps)
        state = ClusterState(
            gpus=day.gpus, horizon=day.slots - now, running=running, queue=queue, apps=apps, node_size=day.node_size
        )
        d = decide(state, scheduler, SOLVE)
        assert validate(d.scenario, d.plan) == []
        for r in running:  # commitments: what runs keeps its GPUs for the slots it has left
            assert Placement(r.job.id, 0, r.gpus) in d.plan.placements
            assert d.scenario.jobs[d.scenario.job_index(r.job.id)].duration == r.remaining
        held = {g for r in running for g in r.gpus}
        assert not held & {g for p in d.start_now for g in p.gpus}
        assert abs(d.app_gpus_now["chat"] - allocation) <= day.apps[0].ramp
        for p in d.start_now:
            started[p.job] = (now, p.gpus)
        expired |= set(d.expired)
        allocation = d.app_gpus_now["chat"]
        curve.append(allocation)
        log.append(([p.job for p in d.start_now], d.expired, d.waiting))
    assert log == [
        (["a"], (), ("late", "b", "c")),
        ([], ("late",), ("b", "c")),
        (["b", "c"], (), ()),
        ([], (), ()),
    ]
    assert curve == [1, 1, 1, 1]
    if scheduler in ("fifo", "greedy"):  # lowest-index blocks
        assert started == {"run": (0, (3,)), "a": (0, (0, 1)), "b": (2, (0, 1)), "c": (2, (2,))}
    executed = Plan(day.name, scheduler, [Placement(j, s, g) for j, (s, g) in started.items()], {"chat": curve})
    assert validate(day, executed) == []
    assert compute_metrics(day, executed).objective == pytest.approx(19.0)


# ----------------------------------------------------------------------------- the command line


def test_gpualloc_simulate_writes_a_valid_day(tmp_path: Path, capsys):
    scenario = tmp_path / "day.yaml"
    save_scenario(_surprise_day(), scenario)
    out = tmp_path / "sim"
    code = main(["simulate", str(scenario), "-s", "fifo", "--forecast-error", "0.3", "--seed", "2", "-o", str(out)])
    assert code == 0
    assert "rolling objective" in capsys.readouterr().err
    executed = Plan.load(out / "executed.json")
    assert not validate(load_scenario(out / "actual.yaml"), executed)
    assert main(["validate", str(out / "actual.yaml"), str(out / "executed.json")]) == 0
    # Without --hindsight there is no hindsight plan, nor any of its numbers (tests/test_hindsight.py)
    assert not (out / "hindsight.json").exists()
    data = json.loads((out / "metrics.json").read_text())
    assert "hindsight" not in data and "hindsight" not in data["validation"] and "deterministic_time" not in data


@pytest.mark.parametrize(("every", "starts"), [(1, [0, 0, 2, 4, 5]), (3, [0, 0, 3, 6, 6])])
def test_gpualloc_simulate_replans_every_k_slots(tmp_path: Path, capsys, every: int, starts: list[int]):
    # Jobs become known at their release (2, 4 and 5 for j2-j4) but are only seen at a re-plan: every 3
    # slots that is 0, 3 and 6, so j2 starts at 3 and j3, j4 at 6 (room is never short: 8 GPUs, chat 2,
    # at most three 2-GPU jobs at once). Each job is worth 2 * 0.99**s * (1 + 0.99) started at s.
    scenario = tmp_path / "day.yaml"
    save_scenario(_surprise_day(), scenario)
    out = tmp_path / "sim"
    args = ["simulate", str(scenario), "-s", "greedy", "--replan-every", str(every), "-o", str(out), "--no-picture"]
    assert main(args) == 0
    assert f"{len(range(0, 8, every))} re-plans" in capsys.readouterr().err
    data = json.loads((out / "metrics.json").read_text())
    assert data["replan_every"] == every and data["rolling"]["replans"] == len(range(0, 8, every))
    assert [s["slot"] for s in data["slots"] if s["replanned"]] == list(range(0, 8, every))
    executed = Plan.load(out / "executed.json")
    assert [p.start for p in sorted(executed.placements, key=lambda p: p.job)] == starts
    assert executed.curves["chat"] == [2] * 8
    assert data["rolling"]["objective"] == pytest.approx(sum(2 * 0.99**s * 1.99 for s in starts), abs=1e-6)
    assert not validate(load_scenario(out / "actual.yaml"), executed)


def test_gpualloc_simulate_bad_input_is_one_line(tmp_path: Path, capsys):
    assert main(["simulate", str(tmp_path / "nope.yaml"), "-s", "fifo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.yaml" in err[0] and "no such file" in err[0]
    scenario = tmp_path / "day.yaml"
    save_scenario(_flat_day(), scenario)
    assert main(["simulate", str(scenario), "-s", "oracle"]) == 2
    assert "unknown scheduler 'oracle'" in capsys.readouterr().err
    assert main(["simulate", str(scenario), "-s", "fifo", "--forecast-error", "-1"]) == 2
    assert not (tmp_path / "sim").exists()


def test_a_comparison_task_carries_every_plan_option():
    # --samples and --guard (and every other PlanOptions field) reach the planner inside a rolling task, for the
    # rolling side (the task's options) and the open-loop side (its params) alike.
    from agents.options import Guard
    from agents.simulator.tasks import _options_from, comparison_tasks

    sc = generate("training-heavy", seed=1)
    mine = PlanOptions(time_limit=3.0, seed=5, workers=1, policy=Path("p.onnx"), samples=3, guard=Guard.FIFO)
    other = PlanOptions(time_limit=2.0, seed=6, workers=1, samples=2, guard=Guard.NONE)
    (task,) = comparison_tasks([sc], ["ppo"], [0.1], [0], options={"ppo": mine}, open_options={"ppo": other})
    assert task.options() == mine
    assert _options_from(task.params["open_options"]) == other
