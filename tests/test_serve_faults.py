"""``gpualloc serve`` under faults: a full exact pool, a killed worker, a client that goes away, a restart.

The long exact request is CP-SAT on a scenario it cannot prove within its time limit
(a 64-GPU cluster with 150 jobs, 120 s), so it is surely running when the test acts
on it; the test ends it itself (kills its worker, or hangs up) and never waits
for the limit. One worker process, no queue: a second exact request finds the pool full.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading

import pytest

from gpu_env.generators import generate
from tests.serve_helpers import exact_options, plan_body, running_server, strip_timing, wait_until

LONG = {"time_limit": 120, "workers": 1, "seed": 0}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    args = ("--exact-processes", "1", "--exact-queue", "0", "--max-time-limit", "120")
    with running_server(tmp, *args) as s:
        yield s


def hard():
    return generate("scale-64x30", seed=1, num_jobs=150)


def small():
    return generate("training-heavy", seed=5, gpus=8, num_jobs=6)


def start_long(server, results: dict) -> threading.Thread:
    """A long cpsat request in a thread; its answer lands in ``results['long']``."""

    def go() -> None:
        with server.client() as c:
            results["long"] = c.post("/v1/plan", json=plan_body(hard(), "cpsat", **LONG))

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    wait_until(lambda: server.metric("gpualloc_exact_running") == 1 and server.workers(), "no exact worker running")
    return thread


def test_a_full_pool_is_429_with_retry_after_and_fast_requests_still_answer(server):
    results: dict = {}
    thread = start_long(server, results)
    try:
        with server.client() as c:
            busy = c.post("/v1/plan", json=plan_body(small(), "cpsat", **exact_options()))
            assert busy.status_code == 429, busy.text
            assert int(busy.headers["Retry-After"]) >= 1
            assert "pool is full" in busy.json()["detail"]
            busy = c.post("/v1/compare", json={"scenario": small().to_dict(), "schedulers": ["greedy", "full"]})
            assert busy.status_code == 429
            fast = c.post("/v1/plan", json=plan_body(small(), "greedy"))  # CP-SAT never blocks fast mode
            assert fast.status_code == 200, fast.text
            assert server.metric('gpualloc_errors_total{endpoint="/v1/plan",kind="busy"}') >= 1
    finally:
        for pid in server.workers():
            os.kill(pid, signal.SIGKILL)
        thread.join(300)
    assert results["long"].status_code == 500


def test_a_killed_worker_fails_its_request_only(server):
    results: dict = {}
    thread = start_long(server, results)
    (pid,) = server.workers()
    os.kill(pid, signal.SIGKILL)
    thread.join(300)
    answer = results["long"]
    assert answer.status_code == 500
    assert "killed by signal 9" in answer.json()["detail"]
    assert "Traceback" not in answer.text
    with server.client() as c:  # the service keeps answering, exact requests too
        assert c.get("/healthz").status_code == 200
        again = c.post("/v1/plan", json=plan_body(small(), "cpsat", **exact_options()))
        assert again.status_code == 200, again.text
    assert server.metric('gpualloc_errors_total{endpoint="/v1/plan",kind="worker_died"}') >= 1
    assert server.workers() == []


def test_a_client_that_hangs_up_leaves_nothing_behind(server):
    body = json.dumps(plan_body(hard(), "cpsat", **LONG)).encode()
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=300) as sock:
        head = f"POST /v1/plan HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        sock.sendall(head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        wait_until(lambda: server.metric("gpualloc_exact_running") == 1, "the request never started")
        (worker,) = server.workers()
    # the connection is closed: the worker is stopped, the slot freed, no process left
    wait_until(lambda: not server.workers(), "the worker outlived its client")
    wait_until(lambda: server.metric("gpualloc_exact_running") == 0, "the slot was not freed")
    assert server.metric("gpualloc_exact_waiting") == 0
    assert not os.path.exists(f"/proc/{worker}") or worker not in server.workers()
    with server.client() as c:
        assert c.post("/v1/plan", json=plan_body(small(), "cpsat", **exact_options())).status_code == 200


def test_a_restart_loses_nothing(tmp_path):
    sc = small()
    bodies = [
        ("/v1/plan", plan_body(sc, "greedy")),
        ("/v1/plan", plan_body(sc, "cpsat", **exact_options())),
        ("/v1/compare", {"scenario": sc.to_dict(), "schedulers": ["fifo", "ppo"]}),
    ]
    answers = []
    for name in ("before", "after"):
        with running_server(tmp_path, name=name) as s, s.client() as c:
            assert c.get("/readyz").json()["stateless"] is True
            answers.append([c.post(path, json=body).json() for path, body in bodies])
    before, after = answers
    assert strip_timing(before[0]) == strip_timing(after[0])
    assert strip_timing(before[1]) == strip_timing(after[1])
    assert [p["placements"] for p in before[2]["plans"].values()] == [
        p["placements"] for p in after[2]["plans"].values()
    ]
