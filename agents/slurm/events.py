"""What changed in Slurm's queue between two reads: the events that start a cycle of ``gpualloc slurm run``.

A read of the queue (one ``squeue``) is reduced to a :class:`Queue`, the ids of
the jobs that pend and of those that run. Two successive reads give the
:class:`Events` between them:

- **submitted**: a job pends that neither pended nor ran before;
- **ended**: a job that ran runs no more (it ended, failed, was cancelled or
  requeued), or a job that pended left the queue without being seen to run
  (cancelled, or started and ended between the reads).

The apps' replicas (jobs that ask for a reservation named with the allocator's
prefix) come and go as the apps scale: no event either, their GPUs are the apps'
own (:mod:`agents.slurm.snapshot`).

A job that goes from pending to running is no event: that is what a cycle's own
commit does (a released job starts), and so is a hold. The loop's own changes
therefore never trigger another cycle. Jobs Slurm still lists after they ended
(``MinJobAge``) are neither pending nor running, so their purge is no event
either.

:class:`Watch` keeps the last read (a poll's, or the snapshot of the last cycle,
so that nothing that happens during a cycle is missed) and polls through the
client.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agents.slurm.errors import SlurmError
from agents.slurm.jsonread import SlurmJob
from agents.slurm.snapshot import ACTIVE_STATES

SHOWN_IDS = 20  # job ids listed per kind in a cycle's line; the count is always given


@dataclass(frozen=True)
class Queue:
    """One read of the queue, reduced to what the loop compares: the ids that pend and those that run."""

    pending: frozenset[str]
    running: frozenset[str]

    @classmethod
    def of(cls, jobs: Iterable[SlurmJob], replica_prefix: str = "") -> Queue:
        """The fingerprint of ``squeue``'s jobs, without those in a reservation named ``replica_prefix...``."""
        pending, active = set(), set()
        for j in jobs:
            if replica_prefix and any(n.startswith(replica_prefix) for n in j.reservation.split(",") if n):
                continue
            if j.state == "PENDING":
                pending.add(j.id)
            elif j.state in ACTIVE_STATES:
                active.add(j.id)
        return cls(frozenset(pending), frozenset(active))


@dataclass(frozen=True)
class Events:
    """Jobs submitted and jobs ended between two reads (ids in Slurm's order)."""

    submitted: tuple[str, ...] = ()
    ended: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.submitted or self.ended)

    @property
    def kind(self) -> str:
        """``ended`` when a job ended (its GPUs are free now), else ``submitted``."""
        return "ended" if self.ended else "submitted"

    def merge(self, other: Events) -> Events:
        """Both reads' events, each job once."""
        return Events(_ids([*self.submitted, *other.submitted]), _ids([*self.ended, *other.ended]))

    def to_dict(self) -> dict[str, Any]:
        """For a cycle's line: how many of each kind, and the first :data:`SHOWN_IDS` ids."""
        out: dict[str, Any] = {}
        for kind, ids in (("ended", self.ended), ("submitted", self.submitted)):
            if ids:
                out[kind] = {"jobs": len(ids), "ids": list(ids[:SHOWN_IDS])}
        return out


def events(before: Queue, after: Queue) -> Events:
    """What happened between two reads of the queue (see the module docstring)."""
    submitted = after.pending - before.pending - before.running
    ended = (before.running - after.running) | (before.pending - after.pending - after.running)
    return Events(_ids(submitted), _ids(ended))


def _ids(ids: Iterable[str]) -> tuple[str, ...]:
    """Distinct ids, numbers in numeric order."""
    return tuple(sorted(set(ids), key=lambda i: (len(i), i)))


@dataclass
class Watch:
    """Polls the queue through ``client`` and says what changed since the last read.

    Attributes:
        client: Anything with ``jobs()`` (a :class:`~agents.slurm.client.SlurmClient`): one ``squeue`` a poll.
        seen: The last read (None before the first).
        failing: The last poll failed (its failure was reported; the next ones are not, until one succeeds).
        replica_prefix: The allocator's reservation prefix: jobs in such reservations (the apps' replicas) are
            no event ("" : every job counts).
    """

    client: Any
    seen: Queue | None = None
    failing: bool = False
    replica_prefix: str = ""

    def saw(self, jobs: Iterable[SlurmJob]) -> None:
        """A read made elsewhere (a cycle's snapshot) becomes the one the next poll is compared with."""
        self.seen = Queue.of(jobs, self.replica_prefix)

    def poll(self) -> tuple[Events, str | None]:
        """Read the queue once: the events since the last read, and an error that starts a run of failed polls.

        A failed poll changes nothing: the next one that succeeds is compared with the last good read,
        so what happened meanwhile is still seen. Only the first failure of a run is returned.
        """
        try:
            now = Queue.of(self.client.jobs(), self.replica_prefix)
        except SlurmError as exc:
            first = not self.failing
            self.failing = True
            return Events(), str(exc) if first else None
        self.failing = False
        before, self.seen = self.seen, now
        return (Events() if before is None else events(before, now)), None
