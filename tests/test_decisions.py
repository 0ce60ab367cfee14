"""Decision traces: each cycle's planned starts, and the causes of late starts read from them."""

from __future__ import annotations

from dataclasses import replace

from agents.simulator.decisions import late_starts, trace_table
from agents.simulator.simulation import SlotRecord
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
    records = [_record(t, {"d": t + 2, "n": 20, "ok": 3}, margin="corrected + 0") for t in range(12)]
    late = {x.job: x.cause for x in late_starts(records, _executed({"ok": 5}), {"d": 2, "n": 2, "ok": 1})}
    assert late == {"d": "drift", "n": "never planned in time"}  # d never started; ok started 4 late: on time


# Issue 47: the cause is read at the cycle that kept the job from its hindsight start, not at its first move.


def test_a_job_planned_past_its_due_slot_from_the_first_cycle_is_held_for_the_margin() -> None:
    """The issue's day, by hand: `whole` (the whole cluster) arrives at slot 4, hindsight starts it at 5.

    Every cycle from 4 on plans it at 18 (the apps planned at their margin); at slot 9 an arrival is planned
    before it and it moves to 19; it never starts. The first move in the record is that arrival, long after the
    job was already lost: the old rule said "never started (an arrival at slot 9)".
    """
    records = [
        *[_record(t, {}) for t in range(4)],
        *[_record(t, {"whole": 18}) for t in range(4, 9)],
        _record(9, {"whole": 19, "new": 10}),
        *[_record(t, {"whole": 19}) for t in range(10, 24)],
    ]
    (late,) = late_starts(records, _executed({"new": 10}), {"whole": 5, "new": 10})
    assert late.moves == ((9, 18, 19, "an arrival"),)  # the record's first move, as before
    assert (late.cause, late.at) == ("held for the margin", 4)
    assert late.describe() == "whole hindsight 5, never started (held for the margin at slot 4)"
    # The same day planned at the point forecast: nothing in the record says why it waited.
    flat = [replace(r, margin="corrected + 0") for r in records]
    (late,) = late_starts(flat, _executed({"new": 10}), {"whole": 5, "new": 10})
    assert (late.cause, late.at) == ("never planned in time", 4)


def test_a_move_that_keeps_the_job_in_time_is_not_its_cause() -> None:
    """`j` (hindsight 2, due 6): an arrival moves it 2 -> 4 at slot 1 (still in time); a margin taken at slot 3
    moves it to 12. The old rule named the first move (an arrival); the margin change is what made it late."""
    records = [
        _record(0, {"j": 2}),
        _record(1, {"j": 4, "a": 2}),
        _record(2, {"j": 4}),
        _record(3, {"j": 12}, margin="margin 2", chosen="margin 2"),
        *[_record(t, {"j": 12}, margin="margin 2") for t in range(4, 12)],
    ]
    (late,) = late_starts(records, _executed({"a": 2, "j": 12}), {"j": 2, "a": 2})
    assert [m[3] for m in late.moves] == ["an arrival", "a margin change"]
    assert (late.job, late.started, late.cause, late.at) == ("j", 12, "a margin change", 3)


def test_the_push_it_never_came_back_from_decides() -> None:
    """`j` (hindsight 3, due 7): pushed out by an arrival at slot 1, planned in time again at slot 2, pushed out
    for good by a forecast rise at slot 4. A move after the due slot (an arrival at 9) names nothing."""
    records = [
        _record(0, {"j": 3}),
        _record(1, {"j": 10, "a": 1}),
        _record(2, {"j": 5}),
        _record(3, {"j": 5}),
        _record(4, {"j": 11}, ahead=(9,) * 8),
        *[_record(t, {"j": 11}, ahead=(9,) * 8) for t in range(5, 9)],
        _record(9, {"j": 13, "b": 9}, ahead=(9,) * 8),
        *[_record(t, {"j": 13}, ahead=(9,) * 8) for t in range(10, 14)],
    ]
    (late,) = late_starts(records, _executed({"a": 1, "b": 9, "j": 13}), {"j": 3, "a": 1, "b": 9})
    assert [(m[0], m[3]) for m in late.moves] == [(1, "an arrival"), (4, "a forecast change"), (9, "an arrival")]
    assert (late.cause, late.at) == ("a forecast change", 4)
    assert late.describe() == "j hindsight 3, started 13 (a forecast change at slot 4)"


def test_the_margin_labels_read_as_above_the_forecast() -> None:
    from agents.simulator.decisions import _above_forecast

    assert _above_forecast("corrected + 1 (raw)") and _above_forecast("margin 2") and _above_forecast("ratio + 0.5")
    assert _above_forecast("corrected + 1 (error model)") and _above_forecast("margin q0.91")
    assert not _above_forecast("margin q0.3")
    assert not _above_forecast("corrected + 0") and not _above_forecast("margin -1") and not _above_forecast("")
    assert not _above_forecast("margin 0") and not _above_forecast("HistoryForecaster")


def test_the_trace_table_shows_the_moves() -> None:
    records = [_record(0, {"wide": 2}), _record(1, {"wide": 9, "urgent": 1}, chosen="holding wide")]
    table = trace_table(records)
    assert "| 1 | corrected + 1 | holding wide | — | wide 2→9 | — |" in table
