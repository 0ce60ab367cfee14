"""The Slurm driver without a Slurm: JSON of every version, the configuration, the snapshot, the changes, retries.

Fixtures under tests/data/slurm/ (README there): 22.05 recorded from the test
cluster, 23.11 and 24.11 written after Slurm's documented shapes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.live.allocator import decision_from_plan
from agents.registry import run_scheduler
from agents.slurm import commit, jsonread, snapshot
from agents.slurm.client import SlurmClient
from agents.slurm.config import config_from_dict, load_config
from agents.slurm.errors import CommandError, ConfigError, UnreadableError
from gpu_env.validation import validate
from tests.conftest import HANG_GUARD_S
from tests.slurm_helpers import driver_config

DATA = Path(__file__).parent / "data" / "slurm"

CONFIG = driver_config(default_type="batch_inference", chat=3)


def _load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _recorded_now(jobs: list[jsonread.SlurmJob]) -> float:
    return max(j.start_time for j in jobs if j.state == "RUNNING") + 5.0


# ----------------------------------------------------------------------------- JSON of each version


def test_22_05_jobs_recorded_from_a_real_slurm() -> None:
    jobs = {j.id: j for j in jsonread.read_jobs(_load("22.05-squeue.json"))}
    assert jsonread.version(_load("22.05-squeue.json")) == (22, 5)
    two = jobs["2"]
    assert two.state == "RUNNING" and two.nodes == ("gpu02", "gpu03") and two.node_count == 2
    assert two.gres_detail == ("gpu:h100:8(IDX:0-7)", "gpu:h100:8(IDX:0-7)")
    assert two.time_limit == 120 and two.end_time - two.start_time == 7200
    three = jobs["3"]
    assert three.held and three.tres_per_node == "gres:gpu:h100:3" and three.comment == "type=training priority=3"
    four = jobs["4"]
    assert four.tres_per_job == "gres:gpu:4" and four.deadline and four.eligible_time > four.deadline - 6 * 3600
    assert jobs["5"].tres_other  # --gpus-per-task


@pytest.mark.parametrize("fixture", ["24.11-squeue.json"])
def test_newer_job_shapes(fixture: str) -> None:
    data = _load(fixture)
    assert jsonread.version(data) == (24, 11)
    jobs = {j.id: j for j in jsonread.read_jobs(data)}
    assert jobs["12"].nodes == ("gpu02", "gpu03") and jobs["12"].node_count == 2 and jobs["12"].state == "RUNNING"
    assert jobs["13"].held and jobs["14"].held and not jobs["15"].held
    assert jobs["14"].eligible_time and jobs["14"].deadline and jobs["13"].deadline is None
    assert jobs["15"].state == "PENDING" and jobs["15"].time_limit is None and jobs["15"].priority == 1000
    assert jsonread.parse_gres(jobs["13"].tres_per_node, "13")[0] == jsonread.Gres("gpu", "h100", 3, None)


@pytest.mark.parametrize("fixture", ["22.05-sinfo.json", "23.11-nodes.json", "24.11-sinfo.json"])
def test_node_shapes_agree(fixture: str) -> None:
    nodes = {n.name: n for n in jsonread.read_nodes(_load(fixture))}
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert "DRAIN" in nodes["gpu04"].states
    assert nodes["gpu01"].states & {"MIXED"} and nodes["gpu01"].cpus == 32
    gres = jsonread.parse_gres(nodes["gpu01"].gres, "gpu01")
    assert [(g.name, g.count) for g in gres] == [("gpu", 8)]
    used = jsonread.parse_gres(nodes["gpu01"].gres_used, "gpu01")
    assert used[0].indices == (0, 1)
    assert "gpu" in nodes["gpu01"].partitions


def test_reservations_text_and_json() -> None:
    (text,) = jsonread.read_reservations((DATA / "22.05-reservations.txt").read_text())
    assert text.name == "gpualloc-chat.gpu01" and text.nodes == ("gpu01",) and text.core_count == 8
    assert text.end_time - text.start_time == 86400
    (js,) = jsonread.read_reservations_json(_load("23.11-reservations.json"))
    assert js.name == text.name and js.cores == {"gpu01": 8} and js.core_count == 8


def test_a_single_node_reservation_without_core_ids_counts_its_core_cnt() -> None:
    # What 22.05's `scontrol -d -o show reservation` printed for a fresh single-node core reservation on a loaded
    # machine: no NodeName=/CoreIDs= pair, only CoreCnt.
    line = (
        "ReservationName=gpualloc-chat.gpu01 StartTime=2026-12-01T13:01:38 EndTime=2026-12-02T13:01:38 "
        "Duration=1-00:00:00 Nodes=gpu01 NodeCnt=1 CoreCnt=24 Features=(null) PartitionName=gpu Flags=SPEC_NODES "
        "TRES=cpu=24 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null)"
    )
    (r,) = jsonread.read_reservations(line)
    assert r.nodes == ("gpu01",) and r.cores == {"gpu01": 24} and r.core_count == 24
    two = line.replace("Nodes=gpu01 NodeCnt=1", "Nodes=gpu[01-02] NodeCnt=2")
    assert jsonread.read_reservations(two)[0].cores == {}  # several nodes: CoreCnt cannot be split, nothing guessed


def test_hostlists_and_gres_strings() -> None:
    assert jsonread.expand_hostlist("gpu[01-03,07],cpu1") == ("gpu01", "gpu02", "gpu03", "gpu07", "cpu1")
    assert jsonread.parse_gres("gpu:h100:2(IDX:0-1,4)", "x")[0].indices == (0, 1, 4)
    assert jsonread.parse_gres("gres/gpu=2", "x")[0].count == 2
    mixed = jsonread.parse_gres("tmpsize:7T,gpu:l40s:4(S:0-1)", "x")
    assert [(g.name, g.type, g.count) for g in mixed if g.name == "gpu"] == [("gpu", "l40s", 4)]
    with pytest.raises(UnreadableError, match="job 9"):
        jsonread.read_job({"job_id": 9, "job_state": None})
    with pytest.raises(UnreadableError):
        jsonread.expand_hostlist("gpu[01-03")


# ----------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"owned": {}}, "owned"),
        ({"horizon": {"slots": 0}}, "horizon.slots"),
        ({"realtime": [{"name": "chat", "demand": [1, 2], "ramp": 1}]}, "realtime[0].demand"),
        ({"realtime": [{"name": "a.b", "demand": [1] * 24, "ramp": 1}]}, "realtime[0].name"),
        ({"workloads": {"rules": [{"type": "training"}]}}, "workloads.rules[0]"),
        ({"workloads": {"default_type": "serving"}}, "workloads.default_type"),
        ({"slurm": {"cpus_per_gpus": 4}}, "slurm.cpus_per_gpus"),
    ],
)
def test_bad_config_names_the_field(change: dict, field: str) -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict({**CONFIG, **change}, "my.yaml")
    assert exc.value.field == field and str(exc.value).startswith(f"my.yaml: {field}: ")


def test_config_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("owned: [\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: line \d+: not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="No such file"):
        load_config(tmp_path / "missing.yaml")
    path.write_text("!!python/object:os.system {}\n")
    with pytest.raises(ConfigError):
        load_config(path)


def test_cli_bad_config_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agents.cli import main

    path = tmp_path / "c.yaml"
    path.write_text("owned: {partitions: [gpu]}\nhorizon: {slots: -3}\n")
    assert main(["slurm", "snapshot", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "horizon.slots" in err[0]


# ----------------------------------------------------------------------------- snapshot


def _snap(config_changes: dict | None = None, version: str = "22.05") -> snapshot.Snapshot:
    config = config_from_dict({**CONFIG, **(config_changes or {})})
    jobs = jsonread.read_jobs(_load(f"{version}-squeue.json"))
    if version == "22.05":
        nodes = jsonread.read_nodes(_load("22.05-sinfo.json"))
        res = jsonread.read_reservations((DATA / "22.05-reservations.txt").read_text())
    else:
        nodes = jsonread.read_nodes(_load("24.11-sinfo.json"))
        res = jsonread.read_reservations_json(_load("23.11-reservations.json"))
    return snapshot.build(config, nodes, jobs, res, _recorded_now(jobs))


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_snapshot_pins_running_jobs_and_names_what_it_leaves(version: str) -> None:
    snap = _snap(version=version)
    sc = snap.scenario
    assert snap.nodes == ("gpu01", "gpu02", "gpu03") and snap.node_size == 8 and sc.gpus == 24
    running = {j.id: j for j in sc.jobs if j.running_on is not None}
    multi = next(j for j in running.values() if j.gpus == 16)
    assert multi.running_on == tuple(range(8, 24)) and multi.duration == 2
    small = next(j for j in running.values() if j.gpus == 2)
    assert small.running_on == (0, 1)
    notes = {(n.kind, n.id) for n in snap.notes}
    assert ("node", "gpu04") in notes
    queued = {j.id: j for j in sc.jobs if j.running_on is None}
    held_training = next(j for j in queued.values() if j.gpus == 3)
    assert held_training.type.value == "training" and held_training.priority == 3.0 and held_training.duration == 2
    later = next(j for j in queued.values() if j.gpus == 4)
    assert later.release == 2 and later.deadline in (5, 6)  # floor: must end before the --deadline
    assert sc.apps[0].initial == 2  # the reservation on gpu01: 8 cores, 4 per GPU


def test_unreadable_jobs_are_named_not_guessed() -> None:
    snap = _snap(version="22.05")
    why = {n.id: n.why for n in snap.notes if n.kind == "job"}
    assert "per task" in why["5"]
    snap24 = _snap(version="24.11")
    why24 = {n.id: n.why for n in snap24.notes if n.kind == "job"}
    assert "no time limit" in why24["15"]
    assert "15" in snap24.owned_outside and "15" not in snap24.owned


def test_snapshot_without_a_type_rule_reports_the_job() -> None:
    snap = _snap({"workloads": {}})
    why = {n.id: n.why for n in snap.notes if n.kind == "job"}
    assert "no workload type" in why["4"]
    assert "3" in snap.owned  # its comment says type=training


def test_non_contiguous_indices_pack_the_node() -> None:
    config = config_from_dict(CONFIG)
    nodes = [jsonread.SlurmNode("n1", frozenset({"MIXED"}), ("gpu",), "gpu:8", "gpu:4(IDX:0,1,4,5)", 32)]
    base = dict(
        state="RUNNING", reason="None", partition="gpu", qos="", comment="", priority=1, node_count=1,
        tres_per_node="gres:gpu:2", tres_per_job="", tres_other="", time_limit=60, start_time=1000,
        end_time=1000 + 3600, eligible_time=None, deadline=None, required_nodes=(),
    )  # fmt: skip
    jobs = [
        jsonread.SlurmJob(id="1", nodes=("n1",), gres_detail=("gpu:2(IDX:0,4)",), **base),
        jsonread.SlurmJob(id="2", nodes=("n1",), gres_detail=("gpu:2(IDX:1,5)",), **base),
    ]
    snap = snapshot.build(config, nodes, jobs, [], 1001.0)
    pinned = sorted(j.running_on for j in snap.scenario.jobs)
    assert pinned == [(0, 1), (2, 3)]
    assert any(n.id == "n1" and "packs" in n.why for n in snap.notes)


# ----------------------------------------------------------------------------- changes


class FakeClient:
    """Records calls; Slurm's answers come from the 22.05 fixture."""

    retries = 3

    def __init__(self, version: str = "22.05") -> None:
        self.calls: list[tuple] = []
        self.nodes_data = jsonread.read_nodes(_load("22.05-sinfo.json"))
        self.jobs_data = jsonread.read_jobs(_load("22.05-squeue.json"))
        self.reservations_data = jsonread.read_reservations((DATA / "22.05-reservations.txt").read_text())

    def nodes(self):
        return self.nodes_data

    def jobs(self):
        return self.jobs_data

    def reservations(self):
        return self.reservations_data

    def renew_reservation(self, name, minutes):
        self.calls.append(("renew", name))

    def hold(self, job):
        self.calls.append(("hold", job))

    def release(self, job):
        self.calls.append(("release", job))

    def set_nodes(self, job, nodes):
        self.calls.append(("nodes", job, tuple(nodes)))

    def create_reservation(self, name, cores, minutes, users, partition):
        self.calls.append(("create", name, tuple(cores.items())))

    def delete_reservation(self, name):
        self.calls.append(("delete", name))


def test_changes_hold_first_then_place_then_reserve() -> None:
    snap = _snap()
    plan = run_scheduler("greedy", snap.scenario)
    assert not validate(snap.scenario, plan)
    decision = decision_from_plan(snap.scenario, plan)
    planned = commit.changes(snap, decision)
    kinds = [c.kind for c in planned]
    assert kinds == sorted(kinds, key=["hold", "reserve", "place", "leave"].index)
    reserves = [c for c in planned if c.kind == "reserve"]
    shrinking = [c.wanted < c.held_now for c in reserves]
    assert shrinking == sorted(shrinking, reverse=True)  # the apps' shrinks before their growths
    started = {p.job for p in decision.start_now}
    assert {c.target for c in planned if c.kind == "place"} == started - {
        j for j, job in snap.owned.items() if not job.held
    }
    layout = commit.app_layout(snap, decision)
    assert sum(layout["chat"].values()) == decision.app_gpus_now["chat"]
    fake = FakeClient()
    done = commit.apply(snap, planned, fake, confirm_seconds=0)
    assert not done.failed
    for c in planned:
        if c.kind == "place":
            i = fake.calls.index(("nodes", c.target, c.nodes))
            assert fake.calls[i + 1] == ("release", c.target)


def test_a_job_is_not_released_onto_busy_gpus() -> None:
    snap = _snap()
    change = commit.Change("place", "3", nodes=("gpu02",), gpus=(("gpu02", 3),))
    fake = FakeClient()
    done = commit.apply(snap, [change], fake, confirm_seconds=0)
    assert fake.calls == [] and "not released" in done.failed[0][1] and "gpu02 has 0 free" in done.failed[0][1]


# ----------------------------------------------------------------------------- retries


def test_a_failing_command_is_retried_then_reported(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    script = tmp_path / "scontrol"
    script.write_text(
        f"#!/bin/sh\nn=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}\n"
        'if [ "$n" -lt 3 ]; then echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1; fi\n'
        "exit 0\n"
    )
    script.chmod(0o755)
    slept = []
    client = SlurmClient(bin_dir=str(tmp_path), retries=3, retry_delay=0.5, sleep=slept.append)
    client.hold("7")
    assert slept == [0.5, 1.0] and len(client.failures) == 2 and client.changes == [["scontrol", "hold", "7"]]
    counter.write_text("-10")
    client = SlurmClient(bin_dir=str(tmp_path), retries=2, retry_delay=0.1, sleep=slept.append)
    with pytest.raises(CommandError, match=r"scontrol hold 8: failed 2 times: .*Unable to contact"):
        client.hold("8")


def test_an_owned_job_outside_the_gpu_partitions_is_named() -> None:
    config = config_from_dict({**CONFIG, "owned": {"comment_tag": "gpualloc"}})
    nodes = [jsonread.SlurmNode("n1", frozenset({"IDLE"}), ("gpu",), "gpu:8", "gpu:0(IDX:N/A)", 32)]
    job = jsonread.SlurmJob(
        id="9", state="PENDING", reason="JobHeldUser", partition="cpu", qos="", comment="gpualloc", priority=0,
        nodes=(), node_count=1, tres_per_node="gres:gpu:1", tres_per_job="", tres_other="", gres_detail=(),
        time_limit=60, start_time=None, end_time=None, eligible_time=None, deadline=None, required_nodes=(),
    )  # fmt: skip
    snap = snapshot.build(config, nodes, [job], [], 1000.0)
    assert "9" in snap.owned_outside and not snap.owned
    assert any(n.id == "9" and "not a GPU partition" in n.why for n in snap.notes)


def test_bad_input_through_python_dash_m_is_one_line(tmp_path: Path) -> None:
    """``python -m agents.cli`` runs the CLI as ``__main__``: its errors must still be one line, exit 2."""
    import subprocess
    import sys

    path = tmp_path / "c.yaml"
    path.write_text("owned: {}\n")
    root = Path(__file__).resolve().parents[1]
    argv = [sys.executable, "-m", "agents.cli", "slurm", "cycle", "--config", str(path), "--dry-run"]
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=root, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"gpualloc slurm: error: {path}: owned: name at least one partition, QOS or comment_tag: "
        "the allocator touches only its own jobs"
    ]


def test_a_bug_inside_a_cycle_is_a_traceback_and_slurm_errors_are_lines(monkeypatch) -> None:
    """The loop catches the driver's own errors (one line, the next cycle goes on) and nothing else."""
    from agents.slurm import loop

    config = config_from_dict(CONFIG)
    lines: list[str] = []

    class Out:
        def write(self, text: str) -> None:
            lines.extend(text.splitlines())

        def flush(self) -> None:
            pass

    def unreachable(*_args, **_kwargs):
        raise CommandError("squeue --all --json: failed 3 times: Unable to contact slurm controller")

    monkeypatch.setattr(loop.snapshot_module, "take", unreachable)
    assert (
        loop.run_loop(config, FakeClient(), "greedy", 0.001, budget=0, cycles=2, out=Out(), sleep=lambda s: None) == 2
    )
    assert [json.loads(line)["cycle"] for line in lines] == ["failed", "failed"]

    def bug(*_args, **_kwargs):
        raise ImportError("cannot import name 'x' from 'agents.greedy'")

    monkeypatch.setattr(loop.snapshot_module, "take", lambda *_args: _snap())
    monkeypatch.setattr(loop, "run_scheduler", bug)
    with pytest.raises(ImportError):
        loop.run_loop(config, FakeClient(), "greedy", 0.001, budget=0, cycles=1, out=Out(), sleep=lambda s: None)
