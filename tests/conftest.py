"""Shared fixtures: small scenarios built in code; the Hypothesis profiles; a watchdog for worker processes."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import settings

from gpu_env.scenario import Scenario, scenario_from_dict

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


@pytest.fixture
def tiny() -> Scenario:
    return make_scenario()


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
