"""The configuration file of the Slurm driver: what Slurm cannot say (docs/slurm.md).

Slurm knows the nodes, the GPUs and the jobs; it does not know which job is a
training run, what a job is worth, how many GPUs each real-time app will need
in each hour, or which jobs the allocator may touch. This file says so::

    slurm:
      partitions: [gpu]        # the GPU partitions the allocator reads (default: every partition)
      gres: gpu                # gres name of a GPU
      cpus_per_gpu: 4          # cores a real-time reservation takes per GPU (the partition's DefCpuPerGPU)
    owned:                     # the pending jobs the allocator may hold, place and release (any match)
      partitions: [gpu]
      qos: []
      comment_tag: gpualloc    # or a --comment that contains this word
    horizon: {slots: 24, slot_minutes: 60, decay: 0.99}
    workloads:                 # first rule that matches wins; every key given must match
      rules:
        - {partition: train, type: training, priority: 3}
        - {qos: batch, type: batch_inference}
      default_type: batch_inference   # absent: a job that no rule types is reported and left alone
    realtime:
      - {name: chat, demand: [2, 2, 3, ...], ramp: 2, penalty: 8, users: [root],
         observed: {command: "chat-replicas --gpus", timeout: 5}}   # or {prometheus: {url: URL, query: Q}}

Every malformed entry raises :class:`~agents.slurm.errors.ConfigError` naming
the file and the field; the YAML is read with ``yaml.safe_load``.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agents.slurm.errors import ConfigError
from gpu_env.scenario import MAX_SLOTS, MAX_WEIGHT, JobType

RESERVATION_PREFIX = "gpualloc-"
PIECE_MARK = "~"  # an app's further reservations on a node: gpualloc-<app>.<node>~2, ~3, ... (docs/slurm.md)
SHARE_MARK = ":"  # a reservation apps share on a node, GPUs per app: gpualloc-chat:2+search:3.<node> (docs/slurm.md)
STATE_DIR = "/var/lib/gpualloc"  # default of slurm.state_dir: the writers' lock files
HISTORY_DAYS = 14  # default of slurm.history_days: past days the live planner reads
DRAIN_SECONDS = 120.0  # default of replicas.drain_seconds: how long a commit waits for an app's replicas to leave
SCALE_TIMEOUT = 10.0  # default of replicas.scale_timeout: seconds the scale command may take
OBSERVE_TIMEOUT = 5.0  # default of realtime[].observed.timeout: seconds one reading of a source may take
DAY_SECONDS = 86_400.0
NAME_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(frozen=True)
class WorkloadRule:
    """Jobs matching every given key get this type (and priority, when given)."""

    type: JobType
    partition: str | None = None
    qos: str | None = None
    comment: str | None = None  # a word the --comment contains
    priority: float | None = None

    def matches(self, partition: str, qos: str, comment: str) -> bool:
        """Whether a job with these fields matches every key this rule gives."""
        if self.partition is not None and partition != self.partition:
            return False
        if self.qos is not None and qos != self.qos:
            return False
        return self.comment is None or self.comment in comment.split()


@dataclass(frozen=True)
class ObservedSource:
    """Where an app's current demand in GPUs is read (``realtime[].observed``, :mod:`agents.slurm.observe`).

    Exactly one of ``command`` and ``url`` is set.

    Attributes:
        command: A command, run without a shell, that prints one integer.
        url: Base URL of a Prometheus server, asked ``GET <url>/api/v1/query?query=<query>``.
        query: The PromQL instant query; it must answer one scalar (or a vector of one sample).
        timeout: Seconds one reading may take.
    """

    command: tuple[str, ...] | None = None
    url: str | None = None
    query: str | None = None
    timeout: float = OBSERVE_TIMEOUT

    def describe(self) -> str:
        """A short description for a report: ``command 'x y'`` or ``prometheus <url> <query>``."""
        if self.command is not None:
            return f"command {shlex.join(self.command)!r}"
        return f"prometheus {self.url} {self.query}"


@dataclass(frozen=True)
class RealtimeApp:
    """A real-time application: its forecast, its ramp and penalty, and who may use its reservation.

    Attributes:
        name: App name; its reservation on node N is ``gpualloc-<name>.N``.
        demand: Forecast GPUs per slot; slot 0 is now (``anchor: now``) or the first slot of
            the day (``anchor: day``, read cyclically by the day's clock, :mod:`agents.slurm.clock`).
        ramp: Most GPUs added or removed between slots.
        penalty: Cost of one unserved GPU-slot.
        initial: GPUs serving it now when it holds no reservation (None: 0, what Slurm says).
        anchor: ``now`` or ``day``.
        users: Users allowed into the reservation.
        observed: Where its current demand is read (None: the forecast is all the planner knows).
    """

    name: str
    demand: tuple[int, ...]
    ramp: int
    penalty: float
    initial: int | None = None
    anchor: str = "now"
    users: tuple[str, ...] = ("root",)
    observed: ObservedSource | None = None


@dataclass(frozen=True)
class Replicas:
    """How the loop tells the apps' replicas their capacity, and how long it waits for them to leave.

    Attributes:
        drain_seconds: At most this long a commit waits for an app's replicas to leave the reservations that a
            shrink deletes (less than a slot, so that every shrink lands in the slot the plan makes it in).
        capacity_file: Written whole by every committing cycle (JSON; Prometheus text for a name ending in
            ``.prom``, for node_exporter's textfile collector); None: not written.
        scale_command: Run by every committing cycle with the capacity JSON on stdin; None: not run.
        scale_timeout: Seconds the scale command may take.
    """

    drain_seconds: float = DRAIN_SECONDS
    capacity_file: str | None = None
    scale_command: tuple[str, ...] | None = None
    scale_timeout: float = SCALE_TIMEOUT


@dataclass(frozen=True)
class SlurmConfig:
    """The whole configuration (see the module docstring for the file).

    Attributes:
        source: The file it came from.
        partitions: GPU partitions read (empty: every partition).
        gres: Gres name of a GPU.
        gpu_type: When set, a node or job with another GPU type is reported and left alone.
        node_size: GPUs per node (0: the most common count among the nodes).
        cpus_per_gpu: Cores a reservation takes per GPU.
        owned_partitions: Pending jobs in these partitions are the allocator's.
        owned_qos: ... or in these QOS.
        owned_comment_tag: ... or whose comment holds this word.
        slots: Horizon T.
        slot_minutes: Minutes per slot.
        decay: Per-slot decay.
        rules: Workload rules, first match wins.
        default_type: Type when no rule matches (None: such a job is reported).
        apps: Real-time apps.
        bin_dir: Folder of Slurm's tools ("" : PATH).
        timeout: Seconds per Slurm command.
        retries: Tries per Slurm command.
        confirm: Seconds a released job may take to start before the cycle holds it again.
        state_dir: Folder of the lock files that keep to one writer per cluster (:mod:`agents.slurm.lock`).
        reservation_minutes: Length of a real-time reservation (renewed when less than a slot is left).
        reservation_prefix: Prefix of the reservation names.
        day_start: Seconds after 00:00 UTC at which slot 0 of a day begins (``horizon.day_start``).
        day_slots: Slots in a day (``horizon.day_slots``; default a day of 24 hours).
        history_dir: Folder in which the loop records each day (None: nothing is recorded or read).
        history_days: Past days the live planner reads from ``history_dir``, the newest first.
        replicas: How the apps' replicas are told their capacity and drained (``replicas``).
    """

    source: str
    partitions: tuple[str, ...] = ()
    gres: str = "gpu"
    gpu_type: str | None = None
    node_size: int = 0
    cpus_per_gpu: int = 1
    owned_partitions: tuple[str, ...] = ()
    owned_qos: tuple[str, ...] = ()
    owned_comment_tag: str | None = None
    slots: int = 24
    slot_minutes: float = 60.0
    decay: float = 1.0
    rules: tuple[WorkloadRule, ...] = ()
    default_type: JobType | None = None
    apps: tuple[RealtimeApp, ...] = ()
    bin_dir: str = ""
    timeout: float = 30.0
    retries: int = 3
    confirm: float = 20.0
    state_dir: str = STATE_DIR
    reservation_minutes: float = 0.0  # 0: the horizon
    reservation_prefix: str = RESERVATION_PREFIX
    day_start: float = 0.0
    day_slots: int = 24
    history_dir: str | None = None
    history_days: int = HISTORY_DAYS
    replicas: Replicas = field(default_factory=Replicas)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def reservation_name(self, app: str, node: str) -> str:
        """The Slurm reservation of one app on one node: ``gpualloc-<app>.<node>``."""
        return f"{self.reservation_prefix}{app}.{node}"

    def piece_name(self, app: str, node: str, k: int) -> str:
        """The app's ``k``-th reservation on a node (from 1): ``gpualloc-<app>.<node>``, then ``...~2``, ``~3``."""
        base = self.reservation_name(app, node)
        return base if k == 1 else f"{base}{PIECE_MARK}{k}"

    def shared_name(self, split: Sequence[tuple[str, int]], node: str, k: int) -> str:
        """A reservation that apps share on a node, their GPUs in it by name: ``gpualloc-chat:2+search:3.<node>``.

        ``~k`` follows from the second one on, as for an app's own (:meth:`piece_name`).
        """
        base = f"{self.reservation_prefix}{'+'.join(f'{a}{SHARE_MARK}{g}' for a, g in split)}.{node}"
        return base if k == 1 else f"{base}{PIECE_MARK}{k}"

    def shared_of(self, name: str, node: str) -> tuple[dict[str, int], int] | None:
        """The apps' GPUs in a shared reservation on ``node`` and its ``k`` (1, 2, ...), or None when it is none."""
        head, k = name, 1
        stem, mark, tail = name.rpartition(PIECE_MARK)
        if mark and tail.isdigit() and int(tail) >= 2 and str(int(tail)) == tail:
            head, k = stem, int(tail)
        suffix = f".{node}"
        if not head.startswith(self.reservation_prefix) or not head.endswith(suffix):
            return None
        apps = {a.name for a in self.apps}
        split: dict[str, int] = {}
        for part in head[len(self.reservation_prefix) : -len(suffix)].split("+"):
            app, mark, gpus = part.partition(SHARE_MARK)
            if not mark or app not in apps or app in split or not gpus.isdigit() or str(int(gpus)) != gpus:
                return None
            split[app] = int(gpus)
        return (split, k) if len(split) >= 2 else None

    def piece_of(self, name: str, app: str, node: str) -> int | None:
        """Which of the app's reservations on the node ``name`` is (1, 2, ...), or None when it is none of them."""
        base = self.reservation_name(app, node)
        if name == base:
            return 1
        head, mark, k = name.rpartition(PIECE_MARK)
        if head == base and mark and k.isdigit() and int(k) >= 2 and str(int(k)) == k:
            return int(k)
        return None

    @property
    def slot_seconds(self) -> float:
        """Seconds per slot."""
        return self.slot_minutes * 60.0

    def owns(self, partition: str, qos: str, comment: str) -> bool:
        """Whether a pending job with these fields is the allocator's (the ownership rule)."""
        if partition in self.owned_partitions or (qos and qos in self.owned_qos):
            return True
        return self.owned_comment_tag is not None and self.owned_comment_tag in comment.split()


# ----------------------------------------------------------------------------- reading


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, reason: str) -> ConfigError:
        return ConfigError(self.source, path, reason)

    def mapping(self, value: Any, path: str, keys: set[str], required: set[str] = frozenset()) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping, got {_kind(value)}")
        for key in value:
            if key not in keys:
                raise self.fail(
                    f"{path}.{key}" if path else str(key), f"unknown key (expected one of: {', '.join(sorted(keys))})"
                )
        for key in sorted(required):
            if key not in value:
                raise self.fail(f"{path}.{key}" if path else key, "missing")
        return value

    def integer(self, value: Any, path: str, minimum: int, maximum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {_kind(value)}")
        if not minimum <= value <= maximum:
            raise self.fail(path, f"expected an integer in {minimum}..{maximum}, got {value}")
        return value

    def real(self, value: Any, path: str, minimum: float, maximum: float, *, open_low: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.fail(path, f"expected a number, got {_kind(value)}")
        if value > maximum or value < minimum or (open_low and value <= minimum):
            low = f"> {minimum:g}" if open_low else f">= {minimum:g}"
            raise self.fail(path, f"expected a number {low} and <= {maximum:g}, got {value}")
        return float(value)

    def text(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"expected a non-empty string, got {_kind(value)}")
        return value

    def names(self, value: Any, path: str) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list of names, got {_kind(value)}")
        return tuple(self.text(v, f"{path}[{i}]") for i, v in enumerate(value))

    def job_type(self, value: Any, path: str) -> JobType:
        try:
            return JobType(value)
        except ValueError:
            raise self.fail(path, f"expected one of {', '.join(t.value for t in JobType)}, got {value!r}") from None


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, int | float):
        return f"the number {value}"
    return f"a {type(value).__name__}"


def load_config(path: str | os.PathLike[str]) -> SlurmConfig:
    """Read and check a configuration file.

    Raises:
        ConfigError: The file is missing, not YAML, or breaks the format (naming the field).
    """
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(source, "(file)", exc.strerror or str(exc)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f"line {line + 1}" if line is not None else "(file)"
        raise ConfigError(source, where, f"not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    return config_from_dict(data, source)


def config_from_dict(data: Any, source: str = "<config>") -> SlurmConfig:
    """A configuration from plain data, checked like a file."""
    r = _Reader(source)
    top = r.mapping(
        data, "", {"slurm", "owned", "horizon", "workloads", "realtime", "reservations", "replicas"}, {"owned"}
    )
    slurm = _slurm_section(r, top)
    owned_partitions, owned_qos, tag = _owned(r, top)
    horizon = r.mapping(
        top.get("horizon", {}) or {}, "horizon", {"slots", "slot_minutes", "decay", "day_start", "day_slots"}
    )
    slots = r.integer(horizon.get("slots", 24), "horizon.slots", 1, MAX_SLOTS)
    slot_minutes = r.real(horizon.get("slot_minutes", 60), "horizon.slot_minutes", 0.0, 10_080, open_low=True)
    day_start, day_slots = _day(r, horizon, slot_minutes)
    rules, default_type = _workloads(r, top)
    apps = _realtime(r, top, slots)
    res, prefix = _reservations(r, top)
    gpu_type = slurm.get("gpu_type")
    return SlurmConfig(
        source=source,
        partitions=r.names(slurm.get("partitions", []), "slurm.partitions"),
        gres=r.text(slurm.get("gres", "gpu"), "slurm.gres"),
        gpu_type=None if gpu_type is None else r.text(gpu_type, "slurm.gpu_type"),
        node_size=r.integer(slurm.get("node_size", 0), "slurm.node_size", 0, 16_384),
        cpus_per_gpu=r.integer(slurm.get("cpus_per_gpu", 1), "slurm.cpus_per_gpu", 1, 4096),
        owned_partitions=owned_partitions,
        owned_qos=owned_qos,
        owned_comment_tag=tag,
        slots=slots,
        slot_minutes=slot_minutes,
        decay=r.real(horizon.get("decay", 1.0), "horizon.decay", 0.0, 1.0, open_low=True),
        rules=rules,
        default_type=default_type,
        apps=apps,
        bin_dir=r.text(slurm["bin"], "slurm.bin") if "bin" in slurm else "",
        timeout=r.real(slurm.get("timeout", 30), "slurm.timeout", 0.0, 3600, open_low=True),
        retries=r.integer(slurm.get("retries", 3), "slurm.retries", 1, 100),
        confirm=r.real(slurm.get("confirm", 20), "slurm.confirm", 0.0, 3600),
        state_dir=r.text(slurm.get("state_dir", STATE_DIR), "slurm.state_dir"),
        reservation_minutes=r.real(res.get("minutes", 0), "reservations.minutes", 0.0, 10_080 * 60),
        reservation_prefix=prefix,
        day_start=day_start,
        day_slots=day_slots,
        history_dir=r.text(slurm["history_dir"], "slurm.history_dir") if "history_dir" in slurm else None,
        history_days=r.integer(slurm.get("history_days", HISTORY_DAYS), "slurm.history_days", 1, 366),
        replicas=_replicas(r, top, slot_minutes * 60.0),
    )


def _slurm_section(r: _Reader, top: dict[str, Any]) -> dict[str, Any]:
    """``slurm``: the mapping, its keys checked (its values are read with the rest of the configuration).

    Args:
        r: The reader of the configuration's source.
        top: The configuration's top-level mapping.

    Returns:
        The ``slurm`` mapping (empty when absent).
    """
    return r.mapping(
        top.get("slurm", {}) or {},
        "slurm",
        {
            "partitions",
            "gres",
            "gpu_type",
            "node_size",
            "cpus_per_gpu",
            "bin",
            "timeout",
            "retries",
            "confirm",
            "state_dir",
            "history_dir",
            "history_days",
        },
    )


def _owned(r: _Reader, top: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...], str | None]:
    """``owned``: the partitions, QOS and comment tag that make a pending job the allocator's.

    Args:
        r: The reader of the configuration's source.
        top: The configuration's top-level mapping.

    Returns:
        The owned partitions, the owned QOS and the comment tag (None when not given).
    """
    owned = r.mapping(top["owned"] or {}, "owned", {"partitions", "qos", "comment_tag"})
    owned_partitions = r.names(owned.get("partitions", []), "owned.partitions")
    owned_qos = r.names(owned.get("qos", []), "owned.qos")
    tag = owned.get("comment_tag")
    tag = None if tag is None else r.text(tag, "owned.comment_tag")
    if not owned_partitions and not owned_qos and tag is None:
        raise r.fail(
            "owned", "name at least one partition, QOS or comment_tag: the allocator touches only its own jobs"
        )
    return owned_partitions, owned_qos, tag


def _day(r: _Reader, horizon: dict[str, Any], slot_minutes: float) -> tuple[float, int]:
    """``horizon.day_start`` and ``horizon.day_slots``: when the day's slot 0 begins, and the slots in a day.

    Args:
        r: The reader of the configuration's source.
        horizon: The ``horizon`` mapping.
        slot_minutes: Minutes per slot (a day's default slots: 24 hours of them).

    Returns:
        Seconds after 00:00 UTC at which a day's slot 0 begins, and the slots in a day.
    """
    day_start = _clock_time(r, horizon.get("day_start", "00:00"), "horizon.day_start")
    if "day_slots" in horizon:
        day_slots = r.integer(horizon["day_slots"], "horizon.day_slots", 1, 10_000_000)
    else:  # a day of 24 hours, in whole slots
        day_slots = max(1, round(DAY_SECONDS / (slot_minutes * 60.0)))
    return day_start, day_slots


def _workloads(r: _Reader, top: dict[str, Any]) -> tuple[tuple[WorkloadRule, ...], JobType | None]:
    """``workloads``: the rules that type the jobs, and the type of a job that none matches.

    Args:
        r: The reader of the configuration's source.
        top: The configuration's top-level mapping.

    Returns:
        The rules, in order, and the default type (None when not given).
    """
    workloads = r.mapping(top.get("workloads", {}) or {}, "workloads", {"rules", "default_type"})
    raw_rules = workloads.get("rules", []) or []
    if not isinstance(raw_rules, list):
        raise r.fail("workloads.rules", f"expected a list, got {_kind(raw_rules)}")
    rules = tuple(_rule(r, rule, f"workloads.rules[{i}]") for i, rule in enumerate(raw_rules))
    default_type = workloads.get("default_type")
    default_type = None if default_type is None else r.job_type(default_type, "workloads.default_type")
    return rules, default_type


def _rule(r: _Reader, value: Any, path: str) -> WorkloadRule:
    """``workloads.rules[i]``: the keys a job must match, and the type (and priority) it then gets.

    Args:
        r: The reader of the configuration's source.
        value: The rule as read.
        path: Its place in the file, for the errors.

    Returns:
        The rule.
    """
    rule = r.mapping(value, path, {"partition", "qos", "comment", "type", "priority"}, {"type"})
    if not any(k in rule for k in ("partition", "qos", "comment")):
        raise r.fail(path, "give at least one of partition, qos, comment to match")
    return WorkloadRule(
        type=r.job_type(rule["type"], f"{path}.type"),
        partition=r.text(rule["partition"], f"{path}.partition") if "partition" in rule else None,
        qos=r.text(rule["qos"], f"{path}.qos") if "qos" in rule else None,
        comment=r.text(rule["comment"], f"{path}.comment") if "comment" in rule else None,
        priority=r.real(rule["priority"], f"{path}.priority", 0.0, MAX_WEIGHT, open_low=True)
        if "priority" in rule
        else None,
    )


def _realtime(r: _Reader, top: dict[str, Any], slots: int) -> tuple[RealtimeApp, ...]:
    """``realtime``: the real-time apps, each named once.

    Args:
        r: The reader of the configuration's source.
        top: The configuration's top-level mapping.
        slots: The horizon's slots (an ``anchor: now`` forecast covers them).

    Returns:
        The apps, in order.
    """
    raw_apps = top.get("realtime", []) or []
    if not isinstance(raw_apps, list):
        raise r.fail("realtime", f"expected a list, got {_kind(raw_apps)}")
    seen: set[str] = set()
    return tuple(_app(r, app, f"realtime[{i}]", slots, seen) for i, app in enumerate(raw_apps))


def _app(r: _Reader, value: Any, path: str, slots: int, seen: set[str]) -> RealtimeApp:
    """``realtime[i]``: one real-time app, its forecast checked against the horizon.

    Args:
        r: The reader of the configuration's source.
        value: The app as read.
        path: Its place in the file, for the errors.
        slots: The horizon's slots (an ``anchor: now`` forecast covers them).
        seen: The names of the apps read before it; its own is added.

    Returns:
        The app.
    """
    app = r.mapping(
        value,
        path,
        {"name", "demand", "ramp", "penalty", "initial", "anchor", "users", "observed"},
        {"name", "demand", "ramp"},
    )
    name = r.text(app["name"], f"{path}.name")
    if not set(name) <= NAME_OK:
        raise r.fail(f"{path}.name", f"expected letters, digits, '_' or '-', got {name!r}")
    if name in seen:
        raise r.fail(f"{path}.name", f"duplicate app {name!r}")
    seen.add(name)
    demand = app["demand"]
    if not isinstance(demand, list) or not demand:
        raise r.fail(f"{path}.demand", f"expected a non-empty list of GPU counts, got {_kind(demand)}")
    values = tuple(r.integer(d, f"{path}.demand[{t}]", 0, 16_384) for t, d in enumerate(demand))
    anchor = app.get("anchor", "now")
    if anchor not in ("now", "day"):
        raise r.fail(f"{path}.anchor", f"expected 'now' or 'day', got {anchor!r}")
    if anchor == "now" and len(values) < slots:
        raise r.fail(f"{path}.demand", f"expected at least horizon.slots = {slots} values, got {len(values)}")
    return RealtimeApp(
        name=name,
        demand=values,
        ramp=r.integer(app["ramp"], f"{path}.ramp", 0, 16_384),
        penalty=r.real(app.get("penalty", 1.0), f"{path}.penalty", 0.0, MAX_WEIGHT),
        initial=r.integer(app["initial"], f"{path}.initial", 0, 16_384) if "initial" in app else None,
        anchor=anchor,
        users=r.names(app.get("users", ["root"]), f"{path}.users"),
        observed=_observed(r, app["observed"], f"{path}.observed") if "observed" in app else None,
    )


def _reservations(r: _Reader, top: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``reservations``: the mapping, and the prefix of the reservation names, checked.

    Args:
        r: The reader of the configuration's source.
        top: The configuration's top-level mapping.

    Returns:
        The ``reservations`` mapping (its ``minutes`` read with the rest of the configuration) and the prefix.
    """
    res = r.mapping(top.get("reservations", {}) or {}, "reservations", {"prefix", "minutes"})
    prefix = r.text(res.get("prefix", RESERVATION_PREFIX), "reservations.prefix")
    if not set(prefix) <= NAME_OK:
        raise r.fail("reservations.prefix", f"expected letters, digits, '_' or '-', got {prefix!r}")
    return res, prefix


def _replicas(r: _Reader, top: dict[str, Any], slot_seconds: float) -> Replicas:
    """``replicas``: the drain time (shorter than a slot), the capacity file and the scale command."""
    rep = r.mapping(
        top.get("replicas", {}) or {}, "replicas", {"drain_seconds", "capacity_file", "scale_command", "scale_timeout"}
    )
    drain = r.real(
        rep.get("drain_seconds", min(DRAIN_SECONDS, slot_seconds / 2)), "replicas.drain_seconds", 0.0, 86_400
    )
    if drain >= slot_seconds:
        raise r.fail(
            "replicas.drain_seconds",
            f"expected less than a slot ({slot_seconds:g} s), got {drain:g}: a shrink must land in the slot the "
            "plan makes it in",
        )
    command = rep.get("scale_command")
    return Replicas(
        drain_seconds=drain,
        capacity_file=r.text(rep["capacity_file"], "replicas.capacity_file") if "capacity_file" in rep else None,
        scale_command=None if command is None else _command(r, command, "replicas.scale_command"),
        scale_timeout=r.real(
            rep.get("scale_timeout", SCALE_TIMEOUT), "replicas.scale_timeout", 0.0, 3600, open_low=True
        ),
    )


def _observed(r: _Reader, value: Any, path: str) -> ObservedSource:
    """``realtime[].observed``: ``{command: CMD}`` or ``{prometheus: {url: URL, query: Q}}``, with ``timeout``."""
    source = r.mapping(value, path, {"command", "prometheus", "timeout"})
    given = [k for k in ("command", "prometheus") if k in source]
    if len(given) != 1:
        got = "both" if given else "neither"
        raise r.fail(path, f"expected exactly one of command, prometheus, got {got}")
    timeout = r.real(source.get("timeout", OBSERVE_TIMEOUT), f"{path}.timeout", 0.0, 3600, open_low=True)
    if "command" in source:
        return ObservedSource(command=_command(r, source["command"], f"{path}.command"), timeout=timeout)
    prom = r.mapping(source["prometheus"], f"{path}.prometheus", {"url", "query"}, {"url", "query"})
    url = r.text(prom["url"], f"{path}.prometheus.url")
    scheme, _, rest = url.partition("://")
    if scheme not in ("http", "https") or not rest.strip("/") or any(c.isspace() for c in url) or "?" in url:
        raise r.fail(f"{path}.prometheus.url", f"expected an http:// or https:// URL without a query, got {url!r}")
    query = r.text(prom["query"], f"{path}.prometheus.query")
    if not query.strip():
        raise r.fail(f"{path}.prometheus.query", "expected a PromQL query, got only blanks")
    return ObservedSource(url=url.rstrip("/"), query=query, timeout=timeout)


def _command(r: _Reader, value: Any, path: str) -> tuple[str, ...]:
    """A command as a string (split as a shell would, none run) or a list of its words."""
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise r.fail(path, f"cannot split {value!r} into words: {exc}") from None
    elif isinstance(value, list):
        words = [r.text(w, f"{path}[{i}]") for i, w in enumerate(value)]
    else:
        raise r.fail(path, f"expected a command (a string or a list of words), got {_kind(value)}")
    if not words:
        raise r.fail(path, "expected a command, got no words")
    return tuple(words)


def _clock_time(r: _Reader, value: Any, path: str) -> float:
    """``"HH:MM"`` or ``"HH:MM:SS"`` (UTC) as seconds after midnight."""
    if isinstance(value, str):
        parts = value.split(":")
        if 2 <= len(parts) <= 3 and all(p.isdigit() and len(p) == 2 for p in parts):
            h, m, sec = (int(p) for p in (*parts, "00")[:3])
            if h < 24 and m < 60 and sec < 60:
                return float(3600 * h + 60 * m + sec)
    raise r.fail(path, f"expected a UTC time of day as 'HH:MM' or 'HH:MM:SS', got {_kind(value)}")
