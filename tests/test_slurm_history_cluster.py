"""``gpualloc slurm history`` on a real Slurm with job accounting (MariaDB + slurmdbd): real jobs, read back as days.

Marked ``slurm`` and skipped without Debian's Slurm and its accounting packages, as
tests/test_slurm_live_cluster.py (``GPUALLOC_REQUIRE_SLURM=1`` turns the skip into a failure). Days of 10
three-second slots; every expected number is computed from Slurm's own record of the job (``sacct``), so
that no assertion depends on how fast this machine runs; the waits poll with a deadline that only guards a hang.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import yaml

from agents.live.history import load_history
from agents.slurm.clock import DayClock
from agents.slurm.config import config_from_dict
from agents.slurm.live import day_template
from lab.local_slurm import LocalCluster
from tests.conftest import HANG_GUARD_S
from tests.real_slurm import skip_without_slurm, wait_for

pytestmark = pytest.mark.slurm

skip_without_slurm(accounting=True)

SLOT = 3.0  # seconds
DAY_SLOTS = 10


def test_history_writes_the_days_real_jobs_ran_in(tmp_path: Path, monkeypatch, capsys) -> None:
    """A job that ran, a held job released later, a held job cancelled while pending and a job typed by the
    config's rule: the command writes their day from sacct, with the GPUs, releases and runtimes Slurm recorded,
    and the day file reads back as history."""
    from agents.cli import main

    with LocalCluster(tmp_path / "slurm", nodes=2, gpus_per_node=8, accounting=True, timeout=HANG_GUARD_S) as cluster:
        begins = math.floor(time.time())  # a day of the test's clock begins now (day_start's seconds)
        day_start = time.strftime("%H:%M:%S", time.gmtime(begins % 86_400))
        config_data = {
            "slurm": {"partitions": ["gpu"], "gres": "gpu", "state_dir": str(tmp_path / "state")},
            "owned": {"partitions": ["gpu"]},
            "horizon": {"slots": 6, "slot_minutes": SLOT / 60, "day_slots": DAY_SLOTS, "day_start": day_start},
            "workloads": {
                "rules": [{"qos": "normal", "comment": "rule", "type": "batch_inference", "priority": 2}],
                "default_type": "training",
            },
            "realtime": [{"name": "chat", "demand": [1, 2], "ramp": 2, "penalty": 8, "anchor": "day"}],
        }
        ran = cluster.sbatch("-p", "gpu", "--gres=gpu:2", "-t", "1", "--comment", "type=training priority=3",
                             "--wrap", "sleep 4")  # fmt: skip
        held = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:1", "-t", "1", "--wrap", "sleep 1")
        cancelled = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:3", "-t", "2", "--comment", "type=quantization",
                                   "--wrap", "sleep 1")  # fmt: skip
        ruled = cluster.sbatch("-p", "gpu", "--gres=gpu:4", "-t", "1", "--comment", "rule", "--wrap", "sleep 1")
        time.sleep(2 * SLOT)  # the hold lasts two slots of wall time: the release is a later slot than the submit
        cluster.scontrol("release", held)
        cluster.run("scancel", cancelled)
        ids = [ran, held, cancelled, ruled]

        def accounted() -> dict[str, dict]:
            out = cluster.run("sacct", "--json", "-a", "-X", "-j", ",".join(ids), check=False)
            if out.returncode != 0:
                return {}
            return {str(j["job_id"]): j for j in json.loads(out.stdout)["jobs"]}

        def all_ended() -> bool:
            jobs = accounted()
            return len(jobs) == 4 and all(
                j["state"]["current"] in ("COMPLETED", "CANCELLED") and j["time"]["end"] for j in jobs.values()
            )

        wait_for(all_ended, "sacct to record the four jobs' ends", every=0.5)  # records land 1-3 s after a job ends
        jobs = accounted()
        config = config_from_dict(config_data, "<test>")
        clock = DayClock.of(config)
        released = {jid: j["time"]["eligible"] or j["time"]["submission"] for jid, j in jobs.items()}
        last_day_ends = clock.day_begins(max(released.values())) + clock.day_seconds
        # a wait on the clock
        wait_for(lambda: time.time() >= last_day_ends, "the last day of the jobs to be over", every=0.5)

        path = tmp_path / "slurm.yaml"
        path.write_text(yaml.safe_dump(config_data))
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
        out = tmp_path / "past"
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(begins))
        code = main(["slurm", "history", "--config", str(path), "--since", since, "-o", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err and "left out:" not in captured.err, captured.err
    names = sorted({clock.day_name(t) for t in released.values()})
    files = [out / f"{name}.yaml" for name in names]
    assert all(f.exists() for f in files), captured.out
    for f in files:
        assert f"{f} (" in captured.out  # the day's line: path, jobs, bad records

    days = load_history(sorted(out.glob("*.yaml")), day_template(config, 16))  # what --history reads
    got = {job.id: (day, job) for day in days for job in day.jobs}
    assert sorted(got) == sorted(ids)
    for jid, j in jobs.items():
        day, job = got[jid]
        assert day.name == clock.day_name(released[jid])
        assert (day.gpus, day.node_size, day.slots, day.slot_minutes) == (16, 8, DAY_SLOTS, SLOT / 60)
        assert job.release == clock.slot_of_day(released[jid])
        assert job.duration == math.ceil(j["time"]["limit"] * 60 / SLOT)
        if jid == cancelled:
            assert job.runtime is None  # cancelled while pending: never ran
        else:
            seconds = j["time"]["end"] - j["time"]["start"]
            assert job.runtime == min(max(math.ceil(max(seconds, 1) / SLOT - 1e-9), 1), job.duration)
    assert {jid: got[jid][1].gpus for jid in ids} == {ran: 2, held: 1, cancelled: 3, ruled: 4}
    assert {jid: (got[jid][1].type.value, got[jid][1].weight) for jid in ids} == {
        ran: ("training", 3.0),
        held: ("training", 1.0),
        cancelled: ("quantization", 1.0),
        ruled: ("batch_inference", 2.0),
    }
    assert got[ran][1].runtime >= 2  # sleep 4 is at least two 3-second slots
    assert jobs[held]["time"]["eligible"] >= jobs[held]["time"]["submission"] + 2 * SLOT
    assert got[held][1].release > clock.slot_of_day(jobs[held]["time"]["submission"]) or (
        clock.day_name(jobs[held]["time"]["submission"]) != got[held][0].name
    )
