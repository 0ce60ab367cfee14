"""Commit the current slot of a plan to Slurm: what starts now is placed and released, the rest stays held.

:func:`changes` compares the plan's slot 0 with what Slurm holds and lists the
changes that make them agree, :func:`apply` makes them (or, for ``--dry-run``,
nothing), and :func:`decisions` says per job and per app what the plan decided
and why, one JSON-able dict each. Only the allocator's own pending jobs and its
own reservations are ever touched.

The changes come in an order that never lets Slurm start something unplanned:

1. hold every owned pending job that the plan does not start now;
2. delete the reservations whose nodes or size change;
3. for each job that starts now: check on a fresh ``sinfo`` that its planned
   nodes have the GPUs free, restrict it to them (``NodeList``) and release it;
   a job that does not start within the confirmation time is held again;
4. create the new reservations.

Slurm 22.05 cannot reserve GPUs (a reservation's TRES holds cores, nodes,
licenses and burst buffers), so an app's capacity on a node is a core
reservation ``gpualloc-<app>.<node>`` of ``cpus_per_gpu`` cores for each of its
GPUs there: when every job on the partition takes that many cores per GPU
(``DefCpuPerGPU``), those cores keep exactly that many GPUs free for the app.
One reservation per app and node, because 22.05 does not report the cores per
node of a multi-node core reservation reliably (``scontrol -d show
reservation`` leaves them out for some).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.rolling.allocator import Decision
from agents.slurm.errors import CommandError, SlurmError
from agents.slurm.jsonread import parse_gres
from agents.slurm.snapshot import Snapshot

CONFIRM_SECONDS = 20.0  # default of slurm.confirm: how long a released job may take to start before it is held again


@dataclass(frozen=True)
class Change:
    """One change to Slurm.

    Attributes:
        kind: ``hold``, ``place`` (NodeList and release), ``delete`` or ``create`` (a reservation).
        target: Job id or reservation name.
        nodes: The job's planned nodes (``place``) or the reservation's node (``create``).
        cores: Cores to reserve on each node (``create``).
        gpus: GPUs of the job or app on each node, as (node, count) pairs.
        users: Users allowed into the reservation (``create``).
    """

    kind: str
    target: str
    nodes: tuple[str, ...] = ()
    cores: tuple[tuple[str, int], ...] = ()
    gpus: tuple[tuple[str, int], ...] = ()
    users: tuple[str, ...] = ()


@dataclass
class Commit:
    """What one commit did.

    Attributes:
        planned: Every change the plan asks for.
        done: Changes made.
        failed: Changes not made, with why (one line each).
    """

    planned: list[Change]
    done: list[Change] = field(default_factory=list)
    failed: list[tuple[Change, str]] = field(default_factory=list)


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
    """GPUs of each app on each node in slot 0: first where its reservation is now, then in node order."""
    free = {n: snapshot.node_size - u for n, u in slot0_gpus(snapshot, decision).items()}
    layout: dict[str, dict[str, int]] = {}
    for app in snapshot.scenario.apps:
        want = decision.app_gpus_now.get(app.name, 0)
        now = snapshot.app_now.get(app.name, {})
        mine: dict[str, int] = {}
        for n in snapshot.nodes:  # keep what it has, where it is
            take = min(now.get(n, 0), free[n], want)
            if take:
                mine[n] = take
                free[n] -= take
                want -= take
        for n in snapshot.nodes:
            take = min(free[n], want)
            if take:
                mine[n] = mine.get(n, 0) + take
                free[n] -= take
                want -= take
        if want:
            raise SlurmError(f"app {app.name}: the plan's slot 0 leaves {want} GPUs too few (a bug in the plan)")
        layout[app.name] = {n: mine[n] for n in snapshot.nodes if mine.get(n)}
    return layout


def changes(snapshot: Snapshot, decision: Decision) -> list[Change]:
    """The changes that make Slurm hold what the plan's slot 0 says, in the order they must be made."""
    config = snapshot.config
    starting = {p.job: p for p in decision.start_now}
    holds, places, deletes, creates = [], [], [], []
    for jid, job in snapshot.owned.items():
        if jid in starting:
            p = starting[jid]
            nodes = tuple(snapshot.nodes_of(p.gpus))
            local = snapshot.local(p.gpus)
            if not job.held and tuple(job.required_nodes) == nodes:
                continue  # already released onto these nodes
            places.append(Change("place", jid, nodes=nodes, gpus=tuple((n, len(local[n])) for n in nodes)))
        elif not job.held:
            holds.append(Change("hold", jid))
    layout = app_layout(snapshot, decision)
    for app in config.apps:
        want = layout.get(app.name, {})
        now = snapshot.app_now.get(app.name, {})
        current = snapshot.reservations.get(app.name, {})
        for node in snapshot.nodes:
            name = config.reservation_name(app.name, node)
            res = current.get(node)
            g = want.get(node, 0)
            expiring = (
                res is not None and res.end_time is not None and res.end_time - snapshot.now < config.slot_seconds
            )
            if res is not None and g == now.get(node, 0) and not expiring:
                continue
            if res is not None:
                deletes.append(Change("delete", name))
            if g:
                creates.append(
                    Change(
                        "create",
                        name,
                        nodes=(node,),
                        cores=((node, g * config.cpus_per_gpu),),
                        gpus=((node, g),),
                        users=app.users,
                    )
                )
    return [*holds, *deletes, *places, *creates]


# ----------------------------------------------------------------------------- making them


def apply(
    snapshot: Snapshot,
    planned: list[Change],
    client: Any,
    *,
    confirm_seconds: float = CONFIRM_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> Commit:
    """Make the changes through ``client``; every failure is recorded, none stops the others.

    A job is released only when a fresh ``sinfo`` shows its planned nodes with
    enough free GPUs (counting the jobs released before it in this commit); a
    released job that has not started after ``confirm_seconds`` is held again.
    """
    config = snapshot.config
    result = Commit(planned)
    horizon = config.reservation_minutes or config.slots * config.slot_minutes
    free: dict[str, int] | None = None
    released: list[Change] = []
    for change in planned:
        try:
            if change.kind == "hold":
                client.hold(change.target)
            elif change.kind == "delete":
                client.delete_reservation(change.target)
            elif change.kind == "place":
                if free is None:
                    free = _free_gpus(client, config.gres)
                short = [f"{n} has {free.get(n, 0)} free, needs {g}" for n, g in change.gpus if free.get(n, 0) < g]
                if short:
                    result.failed.append((change, "not released: " + "; ".join(short)))
                    continue
                client.set_nodes(change.target, change.nodes)
                client.release(change.target)
                for n, g in change.gpus:
                    free[n] -= g
                released.append(change)
            elif change.kind == "create":
                client.create_reservation(
                    change.target,
                    dict(change.cores),
                    math.ceil(horizon),
                    [u for u in change.users if u],
                    config.partitions[0] if config.partitions else None,
                )
            else:
                raise ValueError(f"unknown change kind {change.kind!r}")
        except CommandError as exc:
            result.failed.append((change, str(exc)))
            continue
        result.done.append(change)
    if released and confirm_seconds > 0:
        _confirm(client, released, result, confirm_seconds, sleep)
    return result


def _free_gpus(client: Any, gres: str) -> dict[str, int]:
    """Free GPUs per node now, from a fresh ``sinfo``."""
    free = {}
    for node in client.nodes():
        total = sum(g.count for g in parse_gres(node.gres, f"node {node.name}") if g.name == gres)
        used = sum(g.count for g in parse_gres(node.gres_used, f"node {node.name}") if g.name == gres)
        free[node.name] = total - used
    return free


def _confirm(
    client: Any, released: list[Change], result: Commit, seconds: float, sleep: Callable[[float], None]
) -> None:
    """Wait until the released jobs run on their planned nodes; hold again any that does not start in time."""
    waiting = {c.target: c for c in released}
    deadline = time.monotonic() + seconds
    while waiting and time.monotonic() < deadline:
        sleep(0.25)
        try:
            jobs = {j.id: j for j in client.jobs()}
        except (CommandError, SlurmError):
            continue
        for jid in list(waiting):
            job = jobs.get(jid)
            if job is None or job.state != "PENDING":
                del waiting[jid]
    for jid, change in waiting.items():
        try:
            client.hold(jid)
            why = f"released but not started within {seconds:g} s; held again"
        except CommandError as exc:
            why = f"released but not started within {seconds:g} s, and holding it again failed: {exc}"
        result.failed.append((change, why))


# ----------------------------------------------------------------------------- what to print


def decisions(snapshot: Snapshot, decision: Decision, commit: Commit | None) -> list[dict[str, Any]]:
    """One dict per owned job, app, relaxation and note: the plan's decision, planned start, and why others wait."""
    scenario = snapshot.scenario
    slot = snapshot.config.slot_seconds
    failed = {c.target: why for c, why in (commit.failed if commit else [])}
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
        if jid in failed:
            line["failed"] = failed[jid]
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
        names = [snapshot.config.reservation_name(app.name, n) for n in snapshot.nodes]
        line = {
            "app": app.name,
            "reservation": snapshot.config.reservation_name(app.name, "<node>"),
            "gpus": decision.app_gpus_now.get(app.name, 0),
            "demand": app.demand[0],
            "nodes": layout.get(app.name, {}),
            "held_now": snapshot.app_now.get(app.name, {}),
        }
        problems = {n: failed[n] for n in names if n in failed}
        if problems:
            line["failed"] = problems
        lines.append(line)
    lines.extend(n.to_dict() for n in snapshot.relaxed)
    lines.extend(n.to_dict() for n in snapshot.notes)
    return lines


def _why_wait(job: Any, start: int) -> str:
    if job.release and start == job.release:
        return f"planned at slot {start}, its --begin"
    return f"planned at slot {start}"


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
