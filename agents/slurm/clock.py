"""The day's clock: which day a moment belongs to, and which slot of that day it is in.

A day of the cluster begins at ``horizon.day_start`` (a UTC time of day, default 00:00) and holds
``horizon.day_slots`` slots of ``horizon.slot_minutes`` (default: the slots of 24 hours). The slot of
the day is what the arrival model of the live planner and an app's ``anchor: day`` forecast read, so a
site in another timezone gets its own day by moving ``day_start``, and a test that runs days of
24 one-minute slots (``day_slots: 24``) plays whole days in 24 minutes.

Day ``k`` begins ``k * day_slots * slot_seconds`` after ``day_start`` of 1970-01-01; a day is named by
the UTC date and time of its start (``2026-12-02`` for a day that starts at midnight,
``2026-12-02T06-00`` otherwise, so that accelerated days never share a name).

>>> clock = DayClock(day_start=6 * 3600.0, slot_seconds=3600.0, day_slots=24)
>>> t = 1_764_655_200.0 + 3 * 3600 + 10  # 2025-12-02 06:00 UTC, plus 3 h 10 s
>>> clock.slot_of_day(t), clock.day_name(t)
(3, '2025-12-02T06-00')
>>> clock.slot_of_day(t - 4 * 3600), clock.day_name(t - 4 * 3600)
(23, '2025-12-01T06-00')
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from agents.slurm.config import SlurmConfig


@dataclass(frozen=True)
class DayClock:
    """Days of ``day_slots`` slots of ``slot_seconds``, the first beginning at ``day_start`` UTC of 1970-01-01.

    Attributes:
        day_start: Seconds after 00:00 UTC at which days begin.
        slot_seconds: Seconds per slot.
        day_slots: Slots in a day.
    """

    day_start: float
    slot_seconds: float
    day_slots: int

    @classmethod
    def of(cls, config: SlurmConfig) -> DayClock:
        """The clock a configuration states (``horizon.day_start``, ``slot_minutes``, ``day_slots``)."""
        return cls(config.day_start, config.slot_seconds, config.day_slots)

    @property
    def day_seconds(self) -> float:
        """Seconds in a day."""
        return self.day_slots * self.slot_seconds

    def day_index(self, epoch: float) -> int:
        """The number of the day ``epoch`` falls in (day 0 begins at ``day_start`` of 1970-01-01)."""
        return math.floor((epoch - self.day_start) / self.day_seconds + 1e-9)

    def day_begins(self, epoch: float) -> float:
        """Epoch seconds at which the day of ``epoch`` began."""
        return self.day_start + self.day_index(epoch) * self.day_seconds

    def slot_of_day(self, epoch: float) -> int:
        """The slot of the day ``epoch`` falls in, ``0 .. day_slots - 1``."""
        slot = math.floor((epoch - self.day_begins(epoch)) / self.slot_seconds + 1e-9)
        return min(max(slot, 0), self.day_slots - 1)

    def day_name(self, epoch: float) -> str:
        """The day's name: its start's UTC date, with the time when it does not start at midnight."""
        begins = self.day_begins(epoch)
        stamp = time.gmtime(round(begins))
        if stamp.tm_hour == stamp.tm_min == stamp.tm_sec == 0 and self.day_seconds == 86_400.0:
            return time.strftime("%Y-%m-%d", stamp)
        if stamp.tm_sec == 0:
            return time.strftime("%Y-%m-%dT%H-%M", stamp)
        return time.strftime("%Y-%m-%dT%H-%M-%S", stamp)
