"""agents.fanout: the same results table serially, over a process pool and over Ray; failures; CPU budget."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.fanout import (
    LOCAL_RAY,
    Backend,
    FanoutError,
    OversubscribedError,
    RayNotInstalledError,
    Task,
    TaskResult,
    available_cpus,
    check_cpu_budget,
    fan_out,
    run_task,
    run_tasks,
)
from agents.options import PlanOptions
from gpu_env.generators import generate
from gpu_env.scenario import load_scenario
from tests.conftest import HANG_GUARD_S, SEVEN

ROOT = Path(__file__).resolve().parents[1]
DETERMINISTIC = ("fifo", "greedy", "ppo")
SEED = 3
# Time is a controlled input: no wall limit is ever reached (NO_WALL) and CP-SAT stops at a deterministic-time
# limit (machine-independent work; with one worker the same search on any machine) far above the 0.03 that
# proving proven_tasks' scenario takes. A timed-out task sleeps far past its timeout (HANG) while the other
# tasks of a timeout test do no work under the timeout at all.
NO_WALL = 10_000.0
PROVE = 10.0
HANG = 600.0


def seven_tasks() -> list[Task]:
    """fifo, greedy and ppo (fixed seed) on the seven benchmark scenarios, sent as documents."""
    scenarios = [load_scenario(ROOT / "configs" / "scenarios" / f"{name}.yaml") for name in SEVEN]
    return [Task.make(sc, planner, PlanOptions(seed=SEED)) for sc in scenarios for planner in DETERMINISTIC]


def proven_tasks() -> list[Task]:
    """cpsat and full on a scenario whose optimum they prove with little work (0.03 of CP-SAT's deterministic time).

    One worker, no reachable wall limit, a deterministic limit: proven, or not, the same at any machine speed.
    """
    sc = generate("training-heavy", seed=4)
    options = PlanOptions(time_limit=NO_WALL, workers=1, deterministic_time=PROVE)
    return [Task.make(sc, planner, options) for planner in ("cpsat", "full")]


@pytest.fixture(scope="module")
def serial_seven():
    run = run_tasks(seven_tasks())
    assert run.ok, run.failure_lines()
    return run


@pytest.fixture(scope="module")
def serial_proven():
    run = run_tasks(proven_tasks())
    assert run.ok, run.failure_lines()
    assert [r.plan["info"]["status"] for r in run.results] == ["optimal", "optimal"]
    return run


# ----------------------------------------------------------------------------- task functions for the tests
# Module-level, so that pool and Ray workers import them by name.


def raise_on_greedy(task: Task) -> TaskResult:
    if task.planner == "greedy":
        raise RuntimeError("greedy broke")
    return run_task(task)


def hang_on_greedy(task: Task) -> TaskResult:
    """Greedy never finishes (it sleeps far past any timeout here); every other task returns at once, planning
    nothing, so that the timeout bounds no real work: what is tested is the fan-out, at any machine speed."""
    if task.planner == "greedy":
        time.sleep(HANG)
    return TaskResult(task.scenario_name, task.planner, task.seed, values={"finished": True})


def crash_once(task: Task) -> TaskResult:
    """Kill the worker process the first time (a marker file remembers), then plan."""
    marker = Path(task.params["marker"])
    if not marker.exists():
        marker.write_text("crashed once\n")
        os._exit(1)
    return run_task(task)


def crash_always(task: Task) -> TaskResult:
    if task.planner == "greedy":
        os._exit(1)
    return run_task(task)


# ----------------------------------------------------------------------------- tasks and the serial run


def test_serial_table_is_in_task_order_with_plain_values(serial_seven):
    tasks = seven_tasks()
    assert [(r.scenario, r.planner, r.seed) for r in serial_seven.results] == [
        (t.scenario_name, t.planner, SEED) for t in tasks
    ]
    first = serial_seven.results[0]
    assert first.objective == pytest.approx(first.metrics["objective"])
    assert first.plan is not None and "solve_ms" not in first.plan and first.solve_ms is not None
    assert "solve_ms" not in first.comparable() and "elapsed" not in first.comparable()
    assert serial_seven.backend == "serial, 1 CP-SAT worker"


def test_a_task_plans_as_the_registry_does():
    from agents.registry import run_scheduler

    sc = generate("priority-inversion", seed=2)
    result = run_task(Task.make(sc, "greedy", PlanOptions(seed=1)))
    plan = run_scheduler("greedy", sc, PlanOptions(seed=1))
    expected = plan.to_dict()
    expected.pop("solve_ms")
    assert result.plan == expected and result.objective == pytest.approx(plan.metrics.objective)
    again = result.to_plan(sc)
    assert again.to_dict() == plan.to_dict() | {"solve_ms": round(result.solve_ms, 3)}
    assert again.metrics == plan.metrics


def test_a_proven_plan_keeps_its_status_and_bound(serial_proven):
    sc = generate("training-heavy", seed=4)
    result = serial_proven.results[0]
    plan = result.to_plan(sc)
    assert plan.info["status"] == "optimal" and plan.info["bound"] == result.plan["info"]["bound"]
    assert TaskResult.failed(proven_tasks()[0], "X: y").to_plan(sc) is None


def test_the_learned_planner_is_warmed_up_before_it_is_timed(monkeypatch):
    from agents import ppo

    calls: list[object] = []
    monkeypatch.setattr(ppo, "warm_up", lambda path=None: calls.append(path))
    sc = generate("training-heavy", seed=0)
    for planner in ("fifo", "greedy", "ppo"):
        assert run_task(Task.make(sc, planner)).ok
    assert calls == [None]  # ppo only, with the task's policy (the shipped one)


def test_warm_up_plans_once_per_process_and_policy(monkeypatch):
    from agents import ppo

    monkeypatch.setattr(ppo, "_CACHE", {})  # a freshly loaded policy, not yet warm
    real, calls = ppo._decode_candidates, []
    monkeypatch.setattr(ppo, "_decode_candidates", lambda *a, **k: calls.append(1) or real(*a, **k))
    ppo.warm_up()
    ppo.warm_up()
    assert calls == [1]


def test_full_with_a_missing_policy_still_falls_back_after_the_warm_up(tmp_path):
    sc = generate("training-heavy", seed=0)
    missing = tmp_path / "no-such-policy.onnx"
    result = run_task(Task.make(sc, "full", PlanOptions(policy=missing, time_limit=NO_WALL, deterministic_time=0.1)))
    assert result.ok and result.violations == []
    hint = result.plan["info"]["hint"]
    assert hint["scheduler"] == "greedy" and "policy file not found" in hint["fallback"]


def test_a_task_reads_a_scenario_file(tmp_path):
    path = ROOT / "configs" / "scenarios" / "mixed-control.yaml"
    by_path = run_task(Task.make(path, "fifo"))
    by_document = run_task(Task.make(load_scenario(path), "fifo"))
    assert by_path.comparable() == by_document.comparable() and by_path.ok


# ----------------------------------------------------------------------------- the process pool


def test_pool_gives_the_serial_table_on_the_seven_scenarios(serial_seven):
    seen: list[int] = []
    run = run_tasks(seven_tasks(), Backend.pool(2), on_result=lambda i, r: seen.append(i))
    assert run.table() == serial_seven.table()
    assert sorted(seen) == list(range(len(seen))) == list(range(len(serial_seven.results)))
    assert run.backend == "process pool, 2 processes x 1 CP-SAT worker"


def test_pool_gives_the_serial_table_for_proven_optima(serial_proven):
    run = run_tasks(proven_tasks(), Backend.pool(2))
    assert run.table() == serial_proven.table()


# ----------------------------------------------------------------------------- failures


@pytest.mark.parametrize("backend", [Backend.serial(), Backend.pool(2)], ids=["serial", "pool"])
def test_a_raising_planner_is_reported_and_the_others_complete(backend):
    sc = generate("training-heavy", seed=0)
    tasks = [Task.make(sc, planner, PlanOptions(seed=5)) for planner in ("fifo", "greedy", "ppo")]
    run = run_tasks(tasks, backend, function=raise_on_greedy)
    assert not run.ok
    assert [r.planner for r in run.failures] == ["greedy"]
    assert run.failure_lines() == [
        f"scenario {sc.name!r}, planner 'greedy', seed 5: RuntimeError: greedy broke",
    ]
    assert run.results[0].ok and run.results[2].ok


def test_a_real_planner_failure_is_reported(tmp_path):
    sc = generate("training-heavy", seed=0)
    missing = tmp_path / "no-such-policy.onnx"
    tasks = [Task.make(sc, "ppo", PlanOptions(policy=missing)), Task.make(sc, "fifo")]
    run = run_tasks(tasks, Backend.pool(2))
    assert [r.planner for r in run.failures] == ["ppo"]
    assert str(missing) in run.failure_lines()[0] and run.results[1].ok


@pytest.mark.parametrize("backend", [Backend.serial(), Backend.pool(2)], ids=["serial", "pool"])
def test_a_task_past_its_timeout_is_reported_and_the_others_complete(backend):
    sc = generate("training-heavy", seed=0)
    tasks = [Task.make(sc, planner) for planner in ("fifo", "greedy", "ppo")]
    before = signal.getsignal(signal.SIGALRM)
    run = run_tasks(tasks, backend, timeout=1.0, function=hang_on_greedy)  # greedy would sleep HANG s without it
    assert run.failure_lines() == [f"scenario {sc.name!r}, planner 'greedy', seed 0: TaskTimeout: ran past 1 s"]
    assert run.results[0].ok and run.results[2].ok
    assert signal.getsignal(signal.SIGALRM) == before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_timer_set_outside_the_task_is_restored():
    def outer(signum, frame):
        raise AssertionError("the outer timer fired inside the test")

    before = signal.signal(signal.SIGALRM, outer)
    try:
        # Far apart, and far above what the task takes: the outer timer, not the task's, is left running.
        signal.setitimer(signal.ITIMER_REAL, NO_WALL)
        run = run_tasks([Task.make(generate("training-heavy", seed=0), "fifo")], timeout=HANG)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert run.ok and HANG < left <= NO_WALL
        assert signal.getsignal(signal.SIGALRM) is outer
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def test_an_invalid_plan_fails_the_run():
    result = TaskResult("s", "greedy", 0, objective=1.0, plan={"placements": []}, violations=["rule 3: overlap"])
    from agents.fanout import Run

    run = Run([result], "serial, 1 CP-SAT worker", 0.0)
    assert not run.ok and run.failure_lines() == [
        "scenario 's', planner 'greedy', seed 0: invalid plan: rule 3: overlap"
    ]


def test_a_dead_pool_worker_is_reported_not_hung(tmp_path):
    sc = generate("training-heavy", seed=0)
    tasks = [Task.make(sc, planner) for planner in ("greedy", "fifo")]
    run = run_tasks(tasks, Backend.pool(2), function=crash_always, timeout=HANG)
    assert "greedy" in [r.planner for r in run.failures]
    assert all("BrokenProcessPool" in r.error for r in run.failures)


# ----------------------------------------------------------------------------- the CPU budget


def test_oversubscription_is_refused():
    check_cpu_budget(2, 1, cpus=2)
    check_cpu_budget(1, 8, cpus=2)  # one process: the solver's workers are its own business
    with pytest.raises(OversubscribedError, match=r"--parallel 2 x --workers 2 = 4 CPU threads.*has 2 CPUs"):
        check_cpu_budget(2, 2, cpus=2)
    assert issubclass(OversubscribedError, ValueError)


def test_fan_out_refuses_before_any_task_runs():
    calls: list[int] = []
    tasks = [Task.make(generate("training-heavy", seed=0), "cpsat", PlanOptions(workers=2))] * 3
    with pytest.raises(OversubscribedError):
        for index, _ in fan_out(tasks, Backend.pool(2), cpus=3):
            calls.append(index)
    assert calls == []


def cli(*args: str, env: dict[str, str] | None = None, prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = f"import sys; {prelude}from agents.fanout import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=HANG_GUARD_S
    )


def test_cli_refuses_oversubscription_in_one_line():
    parallel = available_cpus() + 1
    done = cli("--parallel", str(parallel), "--workers", "1")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"--parallel {parallel} x --workers 1" in done.stderr


def test_cli_refuses_parallel_with_ray():
    done = cli("--parallel", "2", "--ray")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "choose one" in done.stderr


def test_cli_runs_and_exits_non_zero_on_a_failed_task(tmp_path):
    out = tmp_path / "run.json"
    ok = cli("--scenarios", "configs/scenarios/mixed-control.yaml", "--planners", "fifo,greedy", "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    assert "2 tasks, 0 failed" in ok.stdout and out.exists()
    bad = cli("--scenarios", "configs/scenarios/mixed-control.yaml", "--planners", "ppo", "--policy", "/nope.onnx")
    assert bad.returncode == 1
    assert "failed: scenario 'mixed-control', planner 'ppo', seed 0" in bad.stderr


# ----------------------------------------------------------------------------- Ray absent


def test_without_ray_the_ray_backend_says_how_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(RayNotInstalledError, match=r'pip install -e "\.\[ray\]"'):
        Backend.ray()
    assert issubclass(RayNotInstalledError, FanoutError)


def test_cli_without_ray_says_how_to_install_in_one_line():
    done = cli("--ray", prelude="sys.modules['ray'] = None; ")  # what an absent package looks like to find_spec
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert 'pip install -e ".[ray]"' in done.stderr


# ----------------------------------------------------------------------------- Ray (pip install -e ".[ray]")


@pytest.fixture(scope="class")
def local_ray():
    """A local Ray of two CPUs for the tests of one class, shut down afterwards."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.ray
@pytest.mark.usefixtures("local_ray")
class TestLocalRay:
    def test_same_table_as_serial(self, serial_seven, serial_proven):
        counted: list[int] = []
        run = run_tasks(seven_tasks() + proven_tasks(), Backend.ray(), on_result=lambda i, r: counted.append(i))
        assert run.table() == serial_seven.table() + serial_proven.table()
        assert sorted(counted) == list(range(len(run.results)))
        assert run.backend == "local Ray, num_cpus=1 per task"

    def test_failures_and_timeouts_are_reported(self):
        sc = generate("training-heavy", seed=0)
        tasks = [Task.make(sc, planner) for planner in ("fifo", "greedy")]
        raised = run_tasks(tasks, Backend.ray(), function=raise_on_greedy)
        assert raised.failure_lines() == [f"scenario {sc.name!r}, planner 'greedy', seed 0: RuntimeError: greedy broke"]
        timed = run_tasks(tasks, Backend.ray(), function=hang_on_greedy, timeout=1.0)
        assert [r.error for r in timed.failures] == ["TaskTimeout: ran past 1 s"] and timed.results[0].ok

    def test_a_killed_worker_is_retried_once(self, tmp_path):
        sc = generate("training-heavy", seed=0)
        task = Task.make(sc, "greedy", marker=str(tmp_path / "crashed"))
        run = run_tasks([task], Backend.ray(), function=crash_once)
        assert (tmp_path / "crashed").exists()  # the first attempt died ...
        assert run.ok  # ... and the retry planned

    def test_a_worker_killed_twice_is_reported_and_the_others_complete(self):
        sc = generate("training-heavy", seed=0)
        tasks = [Task.make(sc, planner) for planner in ("fifo", "greedy")]
        run = run_tasks(tasks, Backend.ray(), function=crash_always)
        assert [r.planner for r in run.failures] == ["greedy"] and run.results[0].ok
        assert "Worker" in run.failures[0].error or "Died" in run.failures[0].error

    def test_a_task_bigger_than_any_node_is_refused(self):
        tasks = [Task.make(generate("training-heavy", seed=0), "cpsat", PlanOptions(workers=3))]
        with pytest.raises(OversubscribedError, match="largest node of the Ray cluster has 2"):
            run_tasks(tasks, Backend.ray())


def _unused_port() -> int:
    """A port nothing listens on now: for Ray's client server only, where a later collision is harmless.

    Another process may take it before Ray binds it; then only the client server (which no test here uses) exits,
    and the cluster runs: ``ray start`` succeeds either way. The head's own port is chosen by Ray (``--port 0``).
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _process_groups_using(folder: str) -> set[int]:
    """The process groups of the processes whose command line names ``folder`` (a cluster's own temp dir)."""
    groups = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if folder.encode() in (entry / "cmdline").read_bytes():
                groups.add(os.getpgid(int(entry.name)))
        except (OSError, ProcessLookupError):
            continue  # gone meanwhile, or not ours to read
    groups.discard(os.getpgrp())  # never this test's own group
    return groups


def _stop_cluster(folder: str) -> None:
    """Stop the Ray processes that this cluster's ``ray start`` commands left (each started its own process group).

    Only the groups of processes naming the cluster's temp dir: ``ray stop`` would stop every Ray on the machine.
    """
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        groups = _process_groups_using(folder)
        for group in groups:
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while groups and time.monotonic() < deadline:
            time.sleep(0.2)
            groups = _process_groups_using(folder)
        if not groups:
            return


@pytest.fixture
def two_node_cluster():
    """A head and a second node of one CPU each on this machine, stopped afterwards whatever happened.

    Token authentication (a token of its own, in the environment of every process) and loopback addresses,
    as Ray 2.60 needs. The cluster has a temp dir of its own, by which teardown finds its processes (and only
    them). No port is picked here and used later (another process could take it meanwhile): the head binds a
    port of Ray's choice (``--port 0``) and ``ray start`` writes the address it bound into the temp dir
    (``ray_current_cluster``), which the second node and the driver are given.
    """
    import secrets
    import shutil
    import tempfile

    ray = pytest.importorskip("ray")
    ray.shutdown()  # no driver of this process may be connected elsewhere
    token = secrets.token_hex(32)  # as `ray get-auth-token --generate` makes one, without writing ~/.ray
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "RAY_USAGE_STATS_ENABLED": "0"}
    ray_cli = [sys.executable, "-m", "ray.scripts.scripts"]
    folder = tempfile.mkdtemp(prefix="ray-gpualloc-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes

    def start(*args: str) -> None:
        command = [*ray_cli, "start", *args, "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--temp-dir", folder]
        # A session of its own: the daemons it leaves inherit its process group, which teardown stops.
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S, start_new_session=True
        )
        assert done.returncode == 0, done.stdout + done.stderr

    try:
        client_port = str(_unused_port())
        start("--head", "--port", "0", "--ray-client-server-port", client_port, "--include-dashboard", "false")
        address = (Path(folder) / "ray_current_cluster").read_text().strip()  # HOST:PORT as the head bound it
        assert address.rsplit(":", 1)[-1].isdigit() and not address.endswith(":0"), address
        start("--address", address)
        yield address, env
    finally:
        _stop_cluster(folder)
        shutil.rmtree(folder, ignore_errors=True)
        assert not _process_groups_using(folder), "a Ray process of the test cluster outlived it"


@pytest.mark.ray
def test_two_node_cluster_gives_the_serial_table(two_node_cluster, serial_seven, tmp_path):
    address, env = two_node_cluster
    out = tmp_path / "run.json"
    done = cli(
        "--scenarios",
        *(f"configs/scenarios/{name}.yaml" for name in SEVEN),
        "--planners",
        ",".join(DETERMINISTIC),
        "--seed",
        str(SEED),
        "--ray",
        address,
        "--quiet",
        "--out",
        str(out),
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert f"Ray cluster at {address}, num_cpus=1 per task" in done.stdout
    import json

    results = [TaskResult(**r).comparable() for r in json.loads(out.read_text())["results"]]
    assert results == serial_seven.table()


def test_backend_descriptions():
    assert Backend.pool(1) == Backend.serial()
    assert Backend("ray", 1, LOCAL_RAY).describe(2) == "local Ray, num_cpus=2 per task"
    assert Backend("ray", 1, "10.0.0.1:6379").describe(1) == "Ray cluster at 10.0.0.1:6379, num_cpus=1 per task"
    with pytest.raises(FanoutError):
        Backend.pool(0)
