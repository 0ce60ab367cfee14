"""Decision traces: where each cycle planned each job, and why a job started late.

Every re-plan of a simulated day records, for each job known and not yet started, the slot it is planned
to start at, and the forecast and margin the apps were planned at (:class:`agents.simulator.simulation.SlotRecord`).
:func:`late_starts` reads those records against the hindsight plan of the same realized day: a job that
starts more than ``slack`` slots after its hindsight start ``h``, or never though hindsight starts it, is
**late**. It could have started in time while a cycle at or before its due slot ``h + slack`` planned it at or
before that slot (*in time*); its cause is the first thing that kept it from that, read at one cycle, the
**deciding cycle**: among the cycles at or before the due slot that knew the job, the last one that planned it
past the due slot while the cycle before it (the job's previous record) planned it in time, or, where no such
cycle exists because it was planned past the due slot from the first cycle that knew it, that first cycle.
(Where it was pushed out, brought back in time and pushed out again, the last push is the one it never came
back from; the moves after the due slot cannot make it late and name nothing.) Without a cycle at or before the
due slot that knew the job (a re-plan every K slots), the first cycle that knew it decides.

At a deciding cycle that moved the job out of time, the cause is the first that holds of:

- ``an arrival``: a job that became known after it, in that cycle or the one before, is planned before it;
- ``a margin change``: the forecast and margin the apps were planned at changed in that cycle (a hedge
  candidate taken, or given up);
- ``a forecast change``: the apps' forecast of the slots ahead rose by at least one GPU-slot;
- ``drift``: none of these: the plan moved it later from cycle to cycle on its own (nervousness).

At a deciding cycle that was the first to know the job (planned past its due slot from the start):

- ``held for the margin``: that cycle planned the apps above the point forecast (its margin reads
  ``<forecast> + m`` or ``margin m`` with ``m > 0``): the GPUs the margin keeps for the apps are the reading
  the trace has of why the job waits (it does not replan without the margin to prove it);
- ``never planned in time``: otherwise (no margin, or a planner that records none).

Each :class:`LateStart` also keeps every cycle that moved the job later (``moves``), the deciding one among them
or not, for the trace.

:func:`trace_table` writes the cycles as Markdown for ``gpualloc simulate`` (``decisions.md``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agents.simulator.simulation import SlotRecord
from gpu_env.plan import Plan

__all__ = ["CAUSES", "LATE_SLACK", "LateStart", "late_starts", "trace_table"]

LATE_SLACK = 4
"""A job is late when it starts more than this many slots after its hindsight start."""
CAUSES = ("an arrival", "a margin change", "a forecast change", "drift", "held for the margin", "never planned in time")


@dataclass(frozen=True)
class LateStart:
    """A job that started late against hindsight, and why.

    Attributes:
        job: The job's id.
        hindsight: Its start in the hindsight plan.
        started: Its start on the executed day (None: it never started).
        cause: One of :data:`CAUSES`: what the deciding cycle says kept it from its hindsight start (module
            docstring).
        moves: ``(slot, planned start before, after, cause)`` for each cycle that moved it later.
        at: The slot of the deciding cycle (None: no cycle knew the job).
    """

    job: str
    hindsight: int
    started: int | None
    cause: str
    moves: tuple[tuple[int, int, int, str], ...]
    at: int | None = None

    def describe(self) -> str:
        """One line: ``j7 hindsight 4, started 18 (an arrival at slot 3)``."""
        when = "never started" if self.started is None else f"started {self.started}"
        at = "" if self.at is None else f" at slot {self.at}"
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
        due = h + slack
        if started is not None and started <= due:
            continue
        known = [r for r in records if job in r.planned]  # the cycles that knew it, not yet started
        moves = []
        for last, r in itertools.pairwise(known):
            before, now = _effective(last.planned[job], end), _effective(r.planned[job], end)
            if now > before:
                moves.append((r.slot, before, now, _cause(job, r, last, first_known, ahead, now)))
        cause, at = _deciding_cause(job, known, due, end, first_known, ahead)
        out.append(LateStart(job, h, started, cause, tuple(moves), at))
    return out


def _deciding_cause(
    job: str,
    known: Sequence[SlotRecord],
    due: int,
    end: int,
    first_known: Mapping[str, int],
    ahead: int,
) -> tuple[str, int | None]:
    """The cause of a late start and the slot of its deciding cycle (module docstring).

    Args:
        job: The job's id.
        known: The cycles that knew the job before it started, in slot order.
        due: Its hindsight start plus the slack: the last start in time.
        end: The day's length (a start of -1, not planned, reads as this).
        first_known: The first cycle that knew each job.
        ahead: Slots of the apps' forecast compared (a forecast change).
    """
    if not known:
        return "never planned in time", None
    window = [r for r in known if r.slot <= due] or list(known[:1])
    deciding: SlotRecord | None = None  # the cycle that last moved it out of time
    last: SlotRecord | None = None  # the cycle before it that knew the job (None: it was the first)
    previous: SlotRecord | None = None
    for r in window:
        out_of_time = _effective(r.planned[job], end) > due
        if out_of_time and (previous is None or _effective(previous.planned[job], end) <= due):
            deciding = r
            last = previous
        previous = r
    if deciding is None:  # in time at every cycle it was known up to its due slot, and still late
        return "drift", window[-1].slot
    if last is None:
        return ("held for the margin" if _above_forecast(deciding.margin) else "never planned in time"), deciding.slot
    return _cause(job, deciding, last, first_known, ahead, _effective(deciding.planned[job], end)), deciding.slot


_MARGIN = re.compile(r"(?:^margin |\+ )(-?\d+(?:\.\d+)?(?:e-?\d+)?)")


def _above_forecast(margin: str) -> bool:
    """Whether a cycle's margin label plans the apps above the point forecast (``corrected + 1``, ``margin 2``).

    The newsvendor hedge (``margin q0.91``, a quantile of the error model's paths) is above it past the median.
    """
    quantile = re.match(r"^margin q(\d+(?:\.\d+)?)", margin)
    if quantile is not None:
        return float(quantile.group(1)) > 0.5
    found = _MARGIN.search(margin)
    return found is not None and float(found.group(1)) > 0


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
