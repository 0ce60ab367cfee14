"""The cluster now as a scenario whose slot 0 is now (``gpualloc slurm snapshot``).

:func:`take` reads the nodes, the jobs and the reservations from Slurm and
:func:`build` turns them into an ordinary scenario (SPEC section 1), checked by
:mod:`gpu_env.scenario` like any file:

- **GPUs.** Every usable GPU node is a node-aligned range of ``node_size`` GPUs:
  the node at position i holds GPUs ``i*node_size .. (i+1)*node_size - 1``, in
  name order, except that the nodes of a running multi-node job are kept next to
  each other (a block of SPEC rule 4). Inside a node, GPU j is Slurm's ``IDX`` j.
- **Running jobs** are pinned with ``running_on`` (Slurm's indices from
  ``gres_detail``; a node whose running jobs' indices are not contiguous blocks
  is laid out again, its jobs packed from GPU 0, which Slurm cannot tell apart)
  and last for the slots until their end time.
- **Owned pending jobs** become queued jobs: GPUs from ``--gres``/``--gpus``
  (a multi-node job takes whole nodes), duration from the time limit, release
  from ``--begin``, deadline from ``--deadline``, type and priority from the
  configuration's mapping.
- **Real-time apps** come from the configuration; each app's ``initial`` is
  what its reservations hold now: 0 without one, unless the configuration
  gives an ``initial`` (the operator's word for an app served outside Slurm).

Whatever cannot be read is never guessed: a :class:`Note` names the job or node
and why, and it is left out (a node that holds something unreadable is left out
of the plan entirely, so that nothing is ever planned onto its GPUs).

**Replicas.** A job running in one of an app's reservations is that app's
replica: its GPUs are the app's capacity, counted once, as the reservation's, and
never as a running job of the scenario (:attr:`Snapshot.replicas`, and per
reservation :attr:`Snapshot.in_use`). A pending job that asks for an app's
reservation is the app's own business, neither planned nor held. A reservation
named with the allocator's prefix for an app no longer configured is
:attr:`Snapshot.departed`: its node stays out of the plan until the commit
deletes the reservation, once no job runs in it. A reservation named for a
configured app under another prefix, or one with the prefix whose name does not
parse, stops the cycle before anything changes (:class:`ReservationNamesError`).

What is read but breaks a rule in slot 0 never stops a cycle: the scenario is
relaxed to what is there, and a :class:`Relaxed` says how. Apps that hold more
than the running jobs leave (a reservation over running jobs, made by hand or
with ``Flags=IGNORE_JOBS``) are planned as holding what fits: the largest
gives up GPUs first, until the apps' ``initial`` and the running jobs' GPUs fit
the cluster, the state before slot 0 that SPEC section 1 requires of every
scenario; a job running past its time limit holds its GPUs for one more slot.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agents.slurm.clock import DayClock
from agents.slurm.config import NAME_OK, PIECE_MARK, SlurmConfig
from agents.slurm.errors import SlurmError, UnreadableError
from agents.slurm.jsonread import SlurmJob, SlurmNode, SlurmReservation, parse_gres
from gpu_env.scenario import MAX_SLOTS, MAX_WEIGHT, Scenario, scenario_from_dict

USABLE_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED", "ALLOC", "MIX", "COMPLETING"})
BAD_FLAGS = frozenset(
    {
        "DOWN",
        "DRAIN",
        "DRAINING",
        "DRAINED",
        "FAIL",
        "FAILING",
        "MAINT",
        "MAINTENANCE",
        "NOT_RESPONDING",
        "NO_RESPOND",
        "POWERED_DOWN",
        "POWER_DOWN",
        "POWERING_DOWN",
        "POWERING_UP",
        "FUTURE",
        "REBOOT",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "UNKNOWN",
        "INVALID",
        "INVALID_REG",
    }
)
ACTIVE_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"})


class ReservationNamesError(SlurmError):
    """Reservations named like the allocator's that the configuration cannot read (a changed prefix, a bad name)."""


@dataclass(frozen=True)
class Note:
    """Something the allocator left alone: a job, a node or a reservation, and why."""

    kind: str  # "job", "node", "reservation"
    id: str
    why: str

    def to_dict(self) -> dict[str, str]:
        """One JSON line's worth."""
        return {"left_alone": f"{self.kind} {self.id}", "why": self.why}

    def __str__(self) -> str:
        return f"{self.kind} {self.id} left alone: {self.why}"


@dataclass(frozen=True)
class Relaxed:
    """A state that the rules call infeasible in slot 0, planned from as it is: an app or a job, and how."""

    kind: str  # "app", "job"
    id: str
    why: str

    def to_dict(self) -> dict[str, str]:
        """One JSON line's worth."""
        return {"relaxed": f"{self.kind} {self.id}", "why": self.why}

    def __str__(self) -> str:
        return f"{self.kind} {self.id} relaxed: {self.why}"


@dataclass
class Snapshot:
    """The cluster now, as a scenario, with the maps back to Slurm.

    Attributes:
        now: Epoch seconds of slot 0's start.
        config: The configuration it was read with.
        scenario: The scenario (slot 0 = now).
        nodes: Usable nodes in the scenario's order: node i holds GPUs ``i*node_size ..``.
        node_size: GPUs per node.
        owned: Owned pending jobs in the scenario, by job id.
        running: Running jobs pinned in the scenario, by job id.
        owned_outside: Owned pending jobs not in the scenario (notes say why), by job id.
        left_to_slurm: Those of ``owned_outside`` that no cycle can ever plan (GPUs per task, another gres, no
            time limit, more GPUs than the partitions' GPU nodes hold), with why: a commit leaves them to Slurm
            (released, never held), where the others are held until a cycle can plan them.
        reservations: The apps' current reservations on usable nodes, by app name, then node: one or more
            each (``gpualloc-<app>.<node>``, ``...~2``, ...; :func:`app_pieces`).
        app_now: GPUs each app's reservations hold now on each usable node.
        notes: What was left alone and why.
        relaxed: Where slot 0 was relaxed to what is there (an app holding more than the ramp lets fit,
            a job running past its time limit), and by how much.
        jobs: Every job Slurm listed, as read (the loop compares successive reads).
        version: Slurm's (major, minor) when the JSON says.
        replicas: The apps' replicas: running jobs in one of the apps' reservations, by job id (not in the
            scenario: their GPUs are the apps' capacity).
        in_use: GPUs the replicas hold in each of the apps' reservations, by reservation name (only those in use).
        departed: Reservations named for an app no longer configured, by name, with their node (left out of
            the plan; the commit deletes each once no job runs in it).
    """

    now: float
    config: SlurmConfig
    scenario: Scenario
    nodes: tuple[str, ...]
    node_size: int
    owned: dict[str, SlurmJob]
    running: dict[str, SlurmJob]
    owned_outside: dict[str, SlurmJob] = field(default_factory=dict)
    left_to_slurm: dict[str, str] = field(default_factory=dict)
    reservations: dict[str, dict[str, tuple[SlurmReservation, ...]]] = field(default_factory=dict)
    app_now: dict[str, dict[str, int]] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
    relaxed: list[Relaxed] = field(default_factory=list)
    jobs: tuple[SlurmJob, ...] = ()
    version: tuple[int, int] = (0, 0)
    replicas: dict[str, SlurmJob] = field(default_factory=dict)
    in_use: dict[str, int] = field(default_factory=dict)
    departed: dict[str, str] = field(default_factory=dict)

    def app_replicas(self, app: str) -> dict[str, int]:
        """GPUs of ``app``'s replicas on each node (those in a shared reservation filled into the apps' parts)."""
        out: dict[str, int] = {}
        for node, pieces in self.reservations.get(app, {}).items():
            for r in pieces:
                used = self.in_use.get(r.name, 0)
                for a, g in split_of(self.config, r, node).items():
                    mine = min(used, g)
                    used -= mine
                    if a == app and mine:
                        out[node] = out.get(node, 0) + mine
        return out

    def node_of(self, gpu: int) -> str:
        """The node that holds a scenario GPU."""
        return self.nodes[gpu // self.node_size]

    def nodes_of(self, gpus: Sequence[int]) -> list[str]:
        """The nodes of a block, in order."""
        return list(dict.fromkeys(self.node_of(g) for g in gpus))

    def local(self, gpus: Sequence[int]) -> dict[str, list[int]]:
        """A block as node -> GPU indices inside the node."""
        out: dict[str, list[int]] = {}
        for g in gpus:
            out.setdefault(self.node_of(g), []).append(g % self.node_size)
        return out


def take(
    client: Any, config: SlurmConfig, now: float | None = None, slot_start: Mapping[str, int] | None = None
) -> Snapshot:
    """Read Slurm through ``client`` (a :class:`~agents.slurm.client.SlurmClient`) and build the snapshot."""
    nodes = client.nodes()
    jobs = client.jobs()
    reservations = client.reservations()
    return build(config, nodes, jobs, reservations, time.time() if now is None else now, slot_start)


# ----------------------------------------------------------------------------- building


def build(
    config: SlurmConfig,
    nodes: Sequence[SlurmNode],
    jobs: Sequence[SlurmJob],
    reservations: Sequence[SlurmReservation],
    now: float,
    slot_start: Mapping[str, int] | None = None,
) -> Snapshot:
    """The snapshot from what Slurm said (pure: no Slurm call; the unit tests feed it fixtures).

    ``slot_start`` gives, per app, the GPUs it held when the current slot began: a cycle that runs
    again within a slot (the loop's event cycles) plans the app's ramp from there, so that it moves
    at most its ramp a slot however many cycles run. Without it, an app starts from what its
    reservations hold now.
    """
    notes: list[Note] = []
    all_nodes = [n.name for n in nodes]
    check_names(config, reservations, all_nodes)
    replicas, asking = replicas_of(config, jobs, all_nodes)
    every_job, jobs = jobs, [j for j in jobs if j.id not in replicas and j.id not in asking]
    gpu_nodes, node_size = usable_nodes(config, nodes, notes)
    departed = _drop_foreign_reserved(config, nodes, reservations, now, gpu_nodes, notes)
    running_gpus, bad_nodes = _read_running(config, jobs, gpu_nodes, node_size, notes)
    _mark_shared_gpus(running_gpus, bad_nodes)
    _drop_bad_nodes(gpu_nodes, running_gpus, bad_nodes, notes)
    order = _node_order(sorted(gpu_nodes), [tuple(running_gpus[j]) for j in running_gpus if len(running_gpus[j]) > 1])
    position = {n: i for i, n in enumerate(order)}
    by_id = {j.id: j for j in jobs}
    placed = _lay_out(order, position, node_size, running_gpus, notes)
    # the scenario's jobs
    entries, running, relaxed = _running_entries(config, placed, by_id, now)
    gpus_total = len(order) * node_size
    queued, owned, outside, never = _pending_entries(config, nodes, jobs, node_size, gpus_total, now, notes)
    entries.extend(queued)
    # real-time apps: the forecast from the configuration, what each holds now from its reservations
    current = app_pieces(config, reservations, order, now)
    apps, starts, app_now = _app_entries(config, current, now, slot_start)
    relaxed.extend(_relax_apps(config, apps, starts, entries, gpus_total))
    if not order:
        raise UnreadableError("no usable GPU node: " + ("; ".join(str(n) for n in notes[:5]) or "none in sinfo"))
    data = {
        "name": "slurm-now",
        "cluster": {"gpus": gpus_total, "node_size": node_size},
        "horizon": {"slots": config.slots, "slot_minutes": config.slot_minutes, "decay": config.decay},
        "realtime": apps,
        "jobs": entries,
    }
    scenario = scenario_from_dict(data, "<slurm snapshot>")
    return Snapshot(
        now=now,
        config=config,
        scenario=scenario,
        nodes=tuple(order),
        node_size=node_size,
        owned=owned,
        running=running,
        owned_outside=outside,
        left_to_slurm=never,
        reservations=current,
        app_now=app_now,
        notes=notes,
        relaxed=relaxed,
        jobs=tuple(every_job),
        replicas={jid: job for jid, job in replicas.items() if set(job.nodes) <= set(order)},
        in_use=_in_use(config, replicas, order),
        departed=departed,
    )


def replicas_of(
    config: SlurmConfig, jobs: Sequence[SlurmJob], nodes: Sequence[str]
) -> tuple[dict[str, SlurmJob], set[str]]:
    """The apps' replicas (jobs running in one of the apps' reservations) by id, and the pending jobs asking for one.

    A replica is whatever runs in an app's reservation: the app's users put it there, and Slurm keeps it inside
    the reservation's cores. Neither is the allocator's to plan, hold or release.
    """
    running: dict[str, SlurmJob] = {}
    asking: set[str] = set()
    for job in jobs:
        names = [n for n in job.reservation.split(",") if n]
        if not any(piece_of(config, n, nodes) is not None for n in names):
            continue
        if job.state in ACTIVE_STATES:
            running[job.id] = job
        elif job.state == "PENDING":
            asking.add(job.id)
    return running, asking


def _in_use(config: SlurmConfig, replicas: Mapping[str, SlurmJob], nodes: Sequence[str]) -> dict[str, int]:
    """GPUs the replicas hold in each of the apps' reservations on ``nodes`` (a replica read short counts 1).

    A replica submitted with a list of reservations (``--reservation=a,b``; Slurm shows the list, not the one it
    runs in) counts once, in the first of the app's reservations its list names.
    """
    out: dict[str, int] = {}
    for job in replicas.values():
        name = next((n for n in job.reservation.split(",") if piece_of(config, n, nodes) is not None), None)
        if name is not None and any(n in nodes for n in job.nodes):
            out[name] = out.get(name, 0) + max(1, sum(gpus_on(config, job, n) for n in job.nodes))
    return out


def gpus_on(config: SlurmConfig, job: SlurmJob, node: str) -> int:
    """GPUs a running job holds on one node (0 where it cannot be read).

    Its gres detail, else the GPUs per node it asked for: a job just started, whose detail Slurm has not filled in.
    """
    if node not in job.nodes:
        return 0
    detail = job.gres_detail[job.nodes.index(node)] if len(job.gres_detail) == len(job.nodes) else job.tres_per_node
    try:
        return sum(g.count for g in parse_gres(detail, f"job {job.id}") if g.name == config.gres)
    except UnreadableError:
        return 0


def check_names(config: SlurmConfig, reservations: Sequence[SlurmReservation], nodes: Sequence[str]) -> None:
    """Refuse reservations named like the allocator's that this configuration cannot read.

    Raises:
        ReservationNamesError: A reservation is named for a configured app under another prefix (the prefix was
            changed: the old reservations would be read as foreign and their nodes dropped), or one with the
            prefix on a known node has a name that parses as no app's, shared or departed.
    """
    known = set(nodes)
    prefix = config.reservation_prefix
    apps = {a.name for a in config.apps}
    problems: list[str] = []
    for r in reservations:
        node = _node_of_name(r.name, known)
        if node is None:
            continue
        body = _body(r.name, node)
        if r.name.startswith(prefix):
            if piece_of(config, r.name, [node]) is not None or departed_app(config, r.name, node) is not None:
                continue
            problems.append(f"{r.name} has the prefix {prefix!r} but names no app, shared part or piece")
            continue
        for app in apps:
            head = body[: -len(app)] if body.endswith(app) else None
            if head and set(head) <= NAME_OK:
                problems.append(
                    f"{r.name} is named for app {app} under the prefix {head!r}, but reservations.prefix is {prefix!r}"
                )
                break
    if problems:
        raise ReservationNamesError(
            "reservations named like the allocator's that this configuration cannot read: "
            + "; ".join(problems[:5])
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
            + ". Set reservations.prefix back, or release them by hand (scontrol delete ReservationName=...)"
        )


def _stem(name: str) -> str:
    """A reservation's name without its ``~k`` (its k-th piece on a node)."""
    head, mark, k = name.rpartition(PIECE_MARK)
    return head if mark and k.isdigit() else name


def _node_of_name(name: str, nodes: set[str]) -> str | None:
    """The node a name ends with (``<...>.<node>`` or ``<...>.<node>~k``), None when it ends with none of them."""
    _, dot, node = _stem(name).rpartition(".")
    return node if dot and node in nodes else None


def _body(name: str, node: str) -> str:
    """What stands before ``.<node>`` in a name."""
    return _stem(name)[: -len(node) - 1]


def departed_app(config: SlurmConfig, name: str, node: str) -> str | None:
    """The app a reservation with the prefix names when no configured app is it (a removed app), else None."""
    if not name.startswith(config.reservation_prefix):
        return None
    body = _body(name, node)[len(config.reservation_prefix) :]
    parts = [p.partition(":")[0] for p in body.split("+")]
    if not body or not all(p and set(p) <= NAME_OK for p in parts):
        return None
    apps = {a.name for a in config.apps}
    gone = [p for p in parts if p not in apps]
    return gone[0] if gone else None


def _drop_foreign_reserved(
    config: SlurmConfig,
    nodes: Sequence[SlurmNode],
    reservations: Sequence[SlurmReservation],
    now: float,
    gpu_nodes: dict[str, int],
    notes: list[Note],
) -> dict[str, str]:
    """Leave out of ``gpu_nodes`` each node in a reservation the allocator does not manage, within the horizon.

    Args:
        config: The configuration.
        nodes: Every node Slurm listed (a reservation is the allocator's when named for one of them).
        reservations: Every reservation Slurm listed.
        now: Epoch seconds of slot 0's start.
        gpu_nodes: The usable nodes, by name; the reserved ones are removed.
        notes: Where each node left out gets its note.

    Returns:
        The reservations of apps no longer configured (:func:`departed_app`), by name, with their node.
    """
    horizon_end = now + config.slots * config.slot_seconds
    all_nodes = [n.name for n in nodes]
    departed: dict[str, str] = {}
    for r in reservations:
        if piece_of(config, r.name, all_nodes) is not None:
            continue
        if r.end_time is not None and r.end_time <= now:
            continue
        if r.start_time is not None and r.start_time >= horizon_end:
            continue
        node = _node_of_name(r.name, set(all_nodes))
        gone = None if node is None else departed_app(config, r.name, node)
        if gone is not None and node is not None:
            departed[r.name] = node
        for n in r.nodes:
            if n in gpu_nodes:
                del gpu_nodes[n]
                why = (
                    f"holds {r.name} of app {gone}, no longer configured; released once no job runs in it"
                    if gone is not None
                    else f"in reservation {r.name}, which the allocator does not manage"
                )
                notes.append(Note("node", n, why))
    return departed


def _read_running(
    config: SlurmConfig,
    jobs: Sequence[SlurmJob],
    gpu_nodes: Mapping[str, int],
    node_size: int,
    notes: list[Note],
) -> tuple[dict[str, dict[str, tuple[int, ...]]], dict[str, str]]:
    """The GPUs of the running jobs on ``gpu_nodes``, and the nodes that hold a job that cannot be planned.

    Args:
        config: The configuration.
        jobs: Every job Slurm listed.
        gpu_nodes: The usable nodes, by name.
        node_size: GPUs per node.
        notes: Where each job that cannot be read or planned gets its note.

    Returns:
        Job id -> node -> Slurm's GPU indices there, for every running job that can be planned; and node ->
        why it must be left out, for every node that holds one that cannot.
    """
    bad_nodes: dict[str, str] = {}
    running_gpus: dict[str, dict[str, tuple[int, ...]]] = {}
    for job in jobs:
        if job.state not in ACTIVE_STATES or not set(job.nodes) & set(gpu_nodes):
            continue
        try:
            per_node = _running_gpus(config, job, node_size)
        except UnreadableError as exc:
            for n in job.nodes:
                bad_nodes.setdefault(n, f"holds job {job.id}, which cannot be read: {exc}")
            notes.append(Note("job", job.id, str(exc)))
            continue
        if not per_node:
            continue  # a job without GPUs on these nodes
        if job.end_time is None:
            reason = "running without an end time (no time limit)"
            notes.append(Note("job", job.id, reason))
            for n in per_node:
                bad_nodes.setdefault(n, f"holds job {job.id}, {reason}")
            continue
        if len(per_node) > 1 and any(len(ix) != node_size for ix in per_node.values()):
            reason = "runs on part of several nodes; the allocator places multi-node jobs on whole nodes only"
            notes.append(Note("job", job.id, reason))
            for n in per_node:
                bad_nodes.setdefault(n, f"holds job {job.id}, which {reason.split(';')[0][5:]}")
            continue
        running_gpus[job.id] = per_node
    return running_gpus, bad_nodes


def _mark_shared_gpus(running_gpus: Mapping[str, Mapping[str, tuple[int, ...]]], bad_nodes: dict[str, str]) -> None:
    """Mark bad each node where two running jobs hold one GPU (a shared gres, oversubscription).

    Such a node cannot be planned as one job per GPU.

    Args:
        running_gpus: Job id -> node -> Slurm's GPU indices there.
        bad_nodes: Node -> why it must be left out; the shared nodes are added (a reason already there stays).
    """
    owner: dict[tuple[str, int], str] = {}
    for jid, per_node in running_gpus.items():
        for n, indices in per_node.items():
            for i in indices:
                other = owner.setdefault((n, i), jid)
                if other != jid:
                    bad_nodes.setdefault(n, f"jobs {other} and {jid} both hold its GPU {i}")


def _drop_bad_nodes(
    gpu_nodes: dict[str, int],
    running_gpus: dict[str, dict[str, tuple[int, ...]]],
    bad_nodes: dict[str, str],
    notes: list[Note],
) -> None:
    """Leave out the bad nodes, and with each the nodes of every job that spans it (to a fixed point).

    Args:
        gpu_nodes: The usable nodes, by name; the bad ones are removed.
        running_gpus: Job id -> node -> GPU indices; each job on a node left out is removed.
        bad_nodes: Node -> why it is left out; the nodes of the jobs removed are added.
        notes: Where each node left out gets its note.
    """
    changed = True
    while changed:
        changed = False
        for n in list(bad_nodes):
            if n in gpu_nodes:
                del gpu_nodes[n]
                notes.append(Note("node", n, bad_nodes[n]))
                changed = True
        for jid, per_node in list(running_gpus.items()):
            if any(n not in gpu_nodes for n in per_node):
                del running_gpus[jid]
                for n in per_node:
                    if n in gpu_nodes:
                        bad_nodes[n] = f"holds job {jid}, which also runs on a node left out"
                changed = True


def _running_entries(
    config: SlurmConfig, placed: Mapping[str, list[int]], by_id: Mapping[str, SlurmJob], now: float
) -> tuple[list[dict[str, Any]], dict[str, SlurmJob], list[Relaxed]]:
    """The scenario's entries of the running jobs, pinned where they run until their end time.

    Args:
        config: The configuration.
        placed: Job id -> the scenario GPUs it runs on.
        by_id: Every job Slurm listed, by id.
        now: Epoch seconds of slot 0's start.

    Returns:
        The entries, the jobs by id, and a :class:`Relaxed` for each job running past its time limit.
    """
    entries: list[dict[str, Any]] = []
    running: dict[str, SlurmJob] = {}
    relaxed: list[Relaxed] = []
    for jid, gpus in placed.items():
        job = by_id[jid]
        left = job.end_time - now  # type: ignore[operator]
        remaining = max(1, math.ceil(left / config.slot_seconds - 1e-9))
        if left <= 0 and job.state != "COMPLETING":
            relaxed.append(
                Relaxed(
                    "job",
                    jid,
                    f"runs {_span(-left)} past its time limit (end time {_iso(job.end_time)}): planned to hold its "
                    f"{len(gpus)} GPUs for 1 more slot",
                )
            )
        job_type, priority = _workload(config, job, strict=False)
        entries.append(
            {
                "id": jid,
                "type": job_type,
                "gpus": len(gpus),
                "duration": min(remaining, MAX_SLOTS),
                "priority": priority,
                "running_on": gpus,
            }
        )
        running[jid] = job
    return entries, running, relaxed


def _pending_entries(
    config: SlurmConfig,
    nodes: Sequence[SlurmNode],
    jobs: Sequence[SlurmJob],
    node_size: int,
    gpus_total: int,
    now: float,
    notes: list[Note],
) -> tuple[list[dict[str, Any]], dict[str, SlurmJob], dict[str, SlurmJob], dict[str, str]]:
    """The scenario's entries of the owned pending jobs; each one left out gets a note.

    Args:
        config: The configuration.
        nodes: Every node Slurm listed.
        jobs: Every job Slurm listed.
        node_size: GPUs per node.
        gpus_total: GPUs of the usable nodes.
        now: Epoch seconds of slot 0's start.
        notes: Where each owned pending job left out gets its note.

    Returns:
        The entries; the jobs in them, by id; the owned pending jobs left out, by id; and why, for those of
        them that no cycle can ever plan (left to Slurm).
    """
    outside: dict[str, SlurmJob] = {}
    pending = []
    for j in jobs:
        if j.state != "PENDING" or not config.owns(j.partition, j.qos, j.comment):
            continue
        if config.partitions and j.partition not in config.partitions:
            notes.append(Note("job", j.id, f"partition {j.partition!r} is not a GPU partition of slurm.partitions"))
            outside[j.id] = j
            continue
        pending.append(j)
    top = max((j.priority for j in pending), default=0)
    entries: list[dict[str, Any]] = []
    owned: dict[str, SlurmJob] = {}
    never: dict[str, str] = {}
    gpus_ever = _gpus_ever(config, nodes, node_size)
    for job in pending:
        try:
            entry = _queued(config, job, node_size, gpus_total, now, top, gpus_ever)
        except UnreadableError as exc:
            notes.append(Note("job", job.id, str(exc)))
            outside[job.id] = job
            if isinstance(exc, NeverPlannedError):
                never[job.id] = str(exc)
            continue
        if entry is None:
            outside[job.id] = job
            continue
        if isinstance(entry, str):
            notes.append(Note("job", job.id, entry))
            outside[job.id] = job
            continue
        entries.append(entry)
        owned[job.id] = job
    return entries, owned, outside, never


def _app_entries(
    config: SlurmConfig,
    current: Mapping[str, Mapping[str, tuple[SlurmReservation, ...]]],
    now: float,
    slot_start: Mapping[str, int] | None,
) -> tuple[list[dict[str, Any]], list[tuple[int, str]], dict[str, dict[str, int]]]:
    """The scenario's real-time apps (without their ``initial``), and what each holds now.

    Args:
        config: The configuration.
        current: Each app's reservations on the usable nodes, by app name, then node (:func:`app_pieces`).
        now: Epoch seconds of slot 0's start.
        slot_start: Per app, the GPUs it held when the current slot began (as for :func:`build`).

    Returns:
        The apps' entries; per app, the GPUs it holds now and where that number comes from; and the GPUs
        each app's reservations hold now on each node.
    """
    app_now: dict[str, dict[str, int]] = {}
    apps = []
    starts: list[tuple[int, str]] = []  # per app: GPUs it holds now, and where that number comes from
    for app in config.apps:
        mine = current[app.name]
        held = {n: sum(split_of(config, r, n).get(app.name, 0) for r in pieces) for n, pieces in mine.items()}
        app_now[app.name] = held
        if slot_start is not None and app.name in slot_start:
            starts.append((slot_start[app.name], "it held at the start of this slot"))
        elif mine:
            starts.append((sum(held.values()), "its reservations hold"))
        else:  # what Slurm says it holds: nothing, unless the operator configured an initial
            starts.append((app.initial or 0, "it holds no reservation and its configured initial is"))
        apps.append(
            {
                "name": app.name,
                "demand": list(_demand(app, config, now)),
                "ramp": app.ramp,
                "penalty": app.penalty,
            }
        )
    return apps, starts, app_now


def _relax_apps(
    config: SlurmConfig,
    apps: Sequence[dict[str, Any]],
    starts: Sequence[tuple[int, str]],
    entries: Sequence[dict[str, Any]],
    gpus_total: int,
) -> list[Relaxed]:
    """Give each app's entry its ``initial``: what it holds now, lowered where the apps cannot fit beside the jobs.

    Args:
        config: The configuration.
        apps: The apps' entries (:func:`_app_entries`); each gets its ``initial``.
        starts: Per app, the GPUs it holds now and where that number comes from.
        entries: The scenario's jobs (the running ones hold their GPUs).
        gpus_total: GPUs of the usable nodes.

    Returns:
        A :class:`Relaxed` for each app planned as holding less than it holds.
    """
    relaxed: list[Relaxed] = []
    load = _inherited_load(entries, config.slots)
    free = max(gpus_total - int(load[0]), 0)  # the running jobs hold their GPUs now as in slot 0
    initials = _relax_initials([s for s, _ in starts], free)
    for app, (start, source), initial in zip(apps, starts, initials, strict=True):
        app["initial"] = initial
        if initial < start:
            relaxed.append(
                Relaxed(
                    "app",
                    app["name"],
                    f"{source} {start} GPUs, but the running jobs leave {free} of {gpus_total} free and the apps "
                    f"hold {sum(s for s, _ in starts)}: planned as holding {initial} ({start - initial} over)",
                )
            )
    return relaxed


def piece_of(config: SlurmConfig, name: str, nodes: Sequence[str]) -> tuple[str, str, int] | None:
    """(app, node, k) when ``name`` is the ``k``-th reservation of one of the configuration's apps on a node.

    A reservation the apps share (:meth:`SlurmConfig.shared_name`) gives its first app; :func:`split_of` gives all.
    """
    for app in config.apps:
        for node in nodes:
            k = config.piece_of(name, app.name, node)
            if k is not None:
                return app.name, node, k
    for node in nodes:
        shared = config.shared_of(name, node)
        if shared is not None:
            return next(iter(shared[0])), node, shared[1]
    return None


def split_of(config: SlurmConfig, reservation: SlurmReservation, node: str) -> dict[str, int]:
    """GPUs each app holds in one of the allocator's reservations on ``node``.

    An app's own reservation (``gpualloc-<app>.<node>``) is all its own: its cores over ``cpus_per_gpu``. A shared
    one (``gpualloc-chat:2+search:3.<node>``) is divided as its name says; where its cores hold fewer GPUs than
    the name (cores read short), the last apps named get fewer, so that no GPU is counted that Slurm does not keep.
    """
    gpus = piece_gpus(config, reservation, node)
    shared = config.shared_of(reservation.name, node)
    if shared is None:
        owner = piece_of(config, reservation.name, [node])
        return {owner[0]: gpus} if owner is not None else {}
    out: dict[str, int] = {}
    for app, g in shared[0].items():
        out[app] = min(g, gpus)
        gpus -= out[app]
    return out


def app_pieces(
    config: SlurmConfig, reservations: Sequence[SlurmReservation], nodes: Sequence[str], now: float
) -> dict[str, dict[str, tuple[SlurmReservation, ...]]]:
    """Per app and node (of ``nodes``), its reservations there that have not ended, first piece first."""
    found: dict[str, dict[str, list[tuple[int, SlurmReservation]]]] = {a.name: {} for a in config.apps}
    for r in reservations:
        if r.end_time is not None and r.end_time <= now:
            continue
        owner = piece_of(config, r.name, nodes)
        if owner is not None:
            app, node, k = owner
            shared = config.shared_of(r.name, node)
            for a in shared[0] if shared is not None else (app,):  # a shared one is every app's it names
                found[a].setdefault(node, []).append((k, r))
    return {
        app: {n: tuple(r for _, r in sorted(found[app][n], key=lambda kr: kr[0])) for n in nodes if n in found[app]}
        for app in found
    }


def piece_gpus(config: SlurmConfig, reservation: SlurmReservation, node: str) -> int:
    """GPUs one reservation keeps for its app on ``node``: its cores there over ``cpus_per_gpu``."""
    return (reservation.cores.get(node) or reservation.core_count) // config.cpus_per_gpu


def usable_nodes(config: SlurmConfig, nodes: Sequence[SlurmNode], notes: list[Note]) -> tuple[dict[str, int], int]:
    """The nodes a plan may use, with their GPU counts, and the GPUs per node; each other node gets a note."""
    counts: dict[str, int] = {}
    for node in nodes:
        if config.partitions and node.partitions and not set(node.partitions) & set(config.partitions):
            continue
        try:
            entries = [g for g in parse_gres(node.gres, f"node {node.name}") if g.name == config.gres]
        except UnreadableError as exc:
            notes.append(Note("node", node.name, str(exc)))
            continue
        if not entries:
            continue  # not a GPU node
        if config.gpu_type is not None and any(g.type not in (None, config.gpu_type) for g in entries):
            types = ",".join(sorted({g.type or "?" for g in entries}))
            notes.append(Note("node", node.name, f"GPU type {types}, not the configured {config.gpu_type}"))
            continue
        bad = node.states & BAD_FLAGS
        if bad or not node.states & USABLE_STATES:
            notes.append(Note("node", node.name, f"state {'+'.join(sorted(node.states)) or '?'}"))
            continue
        counts[node.name] = sum(g.count for g in entries)
    if not counts:
        return {}, max(config.node_size, 1)
    size = config.node_size or Counter(counts.values()).most_common(1)[0][0]
    for name, count in list(counts.items()):
        if count != size:
            notes.append(Note("node", name, f"{count} GPUs, not the {size} of every node in the plan"))
            del counts[name]
    return counts, size


def _running_gpus(config: SlurmConfig, job: SlurmJob, node_size: int) -> dict[str, tuple[int, ...]]:
    """Node -> Slurm's GPU indices of a running job (empty when it holds no GPU)."""
    out: dict[str, tuple[int, ...]] = {}
    details = list(job.gres_detail)
    if details and len(details) != len(job.nodes):
        raise UnreadableError(f"gres_detail has {len(details)} entries for {len(job.nodes)} nodes")
    for node, detail in zip(job.nodes, details, strict=False):
        entries = [g for g in parse_gres(detail, f"job {job.id}") if g.name == config.gres]
        if not entries:
            continue
        indices: list[int] = []
        for g in entries:
            if g.indices is None:
                raise UnreadableError(f"gres_detail {detail!r} has no GPU indices")
            indices.extend(g.indices)
        if any(i < 0 or i >= node_size for i in indices) or len(set(indices)) != len(indices):
            raise UnreadableError(f"gres_detail {detail!r}: indices outside 0..{node_size - 1}")
        out[node] = tuple(sorted(indices))
    if not details and job.tres_per_node and config.gres in job.tres_per_node:
        raise UnreadableError("holds GPUs but Slurm gives no gres_detail (their indices)")
    return out


def _node_order(names: Sequence[str], groups: Sequence[tuple[str, ...]]) -> list[str]:
    """Name order, with the nodes of each multi-node job next to each other (disjoint: whole nodes)."""
    group_of = {n: g for g in groups for n in g}
    out: list[str] = []
    done: set[str] = set()
    for n in names:
        if n in done:
            continue
        members = sorted(group_of.get(n, (n,)))
        out.extend(members)
        done.update(members)
    return out


def _lay_out(
    order: Sequence[str],
    position: dict[str, int],
    node_size: int,
    running: dict[str, dict[str, tuple[int, ...]]],
    notes: list[Note],
) -> dict[str, list[int]]:
    """Scenario GPUs of every running job: Slurm's indices where they are blocks, else the node packed."""
    placed: dict[str, list[int]] = {}
    for jid, per_node in running.items():
        if len(per_node) > 1:
            nodes = sorted(per_node, key=position.__getitem__)
            placed[jid] = [position[n] * node_size + i for n in nodes for i in range(node_size)]
    for node in order:
        single = [(jid, pn[node]) for jid, pn in running.items() if len(pn) == 1 and node in pn]
        blocks_ok = all(list(ix) == list(range(ix[0], ix[0] + len(ix))) for _, ix in single)
        base = position[node] * node_size
        if blocks_ok:
            for jid, ix in single:
                placed[jid] = [base + i for i in ix]
            continue
        notes.append(
            Note(
                "node",
                node,
                "its jobs' GPU indices are not contiguous blocks; the plan packs them from GPU 0 "
                "(GPUs of one node are interchangeable to Slurm)",
            )
        )
        start = 0
        for jid, ix in sorted(single, key=lambda item: item[1][0]):
            placed[jid] = list(range(base + start, base + start + len(ix)))
            start += len(ix)
    return placed


# ----------------------------------------------------------------------------- pending jobs


class NeverPlannedError(UnreadableError):
    """An owned pending job that no cycle can ever plan, whatever the cluster's state: left to Slurm."""


def _queued(
    config: SlurmConfig,
    job: SlurmJob,
    node_size: int,
    gpus_total: int,
    now: float,
    top: int,
    gpus_ever: int | None = None,
) -> dict[str, Any] | str | None:
    """A scenario entry for an owned pending job, a reason to leave it out of this horizon, or an error.

    ``gpus_ever`` is what the partitions' GPU nodes of the plan's size hold, usable now or not (default
    ``gpus_total``): a job that asks more can never be planned, one that asks more than ``gpus_total`` only
    not now.

    Raises:
        NeverPlannedError: The job's request is one no cycle can plan (GPUs per task, another gres, no time
            limit, more GPUs than the nodes hold): named in the message.
        UnreadableError: Something no rule lets the allocator read now (named in the message).
    """
    if job.tres_other:
        raise NeverPlannedError(f"asks GPUs per task or socket ({job.tres_other}); only --gres and --gpus are read")
    if job.dependency:
        return f"has a dependency ({job.dependency}); the allocator cannot tell when it becomes eligible"
    try:
        gpus = _asked_gpus(config, job, node_size)
    except UnreadableError as exc:
        raise NeverPlannedError(str(exc)) from None
    ever = gpus_total if gpus_ever is None else max(gpus_ever, gpus_total)
    if gpus > ever:
        raise NeverPlannedError(f"asks {gpus} GPUs; the partitions' GPU nodes hold {ever}")
    if gpus > gpus_total:
        raise UnreadableError(f"asks {gpus} GPUs; the usable nodes hold {gpus_total} now")
    if job.time_limit is None:
        raise NeverPlannedError("has no time limit; the allocator plans only jobs with one (sbatch --time)")
    slot = config.slot_seconds
    duration = max(1, math.ceil(job.time_limit * 60.0 / slot - 1e-9))
    release = 0
    if job.eligible_time is not None and job.eligible_time > now:
        release = math.ceil((job.eligible_time - now) / slot - 1e-9)
    if release >= config.slots:
        return f"begins after the {config.slots}-slot horizon"
    entry: dict[str, Any] = {
        "id": job.id,
        "gpus": gpus,
        "duration": min(duration, MAX_SLOTS),
    }
    job_type, priority = _workload(config, job, strict=True, top=top)
    entry["type"] = job_type
    entry["priority"] = priority
    if release:
        entry["release"] = release
    if job.deadline is not None:
        deadline = math.floor((job.deadline - now) / slot + 1e-9)
        if deadline < release + duration:
            return "can no longer meet its --deadline inside the rules (start + time limit)"
        entry["deadline"] = min(deadline, MAX_SLOTS)
    return entry


def _gpus_ever(config: SlurmConfig, nodes: Sequence[SlurmNode], node_size: int) -> int:
    """GPUs of every GPU node of the plan's size in the configured partitions, whatever its state now."""
    total = 0
    for node in nodes:
        if config.partitions and node.partitions and not set(node.partitions) & set(config.partitions):
            continue
        try:
            count = sum(g.count for g in parse_gres(node.gres, f"node {node.name}") if g.name == config.gres)
        except UnreadableError:
            continue
        if count == node_size:
            total += count
    return total


def _asked_gpus(config: SlurmConfig, job: SlurmJob, node_size: int) -> int:
    per_node = _gpu_count(config, job.tres_per_node, job.id)
    per_job = _gpu_count(config, job.tres_per_job, job.id)
    if per_node and per_job:
        raise UnreadableError("asks GPUs both per node and per job")
    if per_node:
        if job.node_count == 1:
            return per_node
        if per_node != node_size:
            raise UnreadableError(
                f"asks {per_node} GPUs on each of {job.node_count} nodes; multi-node jobs must take whole nodes "
                f"({node_size} GPUs each)"
            )
        return per_node * job.node_count
    if per_job:
        if per_job > node_size and per_job % node_size:
            raise UnreadableError(
                f"asks {per_job} GPUs over several nodes, not a whole number of {node_size}-GPU nodes"
            )
        if job.node_count > 1 and per_job != job.node_count * node_size:
            raise UnreadableError(f"asks {per_job} GPUs on {job.node_count} nodes; multi-node jobs take whole nodes")
        return per_job
    raise UnreadableError(f"asks for no {config.gres} (--gres={config.gres}:N or --gpus=N)")


def _gpu_count(config: SlurmConfig, text: str, jid: str) -> int:
    if not text or text in ("N/A", "(null)"):
        return 0
    total = 0
    for g in parse_gres(text, f"job {jid}"):
        if g.name != config.gres:
            raise UnreadableError(f"asks for gres {g.name!r}, which the allocator does not know")
        if config.gpu_type is not None and g.type not in (None, config.gpu_type):
            raise UnreadableError(f"asks for GPU type {g.type!r}; the plan's nodes hold {config.gpu_type}")
        total += g.count
    return total


def _workload(config: SlurmConfig, job: SlurmJob, *, strict: bool, top: int = 0) -> tuple[str, float]:
    """Type and priority by the configuration's mapping: rules, then the comment tag, then defaults.

    Raises:
        UnreadableError: ``strict`` and no rule, tag or default gives a type.
    """
    tags = _comment_tags(job.comment)
    job_type: str | None = None
    priority: float | None = None
    for rule in config.rules:
        if rule.matches(job.partition, job.qos, job.comment):
            job_type = rule.type.value
            priority = rule.priority
            break
    if job_type is None and "type" in tags:
        job_type = tags["type"]
        if job_type not in ("training", "batch_inference", "quantization"):
            raise UnreadableError(f"--comment type={job_type!r}: expected training, batch_inference or quantization")
    if priority is None and "priority" in tags:
        try:
            priority = float(tags["priority"])
        except ValueError:
            raise UnreadableError(f"--comment priority={tags['priority']!r}: expected a number") from None
        if not 0 < priority <= MAX_WEIGHT:
            raise UnreadableError(f"--comment priority={tags['priority']}: expected a number > 0 and <= {MAX_WEIGHT:g}")
    if job_type is None:
        if config.default_type is not None:
            job_type = config.default_type.value
        elif strict:
            raise UnreadableError(
                f"no workload type: no rule matches (partition {job.partition!r}, qos {job.qos!r}) and the comment "
                "has no type= tag; add a rule or workloads.default_type"
            )
        else:
            job_type = "batch_inference"  # a running job's type does not change the plan
    if priority is None:
        # Slurm's own priority, relative to the highest among the owned pending jobs (0 while held: all equal)
        priority = max(job.priority / top, 1e-3) if top > 0 and job.priority > 0 else 1.0
    return job_type, priority


def _comment_tags(comment: str) -> dict[str, str]:
    """``"gpualloc type=training priority=3"`` -> ``{"type": "training", "priority": "3"}``."""
    tags = {}
    for word in comment.replace(",", " ").split():
        key, sep, value = word.partition("=")
        if sep and key in ("type", "priority"):
            tags[key] = value
    return tags


def _inherited_load(entries: Sequence[dict[str, Any]], slots: int) -> np.ndarray:
    """GPUs the running jobs hold in each slot of the horizon, shape (slots,)."""
    load = np.zeros(slots, dtype=np.int64)
    for e in entries:
        if "running_on" in e:
            load[: min(e["duration"], slots)] += e["gpus"]
    return load


def _relax_initials(starts: Sequence[int], free: int) -> list[int]:
    """The apps' GPUs now, lowered (the largest first) until together they fit in ``free``.

    The running jobs hold their GPUs now as in slot 0; what they leave, ``free``, is all the apps
    can hold (SPEC section 1: the apps' ``initial`` and the running jobs' GPUs fit the cluster; then
    the least the ramps allow fits in every slot). The largest are lowered to a common level, the
    first in order giving up one more where the level does not divide; apps that fit keep what
    they hold.
    """
    initials = [max(0, s) for s in starts]
    excess = sum(initials) - max(free, 0)
    while excess > 0:
        top = max(initials)
        at_top = [a for a, i in enumerate(initials) if i == top]
        below = max((i for i in initials if i < top), default=0)
        if len(at_top) * (top - below) <= excess:
            for a in at_top:
                initials[a] = below
            excess -= len(at_top) * (top - below)
            continue
        step, extra = divmod(excess, len(at_top))
        for k, a in enumerate(at_top):
            initials[a] -= step + (k < extra)
        excess = 0
    return initials


def _span(seconds: float) -> str:
    """``95`` -> ``"1 min 35 s"``."""
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _demand(app: Any, config: SlurmConfig, now: float) -> tuple[int, ...]:
    """The forecast for the horizon: from now, or read by the day's clock from the day's first slot."""
    if app.anchor == "now":
        return tuple(app.demand[: config.slots])
    slot_of_day = DayClock.of(config).slot_of_day(now)
    n = len(app.demand)
    return tuple(app.demand[(slot_of_day + t) % n] for t in range(config.slots))
