"""An app's replicas as Slurm jobs inside its reservations, against a real Slurm 22.05 (issue 48).

A 2-node cluster of 8 fake GPUs each on 127.0.0.1, marked ``slurm`` and skipped without Debian's Slurm or root,
as the other cluster tests. :class:`lab.slurm_replicas.Autoscaler` (a stand-in for a serving autoscaler) keeps
replicas of 1 GPU in the reservations the capacity file names. Its own side: replicas per node within the
capacity, ``leave`` reservations left, a replica making ``scontrol delete reservation`` refuse ("in use"), and
what Slurm does with a comma list of reservations. The driver's side (the snapshot counting each replica once,
a shrink that waits for the replicas to drain, a stubborn replica, a failing or hanging scale command, the loop
killed mid-drain): every replica that ended was cancelled by the autoscaler, never by the loop. Every assertion
reads ``squeue`` / ``scontrol show reservation``; waits poll Slurm with a deadline that only guards a hang.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from agents.slurm import jsonread, snapshot
from agents.slurm.config import load_config
from agents.slurm.loop import cycle
from lab.local_slurm import LocalCluster
from lab.slurm_replicas import Autoscaler, read_capacity, scale_script
from tests.real_slurm import all_jobs, client_of, cluster_fixture, queue, skip_without_slurm, wait_for

pytestmark = pytest.mark.slurm

skip_without_slurm()

cluster = cluster_fixture("slurm-replicas", nodes=2, set_conf=True)


def _reset(cluster: LocalCluster) -> None:
    """An empty queue and no reservation."""
    cluster.run("scancel", "--full", "-u", "root", check=False)
    for r in jsonread.read_reservations(cluster.scontrol("-d", "-o", "show", "reservation").stdout):
        cluster.scontrol("delete", f"ReservationName={r.name}", check=False)
    wait_for(lambda: not queue(cluster), "an empty queue")
    cluster.wait_idle()


@pytest.fixture(autouse=True)
def empty(cluster: LocalCluster) -> Iterator[None]:
    _reset(cluster)
    yield
    _reset(cluster)


def _reserve(cluster: LocalCluster, name: str, node: str, gpus: int) -> None:
    cluster.scontrol(
        "create", "reservation", f"ReservationName={name}", "StartTime=now", "Duration=600", f"Nodes={node}",
        f"CoreCnt={4 * gpus}", "Users=root", "PartitionName=gpu",
    )  # fmt: skip


def _capacity(path: Path, apps: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"time": "now", "apps": apps}))
    tmp.rename(path)


def _running(cluster: LocalCluster, scaler: Autoscaler) -> dict[str, list[str]]:
    """The autoscaler's running replicas per node, from ``squeue``."""
    out: dict[str, list[str]] = {}
    for jid, j in queue(cluster).items():
        if jid in scaler.submitted and j.state == "RUNNING":
            out.setdefault(j.nodes[0], []).append(jid)
    return out


def _settle(cluster: LocalCluster, scaler: Autoscaler, want: dict[str, int]) -> None:
    """Poll until the autoscaler's running replicas per node are ``want`` and none pends."""

    def done() -> bool:
        scaler.poll_once()
        time.sleep(0.3)
        seen = {n: len(v) for n, v in _running(cluster, scaler).items()}
        pending = [r for r in scaler.replicas() if r.state == "PENDING"]
        return seen == {n: g for n, g in want.items() if g} and not pending

    wait_for(done, f"replicas {want}")


def _ended_replicas(cluster: LocalCluster, scaler: Autoscaler) -> list[str]:
    jobs = all_jobs(cluster)
    return [j for j in scaler.submitted if j not in jobs or jobs[j].state not in ("PENDING", "RUNNING", "CONFIGURING")]


# ----------------------------------------------------------------------------- the autoscaler's side


def test_autoscaler_keeps_replicas_per_node_within_capacity(cluster: LocalCluster, tmp_path: Path) -> None:
    _reserve(cluster, "gpualloc-chat.gpu01", "gpu01", 3)
    _reserve(cluster, "gpualloc-chat.gpu02", "gpu02", 2)
    cap = tmp_path / "capacity.json"
    demand = {"chat": 10}
    scaler = Autoscaler(cap, lambda: demand, env=cluster.env)
    entry = {"gpu01": {"gpus": 3, "reservations": ["gpualloc-chat.gpu01"], "leave": []},
             "gpu02": {"gpus": 2, "reservations": ["gpualloc-chat.gpu02"], "leave": []}}  # fmt: skip
    _capacity(cap, {"chat": entry})
    try:
        _settle(cluster, scaler, {"gpu01": 3, "gpu02": 2})  # min(demand 10, capacity 5)
        jobs = queue(cluster)
        for jid in scaler.submitted:  # each in the one reservation of its node, 1 GPU
            assert jobs[jid].reservation == f"gpualloc-chat.{jobs[jid].nodes[0]}", jobs[jid]
        entry["gpu01"]["gpus"] = 1  # the capacity falls on gpu01: the newest replicas there go
        _capacity(cap, {"chat": entry})
        _settle(cluster, scaler, {"gpu01": 1, "gpu02": 2})
        demand["chat"] = 2  # the demand falls below the capacity
        _settle(cluster, scaler, {"gpu01": 1, "gpu02": 1})
        _capacity(cap, {"chat": {"gpu02": entry["gpu02"]}})  # a node absent: capacity 0 there
        demand["chat"] = 5
        _settle(cluster, scaler, {"gpu02": 2})
        assert not scaler.killed(_ended_replicas(cluster, scaler))  # every end was the autoscaler's scancel
    finally:
        scaler.stop(cancel=True)


def test_autoscaler_leaves_leave_reservations_and_slurm_then_deletes_them(cluster: LocalCluster, tmp_path: Path):
    a, b = "gpualloc-chat.gpu01", "gpualloc-chat.gpu01~2"
    _reserve(cluster, a, "gpu01", 2)
    _reserve(cluster, b, "gpu01", 1)
    cap = tmp_path / "capacity.json"
    scaler = Autoscaler(cap, {"chat": 3}, env=cluster.env, slow=1.5)
    _capacity(cap, {"chat": {"gpu01": {"gpus": 3, "reservations": [a, b], "leave": []}}})
    try:
        _settle(cluster, scaler, {"gpu01": 3})
        in_b = [r.id for r in scaler.replicas() if r.reservation == b]
        assert len(in_b) == 1  # one reservation per replica: 2 in a, 1 in b
        refused = cluster.scontrol("delete", f"ReservationName={b}", check=False)
        assert refused.returncode != 0 and "in use" in refused.stderr, refused.stderr
        _capacity(cap, {"chat": {"gpu01": {"gpus": 2, "reservations": [a], "leave": [b]}}})
        _settle(cluster, scaler, {"gpu01": 2})
        assert not [r for r in scaler.replicas() if r.reservation == b]
        drains = [d for d in scaler.drain_seconds() if d["reservation"] == b]
        assert drains and drains[0]["seconds"] >= 1.5, scaler.drain_seconds()  # slow: 1.5 s before its scancel
        assert in_b[0] in scaler.cancelled
        cluster.scontrol("delete", f"ReservationName={b}")  # free at once after the scancel
    finally:
        scaler.stop(cancel=True)


def test_a_replica_in_a_reservation_makes_its_delete_refuse(cluster: LocalCluster, tmp_path: Path) -> None:
    a = "gpualloc-chat.gpu01"
    _reserve(cluster, a, "gpu01", 2)
    cap = tmp_path / "capacity.json"
    scaler = Autoscaler(cap, {"chat": 1}, env=cluster.env)
    _capacity(cap, {"chat": {"gpu01": {"gpus": 2, "reservations": [a], "leave": []}}})
    try:
        _settle(cluster, scaler, {"gpu01": 1})
        refused = cluster.scontrol("delete", f"ReservationName={a}", check=False)
        assert refused.returncode != 0 and "Requested reservation is in use" in refused.stderr, refused.stderr
        (jid,) = scaler.submitted
        cluster.run("scancel", jid)
        cluster.scontrol("delete", f"ReservationName={a}")  # the scancel frees it at once (22.05.8)
    finally:
        scaler.stop(cancel=True)


def test_a_comma_list_with_a_node_runs_only_in_the_first_and_holds_every_one(cluster: LocalCluster) -> None:
    """Why the autoscaler names one reservation per replica (Slurm 22.05.8's behaviour, kept checked)."""
    a, b = "gpualloc-chat.gpu01", "gpualloc-chat.gpu01~2"
    _reserve(cluster, a, "gpu01", 1)
    _reserve(cluster, b, "gpu01", 1)
    args = ["-p", "batch", f"--reservation={a},{b}", "-w", "gpu01", "--gres=gpu:1", "-t", "60", "--wrap", "sleep 600"]
    first, second = cluster.sbatch(*args), cluster.sbatch(*args)
    wait_for(lambda: queue(cluster)[first].state == "RUNNING", "the first")
    wait_for(lambda: queue(cluster)[second].reason != "None", "Slurm's reason for the second")
    time.sleep(3)
    jobs = queue(cluster)
    assert jobs[second].state == "PENDING", jobs[second]  # b has room, but the job is never started in it
    assert jobs[first].reservation == f"{a},{b}"  # squeue's resv_name: the list, not the one it runs in
    for r in (a, b):  # one running job whose list names both: neither can be deleted
        refused = cluster.scontrol("delete", f"ReservationName={r}", check=False)
        assert refused.returncode != 0 and "in use" in refused.stderr, (r, refused.stderr)


# ----------------------------------------------------------------------------- the driver's side


def _config(tmp_path: Path, demand: int, search: int | None = None, **replicas):
    """The driver's configuration file (app chat, and search when given, each wanting a flat demand) and its path."""
    apps = {"chat": demand, **({} if search is None else {"search": search})}
    data = {
        "slurm": {"partitions": ["gpu"], "gres": "gpu", "gpu_type": "h100", "cpus_per_gpu": 4, "retries": 4,
                  "timeout": 900, "confirm": 60, "state_dir": str(tmp_path / "state")},
        "owned": {"partitions": ["gpu"]},
        "horizon": {"slots": 24, "slot_minutes": 60, "decay": 0.99},
        "workloads": {"default_type": "batch_inference"},
        "realtime": [{"name": a, "demand": [g] * 24, "ramp": 8, "penalty": 50} for a, g in apps.items()],
        "replicas": replicas,
    }  # fmt: skip
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path), path


def _gpus(j: jsonread.SlurmJob) -> int:
    return sum(int(d.split("(")[0].rsplit(":", 1)[1]) for d in j.gres_detail) if j.gres_detail else 0


def _held(cluster: LocalCluster, config) -> dict[str, int]:
    """The app's GPUs per node, read from Slurm's reservations."""
    out: dict[str, int] = {}
    for r in jsonread.read_reservations(cluster.scontrol("-d", "-o", "show", "reservation").stdout):
        for node in r.nodes:
            g = snapshot.split_of(config, r, node).get("chat", 0)
            if g:
                out[node] = out.get(node, 0) + g
    return out


def _no_double_booking(cluster: LocalCluster, config, scaler: Autoscaler) -> None:
    """Per node: the other jobs' GPUs and the app's reservations fit the node; its replicas fit its reservations."""
    held = _held(cluster, config)
    jobs = queue(cluster)
    for node in cluster.node_names:
        others = sum(_gpus(j) for i, j in jobs.items() if j.state == "RUNNING" and node in j.nodes and
                     i not in scaler.submitted)  # fmt: skip
        replicas = sum(1 for i, j in jobs.items() if i in scaler.submitted and j.state == "RUNNING" and node in j.nodes)
        assert others + held.get(node, 0) <= 8, (node, others, held)
        assert replicas <= held.get(node, 0), (node, replicas, held)


@contextmanager
def _autoscaling(cap: Path, cluster: LocalCluster, demand: dict, **kw) -> Iterator[Autoscaler]:
    scaler = Autoscaler(cap, lambda: demand, env=cluster.env, poll=0.5, **kw)
    scaler.start()
    try:
        yield scaler
    finally:
        scaler.stop(cancel=True)


def _grow(cluster: LocalCluster, tmp_path: Path, scaler: Autoscaler, gpus: int, **replicas):
    """A cycle that grows the app to ``gpus``; then the autoscaler fills its reservations."""
    config, path = _config(tmp_path, gpus, **replicas)
    result = cycle(config, client_of(cluster), "greedy")
    assert not result.commit.failed, result.lines[-1]
    assert sum(_held(cluster, config).values()) == gpus
    wait_for(lambda: sum(len(v) for v in _running(cluster, scaler).values()) == gpus, f"{gpus} replicas")
    return config, path


def test_the_snapshot_counts_each_replica_once(cluster: LocalCluster, tmp_path: Path) -> None:
    _reserve(cluster, "gpualloc-chat.gpu01", "gpu01", 3)
    other = cluster.sbatch("-p", "batch", "-w", "gpu02", "--gres=gpu:2", "-t", "600", "--wrap", "sleep 3600")
    cap = tmp_path / "capacity.json"
    _capacity(cap, {"chat": {"gpu01": {"gpus": 3, "reservations": ["gpualloc-chat.gpu01"], "leave": []}}})
    with _autoscaling(cap, cluster, {"chat": 3}) as scaler:
        wait_for(lambda: len(_running(cluster, scaler).get("gpu01", [])) == 3, "3 replicas")
        wait_for(lambda: queue(cluster)[other].state == "RUNNING", "the other job")
        config, _ = _config(tmp_path, 3)
        snap = snapshot.take(client_of(cluster), config)
        assert not set(snap.running) & set(scaler.submitted), sorted(snap.running)
        assert snap.app_now["chat"] == {"gpu01": 3}
        jobs = queue(cluster)
        busy = sum(_gpus(j) for i, j in jobs.items() if j.state == "RUNNING" and i not in scaler.submitted)
        in_use = sum(j.gpus for j in snap.scenario.jobs if j.running_on is not None)
        assert in_use == busy == 2
        assert not snap.relaxed, [str(r) for r in snap.relaxed]


def test_a_shrink_waits_for_the_replicas_to_drain_then_shrinks(cluster: LocalCluster, tmp_path: Path) -> None:
    cap = tmp_path / "capacity.json"
    demand = {"chat": 4}
    with _autoscaling(cap, cluster, demand) as scaler:
        config, _ = _grow(cluster, tmp_path, scaler, 4, drain_seconds=60, capacity_file=str(cap))
        demand["chat"] = 2
        config, _ = _config(tmp_path, 2, drain_seconds=60, capacity_file=str(cap))
        result = cycle(config, client_of(cluster), "greedy")
        assert not result.commit.failed and not result.commit.above_plan, result.lines[-1]
        assert sum(_held(cluster, config).values()) == 2
        assert read_capacity(cap)["chat"] and sum(e["gpus"] for e in read_capacity(cap)["chat"].values()) == 2
        wait_for(lambda: sum(len(v) for v in _running(cluster, scaler).values()) == 2, "2 replicas")
        _no_double_booking(cluster, config, scaler)
        ended = _ended_replicas(cluster, scaler)
        assert ended and not scaler.killed(ended), (ended, sorted(scaler.cancelled))  # the loop killed none


def test_a_stubborn_replica_times_the_drain_out_and_the_job_waits_saying_why(cluster: LocalCluster, tmp_path: Path):
    cap = tmp_path / "capacity.json"
    demand = {"chat": 8}
    full = cluster.sbatch("-p", "batch", "--gres=gpu:8", "-t", "600", "--wrap", "sleep 3600")  # one node taken
    wait_for(lambda: queue(cluster)[full].state == "RUNNING", "one node full")
    with _autoscaling(cap, cluster, demand, stubborn={"chat"}) as scaler:
        _grow(cluster, tmp_path, scaler, 8, drain_seconds=4, capacity_file=str(cap))
        demand["chat"] = 0
        job = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:8", "-t", "60", "--wrap", "sleep 600")
        config, _ = _config(tmp_path, 0, drain_seconds=4, capacity_file=str(cap))
        t = time.monotonic()
        result = cycle(config, client_of(cluster), "greedy")
        took = time.monotonic() - t
        assert 4 <= took < 4 + 60, took  # waited drain_seconds, then went on
        assert result.commit.above_plan, result.lines[-1]
        why = [w for c, w in result.commit.failed if c.target == job]
        assert why and "gpu0" in why[0], result.lines[-1]  # not released, with the node and why
        assert queue(cluster)[job].state == "PENDING" and queue(cluster)[job].held
        assert sum(_held(cluster, config).values()) == 8  # above its plan of 0
        assert not scaler.killed(_ended_replicas(cluster, scaler))  # the loop cancelled none


@pytest.mark.parametrize("mode", ["fail", "hang"])
def test_a_failing_or_hanging_scale_command_never_stops_the_cycle(cluster: LocalCluster, tmp_path: Path, mode: str):
    cap = tmp_path / "capacity.json"
    script = scale_script(tmp_path / f"scale-{mode}", cap, mode)
    demand = {"chat": 4}
    with _autoscaling(cap, cluster, demand) as scaler:
        rep = {"drain_seconds": 30, "capacity_file": str(cap), "scale_command": [str(script)], "scale_timeout": 1}
        _grow(cluster, tmp_path, scaler, 4, **rep)
        demand["chat"] = 2
        config, _ = _config(tmp_path, 2, **rep)
        t = time.monotonic()
        result = cycle(config, client_of(cluster), "greedy")
        assert time.monotonic() - t < 30, "the hanging command was not cut at its timeout"
        summary = json.dumps(result.lines[-1])
        said = " ".join(result.lines[-1].get("signal", []))
        assert str(script) in said and ("exit 1" if mode == "fail" else "no answer within") in said, summary
        assert not result.commit.failed and sum(_held(cluster, config).values()) == 2, summary  # the file did it
        assert not scaler.killed(_ended_replicas(cluster, scaler))


_CYCLE = [sys.executable, "-m", "agents.cli", "slurm", "cycle", "--scheduler", "greedy", "--config"]


def test_the_loop_killed_mid_drain_and_the_next_cycle_finishes_the_shrink(cluster: LocalCluster, tmp_path: Path):
    cap = tmp_path / "capacity.json"
    demand = {"chat": 6}
    with _autoscaling(cap, cluster, demand, stubborn={"chat"}) as scaler:
        _grow(cluster, tmp_path, scaler, 6, drain_seconds=120, capacity_file=str(cap))
        demand["chat"] = 2
        config, path = _config(tmp_path, 2, drain_seconds=120, capacity_file=str(cap))
        env = {**cluster.env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        proc = subprocess.Popen([*_CYCLE, str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: any(e["leave"] for e in read_capacity(cap).get("chat", {}).values()), "the drain's start")
            time.sleep(1)
            assert proc.poll() is None, proc.communicate()  # still waiting for the stubborn replicas
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
        _no_double_booking(cluster, config, scaler)
        scaler.stubborn.clear()  # the replicas may go now
        result = cycle(config, client_of(cluster), "greedy")
        assert not result.commit.failed and not result.commit.above_plan, result.lines[-1]
        assert sum(_held(cluster, config).values()) == 2
        wait_for(lambda: sum(len(v) for v in _running(cluster, scaler).values()) == 2, "2 replicas")
        _no_double_booking(cluster, config, scaler)
        assert not scaler.killed(_ended_replicas(cluster, scaler))


def test_a_full_node_shared_by_a_second_app_while_replicas_run(cluster: LocalCluster, tmp_path: Path) -> None:
    """Seen in ``--part replicas``: search holds a full node as two reservations (7, then 1 grown beside), its
    replicas run in the first; chat comes (chat 3 + search 5). The capacity told during the drain must not offer
    search a reservation there that the change then replaces: a replica started in it holds cores that the
    reservation of the plan's total over the apps' own cores (``Flags=OVERLAP``) cannot take ("busy")."""
    cap = tmp_path / "capacity.json"
    rep = {"drain_seconds": 30, "capacity_file": str(cap)}
    full = cluster.sbatch("-p", "batch", "-w", "gpu01", "--gres=gpu:8", "-t", "600", "--wrap", "sleep 3600")
    wait_for(lambda: queue(cluster)[full].state == "RUNNING", "gpu01 full")
    demand = {"chat": 3, "search": 2}
    with _autoscaling(cap, cluster, demand) as scaler:
        client = client_of(cluster)
        for search in (7, 8):  # 7, then 1 beside it: the node is full
            result = cycle(_config(tmp_path, 0, search, **rep)[0], client, "greedy")
            assert not result.commit.failed, result.lines[-1]
        wait_for(lambda: len(_running(cluster, scaler).get("gpu02", [])) == 2, "search's 2 replicas")
        config, _ = _config(tmp_path, 3, 5, **rep)
        result = cycle(config, client, "greedy")
        told = [(p.told, p.placed) for p in scaler.polls if p.told or p.placed]
        assert not result.commit.failed and not result.commit.above_plan, json.dumps(told[-3:])
        held = {}
        for r in jsonread.read_reservations(cluster.scontrol("-d", "-o", "show", "reservation").stdout):
            for app, g in snapshot.split_of(config, r, "gpu02").items():
                held[app] = held.get(app, 0) + g
        assert {a: g for a, g in held.items() if g} == {"chat": 3, "search": 5}
        assert not scaler.killed(_ended_replicas(cluster, scaler))
