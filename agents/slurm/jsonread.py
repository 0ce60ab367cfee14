"""Slurm's JSON, read in one place: ``squeue --json``, ``sinfo --json`` and ``scontrol show reservation``.

Slurm changed its JSON between releases; everything else in :mod:`agents.slurm`
sees only the version-free records :class:`SlurmJob`, :class:`SlurmNode` and
:class:`SlurmReservation`.

- 22.05 (``openapi/v0.0.38``, tested against a real cluster): plain numbers,
  ``job_state`` a string, node ``state`` a lower-case string with ``state_flags``,
  ``tres_per_node`` like ``gres:gpu:2``.
- 23.02 and later (``v0.0.39`` to ``v0.0.42``, read from fixtures only): numbers
  wrapped as ``{"set": true, "infinite": false, "number": N}``, ``job_state`` and
  node ``state`` lists of upper-case flags, ``tres_per_node`` like ``gres/gpu:2``;
  24.x ``sinfo --json`` answers ``{"sinfo": [...]}`` with one entry per node and
  partition (``nodes.nodes``, ``node.state``, ``gres.total``/``gres.used``),
  while ``scontrol show nodes --json`` keeps ``{"nodes": [...]}``.

A field that none of these shapes explains raises :class:`UnreadableError`
naming the job or node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agents.slurm.errors import UnreadableError

HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})


@dataclass(frozen=True)
class SlurmJob:
    """One job as the allocator needs it, whatever Slurm's version.

    Attributes:
        id: Job id as text (``"17"``).
        state: ``PENDING``, ``RUNNING``, ... (the base state, upper case).
        reason: Why it pends (``JobHeldUser``, ``Resources``, ``BeginTime``, ...).
        partition: Its partition (the first, when it names several).
        qos: Its QOS ("" without accounting).
        comment: Its ``--comment``.
        priority: Slurm's priority (0 while held).
        nodes: Nodes it runs on (expanded), empty while pending.
        node_count: Nodes asked for (at least 1).
        tres_per_node: e.g. ``gres:gpu:h100:2`` (22.05) or ``gres/gpu:2`` (23.x+); "" if none.
        tres_per_job: ``--gpus=N`` as ``gres:gpu:N``; "" if none.
        tres_other: ``tres_per_task`` / ``tres_per_socket`` when set (the allocator does not read those).
        gres_detail: Per node, ``gpu:h100:2(IDX:0-1)`` while running.
        time_limit: Minutes, None for none (infinite).
        start_time: Epoch seconds (running: when it started).
        end_time: Epoch seconds (running: when its time limit ends); None if unknown.
        eligible_time: Epoch seconds of ``--begin`` (None or 0 when not set).
        deadline: Epoch seconds of ``--deadline`` (None when not set).
        required_nodes: The node list it is restricted to (``NodeList=`` / ``-w``).
        dependency: Its ``--dependency`` ("" when none).
        submit_time: Epoch seconds at which it was submitted (None when the JSON does not say).
        reservation: The reservation it runs in or asked for (``--reservation``; "" when none). A running job in
            one of an app's reservations is that app's replica (:mod:`agents.slurm.snapshot`).
    """

    id: str
    state: str
    reason: str
    partition: str
    qos: str
    comment: str
    priority: int
    nodes: tuple[str, ...]
    node_count: int
    tres_per_node: str
    tres_per_job: str
    tres_other: str
    gres_detail: tuple[str, ...]
    time_limit: int | None
    start_time: int | None
    end_time: int | None
    eligible_time: int | None
    deadline: int | None
    required_nodes: tuple[str, ...]
    dependency: str = ""
    submit_time: int | None = None
    reservation: str = ""

    @property
    def held(self) -> bool:
        """Pending under a user or admin hold."""
        return self.state == "PENDING" and self.reason in HELD_REASONS


@dataclass(frozen=True)
class SlurmNode:
    """One node.

    Attributes:
        name: Node name.
        states: Upper-case state words (``IDLE``, ``MIXED``, ``DRAIN``, ...).
        partitions: Partitions it belongs to (empty when the JSON does not say).
        gres: Configured gres, e.g. ``gpu:h100:8``.
        gres_used: Used gres, e.g. ``gpu:h100:2(IDX:0-1)``.
        cpus: Cores (CPUs) configured.
    """

    name: str
    states: frozenset[str]
    partitions: tuple[str, ...]
    gres: str
    gres_used: str
    cpus: int


@dataclass(frozen=True)
class SlurmReservation:
    """One reservation, from ``scontrol -d -o show reservation``.

    Attributes:
        name: ReservationName.
        nodes: Its nodes (expanded).
        cores: Cores reserved on each node (from ``CoreIDs``; may be empty, see ``core_count``).
        core_count: Cores reserved in all (``CoreCnt``; 0 when not a core reservation).
        start_time: Epoch seconds, or None when unreadable.
        end_time: Epoch seconds, or None when unreadable.
        flags: Its flags.
    """

    name: str
    nodes: tuple[str, ...]
    cores: Mapping[str, int]
    core_count: int
    start_time: int | None
    end_time: int | None
    flags: tuple[str, ...]


# ----------------------------------------------------------------------------- version and numbers


def version(data: Mapping[str, Any]) -> tuple[int, int]:
    """Slurm's (major, minor) from a response's ``meta``; (0, 0) when it does not say."""
    meta = data.get("meta") or {}
    v = (meta.get("Slurm") or meta.get("slurm") or {}).get("version") or {}
    try:
        return int(v.get("major", 0)), int(v.get("minor", 0))
    except (TypeError, ValueError):
        return 0, 0


def number(value: Any, where: str) -> int | None:
    """A number in any version's shape: plain, or ``{"set", "infinite", "number"}``; None when unset or infinite.

    Raises:
        UnreadableError: Neither shape.
    """
    if isinstance(value, dict):
        if value.get("infinite"):
            return None
        if not value.get("set", True):
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UnreadableError(f"{where}: expected a number, got {value!r}")
    return int(value)


_NO_LIMIT = (4294967295, 4294967294)  # INFINITE and NO_VAL of 22.05's uint32 fields


def _limit(value: Any, where: str) -> int | None:
    n = number(value, where)
    return None if n is None or n in _NO_LIMIT else n


def _time(value: Any, where: str) -> int | None:
    n = number(value, where)
    return n if n else None


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _states(value: Any, flags: Any = ()) -> frozenset[str]:
    words: list[str] = []
    if isinstance(value, str):
        words.extend(re.split(r"[+,]", value))
    elif isinstance(value, list):
        words.extend(str(v) for v in value)
    if isinstance(flags, list):
        words.extend(str(v) for v in flags)
    return frozenset(w.strip().upper() for w in words if w.strip())


# ----------------------------------------------------------------------------- host lists


def expand_hostlist(text: str) -> tuple[str, ...]:
    """``gpu[01-03,07],cpu1`` -> ``("gpu01", "gpu02", "gpu03", "gpu07", "cpu1")`` (Slurm's host-list syntax).

    Raises:
        UnreadableError: A bracket that does not close or a range that is not numeric.
    """
    names: list[str] = []
    for part in _split_top(text.strip()):
        names.extend(_expand_one(part))
    return tuple(names)


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if depth != 0:
        raise UnreadableError(f"host list {text!r}: unbalanced brackets")
    if current:
        parts.append(current)
    return [p for p in parts if p]


def _expand_one(part: str) -> list[str]:
    match = re.match(r"^([^\[]*)\[([^\]]+)\](.*)$", part)
    if match is None:
        return [part]
    prefix, ranges, rest = match.groups()
    out = []
    for r in ranges.split(","):
        lo, _, hi = r.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise UnreadableError(f"host list {part!r}: {r!r} is not a number or a range")
        width = len(lo)
        for i in range(int(lo), int(hi or lo) + 1):
            out.extend(f"{prefix}{i:0{width}d}{tail}" for tail in _expand_one(rest) or [""])
    return out


def index_set(text: str) -> list[int]:
    """``0-1,4`` -> ``[0, 1, 4]`` (the IDX of a gres string)."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


# ----------------------------------------------------------------------------- gres strings


@dataclass(frozen=True)
class Gres:
    """One gres entry: ``gpu:h100:2(IDX:0-1)`` -> name gpu, type h100, count 2, indices (0, 1)."""

    name: str
    type: str | None
    count: int
    indices: tuple[int, ...] | None


_GRES = re.compile(
    r"^(?:gres[:/])?(?P<name>[A-Za-z0-9_.-]+)(?::(?P<type>[A-Za-z0-9_.-]+))?[:=](?P<count>\d+)(?P<unit>[KMGTP]?)$"
)


def parse_gres(text: str, where: str) -> list[Gres]:
    """Every entry of a gres or TRES-per-node string (22.05 ``gres:gpu:2``, 23.x+ ``gres/gpu:2``, ``gpu:h100:8``).

    Socket annotations (``(S:0-1)``) are dropped; ``(IDX:...)`` becomes ``indices``;
    ``IDX:N/A`` (nothing used) gives an empty tuple.

    Raises:
        UnreadableError: An entry of neither shape.
    """
    entries: list[Gres] = []
    for raw in _split_top(text.replace("(", "[").replace(")", "]")):
        raw = raw.strip()
        if not raw or raw in ("(null)", "N/A"):
            continue
        indices: tuple[int, ...] | None = None
        annotation = re.search(r"\[(.*)\]$", raw)
        if annotation:
            raw = raw[: annotation.start()]
            note = annotation.group(1)
            if note.startswith("IDX:"):
                idx = note[4:]
                try:
                    indices = () if idx in ("N/A", "") else tuple(index_set(idx))
                except ValueError:
                    raise UnreadableError(f"{where}: gres {text!r}: unreadable indices {idx!r}") from None
        m = _GRES.match(raw)
        if m is None:
            # a bare name is one unit (``gpu`` alone)
            if re.fullmatch(r"(?:gres[:/])?[A-Za-z0-9_.-]+", raw):
                name = raw.split(":")[-1].split("/")[-1]
                entries.append(Gres(name, None, 1, indices))
                continue
            raise UnreadableError(f"{where}: gres {text!r}: cannot read {raw!r}")
        scale = 1024 ** "KMGTP".index(m["unit"]) * 1024 if m["unit"] else 1  # sizes such as tmpsize:7T
        entries.append(Gres(m["name"], m["type"], int(m["count"]) * scale, indices))
    return entries


# ----------------------------------------------------------------------------- jobs


def read_jobs(data: Mapping[str, Any]) -> list[SlurmJob]:
    """Every job of a ``squeue --json`` (or REST ``/jobs``) answer, of any supported version.

    Raises:
        UnreadableError: Not such an answer, or a job whose fields no version explains (naming the job).
    """
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise UnreadableError("squeue --json: no 'jobs' list in the answer")
    return [read_job(j) for j in jobs]


def read_job(j: Mapping[str, Any]) -> SlurmJob:
    """One job entry of any supported version."""
    raw_id = j.get("job_id")
    jid = str(number(raw_id, "job_id"))
    where = f"job {jid}"
    state = j.get("job_state")
    base = ""
    if isinstance(state, list):
        words = [str(s).upper() for s in state]
        base = next((w for w in words if w in _BASE_STATES), words[0] if words else "")
    elif isinstance(state, str):
        base = state.upper()
    if not base:
        raise UnreadableError(f"{where}: job_state {state!r}: expected a state")
    partition = _text(j.get("partition")).split(",")[0]
    node_count = number(j.get("node_count"), f"{where}: node_count") or 1
    nodes_text = _text(j.get("nodes"))
    required = _text(j.get("required_nodes"))
    tres_other = ",".join(
        _text(j.get(k)) for k in ("tres_per_task", "tres_per_socket") if _text(j.get(k)) not in ("", "N/A")
    )
    return SlurmJob(
        id=jid,
        state=base,
        reason=_text(j.get("state_reason")),
        partition=partition,
        qos=_text(j.get("qos")),
        comment=_text(j.get("comment")),
        priority=number(j.get("priority"), f"{where}: priority") or 0,
        nodes=expand_hostlist(nodes_text) if nodes_text and nodes_text != "None assigned" else (),
        node_count=max(1, node_count),
        tres_per_node=_text(j.get("tres_per_node")),
        tres_per_job=_text(j.get("tres_per_job")),
        tres_other=tres_other,
        gres_detail=tuple(str(g) for g in (j.get("gres_detail") or [])),
        time_limit=_limit(j.get("time_limit"), f"{where}: time_limit"),
        start_time=_time(j.get("start_time"), f"{where}: start_time"),
        end_time=_time(j.get("end_time"), f"{where}: end_time"),
        eligible_time=_time(j.get("eligible_time"), f"{where}: eligible_time"),
        deadline=_time(j.get("deadline"), f"{where}: deadline"),
        required_nodes=expand_hostlist(required) if required else (),
        dependency=_text(j.get("dependency")),
        submit_time=_time(j.get("submit_time"), f"{where}: submit_time"),
        reservation=_text(j.get("resv_name", j.get("reservation"))),
    )


_BASE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETING",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "CONFIGURING",
    }
)


# ----------------------------------------------------------------------------- nodes


def read_nodes(data: Mapping[str, Any]) -> list[SlurmNode]:
    """Every node of a ``sinfo --json`` answer (22.05's ``nodes``, 24.x's ``sinfo``) or of ``/nodes``.

    Raises:
        UnreadableError: Neither shape, or a node without a name.
    """
    if isinstance(data.get("nodes"), list):
        return [_node(n) for n in data["nodes"]]
    if isinstance(data.get("sinfo"), list):
        return _sinfo_nodes(data["sinfo"])
    raise UnreadableError("sinfo --json: neither a 'nodes' nor a 'sinfo' list in the answer")


def _node(n: Mapping[str, Any]) -> SlurmNode:
    name = _text(n.get("name"))
    if not name:
        raise UnreadableError(f"sinfo --json: a node without a name: {dict(n)!r:.80}")
    partitions = n.get("partitions") or []
    return SlurmNode(
        name=name,
        states=_states(n.get("state"), n.get("state_flags") or []),
        partitions=tuple(str(p) for p in partitions),
        gres=_text(n.get("gres")),
        gres_used=_text(n.get("gres_used")),
        cpus=number(n.get("cpus"), f"node {name}: cpus") or 0,
    )


def _sinfo_nodes(entries: Iterable[Mapping[str, Any]]) -> list[SlurmNode]:
    """24.x ``sinfo --json``: one entry per (node group, partition); merged by node name."""
    merged: dict[str, SlurmNode] = {}
    for e in entries:
        names = ((e.get("nodes") or {}).get("nodes")) or []
        partition = _text((e.get("partition") or {}).get("name"))
        gres = e.get("gres") or {}
        cpus = e.get("cpus") or {}
        for name in names:
            name = str(name)
            old = merged.get(name)
            parts = (*old.partitions, partition) if old else ((partition,) if partition else ())
            merged[name] = SlurmNode(
                name=name,
                states=_states((e.get("node") or {}).get("state")),
                partitions=tuple(dict.fromkeys(p for p in parts if p)),
                gres=_text(gres.get("total")),
                gres_used=_text(gres.get("used")),
                cpus=number(cpus.get("total"), f"node {name}: cpus.total") or 0,
            )
    return list(merged.values())


# ----------------------------------------------------------------------------- reservations


def read_reservations(text: str) -> list[SlurmReservation]:
    """Reservations from ``scontrol -d -o show reservation`` (one line each; 22.05 has no ``--json`` here).

    Raises:
        UnreadableError: A line without a ReservationName.
    """
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("No reservations"):
            continue
        fields: dict[str, str] = {}
        cores: dict[str, int] = {}
        node = None
        for token in line.split():
            key, sep, value = token.partition("=")
            if not sep:
                continue
            if key == "NodeName":
                node = value
            elif key == "CoreIDs" and node is not None:
                cores[node] = len(index_set(value)) if value and value != "(null)" else 0
                node = None
            else:
                fields.setdefault(key, value)
        name = fields.get("ReservationName")
        if not name:
            raise UnreadableError(f"scontrol show reservation: a line without ReservationName: {line[:80]!r}")
        nodes = fields.get("Nodes", "")
        hosts = expand_hostlist(nodes) if nodes and nodes != "(null)" else ()
        core_count = int(fields["CoreCnt"]) if fields.get("CoreCnt", "").isdigit() else 0
        if not cores and len(hosts) == 1 and core_count:
            # 22.05 leaves the NodeName/CoreIDs pairs out of some answers (seen for a fresh single-node core
            # reservation); on one node CoreCnt is that node's count.
            cores = {hosts[0]: core_count}
        out.append(
            SlurmReservation(
                name=name,
                nodes=hosts,
                cores=cores,
                core_count=core_count,
                start_time=_parse_time(fields.get("StartTime")),
                end_time=_parse_time(fields.get("EndTime")),
                flags=tuple(f for f in fields.get("Flags", "").split(",") if f and f != "(null)"),
            )
        )
    return out


def read_reservations_json(data: Mapping[str, Any]) -> list[SlurmReservation]:
    """Reservations from ``scontrol show reservation --json`` (23.02+) or REST ``/reservations`` (fixtures only).

    Raises:
        UnreadableError: No ``reservations`` list, or one without a name.
    """
    entries = data.get("reservations")
    if not isinstance(entries, list):
        raise UnreadableError("reservations: no 'reservations' list in the answer")
    out = []
    for r in entries:
        name = _text(r.get("name"))
        if not name:
            raise UnreadableError("reservations: an entry without a name")
        nodes = _text(r.get("node_list"))
        cores = {}
        for c in r.get("core_specializations") or []:  # 23.11+: per-node cores of a core reservation
            cores[_text(c.get("node"))] = len(index_set(_text(c.get("core")))) if c.get("core") else 0
        flags = r.get("flags") or []
        out.append(
            SlurmReservation(
                name=name,
                nodes=expand_hostlist(nodes) if nodes else (),
                cores=cores,
                core_count=number(r.get("core_count"), f"reservation {name}: core_count") or sum(cores.values()),
                start_time=_time(r.get("start_time"), f"reservation {name}: start_time"),
                end_time=_time(r.get("end_time"), f"reservation {name}: end_time"),
                flags=tuple(str(f) for f in flags) if isinstance(flags, list) else tuple(str(flags).split(",")),
            )
        )
    return out


def _parse_time(text: str | None) -> int | None:
    """``2026-12-01T11:51:29`` (local time, as scontrol prints) -> epoch seconds; None when unreadable."""
    import time

    if not text or text in ("(null)", "Unknown", "None"):
        return None
    try:
        return int(time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None
