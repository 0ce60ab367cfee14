"""Apps that share a full node, against a real Slurm 22.05: a 1-node cluster with 8 fake GPUs on 127.0.0.1.

Marked ``slurm``; skipped without Debian's ``slurmctld slurmd slurm-client munge`` or root (a failure under
``GPUALLOC_REQUIRE_SLURM=1``, as .ci/run sets). Another user's job holds 3 GPUs; two, then three apps hold the
rest; their forecasts move every cycle (grow, shrink, swap), and a job of the allocator is planned beside them.
After every reservation change (read back from Slurm, a refused one too) each app holds at least the smaller of
before and its plan; after every cycle nothing failed, each app holds its plan, and another user's job waiting
for GPUs on the node has not started (no core was left free for it): Slurm is asked to schedule a later probe
job, whose pending reason says the scheduler has been past both. Waits poll Slurm with a deadline that only
guards against a hang.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.slurm import jsonread, snapshot
from agents.slurm.client import SlurmClient
from agents.slurm.config import load_config
from agents.slurm.loop import cycle
from lab.local_slurm import LocalCluster
from tests.real_slurm import client_of, cluster_fixture, queue, skip_without_slurm, wait_for

pytestmark = pytest.mark.slurm

skip_without_slurm()

CONFIG = """\
slurm: {partitions: [gpu], gres: gpu, gpu_type: h100, cpus_per_gpu: 4, retries: 4, timeout: 900, confirm: 900,
        state_dir: STATE_DIR}
owned: {partitions: [gpu]}
horizon: {slots: 24, slot_minutes: 60, decay: 0.99}
workloads: {default_type: batch_inference}
realtime:
  - {name: a, demand: [A], ramp: 8, penalty: 50}
  - {name: b, demand: [B], ramp: 8, penalty: 50}
  - {name: c, demand: [C], ramp: 8, penalty: 50}
"""


cluster = cluster_fixture("slurm-share", nodes=1)


def _held(cluster: LocalCluster, config) -> dict[str, int]:
    """Each app's GPUs on gpu01, read from Slurm's reservations (an app's own, or its part of a shared one)."""
    out: dict[str, int] = {}
    text = cluster.scontrol("-d", "-o", "show", "reservation").stdout
    for r in jsonread.read_reservations(text):
        for app, g in snapshot.split_of(config, r, "gpu01").items():
            out[app] = out.get(app, 0) + g
    return {a: g for a, g in out.items() if g}


class _Watching:
    """A client whose every reservation change is followed by a read of the apps' GPUs from Slurm."""

    def __init__(self, client: SlurmClient, cluster: LocalCluster, config) -> None:
        self._client, self._cluster, self._config = client, cluster, config
        self.seen: list[dict[str, int]] = []

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def _after(self, call) -> None:
        try:
            call()
        finally:
            self.seen.append(_held(self._cluster, self._config))

    def create_reservation(self, *args, **kwargs) -> None:
        self._after(lambda: self._client.create_reservation(*args, **kwargs))

    def delete_reservation(self, *args) -> None:
        self._after(lambda: self._client.delete_reservation(*args))


def _step(cluster: LocalCluster, tmp_path: Path, client: SlurmClient, demand: dict[str, int], owned: set[str]):
    text = CONFIG.replace("STATE_DIR", str(tmp_path / "state"))
    for app in "ABC":
        text = text.replace(f"[{app}]", str([demand.get(app.lower(), 0)] * 24))
    path = tmp_path / "slurm.yaml"
    path.write_text(text)
    config = load_config(path)
    before = _held(cluster, config)
    watch = _Watching(client, cluster, config)
    result = cycle(config, watch, "greedy")
    assert not result.commit.failed and not result.commit.above_plan, (demand, result.lines[-1])
    plan = {a: g for a, g in result.decision.app_gpus_now.items() if g}
    assert _held(cluster, config) == plan, (demand, watch.seen)
    for seen in watch.seen:  # after every change: never below the smaller of before and the plan
        for app, g in plan.items():
            assert seen.get(app, 0) >= min(before.get(app, 0), g), (demand, before, watch.seen)
    wait_for(lambda: all(queue(cluster)[j].state == "RUNNING" or queue(cluster)[j].held for j in owned), "settled")
    return config, result


def _probe_still_waits(cluster: LocalCluster, waiting: str) -> None:
    """Another user's job waiting for 2 GPUs on the full node has not started, once Slurm's scheduler has been past
    it: a later 1-GPU probe is submitted and waited for until Slurm gives it a pending reason (or starts it)."""
    probe = cluster.sbatch("-p", "batch", "-w", "gpu01", "--gres=gpu:1", "-t", "60", "--wrap", "sleep 600")
    wait_for(lambda: queue(cluster)[probe].state != "PENDING" or queue(cluster)[probe].reason != "None", "the probe")
    jobs = queue(cluster)
    try:
        assert jobs[probe].state == "PENDING", f"a foreign job started on a core the apps' plan keeps: {jobs[probe]}"
        assert jobs[waiting].state == "PENDING", jobs[waiting]
    finally:
        cluster.run("scancel", probe)


def test_two_then_three_apps_grow_shrink_and_swap_on_a_full_node(cluster: LocalCluster, tmp_path: Path) -> None:
    os.environ["SLURM_CONF"] = str(cluster.conf)
    client = client_of(cluster)
    busy = cluster.sbatch("-p", "batch", "-w", "gpu01", "--gres=gpu:3", "-t", "600", "--wrap", "sleep 3600")
    wait_for(lambda: queue(cluster)[busy].state == "RUNNING", "3 GPUs of gpu01 busy")
    config, _ = _step(cluster, tmp_path, client, {"a": 3, "b": 2}, set())  # each beside: the node is full now
    assert sorted(_held(cluster, config).items()) == [("a", 3), ("b", 2)]
    waiting = cluster.sbatch("-p", "batch", "-w", "gpu01", "--gres=gpu:2", "-t", "60", "--wrap", "sleep 600")
    _probe_still_waits(cluster, waiting)

    # two apps swap GPUs on the full node: one reservation of 5 over their own cores, then the old go
    config, result = _step(cluster, tmp_path, client, {"a": 1, "b": 4}, set())
    assert [c.summary() for c in result.changes] == ["reserve gpu01 a 3->1, b 2->4"]
    assert result.commit.calls[0] == "create gpualloc-a:1+b:4.gpu01 (5 GPUs on gpu01 over its own)"
    _probe_still_waits(cluster, waiting)

    # b shrinks beside a, and a job of the allocator is planned (and starts) on the GPU b gives back
    job = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:1", "-t", "60", "--wrap", "sleep 600")
    config, result = _step(cluster, tmp_path, client, {"a": 1, "b": 3}, {job})
    assert [p.job for p in result.decision.start_now] == [job] and queue(cluster)[job].state == "RUNNING"
    assert queue(cluster)[job].nodes == ("gpu01",)
    _probe_still_waits(cluster, waiting)

    # a third app comes onto the full node (b gives it one), then all three move
    for demand in ({"a": 1, "b": 2, "c": 1}, {"a": 2, "b": 1, "c": 1}, {"a": 1, "b": 1, "c": 2}):
        config, result = _step(cluster, tmp_path, client, demand, {job})
        assert _held(cluster, config) == demand
        _probe_still_waits(cluster, waiting)

    # the apps give GPUs back: now the waiting job may have them (the plan frees 2)
    config, result = _step(cluster, tmp_path, client, {"a": 1, "b": 1}, {job})
    assert _held(cluster, config) == {"a": 1, "b": 1}
    wait_for(lambda: queue(cluster)[waiting].state == "RUNNING", "the waiting job on the GPUs the apps gave back")
