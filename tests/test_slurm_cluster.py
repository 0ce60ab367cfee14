"""The Slurm driver against a real Slurm: a 4-node cluster with 8 fake GPUs per node on 127.0.0.1.

Marked ``slurm``; skipped, with one line saying how to install them, without
Debian's ``slurmctld slurmd slurm-client munge`` or without root. One cluster
serves the module (started once, stopped in a ``finally`` even when a test
fails); each test starts from an empty queue. Every assertion on what runs
where is read from ``squeue --json`` (reservations from ``scontrol show
reservation``); waits poll Slurm with a generous deadline that only guards
against a hang.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agents.slurm import jsonread
from agents.slurm.client import SlurmClient
from agents.slurm.config import load_config
from agents.slurm.loop import cycle, run_loop
from lab.local_slurm import LocalCluster
from tests.conftest import HANG_GUARD_S
from tests.real_slurm import all_jobs, client_of, cluster_fixture, queue, skip_without_slurm, wait_for
from tests.slurm_helpers import JsonLines

pytestmark = pytest.mark.slurm

skip_without_slurm()

HANG_GUARD = HANG_GUARD_S  # how long a poll or a command may wait for Slurm: a hang guard, never a speed check

CONFIG = """\
slurm: {partitions: [gpu], gres: gpu, gpu_type: h100, cpus_per_gpu: 4, retries: 4, timeout: 900, confirm: 900,
        state_dir: STATE_DIR}
owned: {partitions: [gpu]}
horizon: {slots: 24, slot_minutes: 60, decay: 0.99}
workloads:
  rules:
    - {comment: quant, type: quantization, priority: 2}
  default_type: batch_inference
realtime:
  - name: chat
    demand: [6, 6, 6, 7, 8, 8, 9, 9, 8, 8, 7, 6, 6, 6, 5, 5, 4, 4, 4, 4, 5, 5, 6, 6]
    ramp: 2
    penalty: 8
"""


cluster = cluster_fixture("slurm", nodes=4, set_conf=True)


@pytest.fixture
def fresh(cluster: LocalCluster, tmp_path: Path):
    """An empty queue, no reservation, every node up; the configuration file and a client."""
    cluster.run("scancel", "--full", "-u", "root", check=False)
    for r in _reservations(cluster):
        cluster.scontrol("delete", f"ReservationName={r.name}")
    cluster.scontrol("update", "NodeName=gpu[01-04]", "State=RESUME", check=False)
    wait_for(lambda: not queue(cluster), "an empty queue")
    cluster.wait_idle()
    path = _write(tmp_path / "slurm.yaml", CONFIG)
    config = load_config(path)
    return cluster, config, client_of(cluster), path


@contextmanager
def _looping(config: object, client: object, every: float, **kwargs: object) -> Iterator[list[dict]]:
    """``run_loop`` (greedy, no budget) in a daemon thread while the block runs: its parsed lines.

    At the block's end the loop is stopped and joined: it must have ended and raised nothing (it never raises).
    """
    stream = JsonLines()
    stop = threading.Event()
    errors: list[BaseException] = []

    def body() -> None:
        try:
            run_loop(config, client, "greedy", every, budget=0, out=stream, should_stop=stop.is_set, **kwargs)
        except BaseException as exc:  # the test reports it; the loop must not raise
            errors.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    try:
        yield stream.lines
    finally:
        stop.set()
        thread.join(timeout=HANG_GUARD)
    assert not errors and not thread.is_alive(), errors


def _wait_for_a_quiet_cycle(lines: list[dict]) -> int:
    """Wait for a cycle, after the lines already written, that finds nothing left to change; where it waited from."""
    n = len(lines)
    wait_for(
        lambda: any(line.get("cycle") == "commit" and line["changes"] == [] for line in lines[n:]),
        "a cycle that finds nothing left to change",
    )
    return n


def _reservations(cluster: LocalCluster) -> list[jsonread.SlurmReservation]:
    return jsonread.read_reservations(cluster.scontrol("-d", "-o", "show", "reservation").stdout)


def _state(cluster: LocalCluster) -> tuple:
    """What a cycle may change, as read from Slurm: each job's state, reason, nodes, node list; reservations."""
    jobs = tuple(sorted((j.id, j.state, j.reason, j.nodes, j.required_nodes) for j in queue(cluster).values()))
    res = tuple(sorted((r.name, r.nodes, tuple(sorted(r.cores.items()))) for r in _reservations(cluster)))
    return jobs, res


def _settled(cluster: LocalCluster, owned: set[str]) -> bool:
    """Every owned job runs or is held (none released and still pending)."""
    jobs = queue(cluster)
    return all(jobs[j].state == "RUNNING" or jobs[j].held for j in owned if j in jobs)


def _gpus_per_node(job: jsonread.SlurmJob) -> dict[str, int]:
    out = {}
    for node, detail in zip(job.nodes, job.gres_detail, strict=True):
        out[node] = sum(g.count for g in jsonread.parse_gres(detail, job.id) if g.name == "gpu")
    return out


def _submit_mix(cluster: LocalCluster) -> dict[str, str]:
    """Jobs of every workload type and size, 1 GPU to two whole nodes; two of them not the allocator's."""
    ids = {
        "foreign_running": cluster.sbatch("-p", "batch", "--gres=gpu:2", "-t", "600", "--wrap", "sleep 3600"),
        "foreign_held": cluster.sbatch("-p", "batch", "--hold", "--gres=gpu:1", "-t", "60", "--wrap", "sleep 3600"),
    }
    wait_for(lambda: queue(cluster)[ids["foreign_running"]].state == "RUNNING", "the foreign job to run")
    own = [
        ("train16", ["-N2", "--gres=gpu:8", "-t", "180", "--comment", "type=training priority=3"]),
        ("train8", ["--gres=gpu:h100:8", "-t", "120", "--comment", "type=training priority=2"]),
        ("train8b", ["--gres=gpu:8", "-t", "240", "--comment", "type=training"]),
        ("infer4", ["--gres=gpu:4", "-t", "60"]),
        ("infer2", ["--gpus=2", "-t", "120"]),
        ("infer4later", ["--gres=gpu:4", "-t", "60", "--begin=now+2hours"]),
        ("quant1", ["--gres=gpu:1", "-t", "60", "--comment", "quant"]),
        ("quant1b", ["--gpus=1", "-t", "60", "--comment", "type=quantization"]),
    ]
    for key, args in own:
        ids[key] = cluster.sbatch("-p", "gpu", "--hold", *args, "--wrap", "sleep 3600")
    return ids


def test_cycle_runs_exactly_the_plans_slot_zero(fresh, tmp_path: Path) -> None:
    from agents.cli import main

    cluster, config, client, path = fresh
    ids = _submit_mix(cluster)
    owned = {v for k, v in ids.items() if not k.startswith("foreign")}
    before = _state(cluster)

    # the what-if: decisions printed, a picture drawn, nothing changed
    png = tmp_path / "plan.png"
    assert main(["slurm", "cycle", "--config", str(path), "--scheduler", "greedy", "--dry-run", "-o", str(png)]) == 0
    assert png.stat().st_size > 0
    assert _state(cluster) == before

    result = cycle(config, client, "greedy")
    assert not result.commit.failed, result.commit.failed
    started = {p.job for p in result.decision.start_now}
    assert started and started < owned  # something starts now, not everything fits
    assert set(result.snapshot.owned) == owned
    wait_for(lambda: _settled(cluster, owned), "the released jobs to start")

    jobs = queue(cluster)
    running_owned = {j for j in owned if jobs[j].state == "RUNNING"}
    assert running_owned == started
    for p in result.decision.start_now:
        assert set(jobs[p.job].nodes) == set(result.snapshot.nodes_of(p.gpus)), p.job
        assert sum(_gpus_per_node(jobs[p.job]).values()) == len(p.gpus)
    per_node: dict[str, int] = {}
    for job in jobs.values():
        if job.state == "RUNNING":
            for node, g in _gpus_per_node(job).items():
                per_node[node] = per_node.get(node, 0) + g
    assert per_node and max(per_node.values()) <= 8
    for j in owned - started:
        assert jobs[j].held, (j, jobs[j].reason)
    assert jobs[ids["foreign_held"]].reason == "JobHeldUser" and not jobs[ids["foreign_held"]].required_nodes
    assert jobs[ids["foreign_running"]].state == "RUNNING"

    # the app's reservation is the plan's real-time GPUs in slot 0, node by node
    reserved = {}
    for r in _reservations(cluster):
        assert r.name.startswith("gpualloc-chat.") and r.nodes == (r.name.split(".")[-1],), r
        assert r.nodes[0] in r.cores, (r, cluster.scontrol("-d", "-o", "show", "reservation").stdout)
        reserved[r.nodes[0]] = r.cores[r.nodes[0]] // config.cpus_per_gpu
    assert sum(reserved.values()) == result.decision.app_gpus_now["chat"] > 0
    app_line = next(line for line in result.lines if line.get("app") == "chat")
    assert reserved == app_line["nodes"]
    for node, g in reserved.items():
        assert per_node.get(node, 0) + g <= 8

    # a second cycle on the unchanged cluster changes nothing
    after = _state(cluster)
    again = cycle(config, client, "greedy")
    assert again.changes == [], again.changes
    assert _state(cluster) == after


def test_unreadable_jobs_and_nodes_are_named_and_left_alone(fresh, capsys: pytest.CaptureFixture[str]) -> None:
    from agents.cli import main

    cluster, config, client, path = fresh
    per_task = cluster.sbatch("-p", "gpu", "--hold", "-n", "2", "--gpus-per-task=1", "-t", "60", "--wrap", "sleep 60")
    no_gpu = cluster.sbatch("-p", "gpu", "--hold", "-t", "60", "--wrap", "sleep 60")
    good = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:2", "-t", "60", "--wrap", "sleep 600")
    cluster.scontrol("update", "NodeName=gpu04", "State=DRAIN", "Reason=test")
    before = _state(cluster)
    assert main(["slurm", "cycle", "--config", str(path), "--dry-run"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any(f"job {per_task} left alone" in line and "per task" in line for line in err), err
    assert any(f"job {no_gpu} left alone" in line and "no gpu" in line for line in err), err
    assert any("node gpu04 left alone" in line and "DRAIN" in line for line in err), err
    assert _state(cluster) == before
    result = cycle(config, client, "greedy")
    assert {p.job for p in result.decision.start_now} == {good}
    assert "gpu04" not in result.snapshot.nodes
    wait_for(lambda: queue(cluster)[good].state == "RUNNING", "the readable job to start")
    # no cycle can ever plan the two others: left to Slurm (released, never held for ever), one line each
    left = {line["job"]: line["why"] for line in result.lines if line.get("action") == "leave"}
    assert set(left) == {per_task, no_gpu} and "per task" in left[per_task] and "no gpu" in left[no_gpu], left
    assert [c.summary() for c in result.changes][-2:] == [f"leave {per_task}", f"leave {no_gpu}"]
    jobs = queue(cluster)
    assert not jobs[per_task].held and not jobs[no_gpu].held
    assert "gpu04" not in jobs[good].nodes
    wait_for(lambda: all(queue(cluster).get(j) is None or queue(cluster)[j].state == "RUNNING" for j in left),
          "Slurm to start the jobs left to it")  # fmt: skip
    again = cycle(config, client, "greedy")
    assert not any(c.kind in ("hold", "leave") for c in again.changes), again.changes


def test_bad_config_is_one_line_and_changes_nothing(fresh, tmp_path: Path, capsys) -> None:
    from agents.cli import main

    cluster, _, _, _ = fresh
    cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:2", "-t", "60", "--wrap", "sleep 600")
    bad = tmp_path / "bad.yaml"
    _write(bad, CONFIG.replace("ramp: 2", "ramp: -1"))
    before = _state(cluster)
    assert main(["slurm", "cycle", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and "realtime[0].ramp" in err[0], err
    assert _state(cluster) == before


def test_the_loop_survives_a_controller_restart(fresh) -> None:
    cluster, config, client, _ = fresh
    first = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:4", "-t", "120", "--wrap", "sleep 3600")
    with _looping(config, client, 0.01) as lines:
        wait_for(lambda: any(line.get("cycle") == "commit" for line in lines), "a first cycle")
        wait_for(lambda: queue(cluster)[first].state == "RUNNING", "the first job to start")
        cluster.restart_controller()
        second = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:8", "-t", "60", "--wrap", "sleep 3600")
        wait_for(lambda: queue(cluster)[second].state == "RUNNING", "the loop to start a job after the restart")
        n = _wait_for_a_quiet_cycle(lines)
    jobs = queue(cluster)
    assert jobs[first].state == "RUNNING" and jobs[second].state == "RUNNING"
    quiet = [line for line in lines[n:] if line.get("cycle") == "commit" and line["changes"] == []]
    assert quiet and quiet[0]["failed"] == []


CONFIG_NO_APPS = CONFIG.split("realtime:")[0]


def test_a_job_that_ends_early_starts_the_next_at_the_next_poll(fresh, tmp_path: Path) -> None:
    """Issue 24: the loop polls the queue; a job ending before its limit starts the held job planned after it.

    The clock's cycle comes once (``every`` is far longer than the test), so the cycle that starts the next
    job was started by the event. The first job ends when the test says (it waits for a file), never racing
    the loop's first cycle.
    """
    cluster, _, client, _ = fresh
    config = load_config(_write(tmp_path / "no-apps.yaml", CONFIG_NO_APPS))
    go = tmp_path / "go"
    first = cluster.sbatch(
        "-p", "batch", "-N4", "--gres=gpu:8", "-t", "30", "--wrap", f"while [ ! -e {go} ]; do sleep 0.1; done"
    )  # every GPU of the cluster, a limit far longer than it runs
    wait_for(lambda: queue(cluster)[first].state == "RUNNING", "the first job to run")
    second = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:8", "-t", "60", "--wrap", "sleep 3600")
    poll, debounce = 0.5, 0.5
    with _looping(config, client, 600, poll_seconds=poll, debounce_seconds=debounce) as lines:
        wait_for(lambda: any(line.get("cycle") == "commit" for line in lines), "the clock's first cycle")
        opening = next(line for line in lines if "cycle" in line)
        assert opening["trigger"] == "clock" and opening["start_now"] == [], opening
        go.touch()
        wait_for(lambda: queue(cluster)[second].state == "RUNNING", "the loop to start the held job")
        third = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:2", "-t", "60", "--wrap", "sleep 3600")
        wait_for(lambda: queue(cluster)[third].state == "RUNNING", "the loop to start a job submitted")
    cycles = [line for line in lines if "cycle" in line]
    assert [c["trigger"] for c in cycles if c["trigger"] == "clock"] == ["clock"]  # the clock came once
    started = {j: c for c in cycles for j in c.get("start_now", [])}
    assert started[second]["trigger"] == "ended" and first in started[second]["events"]["ended"]["ids"]
    assert started[third]["trigger"] == "submitted" and third in started[third]["events"]["submitted"]["ids"]
    assert cycles.index(started[second]) < cycles.index(started[third])
    done = all_jobs(cluster)
    assert done[first].state == "COMPLETED" and done[second].start_time >= done[first].end_time
    latency = done[second].start_time - done[first].end_time  # whole seconds of Slurm's clock
    print(f"job {second} started {latency} s after job {first} ended (poll {poll} s, debounce {debounce} s)")
    assert latency <= poll + debounce + EVENT_SLACK_S, latency  # a hang guard on the event path, not a speed check


EVENT_SLACK_S = 120  # seconds beyond poll + debounce for a cycle (snapshot, plan, commit) on a loaded machine


def _write(path: Path, text: str) -> Path:
    """A configuration file whose writers' lock files lie beside it (``slurm.state_dir``)."""
    path.write_text(text.replace("STATE_DIR", str(path.parent / "state")))
    return path


SMALLEST = CONFIG_NO_APPS + "realtime:\n  - {name: chat, demand: [2], anchor: day, ramp: 1, penalty: 8}\n"


def test_a_full_node_and_an_app_without_a_reservation_plans(fresh, tmp_path: Path, capsys) -> None:
    """Issue 25's smallest state on a real Slurm: one usable 8-GPU node, two 4-GPU jobs running on it, an app
    with demand 2 and ramp 1 that holds no reservation. The dry run used to exit 2 (9 GPUs of 8)."""
    from agents.cli import main

    cluster = fresh[0]
    cluster.scontrol("update", "NodeName=gpu[02-04]", "State=DRAIN", "Reason=test")
    jobs = [cluster.sbatch("-p", "batch", "--gres=gpu:4", "-t", "60", "--wrap", "sleep 3600") for _ in range(2)]
    wait_for(lambda: all(queue(cluster)[j].state == "RUNNING" for j in jobs), "two 4-GPU jobs to run")
    path = _write(tmp_path / "smallest.yaml", SMALLEST)
    before = _state(cluster)
    assert main(["slurm", "cycle", "--config", str(path), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    app = next(line for line in lines if line.get("app") == "chat")
    assert app["gpus"] == 0 and app["held_now"] == {} and not any("relaxed" in line for line in lines), lines
    assert _state(cluster) == before

    # more held than there is: a reservation of 6 GPUs' cores made over the running jobs (IGNORE_JOBS)
    cluster.scontrol(
        "create", "reservation", "ReservationName=gpualloc-chat.gpu01", "StartTime=now", "Duration=60",
        "Nodes=gpu01", "CoreCnt=24", "Users=root", "Flags=IGNORE_JOBS",
    )  # fmt: skip
    assert main(["slurm", "cycle", "--config", str(path)]) == 0
    out, err = capsys.readouterr()
    relaxed = [json.loads(line) for line in out.splitlines() if '"relaxed"' in line]
    assert len(relaxed) == 1 and relaxed[0]["relaxed"] == "app chat", out
    assert "its reservations hold 6 GPUs" in relaxed[0]["why"] and "planned as holding 0 (6 over)" in relaxed[0]["why"]
    assert [line for line in err.splitlines() if "relaxed" in line] == [
        f"gpualloc slurm: app chat relaxed: {relaxed[0]['why']}"
    ]
    assert _reservations(cluster) == []  # nothing is free now: the app's reservation went
    assert all(queue(cluster)[j].state == "RUNNING" for j in jobs)


# ----------------------------------------------------------------------------- issue 25: reservations, one writer


def _raw_reservation(cluster: LocalCluster, name: str) -> dict[str, str]:
    """``scontrol -d -o show reservation NAME`` as key -> value (CoreIDs included when Slurm gives them)."""
    out = cluster.scontrol("-d", "-o", "show", "reservation", name).stdout
    return dict(token.split("=", 1) for token in out.split() if "=" in token)


def test_slurm_cannot_resize_a_core_reservation_and_moves_its_end_in_place(fresh) -> None:
    """The facts docs/slurm.md records: Slurm 22.05 refuses to change a core reservation's cores or nodes; its end
    moves in place, with Flags=IGNORE_JOBS while a job runs on the node (without: "Requested nodes are busy"),
    and it keeps its cores."""
    from agents.slurm.errors import CommandError

    cluster, _, client, _ = fresh
    job = cluster.sbatch("-p", "batch", "-w", "gpu01", "--gres=gpu:2", "-t", "60", "--wrap", "sleep 3600")
    wait_for(lambda: queue(cluster)[job].state == "RUNNING", "a job on gpu01")
    name = "gpualloc-chat.gpu01"
    client.create_reservation(name, {"gpu01": 8}, 60, ["root"], "gpu")
    for change in ("CoreCnt=12", "Nodes=gpu02", "Nodes=gpu01 CoreCnt=4"):
        with pytest.raises(CommandError, match="Core-based reservation can not be updated"):
            client.call(["scontrol", "update", f"ReservationName={name}", *change.split()], tries=1)
    with pytest.raises(CommandError, match="Requested nodes are busy"):
        client.call(["scontrol", "update", f"ReservationName={name}", "EndTime=now+120minutes"], tries=1)
    before = _raw_reservation(cluster, name)
    client.renew_reservation(name, 120)
    after = _raw_reservation(cluster, name)
    assert after["EndTime"] > before["EndTime"] and after["CoreCnt"] == before["CoreCnt"] == "8"
    assert after.get("CoreIDs") == before.get("CoreIDs")


class _Watching:
    """A client whose every reservation change is followed by a read of the app's GPUs on one node."""

    def __init__(self, client: SlurmClient, cluster: LocalCluster, node: str) -> None:
        self._client, self._cluster, self._node = client, cluster, node
        self.seen: list[int] = []

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def _after(self, call, *args) -> None:
        try:
            call(*args)
        finally:
            held = [r for r in _reservations(self._cluster) if r.name.startswith(f"gpualloc-chat.{self._node}")]
            self.seen.append(sum(r.cores.get(self._node, r.core_count) // 4 for r in held))

    def create_reservation(self, *args, **kwargs) -> None:
        self._after(lambda *a: self._client.create_reservation(*a, **kwargs), *args)

    def delete_reservation(self, *args) -> None:
        self._after(self._client.delete_reservation, *args)


def test_an_app_grows_and_shrinks_on_a_full_node_without_dropping_below_its_plan(fresh) -> None:
    """On gpu01 with 4 GPUs of another user's job: each step's capacity, read from Slurm after every change, never
    falls below the smaller of before and after, but for the one case Slurm leaves no way around (reported)."""
    from agents.slurm import commit, snapshot

    cluster, config, client, _ = fresh
    cluster.scontrol("update", "NodeName=gpu[02-04]", "State=DRAIN", "Reason=test")
    busy = cluster.sbatch("-p", "batch", "-w", "gpu01", "--gres=gpu:4", "-t", "60", "--wrap", "sleep 3600")
    wait_for(lambda: queue(cluster)[busy].state == "RUNNING", "4 GPUs of gpu01 busy")
    watch = _Watching(client, cluster, "gpu01")

    def step(gpus: int) -> commit.Commit:
        snap = snapshot.take(client, config)
        found = snap.reservations.get("chat", {}).get("gpu01", ())
        change = commit.Change(
            "reserve", "gpu01", nodes=("gpu01",), gpus=(("gpu01", gpus),), users=("root",),
            pieces=tuple((r.name, snapshot.piece_gpus(config, r, "gpu01")) for r in found), want=(("chat", gpus),),
            shares=tuple((r.name, tuple(snapshot.split_of(config, r, "gpu01").items())) for r in found),
        )  # fmt: skip
        watch.seen.clear()
        done = commit.apply(snap, [change], watch, confirm_seconds=0)
        assert not done.failed, done.failed
        return done

    # what the app holds after every change (a refused one too), step by step: never below min(before, after)
    step(2)
    assert watch.seen == [2]
    done = step(4)  # the 2 kept, 2 more beside them
    assert watch.seen == [4] and not done.above_plan
    assert sorted(r.name for r in _reservations(cluster)) == ["gpualloc-chat.gpu01", "gpualloc-chat.gpu01~2"]
    step(2)  # a whole reservation goes
    assert watch.seen == [2] and len(_reservations(cluster)) == 1
    step(1)  # 1 fits beside the 2, then the 2 goes
    assert watch.seen == [3, 1]
    step(0)  # every reservation goes
    assert watch.seen == [0]
    step(2)  # one reservation of 2
    assert watch.seen == [2]
    other = cluster.sbatch("-p", "batch", "-w", "gpu01", "--gres=gpu:2", "-t", "60", "--wrap", "sleep 3600")
    wait_for(lambda: queue(cluster)[other].state == "RUNNING", "gpu01 full")
    waiting = cluster.sbatch("-p", "batch", "-w", "gpu01", "--gres=gpu:1", "-t", "60", "--wrap", "sleep 3600")
    done = step(1)  # full: nothing fits beside (refused); 1 made over its own cores (Flags=OVERLAP), then the 2 go
    assert watch.seen == [2, 3, 1] and not done.above_plan  # refused beside; 3 while the new lies over the old
    assert done.calls == ["create gpualloc-chat.gpu01~2 (1 GPU on gpu01 over its own)", "delete gpualloc-chat.gpu01"]
    # no core was free between the create and the delete: the foreign job waiting on gpu01 got the freed GPU's
    # cores only once the old reservation was gone
    wait_for(lambda: queue(cluster)[waiting].state == "RUNNING", "the foreign job on the freed GPU")
    per_node = sum(sum(_gpus_per_node(j).values()) for j in queue(cluster).values() if j.state == "RUNNING")
    assert per_node + 1 <= 8


_SLOW_SCONTROL = """#!/bin/sh
# scontrol that starts, says so, and goes on only when the test lets it (a call still on its way)
touch "{dir}/started"
while [ ! -e "{dir}/go" ]; do sleep 0.05; done
exec {scontrol} "$@"
"""

_WRITER = """
import sys
from agents.slurm.client import SlurmClient
from agents.slurm.lock import Lock
Lock(sys.argv[1], "test writer", children=True).acquire()
SlurmClient(bin_dir=sys.argv[2], timeout=600, retries=1).hold(sys.argv[3])
"""


def test_a_writer_killed_during_an_scontrol_keeps_the_lock_until_the_call_lands(fresh, tmp_path: Path) -> None:
    """A writer holds writer.lock and runs ``scontrol hold``; it is killed (SIGKILL) while the call is on its way.
    The lock stays taken while that scontrol runs, so no second writer reads the cluster before the hold lands;
    it is free once the call has ended, and the hold is there."""
    import shutil

    from agents.slurm.lock import WRITER, BusyError, Lock

    cluster, _, _, _ = fresh
    job = cluster.sbatch(
        "-p", "gpu", "--gres=gpu:1", "-t", "60", "-w", "gpu01", "--begin=now+1hour", "--wrap", "sleep 60"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(
        _SLOW_SCONTROL.format(dir=tmp_path, scontrol=shutil.which("scontrol", path="/usr/bin:/usr/sbin"))
    )
    scontrol.chmod(0o755)
    lock_path = tmp_path / "state" / WRITER
    root = Path(__file__).resolve().parents[1]
    env = {**cluster.env, "PYTHONPATH": str(root)}
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(lock_path), str(bin_dir), job], env=env)
    try:
        wait_for(lambda: (tmp_path / "started").exists(), "the writer's scontrol to start")
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=HANG_GUARD)
        with pytest.raises(BusyError, match="test writer"):  # the writer is dead; its scontrol holds the lock
            Lock(lock_path, "second writer").acquire()
        assert not queue(cluster)[job].held
        (tmp_path / "go").touch()

        def free() -> bool:
            try:
                Lock(lock_path, "second writer").acquire()
            except BusyError:
                return False
            return True

        wait_for(free, "the lock to be free once the dead writer's scontrol ended")
        assert queue(cluster)[job].held  # the change landed before a second writer could read
    finally:
        (tmp_path / "go").touch()
        if writer.poll() is None:
            writer.kill()


def test_an_owned_job_a_dead_commit_released_is_held_while_it_is_outside_the_plan(fresh) -> None:
    """An owned job released (as a commit that died would leave it) that then gets a dependency on a running job:
    outside the plan, so a cycle holds it, with why. Once the dependency is met, the next cycle plans and starts it."""
    cluster, config, client, _ = fresh
    first = cluster.sbatch("-p", "batch", "--gres=gpu:1", "-t", "60", "--wrap", "sleep 3600")
    wait_for(lambda: queue(cluster)[first].state == "RUNNING", "the job it depends on")
    # pending and released: only its dependency keeps Slurm from starting it outside any plan
    job = cluster.sbatch(
        "-p", "gpu", "--gres=gpu:2", "-t", "60", f"--dependency=afterany:{first}", "--wrap", "sleep 600"
    )
    assert not queue(cluster)[job].held
    result = cycle(config, client, "greedy", confirm_seconds=0)
    assert f"hold {job}" in [c.summary() for c in result.changes] and not result.commit.failed
    assert queue(cluster)[job].held
    (line,) = [line for line in result.lines if line.get("job") == job]
    assert line["action"] == "hold" and line["why"].startswith(f"outside the plan: has a dependency (afterany:{first}")
    cluster.run("scancel", first)
    wait_for(lambda: first not in queue(cluster), "the dependency to end")
    wait_for(lambda: not queue(cluster)[job].dependency, "Slurm to clear the met dependency")
    again = cycle(config, client, "greedy", confirm_seconds=HANG_GUARD)
    assert not again.commit.failed
    wait_for(lambda: queue(cluster)[job].state == "RUNNING", "the job, planned now, to start")


def test_one_writer_at_a_time_on_a_live_cluster(fresh, tmp_path: Path) -> None:
    """A running loop holds run.lock: a second loop is refused in one line. A manual cycle goes ahead between the
    loop's cycles, and waits while another writer commits (here the test, holding writer.lock as a commit does)."""
    from agents.slurm.lock import WRITER, Lock

    cluster, config, _, path = fresh
    root = Path(__file__).resolve().parents[1]
    env = {**cluster.env, "PYTHONPATH": str(root)}
    cli = [sys.executable, "-m", "agents.cli", "slurm"]
    log = tmp_path / "loop.jsonl"
    run = [*cli, "run", "--config", str(path), "--every", "600", "--poll", "0.5", "--debounce", "0", "--budget", "0"]
    with open(tmp_path / "loop.err", "w") as err:
        loop = subprocess.Popen(
            [*run, "--log", str(log)], env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
    try:
        wait_for(lambda: log.exists() and '"cycle"' in log.read_text(), "the loop's first cycle")
        second = subprocess.run(run, env=env, capture_output=True, text=True, timeout=HANG_GUARD)
        lines = second.stderr.strip().splitlines()
        assert second.returncode == 2 and len(lines) == 1, second.stderr
        assert "another writer holds" in lines[0] and "run.lock" in lines[0] and "gpualloc slurm run" in lines[0]

        first = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:2", "-t", "60", "--wrap", "sleep 3600")
        manual = subprocess.run(
            [*cli, "cycle", "--config", str(path)], env=env, capture_output=True, timeout=HANG_GUARD
        )
        assert manual.returncode == 0, manual.stderr
        wait_for(lambda: queue(cluster)[first].state == "RUNNING", "the job to start (by the cycle or the loop)")

        # the loop may be mid-commit itself (a job's state changed): the test waits its turn as any writer does
        with Lock(Path(config.state_dir) / WRITER, "the test, as a writer mid-commit", wait=HANG_GUARD):
            held = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:2", "-t", "60", "--wrap", "sleep 3600")
            waiting = subprocess.Popen(
                [*cli, "cycle", "--config", str(path), "--wait", str(HANG_GUARD)],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            said = waiting.stderr.readline()
            assert "another writer commits (pid" in said and "the test, as a writer mid-commit" in said, said
            assert queue(cluster)[held].held  # nobody commits while the lock is held
        assert waiting.wait(timeout=HANG_GUARD) == 0, waiting.stderr.read()
        wait_for(lambda: queue(cluster)[held].state == "RUNNING", "the waiting cycle (or the loop) to start the job")
    finally:
        loop.send_signal(signal.SIGTERM)
        try:
            loop.wait(timeout=HANG_GUARD)
        except subprocess.TimeoutExpired:
            loop.kill()
            loop.wait()
    assert loop.returncode in (0, 1), (tmp_path / "loop.err").read_text()


# ----------------------------------------------------------------------------- issue 25: faults injected into commits
#
# Each test breaks a commit at a chosen point (the process killed, slurmctld stopped, a node drained or down, a
# node's gres unreadable, a foreign job just before a release), lets the allocator start again, and checks from
# squeue and scontrol show reservation: no GPU holds two jobs; every owned job runs, is held, or is named in the
# cycle's report; each app's reservations are the plan's after one cycle. A kill is made in the test's process by
# a client that stops dead at its n-th change (nothing after it runs: what Slurm sees of a SIGKILL); one test kills
# a real `gpualloc slurm run` with SIGKILL from inside its n-th scontrol.

CHANGES = ("hold", "release", "set_nodes", "create_reservation", "delete_reservation", "renew_reservation")
KILL_POINTS_LEAST = 20  # issue 25: at least this many points spread over a commit


class Killed(BaseException):
    """The process stops dead here (what Slurm sees of a SIGKILL): no handler of the driver catches it."""


class Faulty:
    """A client whose ``at``-th change (hold, release, NodeList, create, delete, renew) meets ``fault``.

    ``when`` is ``before`` (the change is not made) or ``after`` (it is made, its answer never read).
    ``nodes_hook`` may rewrite each ``sinfo`` answer (the n-th read, counting from 1).
    """

    def __init__(
        self,
        client: SlurmClient,
        at: int = 0,
        when: str = "before",
        fault: Callable[[], None] | None = None,
        nodes_hook: Callable[[int, list], list] | None = None,
    ) -> None:
        self._client = client
        self.at, self.when = at, when
        self.fault = fault or self._kill
        self.nodes_hook = nodes_hook
        self.count = 0
        self.reads = 0
        self.hit = False

    @staticmethod
    def _kill() -> None:
        raise Killed

    def nodes(self) -> list:
        self.reads += 1
        answer = self._client.nodes()
        return self.nodes_hook(self.reads, answer) if self.nodes_hook else answer

    def __getattr__(self, name: str):
        attr = getattr(self._client, name)
        if name not in CHANGES:
            return attr

        def change(*args):
            self.count += 1
            here = self.count == self.at
            if here and self.when == "before":
                self.hit = True
                self.fault()
            out = attr(*args)
            if here and self.when == "after":
                self.hit = True
                self.fault()
            return out

        return change


def _owned(ids: dict[str, str]) -> set[str]:
    return {v for k, v in ids.items() if not k.startswith("foreign")}


def _check(cluster, owned: set[str], result, config, *, reservations: bool = True) -> None:
    """The invariants after a cycle: GPUs held once, owned jobs running, held or reported; reservations = plan."""
    jobs = queue(cluster)
    taken: dict[tuple[str, int], str] = {}
    for job in jobs.values():
        if job.state != "RUNNING":
            continue
        for node, detail in zip(job.nodes, job.gres_detail, strict=True):
            for g in jsonread.parse_gres(detail, job.id):
                for i in g.indices or ():
                    other = taken.setdefault((node, i), job.id)
                    assert other == job.id, f"GPU {i} of {node} held by jobs {other} and {job.id}"
    reported = {c.target for c, _ in result.commit.failed} if result.commit else set()
    for jid in owned:
        job = jobs.get(jid)
        if job is None:
            continue  # ended (or killed with its node): nothing of it is left to double-book
        assert job.state == "RUNNING" or job.held or jid in reported, (jid, job.state, job.reason)
    if not reservations:
        return
    app = next(line for line in result.lines if line.get("app") == "chat")
    reserved: dict[str, int] = {}
    for r in _reservations(cluster):
        node = r.name.split(".", 1)[1].split("~")[0]
        reserved[node] = reserved.get(node, 0) + r.cores.get(node, r.core_count) // config.cpus_per_gpu
    assert {n: g for n, g in reserved.items() if g} == app["nodes"], (reserved, app)


def _counted(config, client) -> int:
    """How many changes (counted as :class:`Faulty` counts them) a commit of the mix makes on a fresh cluster."""
    probe = Faulty(client)
    result = cycle(config, probe, "greedy", confirm_seconds=0)
    assert not result.commit.failed, result.commit.failed
    return probe.count


def _reset(cluster) -> None:
    cluster.run("scancel", "--full", "-u", "root", check=False)
    for r in _reservations(cluster):
        cluster.scontrol("delete", f"ReservationName={r.name}", check=False)
    cluster.scontrol("update", "NodeName=gpu[01-04]", "State=RESUME", check=False)
    wait_for(lambda: not queue(cluster), "an empty queue")
    cluster.wait_idle()


def test_a_commit_killed_at_any_point_is_completed_by_the_next_cycle(fresh) -> None:
    cluster, config, client, _ = fresh
    _submit_mix(cluster)
    changes = _counted(config, client)
    points = [(n, when) for n in range(1, changes + 1) for when in ("before", "after")]
    assert len(points) >= KILL_POINTS_LEAST, f"a commit of the mix makes {changes} changes"
    killed = second = 0
    for at, when in points:
        _reset(cluster)
        ids = _submit_mix(cluster)
        faulty = Faulty(client, at, when)
        with pytest.raises(Killed):
            cycle(config, faulty, "greedy", confirm_seconds=0)
        killed += faulty.hit
        # The loop started again. Its first cycle completes the commit, unless a job the dead commit released
        # starts while it plans: that node then waits a cycle (reported: "since the snapshot" when the commit's
        # read sees the job, Slurm's "Requested nodes are busy" when the job starts between that read and the
        # reservation), and a later cycle completes it. A job the dead commit released that Slurm does not start
        # is waited for and held again ("held again"), and a later cycle plans it from there.
        for attempt in (1, 2, 3):
            second += attempt > 1
            again = cycle(config, client, "greedy")
            wait_for(lambda ids=ids: _settled(cluster, _owned(ids)), "the owned jobs to run or be held")
            _check(cluster, _owned(ids), again, config, reservations=not again.commit.failed)
            if not again.commit.failed:
                break
            assert all(
                "since the snapshot" in why or "nodes are busy" in why or "held again" in why
                for _, why in again.commit.failed
            ), again.commit.failed
        assert not again.commit.failed, (at, when, again.commit.failed)
    assert killed == len(points) >= KILL_POINTS_LEAST
    print(f"{killed} kill points over a commit of {changes} changes; {second} needed a second cycle")


def test_sigkill_of_a_running_loop_inside_its_commit(fresh, tmp_path: Path) -> None:
    """A real ``gpualloc slurm run`` killed by SIGKILL from inside its third ``scontrol`` change; a new loop
    starts at once (the kernel dropped its lock) and its first cycle completes the commit."""
    cluster, config, _, path = fresh
    ids = _submit_mix(cluster)
    tools = tmp_path / "bin"
    tools.mkdir()
    count = tmp_path / "count"
    real = subprocess.run(["sh", "-c", "command -v scontrol"], env=cluster.env, capture_output=True, text=True)
    scontrol = real.stdout.strip() or "/usr/bin/scontrol"
    (tools / "scontrol").write_text(
        "#!/bin/sh\n"
        'case "$1" in hold|release|update|create|delete)\n'
        f"  n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo $n > {count}\n"
        '  if [ "$n" = 3 ]; then kill -9 $PPID; exit 1; fi;;\n'
        "esac\n"
        f'exec {scontrol} "$@"\n'
    )
    (tools / "scontrol").chmod(0o755)
    for tool in ("squeue", "sinfo"):
        found = subprocess.run(["sh", "-c", f"command -v {tool}"], env=cluster.env, capture_output=True, text=True)
        os.symlink(found.stdout.strip(), tools / tool)
    dying = _write(tmp_path / "dying.yaml", path.read_text().replace("slurm: {", f"slurm: {{bin: {tools}, "))
    env = {**cluster.env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    run = [sys.executable, "-m", "agents.cli", "slurm", "run", "--every", "600", "--poll", "0", "--budget", "0"]
    first = subprocess.run([*run, "--config", str(dying)], env=env, capture_output=True, timeout=HANG_GUARD)
    assert first.returncode == -signal.SIGKILL and count.read_text().strip() == "3"
    log = tmp_path / "after.jsonl"
    second = subprocess.run(
        [*run, "--config", str(path), "--cycles", "1", "--log", str(log)],
        env=env,
        capture_output=True,
        timeout=HANG_GUARD,
    )
    assert second.returncode == 0, second.stderr
    wait_for(lambda: _settled(cluster, _owned(ids)), "the owned jobs to run or be held")
    result = cycle(config, SlurmClient(env=cluster.env, timeout=HANG_GUARD, retries=4, retry_delay=0.5), "greedy")
    assert [c for c in result.changes if c.kind != "reserve"] == [], result.changes  # the app may ramp on
    _check(cluster, _owned(ids), result, config)


def test_slurmctld_stopped_in_the_middle_of_a_commit(fresh) -> None:
    """The controller goes down at the commit's third change and comes back a moment later: the changes meanwhile
    are retried or fail (a non-repeatable one whose read-back fails too is reported as unknown); the loop never
    exits, and a cycle finds nothing left to change."""
    cluster, config, client, _ = fresh
    ids = _submit_mix(cluster)
    restarted = threading.Event()

    def stop_controller() -> None:
        cluster.stop_controller()

        def later() -> None:
            cluster.start_controller()
            wait_for(lambda: cluster.run("scontrol", "ping", check=False).returncode == 0, "slurmctld back")
            restarted.set()

        threading.Thread(target=later, daemon=True).start()

    faulty = Faulty(client, at=3, when="before", fault=stop_controller)
    with _looping(config, faulty, 0.02) as lines:
        wait_for(lambda: faulty.hit and restarted.is_set(), "the controller stopped mid-commit and back")
        _wait_for_a_quiet_cycle(lines)
    # the commit's retries may outlast the restart, or its last changes fail and the next cycle makes them
    print(
        "cycles while slurmctld was away:",
        [line.get("failed") or line.get("error") for line in lines if "cycle" in line],
    )
    result = cycle(config, client, "greedy")
    assert [c for c in result.changes if c.kind != "reserve"] == [], result.changes  # the app may ramp on
    _check(cluster, _owned(ids), result, config)


def test_a_drained_node_and_a_node_down_with_jobs_on_it(fresh) -> None:
    """gpu04 drained, gpu03 set DOWN under a running job (Slurm kills it; with ReturnToService=2 the node comes back
    when its slurmd registers again, so the snapshot may find it down or back): nothing starts on a node that is
    not usable, and the invariants hold; once both are resumed they are planned again."""
    cluster, config, client, _ = fresh
    on_three = cluster.sbatch("-p", "batch", "-w", "gpu03", "--gres=gpu:4", "-t", "60", "--wrap", "sleep 3600")
    wait_for(lambda: queue(cluster)[on_three].state == "RUNNING", "a job on gpu03")
    ids = _submit_mix(cluster)
    cluster.scontrol("update", "NodeName=gpu04", "State=DRAIN", "Reason=test")
    cluster.scontrol("update", "NodeName=gpu03", "State=DOWN", "Reason=test")
    result = cycle(config, client, "greedy")
    left = {n.id for n in result.snapshot.notes if n.kind == "node"}
    assert "gpu04" in left and "gpu04" not in result.snapshot.nodes
    assert ("gpu03" in left) != ("gpu03" in result.snapshot.nodes)  # down and left alone, or back and planned
    wait_for(lambda: _settled(cluster, _owned(ids)), "the owned jobs to run or be held")
    _check(cluster, _owned(ids), result, config)
    jobs = queue(cluster)
    for p in result.decision.start_now:
        assert not set(jobs[p.job].nodes) & left, (p.job, jobs[p.job].nodes, left)
    cluster.scontrol("update", "NodeName=gpu[03-04]", "State=RESUME", check=False)
    wait_for(lambda: _up(cluster, "gpu03,gpu04"), "gpu03 and gpu04 up")
    again = cycle(config, client, "greedy")
    assert {"gpu03", "gpu04"} <= set(again.snapshot.nodes), [str(n) for n in again.snapshot.notes]
    wait_for(lambda: _settled(cluster, _owned(ids)), "the owned jobs to run or be held")
    _check(cluster, _owned(ids), again, config)


def _up(cluster, nodes: str) -> bool:
    states = cluster.run("sinfo", "-h", "-N", "-n", nodes, "-o", "%T", check=False).stdout.split()
    return bool(states) and all(s in ("idle", "mixed", "allocated") for s in states)  # "*": not responding


def test_a_node_whose_gres_turns_unreadable_at_the_commit(fresh) -> None:
    """gpu02's gres reads fine at the snapshot and unreadably at the commit's own read: only gpu02's changes are
    dropped (named), the others are made; the next cycle, reading gpu02 unreadable, leaves it out."""
    cluster, config, client, _ = fresh
    ids = _submit_mix(cluster)

    def garble(read: int, nodes: list) -> list:
        from dataclasses import replace

        return [replace(n, gres="gpu:(IDX:?") if n.name == "gpu02" and read >= 2 else n for n in nodes]

    faulty = Faulty(client, nodes_hook=garble)
    result = cycle(config, faulty, "greedy")
    on_two = [c for c in result.changes if "gpu02" in c.nodes]
    for change, why in result.commit.failed:
        assert "gpu02" in change.nodes and "node gpu02 is left alone now" in why, (change, why)
    assert {c.target for c, _ in result.commit.failed} == {c.target for c in on_two}
    wait_for(lambda: _settled(cluster, _owned(ids)), "the owned jobs to run or be held")
    jobs = queue(cluster)
    assert all(jobs[c.target].held for c in on_two if c.kind == "place")
    after = cycle(config, faulty, "greedy")
    assert "gpu02" not in after.snapshot.nodes and any(n.id == "gpu02" for n in after.snapshot.notes)
    wait_for(lambda: _settled(cluster, _owned(ids)), "the owned jobs to run or be held")
    _check(cluster, _owned(ids), after, config)


def test_a_foreign_job_between_the_read_and_a_release(fresh) -> None:
    """Just before the first release, another user's job takes its node: Slurm does not start the released job on
    GPUs another holds; after the confirmation it is held again and reported; nothing shares a GPU."""
    cluster, config, client, _ = fresh
    ids = _submit_mix(cluster)
    taken: dict[str, str] = {}

    def fill(node: str) -> str:
        """Another user's job on every GPU of ``node`` that neither a job nor the app's reservations hold."""
        used = sum(
            sum(_gpus_per_node(j).get(node, 0) for _ in [0]) for j in queue(cluster).values() if j.state == "RUNNING"
        )
        reserved = sum(r.cores.get(node, r.core_count) // 4 for r in _reservations(cluster) if node in r.nodes)
        jid = cluster.sbatch(
            "-p", "batch", "-w", node, f"--gres=gpu:{8 - used - reserved}", "-t", "60", "--wrap", "sleep 3600"
        )
        wait_for(lambda: queue(cluster)[jid].state == "RUNNING", "the foreign job to run")
        return jid

    class Racing(Faulty):
        def __getattr__(self, name: str):
            if name == "release" and not taken:
                real = self._client.release

                def release(job: str) -> None:
                    taken[job] = fill(self.last_nodes[job][0])
                    real(job)

                return release
            if name == "set_nodes":
                real_nodes = self._client.set_nodes

                def set_nodes(job: str, nodes) -> None:
                    self.last_nodes[job] = tuple(nodes)
                    real_nodes(job, nodes)

                return set_nodes
            return super().__getattr__(name)

    racing = Racing(client)
    racing.last_nodes = {}
    result = cycle(config, racing, "greedy", confirm_seconds=10)
    ((job, foreign),) = taken.items()
    whole_node = [c for c in result.changes if c.target == job]
    assert whole_node and dict(result.commit.failed).get(whole_node[0], "").startswith("released but not started")
    jobs = queue(cluster)
    assert jobs[job].held and jobs[foreign].state == "RUNNING"
    _check(cluster, _owned(ids), result, config)
