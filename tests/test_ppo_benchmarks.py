"""benchmarks/ppo_benchmarks.py through the fan-out: the same table serially and over a pool; failures named.

The script runs in a subprocess as a user runs it (about 10 s per run of ``--seven-only``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agents.fanout import available_cpus

ROOT = Path(__file__).resolve().parents[1]


def seven_only(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "benchmarks/ppo_benchmarks.py", "--seven-only", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(available_cpus() < 2, reason="--parallel 2 needs 2 CPUs")
def test_seven_only_is_the_same_serially_and_over_a_pool():
    # Full mode proves the seven optima in a few seconds; the default 30 s limit keeps "proven" stable under load.
    serial = seven_only()
    pool = seven_only("--parallel", "2")
    assert serial.returncode == 0, serial.stderr
    assert pool.returncode == 0, pool.stderr
    assert serial.stdout.count("\n") == 9  # header, rule, seven scenarios
    assert pool.stdout == serial.stdout
    assert "tasks on serial" in serial.stderr
    assert "tasks on process pool, 2 processes" in pool.stderr


def test_a_timed_out_task_is_named_and_the_exit_status_is_1():
    done = seven_only("--task-timeout", "0.01")
    assert done.returncode == 1, done.stderr
    assert "failed: scenario 'mixed-control', planner 'ppo', seed 0: TaskTimeout" in done.stderr
