"""``gpualloc serve`` is ready only once warm: the learned planner's decoder compiled (or loaded from numba's cache).

In-process (Starlette's test client runs the app and its lifespan here), with the warm-up replaced by one that waits
on an event the test sets: readiness is checked before and after that event, never against a clock.
"""

from __future__ import annotations

import threading
import warnings

import pytest

from tests.conftest import HANG_GUARD_S
from tests.serve_helpers import plan_body, wait_until

pytest.importorskip("fastapi")

with warnings.catch_warnings():  # Starlette's note that its test client will move to httpx2
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from agents import ppo
from agents.serve.app import create_app
from agents.serve.exact import ExactPool
from agents.serve.settings import Settings
from gpu_env.generators import generate


def test_readiness_waits_for_the_decoder_warm_up(monkeypatch):
    started, release = threading.Event(), threading.Event()
    policies = []

    def warm_up(path=None):  # stands for compiling the decoder: returns when the test says so
        policies.append(path)
        started.set()
        assert release.wait(HANG_GUARD_S), "hang guard: the test never released the warm-up"

    monkeypatch.setattr(ppo, "warm_up", warm_up)
    monkeypatch.setattr(ExactPool, "warm_up", lambda self: None)  # the worker pool's start is not under test
    try:
        with TestClient(create_app(Settings())) as client:
            assert started.wait(HANG_GUARD_S), "hang guard: the server never started its warm-up"
            answer = client.get("/readyz")
            assert answer.status_code == 503 and answer.headers["Retry-After"] == "1"
            assert answer.json()["status"] == "starting" and answer.json()["warm_up"] == "running"
            assert client.get("/healthz").status_code == 200  # alive while it warms up
            small = generate("training-heavy", seed=5, gpus=8, num_jobs=6)
            assert client.post("/v1/plan", json=plan_body(small, "ppo")).status_code == 503  # not served cold
            release.set()
            wait_until(lambda: client.get("/readyz").status_code == 200, "not ready after the warm-up")
            ready = client.get("/readyz").json()
            assert ready["status"] == "ready" and ready["warm_up"] == "done" and ready["ppo"] == "ok"
            assert client.post("/v1/plan", json=plan_body(small, "greedy")).status_code == 200
    finally:
        release.set()  # a failed assertion above must not leave the warm-up thread waiting
    assert policies == [None]  # the server's policy: the shipped one


def test_without_warm_up_readiness_says_off():
    with TestClient(create_app(Settings(warm=False))) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200, "not ready")
        assert client.get("/readyz").json()["warm_up"] == "off"
