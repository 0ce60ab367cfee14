"""The exact-mode pool and fast-mode admission on their own: admission, Retry-After, the hang guard, cancelling.

Worker processes here run :func:`hang` (never answers) or the real worker; the hang guard is
tested with work that cannot finish, never racing real work (docs/testing.md).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.serve_helpers import alive

pytest.importorskip("fastapi")

from agents.options import PlanOptions
from agents.serve.app import ApiError, _Fast
from agents.serve.exact import ClientGoneError, ExactPool, JobTimeoutError, PoolFullError
from agents.serve.work import Job
from gpu_env.generators import generate
from tests.conftest import HANG_GUARD_S


def hang(conn, job) -> None:
    """A worker that never answers."""
    time.sleep(HANG_GUARD_S)


def job(time_limit: float = 60.0, scheduler: str = "fifo") -> Job:
    return Job("plan", generate("training-heavy", seed=5, gpus=8, num_jobs=6), scheduler, PlanOptions(time_limit))


async def never() -> bool:
    return False


def test_admission_counts_running_and_waiting_and_refuses_beyond():
    pool = ExactPool(processes=1, queue=1)
    pool.admit()
    pool.admit()
    with pytest.raises(PoolFullError) as info:
        pool.admit()
    assert info.value.retry_after >= 1 and "1 processes busy" in str(info.value)
    pool.release()
    pool.admit()  # a place again
    pool.release()
    pool.release()
    assert pool.waiting == 0 and pool.running == 0


def test_a_worker_past_its_time_limit_and_the_grace_is_killed():
    async def go():
        pool = ExactPool(processes=1, queue=0, grace=0.2, target=hang)
        pool.admit()
        seen = []
        pool.on_change = lambda running, waiting: seen.append(running)
        try:
            with pytest.raises(JobTimeoutError):
                await pool.run(job(time_limit=0.1), never)
        finally:
            pool.release()
        return pool, seen

    pool, seen = asyncio.run(go())
    assert 1 in seen and seen[-1] == 0
    assert pool.running == 0 and not pool._children


def test_a_cancelled_request_kills_its_worker_at_once():
    pids = []

    async def go():
        pool = ExactPool(processes=1, queue=0, target=hang)
        pool.on_change = lambda running, waiting: pids.extend(pool._deadlines)
        calls = 0

        async def gone_on_the_third_look() -> bool:
            nonlocal calls
            calls += 1
            return calls >= 3

        with pytest.raises(ClientGoneError):
            await pool.run(job(), gone_on_the_third_look)
        return pool

    pool = asyncio.run(go())
    assert pids and not any(alive(pid) for pid in pids)
    assert pool.running == 0


def test_the_real_worker_answers_with_the_plan():
    async def go():
        pool = ExactPool(processes=1, queue=0)
        pool.admit()
        try:
            return await pool.run(job(), never)
        finally:
            pool.release()

    document = asyncio.run(go())
    assert document["scheduler"] == "fifo" and document["placements"]


def test_fast_admission_is_429_with_retry_after_beyond_its_bound():
    fast = _Fast(threads=1, queue=1)
    with fast.admit(), fast.admit():
        with pytest.raises(ApiError) as info, fast.admit():
            pass
        assert info.value.status == 429 and info.value.headers["Retry-After"] == "1"
    assert fast.admitted == 0
