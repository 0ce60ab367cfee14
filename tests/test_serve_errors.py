"""The service's handlers catch the project's own error types only: a bug is a 500 with its traceback in the log.

In-process (Starlette's test client runs the app and its lifespan in this process), so that a bug can be
injected where the handlers sit, as tests/test_errors.py does for the command line.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import warnings

import pytest

from tests.serve_helpers import plan_body

pytest.importorskip("fastapi")

with warnings.catch_warnings():  # Starlette's note that its test client will move to httpx2
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from agents import greedy, ppo
from agents.options import PlanOptions
from agents.serve.app import create_app
from agents.serve.exact import Failure, _child
from agents.serve.settings import Settings
from agents.serve.work import Job
from gpu_env.generators import generate
from gpu_env.scenario import ScenarioError


@pytest.fixture
def client():
    with TestClient(create_app(Settings(warm=False)), raise_server_exceptions=False) as c:
        yield c


def small():
    return generate("training-heavy", seed=5, gpus=8, num_jobs=6)


def test_a_bug_in_a_scheduler_is_a_500_with_the_traceback_in_the_log(client, monkeypatch, caplog):
    def broken(scenario, options):
        raise ValueError("operands could not be broadcast together (injected)")

    monkeypatch.setattr(greedy, "plan", broken)
    with caplog.at_level(logging.ERROR, logger="gpualloc.serve"):
        answer = client.post("/v1/plan", json=plan_body(small(), "greedy"))
    assert answer.status_code == 500
    assert "injected" not in answer.text and "Traceback" not in answer.text  # the traceback stays in the server
    assert "Traceback (most recent call last)" in caplog.text and "injected" in caplog.text


def test_a_value_error_in_the_reader_is_a_bug_not_bad_input(client, monkeypatch):
    from agents.serve import bodies

    def broken(value, source="scenario"):
        raise ValueError("not a ScenarioError (injected)")

    monkeypatch.setattr(bodies, "read_scenario", broken)
    assert client.post("/v1/plan", json=plan_body(small(), "greedy")).status_code == 500


def test_a_scenario_error_is_bad_input(client, monkeypatch):
    from agents.serve import bodies

    def refused(value, source="scenario"):
        raise ScenarioError(source, "jobs[0].gpus", "expected a positive integer, got 0")

    monkeypatch.setattr(bodies, "read_scenario", refused)
    answer = client.post("/v1/plan", json=plan_body(small(), "greedy"))
    assert answer.status_code == 422
    assert answer.json()["detail"] == "scenario: jobs[0].gpus: expected a positive integer, got 0"


def test_a_policy_error_is_503_naming_the_scheduler(client, monkeypatch):
    def no_policy(scenario, options):
        raise ppo.PolicyError("default.onnx: not a loadable ONNX policy (injected)")

    monkeypatch.setattr(ppo, "plan", no_policy)
    answer = client.post("/v1/plan", json=plan_body(small(), "ppo"))
    assert answer.status_code == 503
    assert answer.json()["detail"] == "ppo: default.onnx: not a loadable ONNX policy (injected)"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (ppo.PolicyError("no policy (injected)"), "policy"),
        (ValueError("a bug (injected)"), "bug"),
        (KeyError("a bug (injected)"), "bug"),
    ],
)
def test_a_worker_reports_project_errors_by_name_and_bugs_with_their_traceback(monkeypatch, error, kind):
    def broken(scenario, options):
        raise error

    monkeypatch.setattr(greedy, "plan", broken)
    reader, writer = multiprocessing.Pipe(duplex=False)
    previous = signal.getsignal(signal.SIGINT)
    try:
        _child(writer, Job("plan", small(), "greedy", PlanOptions()))  # the worker's body, run here
    finally:
        signal.signal(signal.SIGINT, previous)  # the worker ignores Ctrl-C; this process must not
    failure = reader.recv()
    assert isinstance(failure, Failure) and failure.kind == kind
    assert "injected" in failure.message
    assert ("Traceback" in failure.traceback) == (kind == "bug")


def test_not_ready_is_503_with_retry_after(client):
    client.app.state.service.ready = False
    try:
        for path, body in (("/v1/plan", plan_body(small(), "greedy")), ("/v1/validate", {"scenario": {}, "plan": {}})):
            answer = client.post(path, json=body)
            assert answer.status_code == 503 and answer.headers["Retry-After"] == "1", path
        assert client.get("/readyz").status_code == 503
        assert client.get("/healthz").status_code == 200
    finally:
        client.app.state.service.ready = True
