"""Decision traces: each cycle's planned starts, and the causes of late starts read from them."""

from __future__ import annotations

from agents.rolling.decisions import late_starts, trace_table
from agents.rolling.simulation import SlotRecord
from gpu_env.plan import Placement, Plan


def _record(
    slot: int,
    planned: dict[str, int],
    *,
    margin: str = "corrected + 1",
    ahead: tuple[int, ...] = (4,) * 8,
    started: tuple[Placement, ...] = (),
    chosen: str = "",
) -> SlotRecord:
    return SlotRecord(
        slot=slot,
        replanned=True,
        started=started,
        running=(),
        app_gpus={},
        forecast={},
        actual={},
        solve_ms=1.0,
        planned=planned,
        margin=margin,
        chosen=chosen,
        forecast_ahead=ahead,
    )


def _executed(starts: dict[str, int]) -> Plan:
    return Plan("day", "live", [Placement(job, t, (0,)) for job, t in starts.items()], {})


def test_an_arrival_that_takes_the_jobs_place() -> None:
    """`wide` is planned at 2; at slot 1 `urgent` arrives and starts; `wide` moves to 9 and starts there."""
    records = [
        _record(0, {"wide": 2}),
        _record(1, {"wide": 9, "urgent": 1}),
        *[_record(t, {"wide": 9}) for t in range(2, 9)],
        _record(9, {"wide": 9}),
        *[_record(t, {}) for t in range(10, 12)],
    ]
    late = late_starts(records, _executed({"wide": 9, "urgent": 1}), {"wide": 2, "urgent": 1})
    assert [(x.job, x.hindsight, x.started, x.cause) for x in late] == [("wide", 2, 9, "an arrival")]
    assert late[0].moves == ((1, 2, 9, "an arrival"),)
    assert late[0].describe() == "wide hindsight 2, started 9 (an arrival at slot 1)"


def test_a_margin_change_and_a_forecast_change() -> None:
    records = [
        _record(0, {"a": 1, "b": 1}),
        _record(1, {"a": 8, "b": 1}, margin="margin 2", chosen="margin 2"),
        _record(2, {"a": 8, "b": 9}, margin="margin 2", chosen="margin 2", ahead=(9,) * 8),
        *[_record(t, {"a": 8, "b": 9}, margin="margin 2") for t in range(3, 12)],
    ]
    late = {x.job: x.cause for x in late_starts(records, _executed({"a": 8, "b": 9}), {"a": 1, "b": 1})}
    assert late == {"a": "a margin change", "b": "a forecast change"}


def test_drift_never_planned_and_on_time() -> None:
    records = [_record(t, {"d": t + 2, "n": 20, "ok": 3}) for t in range(12)]
    late = {x.job: x.cause for x in late_starts(records, _executed({"ok": 5}), {"d": 2, "n": 2, "ok": 1})}
    assert late == {"d": "drift", "n": "never planned in time"}  # d never started; ok started 4 late: on time


def test_the_trace_table_shows_the_moves() -> None:
    records = [_record(0, {"wide": 2}), _record(1, {"wide": 9, "urgent": 1}, chosen="holding wide")]
    table = trace_table(records)
    assert "| 1 | corrected + 1 | holding wide | — | wide 2→9 | — |" in table
