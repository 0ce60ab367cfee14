"""Decision traces: where each cycle planned each job, and why a job started late.

Every re-plan of a simulated day records, for each job known and not yet started, the slot it is planned
to start at, and the forecast and margin the apps were planned at (:class:`agents.rolling.simulation.SlotRecord`).
:func:`late_starts` reads those records against the hindsight plan of the same realized day: a job that
starts more than ``slack`` slots after its hindsight start, or never though hindsight starts it, is **late**,
and the cycles where its planned start moved later name the cause:

- ``an arrival``: a job that became known after it, in that cycle or the one before, is planned before it;
- ``a margin change``: the forecast and margin the apps were planned at changed in that cycle (a hedge
  candidate taken, or given up);
- ``a forecast change``: the apps' forecast of the slots ahead rose by at least one GPU-slot;
- ``drift``: none of these: the plan moved it later from cycle to cycle on its own (nervousness);
- ``never planned in time``: it was never planned within ``slack`` slots of its hindsight start.

:func:`trace_table` writes the cycles as Markdown for ``gpualloc simulate`` (``decisions.md``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agents.rolling.simulation import SlotRecord
from gpu_env.plan import Plan

__all__ = ["CAUSES", "LATE_SLACK", "LateStart", "late_starts", "trace_table"]

LATE_SLACK = 4
"""A job is late when it starts more than this many slots after its hindsight start."""
CAUSES = ("an arrival", "a margin change", "a forecast change", "drift", "never planned in time")


@dataclass(frozen=True)
class LateStart:
    """A job that started late against hindsight, and why.

    Attributes:
        job: The job's id.
        hindsight: Its start in the hindsight plan.
        started: Its start on the executed day (None: it never started).
        cause: The first of :data:`CAUSES` seen in the cycles that moved it later (module docstring).
        moves: ``(slot, planned start before, after, cause)`` for each cycle that moved it later.
    """

    job: str
    hindsight: int
    started: int | None
    cause: str
    moves: tuple[tuple[int, int, int, str], ...]

    def describe(self) -> str:
        """One line: ``j7 hindsight 4, started 18 (an arrival at slot 9)``."""
        when = "never started" if self.started is None else f"started {self.started}"
        at = next((f" at slot {m[0]}" for m in self.moves if m[3] == self.cause), "")
        return f"{self.job} hindsight {self.hindsight}, {when} ({self.cause}{at})"


def _effective(start: int, horizon_end: int) -> int:
    """A planned start with 'not planned' (-1) read as past the day's end, so that losing a plan is a move later."""
    return horizon_end if start < 0 else start


def late_starts(
    records: Sequence[SlotRecord],
    executed: Plan,
    hindsight: Plan | Mapping[str, int],
    *,
    slack: int = LATE_SLACK,
    ahead: int = 6,
) -> list[LateStart]:
    """The jobs that started more than ``slack`` slots after their hindsight start (or never), with the cause.

    Args:
        records: The executed day's slot records (each re-plan's planned starts, margin and forecast).
        executed: The executed day as a plan.
        hindsight: The hindsight plan of the same realized day, or its starts (job id -> slot).
        slack: Slots late that count.
        ahead: Slots of the apps' forecast compared from one cycle to the next (a forecast change).
    """
    best = {p.job: p.start for p in hindsight.placements} if isinstance(hindsight, Plan) else dict(hindsight)
    done = {p.job: p.start for p in executed.placements}
    end = len(records)
    first_known: dict[str, int] = {}
    for r in records:
        for job in r.planned:
            first_known.setdefault(job, r.slot)
    out = []
    for job, h in sorted(best.items(), key=lambda kv: (kv[1], kv[0])):
        started = done.get(job)
        if started is not None and started <= h + slack:
            continue
        moves = []
        previous: int | None = None
        last: SlotRecord | None = None
        for r in records:
            if job not in r.planned:
                continue
            now = _effective(r.planned[job], end)
            if previous is not None and now > previous:
                moves.append((r.slot, previous, now, _cause(job, r, last, first_known, ahead, now)))
            previous, last = now, r
        planned_in_time = any(0 <= r.planned.get(job, -1) <= h + slack for r in records if job in r.planned)
        if moves:
            cause = moves[0][3]
        else:
            cause = "never planned in time" if not planned_in_time else "drift"
        out.append(LateStart(job, h, started, cause, tuple(moves)))
    return out


def _cause(
    job: str,
    record: SlotRecord,
    last: SlotRecord | None,
    first_known: Mapping[str, int],
    ahead: int,
    moved_to: int,
) -> str:
    """Why the cycle of ``record`` planned ``job`` later than the cycle before (module docstring)."""
    t = record.slot
    arrivals = {j for j, s in first_known.items() if j != job and t - 1 <= s <= t and s > first_known[job]}
    if any(0 <= record.planned.get(arrival, -1) < moved_to for arrival in arrivals):
        return "an arrival"
    hedged = record.chosen.startswith("margin")
    if last is not None and (record.margin != last.margin or hedged != last.chosen.startswith("margin")):
        return "a margin change"
    if last is not None and record.forecast_ahead and last.forecast_ahead:
        shift = record.slot - last.slot
        before = last.forecast_ahead[shift:ahead]
        after = record.forecast_ahead[: len(before)]
        if sum(after) >= sum(before) + 1:
            return "a forecast change"
    return "drift"


def trace_table(records: Sequence[SlotRecord]) -> str:
    """Each re-plan as a Markdown row: the slot, the margin, the candidate taken, and the planned starts that moved."""
    rows = [
        "| slot | margin | decision | started | planned later | planned earlier |",
        "| ---: | --- | --- | --- | --- | --- |",
    ]
    end = len(records)
    previous: dict[str, int] = {}
    for r in records:
        if not r.replanned:
            continue
        later, earlier = [], []
        for job, start in sorted(r.planned.items()):
            if job in previous:
                a, b = _effective(previous[job], end), _effective(start, end)
                text = f"{job} {'-' if previous[job] < 0 else previous[job]}→{'-' if start < 0 else start}"
                if b > a:
                    later.append(text)
                elif b < a:
                    earlier.append(text)
        started = ", ".join(p.job for p in r.started) or "—"
        rows.append(
            f"| {r.slot} | {r.margin or '—'} | {r.chosen or 'base'} | {started} | "
            f"{', '.join(later) or '—'} | {', '.join(earlier) or '—'} |"
        )
        previous = dict(r.planned)
    return "\n".join(rows) + "\n"
