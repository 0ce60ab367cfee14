"""A fake Slurm for the driver's unit tests: the test sets its jobs and reservations; it records the changes.

:class:`FakeSlurm` answers like :class:`~agents.slurm.client.SlurmClient`
(``jobs``, ``nodes``, ``reservations``, ``hold``, ``release``, ...) from plain
lists the test edits between calls, so a test can end a job, submit one, or make
``squeue`` fail, and see what the cycle or the loop does with it.
"""

from __future__ import annotations

import time
from dataclasses import replace

from agents.slurm.errors import CommandError
from agents.slurm.jsonread import SlurmJob, SlurmNode, SlurmReservation

NOW = float(int(time.time()))  # the tests' "now": cycles read the wall clock, so the fake's times are near it


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


class FakeSlurm:
    """Slurm's answers from lists the test edits; every change is recorded in :attr:`calls`.

    Attributes:
        node_names: The nodes, each with ``size`` GPUs and 32 cores.
        queue: What ``squeue`` lists.
        held_reservations: What ``scontrol show reservation`` lists.
        calls: Every change made, as tuples.
        polls: How many times ``squeue`` was read.
        squeue_error: When set, ``squeue`` fails with this message.
        start_released: A released job starts at once on its planned nodes (as Slurm would).
    """

    def __init__(self, nodes: tuple[str, ...] = ("n1",), size: int = 8) -> None:
        self.node_names = nodes
        self.size = size
        self.queue: list[SlurmJob] = []
        self.held_reservations: list[SlurmReservation] = []
        self.calls: list[tuple] = []
        self.polls = 0
        self.squeue_error: str | None = None
        self.start_released = True
        self._node_list: dict[str, tuple[str, ...]] = {}

    # ---------------------------------------------------------------- reading

    def jobs(self) -> list[SlurmJob]:
        self.polls += 1
        if self.squeue_error is not None:
            raise CommandError(f"squeue --all --json: failed 3 times: {self.squeue_error}")
        return list(self.queue)

    def nodes(self) -> list[SlurmNode]:
        out = []
        for name in self.node_names:
            used = sorted(
                i
                for j in self.queue
                if j.state == "RUNNING" and name in j.nodes
                for i in _indices(j.gres_detail[j.nodes.index(name)])
            )
            state = "IDLE" if not used else ("ALLOCATED" if len(used) == self.size else "MIXED")
            idx = ",".join(map(str, used)) if used else "N/A"
            out.append(
                SlurmNode(name, frozenset({state}), ("gpu",), f"gpu:{self.size}", f"gpu:{len(used)}(IDX:{idx})", 32)
            )
        return out

    def reservations(self) -> list[SlurmReservation]:
        return list(self.held_reservations)

    # ---------------------------------------------------------------- changing

    def hold(self, job: str) -> None:
        self.calls.append(("hold", job))
        self._set(job, reason="JobHeldAdmin")

    def release(self, job: str) -> None:
        self.calls.append(("release", job))
        if not self.start_released:
            self._set(job, reason="Resources")
            return
        (node,) = self._node_list[job]
        j = next(j for j in self.queue if j.id == job)
        gpus = int(j.tres_per_node.rsplit(":", 1)[1])
        used = {i for r in self.queue if r.state == "RUNNING" and node in r.nodes for i in _indices(r.gres_detail[0])}
        free = [i for i in range(self.size) if i not in used][:gpus]
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

    def create_reservation(self, name, cores, minutes, users, partition) -> None:
        self.calls.append(("create", name, tuple(cores.items())))
        ((node, count),) = cores.items()
        now = int(time.time())
        self.held_reservations.append(
            SlurmReservation(name, (node,), {node: count}, count, now, now + 60 * minutes, ())
        )

    def delete_reservation(self, name) -> None:
        self.calls.append(("delete", name))
        self.held_reservations = [r for r in self.held_reservations if r.name != name]

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
