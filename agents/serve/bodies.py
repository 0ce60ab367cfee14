"""Request bodies of ``gpualloc serve``: read, parsed and checked with the same rules and words as the CLI.

A body is one JSON object. Its own keys (the envelope: ``scenario``, ``scheduler``,
``options``, ...) are checked here; everything inside a scenario, a cluster state
or a plan is checked by the readers the command line uses
(:func:`gpu_env.scenario.scenario_from_dict`, :meth:`gpu_env.plan.Plan.from_dict`),
so a field the CLI refuses is refused here with the same words. Every refusal is
a :class:`~gpu_env.scenario.ScenarioError` whose ``source`` names the part of the
request (``request``, ``scenario``, ``state`` or ``plan``) where the CLI names the file:

    scenario: jobs[0].gpus: expected a positive integer, got 0
    request: options.time_limit: expected a number <= 60 (this server's --max-time-limit), got 600

A scenario (or state) is a JSON object in the scenario format, or a string holding
the text of a scenario file: YAML, or JSON when it starts with ``{``. A plan is a
JSON object in the plan format, or a string holding its JSON.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from agents.options import Guard, PlanOptions
from agents.registry import SCHEDULERS
from agents.serve.settings import Limits
from gpu_env.plan import Plan
from gpu_env.scenario import MAX_JOBS, FieldReader, Scenario, ScenarioError, parse_text, scenario_from_dict

REQUEST = "request"
"""The ``source`` of an error in the body's own keys (the CLI names a file there)."""

OPTION_KEYS = ("time_limit", "deterministic_time", "workers", "seed", "samples", "guard")
"""The :class:`~agents.options.PlanOptions` fields a request may set; ``policy`` is the server's (``--policy``)."""

MAX_SEED = 2**31 - 1  # CP-SAT's random_seed is a 32-bit integer


def parse_body(raw: bytes) -> Mapping[str, Any]:
    """The body's JSON object.

    Raises:
        ScenarioError: Not UTF-8, not JSON, or not an object (source ``request``).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(REQUEST, "<body>", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    data = parse_text(text, REQUEST, json_only=True)
    if not isinstance(data, Mapping):
        FieldReader(REQUEST).mapping(data, "", set(), set())  # raises, naming what the body is
    return data


def envelope(data: Mapping[str, Any], allowed: set[str], required: set[str]) -> Mapping[str, Any]:
    """The body's keys checked: only ``allowed``, every ``required``."""
    return FieldReader(REQUEST).mapping(data, "", allowed, required)


def read_scenario(value: Any, source: str = "scenario") -> Scenario:
    """A scenario from a JSON object or the text of a scenario file, checked like a file.

    Raises:
        ScenarioError: The same refusal, in the same words, as ``gpualloc plan FILE``, with ``source`` as the file.
    """
    if isinstance(value, str):
        value = parse_text(value, source, json_only=value.lstrip().startswith("{"))
    return scenario_from_dict(value, source)


STATE_KEYS = {
    "gpus",
    "horizon",
    "running",
    "queue",
    "apps",
    "node_size",
    "decay",
    "slot_minutes",
    "value_scale",
    "name",
    "error_level",
    "day_forecast",
    "observed",
}
"""The fields of :class:`agents.live.allocator.ClusterState`: the other form of ``/v1/decide``'s ``state``."""


def read_state(value: Any, source: str = "state") -> tuple[Scenario, tuple[str, ...]]:
    """A cluster state: the scenario form (slot 0 = now) or the :class:`~agents.live.allocator.ClusterState` form.

    The ClusterState form is ``{"gpus", "horizon", "running": [{"job", "gpus", "remaining"}], "queue": [jobs],
    "apps": [apps], ...}`` with jobs and apps as in a scenario file. It is told from the scenario form by its
    ``gpus`` key (a scenario has ``cluster``). Its jobs and apps are checked by the scenario reader and refused
    under their own names (``queue[2].gpus``, ``running[0].job.priority``, ``apps[0].ramp``).

    Returns:
        The state as a scenario whose slot 0 is now, and the queued jobs left out as expired (their deadline
        can no longer be met).
    """
    if isinstance(value, str):
        value = parse_text(value, source, json_only=value.lstrip().startswith("{"))
    if not isinstance(value, Mapping) or "gpus" not in value:
        return scenario_from_dict(value, source), ()
    from agents.live.allocator import ClusterState, RunningJob

    r = FieldReader(source)
    data = r.mapping(value, "", STATE_KEYS, {"gpus", "horizon"})
    running = data.get("running") or []
    queue = data.get("queue") or []
    for key, items in (("running", running), ("queue", queue)):
        if not isinstance(items, list):
            raise r.fail(key, f"expected a list, got {type(items).__name__}")
    r.count(running, "running", MAX_JOBS, "jobs")
    entries = [
        r.mapping(e, f"running[{i}]", {"job", "gpus", "remaining"}, {"job", "gpus", "remaining"})
        for i, e in enumerate(running)
    ]
    probe = {  # the jobs and apps checked by the scenario reader, their errors renamed to this form's fields
        "name": data.get("name", "now"),
        "cluster": {"gpus": data["gpus"], **({"node_size": data["node_size"]} if data.get("node_size") else {})},
        "horizon": {
            k: data[v]
            for k, v in (("slots", "horizon"), ("decay", "decay"), ("slot_minutes", "slot_minutes"))
            if v in data
        },
        "realtime": data.get("apps") or [],
        "jobs": [*queue, *(e["job"] for e in entries)],
    }
    try:
        checked = scenario_from_dict(probe, source)
    except ScenarioError as exc:
        raise ScenarioError(source, _state_field(exc.field, len(queue)), exc.reason) from None
    scale = r.number(data.get("value_scale", 1.0), "value_scale", positive=True)
    levels = data.get("error_level") or []
    if not isinstance(levels, list):
        raise r.fail("error_level", f"expected a list, got {type(levels).__name__}")
    error_level = tuple(r.number(x, f"error_level[{i}]", minimum=0.0) for i, x in enumerate(levels))
    curves = {}
    for key in ("day_forecast", "observed"):
        rows = data.get(key) or []
        if not isinstance(rows, list):
            raise r.fail(key, f"expected a list (one list per app), got {type(rows).__name__}")
        if rows and len(rows) != len(checked.apps):
            raise r.fail(key, f"expected one list per app ({len(checked.apps)}), got {len(rows)}")
        curves[key] = tuple(tuple(r.int_list(row, f"{key}[{i}]")) for i, row in enumerate(rows))
        lengths = {len(row) for row in curves[key]}
        if len(lengths) > 1:
            raise r.fail(key, f"expected lists of one length (one slot each), got lengths {sorted(lengths)}")
    jobs = checked.jobs
    state = ClusterState(
        gpus=checked.gpus,
        horizon=checked.slots,
        running=tuple(
            RunningJob(
                jobs[len(queue) + i],
                tuple(r.int_list(e["gpus"], f"running[{i}].gpus")),
                r.integer(e["remaining"], f"running[{i}].remaining", 1),
            )
            for i, e in enumerate(entries)
        ),
        queue=jobs[: len(queue)],
        apps=checked.apps,
        node_size=checked.node_size,
        decay=checked.decay,
        slot_minutes=checked.slot_minutes,
        value_scale=scale,
        name=checked.name,
        error_level=error_level,
        day_forecast=curves["day_forecast"],
        observed=curves["observed"],
    )
    try:
        return state.to_scenario()
    except ScenarioError as exc:  # running jobs come first there: jobs[i] is running[i]
        field = re.sub(r"^jobs\[(\d+)\]\.running_on", r"running[\1].gpus", exc.field)
        field = re.sub(r"^jobs\[(\d+)\]\.duration", r"running[\1].remaining", field)
        raise ScenarioError(source, field, exc.reason) from None


def _state_field(field: str, queued: int) -> str:
    """A field of the probe scenario as the ClusterState form names it."""
    match = re.match(r"^jobs\[(\d+)\](.*)$", field)
    if match:
        i, rest = int(match.group(1)), match.group(2)
        return f"queue[{i}]{rest}" if i < queued else f"running[{i - queued}].job{rest}"
    for old, new in (("realtime", "apps"), ("cluster.gpus", "gpus"), ("cluster.node_size", "node_size")):
        if field.startswith(old):
            return new + field[len(old) :]
    return {"horizon.slots": "horizon", "horizon.decay": "decay", "horizon.slot_minutes": "slot_minutes"}.get(
        field, field
    )


def read_plan(value: Any, source: str = "plan") -> Plan:
    """A plan from a JSON object or its JSON text, its shape checked like a plan file (not its rules)."""
    if isinstance(value, str):
        value = parse_text(value, source, json_only=True)
    return Plan.from_dict(value, source)


def read_scheduler(value: Any, path: str = "scheduler") -> str:
    """A scheduler's name, one of :data:`agents.registry.SCHEDULERS`."""
    r = FieldReader(REQUEST)
    name = r.string(value, path)
    if name not in SCHEDULERS:
        raise r.fail(path, f"unknown scheduler {name!r} (expected one of: {', '.join(SCHEDULERS)})")
    return name


def read_schedulers(value: Any, path: str = "schedulers") -> list[str]:
    """A non-empty list of distinct scheduler names."""
    r = FieldReader(REQUEST)
    if not isinstance(value, list) or not value:
        raise r.fail(path, f"expected a non-empty list of scheduler names (of: {', '.join(SCHEDULERS)})")
    r.count(value, path, len(SCHEDULERS), "schedulers")
    names = [read_scheduler(v, f"{path}[{i}]") for i, v in enumerate(value)]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise r.fail(f"{path}[{i}]", f"duplicate scheduler {name!r}")
    return names


def read_options(value: Any, limits: Limits, path: str = "options") -> PlanOptions:
    """Plan options from ``{"time_limit": ..., ...}`` (each optional), within this server's limits.

    The reasons are the CLI's for the same options (``--time-limit``: "expected a positive number").
    """
    r = FieldReader(REQUEST)
    data = {} if value is None else r.mapping(value, path, set(OPTION_KEYS), set())
    fields: dict[str, Any] = {"time_limit": limits.default_time_limit}
    if "time_limit" in data:
        fields["time_limit"] = _positive(r, data["time_limit"], f"{path}.time_limit")
        if fields["time_limit"] > limits.max_time_limit:
            raise r.fail(
                f"{path}.time_limit",
                f"expected a number <= {limits.max_time_limit:g} (this server's --max-time-limit), "
                f"got {fields['time_limit']:g}",
            )
    if data.get("deterministic_time") is not None:
        fields["deterministic_time"] = _positive(r, data["deterministic_time"], f"{path}.deterministic_time")
    if "workers" in data:
        fields["workers"] = _bounded(r, data["workers"], f"{path}.workers", limits.max_workers, "--max-workers")
    if "seed" in data:
        fields["seed"] = r.integer(data["seed"], f"{path}.seed", 0, MAX_SEED)
    if "samples" in data:
        fields["samples"] = _bounded(r, data["samples"], f"{path}.samples", limits.max_samples, "limit")
    if "guard" in data:
        guard = data["guard"]
        if guard not in [g.value for g in Guard]:
            raise r.fail(f"{path}.guard", f"expected one of {', '.join(Guard)}, got {_shown(guard)}")
        fields["guard"] = Guard(guard)
    return PlanOptions(**fields)


def _bounded(r: FieldReader, value: Any, path: str, maximum: int, option: str) -> int:
    number = r.integer(value, path, 1)
    if number > maximum:
        what = "this server's limit" if option == "limit" else f"this server's {option}"
        raise r.fail(path, f"expected at most {maximum} ({what}), got {number}")
    return number


def _positive(r: FieldReader, value: Any, path: str) -> float:
    number = r.number(value, path)
    if not number > 0 or not math.isfinite(number):
        raise r.fail(path, f"expected a positive number, got {number:g}")
    return number


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
