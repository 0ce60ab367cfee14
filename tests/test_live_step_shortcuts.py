"""The live step's shortcuts give what the step computed before them: the same plans and states."""

from __future__ import annotations

from agents.live.anticipate import LIVE_FORECAST
from agents.live.forecast import NoiseModel
from agents.live.runtimes import draw_runtimes
from agents.live_gym.live_policy import base_plan
from agents.registry import run_scheduler
from agents.simulator.simulation import LiveDay, realized_day
from gpu_env.generators import generate


def _live_day(family: str, seed: int, sigma: float) -> LiveDay:
    day = generate(family, seed)
    runtimes = draw_runtimes(day, "trace", seed)
    actual = realized_day(day, NoiseModel(sigma).draw(day, seed), runtimes)
    return LiveDay(day, actual, corrector=LIVE_FORECAST, runtimes=runtimes)


def test_the_base_plan_is_run_schedulers_plan_without_its_metrics() -> None:
    live = _live_day("mixed-control", 3, 0.3)
    scenario, _ = live.state()[0].to_scenario()
    fresh, fast = run_scheduler("greedy", scenario), base_plan("greedy", scenario)
    assert fast.metrics is None and fast.scheduler == fresh.scheduler
    assert fast.to_dict()["placements"] == fresh.to_dict()["placements"]
    assert fast.curves == fresh.curves


def test_every_state_of_a_day_reads_the_days_forecast_as_built_fresh() -> None:
    live = _live_day("mixed-control", 3, 0.3)
    state, _ = live.state()
    assert state.day_forecast == tuple(tuple(int(x) for x in row) for row in live.scenario.demand)
