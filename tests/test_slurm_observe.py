"""The apps' observed demand: the config's ``realtime[].observed``, a command, a Prometheus query (a fake server and
a real Prometheus), and every way a source fails or answers nonsense (docs/slurm.md, Observed demand)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.slurm import observe
from agents.slurm.config import OBSERVE_TIMEOUT, ObservedSource, RealtimeApp, config_from_dict, load_config
from agents.slurm.errors import ConfigError
from agents.slurm.observe import Observation, read_all, read_observed
from tests.conftest import HANG_GUARD_S

PY = sys.executable
PROMETHEUS = "/usr/bin/prometheus"
WAIT_S = 60.0  # how long a poll waits for a real Prometheus to answer: a hang guard, never a speed check


def _config(*observed: Any) -> dict:
    apps = [{"name": f"app{i}", "demand": [3] * 4, "ramp": 2} for i in range(len(observed))]
    for app, source in zip(apps, observed, strict=True):
        if source is not None:
            app["observed"] = source
    return {"owned": {"partitions": ["gpu"]}, "horizon": {"slots": 4}, "realtime": apps}


def _app(source: ObservedSource, name: str = "chat") -> RealtimeApp:
    return RealtimeApp(name=name, demand=(3,) * 4, ramp=2, penalty=1.0, observed=source)


def _command(*argv: str, timeout: float = HANG_GUARD_S) -> Observation:
    return read_observed(_app(ObservedSource(command=argv, timeout=timeout)))


def _python(code: str, timeout: float = HANG_GUARD_S) -> Observation:
    return _command(PY, "-c", code, timeout=timeout)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake and real servers are on 127.0.0.1: never through a proxy the environment names."""
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


# ----------------------------------------------------------------------------- the configuration


def test_config_reads_both_sources_and_the_timeout() -> None:
    cfg = config_from_dict(
        _config(
            {"command": "chat-gpus --now 'a b'"},
            {"command": ["chat-gpus", "--now"], "timeout": 0.5},
            {"prometheus": {"url": "http://prom:9090/", "query": 'sum(demand{app="chat"})'}, "timeout": 2},
            None,
        )
    )
    a, b, c, d = cfg.apps
    assert a.observed == ObservedSource(command=("chat-gpus", "--now", "a b"), timeout=OBSERVE_TIMEOUT)
    assert b.observed == ObservedSource(command=("chat-gpus", "--now"), timeout=0.5)
    assert c.observed == ObservedSource(url="http://prom:9090", query='sum(demand{app="chat"})', timeout=2.0)
    assert d.observed is None
    assert a.observed.describe() == "command \"chat-gpus --now 'a b'\""
    assert c.observed.describe() == 'prometheus http://prom:9090 sum(demand{app="chat"})'


def test_the_example_config_reads(tmp_path: Path) -> None:
    """configs/slurm/example.yaml with its commented ``observed:`` examples uncommented."""
    text = (Path(__file__).parents[1] / "configs" / "slurm" / "example.yaml").read_text()
    lines = [line for line in text.splitlines() if line.lstrip().startswith("# observed:")]
    assert len(lines) == 2, "one command and one Prometheus example"
    for line in lines:
        path = tmp_path / "c.yaml"
        path.write_text(text.replace(line, line.replace("# observed:", "observed:", 1)))
        (app,) = load_config(path).apps
        assert app.observed is not None


P = "realtime[0].observed"


@pytest.mark.parametrize(
    ("observed", "field"),
    [
        (5, P),
        (None, P),
        ({}, P),
        ({"command": "x", "prometheus": {"url": "http://p", "query": "q"}}, P),
        ({"command": "x", "every": 1}, f"{P}.every"),
        ({"command": ""}, f"{P}.command"),
        ({"command": "   "}, f"{P}.command"),
        ({"command": "a 'b"}, f"{P}.command"),
        ({"command": 5}, f"{P}.command"),
        ({"command": []}, f"{P}.command"),
        ({"command": ["x", ""]}, f"{P}.command[1]"),
        ({"command": ["x", 3]}, f"{P}.command[1]"),
        ({"command": "x", "timeout": 0}, f"{P}.timeout"),
        ({"command": "x", "timeout": -1}, f"{P}.timeout"),
        ({"command": "x", "timeout": "5"}, f"{P}.timeout"),
        ({"command": "x", "timeout": True}, f"{P}.timeout"),
        ({"command": "x", "timeout": float("nan")}, f"{P}.timeout"),
        ({"prometheus": "http://p"}, f"{P}.prometheus"),
        ({"prometheus": {"query": "q"}}, f"{P}.prometheus.url"),
        ({"prometheus": {"url": "http://p"}}, f"{P}.prometheus.query"),
        ({"prometheus": {"url": "http://p", "query": "q", "step": 1}}, f"{P}.prometheus.step"),
        ({"prometheus": {"url": "", "query": "q"}}, f"{P}.prometheus.url"),
        ({"prometheus": {"url": 9090, "query": "q"}}, f"{P}.prometheus.url"),
        ({"prometheus": {"url": "prom:9090", "query": "q"}}, f"{P}.prometheus.url"),
        ({"prometheus": {"url": "ftp://prom", "query": "q"}}, f"{P}.prometheus.url"),
        ({"prometheus": {"url": "http://", "query": "q"}}, f"{P}.prometheus.url"),
        ({"prometheus": {"url": "http://p/api?x=1", "query": "q"}}, f"{P}.prometheus.url"),
        ({"prometheus": {"url": "http://p q", "query": "q"}}, f"{P}.prometheus.url"),
        ({"prometheus": {"url": "http://p", "query": ""}}, f"{P}.prometheus.query"),
        ({"prometheus": {"url": "http://p", "query": "  "}}, f"{P}.prometheus.query"),
        ({"prometheus": {"url": "http://p", "query": ["q"]}}, f"{P}.prometheus.query"),
    ],
)
def test_a_bad_observed_names_the_file_and_the_field(observed: Any, field: str) -> None:
    data = _config({})
    data["realtime"][0]["observed"] = observed
    with pytest.raises(ConfigError) as exc:
        config_from_dict(data, "my.yaml")
    assert exc.value.field == field and str(exc.value).startswith(f"my.yaml: {field}: ")


# ----------------------------------------------------------------------------- a command


def test_a_command_that_prints_one_integer() -> None:
    o = _python("print(5)")
    assert (o.app, o.gpus, o.value, o.error) == ("chat", 5, 5.0, None)
    assert o.source.startswith("command ") and "print(5)" in o.source and o.seconds >= 0
    assert _python("print('  7 \\n\\n')").gpus == 7
    assert _python("import sys; sys.stdout.write('\\t0')").gpus == 0
    assert _command("echo", "12").gpus == 12  # no shell: the words are the argv


@pytest.mark.parametrize(
    ("printed", "said"),
    [
        ("", "printed nothing"),
        ("  \n ", "printed nothing"),
        ("-3", "negative"),
        ("2.5", "'2.5'"),
        ("5 6", "several values"),
        ("5\n6", "several values"),
        ("five", "'five'"),
        ("0x10", "'0x10'"),
        ("1_000", "'1_000'"),
        ("+4", "'+4'"),
        ("\u0661", "expected one integer"),  # ARABIC-INDIC DIGIT ONE: int() reads it, we do not
        ("9" * 40, "expected one integer"),
    ],
)
def test_a_command_that_prints_nonsense_is_reported(printed: str, said: str) -> None:
    o = _python(f"import sys; sys.stdout.write({printed!r})")
    assert o.gpus is None and o.error is not None and said in o.error
    assert "\n" not in o.error


def test_a_command_that_fails_is_reported_with_what_it_said() -> None:
    o = _python("import sys; print(4); print('no such app\\nreally', file=sys.stderr); sys.exit(3)")
    assert o.gpus is None and o.error is not None
    assert "exited with status 3" in o.error and "'really'" in o.error and "stdout: '4'" in o.error
    missing = _command("/nonexistent/gpualloc-no-such-command")
    assert missing.gpus is None and "cannot run" in (missing.error or "")
    assert "\n" not in (o.error or "")


def _gone(pid: int) -> bool:
    """Whether the process is dead (no such process, or a zombie that nobody has reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_a_command_past_its_timeout_is_killed_with_its_process_group(tmp_path: Path) -> None:
    """A command that sleeps far longer than its 0.5 s timeout, with a child in its group: both are killed."""
    script = 'sleep 600 & echo "$$ $!" > "$1.tmp" && mv "$1.tmp" "$1"; wait'
    timeout = 0.5
    for _attempt in range(4):  # the pid file is written within milliseconds; a very busy machine gets longer
        pids = tmp_path / f"pids-{timeout}"
        o = _command("sh", "-c", script, "sh", str(pids), timeout=timeout)
        if pids.exists():
            break
        timeout *= 4
    assert pids.exists(), "the command never started within its timeout"
    assert o.gpus is None and o.error == f"no answer within {timeout:g} s (its process group killed)"
    leader, child = (int(p) for p in pids.read_text().split())
    deadline = time.monotonic() + HANG_GUARD_S
    while not (_gone(leader) and _gone(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(leader) and _gone(child)


def test_read_all_reads_every_source_in_parallel_and_never_raises(tmp_path: Path) -> None:
    """Two commands that each wait for the other's file: only a parallel read answers both within the timeout."""
    wait = 'touch "$1"; while [ ! -e "$2" ]; do sleep 0.02; done; echo {}'
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    cfg = config_from_dict(
        _config(
            {"command": ["sh", "-c", wait.format(3), "sh", a, b], "timeout": 120},
            None,
            {"command": ["sh", "-c", wait.format(4), "sh", b, a], "timeout": 120},
            {"command": [PY, "-c", "print('lots')"]},
            {"command": "/nonexistent/gpualloc-no-such-command"},
        )
    )
    found = read_all(cfg)
    assert list(found) == ["app0", "app2", "app3", "app4"]
    assert (found["app0"].gpus, found["app2"].gpus) == (3, 4)
    assert found["app3"].gpus is None and "'lots'" in (found["app3"].error or "")
    assert found["app4"].gpus is None and "cannot run" in (found["app4"].error or "")
    assert read_all(config_from_dict(_config(None))) == {}


def test_a_reading_that_breaks_unexpectedly_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: Any) -> int:
        raise RuntimeError("surprise")

    monkeypatch.setattr(observe, "_read_command", broken)
    o = _command("true")
    assert o.gpus is None and o.error == "failed: RuntimeError: surprise"


def test_the_cli_observer_keeps_the_readings_and_reports_the_failures() -> None:
    from agents.slurm.live import LiveSetup
    from agents.slurm.slurm_commands import _observe

    cfg = config_from_dict(_config({"command": [PY, "-c", "print(6)"]}, {"command": [PY, "-c", "print(-1)"]}, None))
    reader = _observe(cfg, LiveSetup())
    assert reader is not None
    readings, failed = reader(cfg)
    assert readings == {"app0": 6}
    assert len(failed) == 1 and failed[0].startswith("app1: printed a negative number")
    assert _observe(cfg, "greedy") is None and _observe(config_from_dict(_config(None)), LiveSetup()) is None


# ----------------------------------------------------------------------------- Prometheus, a fake server


class _Fake:
    """A fake Prometheus on 127.0.0.1: answers every request with ``status`` and ``body``, records the queries."""

    def __init__(self) -> None:
        self.status = 200
        self.body: bytes = b""
        self.hang = threading.Event()  # set: answer; clear: hold the request until released
        self.hang.set()
        self.queries: list[tuple[str, dict[str, list[str]]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                fake.queries.append((url.path, urllib.parse.parse_qs(url.query)))
                fake.hang.wait(HANG_GUARD_S)
                self.send_response(fake.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(fake.body)))
                self.end_headers()
                self.wfile.write(fake.body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, data: Any, status: int = 200) -> None:
        self.status = status
        self.body = data if isinstance(data, bytes) else json.dumps(data).encode()

    def read(self, query: str = 'app_gpus{app="chat"}', timeout: float = HANG_GUARD_S) -> Observation:
        return read_observed(_app(ObservedSource(url=self.url, query=query, timeout=timeout)))

    def close(self) -> None:
        self.hang.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake() -> Iterator[_Fake]:
    server = _Fake()
    try:
        yield server
    finally:
        server.close()


def _scalar(value: str) -> dict:
    return {"status": "success", "data": {"resultType": "scalar", "result": [1764000000.123, value]}}


def _vector(*values: str) -> dict:
    samples = [{"metric": {"app": "chat", "i": str(i)}, "value": [1764000000.1, v]} for i, v in enumerate(values)]
    return {"status": "success", "data": {"resultType": "vector", "result": samples}}


@pytest.mark.parametrize(
    ("answer", "gpus", "value"),
    [
        (_scalar("4"), 4, 4.0),
        (_scalar("4.5"), 5, 4.5),  # half up
        (_scalar("2.49"), 2, 2.49),
        (_scalar("0"), 0, 0.0),
        (_scalar("0.5"), 1, 0.5),
        (_vector("3"), 3, 3.0),
        (_vector("6.5"), 7, 6.5),
        (_vector("1e1"), 10, 10.0),
    ],
)
def test_a_prometheus_scalar_or_one_sample_is_the_demand(fake: _Fake, answer: dict, gpus: int, value: float) -> None:
    fake.answer(answer)
    o = fake.read('sum(app_gpus{app="chat", zone=~"a|b"}) / 2')
    assert (o.gpus, o.value, o.error) == (gpus, value, None)
    assert o.source == f'prometheus {fake.url} sum(app_gpus{{app="chat", zone=~"a|b"}}) / 2'
    (path, params) = fake.queries[-1]
    assert path == "/api/v1/query" and params == {"query": ['sum(app_gpus{app="chat", zone=~"a|b"}) / 2']}


@pytest.mark.parametrize(
    ("answer", "status", "said"),
    [
        (_scalar("NaN"), 200, "answered NaN"),
        (_scalar("+Inf"), 200, "answered +Inf"),
        (_vector("-Inf"), 200, "answered -Inf"),
        (_scalar("-1"), 200, "negative number -1"),
        (_scalar("lots"), 200, "'lots'"),
        (_scalar("1e300"), 200, "1e300"),
        (_vector(), 200, "vector of 0 samples"),
        (_vector("1", "2"), 200, "vector of 2 samples"),
        ({"status": "success", "data": {"resultType": "matrix", "result": []}}, 200, "'matrix' result"),
        ({"status": "success", "data": {"resultType": "string", "result": [1, "5"]}}, 200, "'string' result"),
        ({"status": "success", "data": {"resultType": "scalar", "result": [1, 5]}}, 200, "expected [time"),
        ({"status": "success", "data": {"resultType": "vector", "result": [7]}}, 200, "expected [time"),
        ({"status": "success"}, 200, "expected a result"),
        ({"status": "error", "errorType": "execution", "error": "too many samples"}, 200, "execution: too many"),
        ({"status": "error", "errorType": "bad_data", "error": "parse error at char 4"}, 400, "HTTP 400"),
        (b"<html>Bad gateway</html>", 502, "HTTP 502"),
        (b"not json", 200, "not Prometheus's JSON"),
        (b"[1, 2]", 200, "not Prometheus's JSON"),
    ],
)
def test_a_prometheus_answer_that_is_not_one_number_is_reported(
    fake: _Fake, answer: Any, status: int, said: str
) -> None:
    fake.answer(answer, status)
    o = fake.read()
    assert o.gpus is None and o.error is not None and said in o.error and "\n" not in o.error
    if status == 400:
        assert "bad_data: parse error at char 4" in o.error


def test_a_prometheus_that_does_not_answer_in_time_is_reported(fake: _Fake) -> None:
    fake.answer(_scalar("3"))
    fake.hang.clear()
    o = fake.read(timeout=0.5)
    fake.hang.set()
    assert o.gpus is None and o.error == "no answer within 0.5 s"


def test_a_prometheus_that_is_not_there_is_reported() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound and never listening: connections are refused
        o = read_observed(_app(ObservedSource(url=f"http://127.0.0.1:{port}", query="up", timeout=5)))
    assert o.gpus is None and o.error is not None and o.error.startswith(f"cannot reach http://127.0.0.1:{port}")


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_a_number_is_rounded_half_up(value: float) -> None:
    assert observe._scalar({"resultType": "scalar", "result": [0, repr(value)]}) == value
    gpus = observe._gpus(value)
    assert gpus - 0.5 <= value < gpus + 0.5 and (value - math.floor(value) != 0.5 or gpus == math.ceil(value))


# ----------------------------------------------------------------------------- a real Prometheus


class _Exporter:
    """A tiny exporter on 127.0.0.1: ``/metrics`` says ``app_gpus_demand{app="chat"} <value>``."""

    def __init__(self, value: float) -> None:
        self.value = value
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = f'# TYPE app_gpus_demand gauge\napp_gpus_demand{{app="chat"}} {exporter.value}\n'.encode()
                self.send_response(200 if self.path.startswith("/metrics") else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, _Exporter, Path]]:
    """A real Prometheus on 127.0.0.1 scraping a tiny exporter every second: its URL, the exporter, its log."""
    if not (os.path.isfile(PROMETHEUS) and os.access(PROMETHEUS, os.X_OK)) and not shutil.which("prometheus"):
        why = f"Prometheus is not here ({PROMETHEUS}); install Debian's package: apt-get install prometheus"
        if os.environ.get("GPUALLOC_REQUIRE_PROMETHEUS") == "1":  # .ci/run installed it: a skip there is a failure
            pytest.fail(why)
        pytest.skip(why)
    binary = PROMETHEUS if os.path.isfile(PROMETHEUS) else str(shutil.which("prometheus"))
    exporter = _Exporter(5)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: demand\n"
        "    scrape_interval: 1s\n"
        "    scrape_timeout: 1s\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{exporter.port}']}}]\n"
    )
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                "--web.listen-address=127.0.0.1:0",  # the OS chooses the port; read back from the log
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield f"http://127.0.0.1:{_listening_port(proc, log)}", exporter, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        exporter.close()
        if proc.returncode not in (0, -15):
            print(_tail(log))


def _listening_port(proc: subprocess.Popen[bytes], log: Path) -> int:
    """The port Prometheus listens on, from its log's ``msg="Listening on" address=127.0.0.1:PORT`` (a bounded poll)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r'msg="Listening on" address=127\.0\.0\.1:(\d+)', log.read_text(errors="replace"))
        if found:
            return int(found.group(1))
        time.sleep(0.1)
    state = f"exited with status {proc.returncode}" if proc.poll() is not None else f"silent for {WAIT_S:g} s"
    pytest.fail(f"prometheus never said where it listens ({state}):\n{_tail(log)}")


def _tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _poll(url: str, query: str, gpus: int, log: Path) -> Observation:
    """Read until the query answers ``gpus`` (a bounded poll), failing with Prometheus's log tail."""
    app = _app(ObservedSource(url=url, query=query, timeout=5))
    deadline = time.monotonic() + WAIT_S
    while True:
        o = read_observed(app)
        if o.gpus == gpus or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert o.gpus == gpus, f"{query} never read {gpus} within {WAIT_S:g} s: last {o}\nprometheus:\n{_tail(log)}"
    return o


@pytest.mark.prometheus
def test_a_real_prometheus_answers_the_demand_and_follows_it(prometheus: tuple[str, _Exporter, Path]) -> None:
    url, exporter, log = prometheus
    o = _poll(url, 'app_gpus_demand{app="chat"}', 5, log)
    assert o.value == 5.0 and o.error is None
    assert _poll(url, 'scalar(app_gpus_demand{app="chat"}) / 2', 3, log).value == 2.5  # a scalar, half up
    exporter.value = 7
    assert _poll(url, 'app_gpus_demand{app="chat"}', 7, log).value == 7.0
    # what a real Prometheus answers to nonsense: a vector of no samples, and a query it cannot parse
    nothing = read_observed(_app(ObservedSource(url=url, query='app_gpus_demand{app="none"}', timeout=5)))
    assert nothing.gpus is None and "vector of 0 samples" in (nothing.error or "")
    bad = read_observed(_app(ObservedSource(url=url, query="sum(", timeout=5)))
    assert bad.gpus is None and "HTTP 400" in (bad.error or "") and "bad_data" in (bad.error or "")
