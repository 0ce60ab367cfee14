"""The live allocator: the history's models, the anticipating planner, and days whose jobs end early."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from agents.live.anticipate import AnticipatingPlanner, fill_ceiling, fill_idle, live_planner
from agents.live.forecast import Corrector, NoiseModel, with_demand
from agents.live.history import ArrivalModel, HistoryError, HistoryForecaster, load_history
from agents.live.runtimes import TRACE_RUNTIMES, RuntimeSampler, draw_runtimes
from agents.simulator import simulation
from gpu_env.generators import FAMILIES, generate
from gpu_env.scenario import App, Job, JobType, Scenario, load_scenario, save_scenario
from gpu_env.validation import validate
from lab.variants import Ablated


def _day(jobs: tuple[Job, ...], slots: int = 4, gpus: int = 8, demand: tuple[int, ...] | None = None) -> Scenario:
    apps = () if demand is None else (App("chat", demand, ramp=2, initial=demand[0], penalty=10.0),)
    return Scenario("day", gpus=gpus, slots=slots, node_size=gpus, apps=apps, jobs=jobs)


def _job(name: str, release: int, *, gpus: int = 2, duration: int = 2, priority: float = 1.0) -> Job:
    return Job(name, JobType.TRAINING, gpus, duration, release=release, priority=priority)


# ----------------------------------------------------------------------------- arrivals


def test_arrival_rate_hand_worked() -> None:
    """Counts [0, 2, 1, 0] over two days: raw rate [0, 1, 0.5, 0], smoothed by (1/4, 1/2, 1/4)."""
    days = [
        _day((_job("a", 1),)),
        _day((_job("b", 1), _job("c", 2))),
    ]
    model = ArrivalModel.fit(days)
    assert model.rate == pytest.approx([0.25, 0.625, 0.5, 0.125])
    assert model.expected_count(0, 4) == pytest.approx(1.5)
    assert model.days == 2


def test_arrival_model_ignores_inherited_jobs() -> None:
    running = Job("r", JobType.TRAINING, 2, 3, running_on=(0, 1))
    model = ArrivalModel.fit([_day((running, _job("a", 2)))])
    assert model.expected_count(0, 4) == pytest.approx(1.0)
    assert [j.slot for j in model.jobs] == [2]


def test_sampled_arrivals_keep_a_past_job_whole() -> None:
    """A sampled job is a past job released later in the day: its attributes together, its deadline slack kept."""
    past = Job("p", JobType.QUANTIZATION, 4, 3, release=2, priority=7.0, deadline=7)  # slack 2
    model = ArrivalModel.fit([_day((past,), slots=8) for _ in range(3)])
    rng = np.random.default_rng(0)
    drawn = [j for _ in range(50) for j in model.sample(rng, 0, 8, 8, 8)]
    assert drawn, "a rate of 1 per day over 50 draws gives arrivals"
    for job in drawn:
        assert (job.type, job.gpus, job.duration, job.priority) == (JobType.QUANTIZATION, 4, 3, 7.0)
        assert job.deadline - job.release - job.duration == 2
        assert 1 <= job.release <= 3  # slots 1..3: the smoothed rate around slot 2
        assert job.id.startswith("future")


def test_sampled_arrivals_are_after_now_and_seeded() -> None:
    days = [generate("mixed-control", seed=s) for s in (1, 2, 3)]
    model = ArrivalModel.fit(days)
    a = model.sample(np.random.default_rng(5), 6, 16, 8, 18)
    b = model.sample(np.random.default_rng(5), 6, 16, 8, 18)
    assert a == b
    assert all(1 <= j.release < 18 for j in a)
    assert len({j.id for j in a}) == len(a)


def test_sampled_jobs_fit_the_cluster() -> None:
    """Past jobs wider than the cluster being planned are never drawn."""
    wide = _job("w", 1, gpus=8)
    narrow = _job("n", 1, gpus=2)
    model = ArrivalModel.fit([_day((wide, narrow))])
    rng = np.random.default_rng(1)
    drawn = [j for _ in range(40) for j in model.sample(rng, 0, 4, 4, 4)]
    assert drawn and all(j.gpus == 2 for j in drawn)


def test_load_history_names_the_file(tmp_path) -> None:
    save_scenario(_day((), slots=6), tmp_path / "past.yaml")
    with pytest.raises(HistoryError, match=r"past\.yaml: horizon\.slots"):
        load_history([tmp_path / "past.yaml"], _day((), slots=4))
    (tmp_path / "bad.yaml").write_text("cluster: {gpus: -1}\n")
    with pytest.raises(HistoryError, match=r"bad\.yaml"):
        load_history([tmp_path / "bad.yaml"])


# ----------------------------------------------------------------------------- demand from history


def test_history_forecaster_profile_and_level() -> None:
    """Two past days at 2 and 4 GPUs: the profile is 3; a day seen at 6 is forecast above it."""
    days = [_day((), demand=(2, 2, 2, 2)), _day((), demand=(4, 4, 4, 4))]
    fc = HistoryForecaster.fit(days, _day((), demand=(1, 1, 1, 1)))
    assert fc.profile.tolist() == [[3.0, 3.0, 3.0, 3.0]]
    assert fc.rho[0] == pytest.approx(0.95)  # each day stays on its side of the profile
    assert (fc.margin[0, 1:] >= 0).all() and (np.diff(fc.margin[0, 1:]) >= 0).all()
    high = fc.forecast(None, np.array([[6, 6, 0, 0]]), 2, 8)
    low = fc.forecast(None, np.array([[1, 1, 0, 0]]), 2, 8)
    assert high.shape == (1, 2)
    assert (high > low).all()


def test_the_live_planner_fits_one_error_model_that_its_forecast_reads() -> None:
    """Past curves at 2 and 4, no forecast recorded: each against the other, errors -1/2 and +1."""
    days = [_day((), demand=(2, 2, 2, 2)), _day((), demand=(4, 4, 4, 4))]
    planner = live_planner(history=days, day=days[0], forecast="corrector")
    assert planner.errors is not None and planner.errors.prior[0] == pytest.approx(math.sqrt((0.25 + 1) / 2))
    assert planner.forecaster.errors is planner.errors  # the corrector's margin is the model's level
    assert live_planner(history=days, day=days[0], errors="none").errors.source == "none"


def test_history_forecaster_identical_days_has_no_margin() -> None:
    days = [_day((), demand=(1, 3, 5, 2))] * 3
    fc = HistoryForecaster.fit(days, days[0])
    assert np.allclose(fc.margin, 0.0)
    assert fc.forecast(None, np.zeros((1, 4)), 0, 8).tolist() == [[1, 3, 5, 2]]
    # observed exactly on profile: the forecast of the rest is the profile
    assert fc.forecast(None, np.array([[1, 3, 0, 0]]), 2, 8).tolist() == [[5, 2]]


# ----------------------------------------------------------------------------- the anticipating planner


def _inversion_day() -> Scenario:
    """8 GPUs, 6 slots: a cheap job that would hold the whole cluster, and a valuable one an hour later."""
    cheap = _job("cheap", 0, gpus=8, duration=6, priority=1.0)
    valuable = _job("valuable", 1, gpus=8, duration=2, priority=10.0)
    return _day((cheap, valuable), slots=6)


def _inversion_history() -> list[Scenario]:
    """Past days where valuable 8-GPU jobs come in the first hours."""
    days = []
    for d in range(4):
        jobs = tuple(_job(f"v{d}-{s}", s, gpus=8, duration=2, priority=10.0) for s in (1, 2))
        days.append(_day((_job(f"c{d}", 0, gpus=8, duration=6), *jobs), slots=6))
    return days


def test_anticipation_holds_a_cheap_job_back_for_valuable_arrivals() -> None:
    """Greedy, knowing only the cheap job, starts it at slot 0; the history says to wait, which earns more."""
    day = _inversion_day()
    actual = with_demand(day, day.demand)
    greedy = simulation.rolling(day, "greedy", actual)
    planner = live_planner(history=_inversion_history(), day=day)
    live = simulation.rolling(day, planner, actual)
    assert [p.job for p in greedy.executed.placements if p.start == 0] == ["cheap"]
    assert "cheap" not in [p.job for p in live.executed.placements if p.start == 0]
    assert ("valuable", 1) in [(p.job, p.start) for p in live.executed.placements]
    assert live.metrics.objective > greedy.metrics.objective
    assert not validate(actual, live.executed)


def test_without_history_exact_runtimes_and_fill_it_is_rolling_greedy() -> None:
    day = generate("priority-inversion", seed=11)
    actual = with_demand(day, NoiseModel(sigma=0.2).draw(day, 3))
    plain = simulation.rolling(day, "greedy", actual, corrector=Corrector())
    planner = Ablated("greedy", forecaster=Corrector(), fill=False)
    live = simulation.rolling(day, planner, actual)
    assert not planner.anticipates
    assert live.executed.placements == plain.executed.placements
    assert live.executed.curves == plain.executed.curves


def test_with_an_exact_forecast_fill_stays_under_its_fading_ceiling() -> None:
    """sigma 0: the observed error is 0, so the ceiling is the prior's, fading as 1 / sqrt(4 + t)."""
    day = generate("mixed-control", seed=12)
    live = simulation.rolling(day, AnticipatingPlanner(), day)
    for r in live.slots:
        level = 0.2 * math.sqrt(4 / (4 + r.slot))
        assert r.app_gpus["chat"] <= max(r.forecast["chat"], math.ceil(day.apps[0].demand[r.slot] * (1 + 5 * level)))
    assert not validate(day, live.executed)


# ----------------------------------------------------------------------------- raising apps into idle GPUs


def test_fill_idle_hand_worked() -> None:
    """8 GPUs, ramp 2, initial 2: a 4-GPU job in slots 1-2 leaves 8, 4, 4, 8 GPUs for the app."""
    job = _job("j", 0, gpus=4, duration=2)
    day = _day((job,), slots=4, demand=(2, 2, 2, 2))
    plan = simulation.Plan("day", "x", [simulation.Placement("j", 1, (0, 1, 2, 3))], {"chat": [2, 2, 2, 2]})
    assert not validate(day, plan)
    raised = fill_idle(day, plan)
    # capacity 8, 4, 4, 8; backward ramp pass: u[0] <= u[1] + 2 = 6; forward from initial 2: 4, 4, 4, 6
    assert raised.curves["chat"] == [4, 4, 4, 6]
    assert not validate(day, raised)
    capped = fill_idle(day, plan, np.array([[3, 3, 3, 3]]))
    assert capped.curves["chat"] == [3, 3, 3, 3]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fill_idle_keeps_plans_valid_and_never_lowers(family: str) -> None:
    from agents.registry import run_scheduler

    day = generate(family, seed=41)
    plan = run_scheduler("greedy", day)
    raised = fill_idle(day, plan)
    assert not validate(day, raised)
    for app in day.apps:
        assert (np.array(raised.curves[app.name]) >= plan.curve(app.name, day.slots)).all()
    assert raised.placements == plan.placements


def test_fill_ceiling_prior_fades() -> None:
    day = _day((), demand=(10, 10, 10, 10), gpus=16)
    assert fill_ceiling(day, (), 5.0, 0) is None
    start = fill_ceiling(day, (0.0,), 5.0, 0)
    later = fill_ceiling(day, (0.0,), 5.0, 36)
    assert start.tolist() == [[20, 20, 20, 20]]  # 10 * (1 + 5 * 0.2)
    assert later.tolist() == [[14, 14, 14, 14]]  # level 0.2 * sqrt(4 / 40) = 0.0632: 10 * 1.316, rounded up
    assert fill_ceiling(day, (0.1,), 5.0, 4, mixed=True).tolist() == [[15, 15, 15, 15]]  # a mixed level as it is


def test_live_planner_refuses_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown live planner"):
        live_planner("oracle")
    with pytest.raises(ValueError, match="needs past days"):
        live_planner(forecast="history")
    with pytest.raises(ValueError, match="samples"):
        AnticipatingPlanner(samples=0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_live_day_validates(family: str) -> None:
    """Jobs at submission, demand off the forecast, early ends, history of the same family: every day is valid."""
    day = generate(family, seed=31)
    history = [generate(family, seed=s) for s in (32, 33, 34)]
    planner = live_planner(history=history, day=day, runtimes=TRACE_RUNTIMES, samples=3)
    live, fixed = simulation.simulate(day, planner, sigma=0.3, seed=4, runtime_model="trace")
    assert not validate(live.actual, live.executed)
    assert not validate(fixed.actual, fixed.executed)
    again, _ = simulation.simulate(day, planner, sigma=0.3, seed=4, runtime_model="trace")
    assert again.executed.placements == live.executed.placements  # the same seed gives the same day


class _Halves:
    """A runtime model of its own: every job runs half its limit (rounded up), whatever it has run."""

    def sample_remaining(self, limit: int, elapsed: int, rng: np.random.Generator) -> int:
        half = math.ceil(limit / 2)
        return half - elapsed if elapsed < half else limit - elapsed  # outlived its half: runs to the limit

    def runtime_slots(self, limit: int, u: float) -> int:
        return math.ceil(limit / 2)


def test_any_runtime_sampler_serves_the_live_planner() -> None:
    """RuntimeDistribution is a RuntimeSampler, and so is any object with its two methods."""
    shipped: RuntimeSampler = TRACE_RUNTIMES
    assert isinstance(shipped, RuntimeSampler) and isinstance(_Halves(), RuntimeSampler)
    assert not isinstance(object(), RuntimeSampler)
    day = generate("mixed-control", seed=5, gpus=16, num_jobs=10)
    history = [generate("mixed-control", seed=s, gpus=16, num_jobs=10) for s in (6, 7)]
    planner = live_planner(history=history, day=day, runtimes=_Halves(), samples=2)
    live, _ = simulation.simulate(day, planner, sigma=0.3, seed=1, runtime_model="trace")
    assert not validate(live.actual, live.executed)


# ----------------------------------------------------------------------------- early ends


def test_a_job_that_ends_early_frees_its_gpus_and_triggers_a_replan() -> None:
    """replan_every=4, but the first job ends at slot 1 instead of 4: the second starts at slot 1."""
    first = _job("first", 0, gpus=8, duration=4, priority=2.0)
    second = _job("second", 0, gpus=8, duration=2, priority=1.0)
    day = _day((first, second), slots=8)
    runtimes = {"first": 1, "second": 2}
    actual = simulation.realized_day(day, day.demand, runtimes)
    sim = simulation.rolling(day, "greedy", actual, replan_every=4, runtimes=runtimes)
    starts = {p.job: p.start for p in sim.executed.placements}
    assert starts == {"first": 0, "second": 1}
    assert [r.slot for r in sim.slots if r.replanned] == [0, 1, 4]
    assert not validate(actual, sim.executed)
    assert sim.metrics.job_value == pytest.approx(2.0 * 8 * 1 + 1.0 * 8 * 2)


def test_realized_day_keeps_worth_per_gpu_slot() -> None:
    job = Job("v", JobType.BATCH_INFERENCE, 2, 4, value=80.0)  # 10 per GPU-slot
    day = _day((job,))
    real = simulation.realized_day(day, day.demand, {"v": 1})
    assert real.jobs[0].duration == 1 and real.jobs[0].weight == pytest.approx(10.0)
    assert simulation.realized_day(day, day.demand, {"v": 4}).jobs[0] == job


def test_planner_sees_limits_not_runtimes() -> None:
    day = _day((_job("a", 0, duration=4),), slots=6)
    state = simulation.state_at(
        day, 2, {"a": (0, (0, 1))}, np.zeros((0, 6), dtype=np.int64), np.zeros((0, 4)), "release", {"a": 3}
    )
    assert [(r.job.id, r.remaining) for r in state.running] == [("a", 2)]
    ended = simulation.state_at(
        day, 3, {"a": (0, (0, 1))}, np.zeros((0, 6), dtype=np.int64), np.zeros((0, 3)), "release", {"a": 3}
    )
    assert ended.running == ()


def test_runtimes_outside_the_limit_are_refused() -> None:
    day = _day((_job("a", 0),))
    with pytest.raises(ValueError, match=r"runtimes\['a'\]"):
        simulation.rolling(day, "greedy", day, runtimes={"a": 3})


def test_trace_days_score_against_actual_runtimes() -> None:
    day = generate("batch-fragmentation", seed=8)
    live, _ = simulation.simulate(day, "greedy", sigma=0.0, seed=2, runtime_model="trace")
    runtimes = draw_runtimes(day, "trace", 2)
    assert {j.id: j.duration for j in live.actual.jobs} == runtimes
    assert any(runtimes[j.id] < j.duration for j in day.jobs)
    assert not validate(live.actual, live.executed)


# ----------------------------------------------------------------------------- causality

# A decision at slot t may depend only on what is known at the start of slot t: the forecast, the jobs released
# by t, the actual demand of slots before t, and which running jobs have ended. Two realized days that agree on
# all of that and differ in everything after it must get the same decisions in slots 0..t.

CAUSAL_T = (0, 4, 11, 17, 22)
CAUSAL_DAYS = (("mixed-control", 1), ("realtime-diurnal", 2), ("priority-inversion", 3))


class _Peeking:
    """A forecaster that uses every column of actual demand it is handed: handed slot ``now`` or later, it
    forecasts them exactly (an oracle), so the rolling loop is causal only if it hands ``now`` columns."""

    def __init__(self) -> None:
        self.widths: list[tuple[int, int]] = []
        self.inner = Corrector()

    def forecast(self, forecast: np.ndarray, actual: np.ndarray, now: int, gpus: int) -> np.ndarray:
        self.widths.append((now, actual.shape[1]))
        if actual.shape[1] > now:
            return np.clip(actual[:, now:], 0, gpus).astype(np.int64)
        return self.inner.forecast(forecast, actual, now, gpus)


class _Oracle:
    """A forecaster told the whole realized day by a side channel: not causal, whatever the loop hands it."""

    def __init__(self, real: np.ndarray) -> None:
        self.real = real

    def forecast(self, forecast: np.ndarray, actual: np.ndarray, now: int, gpus: int) -> np.ndarray:
        return np.clip(self.real[:, now:], 0, gpus).astype(np.int64)


def _causal_day(family: str, seed: int) -> tuple[Scenario, list[Scenario]]:
    day = generate(family, seed, gpus=16, num_jobs=14)
    return day, [generate(family, seed + 100 * k, gpus=16, num_jobs=14) for k in (1, 2, 3)]


def _planner(
    kind: str, day: Scenario, history: list[Scenario]
) -> tuple[str | simulation.LivePlanner, simulation.Forecaster | None]:
    """(scheduler, corrector) of each kind of planner the causality test plays."""
    if kind == "greedy":
        return "greedy", Corrector()
    if kind == "greedy-peeking":
        return "greedy", _Peeking()
    if kind == "anticipate":
        return live_planner("anticipate", history=history, day=day, samples=4), None
    assert kind == "anticipate-history"  # the forecaster fitted from the history, runtimes sampled
    return live_planner(
        "anticipate", history=history, day=day, samples=4, forecast="history", runtimes=TRACE_RUNTIMES
    ), None


def _play(
    day: Scenario,
    real: np.ndarray,
    runtimes: dict[str, int],
    scheduler: str | simulation.LivePlanner,
    corrector: simulation.Forecaster | None,
) -> simulation.Simulation:
    actual = simulation.realized_day(day, real, runtimes)
    return simulation.rolling(day, scheduler, actual, corrector=corrector, runtimes=runtimes)


def _after(
    day: Scenario, real: np.ndarray, runtimes: dict[str, int], played: simulation.Simulation, t: int, seed: int
) -> tuple[Scenario, np.ndarray, dict[str, int]]:
    """A realized day that agrees with ``day`` on everything known at the start of slot ``t`` and differs after.

    Demand from slot t on redrawn (slot t always changed: it is observed only at its end); jobs released after
    t changed, dropped or added (anywhere in the file); runtimes changed wherever the job ends after t in the
    day played (a job started by t still running at t: any end after t; a job not started by t: any runtime).
    """
    rng = np.random.default_rng(seed)
    T, G = day.slots, day.gpus
    other = real.copy()
    other[:, t:] = rng.integers(0, G + 1, size=other[:, t:].shape)
    other[:, t] = (real[:, t] + 1 + rng.integers(0, G, size=real.shape[0])) % (G + 1)
    pending = [j for j in day.jobs if j.running_on is None]
    jobs: list[Job] = []
    for job in day.jobs:
        if job.running_on is None and job.release > t:
            pick = rng.integers(3)
            if pick == 0:
                continue  # never released
            if pick == 1:
                release = int(rng.integers(t + 1, T))
                slack = None if job.deadline is None else int(rng.integers(0, 4))
                job = replace(
                    job,
                    release=release,
                    duration=int(rng.integers(1, 13)),
                    priority=float(rng.uniform(0.5, 10.0)),
                    value=None,
                    deadline=None,
                )
                if slack is not None:
                    job = replace(job, deadline=release + job.duration + slack)
        jobs.append(job)
    for k in range(int(rng.integers(1, 5))):  # late arrivals, inserted anywhere
        like = pending[int(rng.integers(len(pending)))]
        release = int(rng.integers(t + 1, T))
        late = replace(like, id=f"late-{k}", release=release, deadline=None, priority=float(rng.uniform(0.5, 10.0)))
        jobs.insert(int(rng.integers(len(jobs) + 1)), late)
    changed = replace(day, jobs=tuple(jobs))
    start = {p.job: p.start for p in played.executed.placements}
    new_runtimes: dict[str, int] = {}
    for job in changed.jobs:
        s = start.get(job.id)
        if s is not None and s + runtimes[job.id] <= t:
            new_runtimes[job.id] = runtimes[job.id]  # ended by t: known
        elif s is not None and s <= t:
            new_runtimes[job.id] = int(rng.integers(t - s + 1, job.duration + 1))  # running at t: ends after t
        else:
            new_runtimes[job.id] = int(rng.integers(1, job.duration + 1))
    return changed, other, new_runtimes


def _first_divergence(a: simulation.Simulation, b: simulation.Simulation, t: int) -> int | None:
    """The first slot <= t whose decisions differ (jobs started with their GPUs, app allocations, re-plan)."""
    for ra, rb in zip(a.slots[: t + 1], b.slots[: t + 1], strict=True):
        if (ra.started, ra.app_gpus, ra.replanned) != (rb.started, rb.app_gpus, rb.replanned):
            return ra.slot
    return None


def _known_runs(
    family: str, seed: int, kind: str
) -> tuple[Scenario, list[Scenario], np.ndarray, dict[str, int], simulation.Simulation, simulation.Forecaster | None]:
    """The day of a family and seed, its history, its actual demand and runtimes, and the day played."""
    day, history = _causal_day(family, seed)
    real = NoiseModel(sigma=0.3).draw(day, seed)
    runtimes = draw_runtimes(day, "trace", seed)
    scheduler, corrector = _planner(kind, day, history)
    return day, history, real, runtimes, _play(day, real, runtimes, scheduler, corrector), corrector


@pytest.mark.parametrize("kind", ["greedy", "greedy-peeking", "anticipate", "anticipate-history"])
def test_decisions_up_to_a_slot_ignore_everything_after_it(kind: str) -> None:
    """Demand, arrivals and early ends after slot t changed: every decision in slots 0..t is the same."""
    moved: list[bool] = []
    for family, seed in CAUSAL_DAYS:
        day, history, real, runtimes, played, corrector = _known_runs(family, seed, kind)
        assert any(runtimes[j.id] < j.duration for j in day.jobs)  # jobs end early: re-plans at their ends
        for t in CAUSAL_T:
            other_day, other_real, other_runtimes = _after(day, real, runtimes, played, t, seed * 1000 + t)
            scheduler, other_corrector = _planner(kind, other_day, history)
            again = _play(other_day, other_real, other_runtimes, scheduler, other_corrector)
            assert _first_divergence(played, again, t) is None, f"{family} seed {seed}: slot t={t}"
            assert [r.forecast for r in played.slots[: t + 1]] == [r.forecast for r in again.slots[: t + 1]]
            if t < CAUSAL_T[-1]:  # a change in the day's last slots may leave every decision as it was
                moved.append(_first_divergence(played, again, day.slots - 1) is not None)
        if isinstance(corrector, _Peeking):
            assert corrector.widths and all(now == width for now, width in corrector.widths)
    assert all(moved)  # the changes after t do change decisions after t: the check is not vacuous


def test_the_causality_check_catches_a_forecaster_that_knows_the_day() -> None:
    """The negative control: the same check on a forecaster told the realized day finds a decision that moved."""
    for family, seed in CAUSAL_DAYS:
        day, _, real, runtimes, _, _ = _known_runs(family, seed, "greedy")
        played = _play(day, real, runtimes, "greedy", _Oracle(real))
        for t in CAUSAL_T:
            other_day, other_real, other_runtimes = _after(day, real, runtimes, played, t, seed * 1000 + t)
            again = _play(other_day, other_real, other_runtimes, "greedy", _Oracle(other_real))
            assert _first_divergence(played, again, t) is not None, f"{family} seed {seed}: slot t={t}"


# ----------------------------------------------------------------------------- the command line


def test_simulate_cli_live_planner(tmp_path) -> None:
    from agents.cli import main

    day = generate("training-heavy", seed=3, num_jobs=5)
    save_scenario(day, tmp_path / "day.yaml")
    for s in (4, 5):
        save_scenario(generate("training-heavy", seed=s, num_jobs=5), tmp_path / f"past{s}.yaml")
    out = tmp_path / "sim"
    args = [
        "simulate",
        str(tmp_path / "day.yaml"),
        "--history",
        str(tmp_path / "past4.yaml"),
        str(tmp_path / "past5.yaml"),
    ]
    assert main([*args, "--runtime-model", "trace", "--forecast-error", "0.2", "--no-picture", "-o", str(out)]) == 0
    real = load_scenario(out / "actual.yaml")
    assert all(1 <= r.duration <= d.duration for r, d in zip(real.jobs, day.jobs, strict=True))
    assert main(["validate", str(out / "actual.yaml"), str(out / "executed.json")]) == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--scheduler", "greedy", "--history", "PAST"], "live planner's"),
        (["--forecast", "history"], "needs past days"),
        (["--history", "BAD"], "bad.yaml: horizon"),
    ],
)
def test_simulate_cli_refuses_with_one_line(tmp_path, capsys, extra: list[str], message: str) -> None:
    from agents.cli import main

    save_scenario(generate("training-heavy", seed=3, num_jobs=4), tmp_path / "day.yaml")
    save_scenario(generate("training-heavy", seed=4, num_jobs=4), tmp_path / "past.yaml")
    (tmp_path / "bad.yaml").write_text("cluster: {gpus: 8}\n")
    extra = [
        str(tmp_path / "past.yaml") if a == "PAST" else str(tmp_path / "bad.yaml") if a == "BAD" else a for a in extra
    ]
    assert main(["simulate", str(tmp_path / "day.yaml"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
