"""A stand-in for a serving autoscaler: an app's replicas as Slurm jobs inside the app's reservations.

The allocator (``gpualloc slurm cycle``/``run``) publishes each app's capacity per node every committing cycle
(``replicas.capacity_file``, or ``replicas.scale_command`` with the same JSON on stdin)::

    {"time": "...", "apps": {"chat": {"gpu01": {"gpus": 2, "reservations": ["gpualloc-chat.gpu01"],
                                                 "leave": ["gpualloc-chat.gpu01~2"]}}}}

:class:`Autoscaler` reads that file and each app's demand every ``poll`` seconds and keeps, per app and node,
replicas of 1 GPU each (``sbatch -p <partition> --job-name=replica-<app> --reservation=<one reservation>
-w <node> --gres=gpu:1 -t <long> --wrap "sleep ..."``) such that the replicas on a node are at most its
capacity there and in all about ``min(demand, total capacity)``. It scales down by ``scancel`` of its OWN
replicas only: first those in ``leave`` reservations (or in a reservation no longer listed for the app there,
or on a node where the app has no capacity), then those above a node's capacity, then those above the demand.

One reservation per replica, not the comma list: on Slurm 22.05 (checked on the local cluster) a job with
``--reservation=A,B -w node`` only ever runs in ``A`` (the others wait, "ReqNodeNotAvail"), and a running job
whose list names ``B`` makes ``scontrol delete`` of ``B`` refuse ("Requested reservation is in use") wherever
it runs, so a replica must name only the reservation it runs in for a shrink of ``B`` to drain. Each
reservation's room is its cores over ``cpus_per_gpu`` (a shared ``gpualloc-a:2+b:3.<node>``: the app's part).

Fault modes for tests: ``stubborn`` (app names or job ids whose replicas never leave), ``slow`` (a replica
marked to stop is cancelled only that many seconds later). :func:`scale_script` writes a scale command that
copies its stdin to the capacity file, fails (exit 1) or hangs.

Every poll is recorded (:attr:`Autoscaler.polls`): the replicas started and stopped, and each drain (the
seconds from a ``leave`` reservation first seen to the app's replicas being gone from it).

    python -m lab.slurm_replicas --capacity /var/lib/gpualloc/capacity.json --demand chat=4,search=2 --poll 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.slurm import jsonread

LIVE = ("PENDING", "RUNNING", "CONFIGURING")
Demand = Callable[[], Mapping[str, int]] | Mapping[str, Sequence[int]] | Mapping[str, int]


@dataclass
class Replica:
    """One of the autoscaler's replicas, as ``squeue`` lists it."""

    id: str
    app: str
    node: str
    reservation: str
    state: str


@dataclass
class Poll:
    """What one poll saw and did.

    Attributes:
        time: Epoch seconds of the poll.
        demand: Each app's demand read.
        capacity: Each app's capacity per node read (GPUs).
        told: The capacity file's apps whole (reservations and ``leave`` too), where it changed since the poll before.
        started: Job ids submitted, by app.
        placed: The reservation each of them was submitted into, by job id.
        stopped: Job ids cancelled, by app, each with why (``leave``, ``node``, ``demand``).
        drained: ``{"app", "reservation", "seconds"}`` for each ``leave`` reservation the app's replicas left.
        notes: What could not be done (an unreadable file, a refused sbatch).
    """

    time: float
    demand: dict[str, int] = field(default_factory=dict)
    capacity: dict[str, dict[str, int]] = field(default_factory=dict)
    told: dict[str, Any] = field(default_factory=dict)
    started: dict[str, list[str]] = field(default_factory=dict)
    placed: dict[str, str] = field(default_factory=dict)
    stopped: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    drained: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able."""
        return {
            "time": round(self.time, 3), "demand": self.demand, "capacity": self.capacity,
            **({"told": self.told} if self.told else {}), "started": self.started,
            "placed": self.placed,
            "stopped": {a: [list(s) for s in v] for a, v in self.stopped.items()}, "drained": self.drained,
            "notes": self.notes,
        }  # fmt: skip


def read_capacity(path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """The ``apps`` of a capacity JSON file: app -> node -> ``{gpus, reservations, leave}``.

    Raises:
        OSError, ValueError: The file is missing or not such a JSON.
    """
    data = json.loads(Path(path).read_text())
    apps = data["apps"]
    if not isinstance(apps, dict):
        raise ValueError("capacity: 'apps' is not an object")
    return {
        str(app): {
            str(node): {
                "gpus": int(e.get("gpus", 0)),
                "reservations": [str(r) for r in e.get("reservations", [])],
                "leave": [str(r) for r in e.get("leave", [])],
            }
            for node, e in (nodes or {}).items()
        }
        for app, nodes in apps.items()
    }


def app_part(name: str, app: str, cores: int, cpus_per_gpu: int) -> int:
    """GPUs the app may use in reservation ``name`` of ``cores`` cores.

    Its part of a shared one (``gpualloc-a:2+b:3.<node>``), else all of it.
    """
    head = name.split(".", 1)[0]
    head = head.split("-", 1)[1] if "-" in head else head
    if ":" in head:
        parts = dict(p.split(":", 1) for p in head.split("+") if ":" in p)
        return int(parts.get(app, 0)) if str(parts.get(app, "0")).isdigit() else 0
    return cores // max(1, cpus_per_gpu)


class Autoscaler:
    """Keeps each app's replicas within the published capacity and near its demand (module docstring).

    Args:
        capacity_file: The capacity JSON the allocator writes (or the scale script copies).
        demand: Each app's demand now: a callable returning ``{app: GPUs}``, a ``{app: GPUs}`` mapping, or a curve
            by slot ``{app: [GPUs per slot]}`` read at ``(time - t0) // slot_seconds`` (the last value after it).
        env: The environment of Slurm's tools (``LocalCluster.env``).
        poll: Seconds between polls (:meth:`start`).
        partition: The replicas' partition: one the allocator does not own, so a pending replica is never held.
        cpus_per_gpu: Cores per GPU of a reservation (``slurm.cpus_per_gpu``).
        time_limit: Minutes of a replica's time limit (long: a replica ends when it is told to).
        stubborn: App names or job ids whose replicas are never cancelled (a replica that never leaves).
        slow: Seconds between deciding to stop a replica and its ``scancel``.
        t0, slot_seconds: The curve's clock.
    """

    def __init__(
        self,
        capacity_file: Path | str,
        demand: Demand,
        *,
        env: Mapping[str, str] | None = None,
        poll: float = 1.0,
        partition: str = "batch",
        cpus_per_gpu: int = 4,
        time_limit: int = 10_000,
        stubborn: Iterable[str] = (),
        slow: float = 0.0,
        t0: float | None = None,
        slot_seconds: float = 60.0,
        timeout: float = 60.0,
    ) -> None:
        self.capacity_file = Path(capacity_file)
        self.demand = demand
        self.env = dict(os.environ if env is None else env)
        self.env["PATH"] = self.env.get("PATH", "") + os.pathsep + "/usr/sbin"
        self.poll = poll
        self.partition = partition
        self.cpus_per_gpu = cpus_per_gpu
        self.time_limit = time_limit
        self.stubborn = set(stubborn)
        self.slow = slow
        self.t0 = time.time() if t0 is None else t0
        self.slot_seconds = slot_seconds
        self.timeout = timeout
        self.submitted: dict[str, str] = {}  # job id -> app
        self.cancelled: set[str] = set()  # job ids this autoscaler scancelled
        self.polls: list[Poll] = []
        self._marked: dict[str, float] = {}  # job id -> when first marked to stop (slow mode)
        self._told: dict[str, Any] = {}
        self._leave_since: dict[tuple[str, str], float] = {}  # (app, reservation) -> first seen in `leave`
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ Slurm

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=self.timeout)

    def replicas(self) -> list[Replica]:
        """The autoscaler's own replicas in the queue (pending or running)."""
        out = self._run("squeue", "-h", "-t", "PD,R,CF", "-o", "%i|%T|%N|%v").stdout
        found = []
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4 and parts[0] in self.submitted:
                found.append(Replica(parts[0], self.submitted[parts[0]], parts[2], parts[3], parts[1]))
        return found

    def _room(self) -> dict[str, tuple[str, int]]:
        """Each reservation's (node, cores) from ``scontrol show reservation``."""
        text = self._run("scontrol", "-d", "-o", "show", "reservation").stdout
        rooms: dict[str, tuple[str, int]] = {}
        for r in jsonread.read_reservations(text):
            node = r.nodes[0] if r.nodes else ""
            rooms[r.name] = (node, r.cores.get(node, 0) or r.core_count)
        return rooms

    def _submit(self, app: str, node: str, reservation: str) -> str | None:
        proc = self._run(
            "sbatch", "--parsable", "-p", self.partition, f"--job-name=replica-{app}", f"--reservation={reservation}",
            "-w", node, "--gres=gpu:1", "-t", str(self.time_limit), "--output=/dev/null",
            "--wrap", f"sleep {self.time_limit * 60}",
        )  # fmt: skip
        if proc.returncode != 0:
            return None
        jid = proc.stdout.strip().split(";")[0]
        self.submitted[jid] = app
        return jid

    def _cancel(self, jid: str) -> bool:
        self.cancelled.add(jid)  # before: its end must never look like someone else's
        return self._run("scancel", jid).returncode == 0

    # ------------------------------------------------------------------ one poll

    def demand_now(self, now: float) -> dict[str, int]:
        """Each app's demand at ``now``."""
        d = self.demand() if callable(self.demand) else self.demand
        out = {}
        for app, v in d.items():
            if isinstance(v, (int, float)):
                out[app] = int(v)
            else:
                s = max(0, min(len(v) - 1, math.floor((now - self.t0) / self.slot_seconds)))
                out[app] = int(v[s]) if len(v) else 0
        return out

    def poll_once(self) -> Poll:
        """Read the capacity and the demand; stop and start replicas (module docstring). Returns the record."""
        with self._lock:
            now = time.time()
            rec = Poll(now)
            try:
                cap = read_capacity(self.capacity_file)
                written = min(now, self.capacity_file.stat().st_mtime)  # when a `leave` first appeared, at most
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                rec.notes.append(f"capacity unreadable: {type(exc).__name__}: {exc}")
                self.polls.append(rec)
                return rec
            demand = self.demand_now(now)
            rec.demand = demand
            rec.capacity = {a: {n: e["gpus"] for n, e in nodes.items()} for a, nodes in cap.items()}
            if cap != self._told:
                rec.told = self._told = cap
            mine = self.replicas()
            rooms = self._room()
            for app in sorted(set(cap) | {r.app for r in mine}):
                self._scale_app(app, cap.get(app, {}), demand.get(app, 0), [r for r in mine if r.app == app],
                                rooms, now, written, rec)  # fmt: skip
            self.polls.append(rec)
            return rec

    def _never_leaves(self, r: Replica) -> bool:
        return r.app in self.stubborn or r.id in self.stubborn

    def _scale_app(self, app: str, nodes: Mapping[str, Mapping[str, Any]], demand: int, mine: list[Replica],
                   rooms: Mapping[str, tuple[str, int]], now: float, written: float, rec: Poll) -> None:  # fmt: skip
        # drains: each `leave` reservation from its first sight until no replica of the app is in it
        leave = {r for e in nodes.values() for r in e["leave"]}
        for res in leave:  # from the file's write that first named it, where the app has replicas in it
            if (app, res) not in self._leave_since and any(r.reservation == res for r in mine):
                self._leave_since[(app, res)] = written
        stop: list[tuple[Replica, str]] = []
        keep: list[Replica] = []
        for r in mine:
            where = r.node or _node_of(r.reservation, rooms)
            entry = nodes.get(where)
            if entry is None:
                stop.append((r, "node"))
            elif r.reservation in entry["leave"] or r.reservation not in entry["reservations"]:
                stop.append((r, "leave"))
            else:
                keep.append(r)
        # above a node's capacity: pending first, then the newest
        by_node: dict[str, list[Replica]] = {}
        for r in keep:
            by_node.setdefault(r.node or _node_of(r.reservation, rooms), []).append(r)
        keep = []
        for node, rs in by_node.items():
            rs.sort(key=_keep_order)
            cap = nodes[node]["gpus"]
            keep += rs[:cap]
            stop += [(r, "node") for r in rs[cap:]]
        # above the demand: pending first, then the newest, from the node with the most
        total = sum(e["gpus"] for e in nodes.values())
        target = max(0, min(demand, total))
        if len(keep) > target:
            keep.sort(key=_keep_order)
            stop += [(r, "demand") for r in keep[target:]]
            keep = keep[:target]
        for r, why in stop:
            if self._never_leaves(r):
                continue
            first = self._marked.setdefault(r.id, now)
            if now - first >= self.slow and self._cancel(r.id):
                rec.stopped.setdefault(app, []).append((r.id, why))
        gone = {jid for jid, _ in rec.stopped.get(app, [])}
        for (a, res), since in list(self._leave_since.items()):  # scancel frees a reservation at once (22.05.8)
            if a == app and not any(r.reservation == res and r.id not in gone for r in mine):
                rec.drained.append({"app": app, "reservation": res, "seconds": round(time.time() - since, 3)})
                del self._leave_since[(a, res)]
        # start: on nodes with room, in reservations with room
        count: dict[str, int] = {}
        for r in mine:
            if not any(r is s for s, _ in stop) or self._never_leaves(r):
                count[r.reservation] = count.get(r.reservation, 0) + 1
        held = {n: sum(1 for r in keep if (r.node or _node_of(r.reservation, rooms)) == n) for n in nodes}
        stubborn_here = [r for r, _ in stop if self._never_leaves(r)]
        for r in stubborn_here:  # a stubborn replica still takes its node's room
            n = r.node or _node_of(r.reservation, rooms)
            held[n] = held.get(n, 0) + 1
        missing = target - len(keep) - len(stubborn_here)
        for node in sorted(nodes, key=lambda n: (-(nodes[n]["gpus"] - held.get(n, 0)), n)):
            entry = nodes[node]
            while missing > 0 and held.get(node, 0) < entry["gpus"]:
                res = next((x for x in entry["reservations"] if x not in entry["leave"] and x in rooms
                            and count.get(x, 0) < app_part(x, app, rooms[x][1], self.cpus_per_gpu)), None)  # fmt: skip
                if res is None:
                    break
                jid = self._submit(app, node, res)
                if jid is None:
                    rec.notes.append(f"{app}: sbatch into {res} on {node} refused")
                    break
                rec.started.setdefault(app, []).append(jid)
                rec.placed[jid] = res
                count[res] = count.get(res, 0) + 1
                held[node] = held.get(node, 0) + 1
                missing -= 1

    # ------------------------------------------------------------------ a thread

    def start(self) -> Autoscaler:
        """Poll every ``poll`` seconds in a daemon thread until :meth:`stop`."""

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.poll_once()
                except (OSError, subprocess.SubprocessError) as exc:  # a hang guard; the next poll tries again
                    self.polls.append(Poll(time.time(), notes=[f"poll failed: {exc}"]))
                self._stop.wait(self.poll)

        self._stop.clear()
        self._thread = threading.Thread(target=loop, name="autoscaler", daemon=True)
        self._thread.start()
        return self

    def stop(self, *, cancel: bool = False) -> None:
        """Stop polling; with ``cancel``, scancel every replica still in the queue (stubborn ones too)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout)
        if cancel:
            with self._lock:
                for r in self.replicas():
                    self._cancel(r.id)

    def __enter__(self) -> Autoscaler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(cancel=True)

    # ------------------------------------------------------------------ what it did

    def drain_seconds(self) -> list[dict[str, Any]]:
        """Every drain seen: ``{"app", "reservation", "seconds"}``."""
        return [d for p in self.polls for d in p.drained]

    def killed(self, ended: Iterable[str]) -> list[str]:
        """Of the replica job ids in ``ended``, those this autoscaler did not scancel (ended by someone else)."""
        return sorted((j for j in ended if j in self.submitted and j not in self.cancelled), key=int)


def _keep_order(r: Replica) -> tuple[int, int]:
    """Replicas kept first: running before pending, then the oldest (smallest id)."""
    return (0 if r.state != "PENDING" else 1, int(r.id) if r.id.isdigit() else 0)


def _node_of(reservation: str, rooms: Mapping[str, tuple[str, int]]) -> str:
    """The node of a (single-node) reservation: from Slurm, else from its name (``<...>.<node>[~k]``)."""
    if reservation in rooms:
        return rooms[reservation][0]
    m = re.search(r"\.([^.~]+)(~\d+)?$", reservation)
    return m.group(1) if m else ""


def scale_script(path: Path, capacity_file: Path, mode: str = "copy", *, hang_seconds: float = 3600) -> Path:
    """A ``replicas.scale_command`` script, written to ``path``.

    ``copy``: its stdin to ``capacity_file`` whole (temp + rename); ``fail``: exit 1 after reading it; ``hang``:
    sleep ``hang_seconds``, past any timeout.
    """
    body = {
        "copy": f'tmp="{capacity_file}.$$"; cat > "$tmp" && mv "$tmp" "{capacity_file}"',
        "fail": 'cat > /dev/null; echo "scale: the serving stack refused" >&2; exit 1',
        "hang": f"exec sleep {hang_seconds:g}",
    }[mode]
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lab.slurm_replicas``: poll until killed (or ``--polls``), a JSON line per poll."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=Path, required=True, help="the capacity JSON the allocator writes")
    parser.add_argument("--demand", required=True, help="app=GPUs,... or app=g0:g1:g2,... (a curve by slot)")
    parser.add_argument("--slot-seconds", type=float, default=60.0, help="a curve's slot, from the start")
    parser.add_argument("--poll", type=float, default=2.0)
    parser.add_argument("--partition", default="batch")
    parser.add_argument("--cpus-per-gpu", type=int, default=4)
    parser.add_argument("--polls", type=int, default=0, help="stop after N polls (0: run until killed)")
    args = parser.parse_args(argv)
    demand: dict[str, Any] = {}
    for item in filter(None, args.demand.split(",")):
        app, _, value = item.partition("=")
        demand[app] = [int(v) for v in value.split(":")] if ":" in value else int(value)
    scaler = Autoscaler(args.capacity, demand, poll=args.poll, partition=args.partition,
                        cpus_per_gpu=args.cpus_per_gpu, slot_seconds=args.slot_seconds)  # fmt: skip
    n = 0
    try:
        while not args.polls or n < args.polls:
            print(json.dumps(scaler.poll_once().to_dict()), flush=True)
            n += 1
            time.sleep(args.poll)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
