"""A real ``gpualloc serve`` process for the service's tests: a port the OS chooses, stopped in a finally.

The server is started as the CLI starts it (``python -m agents.cli serve --port 0
--port-file FILE``), its output goes to a file (a pipe nobody reads would fill and
block it), the port is read back from the port file, and the test waits for
``/readyz``. Every wait has a hang guard far above the work's time; nothing
asserts on speed. On exit the server gets SIGTERM, then SIGKILL if it has not
stopped, and the helper checks that it and every process it started are gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import HANG_GUARD_S

_EXTRA = 'the serve extra is not installed (pip install -e ".[serve]"; make test installs it)'
for _module in ("fastapi", "uvicorn", "prometheus_client"):
    pytest.importorskip(_module, reason=_EXTRA)
httpx = pytest.importorskip("httpx", reason=_EXTRA)

ROOT = Path(__file__).resolve().parents[1]
START_GUARD_S = 300  # a hang guard for start-up (warm-up takes seconds)


def children(pid: int) -> list[int]:
    """The direct children of a process (Linux /proc)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``."""
    out, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_until(condition, what: str, guard: float = HANG_GUARD_S, every: float = 0.05):
    """Poll ``condition()`` until it returns something truthy; fail after ``guard`` seconds (a hang guard)."""
    deadline = time.monotonic() + guard
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"hang guard: {what} after {guard:g} s")


@dataclass
class Server:
    """A running server."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=HANG_GUARD_S, **kwargs)

    def workers(self) -> list[int]:
        """The exact pool's worker processes: the children of the server's forkserver."""
        return [g for c in children(self.pid) for g in children(c) if alive(g)]

    def metric(self, line_start: str) -> float:
        """The value of the first /metrics sample whose line starts with ``line_start`` (0 when absent)."""
        text = httpx.get(f"{self.url}/metrics", timeout=HANG_GUARD_S).text
        for line in text.splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def running_server(tmp_path: Path, *args: str, name: str = "server") -> Iterator[Server]:
    """Start ``gpualloc serve --port 0`` with ``args``, wait until ready, and stop it afterwards."""
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    port_file, log = folder / "port", folder / "log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "agents.cli", "serve", "--port", "0", "--port-file", str(port_file), *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    started: list[int] = []
    try:
        port = wait_until(
            lambda: (port_file.exists() and port_file.read_text().strip()) or _exited(process, log),
            "no port file",
            START_GUARD_S,
        )
        server = Server(process, f"http://127.0.0.1:{int(port)}", log)

        def ready() -> bool:
            _exited(process, log)
            try:
                return httpx.get(f"{server.url}/readyz", timeout=HANG_GUARD_S).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, "not ready", START_GUARD_S, every=0.2)
        started = descendants(process.pid)
        yield server
    finally:
        started = sorted(set(started) | set(descendants(process.pid)))
        stop(process)
        for pid in started:  # the pool's workers and the forkserver die with the server
            wait_until(lambda pid=pid: not alive(pid), f"process {pid} of the server still alive", 60)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after a hang guard; always reaped."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=60)


def _exited(process: subprocess.Popen[bytes], log: Path) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"the server exited with {process.returncode}:\n{log.read_text(errors='replace')}")
    return False


def plan_body(scenario, scheduler: str, **options) -> dict:
    """A /v1/plan body for a Scenario."""
    body = {"scenario": scenario.to_dict(), "scheduler": scheduler}
    if options:
        body["options"] = options
    return body


def exact_options(**extra) -> dict:
    """Options for an exact request that ends the same on any machine: deterministic time, one worker, a seed."""
    return {"time_limit": 60, "deterministic_time": 0.5, "workers": 1, "seed": 0, **extra}


def strip_timing(document: dict, keys: Sequence[str] = ("solve_ms",)) -> dict:
    """A plan document without its timings: ``keys`` and every anytime trace's seconds (see without_timings)."""
    from gpu_env.plan import without_timings

    return without_timings({k: v for k, v in document.items() if k not in keys})
