"""The exact-mode pool: every CP-SAT request in a worker process of its own, at most N at once.

CP-SAT holds its thread (and the GIL's neighbours) for its whole time limit, so an
exact request never runs in the server's process: it runs in a fresh process
forked from a ``forkserver`` (never a plain ``fork`` of the server: onnxruntime and
numba threads live there) that has the schedulers' modules imported already. The
pool is an admission count, not a set of long-lived workers:

- at most ``processes`` jobs run at once and at most ``queue`` more wait for a
  process; a request beyond that is refused at once with :class:`PoolFullError`
  (HTTP 429 with ``Retry-After``: the seconds until the first running job reaches
  its time limit), never queued without bound and never a hang;
- a job still running ``grace`` seconds after its time limit is killed
  (:class:`JobTimeoutError`, HTTP 504); CP-SAT stops itself at its limit, so this is a
  hang guard;
- a worker that dies (killed, out of memory) fails only its own request
  (:class:`WorkerDiedError`, HTTP 500) and the next request gets a fresh process;
- a request whose client went away kills its worker at once (:meth:`ExactPool.run`
  polls ``cancelled``), so nothing of it is left behind.

One process per request costs a fork of the warm forkserver (milliseconds) against
CP-SAT's seconds, and makes each of the cases above the death of one process that
nobody else shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agents.serve.work import Job, compute

PRELOAD = ["agents.serve.work", "agents.registry", "agents.cpsat", "agents.full", "agents.greedy", "agents.ppo"]
POLL_S = 0.05  # how often a waiting request looks at its client and its deadline


class PoolFullError(Exception):
    """Every worker process is busy and the queue is full: try again after ``retry_after`` seconds."""

    def __init__(self, retry_after: int, processes: int, queue: int) -> None:
        self.retry_after = retry_after
        super().__init__(
            f"the exact-mode pool is full ({processes} processes busy, {queue} requests waiting); "
            f"retry after {retry_after} s"
        )


class WorkerDiedError(Exception):
    """The worker process planning this request died before it answered."""


class JobTimeoutError(Exception):
    """The worker ran past its time limit plus the grace and was killed."""


class ClientGoneError(Exception):
    """The client went away; its worker was killed."""


@dataclass(frozen=True)
class Failure:
    """What a worker reports instead of a result: the project's error types by name, or a bug's traceback."""

    kind: str  # "policy", "unavailable", "invalid-plan", "bug"
    message: str
    traceback: str = ""


def _child(conn: multiprocessing.connection.Connection, job: Job) -> None:
    """A worker process: plan one job, send the result or the failure, exit."""
    from agents.ppo import PolicyError
    from agents.registry import SchedulerUnavailableError
    from agents.serve.work import InvalidPlanError

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops its workers itself
    try:
        result: Any = compute(job)
    except PolicyError as exc:
        result = Failure("policy", str(exc))
    except SchedulerUnavailableError as exc:
        result = Failure("unavailable", str(exc))
    except InvalidPlanError as exc:
        result = Failure("invalid-plan", str(exc), traceback.format_exc())
    except Exception as exc:  # a bug: its traceback goes back to the server's log
        result = Failure("bug", f"{type(exc).__name__}: {exc}", traceback.format_exc())
    conn.send(result)
    conn.close()


def _died(process: multiprocessing.process.BaseProcess) -> WorkerDiedError:
    code = process.exitcode
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
    return WorkerDiedError(f"the worker process planning this request died ({how}); the request may be retried")


class ExactPool:
    """At most ``processes`` exact jobs at once, each in its own worker process, ``queue`` more waiting.

    Args:
        processes: Worker processes at once.
        queue: Requests that may wait for a process; beyond, :class:`PoolFullError`.
        grace: Seconds past a job's time limit before its worker is killed.
        target: What a worker runs, ``target(conn, job)`` (a module-level function); tests give one that hangs.
    """

    def __init__(
        self, processes: int, queue: int, grace: float = 30.0, target: Callable[..., None] | None = None
    ) -> None:
        self.target = target or _child
        self.processes = processes
        self.queue = queue
        self.grace = grace
        methods = multiprocessing.get_all_start_methods()
        self._ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        if "forkserver" in methods:
            self._ctx.set_forkserver_preload(PRELOAD)
        self._slots = asyncio.Semaphore(processes)
        self._admitted = 0
        self._deadlines: dict[int, float] = {}  # running worker pid -> when its time limit ends
        self._children: set[multiprocessing.process.BaseProcess] = set()
        self.on_change: Callable[[int, int], None] = lambda running, waiting: None

    @property
    def running(self) -> int:
        """Worker processes alive now."""
        return len(self._deadlines)

    @property
    def waiting(self) -> int:
        """Requests admitted and waiting for a process."""
        return self._admitted - self.running

    def retry_after(self) -> int:
        """Whole seconds until the first running job reaches its time limit (at least 1)."""
        if not self._deadlines:
            return 1
        return max(1, math.ceil(min(self._deadlines.values()) - time.monotonic()))

    def warm_up(self) -> None:
        """Start the forkserver and run one tiny job through it, so the first request pays no start-up."""
        from agents.options import PlanOptions
        from gpu_env.generators import generate

        job = Job("plan", generate("training-heavy", 0, gpus=4, num_jobs=2), "fifo", PlanOptions())
        process, conn = self._start(job)
        try:
            conn.poll(300)  # a hang guard: the job takes milliseconds
        finally:
            self._reap(process, conn)

    def admit(self) -> None:
        """Count a request in, or refuse it at once when the pool and its queue are full.

        Raises:
            PoolFullError: ``processes`` running and ``queue`` waiting already.
        """
        if self._admitted + 1 > self.processes + self.queue:
            raise PoolFullError(self.retry_after(), self.processes, self.waiting)
        self._admitted += 1
        self._changed()

    def release(self) -> None:
        """Count a request out (after :meth:`admit`, in a ``finally``)."""
        self._admitted -= 1
        self._changed()

    async def run(self, job: Job, cancelled: Callable[[], Awaitable[bool]]) -> dict[str, Any] | Failure:
        """Run one job in a worker process of its own (the request must be admitted).

        Args:
            job: The work.
            cancelled: Awaited every :data:`POLL_S`: True when the client has gone away.

        Returns:
            The job's document, or the worker's :class:`Failure`.

        Raises:
            WorkerDiedError, JobTimeoutError, ClientGoneError: The worker is gone; nothing of it is left.
        """
        async with self._slots:
            process, conn = self._start(job)
            deadline = time.monotonic() + job.options.time_limit
            self._deadlines[process.pid] = deadline
            self._changed()
            try:
                while not conn.poll():
                    if not process.is_alive() and not conn.poll():
                        raise _died(process)
                    if time.monotonic() > deadline + self.grace:
                        raise JobTimeoutError(
                            f"the worker ran {self.grace:g} s past its time limit of {job.options.time_limit:g} s "
                            "and was stopped"
                        )
                    if await cancelled():
                        raise ClientGoneError("the client went away")
                    await asyncio.sleep(POLL_S)
                try:
                    return conn.recv()
                except EOFError:  # the pipe closed without an answer: the worker died
                    process.join(10)  # a hang guard: a dead process is reaped at once
                    raise _died(process) from None
            finally:
                self._deadlines.pop(process.pid, None)
                self._reap(process, conn)
                self._changed()

    def stop(self) -> None:
        """Kill every worker still running (the server is stopping)."""
        for process in list(self._children):
            with contextlib.suppress(OSError):
                process.kill()
            process.join(5)
        self._children.clear()

    def _start(self, job: Job) -> tuple[multiprocessing.process.BaseProcess, multiprocessing.connection.Connection]:
        reader, writer = self._ctx.Pipe(duplex=False)
        name = f"gpualloc-{job.scheduler}"
        process = self._ctx.Process(target=self.target, args=(writer, job), daemon=True, name=name)
        process.start()
        writer.close()  # the child holds the other end: EOF here when it dies
        self._children.add(process)
        return process, reader

    def _reap(self, process: multiprocessing.process.BaseProcess, conn: multiprocessing.connection.Connection) -> None:
        if process.is_alive():
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGKILL)
        process.join(10)  # a hang guard: a killed process is reaped in microseconds
        conn.close()
        self._children.discard(process)

    def _changed(self) -> None:
        self.on_change(self.running, self.waiting)
