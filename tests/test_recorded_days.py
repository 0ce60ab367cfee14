"""Days as they happened: a recorded day keeps the forecast made for it, and the live planner's inputs are honest.

The optional ``forecast`` of an app (SPEC section 1) is loaded, checked and written like every field; the Slurm
loop's record and the drawn history keep it; sampled arrivals are worth what a known job is at the same slot; the
worth of a GPU-slot never reads the played day's later arrivals.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agents.live.forecast import NoiseModel, as_recorded, day_forecast
from agents.live.hedge import work_worth
from agents.live.history import ArrivalModel
from agents.slurm.config import config_from_dict
from agents.slurm.record import DayRecord
from gpu_env.generators import generate
from gpu_env.scenario import (
    App,
    Job,
    JobType,
    Scenario,
    ScenarioError,
    load_scenario,
    save_scenario,
    scenario_from_dict,
)
from lab.drawn_history import past_days
from tests.slurm_helpers import NOW
from tests.test_slurm_live import _app_config


def _data(forecast: object) -> dict:
    return {
        "name": "d",
        "cluster": {"gpus": 8},
        "horizon": {"slots": 3},
        "realtime": [{"name": "chat", "demand": [2, 3, 4], "ramp": 2, "penalty": 8, "forecast": forecast}],
        "jobs": [],
    }


def test_a_recorded_forecast_is_loaded_and_written_back(tmp_path: Path) -> None:
    day = scenario_from_dict(_data([2, 2, 2]))
    assert day.apps[0].forecast == (2, 2, 2) and day.apps[0].demand == (2, 3, 4)
    save_scenario(day, tmp_path / "d.yaml")
    assert load_scenario(tmp_path / "d.yaml") == day
    assert day_forecast(day).tolist() == [[2, 2, 2]]


def test_an_old_file_without_a_forecast_still_loads() -> None:
    data = _data(None)
    del data["realtime"][0]["forecast"]
    day = scenario_from_dict(data)
    assert day.apps[0].forecast is None and day_forecast(day) is None
    assert "forecast" not in day.to_dict()["realtime"][0]


@pytest.mark.parametrize(
    ("forecast", "message"),
    [
        ([2, 2], r"realtime\[0\]\.forecast: expected 3 values \(horizon\.slots\), got 2"),
        ([2, -1, 2], r"realtime\[0\]\.forecast"),
        ("high", r"realtime\[0\]\.forecast"),
    ],
)
def test_a_bad_forecast_names_its_field(forecast: object, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        scenario_from_dict(_data(forecast), "day.yaml")


def test_the_drawn_history_records_the_forecast_and_the_demand_that_came() -> None:
    (past,) = past_days("realtime-diurnal", 16, seed=3, days=1, sigma=0.3)
    drawn = generate("realtime-diurnal", 10_000_300, gpus=16)
    assert [app.forecast for app in past.apps] == [app.demand for app in drawn.apps]
    assert past.demand.tolist() == NoiseModel(0.3).draw(drawn, 10_000_300).tolist()


def test_as_recorded_keeps_the_forecast_beside_the_actual() -> None:
    day = generate("mixed-control", 1)
    actual = day.demand + 1
    rec = as_recorded(day, actual)
    assert rec.demand.tolist() == actual.tolist() and day_forecast(rec).tolist() == day.demand.tolist()


def test_the_slurm_record_keeps_the_forecast_the_cycles_read(tmp_path: Path) -> None:
    config = config_from_dict(_app_config(tmp_path))
    record = DayRecord.new(config, NOW)
    record.gpus, record.node_size = 8, 8
    from agents.slurm.record import AppRecord

    forecast = [3] * record.day_slots
    observed = [None] * record.day_slots
    observed[0], observed[1] = 5, 6
    record.apps["chat"] = AppRecord(2, 8.0, forecast, observed)
    day = record.to_scenario([])
    assert day.apps[0].forecast == (3,) * record.day_slots
    assert day.apps[0].demand[:3] == (5, 6, 3)


def test_sampled_arrivals_are_discounted_as_known_jobs_are() -> None:
    """At slot 10 of a day with decay 0.98, a known job's worth is scaled by 0.98**10 (ClusterState.value_scale);
    an arrival drawn from the history must be scaled the same, or it looks a fifth more valuable than it is."""
    job = Job("past", JobType.TRAINING, 2, 3, release=12, priority=5.0)
    day = Scenario("past", gpus=8, slots=24, decay=0.98, jobs=(job,))
    model = ArrivalModel.fit([day] * 3)
    rng = np.random.default_rng(0)
    drawn = []
    while not drawn:
        drawn = model.sample(rng, 10, 8, 8, 14, value_scale=0.98**10)
    assert all(j.priority == pytest.approx(5.0 * 0.98**10) for j in drawn)


def test_the_live_planner_discounts_its_sampled_arrivals(monkeypatch: pytest.MonkeyPatch) -> None:
    from agents.live.allocator import ClusterState
    from agents.live.anticipate import FUTURE_PREFIX, AnticipatingPlanner

    job = Job("past", JobType.TRAINING, 2, 3, release=12, priority=5.0)
    model = ArrivalModel.fit([Scenario("past", gpus=8, slots=24, decay=0.98, jobs=(job,))] * 3)
    planner = AnticipatingPlanner(arrivals=model, seed=1)
    state = ClusterState(gpus=8, horizon=14, decay=0.98, value_scale=0.98**10)
    scenario, _ = state.to_scenario()
    futures = [planner._future(scenario, 10, {}, None, k) for k in range(30)]
    sampled = [j for f in futures for j in f.jobs if j.id.startswith(FUTURE_PREFIX)]
    assert sampled and all(j.priority == pytest.approx(5.0 * 0.98**10) for j in sampled)


def test_the_worth_of_a_gpu_slot_never_reads_the_days_later_arrivals() -> None:
    early = Job("early", JobType.TRAINING, 2, 3, priority=2.0)
    late = Job("late", JobType.TRAINING, 2, 3, release=5, priority=200.0)
    app = App("chat", (1,) * 8, ramp=1, initial=1, penalty=8.0)
    day = Scenario("d", gpus=8, slots=8, apps=(app,), jobs=(early, late))
    assert work_worth([], day) == 2.0
    assert work_worth([], Scenario("e", gpus=8, slots=8, jobs=(late,))) == 1.0
