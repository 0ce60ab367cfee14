"""Commit the current slot of a plan to Slurm: what starts now is placed and released, the rest stays held.

:func:`changes` compares the plan's slot 0 with what the snapshot read and lists
the changes that make them agree, :func:`apply` makes them (or, for ``--dry-run``,
nothing), and :func:`decisions` says per job and per app what the plan decided
and why, one JSON-able dict each. Only the allocator's own pending jobs and its
own reservations are ever touched.

**Read and check first.** :func:`apply` reads Slurm again (``sinfo``, ``squeue``,
``scontrol show reservation``) and checks every change against that read before
it makes the first one: a read that fails makes no change at all
(:class:`CommitReadError`), and a change whose ground moved since the snapshot
(its job left the queue or started, its node went down or its gres became
unreadable, a foreign job took its GPUs, the app's reservations there changed) is
dropped and reported, while the others go ahead. A node whose state cannot be read
is left alone, as the snapshot leaves it.

**The order** never lets Slurm start something unplanned, and never takes an app
below its plan:

1. hold every owned pending job that the plan does not start now, and every owned
   pending job the snapshot set outside the plan (never left released for Slurm) but
   those no cycle can ever plan (GPUs per task, no time limit, more GPUs than the nodes
   hold): those are released to Slurm last (``leave``), never held for ever;
2. the reservations of apps no longer configured that no job runs in are deleted; the
   apps are told their capacity, and where a shrink deletes a reservation their replicas
   run in, the commit waits (bounded) for the replicas to leave (:func:`drain`); then the
   nodes where apps shrink (their GPUs go to the jobs that start now), then those where
   they grow or are renewed (:func:`arrange`, one transition for one app and several);
3. for each job that starts now: restrict it to its planned nodes (``NodeList``)
   and release it; a job that has not started after the confirmation time is held
   again, judged on a read of ``squeue`` made after that time;
4. the jobs no cycle can ever plan are released to Slurm (``leave``), after that wait.

**Reservations.** Slurm 22.05 cannot reserve GPUs (a reservation's TRES holds
cores, nodes, licenses and burst buffers), so an app's capacity on a node is
core reservations of ``cpus_per_gpu`` cores for each of its GPUs there: when every
job on the partition takes that many cores per GPU (``DefCpuPerGPU``), those cores
keep exactly that many GPUs free for the app. Slurm refuses to change a core
reservation's size or nodes in place ("Core-based reservation can not be
updated"), so an app's capacity on a node may be several reservations,
``gpualloc-<app>.<node>``, ``gpualloc-<app>.<node>~2``, ...: it grows by a new one
beside the old, and shrinks by deleting whole ones (on a full node after one of the
plan's size is made over its own cores, ``Flags=OVERLAP``), so that it never drops
below the plan in between; where it cannot shrink, it keeps more and the jobs planned
on that node wait (:attr:`Commit.above_plan`). A reservation's end is
moved in place when less than a slot is left.

**Changes that cannot be repeated** (release, create and delete a reservation) are
tried once; when Slurm's answer is lost (a timeout, the controller unreachable),
Slurm is read back: a change that was made counts as made, one that was not is
tried again, and one whose read-back fails too is reported as unknown, never
retried blindly.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agents.live.allocator import Decision
from agents.slurm.errors import CommandError, SlurmError, UnreadableError
from agents.slurm.jsonread import SlurmJob, SlurmReservation, parse_gres
from agents.slurm.snapshot import (
    ACTIVE_STATES,
    Note,
    Snapshot,
    app_pieces,
    departed_app,
    gpus_on,
    piece_gpus,
    piece_of,
    replicas_of,
    split_of,
    usable_nodes,
)

CONFIRM_SECONDS = 20.0  # default of slurm.confirm: how long a released job may take to start before it is held again
RETRY_DELAY = 1.0  # seconds before trying a change again whose answer was lost and that read back as not made
SUBSET_MOST = 12  # pieces of one app on one node searched for a subset that keeps exactly the plan


class CommitReadError(SlurmError):
    """Slurm could not be read before the commit's first change: nothing was changed."""


@dataclass(frozen=True)
class Change:
    """One change to Slurm.

    Attributes:
        kind: ``hold``, ``place`` (NodeList and release), ``leave`` (release a job no cycle can ever plan to
            Slurm's own scheduling: GPUs per task, no time limit, more GPUs than the nodes hold), ``confirm`` (a
            job released before this cycle onto the planned nodes that has not started: nothing to change, but it
            is waited for as the released jobs are, and held again if it does not start), ``reserve`` (the
            reservations of every app on one node, changed together: :func:`arrange`) or ``retire`` (a
            reservation of an app no longer configured, deleted once no job runs in it).
        target: Job id, the node (``reserve``) or the reservation (``retire``).
        nodes: The job's planned nodes (``place``, ``confirm``) or the reservations' node (``reserve``, ``retire``).
        gpus: GPUs of the job (``place``, ``confirm``) on each node, or what the apps want there in all
            (``reserve``), as (node, count) pairs.
        users: Users allowed into the reservations (``reserve``): every app's involved.
        pieces: The apps' reservations on the node as the snapshot read them, (name, GPUs) each (``reserve``).
        renew: Those of ``pieces`` that end within a slot (``reserve``): their end is moved on.
        want: GPUs each app involved wants on the node (``reserve``), in the configuration's order.
        shares: Per reservation on the node, the GPUs of each app in it (``reserve``; ``pieces`` has its total).
    """

    kind: str
    target: str
    nodes: tuple[str, ...] = ()
    gpus: tuple[tuple[str, int], ...] = ()
    users: tuple[str, ...] = ()
    pieces: tuple[tuple[str, int], ...] = ()
    renew: tuple[str, ...] = ()
    want: tuple[tuple[str, int], ...] = ()
    shares: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()

    @property
    def held_now(self) -> int:
        """GPUs the apps' reservations hold on the node now (``reserve``)."""
        return sum(g for _, g in self.pieces)

    @property
    def held_by_app(self) -> dict[str, int]:
        """GPUs each app holds on the node now (``reserve``)."""
        out: dict[str, int] = {}
        for _, split in self.shares:
            for a, g in split:
                out[a] = out.get(a, 0) + g
        return out

    @property
    def wanted(self) -> int:
        """GPUs on the change's first node: the job's there (``place``), or what the apps want (``reserve``)."""
        return self.gpus[0][1] if self.gpus else 0

    def summary(self) -> str:
        """One line: ``hold 7``, ``place 7``, ``reserve gpu01 chat 2->3``, ``reserve gpu01 a 3->2, b 2->2``."""
        if self.kind == "reserve":
            held = self.held_by_app
            moves = ", ".join(f"{a} {held.get(a, 0)}->{g}" for a, g in self.want)
            renew = " (renew)" if self.renew and all(held.get(a, 0) == g for a, g in self.want) else ""
            return f"reserve {self.target} {moves}{renew}"
        return f"{self.kind} {self.target}"


@dataclass
class Commit:
    """What one commit did.

    Attributes:
        planned: Every change the plan asks for.
        done: Changes made.
        failed: Changes not made (or made only in part), with why (one line each).
        skipped: Changes found unneeded on the commit's own read (the job left the queue, was held
            already, started already), with why.
        calls: Every change made in Slurm, in order, one line each (``create gpualloc-chat.gpu01~2 (1 GPU)``).
        confirmed: Changes whose answer was lost and that Slurm, read back, showed as made.
        above_plan: Nodes where an app still holds more than the plan (a shrink that a full node allowed
            neither beside nor over its own cores, or an old reservation Slurm would not delete), with why. The
            jobs the plan starts on such a node are not released this cycle.
        start_wait_ms: Milliseconds spent waiting for the released jobs to run (Slurm's start latency).
        drain_wait_s: Seconds spent waiting for the apps' replicas to leave the reservations a shrink deletes.
        drained: Per node where a shrink waited for replicas, what happened (``drained in 3.2 s``, or why not).
        signal: Problems telling the apps their capacity (the capacity file, the scale command), one line each.
    """

    planned: list[Change]
    done: list[Change] = field(default_factory=list)
    failed: list[tuple[Change, str]] = field(default_factory=list)
    skipped: list[tuple[Change, str]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    confirmed: list[str] = field(default_factory=list)
    above_plan: dict[str, str] = field(default_factory=dict)
    start_wait_ms: float = 0.0
    drain_wait_s: float = 0.0
    drained: dict[str, str] = field(default_factory=dict)
    signal: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- the plan's slot 0


def slot0_gpus(snapshot: Snapshot, decision: Decision) -> dict[str, int]:
    """GPUs held in slot 0 on each node by running jobs and jobs that start now."""
    used = dict.fromkeys(snapshot.nodes, 0)
    for p in decision.plan.placements:
        if p.start == 0:
            for g in p.gpus:
                used[snapshot.node_of(g)] += 1
    return used


def app_layout(snapshot: Snapshot, decision: Decision) -> dict[str, dict[str, int]]:
    """GPUs of each app on each node in slot 0, each app on nodes of its own wherever the plan allows.

    Each app first keeps what it holds where it holds it, on the nodes it has to itself before those it shares;
    then it grows onto the nodes it is on already, then onto nodes no other app holds or was given, then onto
    the rest, each in node order. So Slurm keeps each app's part apart by itself (one app per reservation), and a
    node is shared only where the free GPUs leave no other way.
    """
    free = {n: snapshot.node_size - u for n, u in slot0_gpus(snapshot, decision).items()}
    order = {n: i for i, n in enumerate(snapshot.nodes)}
    present: dict[str, set[str]] = {n: set() for n in snapshot.nodes}  # the apps holding or given GPUs on a node
    for app in snapshot.scenario.apps:
        for n, g in snapshot.app_now.get(app.name, {}).items():
            if g and n in present:
                present[n].add(app.name)
    layout: dict[str, dict[str, int]] = {}
    for app in snapshot.scenario.apps:
        now = snapshot.app_now.get(app.name, {})
        mine: dict[str, int] = {}
        want = decision.app_gpus_now.get(app.name, 0)
        held = sorted(
            (n for n in snapshot.nodes if now.get(n)), key=lambda n: (bool(present[n] - {app.name}), order[n])
        )
        want = _take(held, want, free, mine, now)
        rest = sorted(snapshot.nodes, key=lambda n: (not mine.get(n), bool(present[n] - {app.name}), order[n]))
        want = _take(rest, want, free, mine)
        if want:
            raise SlurmError(f"app {app.name}: the plan's slot 0 leaves {want} GPUs too few (a bug in the plan)")
        layout[app.name] = {n: mine[n] for n in snapshot.nodes if mine.get(n)}
        for n in snapshot.nodes:  # given GPUs on a node, or nothing: the later apps see where it is
            (present[n].add if n in mine else present[n].discard)(app.name)
    return layout


def _take(
    nodes: Sequence[str], want: int, free: dict[str, int], mine: dict[str, int], cap: Mapping[str, int] | None = None
) -> int:
    """Give an app GPUs on ``nodes`` in order, at most ``cap`` on each (default: what is free); what is left."""
    for n in nodes:
        got = min(free[n], want, free[n] if cap is None else cap.get(n, 0))
        if got > 0:
            mine[n] = mine.get(n, 0) + got
            free[n] -= got
            want -= got
    return want


def held_outside(snapshot: Snapshot) -> list[str]:
    """The owned pending jobs the snapshot set outside the plan that a commit holds, in the snapshot's order.

    All but those of a partition outside ``slurm.partitions`` (not on the allocator's nodes; left alone) and
    those no cycle can ever plan (:func:`left_to_slurm`).
    """
    gpu = set(snapshot.config.partitions)
    return [
        jid
        for jid, job in snapshot.owned_outside.items()
        if (not gpu or job.partition in gpu) and jid not in snapshot.left_to_slurm
    ]


def left_to_slurm(snapshot: Snapshot) -> dict[str, str]:
    """The owned pending jobs that no cycle can ever plan, with why: a commit releases them to Slurm, never holds them.

    Those of a partition outside ``slurm.partitions`` are left alone as before (never released).
    """
    gpu = set(snapshot.config.partitions)
    return {
        jid: why
        for jid, why in snapshot.left_to_slurm.items()
        if not gpu or snapshot.owned_outside[jid].partition in gpu
    }


def changes(snapshot: Snapshot, decision: Decision) -> list[Change]:
    """The changes that make Slurm hold what the plan's slot 0 says, in the order they must be made."""
    starting = {p.job: p for p in decision.start_now}
    holds, places, shrinks, others = [], [], [], []
    for jid, job in snapshot.owned.items():
        if jid in starting:
            p = starting[jid]
            nodes = tuple(snapshot.nodes_of(p.gpus))
            local = snapshot.local(p.gpus)
            gpus = tuple((n, len(local[n])) for n in nodes)
            if not job.held and tuple(job.required_nodes) == nodes:
                # Released onto these nodes already (by a commit that died, or by hand) and still pending: waited
                # for like the jobs this commit releases, so that a cycle never leaves a released job pending.
                places.append(Change("confirm", jid, nodes=nodes, gpus=gpus))
                continue
            places.append(Change("place", jid, nodes=nodes, gpus=gpus))
        elif not job.held:
            holds.append(Change("hold", jid))
    for jid in held_outside(snapshot):  # outside the plan (the notes say why): never left released
        if not snapshot.owned_outside[jid].held:
            holds.append(Change("hold", jid))
    leaves = [Change("leave", jid) for jid in left_to_slurm(snapshot) if snapshot.owned_outside[jid].held]
    retires = [Change("retire", name, nodes=(node,)) for name, node in snapshot.departed.items()]
    layout = app_layout(snapshot, decision)
    for node in snapshot.nodes:
        change = node_change(snapshot, node, layout)
        if change is None:
            continue
        held = change.held_by_app
        keep = all(held.get(a, 0) == g for a, g in change.want) and all(g > 0 for _, g in change.pieces)
        if keep and not change.renew:
            continue
        (shrinks if any(g < held.get(a, 0) for a, g in change.want) else others).append(change)
    return [*holds, *retires, *shrinks, *others, *places, *leaves]


def node_pieces(
    snapshot: Snapshot, pieces: Mapping[str, Mapping[str, tuple[SlurmReservation, ...]]], node: str
) -> list[SlurmReservation]:
    """Every reservation of the apps on ``node`` once (a shared one is every app's it names), in the apps' order."""
    out: dict[str, SlurmReservation] = {}
    for app in snapshot.config.apps:
        for r in pieces.get(app.name, {}).get(node, ()):
            out.setdefault(r.name, r)
    return list(out.values())


def node_change(snapshot: Snapshot, node: str, layout: Mapping[str, Mapping[str, int]]) -> Change | None:
    """The ``reserve`` change of a node: every app that holds or wants GPUs there; None where none does."""
    config = snapshot.config
    found = node_pieces(snapshot, snapshot.reservations, node)
    splits = {r.name: split_of(config, r, node) for r in found}
    involved = [
        a for a in config.apps if layout.get(a.name, {}).get(node, 0) or any(sp.get(a.name) for sp in splits.values())
    ]
    if not involved and not found:
        return None
    renew = tuple(r.name for r in found if r.end_time is not None and r.end_time - snapshot.now < config.slot_seconds)
    return Change(
        "reserve",
        node,
        nodes=(node,),
        gpus=((node, sum(layout.get(a.name, {}).get(node, 0) for a in involved)),),
        users=tuple(dict.fromkeys(u for a in involved for u in a.users)),
        pieces=tuple((r.name, piece_gpus(config, r, node)) for r in found),
        renew=renew,
        want=tuple((a.name, layout.get(a.name, {}).get(node, 0)) for a in involved),
        shares=tuple((r.name, tuple(splits[r.name].items())) for r in found),
    )


# ----------------------------------------------------------------------------- reading before the first change


@dataclass
class Fresh:
    """Slurm as the commit reads it before its first change.

    Attributes:
        jobs: Every job, by id.
        free: Free GPUs now on each node of the snapshot that is still usable and readable.
        left_alone: Nodes of the snapshot that the commit leaves alone now, with why.
        pieces: The apps' reservations now, by app and node (as :attr:`Snapshot.reservations`).
        names: Every reservation's name (the free names for new pieces are chosen outside these).
        in_use: GPUs of the jobs running in each reservation, by name (the apps' replicas in theirs).
        replica_gpus: GPUs of the apps' replicas on each node.
    """

    jobs: dict[str, SlurmJob]
    free: dict[str, int]
    left_alone: dict[str, str]
    pieces: dict[str, dict[str, tuple[SlurmReservation, ...]]]
    names: set[str]
    in_use: dict[str, int] = field(default_factory=dict)
    replica_gpus: dict[str, int] = field(default_factory=dict)


def read_fresh(snapshot: Snapshot, client: Any) -> Fresh:
    """Read nodes, jobs and reservations again; per node, what is free and what is left alone now.

    A node is left alone when it is gone from ``sinfo``, no longer usable (down, drained, another
    GPU count, unreadable gres: :func:`agents.slurm.snapshot.usable_nodes`), in a reservation that is
    not the allocator's, or when its used gres cannot be read.

    Raises:
        CommitReadError: One of the reads failed (nothing may be changed then).
    """
    config = snapshot.config
    try:
        nodes = client.nodes()
        jobs = client.jobs()
        reservations = client.reservations()
    except SlurmError as exc:
        raise CommitReadError(f"commit: Slurm could not be read before the first change ({exc})") from None
    notes: list[Note] = []
    usable, _ = usable_nodes(config, nodes, notes)
    why_not = {n.id: n.why for n in notes if n.kind == "node"}
    by_name = {n.name: n for n in nodes}
    all_nodes = [n.name for n in nodes]
    horizon_end = snapshot.now + config.slots * config.slot_seconds
    foreign: dict[str, str] = {}
    for r in reservations:
        if piece_of(config, r.name, all_nodes) is not None:
            continue
        if (r.end_time is not None and r.end_time <= snapshot.now) or (
            r.start_time is not None and r.start_time >= horizon_end
        ):
            continue
        for n in r.nodes:
            foreign.setdefault(n, f"in reservation {r.name}, which the allocator does not manage")
    free: dict[str, int] = {}
    left_alone: dict[str, str] = {}
    for n in snapshot.nodes:
        if n not in by_name:
            left_alone[n] = "no longer in sinfo"
        elif n not in usable:
            left_alone[n] = why_not.get(n, "no longer a usable GPU node")
        elif usable[n] != snapshot.node_size:
            left_alone[n] = f"{usable[n]} GPUs now, not {snapshot.node_size}"
        elif n in foreign:
            left_alone[n] = foreign[n]
        else:
            try:
                used = sum(g.count for g in parse_gres(by_name[n].gres_used, f"node {n}") if g.name == config.gres)
            except UnreadableError as exc:
                left_alone[n] = f"its used gres cannot be read now ({exc})"
                continue
            free[n] = usable[n] - used
    replicas, _ = replicas_of(config, jobs, all_nodes)
    replica_gpus: dict[str, int] = {}
    for job in replicas.values():
        for n in job.nodes:
            replica_gpus[n] = replica_gpus.get(n, 0) + gpus_on(config, job, n)
    return Fresh(
        jobs={j.id: j for j in jobs},
        free=free,
        left_alone=left_alone,
        pieces=app_pieces(config, reservations, snapshot.nodes, snapshot.now),
        names={r.name for r in reservations},
        in_use=jobs_in(config, jobs),
        replica_gpus=replica_gpus,
    )


def jobs_in(config: Any, jobs: Sequence[SlurmJob]) -> dict[str, int]:
    """GPUs of the running jobs in each reservation, by its name (a job that holds none counts 1: it is in use).

    A job submitted with a list (``--reservation=a,b``) counts in each: Slurm 22.05 shows the list while it runs,
    not the one it runs in, and refuses to delete any reservation of the list while it runs.
    """
    out: dict[str, int] = {}
    for job in jobs:
        if job.state in ACTIVE_STATES and job.reservation:
            gpus = max(1, sum(gpus_on(config, job, n) for n in job.nodes))
            for name in dict.fromkeys(n for n in job.reservation.split(",") if n):
                out[name] = out.get(name, 0) + gpus
    return out


def check(snapshot: Snapshot, planned: Sequence[Change], fresh: Fresh, result: Commit) -> list[Change]:
    """The changes still to make on what ``fresh`` read; each dropped one goes to ``result`` with why.

    A node where more GPUs are in use than the snapshot's running jobs held (a job started there
    since: another user's, an owned one Slurm started; the apps' replicas are the apps' own) has a stale slot 0:
    the jobs planned to start there and the apps planned to grow there wait for the next cycle, which plans
    from it. What the apps give up there, and holds, still go.
    """
    config = snapshot.config
    free = dict(fresh.free)
    held_then = dict.fromkeys(snapshot.nodes, 0)
    for job in snapshot.scenario.jobs:
        for g in job.running_on or ():
            held_then[snapshot.node_of(g)] += 1
    used = {n: snapshot.node_size - f - fresh.replica_gpus.get(n, 0) for n, f in fresh.free.items()}
    taken = {n: u - held_then[n] for n, u in used.items() if u > held_then[n]}
    for change in planned:  # the GPUs that the apps' replicas leave where the plan shrinks the apps
        if change.kind == "reserve" and change.nodes[0] in free:
            node = change.nodes[0]
            over = fresh.replica_gpus.get(node, 0) - change.wanted
            if over > 0:
                free[node] += over
    out: list[Change] = []
    for change in planned:
        if change.kind == "retire":
            busy = fresh.in_use.get(change.target, 0)
            if change.target not in fresh.names:
                result.skipped.append((change, "gone already"))
            elif busy:
                result.skipped.append((change, f"in use ({_gpus(busy)} of jobs run in it): released once they leave"))
            else:
                out.append(change)
            continue
        if change.kind == "reserve":
            node = change.nodes[0]
            if node in fresh.left_alone:
                result.failed.append((change, f"not changed: node {node} is left alone now: {fresh.left_alone[node]}"))
                continue
            if node in taken and change.wanted > change.held_now:
                result.failed.append((change, f"not grown: {_stale(node, taken[node])}"))
                continue
            now = tuple((r.name, piece_gpus(config, r, node)) for r in node_pieces(snapshot, fresh.pieces, node))
            if now != change.pieces:
                result.failed.append(
                    (change, f"not changed: the apps' reservations on {node} changed since the snapshot "
                     f"({_pieces_text(change.pieces)} then, {_pieces_text(now)} now); the next cycle plans from them")
                )  # fmt: skip
                continue
            out.append(change)
            continue
        job = fresh.jobs.get(change.target)
        if job is None or job.state not in ("PENDING", "RUNNING", "CONFIGURING", "SUSPENDED"):
            result.skipped.append((change, "it left the queue since the snapshot"))
            continue
        if change.kind == "leave":  # released to Slurm once; gone, released or started meanwhile: nothing to do
            if job.state != "PENDING" or not job.held:
                result.skipped.append((change, f"{job.state.lower()} and not held already"))
            else:
                out.append(change)
            continue
        if change.kind == "hold":
            if job.held:
                result.skipped.append((change, "held already"))
            elif job.state != "PENDING":
                result.failed.append((change, f"not held: Slurm started it since the snapshot ({job.state})"))
            else:
                out.append(change)
            continue
        if job.state != "PENDING":
            result.skipped.append((change, f"{job.state.lower()} already"))
            continue
        if change.kind == "confirm" and job.held:  # held since the snapshot: it needs its release again
            change = replace(change, kind="place")
        gone = [f"node {n} is left alone now: {fresh.left_alone[n]}" for n in change.nodes if n in fresh.left_alone]
        gone += [_stale(n, taken[n]) for n in change.nodes if n in taken]
        short = [f"{n} has {free.get(n, 0)} free, needs {g}" for n, g in change.gpus if free.get(n, 0) < g]
        if (gone or short) and change.kind == "confirm":  # released, and it cannot start as planned: held again
            out.append(replace(change, kind="hold"))
            continue
        if gone:
            result.failed.append((change, "not released: " + "; ".join(gone)))
            continue
        if short:
            result.failed.append((change, "not released: " + "; ".join(short)))
            continue
        for n, g in change.gpus:
            free[n] -= g
        out.append(change)
    return out


def _stale(node: str, gpus: int) -> str:
    return f"{_gpus(gpus)} of node {node} taken since the snapshot; the next cycle plans from it"


def _pieces_text(pieces: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{name} {g}" for name, g in pieces) or "none"


# ----------------------------------------------------------------------------- making them


def apply(
    snapshot: Snapshot,
    planned: list[Change],
    client: Any,
    *,
    confirm_seconds: float = CONFIRM_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    signal: Callable[[Mapping[str, Any]], list[str]] | None = None,
) -> Commit:
    """Read Slurm again, check every change, then make those that still hold; none that fails stops the others.

    Where a shrink deletes reservations that the apps' replicas run in, the apps are told their capacity first
    (``signal``, given the capacity of :func:`capacity`; it returns its problems, one line each) and the commit
    waits up to ``replicas.drain_seconds`` for those replicas to leave (:func:`drain`); a node whose replicas
    stay is left as it is, above the plan. The apps are told again once the reservations are made.

    A released job that has not started after ``confirm_seconds`` is held again; whether it started
    is judged on a read of ``squeue`` made after that time, and a job whose state cannot be read then
    is reported and left as it is (never held again blindly). The jobs no cycle can ever plan are released
    to Slurm last, after that wait, so that none takes the GPUs of a job this commit placed.

    Raises:
        CommitReadError: Slurm could not be read before the first change: nothing was changed.
    """
    result = Commit(planned)
    if not planned:
        return result
    fresh = read_fresh(snapshot, client)
    todo = check(snapshot, planned, fresh, result)
    tries = max(1, int(getattr(client, "retries", 3)))
    made = _Maker(client, result, tries, sleep)
    names = set(fresh.names)
    released: list[Change] = []
    nodes = [c for c in todo if c.kind == "reserve"]
    leaving = {
        c.target: going(c, fresh.in_use, fresh.free.get(c.target, 0) + fresh.replica_gpus.get(c.target, 0) - c.held_now)
        for c in nodes
    }
    if signal is not None:
        result.signal.extend(signal(capacity(snapshot, nodes, leaving)))
    busy = {node: names for node, names in leaving.items() if any(fresh.in_use.get(n) for n in names)}
    stuck = drain(client, snapshot, busy, result, sleep, clock) if busy else {}

    def until_empty(node: str, name: str) -> bool:  # what the rest of the drain time allows, for one reservation
        left = snapshot.config.replicas.drain_seconds - result.drain_wait_s
        return not drain(client, snapshot, {node: [name]}, result, sleep, clock, max(left, 0.0))

    made.until_empty = until_empty
    for change in [c for c in todo if c.kind != "leave"]:
        try:
            if change.kind == "hold":
                client.hold(change.target)
                result.calls.append(f"hold {change.target}")
            elif change.kind == "retire":
                why = made.delete(change.target)
                if why is not None:
                    result.failed.append((change, f"not released: {why}"))
                    continue
            elif change.kind == "reserve":
                if change.target in stuck:
                    result.above_plan[change.target] = stuck[change.target]
                    result.failed.append((change, f"not shrunk: {stuck[change.target]}"))
                    continue
                why = arrange(snapshot, change, made, names, fresh.in_use)
                if why is not None:
                    result.failed.append((change, why))
                    continue
            elif change.kind == "confirm":
                released.append(change)  # released already: only waited for
            elif change.kind == "place":
                kept = [f"{n}: {result.above_plan[n]}" for n in change.nodes if n in result.above_plan]
                if kept:  # an app holds more there than the plan: the job could not start as planned
                    result.failed.append(
                        (change, "not released: an app keeps more than the plan on " + "; ".join(kept))
                    )
                    continue
                client.set_nodes(change.target, change.nodes)
                why = made.release(change.target)
                if why is not None:
                    result.failed.append((change, f"not released: {why}"))
                    continue
                released.append(change)
            else:
                raise ValueError(f"unknown change kind {change.kind!r}")
        except CommandError as exc:
            result.failed.append((change, str(exc)))
            continue
        result.done.append(change)
    if signal is not None and nodes:  # what the reservations are now, for the replicas to come back into
        try:
            after = read_fresh(snapshot, client)
        except CommitReadError as exc:
            result.signal.append(f"capacity not told again: {exc}")
        else:
            result.signal.extend(signal(capacity(snapshot, nodes, {}, after.pieces)))
    if released and confirm_seconds > 0:
        waited = time.perf_counter()
        _confirm(client, released, result, confirm_seconds, sleep, clock)
        result.start_wait_ms = (time.perf_counter() - waited) * 1000.0
    for change in [c for c in todo if c.kind == "leave"]:  # never plannable: released to Slurm once confirmed
        why = made.release(change.target)
        if why is not None:
            result.failed.append((change, f"not released: {why}"))
        else:
            result.done.append(change)
    return result


def going(change: Change, in_use: Mapping[str, int], room: int) -> list[str]:
    """The reservations that :func:`arrange` will delete on the change's node: the apps' replicas must leave them.

    Those with no replica in them now are listed too, so that none is started there meanwhile.

    Predicted as :func:`arrange` chooses: the exact set that keeps most of the reservations in use, else the
    most GPUs below the plan beside which the rest is made (which needs ``room`` free GPUs on the node), else
    one reservation of the plan over the apps' own cores, which deletes every old one.
    """
    want = dict(change.want)
    split = {name: dict(parts) for name, parts in change.shares}
    busy = {n for n in split if in_use.get(n)}
    keep = _subset_split(split, want, busy)
    if keep is None:
        base = _below_split(split, want, busy)
        have = _sums(split, base)
        rest = sum(max(g - have.get(a, 0), 0) for a, g in want.items())
        keep = base if rest <= room else []
    return [n for n in split if n not in keep]


def drain(
    client: Any,
    snapshot: Snapshot,
    leaving: Mapping[str, Sequence[str]],
    result: Commit,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    seconds: float | None = None,
) -> dict[str, str]:
    """Wait up to ``seconds`` (``replicas.drain_seconds``) for every job to leave the reservations in ``leaving``.

    The loop never cancels a replica: the apps were told their capacity and stop their own. A read that fails
    while waiting is counted and waited through.

    Returns:
        The nodes whose reservations still hold jobs when the time is up, with why (one line each).
    """
    seconds = snapshot.config.replicas.drain_seconds if seconds is None else seconds
    start = clock()
    waiting = {n: set(names) for n, names in leaving.items() if names}
    failed_reads = 0
    while True:
        try:
            in_use = jobs_in(snapshot.config, client.jobs())
        except SlurmError:
            failed_reads += 1
            in_use = None
        if in_use is not None:
            for node in list(waiting):
                if not any(in_use.get(name) for name in waiting[node]):
                    result.drained[node] = f"drained in {clock() - start:.1f} s"
                    del waiting[node]
        if not waiting or clock() - start >= seconds:
            break
        sleep(min(1.0, max(seconds - (clock() - start), 0.0)))
    result.drain_wait_s += clock() - start
    unread = f" ({failed_reads} reads of squeue failed meanwhile)" if failed_reads else ""
    stuck: dict[str, str] = {}
    for node, names in waiting.items():
        busy = [f"{name} ({_gpus(in_use.get(name, 0))})" for name in sorted(names) if in_use and in_use.get(name)]
        stuck[node] = (
            f"the replicas did not leave {', '.join(busy) or ', '.join(sorted(names))} within {seconds:g} s{unread}; "
            "the apps keep more than the plan there and the jobs planned on its GPUs wait; the next cycle tries again"
        )
        result.drained[node] = f"not drained: {stuck[node]}"
    return stuck


def capacity(
    snapshot: Snapshot,
    nodes: Sequence[Change],
    leaving: Mapping[str, Sequence[str]],
    pieces: Mapping[str, Mapping[str, Sequence[SlurmReservation]]] | None = None,
) -> dict[str, Any]:
    """What each app may run where: per app and node, its GPUs, its reservations, and those its replicas leave.

    The plan's GPUs where a ``reserve`` change touches the node, else what the app holds; the reservations as
    ``pieces`` reads them (default the snapshot's). An app removed from the configuration whose reservations
    remain is listed with no node: its replicas stop. This is what the capacity file holds and the scale command
    reads (docs/slurm.md).
    """
    pieces = snapshot.reservations if pieces is None else pieces
    wanted = {c.target: dict(c.want) for c in nodes}
    apps: dict[str, Any] = {}
    for app in snapshot.config.apps:
        mine: dict[str, Any] = {}
        for node in snapshot.nodes:
            g = wanted[node].get(app.name, 0) if node in wanted else snapshot.app_now.get(app.name, {}).get(node, 0)
            names = [r.name for r in pieces.get(app.name, {}).get(node, ())]
            leave = [n for n in leaving.get(node, ()) if n in names]
            if g or names:
                mine[node] = {"gpus": g, "reservations": [n for n in names if n not in leave], "leave": leave}
        apps[app.name] = mine
    for name, node in snapshot.departed.items():
        apps.setdefault(departed_app(snapshot.config, name, node) or name, {})
    return {"time": _iso(time.time()), "apps": apps}


class _Maker:
    """Makes the changes that cannot be repeated blindly, each read back after a lost answer."""

    def __init__(self, client: Any, result: Commit, tries: int, sleep: Callable[[float], None]) -> None:
        self.client = client
        self.result = result
        self.tries = tries
        self.sleep = sleep
        self.until_empty: Callable[[str, str], bool] | None = None  # (node, reservation): drained in time

    def _made(self, what: str, make: Callable[[], None], happened: Callable[[], bool]) -> str | None:
        """Make one change: None when it is made, else why not (one line)."""
        delay = RETRY_DELAY
        for attempt in range(1, self.tries + 1):
            try:
                make()
            except CommandError as exc:
                error = exc
            else:
                self.result.calls.append(what)
                return None
            try:
                there = happened()
            except SlurmError as exc:
                return (
                    f"{error}; reading Slurm back failed too ({exc}): unknown whether it was made; "
                    "the next cycle reads it"
                )
            if there:
                self.result.calls.append(what)
                self.result.confirmed.append(f"{what}: {error}; read back: made")
                return None
            if not error.unreachable or attempt == self.tries:
                return str(error)
            self.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # the loop returns on its last try

    def release(self, job: str) -> str | None:
        """``scontrol release``; made when the job, read back, is no longer held."""

        def happened() -> bool:
            found = {j.id: j for j in self.client.jobs()}.get(job)
            return found is None or not found.held

        return self._made(f"release {job}", lambda: self.client.release(job), happened)

    def create(
        self, snapshot: Snapshot, name: str, node: str, gpus: int, users: Sequence[str], *, overlap: bool = False
    ) -> str | None:
        """A reservation of ``gpus`` GPUs' cores on ``node`` from now for the horizon; made when it reads back.

        With ``overlap`` it may take cores of the reservations there (Slurm's ``Flags=OVERLAP``).
        """
        config = snapshot.config
        minutes = math.ceil(config.reservation_minutes or config.slots * config.slot_minutes)

        def make() -> None:
            self.client.create_reservation(
                name,
                {node: gpus * config.cpus_per_gpu},
                minutes,
                [u for u in users if u],
                config.partitions[0] if config.partitions else None,
                **({"overlap": True} if overlap else {}),
            )

        def happened() -> bool:
            return any(r.name == name and node in r.nodes for r in self.client.reservations())

        over = " over its own" if overlap else ""
        return self._made(f"create {name} ({_gpus(gpus)} on {node}{over})", make, happened)

    def delete(self, name: str) -> str | None:
        """``scontrol delete ReservationName``; made when it no longer reads back."""

        def happened() -> bool:
            return all(r.name != name for r in self.client.reservations())

        return self._made(f"delete {name}", lambda: self.client.delete_reservation(name), happened)

    def renew(self, snapshot: Snapshot, name: str) -> str | None:
        """Move a reservation's end to the horizon's, in place (repeatable: the client retries it)."""
        config = snapshot.config
        minutes = math.ceil(config.reservation_minutes or config.slots * config.slot_minutes)
        try:
            self.client.renew_reservation(name, minutes)
        except CommandError as exc:
            return str(exc)
        self.result.calls.append(f"renew {name}")
        return None


def arrange(
    snapshot: Snapshot, change: Change, made: _Maker, names: set[str], in_use: Mapping[str, int] | None = None
) -> str | None:
    """Bring the apps' reservations on one node from ``change.shares`` to ``change.want``; None when done.

    One transition for one app and for several. Slurm cannot resize a core reservation, so, in this order of
    preference:

    1. some of the reservations there hold exactly what each app wants: the others are deleted;
    2. the most GPUs that some of them hold without giving any app more than it wants are kept, and each app's
       rest is made beside them (its own reservation, on free cores), then the others go;
    3. where the node has no room for 2 (a full node: an app shrinks, alone or beside another, two apps swap
       GPUs), one reservation of the plan's total is made over the apps' own cores (``Flags=OVERLAP``: it takes
       the lowest cores no running job holds, on a full node exactly the apps' own), named by what each app
       holds in it (``gpualloc-chat:2+search:3.<node>``; an app's own name when only one app wants GPUs there);
       then every other reservation there goes.

    Steps 1 and 2 keep the reservations the apps' replicas run in (``in_use``, GPUs by name) before the others.
    Every new reservation is made before an old one goes, so no app drops below the smaller of what it held and
    what the plan wants, and no core is free in between that the plan keeps for an app. A reservation that
    Slurm will not delete (in use) leaves an app above its plan (``result.above_plan``). Reservations kept that
    end within a slot are renewed in place. ``names`` (every reservation's name) gets the names made.
    """
    config = snapshot.config
    node = change.nodes[0]
    want = dict(change.want)
    split = {name: dict(parts) for name, parts in change.shares}
    users = {a.name: a.users for a in config.apps}

    def new_name(app: str | None, parts: Sequence[tuple[str, int]]) -> str:
        k = 1
        while True:
            name = config.piece_name(app, node, k) if app is not None else config.shared_name(parts, node, k)
            if name not in names:
                names.add(name)
                return name
            k += 1

    def create(app: str | None, gpus: int, parts: Sequence[tuple[str, int]], who: Sequence[str], overlap: bool):
        name = new_name(app, parts)
        why = made.create(snapshot, name, node, gpus, who, overlap=overlap)
        if why is not None:
            names.discard(name)
            return None, why
        return name, None

    busy = {n for n in split if (in_use or {}).get(n)}
    keep = _subset_split(split, want, busy)
    extra: list[str] = []  # made by step 2 before it found no room: extra capacity that step 3 lets go
    if keep is None:
        base = _below_split(split, want, busy)
        have = _sums(split, base)
        why: str | None = None
        for app, g in want.items():
            rest = g - have.get(app, 0)
            if rest <= 0:
                continue
            name, why = create(app, rest, [(app, rest)], users[app], overlap=False)
            if name is None:
                break
            extra.append(name)
            split[name] = {app: rest}
        else:
            keep = [*base, *extra]
        if keep is None:
            if not _no_room(why):
                return f"not made: {why}"
            parts = [(a, g) for a, g in want.items() if g > 0]
            who = tuple(dict.fromkeys(u for a, _ in parts for u in users[a]))
            only = parts[0][0] if len(parts) == 1 else None
            name, over = create(only, sum(g for _, g in parts), parts, who, overlap=True)
            if name is None:
                held = _sums(split, list(split))
                text = ", ".join(f"{a} {held.get(a, 0)}" for a in want)
                made.result.above_plan[node] = (
                    f"the apps keep {text} where the plan wants "
                    f"{', '.join(f'{a} {g}' for a, g in want.items())}: no room beside ({why}), and none over their "
                    f"own cores ({over}); the next cycle tries again"
                )
                return f"not changed: {made.result.above_plan[node]}"
            split[name] = dict(parts)
            keep = [name]
    problems: list[str] = []
    for old in [n for n in split if n not in keep]:
        gone = made.delete(old)
        if gone is not None and IN_USE in gone.lower() and made.until_empty is not None:
            if made.until_empty(node, old):  # a replica came in after the commit's read: drained, then deleted
                gone = made.delete(old)
        if gone is not None:
            problems.append(f"delete {old}: {gone}")
            keep.append(old)
    held = _sums(split, keep)
    over = [f"{a} holds {held.get(a, 0)}, the plan {g}" for a, g in want.items() if held.get(a, 0) > g]
    if problems and over:
        made.result.above_plan[node] = "; ".join(over) + ": " + "; ".join(problems)
    return _renew_kept(snapshot, change, made, keep, problems)


def _renew_kept(
    snapshot: Snapshot, change: Change, made: _Maker, keep: Sequence[str], problems: list[str]
) -> str | None:
    """Renew the change's reservations that are kept; the node's problems, these included, in one line (None: none)."""
    for name in change.renew:
        if name in keep:
            why = made.renew(snapshot, name)
            if why is not None:
                problems.append(f"renew {name}: {why}")
    return "; ".join(problems) or None


def _sums(split: Mapping[str, Mapping[str, int]], names: Sequence[str]) -> dict[str, int]:
    """GPUs per app in the reservations ``names``."""
    out: dict[str, int] = {}
    for n in names:
        for a, g in split[n].items():
            out[a] = out.get(a, 0) + g
    return out


def _subset_split(
    split: Mapping[str, Mapping[str, int]], want: Mapping[str, int], busy: set[str] = frozenset()
) -> list[str] | None:
    """Reservations that hold exactly what each app wants, the most of ``busy`` first, then the fewest; else None."""
    names = [n for n, parts in split.items() if sum(parts.values()) > 0][:SUBSET_MOST]
    target = {a: g for a, g in want.items() if g}
    best: tuple[int, int, tuple[str, ...]] | None = None
    for size in range(len(names) + 1):
        for combo in itertools.combinations(names, size):
            if {a: g for a, g in _sums(split, combo).items() if g} == target:
                key = (len(busy.intersection(combo)), -size, combo)
                if best is None or key[:2] > best[:2]:
                    best = key
    return None if best is None else list(best[2])


def _below_split(
    split: Mapping[str, Mapping[str, int]], want: Mapping[str, int], busy: set[str] = frozenset()
) -> list[str]:
    """The reservations to keep that give no app more than it wants: the most GPUs, of ``busy``, then the fewest."""
    names = [n for n, parts in split.items() if sum(parts.values()) > 0][:SUBSET_MOST]
    best: tuple[int, int, int, tuple[str, ...]] = (0, 0, 0, ())
    for size in range(1, len(names) + 1):
        for combo in itertools.combinations(names, size):
            sums = _sums(split, combo)
            key = (sum(sums.values()), len(busy.intersection(combo)), -size)
            if all(g <= want.get(a, 0) for a, g in sums.items()) and key > best[:3]:
                best = (*key, combo)
    return list(best[3])


IN_USE = "reservation is in use"  # Slurm's answer to deleting a reservation a job runs in
NO_ROOM = "nodes are busy"  # Slurm's answer to a reservation whose cores are taken ("Requested nodes are busy")


def _no_room(why: str | None) -> bool:
    """Whether Slurm refused a reservation for want of free cores (the one refusal another layout may avoid)."""
    return why is not None and NO_ROOM in why.lower()


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _confirm(
    client: Any,
    released: list[Change],
    result: Commit,
    seconds: float,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> None:
    """Wait until the released jobs run; hold again those that a read after ``seconds`` shows still pending.

    The wait reads only the released jobs' states (:meth:`SlurmClient.pending_jobs`). Reads that fail during the
    wait are counted; the verdict on the jobs still pending comes from one read of the whole queue after the
    wait (retried as every read is). When that read fails too, the jobs still waiting are reported
    as unknown and left as they are: holding a job that may be running would only hide it.
    """
    waiting = {c.target: c for c in released}
    deadline = clock() + seconds
    failed_reads = 0
    while waiting and clock() < deadline:
        sleep(min(0.25, max(deadline - clock(), 0.0)))
        try:
            still = client.pending_jobs(list(waiting))  # a read of these jobs only, not of the whole queue
        except SlurmError:
            failed_reads += 1
            continue
        for jid in [j for j in waiting if j not in still]:
            del waiting[jid]
    if not waiting:
        return
    try:
        jobs = {j.id: j for j in client.jobs()}
    except SlurmError as exc:
        for change in waiting.values():
            result.failed.append(
                (change, f"released; whether it started is unknown: squeue could not be read after {seconds:g} s "
                 f"({exc}); left as it is, the next cycle reads it")
            )  # fmt: skip
        return
    _started(waiting, jobs)
    unread = f" ({failed_reads} reads of squeue failed meanwhile)" if failed_reads else ""
    for jid, change in waiting.items():
        try:
            client.hold(jid)
            result.calls.append(f"hold {jid}")
            why = f"released but not started within {seconds:g} s{unread}; held again"
        except CommandError as exc:
            why = f"released but not started within {seconds:g} s{unread}, and holding it again failed: {exc}"
        result.failed.append((change, why))


def _started(waiting: dict[str, Change], jobs: Mapping[str, SlurmJob]) -> None:
    """Drop from ``waiting`` the jobs that no longer pend (started, or gone)."""
    for jid in list(waiting):
        job = jobs.get(jid)
        if job is None or job.state != "PENDING":
            del waiting[jid]


# ----------------------------------------------------------------------------- what to print


def decisions(snapshot: Snapshot, decision: Decision, commit: Commit | None) -> list[dict[str, Any]]:
    """One dict per owned job, app, relaxation and note: the plan's decision, planned start, and why others wait."""
    scenario = snapshot.scenario
    slot = snapshot.config.slot_seconds
    failed = {c.target: why for c, why in (commit.failed if commit else [])}
    skipped = {c.target: why for c, why in (commit.skipped if commit else [])}
    placements = {p.job: p for p in decision.plan.placements}
    free_now = {n: snapshot.node_size - u for n, u in slot0_gpus(snapshot, decision).items()}
    lines: list[dict[str, Any]] = []
    for jid in snapshot.owned:
        job = scenario.jobs[scenario.job_index(jid)]
        p = placements.get(jid)
        line: dict[str, Any] = {"job": jid, "type": job.type.value, "gpus": job.gpus, "priority": job.priority}
        if p is None:
            line.update(action="wait", start=None, why=f"not placed within the {scenario.slots}-slot horizon")
        else:
            local = snapshot.local(p.gpus)
            line.update(
                nodes=list(local),
                gpu_index=local,
                start=p.start,
                start_time=_iso(snapshot.now + p.start * slot),
            )
            if p.start == 0:
                line["action"] = "start"
                line["why"] = "the plan starts it now"
            else:
                line["action"] = "wait"
                line["why"] = _why_wait(job, p.start)
        if jid in decision.why:  # the live planner's reason to depart from its base plan
            line["why"] = decision.why[jid]
        if jid in failed:
            line["failed"] = failed[jid]
        elif jid in skipped:
            line["skipped"] = skipped[jid]
        lines.append(line)
    layout = app_layout(snapshot, decision)
    for app in scenario.apps:
        for n, g in layout.get(app.name, {}).items():
            free_now[n] -= g
    for line in lines:
        if line.get("action") == "wait" and line.get("start"):
            k = line["gpus"]
            room = any(f >= k for f in free_now.values()) if k <= snapshot.node_size else False
            line["why"] += "; room now, kept for more valuable work" if room else f"; no block of {k} free GPUs now"
    for app in scenario.apps:
        where = set(layout.get(app.name, {})) | set(snapshot.app_now.get(app.name, {}))
        line = {
            "app": app.name,
            "reservation": snapshot.config.reservation_name(app.name, "<node>"),
            "gpus": decision.app_gpus_now.get(app.name, 0),
            "demand": app.demand[0],
            "nodes": layout.get(app.name, {}),
            "held_now": snapshot.app_now.get(app.name, {}),
        }
        if app.name in decision.why:
            line["why"] = decision.why[app.name]
        problems = {n: failed[n] for n in snapshot.nodes if n in where and n in failed}
        replicas = snapshot.app_replicas(app.name)
        if replicas:
            line["replicas"] = replicas
        if problems:
            line["failed"] = problems
        lines.append(line)
    lines.extend(n.to_dict() for n in snapshot.relaxed)
    outside = held_outside(snapshot)
    never = left_to_slurm(snapshot)
    for note in snapshot.notes:
        if note.kind == "job" and (note.id in outside or note.id in never):
            if note.id in outside:  # held till it can be planned
                line = {"job": note.id, "action": "hold", "why": f"outside the plan: {note.why}"}
            else:  # no cycle can ever plan it: released to Slurm (a job nobody could start is never held)
                line = {"job": note.id, "action": "leave", "why": f"left to Slurm, never planned: {note.why}"}
            if note.id in failed:
                line["failed"] = failed[note.id]
            elif note.id in skipped:
                line["skipped"] = skipped[note.id]
            lines.append(line)
        else:
            lines.append(note.to_dict())
    return lines


def _why_wait(job: Any, start: int) -> str:
    if job.release and start == job.release:
        return f"planned at slot {start}, its --begin"
    return f"planned at slot {start}"


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
