"""lab.slurm_replicas.Autoscaler on a fake Slurm (sbatch, squeue, scancel, scontrol as small scripts over a JSON
state): replicas per node within the capacity and about the demand, ``leave`` first, a stubborn and a slow replica,
an unreadable capacity file, shared reservations' parts, and the scale scripts. The real Slurm's side is in
tests/test_slurm_replicas_cluster.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.slurm_replicas import Autoscaler, app_part, read_capacity, scale_script

FAKE = r"""
import json, sys
from pathlib import Path
state_path = Path(__file__).with_name("state.json")
st = json.loads(state_path.read_text())
tool, args = Path(sys.argv[0]).name, sys.argv[1:]
def room(resv):
    used = sum(1 for j in st["jobs"].values() if j["state"] == "RUNNING" and j["resv"] == resv)
    return st["resv"].get(resv, {"cores": 0})["cores"] // 4 - used
def schedule():
    for jid, j in sorted(st["jobs"].items(), key=lambda kv: int(kv[0])):
        if j["state"] == "PENDING" and room(j["resv"]) > 0:
            j["state"] = "RUNNING"
if tool == "sbatch":
    opt = dict(a.split("=", 1) for a in args if a.startswith("--") and "=" in a)
    jid = str(st["next"]); st["next"] += 1
    st["jobs"][jid] = {"state": "PENDING", "node": args[args.index("-w") + 1], "resv": opt["--reservation"]}
    schedule(); print(jid)
elif tool == "scancel":
    for jid in args:
        st["jobs"][jid]["state"] = "CANCELLED"
    schedule()
elif tool == "squeue":
    for jid, j in st["jobs"].items():
        if j["state"] in ("PENDING", "RUNNING"):
            print(f"{jid}|{j['state']}|{j['node'] if j['state'] == 'RUNNING' else ''}|{j['resv']}")
elif tool == "scontrol":
    for name, r in st["resv"].items():
        print(f"ReservationName={name} StartTime=2026-12-07T21:34:11 EndTime=2026-12-07T22:34:11 Nodes={r['node']} "
              f"NodeCnt=1 CoreCnt={r['cores']} PartitionName=gpu Flags=SPEC_NODES NodeName={r['node']} "
              f"CoreIDs=0-{r['cores'] - 1} TRES=cpu={r['cores']} Users=root State=ACTIVE")
state_path.write_text(json.dumps(st))
"""


@pytest.fixture
def fake(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "squeue", "scancel", "scontrol"):
        path = bin_dir / tool
        path.write_text(f"#!{sys.executable}\n{FAKE}")
        path.chmod(0o755)
    state = bin_dir / "state.json"

    def setup(resv: dict[str, tuple[str, int]]) -> None:
        state.write_text(json.dumps({"jobs": {}, "next": 1, "resv": {n: {"node": v[0], "cores": 4 * v[1]}
                                                                    for n, v in resv.items()}}))  # fmt: skip

    def jobs() -> dict[str, dict]:
        return {i: j for i, j in json.loads(state.read_text())["jobs"].items() if j["state"] == "RUNNING"}

    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return setup, jobs, env


def _cap(path: Path, apps: dict) -> None:
    path.write_text(json.dumps({"time": "now", "apps": apps}))


def _per_node(jobs: dict[str, dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for j in jobs.values():
        out[j["node"]] = out.get(j["node"], 0) + 1
    return out


def test_replicas_within_capacity_per_node_and_about_the_demand(fake, tmp_path: Path) -> None:
    setup, jobs, env = fake
    setup({"gpualloc-chat.gpu01": ("gpu01", 3), "gpualloc-chat.gpu02": ("gpu02", 2)})
    cap, demand = tmp_path / "cap.json", {"chat": 9}
    entry = {"gpu01": {"gpus": 3, "reservations": ["gpualloc-chat.gpu01"], "leave": []},
             "gpu02": {"gpus": 2, "reservations": ["gpualloc-chat.gpu02"], "leave": []}}  # fmt: skip
    _cap(cap, {"chat": entry})
    scaler = Autoscaler(cap, lambda: demand, env=env)
    scaler.poll_once()
    assert _per_node(jobs()) == {"gpu01": 3, "gpu02": 2}
    entry["gpu01"]["gpus"] = 1
    _cap(cap, {"chat": entry})
    assert sorted(scaler.poll_once().stopped["chat"]) == [("2", "node"), ("3", "node")]  # the newest go
    demand["chat"] = 2
    scaler.poll_once()
    assert sum(_per_node(jobs()).values()) == 2
    _cap(cap, {"chat": {"gpu02": entry["gpu02"]}})  # gpu01 absent: capacity 0 there
    demand["chat"] = 5
    scaler.poll_once()
    assert _per_node(jobs()) == {"gpu02": 2}
    assert scaler.killed(scaler.cancelled) == [] and scaler.killed(["1"]) == []  # 1 was cancelled by it


def test_leave_goes_first_and_its_drain_is_timed(fake, tmp_path: Path) -> None:
    setup, jobs, env = fake
    a, b = "gpualloc-chat.gpu01", "gpualloc-chat.gpu01~2"
    setup({a: ("gpu01", 2), b: ("gpu01", 1)})
    cap = tmp_path / "cap.json"
    _cap(cap, {"chat": {"gpu01": {"gpus": 3, "reservations": [a, b], "leave": []}}})
    scaler = Autoscaler(cap, {"chat": 3}, env=env, slow=0.5)
    scaler.poll_once()
    in_b = [i for i, j in jobs().items() if j["resv"] == b]
    assert len(jobs()) == 3 and len(in_b) == 1
    _cap(cap, {"chat": {"gpu01": {"gpus": 2, "reservations": [a], "leave": [b]}}})
    assert not scaler.poll_once().stopped  # slow: not yet
    time.sleep(0.6)
    rec = scaler.poll_once()
    assert rec.stopped == {"chat": [(in_b[0], "leave")]}
    assert rec.drained[0]["reservation"] == b and rec.drained[0]["seconds"] >= 0.5
    assert len(jobs()) == 2 and in_b[0] in scaler.cancelled


def test_a_stubborn_replica_never_leaves_and_an_unreadable_file_changes_nothing(fake, tmp_path: Path) -> None:
    setup, jobs, env = fake
    setup({"gpualloc-chat.gpu01": ("gpu01", 2)})
    cap = tmp_path / "cap.json"
    scaler = Autoscaler(cap, {"chat": [2, 0]}, env=env, stubborn={"chat"}, t0=time.time(), slot_seconds=0.5)
    assert "capacity unreadable" in scaler.poll_once().notes[0]  # no file yet
    _cap(cap, {"chat": {"gpu01": {"gpus": 2, "reservations": ["gpualloc-chat.gpu01"], "leave": []}}})
    scaler.poll_once()
    assert len(jobs()) == 2
    cap.write_text("{not json")
    assert scaler.poll_once().notes and len(jobs()) == 2
    _cap(cap, {"chat": {}})
    time.sleep(0.5)  # the curve's slot 1: demand 0
    assert not scaler.poll_once().stopped and len(jobs()) == 2  # stubborn


def test_shared_parts_and_capacity_files() -> None:
    assert app_part("gpualloc-a:2+b:3.gpu01", "b", 32, 4) == 3
    assert app_part("gpualloc-a:2+b:3.gpu01~2", "c", 32, 4) == 0
    assert app_part("gpualloc-chat.gpu01~2", "chat", 12, 4) == 3


def test_scale_scripts(tmp_path: Path) -> None:
    cap = tmp_path / "cap.json"
    text = json.dumps({"time": "t", "apps": {"chat": {"gpu01": {"gpus": 1, "reservations": ["r"], "leave": []}}}})
    copy = scale_script(tmp_path / "copy", cap)
    assert subprocess.run([str(copy)], input=text, text=True, timeout=30).returncode == 0
    assert read_capacity(cap)["chat"]["gpu01"]["gpus"] == 1
    fail = scale_script(tmp_path / "fail", cap, "fail")
    assert subprocess.run([str(fail)], input=text, text=True, capture_output=True, timeout=30).returncode == 1
    hang = scale_script(tmp_path / "hang", cap, "hang", hang_seconds=30)
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([str(hang)], input=text, text=True, timeout=0.5)
