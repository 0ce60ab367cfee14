"""The settings of ``gpualloc serve``: what a request may ask for, and how the server runs (no third-party imports).

Kept apart from the app so that ``gpualloc --help`` neither needs nor imports the
service's stack (FastAPI, uvicorn).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Limits:
    """What this server allows a request beyond the scenario format's own limits (docs/serve.md).

    Attributes:
        max_body_bytes: Bytes of one request body.
        max_time_limit: Seconds of ``options.time_limit``.
        max_workers: CP-SAT threads of ``options.workers``.
        max_samples: Largest ``options.samples`` (the learned planner's candidates).
        default_time_limit: ``options.time_limit`` when a request gives none.
    """

    max_body_bytes: int = 8 * 1024 * 1024
    max_time_limit: float = 60.0
    max_workers: int = 1
    max_samples: int = 64
    default_time_limit: float = 10.0


@dataclass(frozen=True)
class Settings:
    """How one server runs (the options of ``gpualloc serve``).

    Attributes:
        limits: What a request may ask for (body bytes, time limit, workers, samples).
        exact_processes: Exact-mode worker processes at once.
        exact_queue: Exact-mode requests that may wait for a process (beyond: 429).
        fast_threads: Fast-mode plans at once (threads of the server's process).
        fast_queue: Fast-mode requests that may wait for a thread (beyond: 429).
        grace: Seconds past a request's time limit before its worker is killed (504).
        token: The bearer token every ``/v1`` request and ``/metrics`` must carry; None: none asked.
        policy: The learned scheduler's policy file; None: the shipped one.
        warm: Warm the learned policy and the worker pool up before ``/readyz`` says ready.
    """

    limits: Limits = field(default_factory=Limits)
    exact_processes: int = 1
    exact_queue: int = 2
    fast_threads: int = 2
    fast_queue: int = 64
    grace: float = 30.0
    token: str | None = None
    policy: Path | None = None
    warm: bool = True
