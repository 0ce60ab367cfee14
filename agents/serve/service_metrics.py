"""The service's Prometheus metrics (``GET /metrics``), in a registry of its own per app.

| metric | type | labels | what |
| --- | --- | --- | --- |
| ``gpualloc_requests_total`` | counter | endpoint, status | requests answered |
| ``gpualloc_request_seconds`` | histogram | endpoint | time from the request's start to its answer |
| ``gpualloc_errors_total`` | counter | endpoint, kind | refusals and failures by kind (docs/serve.md) |
| ``gpualloc_plan_objective`` | summary | scheduler | objective of each plan returned (``_sum / _count`` is the mean) |
| ``gpualloc_plan_objective_last`` | gauge | scheduler | objective of the last plan returned |
| ``gpualloc_plan_solve_seconds`` | histogram | scheduler | the scheduler's own time (``solve_ms``) |
| ``gpualloc_exact_running`` | gauge | | exact-mode worker processes running |
| ``gpualloc_exact_waiting`` | gauge | | exact-mode requests waiting for a process |
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class ServiceMetrics:
    """The collectors of one app."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("gpualloc_requests", "Requests answered", ["endpoint", "status"], registry=r)
        self.latency = Histogram(
            "gpualloc_request_seconds", "Seconds to answer", ["endpoint"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.errors = Counter("gpualloc_errors", "Refusals and failures by kind", ["endpoint", "kind"], registry=r)
        self.objective = Summary("gpualloc_plan_objective", "Objective of returned plans", ["scheduler"], registry=r)
        self.objective_last = Gauge(
            "gpualloc_plan_objective_last", "Objective of the last plan returned", ["scheduler"], registry=r
        )
        self.solve = Histogram(
            "gpualloc_plan_solve_seconds", "Scheduler time", ["scheduler"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.exact_running = Gauge("gpualloc_exact_running", "Exact-mode worker processes running", registry=r)
        self.exact_waiting = Gauge("gpualloc_exact_waiting", "Exact-mode requests waiting", registry=r)

    def plan(self, document: dict[str, Any]) -> None:
        """Record a plan document returned (its scheduler, objective and solve time)."""
        scheduler = str(document.get("scheduler", "?"))
        objective = (document.get("metrics") or {}).get("objective")
        if objective is not None:
            self.objective.labels(scheduler).observe(objective)
            self.objective_last.labels(scheduler).set(objective)
        if document.get("solve_ms") is not None:
            self.solve.labels(scheduler).observe(document["solve_ms"] / 1000.0)

    def exact(self, running: int, waiting: int) -> None:
        """The exact pool's occupancy now."""
        self.exact_running.set(running)
        self.exact_waiting.set(waiting)

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
