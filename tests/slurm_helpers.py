"""A fake Slurm for the driver's unit tests: the test sets its jobs and reservations; it records the changes.

:class:`FakeSlurm` answers like :class:`~agents.slurm.client.SlurmClient`
(``jobs``, ``nodes``, ``reservations``, ``hold``, ``release``, ...) from plain
lists the test edits between calls, so a test can end a job, submit one, or make
``squeue`` fail, and see what the cycle or the loop does with it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from agents.slurm.errors import CommandError
from agents.slurm.jsonread import SlurmJob, SlurmNode, SlurmReservation

NOW = float(int(time.time()))  # the tests' "now": cycles read the wall clock, so the fake's times are near it


def driver_config(*, default_type: str, chat: int, ramp: int = 2, **slurm: object) -> dict:
    """A driver configuration as a dict: partition ``gpu`` owned (4 cores a GPU, and ``slurm``'s other keys), 24 slots
    of an hour, jobs of ``default_type`` unless told, and an app "chat" needing ``chat`` GPUs in every slot."""
    return {
        "slurm": {"partitions": ["gpu"], "cpus_per_gpu": 4, **slurm},
        "owned": {"partitions": ["gpu"]},
        "horizon": {"slots": 24, "slot_minutes": 60},
        "workloads": {"default_type": default_type},
        "realtime": [{"name": "chat", "demand": [chat] * 24, "ramp": ramp, "penalty": 8}],
    }


def running(jid: str, node: str, first: int, gpus: int, *, ends: float = NOW + 3600, **fields) -> SlurmJob:
    """A job running on GPUs ``first .. first+gpus-1`` of ``node`` until ``ends``."""
    base = dict(
        state="RUNNING",
        reason="None",
        nodes=(node,),
        tres_per_node=f"gres:gpu:{gpus}",
        gres_detail=(f"gpu:{gpus}(IDX:{first}-{first + gpus - 1})",),
        start_time=int(NOW - 600),
        end_time=int(ends),
    )
    return _job(jid, **{**base, **fields})


def pending(jid: str, gpus: int, *, held: bool = True, minutes: int = 60, **fields) -> SlurmJob:
    """An owned job pending in partition ``gpu`` (held by its user by default)."""
    return _job(
        jid,
        state="PENDING",
        reason="JobHeldUser" if held else "Resources",
        nodes=(),
        tres_per_node=f"gres:gpu:{gpus}",
        gres_detail=(),
        start_time=None,
        end_time=None,
        time_limit=minutes,
        **fields,
    )


def _job(jid: str, **fields) -> SlurmJob:
    base = dict(
        partition="gpu", qos="", comment="", priority=0, node_count=1, tres_per_job="", tres_other="",
        time_limit=60, eligible_time=None, deadline=None, required_nodes=(),
    )  # fmt: skip
    base.update(fields)
    return SlurmJob(id=jid, **base)


def core_reservation(name: str, node: str, cores: int) -> SlurmReservation:
    """A core reservation of ``cores`` cores on one node, from an hour ago for a day."""
    return SlurmReservation(name, (node,), {node: cores}, cores, int(NOW - 3600), int(NOW + 86400), ())


LOST = "lost"  # a fault of FakeSlurm.faults: the change is made, but its answer is lost (a timeout)
UNANSWERED = "unanswered"  # a fault: no answer and no change (the controller unreachable)


class JsonLines:
    """A text stream for the loop's ``out``: every line written is parsed as JSON into :attr:`lines`.

    ``stamp`` (optional) adds fields to each line as it arrives (e.g. a fake clock's time).
    """

    def __init__(self, stamp: Callable[[], dict] | None = None) -> None:
        self.lines: list[dict] = []
        self._stamp = stamp

    def write(self, text: str) -> None:
        extra = self._stamp() if self._stamp else {}
        self.lines.extend({**json.loads(t), **extra} for t in text.splitlines())

    def flush(self) -> None:
        pass


class FakeSlurm:
    """Slurm's answers from lists the test edits; every change is recorded in :attr:`calls`.

    Cores are counted as Slurm would: a running job takes ``cores_per_gpu`` cores per GPU, a
    reservation its cores, and a reservation is made only where its cores are free ("Requested
    nodes are busy" otherwise).

    Attributes:
        node_names: The nodes, each with ``size`` GPUs and ``cores`` cores.
        queue: What ``squeue`` lists.
        held_reservations: What ``scontrol show reservation`` lists.
        calls: Every change made, as tuples.
        polls: How many times ``squeue`` was read.
        squeue_error: When set, ``squeue`` fails with this message.
        sinfo_error: When set, ``sinfo`` fails with this message.
        scontrol_error: When set, ``scontrol show reservation`` fails with this message.
        start_released: A released job starts at once on its planned nodes (as Slurm would).
        faults: Per change, as ``(kind, target)`` (``("create", name)``, ``("delete", name)``,
            ``("release", job)``, ``("hold", job)``), how its next call fails: :data:`LOST`,
            :data:`UNANSWERED`, or any other text: Slurm refuses with it. Each fault is used once.
        bad_gres: Nodes whose used gres ``sinfo`` gives unreadable.
        node_states: Nodes whose state ``sinfo`` gives as this (``DOWN``, ``DRAIN`` ...).
        in_use: Reservations Slurm refuses to delete ("Requested reservation is in use").
        shared: Per reservation made with ``Flags=OVERLAP``, the cores it shares with others (counted once).
        before_change: Called with each change's tuple just before it is made (a foreign job, say).
        retries: Tries per change (what the commit reads from a client).
        no_detail: Running jobs that ``squeue`` lists without their GPU indices (just started; ``sinfo`` counts them).
    """

    def __init__(self, nodes: tuple[str, ...] = ("n1",), size: int = 8, cores: int = 32) -> None:
        self.node_names = nodes
        self.size = size
        self.cores = cores
        self.cores_per_gpu = cores // size
        self.queue: list[SlurmJob] = []
        self.held_reservations: list[SlurmReservation] = []
        self.calls: list[tuple] = []
        self.polls = 0
        self.squeue_error: str | None = None
        self.sinfo_error: str | None = None
        self.scontrol_error: str | None = None
        self.start_released = True
        self.faults: dict[tuple[str, str], str] = {}
        self.bad_gres: set[str] = set()
        self.node_states: dict[str, str] = {}
        self.in_use: set[str] = set()
        self.before_change = None
        self.retries = 3
        self.shared: dict[str, int] = {}  # cores an OVERLAP reservation shares with others (counted once)
        self.no_detail: set[str] = set()  # running jobs whose GPU indices squeue leaves out (just started)
        self._node_list: dict[str, tuple[str, ...]] = {}

    # ---------------------------------------------------------------- reading

    def jobs(self) -> list[SlurmJob]:
        self.polls += 1
        if self.squeue_error is not None:
            raise CommandError(f"squeue --all --json: failed 3 times: {self.squeue_error}", unreachable=True)
        return [replace(j, gres_detail=()) if j.id in self.no_detail else j for j in self.queue]

    def pending_jobs(self, jobs: Sequence[str]) -> set[str]:
        self.polls += 1
        if self.squeue_error is not None:
            raise CommandError(f"squeue --jobs: failed 3 times: {self.squeue_error}", unreachable=True)
        return {j.id for j in self.queue if j.id in set(jobs) and j.state == "PENDING"}

    def nodes(self) -> list[SlurmNode]:
        if self.sinfo_error is not None:
            raise CommandError(f"sinfo --all --json: failed 3 times: {self.sinfo_error}", unreachable=True)
        out = []
        for name in self.node_names:
            used = self._used(name)
            state = "IDLE" if not used else ("ALLOCATED" if len(used) == self.size else "MIXED")
            idx = ",".join(map(str, used)) if used else "N/A"
            gres_used = "gpu:(IDX:?" if name in self.bad_gres else f"gpu:{len(used)}(IDX:{idx})"
            states = frozenset(self.node_states.get(name, state).split("+"))
            out.append(SlurmNode(name, states, ("gpu",), f"gpu:{self.size}", gres_used, self.cores))
        return out

    def reservations(self) -> list[SlurmReservation]:
        if self.scontrol_error is not None:
            raise CommandError(f"scontrol show reservation: failed 3 times: {self.scontrol_error}", unreachable=True)
        return list(self.held_reservations)

    def _used(self, node: str) -> list[int]:
        return sorted(
            i
            for j in self.queue
            if j.state == "RUNNING" and node in j.nodes
            for i in _indices(j.gres_detail[j.nodes.index(node)])
        )

    def free_cores(self, node: str) -> int:
        """Cores on ``node`` that neither a running job nor a reservation takes (a job in a reservation, a
        replica, runs on that reservation's cores)."""
        names = {r.name for r in self.held_reservations}
        outside = [j for j in self.queue if j.state == "RUNNING" and node in j.nodes and j.reservation not in names]
        taken = sum(len(_indices(j.gres_detail[j.nodes.index(node)])) for j in outside) * self.cores_per_gpu
        taken += sum(r.cores.get(node, 0) - self.shared.get(r.name, 0) for r in self.held_reservations)
        return self.cores - taken

    def replicas_in(self, name: str) -> list[str]:
        """The running jobs in a reservation."""
        return [j.id for j in self.queue if j.state == "RUNNING" and j.reservation == name]

    # ---------------------------------------------------------------- changing

    def _fault(self, kind: str, target: str, make) -> None:
        """Make a change, or fail as :attr:`faults` says."""
        if self.before_change is not None:
            self.before_change((kind, target))
        fault = self.faults.pop((kind, target), None)
        if fault == UNANSWERED:
            raise CommandError(f"scontrol {kind} {target}: failed once: no answer within 30 s", unreachable=True)
        if fault is not None and fault != LOST:
            raise CommandError(f"scontrol {kind} {target}: failed once: {fault}")
        make()
        if fault == LOST:
            raise CommandError(f"scontrol {kind} {target}: failed once: no answer within 30 s", unreachable=True)

    def hold(self, job: str) -> None:
        def make() -> None:
            self.calls.append(("hold", job))
            self._set(job, reason="JobHeldAdmin")

        self._fault("hold", job, make)

    def release(self, job: str) -> None:
        self._fault("release", job, lambda: self._release(job))

    def _release(self, job: str) -> None:
        self.calls.append(("release", job))
        if not self.start_released or job not in self._node_list:  # no node list: left to Slurm, which waits here
            self._set(job, reason="Resources")
            return
        (node,) = self._node_list[job]
        j = next(j for j in self.queue if j.id == job)
        gpus = int(j.tres_per_node.rsplit(":", 1)[1])
        used = set(self._used(node))
        free = [i for i in range(self.size) if i not in used][:gpus]
        if len(free) < gpus or self.free_cores(node) < gpus * self.cores_per_gpu:  # Slurm waits for room
            self._set(job, reason="Resources")
            return
        self._set(
            job,
            state="RUNNING",
            reason="None",
            nodes=(node,),
            gres_detail=(f"gpu:{gpus}(IDX:{','.join(map(str, free))})",),
            start_time=int(NOW),
            end_time=int(NOW + 60 * (j.time_limit or 60)),
        )

    def set_nodes(self, job: str, nodes) -> None:
        self.calls.append(("nodes", job, tuple(nodes)))
        self._node_list[job] = tuple(nodes)

    def create_reservation(self, name, cores, minutes, users, partition, *, overlap: bool = False) -> None:
        ((node, count),) = cores.items()
        if any(r.name == name for r in self.held_reservations):
            raise CommandError(f"scontrol create reservation {name}: failed once: Duplicate reservation name")
        free = self.free_cores(node)
        # Flags=OVERLAP may take the cores of other reservations (never a running job's): free ones first
        reserved = sum(r.cores.get(node, 0) - self.shared.get(r.name, 0) for r in self.held_reservations)
        if count > free + (reserved if overlap else 0):
            raise CommandError(f"scontrol create reservation {name}: failed once: Requested nodes are busy")

        def make() -> None:
            self.calls.append(("create", name, tuple(cores.items())) + (("overlap",) if overlap else ()))
            if count > free:
                self.shared[name] = count - free
            now = int(time.time())
            self.held_reservations.append(
                SlurmReservation(name, (node,), {node: count}, count, now, now + 60 * minutes, ())
            )

        self._fault("create", name, make)

    def delete_reservation(self, name) -> None:
        if all(r.name != name for r in self.held_reservations):
            raise CommandError(f"scontrol delete {name}: failed once: Requested reservation is invalid")
        if name in self.in_use or self.replicas_in(name):
            raise CommandError(f"scontrol delete {name}: failed once: Requested reservation is in use")

        def make() -> None:
            self.calls.append(("delete", name))
            self.held_reservations = [r for r in self.held_reservations if r.name != name]
            self.shared.pop(name, None)
            for r in self.held_reservations:  # cores shared with the one deleted are the overlapping one's alone now
                if r.name in self.shared:
                    node = r.nodes[0]
                    others = sum(
                        o.cores.get(node, 0) - self.shared.get(o.name, 0) for o in self.held_reservations if o is not r
                    )
                    self.shared[r.name] = min(self.shared[r.name], others)

        self._fault("delete", name, make)

    def renew_reservation(self, name, minutes) -> None:
        self.calls.append(("renew", name))
        now = int(time.time())
        self.held_reservations = [
            replace(r, end_time=now + 60 * minutes) if r.name == name else r for r in self.held_reservations
        ]

    def _set(self, jid: str, **fields) -> None:
        self.queue = [replace(j, **fields) if j.id == jid else j for j in self.queue]


def _indices(detail: str) -> list[int]:
    """``gpu:2(IDX:0-1,4)`` -> ``[0, 1, 4]`` (the shapes this fake writes)."""
    inside = detail.split("IDX:", 1)[1].rstrip(")")
    out: list[int] = []
    for part in inside.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out
