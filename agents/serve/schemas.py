"""The OpenAPI schemas of the service (``/docs``, ``/openapi.json``), generated from the project's own types.

The schemas document; they do not check. A request is checked by the project's
readers (:mod:`agents.serve.bodies`), so there is one definition of the rules and
the 422s speak the CLI's words. The models here take their names, choices and
limits from the project: :class:`~gpu_env.scenario.JobType`, the format's limits
(``MAX_GPUS``, ...), :class:`~agents.options.Guard` and the fields of
:class:`~agents.options.PlanOptions`, the scheduler names of
:data:`agents.registry.SCHEDULERS`, :class:`~gpu_env.metrics.Metrics`, and
:class:`~gpu_env.plan.Placement`. ``tests/test_serve_api.py`` checks that every
key the scenario reader accepts is in these models and no other.
"""

from __future__ import annotations

import dataclasses
import typing
from enum import Enum
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.json_schema import models_json_schema

from agents.options import Guard, PlanOptions
from agents.registry import SCHEDULERS
from agents.serve.bodies import MAX_SEED, OPTION_KEYS
from gpu_env.metrics import Metrics
from gpu_env.scenario import MAX_APPS, MAX_GPUS, MAX_JOBS, MAX_SLOTS, MAX_WEIGHT, JobType

SchedulerName = Enum("SchedulerName", {name: name for name in SCHEDULERS}, type=str)  # type: ignore[misc]

_STRICT = ConfigDict(extra="forbid")


class Cluster(BaseModel):
    """``cluster`` of a scenario."""

    model_config = _STRICT
    gpus: int = Field(ge=1, le=MAX_GPUS, description="G")
    node_size: int | None = Field(None, ge=1, le=MAX_GPUS, description="GPUs per node (default G)")


class Horizon(BaseModel):
    """``horizon`` of a scenario."""

    model_config = _STRICT
    slots: int = Field(ge=1, le=MAX_SLOTS, description="T")
    slot_minutes: float = Field(60.0, gt=0, description="informative")
    decay: float = Field(1.0, gt=0, le=1, description="a GPU-slot at slot t is worth decay**t")


class RealtimeApp(BaseModel):
    """One real-time application."""

    model_config = _STRICT
    name: str
    demand: list[int] = Field(description="D_t, length T, each at most MAX_GPUS")
    ramp: int = Field(ge=0, le=MAX_GPUS)
    initial: int | None = Field(None, ge=0, le=MAX_GPUS, description="default D_0")
    penalty: float = Field(ge=0, le=MAX_WEIGHT)
    forecast: list[int] | None = Field(
        None, description="a recorded day's: the forecast made before the day, length T (demand is then what came)"
    )


class JobEntry(BaseModel):
    """One job."""

    model_config = _STRICT
    id: str
    type: JobType
    gpus: int = Field(ge=1, le=MAX_GPUS)
    duration: int = Field(ge=1, le=MAX_SLOTS)
    release: int = Field(0, ge=0, le=MAX_SLOTS)
    priority: float = Field(1.0, gt=0, le=MAX_WEIGHT)
    deadline: int | None = Field(None, ge=1, le=MAX_SLOTS)
    value: float | None = Field(None, gt=0, description="at most MAX_WEIGHT x gpus x duration")
    running_on: list[int] | None = Field(None, description="already running on these GPUs (a block)")
    runtime: int | None = Field(
        None, ge=1, le=MAX_SLOTS, description="the slots it actually ran (a recorded day; at most its duration)"
    )


class ScenarioDocument(BaseModel):
    """A scenario in the file format of docs/SPEC.md section 1."""

    model_config = _STRICT
    name: str
    cluster: Cluster
    horizon: Horizon
    realtime: list[RealtimeApp] = Field(default_factory=list, max_length=MAX_APPS)
    jobs: list[JobEntry] = Field(default_factory=list, max_length=MAX_JOBS)
    family: str | None = None
    seed: int | None = None


_OPTION_FIELDS = {f.name: f for f in dataclasses.fields(PlanOptions)}
_OPTION_TYPES: dict[str, Any] = {
    "time_limit": (float, Field(_OPTION_FIELDS["time_limit"].default, gt=0)),
    "deterministic_time": (float | None, Field(None, gt=0)),
    "workers": (int, Field(_OPTION_FIELDS["workers"].default, ge=1)),
    "seed": (int, Field(_OPTION_FIELDS["seed"].default, ge=0, le=MAX_SEED)),
    "samples": (int, Field(_OPTION_FIELDS["samples"].default, ge=1)),
    "guard": (Guard, Field(_OPTION_FIELDS["guard"].default)),
}
Options = create_model(
    "Options",
    __config__=_STRICT,
    __doc__="PlanOptions fields a request may set (the server's --max-* options bound them; policy is the server's).",
    **{name: _OPTION_TYPES[name] for name in OPTION_KEYS},
)

ScenarioOrText = ScenarioDocument | str


class PlacementEntry(BaseModel):
    """One placement of a plan."""

    job: str
    start: int
    gpus: list[int]


MetricsDocument = create_model(
    "Metrics",
    __doc__="The metrics of docs/SPEC.md section 3.",
    **{name: (kind, ...) for name, kind in typing.get_type_hints(Metrics).items()},
)


class PlanDocument(BaseModel):
    """A plan: exactly what ``gpualloc plan`` writes (docs/SPEC.md section 2)."""

    scenario: str = ""
    scheduler: str = ""
    placements: list[PlacementEntry]
    realtime: dict[str, list[int]] = Field(default_factory=dict)
    metrics: MetricsDocument | None = None  # type: ignore[valid-type]
    solve_ms: float | None = None
    info: dict[str, Any] = Field(default_factory=dict)


class PlanRequest(BaseModel):
    """``POST /v1/plan``."""

    model_config = _STRICT
    scenario: ScenarioOrText = Field(description="a scenario object, or a scenario file's text (YAML or JSON)")
    scheduler: SchedulerName  # type: ignore[valid-type]
    options: Options | None = None  # type: ignore[valid-type]


class ValidateRequest(BaseModel):
    """``POST /v1/validate``."""

    model_config = _STRICT
    scenario: ScenarioOrText
    plan: PlanDocument | str


class RunningEntry(BaseModel):
    """A job that holds GPUs now (``agents.live.RunningJob``)."""

    model_config = _STRICT
    job: JobEntry
    gpus: list[int] = Field(description="the block it holds")
    remaining: int = Field(ge=1, description="slots it still runs, now included")


class ClusterStateDocument(BaseModel):
    """``agents.live.ClusterState``: what a cluster manager knows at the start of a slot."""

    model_config = _STRICT
    gpus: int = Field(ge=1, le=MAX_GPUS)
    horizon: int = Field(ge=1, le=MAX_SLOTS, description="slots planned ahead, now included")
    running: list[RunningEntry] = Field(default_factory=list)
    queue: list[JobEntry] = Field(default_factory=list, description="release and deadline count from now")
    apps: list[RealtimeApp] = Field(default_factory=list, description="demand: the forecast; initial: GPUs now")
    node_size: int | None = Field(None, ge=1, le=MAX_GPUS)
    decay: float = Field(1.0, gt=0, le=1)
    slot_minutes: float = Field(60.0, gt=0)
    value_scale: float = Field(1.0, gt=0)
    name: str = "now"
    error_level: list[float] = Field(
        default_factory=list, description="each app's relative forecast error observed so far (RMS)"
    )
    day_forecast: list[list[int]] = Field(
        default_factory=list, description="each app's forecast for the whole day (slots 0..T-1 of the day)"
    )
    observed: list[list[int]] = Field(
        default_factory=list, description="each app's actual demand in the slots of the day before now"
    )


class DecideRequest(BaseModel):
    """``POST /v1/decide``: the cluster state as a scenario whose slot 0 is now (docs/rolling.md)."""

    model_config = _STRICT
    state: ClusterStateDocument | ScenarioOrText = Field(
        description="the ClusterState fields, or a scenario whose slot 0 is now (running jobs with running_on)"
    )
    scheduler: SchedulerName = SchedulerName("greedy")  # type: ignore[valid-type]
    options: Options | None = None  # type: ignore[valid-type]


class CompareRequest(BaseModel):
    """``POST /v1/compare``."""

    model_config = _STRICT
    scenario: ScenarioOrText
    schedulers: list[SchedulerName] = Field(min_length=1, max_length=len(SCHEDULERS))  # type: ignore[valid-type]
    options: Options | None = None  # type: ignore[valid-type]


class Violation(BaseModel):
    """One broken rule."""

    rule: str
    message: str


class ValidateResponse(BaseModel):
    """The answer of ``POST /v1/validate``."""

    valid: bool
    violations: list[Violation]
    metrics: MetricsDocument  # type: ignore[valid-type]
    warnings: list[str]


class StartNow(BaseModel):
    """A queued job to start in this slot."""

    job: str
    gpus: list[int]


class DecideResponse(BaseModel):
    """The answer of ``POST /v1/decide`` (``Decision.to_dict()``)."""

    start_now: list[StartNow]
    realtime_now: dict[str, int]
    expired: list[str]
    waiting: list[str]
    plan: PlanDocument


class CompareResponse(BaseModel):
    """The answer of ``POST /v1/compare``."""

    scenario: ScenarioDocument
    schedulers: list[str]
    plans: dict[str, PlanDocument]
    errors: dict[str, str]
    table: list[dict[str, Any]]


class ErrorResponse(BaseModel):
    """Any answer but 200: ``detail`` is one line; a 422 also names ``source``, ``field`` and ``reason``."""

    detail: str
    source: str | None = None
    field: str | None = None
    reason: str | None = None


ENDPOINTS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "/v1/plan": (PlanRequest, PlanDocument),
    "/v1/validate": (ValidateRequest, ValidateResponse),
    "/v1/decide": (DecideRequest, DecideResponse),
    "/v1/compare": (CompareRequest, CompareResponse),
}
ERRORS = {
    "401": "no or a wrong bearer token (--token-file)",
    "413": "a body above --max-body-bytes",
    "422": "bad input: the CLI's line, naming the field",
    "429": "the pool of its mode is full: Retry-After says when to try again",
    "500": "a worker died, or a bug (the traceback is in the server's log)",
    "503": "not ready yet, or the learned policy cannot run here",
    "504": "an exact request ran past its time limit plus the grace",
}


def install_openapi(app: FastAPI) -> None:
    """Give the app an OpenAPI document whose POST bodies and answers are the models above."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        models = [(m, "validation") for pair in ENDPOINTS.values() for m in pair] + [(ErrorResponse, "validation")]
        _, definitions = models_json_schema(models, ref_template="#/components/schemas/{model}")
        schema.setdefault("components", {}).setdefault("schemas", {}).update(definitions.get("$defs", {}))

        def ref(model: type[BaseModel]) -> dict[str, Any]:
            return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}

        for path, (request, response) in ENDPOINTS.items():
            operation = schema["paths"][path]["post"]
            operation["requestBody"] = {"required": True, **ref(request)}
            operation["responses"] = {"200": {"description": "OK", **ref(response)}}
            for code, why in ERRORS.items():
                operation["responses"][code] = {"description": why, **ref(ErrorResponse)}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
