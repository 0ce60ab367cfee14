"""The live planner's loop on a real Slurm: the day it records after real jobs ran, read back as history.

Marked ``slurm`` and skipped without Debian's Slurm, as tests/test_slurm_cluster.py (whose conventions it
follows: one 2-node cluster for the module, waits that poll Slurm with a deadline that only guards a hang).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.live.history import load_history
from agents.slurm.clock import DayClock
from agents.slurm.config import config_from_dict
from agents.slurm.live import LiveSetup, day_template
from agents.slurm.loop import cycle
from agents.slurm.record import History
from lab.local_slurm import LocalCluster
from tests.conftest import HANG_GUARD_S
from tests.real_slurm import all_jobs, client_of, cluster_fixture, skip_without_slurm, wait_for

pytestmark = pytest.mark.slurm

skip_without_slurm()


cluster = cluster_fixture("slurm-live", nodes=2)


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
    client = client_of(cluster)
    jid = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:1", "-t", "2", "--comment", "type=training",
                         "--wrap", "sleep 1")  # fmt: skip
    observe = lambda _config: ({"chat": 3}, [])  # noqa: E731
    first = cycle(config, client, LiveSetup(), observe=observe)
    assert first.lines[-1]["start_now"] == [jid] and not first.commit.failed
    wait_for(lambda: all_jobs(cluster)[jid].state == "COMPLETED", "the job to complete")
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
