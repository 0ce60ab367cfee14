"""Shared fixtures and helpers: small scenarios built in code (and the jobs and apps in them); the seven benchmark
scenarios' names; the Hypothesis profiles; a watchdog for worker processes; the warm-up command's line."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import settings

from gpu_env.scenario import Scenario, scenario_from_dict

pytest.register_assert_rewrite("tests.example_helpers")  # its asserts report their operands, as a test module's do

# Hypothesis: no deadline anywhere (a per-example wall limit fails correct code on a busy machine) and the
# failing example's reproduction blob printed. "ci", the default, is derandomized: the same examples on every
# run, so a red CI run is reproduced by running the same test. "explore" draws new examples each run
# (HYPOTHESIS_PROFILE=explore make test) to look for bugs the fixed examples miss.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

HANG_GUARD_S = 900
"""The timeout of every subprocess a test starts: a guard against a hang, far above any machine's time for the work
(a test never asserts that something finishes in a given time; CI's own limit is 90 minutes)."""


SEVEN = (
    "mixed-control",
    "training-heavy",
    "realtime-diurnal",
    "batch-fragmentation",
    "priority-inversion",
    "uniform-priority",
    "scale-64x30",
)
"""The seven benchmark scenarios, each a file ``configs/scenarios/<name>.yaml``."""


def make_scenario(**overrides: Any) -> Scenario:
    """A scenario from a dict, with a small default cluster; overrides replace top-level keys."""
    data: dict[str, Any] = {
        "name": "tiny",
        "cluster": {"gpus": 4, "node_size": 4},
        "horizon": {"slots": 6},
        "jobs": [],
    }
    data.update(overrides)
    return scenario_from_dict(data, "tiny.yaml")


def make_job(id: str, gpus: int, duration: int, *, type: str = "training", **fields: Any) -> dict[str, Any]:
    """A job as :func:`make_scenario` reads it.

    ``make_job("a", 2, 3, priority=5)`` is ``{"id": "a", "type": "training", "gpus": 2, "duration": 3, "priority": 5}``.
    """
    return {"id": id, "type": type, "gpus": gpus, "duration": duration, **fields}


def make_app(name: str, demand: list[int], **fields: Any) -> dict[str, Any]:
    """A real-time app as :func:`make_scenario` reads it: ``make_app("chat", [2] * 6, ramp=1, penalty=10)``."""
    return {"name": name, "demand": demand, **fields}


def two_node_day(demand: list[int], *pending: dict[str, Any]) -> Scenario:
    """G=4 in nodes of 2, T=6: an app "rt" (ramp 1, initial 1, penalty 5) needing ``demand``, a job "run" holding
    GPU 3 in slots 0-1, and the ``pending`` jobs."""
    return make_scenario(
        cluster={"gpus": 4, "node_size": 2},
        realtime=[make_app("rt", demand, ramp=1, initial=1, penalty=5)],
        jobs=[make_job("run", 1, 2, running_on=[3]), *pending],
    )


@pytest.fixture
def tiny() -> Scenario:
    return make_scenario()


def warm_up_line(capsys: pytest.CaptureFixture[str]) -> str:
    """What ``gpualloc warm-up`` prints, checked to be one line, with exit status 0 and no traceback."""
    from agents import cli

    assert cli.main(["warm-up"]) == 0
    out, err = capsys.readouterr()
    assert len(out.strip().splitlines()) == 1 and out.startswith("gpualloc warm-up: "), out
    assert "Traceback" not in err
    return out


@contextmanager
def kill_after(seconds: float, processes: Sequence[Any]) -> Iterator[None]:
    """Kill ``processes`` (``multiprocessing.Process`` objects) if the block is still running after ``seconds``.

    A hang guard, not a time limit on the work: the limit is far above any machine's time, and a block
    that hangs then fails on its closed pipes instead of waiting for ever.
    """
    done = threading.Event()

    def watch() -> None:
        if not done.wait(seconds):
            for process in processes:
                process.kill()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
