"""benchmarks/real_demand.py: the real days and their histories, one day played, the report's sections."""

from __future__ import annotations

import pytest

import benchmarks.real_demand as bench


def test_every_day_after_the_first_week_is_played_with_the_seven_recorded_days_before() -> None:
    lora = bench.tasks(["lora"], [32], ["greedy"], None)
    helios = bench.tasks(["helios"], [32], ["greedy"], None)
    assert len(lora) == 15 and len(helios) == 24  # 22 and 31 whole days, less the first week
    assert len(lora[0].history) == 6  # demand day 0 has no day before it to forecast it from: not recorded
    for task in (lora[1], helios[-1]):
        assert len(task.history) == bench.HISTORY_DAYS
        assert all(app.forecast is not None for day in (task.day, *task.history) for app in day.apps)
        assert [d.name for d in task.history] == sorted(d.name for d in task.history)  # the days before, in order
    assert [t.demand_day for t in bench.tasks(["lora"], [32], ["greedy"], None, tuning=True)] == list(range(7, 14))


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    task = bench.tasks(["lora"], [32], ["backfill", "greedy"], 1)[0]
    return bench.play_task(task)


def test_one_day_is_played_by_every_planner_against_its_hindsight(rows: list[dict]) -> None:
    assert [r["planner"] for r in rows] == ["backfill", "greedy"]
    assert all(r["valid"] and r["error"] is None for r in rows)
    assert all(r["reference"] > 0 and r["objective"] <= r["reference"] + 1e-6 for r in rows)
    assert {r["unseen"] for r in rows} == {False} and rows[0]["date"] == "2024-11-23"


def test_the_report_pools_sum_over_sum_and_names_its_sections(rows: list[dict]) -> None:
    pooled = bench.pooled(rows, "greedy")
    assert pooled == pytest.approx(rows[1]["objective"] / rows[1]["reference"])
    text = "\n".join(bench.report(rows, "cmd", 1.0))
    for heading in ("## Pooled ratio, tuning days", "## Days whose optimum is not positive", "## Every day"):
        assert heading in text
