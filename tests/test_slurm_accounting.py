"""Past days from Slurm's accounting (agents.slurm.accounting, ``gpualloc slurm history``) on hand-made sacct JSON.

Days of 24 one-hour slots from midnight UTC; day D0 is 2026-12-01. Every answer below is worked out by hand.
"""

from __future__ import annotations

import calendar
import json
import stat
from pathlib import Path

import pytest
import yaml

from agents.live.history import load_history
from agents.slurm.accounting import day_starts, past_days, read_sacct
from agents.slurm.clock import DayClock
from agents.slurm.config import config_from_dict
from agents.slurm.live import day_template
from gpu_env.scenario import load_scenario

D0 = calendar.timegm((2026, 12, 1, 0, 0, 0))
D1 = D0 + 86_400
H = 3600

CONFIG = {
    "slurm": {"partitions": ["gpu"], "gres": "gpu"},
    "owned": {"partitions": ["gpu"]},
    "horizon": {"slots": 24, "slot_minutes": 60},
    "workloads": {"rules": [{"qos": "batch", "type": "batch_inference", "priority": 2}], "default_type": "training"},
    "realtime": [{"name": "chat", "demand": [1, 2, 3], "ramp": 2, "penalty": 8, "anchor": "day"}],
}


def _job(jid, *, gpus=2, alloc=True, submit=None, eligible=None, start=0, end=0, limit=60, comment=None, qos="normal",
         partition="gpu", state="COMPLETED"):  # fmt: skip
    gres = [{"type": "gres", "name": "gpu", "id": 1001, "count": gpus}] if gpus else []
    cpu = [{"type": "cpu", "name": None, "id": 1, "count": 4}]
    return {
        "job_id": jid,
        "name": "wrap",
        "comment": {"administrator": None, "job": comment, "system": None},
        "state": {"current": state, "reason": "None"},
        "partition": partition,
        "qos": qos,
        "time": {"submission": submit, "eligible": eligible or 0, "start": start, "end": end, "limit": limit},
        "tres": {"allocated": cpu + gres if alloc else [], "requested": cpu + gres},
    }


JOBS = [
    # across the day boundary: released 22:30 on D0, ran 23:00 .. 01:00 of D1 -> day D0, release 22, 2 slots of 3
    _job(
        10,
        submit=D0 + 22 * H + 1800,
        eligible=D0 + 22 * H + 1800,
        start=D0 + 23 * H,
        end=D1 + H,
        limit=180,
        comment="type=training priority=3",
    ),
    # held: submitted 01:00, released 05:00 (eligible), ran 30 min -> day D1, release 5, runtime 1; the qos rule
    _job(11, gpus=1, submit=D1 + H, eligible=D1 + 5 * H, start=D1 + 5 * H, end=D1 + 5 * H + 1800, qos="batch"),
    # cancelled while pending (held): no eligible time, start = end = the cancel, no allocation -> release 2, no runtime
    _job(12, gpus=4, alloc=False, submit=D1 + 2 * H, start=D1 + 3 * H, end=D1 + 3 * H, limit=120, state="CANCELLED"),
    # bad: no GPUs
    _job(13, gpus=0, submit=D1 + 4 * H, eligible=D1 + 4 * H, start=D1 + 4 * H, end=D1 + 5 * H),
    # bad: ran 3 h of a 1-hour limit
    _job(14, submit=D1 + 6 * H, eligible=D1 + 6 * H, start=D1 + 6 * H, end=D1 + 9 * H),
    # bad: a time that is not a number
    {**_job(15, submit=D1), "time": {"submission": "yesterday", "limit": 60}},
    # not owned (another partition), and released the day before the window: on no day
    _job(16, submit=D1 + H, eligible=D1 + H, start=D1 + H, end=D1 + 2 * H, partition="cpu"),
    _job(17, submit=D0 - H, eligible=D0 - H, start=D0 - H, end=D0 + H),
    # bad for the scenario: more GPUs than the cluster holds (left out by DayRecord.to_scenario)
    _job(18, gpus=32, submit=D1 + 7 * H, eligible=D1 + 7 * H, start=D1 + 7 * H, end=D1 + 8 * H),
]


def _days(tmp_path: Path):
    config = config_from_dict(CONFIG, "<test>")
    jobs, unread = read_sacct({"jobs": JOBS})
    clock = DayClock.of(config)
    days = day_starts(clock, D0 + 5 * H, D1 + 86_400)
    problems: dict[str, list[str]] = {}
    records = past_days(config, jobs, days, 16, 8, problems)
    return config, jobs, unread, records, problems


def test_the_parser_reads_sacct_and_reports_an_unreadable_job_by_id(tmp_path: Path) -> None:
    _, jobs, unread, _, _ = _days(tmp_path)
    assert [j.id for j in jobs] == ["10", "11", "12", "13", "14", "16", "17", "18"]
    assert len(unread) == 1 and unread[0].startswith("job 15: left out: time.submission")
    held = next(j for j in jobs if j.id == "11")
    assert (held.released, held.gpus, held.started, held.ended) == (D1 + 5 * H, 1, D1 + 5 * H, D1 + 5 * H + 1800)
    cancelled = next(j for j in jobs if j.id == "12")
    assert (cancelled.released, cancelled.gpus, cancelled.started, cancelled.ended) == (D1 + 2 * H, 4, None, None)


def test_a_recorded_answer_of_slurm_22_05() -> None:
    """tests/data/slurm/22.05-sacct.json: a job with type and worth in its comment, a held job released two seconds
    later, and a held job cancelled while pending (start = end = the cancel, no allocation: never started)."""
    data = json.loads((Path(__file__).parent / "data" / "slurm" / "22.05-sacct.json").read_text())
    jobs, unread = read_sacct(data)
    assert unread == []
    got = {j.id: (j.state, j.gpus, j.comment, j.limit, j.started is not None, j.ended is not None) for j in jobs}
    assert got == {
        "1": ("COMPLETED", 2, "type=training priority=3", 2, True, True),
        "2": ("COMPLETED", 1, "", 1, True, True),
        "3": ("CANCELLED", 3, "", 5, False, False),
    }
    held = jobs[1]
    assert held.released == held.eligible and held.eligible > held.submitted
    assert jobs[2].released == jobs[2].submitted  # never eligible: its submit time


def test_an_answer_that_reports_an_error_is_unreadable() -> None:
    from agents.slurm.errors import UnreadableError

    with pytest.raises(UnreadableError, match="reports an error: Unable to connect"):
        read_sacct({"jobs": [], "errors": [{"error": "Unable to connect to database"}]})


def test_jobs_go_to_the_day_of_their_release_with_slots_from_that_day(tmp_path: Path) -> None:
    _, _, _, records, problems = _days(tmp_path)
    assert [r.name for r in records] == ["2026-12-01", "2026-12-02"]
    lines = {name: problems[name] for name in ("2026-12-01", "2026-12-02")}
    d0, d1 = (r.to_scenario(lines[r.name]) for r in records)
    assert lines["2026-12-01"] == []
    assert [line.split(":")[0] for line in lines["2026-12-02"]] == ["job 13", "job 14", "job 18"]
    assert "no gpu" in lines["2026-12-02"][0] and "above its time limit" in lines["2026-12-02"][1]
    [j10] = d0.jobs
    assert (j10.id, j10.release, j10.duration, j10.runtime, j10.gpus, j10.type.value, j10.weight) == (
        "10",
        22,
        3,
        2,
        2,
        "training",
        3.0,
    )
    got = {j.id: (j.release, j.duration, j.runtime, j.gpus, j.type.value, j.weight) for j in d1.jobs}
    assert got == {"11": (5, 1, 1, 1, "batch_inference", 2.0), "12": (2, 2, None, 4, "training", 1.0)}
    assert (d1.gpus, d1.node_size, d1.slots, d1.slot_minutes) == (16, 8, 24, 60.0)
    assert list(d1.apps[0].demand[:4]) == [1, 2, 3, 1]  # the configured forecast by the day's clock


def _cli(tmp_path: Path, *argv: str, sacct: dict | None = None, config: dict | None = None) -> int:
    from agents.cli import main

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if sacct is not None:
        (tmp_path / "sacct.json").write_text(json.dumps(sacct))
        fake = bin_dir / "sacct"
        fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/sacct.args\ncat {tmp_path}/sacct.json\n')
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    path = tmp_path / "slurm.yaml"
    cfg = config or CONFIG
    path.write_text(yaml.safe_dump({**cfg, "slurm": {**cfg["slurm"], "bin": str(bin_dir), "retries": 1}}))
    return main(["slurm", "history", "--config", str(path), *argv])


def test_the_command_writes_a_file_per_day_that_history_reads(tmp_path: Path, capsys) -> None:
    out = tmp_path / "past"
    code = _cli(tmp_path, "--since", "2026-12-01", "--until", "2026-12-03", "-o", str(out), "--gpus", "16",
                sacct={"jobs": JOBS})  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    args = (tmp_path / "sacct.args").read_text().split()
    assert {"--json", "-a", "-X", "-S", "-E", "-s"} <= set(args)
    files = sorted(out.glob("*.yaml"))
    assert [f.name for f in files] == ["2026-12-01.yaml", "2026-12-02.yaml"]
    day_lines = [line for line in captured.out.splitlines() if line.startswith("day ")]
    assert day_lines == [f"day 2026-12-01: {files[0]} (1 jobs, 0 bad records)",
                         f"day 2026-12-02: {files[1]} (2 jobs, 3 bad records)"]  # fmt: skip
    bad = [line for line in captured.err.splitlines() if "left out" in line]
    assert sorted(line.split(":")[1].strip() for line in bad) == ["job 13", "job 14", "job 15", "job 18"]
    assert "Traceback" not in captured.err
    config = config_from_dict(CONFIG, "<test>")
    days = load_history(files, day_template(config, 16))
    assert [len(d.jobs) for d in days] == [1, 2]
    assert load_scenario(files[1]).jobs[0].id in ("11", "12")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--since", "yesterday", "-o", "out"], "--since: expected YYYY-MM-DD"),
        (["--since", "2026-12-01", "--until", "2026-13-01", "-o", "out"], "--until: expected YYYY-MM-DD"),
        (["--since", "2026-12-02", "--until", "2026-12-01", "-o", "out"], "--until: must be after --since"),
    ],
)
def test_a_bad_date_is_one_line_and_exit_2(tmp_path: Path, capsys, argv: list[str], words: str) -> None:
    code = _cli(tmp_path, *argv)
    err = capsys.readouterr().err
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_missing_config_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    from agents.cli import main

    code = main(["slurm", "history", "--config", str(tmp_path / "none.yaml"), "--since", "2026-12-01", "-o",
                 str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "none.yaml" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_no_sacct_or_a_failing_sacct_writes_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code = _cli(tmp_path, "--since", "2026-12-01", "--until", "2026-12-02", "-o", str(out), "--gpus", "16")
    err = capsys.readouterr().err
    assert code == 2 and "sacct: not installed" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "bin" / "sacct").unlink(missing_ok=True)
    code = _cli(tmp_path, "--since", "2026-12-01", "--until", "2026-12-02", "-o", str(out), "--gpus", "16",
                sacct={"no": "jobs"})  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "no 'jobs' list" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() or not list(out.iterdir())
