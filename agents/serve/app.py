"""The HTTP service: the allocator's endpoints, health, metrics and the what-if page (docs/serve.md).

:func:`create_app` builds a FastAPI app from :class:`Settings`; ``gpualloc serve``
runs it on uvicorn. The service is stateless: every answer depends on the request
alone (and the server's policy file), nothing is kept between requests but the
metrics' counters, so a restart loses nothing and replicas need no coordination.

Errors follow the command line's rules (docs/testing.md): bad input is a 4xx
whose ``detail`` is the CLI's one line with the part of the request in place of
the file (``scenario: jobs[0].gpus: expected a positive integer, got 0``), only
the project's own error types are caught, and anything else is a bug: a 500
with its traceback in the server's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any, TypeVar

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from agents.ppo import PolicyError
from agents.registry import SCHEDULERS, SchedulerUnavailableError
from agents.serve import bodies
from agents.serve.exact import ClientGoneError, ExactPool, Failure, JobTimeoutError, PoolFullError, WorkerDiedError
from agents.serve.service_metrics import ServiceMetrics
from agents.serve.settings import Settings
from agents.serve.work import EXACT, InvalidPlanError, Job, Kind, compute, with_policy
from gpu_env.metrics import compute_metrics
from gpu_env.scenario import Scenario, ScenarioError
from gpu_env.validation import validate

log = logging.getLogger("gpualloc.serve")
T = TypeVar("T")

STATIC = resources.files("agents.serve").joinpath("static")
OPEN_PATHS = ("/", "/healthz", "/readyz", "/docs", "/openapi.json", "/static/")  # no token asked


class ApiError(Exception):
    """An answer other than 200, with its status, the kind counted in the metrics, and a ``detail`` line."""

    def __init__(self, status: int, kind: str, detail: str, headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra

    @classmethod
    def bad_input(cls, exc: ScenarioError) -> ApiError:
        """422 for a refused field: the CLI's line, and its parts."""
        return cls(422, "bad_input", str(exc), source=exc.source, field=exc.field, reason=exc.reason)

    def response(self) -> JSONResponse:
        """The JSON answer."""
        return JSONResponse({"detail": self.detail, **self.extra}, status_code=self.status, headers=self.headers)


class _Fast:
    """Fast-mode admission: ``threads`` plans at once, ``queue`` waiting, beyond that 429."""

    def __init__(self, threads: int, queue: int) -> None:
        self.limiter = anyio.CapacityLimiter(threads)
        self.bound = threads + queue
        self.admitted = 0

    @contextlib.contextmanager
    def admit(self) -> Any:
        if self.admitted >= self.bound:
            raise ApiError(
                429,
                "busy",
                f"the fast-mode queue is full ({self.bound} requests in progress); retry after 1 s",
                {"Retry-After": "1"},
            )
        self.admitted += 1
        try:
            yield
        finally:
            self.admitted -= 1


class Service:
    """The state of one running app: its settings, pools, metrics and readiness (no request state)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = ServiceMetrics()
        self.pool: ExactPool | None = None
        self.fast = _Fast(settings.fast_threads, settings.fast_queue)
        self.ready = False
        self.warm_up = "running" if settings.warm else "off"  # "done" once warm: /readyz says which
        self.warm_error: str | None = None

    async def start(self) -> None:
        """Make the exact pool (in the running loop) and warm up in the background; ready once warm.

        The warm-up runs in a thread while the server already answers (``/healthz`` 200, ``/readyz`` 503): the
        worker pool's forkserver starts, and the learned planner's decoder is compiled, or loaded from numba's
        disk cache (``gpualloc warm-up`` fills it), so that no request waits for the compiler.
        """
        self.pool = ExactPool(self.settings.exact_processes, self.settings.exact_queue, self.settings.grace)
        self.pool.on_change = self.metrics.exact
        if self.settings.warm:
            await anyio.to_thread.run_sync(self._warm)
            self.warm_up = "done"
        self.ready = True
        log.info("ready")

    def _warm(self) -> None:
        from agents import ppo
        from gpu_env import listsched

        assert self.pool is not None
        self.pool.warm_up()
        log.info("warming up: the learned planner's decoder (numba; compiled once, then loaded from its cache)")
        try:
            ppo.warm_up(self.settings.policy)
        except PolicyError as exc:  # the learned scheduler answers 503 with this reason; the others work
            self.warm_error = str(exc)
            log.warning("ppo cannot run: %s", exc)
        log.info("warm-up: %s", listsched.compile_stats().describe())

    def stop(self) -> None:
        """Refuse new work and kill the workers still running."""
        self.ready = False
        if self.pool is not None:
            self.pool.stop()

    def job(self, kind: Kind, scenario: Scenario, scheduler: str, options: Any, expired: tuple[str, ...] = ()) -> Job:
        """The work of one scheduler, with the server's policy."""
        return Job(kind, scenario, scheduler, with_policy(options, self.settings.policy), expired)

    async def run(self, job: Job, cancelled: Callable[[], Awaitable[bool]]) -> dict[str, Any]:
        """Run one admitted job where its mode says; project errors become :class:`ApiError`."""
        if job.exact:
            assert self.pool is not None
            try:
                result = await self.pool.run(job, cancelled)
            except WorkerDiedError as exc:
                log.error("%s: %s", job.scheduler, exc)
                raise ApiError(500, "worker_died", str(exc)) from None
            except JobTimeoutError as exc:
                log.error("%s: %s", job.scheduler, exc)
                raise ApiError(504, "timeout", str(exc)) from None
            except ClientGoneError as exc:  # nobody reads the answer; counted as nginx counts it
                log.info("%s: %s; its worker was stopped", job.scheduler, exc)
                raise ApiError(499, "client_gone", str(exc)) from None
            if isinstance(result, Failure):
                raise _failure(job, result)
            return result
        try:
            return await anyio.to_thread.run_sync(compute, job, limiter=self.fast.limiter)
        except PolicyError as exc:
            raise ApiError(503, "unavailable", f"{job.scheduler}: {exc}") from None
        except SchedulerUnavailableError as exc:
            raise ApiError(501, "unavailable", f"scheduler: {exc}") from None
        except InvalidPlanError as exc:
            log.error("%s", traceback.format_exc())
            raise ApiError(500, "bug", str(exc)) from None

    @contextlib.asynccontextmanager
    async def admitted(self, jobs: list[Job]) -> AsyncIterator[None]:
        """Admission for a request's jobs: one exact slot if any is exact, one fast slot if any is fast."""
        if not self.ready:
            raise ApiError(503, "busy", "the service is not ready (starting or stopping)", {"Retry-After": "1"})
        with contextlib.ExitStack() as stack:
            if any(not j.exact for j in jobs):
                stack.enter_context(self.fast.admit())
            if any(j.exact for j in jobs):
                assert self.pool is not None
                try:
                    self.pool.admit()
                except PoolFullError as exc:
                    raise ApiError(429, "busy", str(exc), {"Retry-After": str(exc.retry_after)}) from None
                stack.callback(self.pool.release)
            yield


def _failure(job: Job, failure: Failure) -> ApiError:
    if failure.kind == "policy":
        return ApiError(503, "unavailable", f"{job.scheduler}: {failure.message}")
    if failure.kind == "unavailable":
        return ApiError(501, "unavailable", f"scheduler: {failure.message}")
    log.error("%s in a worker: %s\n%s", job.scheduler, failure.message, failure.traceback)
    return ApiError(500, "bug", failure.message)


# ----------------------------------------------------------------------------- the app


def create_app(settings: Settings | None = None) -> FastAPI:
    """The service as an ASGI app."""
    from agents.serve.schemas import install_openapi

    service = Service(settings or Settings())
    app = FastAPI(
        title="gpualloc",
        summary="The GPU-cluster allocator as a service: plan, validate, decide, compare.",
        version=_version(),
        lifespan=_lifespan(service),
    )
    app.state.service = service
    app.add_middleware(_Guard, service=service)
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    _add_allocator_routes(app, service)
    _add_compare_route(app, service)
    _add_operations_routes(app, service)
    _add_page_routes(app, service)
    install_openapi(app)
    return app


def _lifespan(service: Service) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """The app's lifespan: the service starts in the background, and stops when the server does.

    Args:
        service: The app's service.

    Returns:
        The lifespan, for :class:`FastAPI`.
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(service.start())
        task.add_done_callback(_log_failed_start)
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            service.stop()

    return lifespan


async def _checked(
    service: Service, request: Request, allowed: set[str], required: set[str], read: Callable[[dict[str, Any]], T]
) -> T:
    """The body read (up to the byte limit), then parsed and checked by ``read`` in a thread.

    A large scenario's parsing and checking never hold the event loop that answers the other requests.

    Args:
        service: The app's service (its byte limit).
        request: The request.
        allowed: The body's keys.
        required: Those of them it must give.
        read: Reads the body's mapping; a :class:`ScenarioError` is bad input.

    Returns:
        What ``read`` returns.
    """
    raw = await _read_limited(request, service.settings.limits.max_body_bytes)

    def parse() -> T:
        with _bad_input():
            return read(dict(bodies.envelope(bodies.parse_body(raw), allowed, required)))

    return await anyio.to_thread.run_sync(parse)


def _cancelled_of(request: Request) -> Callable[[], Awaitable[bool]]:
    """Whether the request's client has gone: an exact job stops its worker then."""
    return request.is_disconnected


def _add_allocator_routes(app: FastAPI, service: Service) -> None:
    """Register ``/v1/plan``, ``/v1/validate`` and ``/v1/decide`` on ``app``, served by ``service``."""
    limits = service.settings.limits

    @app.post("/v1/plan", tags=["allocator"])
    async def plan(request: Request) -> JSONResponse:
        """Plan a scenario with one scheduler: the plan JSON exactly as ``gpualloc plan`` writes it."""
        job = await _checked(
            service,
            request,
            {"scenario", "scheduler", "options"},
            {"scenario", "scheduler"},
            lambda data: service.job(
                "plan",
                scheduler=bodies.read_scheduler(data["scheduler"]),
                options=bodies.read_options(data.get("options"), limits),
                scenario=bodies.read_scenario(data["scenario"]),
            ),
        )
        async with service.admitted([job]):
            document = await service.run(job, _cancelled_of(request))
        service.metrics.plan(document)
        return JSONResponse(document)

    @app.post("/v1/validate", tags=["allocator"])
    async def validate_plan(request: Request) -> JSONResponse:
        """Check a plan against every rule; the violations and the metrics recomputed from the scenario."""

        def check(data: dict[str, Any]) -> dict[str, Any]:
            scenario = bodies.read_scenario(data["scenario"])
            plan_ = bodies.read_plan(data["plan"])
            violations = validate(scenario, plan_)
            warnings = []
            if plan_.scenario and plan_.scenario != scenario.name:
                warnings.append(f"plan: a plan for scenario {plan_.scenario!r}, not {scenario.name!r}")
            return {
                "valid": not violations,
                "violations": [{"rule": v.rule.value, "message": v.message} for v in violations],
                "metrics": compute_metrics(scenario, plan_).to_dict(),
                "warnings": warnings,
            }

        if not service.ready:
            raise ApiError(503, "busy", "the service is not ready (starting or stopping)", {"Retry-After": "1"})
        with service.fast.admit():
            return JSONResponse(await _checked(service, request, {"scenario", "plan"}, {"scenario", "plan"}, check))

    @app.post("/v1/decide", tags=["allocator"])
    async def decide(request: Request) -> JSONResponse:
        """This slot's decisions for a cluster state (``agents.live.decide``): what starts now, and the plan.

        The state is a scenario whose slot 0 is now, or the fields of ``agents.live.ClusterState``.
        """

        def read(data: dict[str, Any]) -> Job:
            scheduler = bodies.read_scheduler(data.get("scheduler", "greedy"))
            options = bodies.read_options(data.get("options"), limits)
            state, expired = bodies.read_state(data["state"])
            return service.job("decide", state, scheduler, options, expired)

        job = await _checked(service, request, {"state", "scheduler", "options"}, {"state"}, read)
        async with service.admitted([job]):
            document = await service.run(job, _cancelled_of(request))
        service.metrics.plan(document["plan"])
        return JSONResponse(document)


def _add_compare_route(app: FastAPI, service: Service) -> None:
    """Register ``/v1/compare`` on ``app``, served by ``service``."""
    limits = service.settings.limits

    @app.post("/v1/compare", tags=["allocator"])
    async def compare(request: Request) -> JSONResponse:
        """Plan one scenario with several schedulers: their plans and metrics side by side (the what-if)."""

        def read(data: dict[str, Any]) -> tuple[Scenario, list[str], list[Job]]:
            names = bodies.read_schedulers(data["schedulers"])
            options = bodies.read_options(data.get("options"), limits)
            scenario = bodies.read_scenario(data["scenario"])
            return scenario, names, [service.job("plan", scenario, name, options) for name in names]

        scenario, names, jobs = await _checked(
            service, request, {"scenario", "schedulers", "options"}, {"scenario", "schedulers"}, read
        )
        plans: dict[str, dict[str, Any]] = {}
        errors: dict[str, str] = {}

        async def run_all(group: list[Job]) -> None:
            for job in group:
                try:
                    plans[job.scheduler] = await service.run(job, _cancelled_of(request))
                except ApiError as exc:
                    if exc.kind != "unavailable":
                        raise
                    errors[job.scheduler] = exc.detail

        async with service.admitted(jobs):
            await asyncio.gather(run_all([j for j in jobs if not j.exact]), run_all([j for j in jobs if j.exact]))
        for document in plans.values():
            service.metrics.plan(document)
        table = [
            {"scheduler": name, **plans[name]["metrics"], "solve_ms": plans[name].get("solve_ms")}
            for name in names
            if name in plans
        ]
        return JSONResponse(
            {
                "scenario": scenario.to_dict(),
                "schedulers": names,
                "plans": {name: plans[name] for name in names if name in plans},
                "errors": errors,
                "table": table,
            }
        )


def _add_operations_routes(app: FastAPI, service: Service) -> None:
    """Register ``/healthz``, ``/readyz`` and ``/metrics`` on ``app``, served by ``service``."""

    @app.get("/healthz", tags=["operations"])
    async def healthz() -> dict[str, str]:
        """The process answers (liveness)."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"])
    async def readyz() -> JSONResponse:
        """Ready for requests (warm), with the exact pool's occupancy; 503 while starting or stopping."""
        pool = service.pool
        state = {
            "status": "ready" if service.ready else "starting",
            "stateless": True,
            "exact": {
                "processes": service.settings.exact_processes,
                "queue": service.settings.exact_queue,
                "running": pool.running if pool else 0,
                "waiting": pool.waiting if pool else 0,
            },
            "schedulers": {name: ("exact" if name in EXACT else "fast") for name in SCHEDULERS},
            "ppo": service.warm_error or "ok",
            "warm_up": service.warm_up,
        }
        headers = {} if service.ready else {"Retry-After": "1"}
        return JSONResponse(state, status_code=200 if service.ready else 503, headers=headers)

    @app.get("/metrics", tags=["operations"])
    async def metrics() -> Response:
        """Prometheus metrics: requests, latencies, errors, plan objective and solve time per scheduler."""
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


def _add_page_routes(app: FastAPI, service: Service) -> None:
    """Register the what-if page (``/``) and ``/favicon.ico`` on ``app``, served by ``service``."""

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        """The what-if page, with the figures' palette and the shipped scenarios written into it."""
        return HTMLResponse(page_html(service.settings))


def _log_failed_start(task: asyncio.Task[None]) -> None:
    """A start-up that raised is a bug: its traceback in the log, and /readyz stays 503."""
    if not task.cancelled() and task.exception() is not None:
        exc = task.exception()
        log.error("start-up failed:\n%s", "".join(traceback.format_exception(exc)))


@contextlib.contextmanager
def _bad_input() -> Any:
    try:
        yield
    except ScenarioError as exc:
        raise ApiError.bad_input(exc) from None


async def _read_limited(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes ``limit`` bytes (or says it will)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit, more=True)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int, limit: int, more: bool = False) -> ApiError:
    what = f"more than {limit} bytes" if more else f"{size} bytes"
    return ApiError(
        413, "too_large", f"request: <body>: {what}, above this server's limit of {limit} bytes (--max-body-bytes)"
    )


class _Guard:
    """ASGI middleware: the bearer token, the metrics of every answer, and :class:`ApiError` as JSON."""

    def __init__(self, app: Any, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        endpoint = path if path.startswith("/v1/") or path in ("/metrics", "/healthz", "/readyz", "/") else "other"
        started = time.perf_counter()
        status = 500
        metrics = self.service.metrics

        async def send_status(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            token = self.service.settings.token
            if token is not None and not _open(path) and not _authorized(scope, token):
                challenge = {"WWW-Authenticate": 'Bearer realm="gpualloc"'}
                raise ApiError(401, "unauthorized", "missing or wrong bearer token", challenge)
            await self.app(scope, receive, send_status)
        except ApiError as exc:
            metrics.errors.labels(endpoint, exc.kind).inc()
            await exc.response()(scope, receive, send_status)
        except Exception:  # a bug: logged with its traceback, answered 500 without it
            log.error("bug in %s %s\n%s", scope.get("method"), path, traceback.format_exc())
            metrics.errors.labels(endpoint, "bug").inc()
            with contextlib.suppress(Exception):
                await JSONResponse({"detail": "internal error (a bug: the traceback is in the server's log)"}, 500)(
                    scope, receive, send_status
                )
        finally:
            metrics.requests.labels(endpoint, str(status)).inc()
            metrics.latency.labels(endpoint).observe(time.perf_counter() - started)


def _open(path: str) -> bool:
    return any(path == p or (p.endswith("/") and p != "/" and path.startswith(p)) for p in OPEN_PATHS)


def _authorized(scope: dict[str, Any], token: str) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, given = value.decode("latin-1").partition(" ")
            return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())
    return False


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpualloc")
    except PackageNotFoundError:
        return "unknown"


# ----------------------------------------------------------------------------- the page


def shipped_scenarios() -> dict[str, dict[str, Any]]:
    """The seven benchmark scenarios (SPEC section 5) as documents, drawn as ``gpualloc generate FAMILY`` does."""
    from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, generate

    return {name: generate(name, BENCHMARK_SEEDS[name]).to_dict() for name in FAMILIES}


def page_html(settings: Settings) -> str:
    """The what-if page: ``index.html`` with its data (palette, schedulers, scenarios, limits) written in."""
    from gpu_env.render import palette

    data = {
        "palette": palette(),
        "schedulers": list(SCHEDULERS),
        "exact": sorted(EXACT),
        "scenarios": shipped_scenarios(),
        "token": settings.token is not None,
        "max_time_limit": settings.limits.max_time_limit,
    }
    text = STATIC.joinpath("index.html").read_text(encoding="utf-8")
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return text.replace("__GPUALLOC_DATA__", blob)
