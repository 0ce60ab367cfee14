"""The live planner's loop on a real Slurm: the day it records after real jobs ran, read back as history.

Marked ``slurm`` and skipped without Debian's Slurm, as tests/test_slurm_cluster.py (whose conventions it
follows: one 2-node cluster for the module, waits that poll Slurm with a deadline that only guards a hang).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agents.rolling.history import load_history
from agents.slurm import jsonread
from agents.slurm.client import SlurmClient
from agents.slurm.clock import DayClock
from agents.slurm.config import config_from_dict
from agents.slurm.live import LiveSetup, day_template
from agents.slurm.localcluster import INSTALL_HINT, LocalCluster, missing_tools
from agents.slurm.loop import cycle
from agents.slurm.record import History
from tests.conftest import HANG_GUARD_S

pytestmark = pytest.mark.slurm

_MISSING = missing_tools()
if _MISSING:
    _WHY = f"Slurm is not here (missing: {', '.join(_MISSING)}); {INSTALL_HINT}"
    if os.environ.get("GPUALLOC_REQUIRE_SLURM") == "1":
        raise RuntimeError(_WHY)
    pytest.skip(_WHY, allow_module_level=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    local = LocalCluster(tmp_path_factory.mktemp("slurm-live"), nodes=2, gpus_per_node=8, timeout=HANG_GUARD_S)
    try:
        local.start()
        yield local
    finally:
        local.stop()


def _all_jobs(cluster: LocalCluster) -> dict[str, jsonread.SlurmJob]:
    return {j.id: j for j in jsonread.read_jobs(json.loads(cluster.run("squeue", "--all", "--json").stdout))}


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_loop_records_a_real_day_that_the_next_day_reads(cluster: LocalCluster, tmp_path: Path) -> None:
    """A held job the live planner releases runs 1 s of its 2-minute limit; the cycles record its arrival, its
    start and its end from Slurm's own records, and the app's observed demand; the day, closed, is a scenario file
    that load_history reads, with the job's runtime of 1 one-minute slot of its 2."""
    config = config_from_dict(
        {
            "slurm": {
                "partitions": ["gpu"],
                "gres": "gpu",
                "cpus_per_gpu": 4,
                "confirm": HANG_GUARD_S,
                "state_dir": str(tmp_path / "state"),
                "history_dir": str(tmp_path / "history"),
            },
            "owned": {"partitions": ["gpu"]},
            "horizon": {"slots": 6, "slot_minutes": 1, "day_slots": 60},
            "workloads": {"default_type": "batch_inference"},
            "realtime": [{"name": "chat", "demand": [1] * 60, "ramp": 8, "penalty": 8, "anchor": "day"}],
        },
        "<test>",
    )
    client = SlurmClient(env=cluster.env, timeout=HANG_GUARD_S, retries=4, retry_delay=0.5)
    jid = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:1", "-t", "2", "--comment", "type=training",
                         "--wrap", "sleep 1")  # fmt: skip
    observe = lambda _config: ({"chat": 3}, [])  # noqa: E731
    first = cycle(config, client, LiveSetup(), observe=observe)
    assert first.lines[-1]["start_now"] == [jid] and not first.commit.failed
    _wait(lambda: _all_jobs(cluster)[jid].state == "COMPLETED", "the job to complete")
    second = cycle(config, client, LiveSetup(), observe=observe)
    assert not second.commit.failed
    clock = DayClock.of(config)
    name = clock.day_name(first.snapshot.now)
    notes: list[str] = []
    History.of(config).load(config, clock.day_begins(second.snapshot.now) + clock.day_seconds + 1, notes)
    day_file = tmp_path / "history" / f"{name}.yaml"
    assert day_file.exists(), notes
    [day] = load_history([day_file], day_template(config, 16))
    job = day.jobs[day.job_index(jid)]
    assert (job.gpus, job.duration, job.runtime, job.type.value) == (1, 2, 1, "training")
    slot = clock.slot_of_day(first.snapshot.now)
    assert job.release in (slot - 1, slot)  # submitted just before the cycle: in its slot or the one before
    assert day.apps[0].demand[slot] == 3
