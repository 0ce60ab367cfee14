"""The real-time apps' observed demand: each app's ``observed`` source read now (docs/slurm.md, Observed demand).

A source is a command that prints one integer, or a Prometheus instant query that answers one scalar
(:class:`~agents.slurm.config.ObservedSource`). A reading never raises: a source that fails, hangs past its
timeout or answers nonsense comes back as an :class:`Observation` with ``gpus`` None and one line saying what
failed and what was answered, and the cycle plans with the forecast (:mod:`agents.slurm.loop`).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agents.slurm.config import ObservedSource, RealtimeApp, SlurmConfig

ANSWER_CHARS = 80  # characters of an answer quoted in a report
MAX_BODY = 1 << 20  # bytes of a Prometheus answer read at most
_INTEGER = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class Observation:
    """One reading of an app's source.

    Attributes:
        app: The app's name.
        source: What was read, e.g. ``command 'chat-gpus --now'`` or ``prometheus http://prom:9090 <query>``.
        gpus: The app's demand now in GPUs (None: the reading failed).
        value: The number the source answered before rounding (None: no number).
        error: One line saying what failed and what was answered (None: the reading is good).
        seconds: How long the reading took.
    """

    app: str
    source: str
    gpus: int | None
    value: float | None
    error: str | None
    seconds: float


class _ReadError(Exception):
    """A reading that failed; the message is the report's line, the value what was answered when a number."""

    def __init__(self, message: str, value: float | None = None) -> None:
        super().__init__(message)
        self.value = value


def read_observed(app: RealtimeApp, source: ObservedSource | None = None) -> Observation:
    """Read one app's demand now from its source; a failure is returned, never raised.

    Args:
        app: The app; its ``observed`` source is read.
        source: A source to read instead of ``app.observed``.

    Returns:
        The observation: ``gpus`` set, or ``error`` saying what failed.

    Raises:
        ValueError: The app has no source and none is given.
    """
    source = source if source is not None else app.observed
    if source is None:
        raise ValueError(f"app {app.name!r} has no observed source")
    began = time.monotonic()
    value: float | None = None
    try:
        if source.command is not None:
            value = float(_read_command(source.command, source.timeout))
        else:
            value = _read_prometheus(source.url or "", source.query or "", source.timeout)
        gpus, error = _gpus(value), None
    except _ReadError as exc:
        gpus, error, value = None, _one_line(str(exc)), exc.value
    except Exception as exc:  # a reading never raises: whatever broke is the line
        gpus, error = None, _one_line(f"failed: {type(exc).__name__}: {exc}")
    return Observation(app.name, source.describe(), gpus, value, error, time.monotonic() - began)


def read_all(config: SlurmConfig) -> dict[str, Observation]:
    """Read every app that has a source, in parallel (one thread each); a failure is in its observation.

    Returns:
        The observations by app name, in the configuration's order of the apps.
    """
    apps = [a for a in config.apps if a.observed is not None]
    if not apps:
        return {}
    with ThreadPoolExecutor(max_workers=len(apps), thread_name_prefix="gpualloc-observe") as pool:
        found = list(pool.map(read_observed, apps))
    return {o.app: o for o in found}


# ----------------------------------------------------------------------------- a command


def _read_command(command: tuple[str, ...], timeout: float) -> int:
    """Run ``command`` (no shell, its own process group) and read the one integer it prints.

    Raises:
        _ReadError: It cannot start, ran past ``timeout`` (its whole process group is killed), exited non-zero,
            or printed anything but one integer >= 0.
    """
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise _ReadError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise _ReadError(f"no answer within {timeout:g} s (its process group killed)") from None
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        said = err.decode(errors="replace").strip().splitlines()
        why = f"; stderr: {_quote(said[-1])}" if said else ""
        raise _ReadError(f"exited with status {proc.returncode}{why}; stdout: {_quote(text)}")
    answer = text.strip()
    if not answer:
        raise _ReadError("printed nothing (expected one integer)")
    if len(answer.split()) > 1:
        raise _ReadError(f"printed several values {_quote(answer)} (expected one integer)")
    if answer.startswith("-") and _INTEGER.fullmatch(answer[1:]):
        raise _ReadError(f"printed a negative number {_quote(answer)} (expected GPUs >= 0)", float(answer))
    if not _INTEGER.fullmatch(answer) or len(answer) > 18:
        raise _ReadError(f"printed {_quote(answer)} (expected one integer)")
    return int(answer)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process group of ``proc`` (its leader not yet reaped, so the group's id is still its own)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.communicate(timeout=5.0)  # reap it; a child that left the group may still hold the pipes
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ----------------------------------------------------------------------------- Prometheus


def _read_prometheus(url: str, query: str, timeout: float) -> float:
    """The one number an instant query answers (``GET <url>/api/v1/query?query=<query>``).

    Raises:
        _ReadError: No answer within ``timeout``, an HTTP error, an answer that is not Prometheus's JSON, a
            status error, or a result that is not one scalar (a scalar, or a vector of one sample) that is
            finite and >= 0.
    """
    address = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    request = urllib.request.Request(address, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read(MAX_BODY)
    except urllib.error.HTTPError as exc:
        said = _prometheus_error(exc.read(MAX_BODY) if exc.fp is not None else b"")
        raise _ReadError(f"HTTP {exc.code} {exc.reason}{said}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            raise _ReadError(f"no answer within {timeout:g} s") from None
        raise _ReadError(f"cannot reach {url}: {reason}") from None
    except TimeoutError:
        raise _ReadError(f"no answer within {timeout:g} s") from None
    except OSError as exc:
        raise _ReadError(f"cannot read the answer of {url}: {exc}") from None
    try:
        answer = json.loads(body)
    except ValueError:
        raise _ReadError(f"answered {_quote(body.decode(errors='replace'))}, not Prometheus's JSON") from None
    if not isinstance(answer, dict):
        raise _ReadError(f"answered {_quote(body.decode(errors='replace'))}, not Prometheus's JSON")
    if answer.get("status") != "success":
        raise _ReadError(f"status {answer.get('status')!r}{_prometheus_error(body)}")
    return _scalar(answer.get("data"))


def _scalar(data: Any) -> float:
    """The value of a ``scalar`` result or of a ``vector`` of exactly one sample."""
    if not isinstance(data, dict):
        raise _ReadError(f"answered data {_quote(json.dumps(data))} (expected a result)")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        pair = result
    elif kind == "vector":
        if not isinstance(result, list) or len(result) != 1:
            n = len(result) if isinstance(result, list) else "no"
            raise _ReadError(f"answered a vector of {n} samples (expected one)")
        pair = result[0].get("value") if isinstance(result[0], dict) else None
    else:
        raise _ReadError(f"answered a {kind!r} result (expected a scalar or a vector of one sample)")
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
        raise _ReadError(f'answered a sample {_quote(json.dumps(pair))} (expected [time, "value"])')
    try:
        value = float(pair[1])
    except ValueError:
        raise _ReadError(f"answered the value {_quote(pair[1])} (expected a number)") from None
    if not math.isfinite(value):
        raise _ReadError(f"answered {pair[1]} (expected a finite number of GPUs)", value)
    if value < 0:
        raise _ReadError(f"answered a negative number {pair[1]} (expected GPUs >= 0)", value)
    if value >= 1e15:
        raise _ReadError(f"answered {pair[1]} (expected a number of GPUs)", value)
    return value


def _prometheus_error(body: bytes) -> str:
    """``: <errorType>: <error>`` from Prometheus's JSON error answer, else the body quoted (or nothing)."""
    try:
        answer = json.loads(body)
    except ValueError:
        text = body.decode(errors="replace").strip()
        return f": {_quote(text)}" if text else ""
    if isinstance(answer, dict) and "error" in answer:
        return f": {answer.get('errorType', 'error')}: {answer['error']}"
    return f": {_quote(body.decode(errors='replace'))}"


# ----------------------------------------------------------------------------- the number and the report


def _gpus(value: float) -> int:
    """GPUs from an answered number >= 0: rounded half up (2.5 is 3)."""
    return math.floor(value + 0.5)


def _quote(text: str) -> str:
    """An answer quoted for a one-line report, cut at :data:`ANSWER_CHARS` characters."""
    text = text.strip()
    return repr(text if len(text) <= ANSWER_CHARS else text[:ANSWER_CHARS] + "...")


def _one_line(text: str) -> str:
    """A report's line: no line breaks."""
    return " ".join(text.split())
