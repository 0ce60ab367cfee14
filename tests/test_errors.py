"""A bug is a traceback, bad input is one line: every handler catches the project's own error types only.

Each handler gets two tests: the condition it exists for (a bad policy file, a missing package, an
unwritable output, an overlap, a trace day outside the trace) is still handled as before, and a bug of
the same Python type injected at the same place gets through as the exception it is (in a subprocess:
exit 1 with a traceback, never the one-line exit 2 of bad input).
"""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest

from agents import cli, full, ppo, registry
from agents.fanout import Task, TaskResult, execute, run_tasks, warm_up_learned
from agents.options import PlanOptions
from agents.registry import SchedulerUnavailableError, get_scheduler
from gpu_env import generators, traces
from gpu_env.files import OutputError, atomic_path, write_text_atomic
from gpu_env.generators import generate
from gpu_env.validation import validate
from tests.conftest import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "configs" / "scenarios" / "mixed-control.yaml"


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -c CODE ARGS`` in the repository, as a user's shell runs a command."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S
    )


def gpualloc(prelude: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``gpualloc ARGS`` after ``prelude`` (Python statements that inject a fault)."""
    return run_python(f"import sys\n{prelude}\nfrom agents.cli import main\nsys.exit(main(sys.argv[1:]))", *args)


def assert_traceback(done: subprocess.CompletedProcess[str], message: str) -> None:
    """Exit 1 with Python's traceback naming the injected bug: not reported as bad input."""
    assert done.returncode == 1, done.stderr
    assert "Traceback (most recent call last)" in done.stderr and message in done.stderr


def broken_plan(scenario, options):
    """A scheduler with a bug: a ValueError from deep inside, as numpy raises one."""
    raise ValueError("operands could not be broadcast together (injected)")


# ----------------------------------------------------------------------------- PolicyError is its own type


def test_a_policy_error_is_not_a_value_error():
    assert not issubclass(ppo.PolicyError, ValueError)


def test_full_falls_back_on_a_policy_error_only(monkeypatch, tmp_path):
    sc = generate("training-heavy", seed=0)
    fallback = full.choose_hint(sc, "auto", PlanOptions(policy=tmp_path / "missing.onnx"))[1]
    assert fallback["scheduler"] == "greedy" and "policy file not found" in fallback["fallback"]
    monkeypatch.setattr(ppo, "plan", broken_plan)  # the policy loads; the planner has a bug
    with pytest.raises(ValueError, match="injected"):
        full.choose_hint(sc, "auto", PlanOptions())


def test_full_falls_back_when_a_package_is_missing_but_not_on_a_bug(monkeypatch):
    sc = generate("training-heavy", seed=0)
    real = registry.get_scheduler

    def without_ppo(name):
        if name == "ppo":
            raise SchedulerUnavailableError("'ppo' needs the package 'onnxruntime', which is not installed")
        return real(name)

    monkeypatch.setattr(full, "get_scheduler", without_ppo)
    hint, record = full.choose_hint(sc, "auto", PlanOptions())
    assert record["scheduler"] == "greedy" and "onnxruntime" in record["fallback"]
    assert validate(sc, hint) == []

    def import_bug(name):
        if name == "ppo":
            raise ImportError("cannot import name 'helper' from 'agents.ppo' (injected)")
        return real(name)

    monkeypatch.setattr(full, "get_scheduler", import_bug)
    with pytest.raises(ImportError, match="injected"):
        full.choose_hint(sc, "auto", PlanOptions())


def test_the_warm_up_lets_a_bug_through_and_full_survives_a_bad_policy(monkeypatch, tmp_path):
    warm_up_learned("full", PlanOptions(policy=tmp_path / "missing.onnx"))  # full falls back later, says why
    with pytest.raises(ppo.PolicyError):
        warm_up_learned("ppo", PlanOptions(policy=tmp_path / "missing.onnx"))

    def buggy(path=None):
        raise ValueError("index 9 is out of bounds (injected)")

    monkeypatch.setattr(ppo, "warm_up", buggy)
    for planner in ("ppo", "full"):
        with pytest.raises(ValueError, match="injected"):
            warm_up_learned(planner, PlanOptions())


def test_onnxruntime_that_does_not_import_is_a_policy_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what an absent package looks like to import
    monkeypatch.setattr(ppo, "_CACHE", {})
    with pytest.raises(ppo.PolicyError, match="onnxruntime does not import"):
        ppo.load_policy()


# ----------------------------------------------------------------------------- the registry


def test_a_missing_third_party_package_makes_a_scheduler_unavailable():
    code = (
        "import sys\nsys.modules['ortools'] = None\n"
        "from agents.registry import available_schedulers, get_scheduler, SchedulerUnavailableError\n"
        "print(available_schedulers())\n"
        "try:\n    get_scheduler('cpsat')\nexcept SchedulerUnavailableError as exc:\n    print(exc)\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    names, message = done.stdout.splitlines()
    assert "cpsat" not in names and "full" not in names and "greedy" in names
    assert message == "'cpsat' needs the package 'ortools', which is not installed"


def test_a_missing_module_of_our_own_is_a_bug(monkeypatch):
    monkeypatch.setitem(registry.SCHEDULERS, "broken", "agents.no_such_module:plan")
    with pytest.raises(ModuleNotFoundError, match=r"agents\.no_such_module"):
        get_scheduler("broken")
    with pytest.raises(ModuleNotFoundError):
        registry.available_schedulers()


def test_the_cli_reports_a_missing_package_in_one_line():
    done = gpualloc("sys.modules['ortools'] = None", "plan", str(SCENARIO), "--scheduler", "cpsat")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "gpualloc plan: error: --scheduler: 'cpsat' needs the package 'ortools', which is not installed"
    )


def test_the_cli_lets_an_import_error_inside_a_planner_through():
    prelude = (
        "from agents import greedy\n"
        "def plan(scenario, options):\n"
        "    raise ImportError('cannot import name helper (injected)')\n"
        "greedy.plan = plan"
    )
    assert_traceback(gpualloc(prelude, "plan", str(SCENARIO), "--scheduler", "greedy"), "injected")


def test_the_cli_lets_a_value_error_inside_a_planner_through():
    prelude = "from agents import greedy\nfrom tests.test_errors import broken_plan\ngreedy.plan = broken_plan"
    assert_traceback(gpualloc(prelude, "plan", str(SCENARIO), "--scheduler", "greedy"), "injected")


# ----------------------------------------------------------------------------- writing files


def test_an_unwritable_output_is_an_output_error_naming_the_file(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = blocker / "plan.json"  # a folder that is a file
    with pytest.raises(OutputError) as caught:
        write_text_atomic(target, "{}")
    assert caught.value.filename == str(target) and caught.value.errno == errno.ENOTDIR


def test_a_full_disk_during_the_write_is_an_output_error(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(OutputError) as caught, atomic_path(target):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert caught.value.filename == str(target) and not target.exists()
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_another_os_error_inside_the_write_is_not_an_output_error(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(FileNotFoundError) as caught, atomic_path(target) as tmp:
        (tmp_path / "missing-input.csv").read_text()  # a bug in the writer: reading what is not there
        tmp.write_text("never")
    assert not isinstance(caught.value, OutputError)
    assert list(tmp_path.iterdir()) == []


def test_the_cli_reports_an_unwritable_output_in_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    done = gpualloc("", "plan", str(SCENARIO), "--scheduler", "fifo", "-o", str(blocker / "plan.json"))
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert f"{blocker / 'plan.json'}: Not a directory" in done.stderr


def test_the_cli_lets_an_os_error_that_is_not_the_output_through(tmp_path):
    prelude = (
        "from agents import greedy\n"
        "def plan(scenario, options):\n"
        "    open('/nonexistent/injected.csv')\n"
        "greedy.plan = plan"
    )
    done = gpualloc(prelude, "plan", str(SCENARIO), "--scheduler", "greedy", "-o", str(tmp_path / "plan.json"))
    assert_traceback(done, "/nonexistent/injected.csv")
    assert not (tmp_path / "plan.json").exists()


# ----------------------------------------------------------------------------- generate and from-trace


def test_generate_reports_a_size_it_cannot_draw_and_lets_a_bug_through(monkeypatch):
    with pytest.raises(generators.DrawError, match="gpus must be positive"):
        generate("training-heavy", seed=0, gpus=0)
    with pytest.raises(generators.DrawError, match="gpus must be positive"):
        generate("trace-alibaba", seed=0, gpus=0)

    def buggy(*args, **kwargs):
        raise ValueError("setting an array element with a sequence (injected)")

    monkeypatch.setattr(generators, "generate", buggy)
    with pytest.raises(ValueError, match="injected"):
        cli.main(["generate", "training-heavy", "--seed", "1"])


def test_from_trace_reports_a_bad_request_in_one_line_and_lets_a_bug_through(monkeypatch, capsys, tmp_path):
    def bad_day(request):
        raise traces.TraceRequestError("pods.csv: job day 99 is not a complete window (expected 0..3)")

    monkeypatch.setattr(traces, "from_trace", bad_day)
    assert cli.main(["from-trace", "--traces", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "gpualloc from-trace: error: pods.csv: job day 99 is not a complete window (expected 0..3)"

    def buggy(request):
        raise ValueError("could not convert string to float (injected)")

    monkeypatch.setattr(traces, "from_trace", buggy)
    with pytest.raises(ValueError, match="injected"):
        cli.main(["from-trace", "--traces", str(tmp_path)])


# ----------------------------------------------------------------------------- a failed task keeps its traceback


def raise_deep(task: Task) -> TaskResult:
    return _deeper(task)


def _deeper(task: Task) -> TaskResult:
    raise RuntimeError("greedy broke (injected)")


def test_a_failed_task_keeps_the_workers_traceback():
    task = Task.make(generate("training-heavy", seed=0), "greedy")
    result = execute(raise_deep, task)
    assert result.error == "RuntimeError: greedy broke (injected)"
    assert result.traceback is not None and "Traceback (most recent call last)" in result.traceback
    assert "in _deeper" in result.traceback and "in raise_deep" in result.traceback
    assert "traceback" not in result.comparable()  # where it ran is not part of the table
    run = run_tasks([task], function=raise_deep)
    line, *trace = run.failure_lines(tracebacks=True)[0].splitlines()
    assert line == f"scenario {task.scenario_name!r}, planner 'greedy', seed 0: RuntimeError: greedy broke (injected)"
    assert trace[0] == "    Traceback (most recent call last):" and any("in _deeper" in t for t in trace)
    assert run.failure_lines() == [line]


def test_the_fanout_command_prints_a_failed_tasks_traceback():
    code = (
        "import sys\nfrom agents import registry\n"
        "registry.SCHEDULERS['greedy'] = 'tests.test_errors:broken_plan'\n"
        "from agents.fanout import main\nsys.exit(main(sys.argv[1:]))"
    )
    done = run_python(code, "--scenarios", str(SCENARIO), "--planners", "greedy", "--quiet")
    assert done.returncode == 1
    assert "failed: scenario 'mixed-control', planner 'greedy', seed 0: ValueError: operands" in done.stderr
    assert "Traceback (most recent call last)" in done.stderr and "in broken_plan" in done.stderr
