"""The snapshot plans from the cluster as it is: an app holds what Slurm says, and a state that breaks a rule
in slot 0 is relaxed and reported in one line, never an error (issue 25).

The states are the smallest that show each case, fed through :class:`tests.slurm_helpers.FakeSlurm`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agents.slurm import loop, snapshot
from agents.slurm.config import config_from_dict
from gpu_env.scenario import ScenarioError, scenario_from_dict
from gpu_env.validation import validate
from tests.slurm_helpers import NOW, FakeSlurm, JsonLines, core_reservation, driver_config, pending, running

CONFIG = driver_config(default_type="batch_inference", chat=2, ramp=1, confirm=0)


def _config(**app: object) -> dict:
    return {**CONFIG, "realtime": [{**CONFIG["realtime"][0], **app}]}


def _full_node() -> FakeSlurm:
    """One 8-GPU node, two 4-GPU jobs running on it (foreign: partition batch), nothing free."""
    fake = FakeSlurm()
    fake.queue = [running("1", "n1", 0, 4, partition="batch"), running("2", "n1", 4, 4, partition="batch")]
    return fake


def _cli(tmp_path: Path, monkeypatch, fake: FakeSlurm, config: dict, *argv: str) -> tuple[int, Path]:
    from agents.cli import main
    from agents.slurm import client

    path = tmp_path / "slurm.yaml"
    slurm = {**config.get("slurm", {}), "state_dir": str(tmp_path / "state")}  # the writer's lock: here
    path.write_text(yaml.safe_dump({**config, "slurm": slurm}))
    monkeypatch.setattr(client, "SlurmClient", lambda **_kwargs: fake)
    code = main(["slurm", *argv, "--config", str(path)])
    return code, path


def test_an_app_without_a_reservation_holds_nothing(tmp_path: Path, monkeypatch, capsys) -> None:
    """The smallest state of issue 25: it used to read as holding demand[0] and need 9 GPUs of 8 (exit 2)."""
    the_old_reading = r"initial GPUs \(2\) plus the inherited jobs' GPUs \(8\) exceed the cluster's 8"
    with pytest.raises(ScenarioError, match=the_old_reading):  # for the record
        scenario_from_dict(
            {
                "name": "issue-25",
                "cluster": {"gpus": 8, "node_size": 8},
                "horizon": {"slots": 24},
                "realtime": [{"name": "chat", "demand": [2] * 24, "ramp": 1, "penalty": 8, "initial": 2}],
                "jobs": [
                    {"id": "1", "type": "training", "gpus": 4, "duration": 1, "running_on": [0, 1, 2, 3]},
                    {"id": "2", "type": "training", "gpus": 4, "duration": 1, "running_on": [4, 5, 6, 7]},
                ],
            }
        )
    fake = _full_node()
    snap = snapshot.take(fake, config_from_dict(CONFIG), NOW)
    assert snap.scenario.apps[0].initial == 0 and snap.relaxed == []
    code, _ = _cli(tmp_path, monkeypatch, fake, CONFIG, "cycle", "--dry-run")
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    app = next(line for line in lines if line.get("app") == "chat")
    assert app["gpus"] == 0 and app["held_now"] == {} and app["demand"] == 2
    assert lines[-1]["cycle"] == "dry-run" and lines[-1]["changes"] == []
    assert not any("relaxed" in line for line in lines) and err == ""
    assert fake.calls == []


def test_a_configured_initial_that_cannot_fit_is_relaxed_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    code, _ = _cli(tmp_path, monkeypatch, _full_node(), _config(initial=2), "cycle", "--dry-run")
    out, err = capsys.readouterr()
    assert code == 0, err
    relaxed = [json.loads(line) for line in out.splitlines() if '"relaxed"' in line]
    assert relaxed == [
        {
            "relaxed": "app chat",
            "why": "it holds no reservation and its configured initial is 2 GPUs, but the running jobs leave 0 of 8 "
            "free and the apps hold 2: planned as holding 0 (2 over)",
        }
    ]
    assert err.splitlines() == [f"gpualloc slurm: app chat relaxed: {relaxed[0]['why']}"]


@pytest.mark.parametrize("cores", [24, 64])  # 6 GPUs where the jobs leave none; 16 GPUs on an 8-GPU node
def test_an_app_holding_more_than_there_is_is_planned_from_what_fits(cores: int) -> None:
    fake = _full_node()
    fake.queue.append(pending("3", 2))
    fake.held_reservations = [core_reservation("gpualloc-chat.n1", "n1", cores)]
    result = loop.cycle(config_from_dict(CONFIG), fake, "greedy", dry_run=True, now=NOW)
    sc = result.snapshot.scenario
    assert sc.apps[0].initial == 0 and not validate(sc, result.decision.plan)  # the running jobs leave none
    (line,) = [line for line in result.lines if "relaxed" in line]
    assert line["relaxed"] == "app chat"
    assert f"its reservations hold {cores // 4} GPUs" in line["why"] and f"({cores // 4} over)" in line["why"]
    assert result.decision.app_gpus_now["chat"] == 0  # nothing is free now: the app's reservation shrinks
    assert [c.summary() for c in result.changes] == [f"reserve n1 chat {cores // 4}->0"]
    assert result.lines[-1]["cycle"] == "dry-run"


def test_a_job_past_its_time_limit_holds_its_gpus_one_more_slot() -> None:
    fake = FakeSlurm()
    fake.queue = [
        running("1", "n1", 0, 6, ends=NOW - 300),  # Slurm has not killed it yet (OverTimeLimit, KillWait)
        running("2", "n1", 6, 2, ends=NOW - 10, state="COMPLETING"),  # ending: not past a limit
        pending("3", 8),
    ]
    result = loop.cycle(config_from_dict({**CONFIG, "realtime": []}), fake, "greedy", dry_run=True, now=NOW)
    sc = result.snapshot.scenario
    assert [j.duration for j in sc.jobs if j.running_on is not None] == [1, 1]
    assert [p.start for p in result.decision.plan.placements if p.job == "3"] == [1]
    relaxed = [line for line in result.lines if "relaxed" in line]
    assert relaxed == [
        {
            "relaxed": "job 1",
            "why": f"runs 5 min 0 s past its time limit (end time {snapshot._iso(NOW - 300)}): planned to hold "
            "its 6 GPUs for 1 more slot",
        }
    ]


def test_the_apps_are_lowered_largest_first_until_they_fit_beside_the_running_jobs() -> None:
    assert snapshot._relax_initials([6, 3], 2) == [1, 1]  # 9 held where the running jobs leave 2
    assert snapshot._relax_initials([6, 3], 5) == [2, 3]  # 6 -> 3 (the level of the next), then the first one more
    assert snapshot._relax_initials([1, 1], 2) == [1, 1]  # they fit: nothing to relax
    assert snapshot._relax_initials([40], 8) == [8]  # no app holds more than the cluster
    assert snapshot._relax_initials([5, 5], 0) == [0, 0]
    assert snapshot._relax_initials([4, 4, 1], 6) == [2, 3, 1]  # a tie: the first in order gives up one more


def test_the_loop_plans_from_an_infeasible_state() -> None:
    """The loop's cycles on the states above all commit; none fails."""
    fake = _full_node()
    fake.node_names = ("n1", "n2")
    fake.queue += [running("4", "n2", 0, 2), running("5", "n2", 1, 1)]  # GPU 1 of n2 twice: n2 left alone
    fake.held_reservations = [core_reservation("gpualloc-chat.n1", "n1", 64)]
    stream = JsonLines()
    lines = stream.lines

    failures = loop.run_loop(
        config_from_dict(CONFIG), fake, "greedy", 0.001, budget=0, cycles=2, out=stream, sleep=lambda s: None
    )
    assert failures == 0
    assert [line["cycle"] for line in lines if "cycle" in line] == ["commit", "commit"]
    assert any(line.get("relaxed") == "app chat" for line in lines)
    shared = "jobs 4 and 5 both hold its GPU 1"
    assert any(line.get("left_alone") == "node n2" and shared in line["why"] for line in lines)
