"""The live planner in the Slurm loop: the day's clock, the day's record, the history it reads, and why it holds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from agents.live.allocator import with_forecast
from agents.live.hedge import HedgedForecaster
from agents.live.history import load_history
from agents.slurm import loop, snapshot
from agents.slurm.clock import DayClock
from agents.slurm.config import config_from_dict
from agents.slurm.errors import ConfigError
from agents.slurm.live import LiveSetup, day_template, state_of
from agents.slurm.record import DayRecord, History
from gpu_env.scenario import ScenarioError, save_scenario, scenario_from_dict
from gpu_env.validation import validate
from tests.slurm_helpers import NOW, FakeSlurm, pending, running

HOUR = 3600.0


def _config(tmp_path: Path, **horizon: object) -> dict:
    return {
        "slurm": {"partitions": ["gpu"], "cpus_per_gpu": 4, "confirm": 0, "history_dir": str(tmp_path / "history")},
        "owned": {"partitions": ["gpu"]},
        "horizon": {"slots": 8, "slot_minutes": 60, "day_slots": 8, **horizon},
        "workloads": {"rules": [{"partition": "gpu", "type": "training", "priority": 0.1}]},
        "realtime": [],
    }


def _past_days(folder: Path, n: int = 3) -> None:
    """Past 8-slot days on which a valuable 8-GPU job arrived at slot 3."""
    folder.mkdir(parents=True, exist_ok=True)
    for d in range(n):
        day = {
            "name": f"past{d}",
            "cluster": {"gpus": 8},
            "horizon": {"slots": 8, "slot_minutes": 60},
            "jobs": [{"id": f"big{d}", "type": "training", "gpus": 8, "duration": 4, "release": 3, "priority": 10}],
        }
        save_scenario(scenario_from_dict(day), folder / f"2026-11-2{d}.yaml")


# ----------------------------------------------------------------------------- the day's clock


def test_the_days_clock_counts_slots_from_day_start() -> None:
    config = config_from_dict(
        {"owned": {"partitions": ["gpu"]}, "horizon": {"slots": 24, "slot_minutes": 60, "day_start": "06:30"}}
    )
    assert config.day_start == 6.5 * HOUR and config.day_slots == 24
    clock = DayClock.of(config)
    midnight = 1_764_633_600.0  # 2025-12-02 00:00 UTC
    assert clock.slot_of_day(midnight + 6.5 * HOUR) == 0
    assert clock.slot_of_day(midnight + 6.5 * HOUR - 1) == 23  # the day before's last slot
    assert clock.day_name(midnight + 7 * HOUR) == "2025-12-02T06-30"
    assert clock.day_name(midnight + 5 * HOUR) == "2025-12-01T06-30"


def test_an_accelerated_day_is_a_day() -> None:
    """24 one-minute slots make a day: slot 3 is three minutes after the day's start, and the next day follows."""
    clock = DayClock(day_start=0.0, slot_seconds=60.0, day_slots=24)
    begins = clock.day_begins(NOW)
    assert clock.slot_of_day(begins + 3 * 60 + 5) == 3
    assert clock.day_index(begins + 24 * 60) == clock.day_index(begins) + 1
    assert clock.day_name(begins) != clock.day_name(begins + 24 * 60)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("6:30", "horizon.day_start"),
        ("24:00", "horizon.day_start"),
        (630, "horizon.day_start"),
        (0, "horizon.day_slots"),
    ],
)
def test_a_bad_clock_names_its_field(value: object, field: str) -> None:
    key = field.split(".")[1]
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        config_from_dict({"owned": {"partitions": ["gpu"]}, "horizon": {key: value}})


def test_an_anchor_day_forecast_is_read_from_the_days_start() -> None:
    """``anchor: day`` reads demand[0] at the day's first slot: with the day starting at 06:00, 08:10 is slot 2."""
    config = config_from_dict(
        {
            "owned": {"partitions": ["gpu"]},
            "horizon": {"slots": 3, "slot_minutes": 60, "day_start": "06:00"},
            "realtime": [{"name": "chat", "demand": list(range(24)), "ramp": 8, "anchor": "day"}],
        }
    )
    midnight = 1_764_633_600.0
    fake = FakeSlurm()
    snap = snapshot.take(fake, config, midnight + 8 * HOUR + 600)
    assert snap.scenario.apps[0].demand == (2, 3, 4)


# ----------------------------------------------------------------------------- the live planner decides, and says why


def test_a_dry_run_holds_a_job_the_history_says_to_hold_and_says_why(tmp_path: Path) -> None:
    """Every past day, a job worth 100 times as much per GPU-slot took the whole node at slot 3. At slot 2 a cheap
    6-GPU job that would run to the end of the horizon pends: greedy starts it, the live planner holds it."""
    _past_days(tmp_path / "history")
    config = config_from_dict(_config(tmp_path))
    begins = DayClock.of(config).day_begins(NOW)
    fake = FakeSlurm()
    fake.queue = [pending("9", 6, minutes=420, submit_time=int(begins))]
    greedy = loop.cycle(config, fake, "greedy", dry_run=True, now=begins + 2 * HOUR + 60)
    assert greedy.lines[-1]["start_now"] == ["9"]
    result = loop.cycle(config, fake, LiveSetup(), dry_run=True, now=begins + 2 * HOUR + 60)
    summary = result.lines[-1]
    assert summary["scheduler"] == "anticipate" and summary["slot_of_day"] == 2 and summary["history_days"] == 3
    assert summary["start_now"] == [] and summary["changes"] == []
    line = next(x for x in result.lines if x.get("job") == "9")
    assert line["action"] == "wait" and line["why"].startswith("held: over 8 futures, holding 9 earns")
    assert summary["why"]["9"] == line["why"]
    assert not validate(result.decision.scenario, result.decision.plan)
    assert not (tmp_path / "history" / "recording").exists()  # a dry run writes nothing
    assert fake.calls == []


def test_without_a_history_the_live_planner_starts_what_greedy_starts(tmp_path: Path) -> None:
    config = config_from_dict(_config(tmp_path))
    begins = DayClock.of(config).day_begins(NOW)
    fake = FakeSlurm()
    fake.queue = [pending("9", 6, minutes=420, submit_time=int(begins))]
    result = loop.cycle(config, fake, LiveSetup(), dry_run=True, now=begins + 2 * HOUR + 60)
    assert result.lines[-1]["start_now"] == ["9"] and result.lines[-1]["history_days"] == 0


# ----------------------------------------------------------------------------- the day's record


def _app_config(tmp_path: Path) -> dict:
    return {
        **_config(tmp_path),
        "realtime": [{"name": "chat", "demand": [2] * 8, "ramp": 8, "penalty": 10, "anchor": "day"}],
    }


def test_the_loop_records_the_day_and_the_next_day_reads_it(tmp_path: Path) -> None:
    """Cycles in slots 0 and 1 record the observed demand and a job that ran 1 h 10 min of its 4 h; the first
    cycle of the next day writes the day as a scenario file that --history reads, and plans with it."""
    config = config_from_dict(_app_config(tmp_path))
    clock = DayClock.of(config)
    begins = clock.day_begins(NOW)
    fake = FakeSlurm()
    fake.start_released = False
    seen = {"chat": 5}
    observe = lambda _config: (dict(seen), [])  # noqa: E731
    fake.queue = [pending("7", 2, minutes=240, submit_time=int(begins + 60))]
    loop.cycle(config, fake, LiveSetup(), now=begins + 120, observe=observe)
    record_file = tmp_path / "history" / "recording" / f"{clock.day_name(begins)}.json"
    record = DayRecord.from_dict(json.loads(record_file.read_text()))
    assert record.apps["chat"].observed[0] == 5 and record.apps["chat"].forecast[0] == 2
    assert record.jobs["7"].release == 0 and record.jobs["7"].limit == 4
    seen["chat"] = 3
    fake.queue = [
        running("7", "n1", 0, 2, partition="gpu", start_time=int(begins + 600), ends=begins + 600 + 4 * HOUR),
    ]
    loop.cycle(config, fake, LiveSetup(), now=begins + HOUR + 60, observe=observe)
    from dataclasses import replace

    fake.queue = [replace(fake.queue[0], state="COMPLETED", end_time=int(begins + 600 + 70 * 60))]
    loop.cycle(config, fake, LiveSetup(), now=begins + HOUR + 1800, observe=observe)
    fake.queue = []
    nxt = begins + 8 * HOUR + 60
    result = loop.cycle(config, fake, LiveSetup(), now=nxt, observe=observe)
    day_file = tmp_path / "history" / f"{clock.day_name(begins)}.yaml"
    assert day_file.exists() and not record_file.exists()
    [day] = load_history([day_file], day_template(config, 8))
    job = day.jobs[day.job_index("7")]
    assert (job.duration, job.release, job.runtime, job.gpus) == (4, 0, 2, 2)
    chat = day.apps[0]
    assert chat.demand[:2] == (5, 3) and chat.demand[2:] == (2,) * 6  # no reading after slot 1: the forecast
    assert result.lines[-1]["history_days"] == 1
    assert any("recorded" in n for n in result.lines[-1]["history_notes"])


def _observed(tmp_path: Path, readings: tuple[int, ...]) -> tuple[DayClock, DayRecord, snapshot.Snapshot]:
    """The clock, a day's record of the app's ``readings`` (one in each of the day's first slots, 10 s in), and a
    snapshot taken in slot 2."""
    config = config_from_dict(_app_config(tmp_path))
    clock = DayClock.of(config)
    begins = clock.day_begins(NOW)
    record = DayRecord.new(config, begins)
    fake = FakeSlurm()
    for s, value in enumerate(readings):
        record.see(snapshot.take(fake, config, begins + s * HOUR + 10), {"chat": value})
    return clock, record, snapshot.take(fake, config, begins + 2 * HOUR + 20)


def test_the_plan_of_slot_s_reads_the_demand_observed_before_s(tmp_path: Path) -> None:
    """A reading counts for the slot it was taken in: the state at slot 2 holds slots 0-1 observed, and the
    forecast ahead is corrected by them."""
    clock, record, snap = _observed(tmp_path, (6, 6, 1))
    state, s, _ = state_of(snap, record, clock)
    assert s == 2 and state.observed == ((6, 6),) and state.day_forecast[0][:2] == (2, 2)
    assert state.apps[0].demand[0] > 2  # corrected upward by what slots 0-1 showed, not by slot 2's reading
    unseen, _, _ = state_of(snap, None, clock)
    assert unseen.apps[0].demand[0] == 2


def test_the_loop_state_is_the_simulators_with_the_planners_own_forecast(tmp_path: Path) -> None:
    """One builder: the state at slot 2 is the simulator's (:func:`with_forecast`) with the forecaster the planner
    was fitted with, whatever it is (here a point forecast with a margin of 2 error levels)."""
    clock, record, snap = _observed(tmp_path, (6, 1, 3))
    forecaster = HedgedForecaster("corrected", 2.0)
    state, s, _ = state_of(snap, record, clock, forecaster)
    F, seen = np.array(state.day_forecast), np.array(state.observed)
    expected = forecaster.forecast(F, seen, s, state.gpus)[:, : state.horizon]
    assert [list(app.demand[: expected.shape[1]]) for app in state.apps] == expected.tolist()
    assert with_forecast(state, F, seen, s, forecaster) == state
    assert state_of(snap, record, clock)[0].apps != state.apps  # rolling greedy's corrector differs


def test_a_failed_reading_is_reported_and_the_cycle_plans_with_the_forecast(tmp_path: Path) -> None:
    config = config_from_dict(_app_config(tmp_path))
    begins = DayClock.of(config).day_begins(NOW)
    result = loop.cycle(
        config, FakeSlurm(), LiveSetup(), now=begins + 60, observe=lambda _c: ({}, ["chat: exited 1: no route"])
    )
    summary = result.lines[-1]
    assert summary["observe_failed"] == ["chat: exited 1: no route"] and summary["observed"] == {}
    assert summary["forecast_now"] == {"chat": 2} and result.failed == 0


def test_the_configured_sources_are_read_each_cycle_through_the_cli_reader(tmp_path: Path) -> None:
    """``realtime[].observed`` as the CLI wires it: a command that answers, one that answers nonsense (one line,
    the forecast kept), and a reading above the cluster's GPUs read as all of them (said)."""
    from agents.slurm.slurm_commands import _observe

    base = _app_config(tmp_path)
    chat = {**base["realtime"][0], "observed": {"command": "echo 5"}}
    search = {**chat, "name": "search", "observed": {"command": ["echo", "many"]}}
    video = {**chat, "name": "video", "observed": {"command": "echo 500"}}
    config = config_from_dict({**base, "realtime": [chat, search, video]})
    observe = _observe(config, LiveSetup())
    assert observe is not None and _observe(config, "greedy") is None
    begins = DayClock.of(config).day_begins(NOW)
    summary = loop.cycle(config, FakeSlurm(), LiveSetup(), now=begins + 60, observe=observe).lines[-1]
    assert summary["observed"] == {"chat": 5, "video": 8}
    (nonsense, capped) = summary["observe_failed"]
    assert nonsense.startswith("search: ") and "many" in nonsense
    assert capped == "video: observed 500 GPUs, more than the cluster's 8: read as those"
    record = DayRecord.from_dict(json.loads(next((tmp_path / "history" / "recording").glob("*.json")).read_text()))
    assert record.apps["chat"].observed[0] == 5 and record.apps["search"].observed[0] is None


def test_an_unreadable_record_is_set_aside_and_the_day_starts_afresh(tmp_path: Path) -> None:
    config = config_from_dict(_app_config(tmp_path))
    clock = DayClock.of(config)
    begins = clock.day_begins(NOW)
    bad = tmp_path / "history" / "recording" / f"{clock.day_name(begins)}.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    result = loop.cycle(config, FakeSlurm(), LiveSetup(), now=begins + 60, observe=lambda _c: ({"chat": 4}, []))
    assert any("unreadable day record" in n for n in result.lines[-1]["history_notes"])
    assert bad.with_name(bad.name + ".bad").exists()
    assert DayRecord.from_dict(json.loads(bad.read_text())).apps["chat"].observed[0] == 4


def test_a_job_that_breaks_the_format_is_reported_with_its_id_and_left_out(tmp_path: Path) -> None:
    config = config_from_dict(_app_config(tmp_path))
    record = DayRecord.new(config, NOW)
    record.gpus, record.node_size = 8, 8
    from agents.slurm.record import JobRecord

    record.jobs["ok"] = JobRecord("training", 2, 3, 1, 1.0)
    record.jobs["wide"] = JobRecord("training", 16, 3, 4, 1.0)  # more GPUs than the day's cluster had
    problems: list[str] = []
    day = record.to_scenario(problems)
    assert [j.id for j in day.jobs] == ["ok"]
    assert len(problems) == 1 and problems[0].startswith("job wide: left out of day") and "16 GPUs" in problems[0]


def test_a_bad_history_file_is_left_out_and_named(tmp_path: Path) -> None:
    _past_days(tmp_path / "history", n=2)
    (tmp_path / "history" / "2026-11-25.yaml").write_text(yaml.safe_dump({"name": "x", "cluster": {"gpus": 8}}))
    config = config_from_dict(_config(tmp_path))
    begins = DayClock.of(config).day_begins(NOW)
    result = loop.cycle(config, FakeSlurm(), LiveSetup(), dry_run=True, now=begins + 60)
    notes = result.lines[-1]["history_notes"]
    assert result.lines[-1]["history_days"] == 3 and any("2026-11-25.yaml" in n for n in notes)


# ----------------------------------------------------------------------------- the command line


def _cli(tmp_path: Path, monkeypatch, fake: FakeSlurm, config: dict, *argv: str) -> int:
    from agents.cli import main
    from agents.slurm import client

    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump({**config, "slurm": {**config["slurm"], "state_dir": str(tmp_path / "state")}}))
    monkeypatch.setattr(client, "SlurmClient", lambda **_kwargs: fake)
    return main(["slurm", *argv, "--config", str(path)])


def test_the_cycle_runs_the_live_planner_by_default(tmp_path: Path, monkeypatch, capsys) -> None:
    fake = FakeSlurm()
    fake.queue = [pending("9", 2, minutes=120)]
    assert _cli(tmp_path, monkeypatch, fake, _app_config(tmp_path), "cycle", "--dry-run") == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["scheduler"] == "anticipate" and "slot_of_day" in summary


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--scheduler", "nope"), "unknown scheduler 'nope'"),
        (("--scheduler", "greedy", "--futures", "4"), "are the live planner's"),
        (("--history", "missing.yaml"), "missing.yaml: --history: no such file"),
    ],
)
def test_bad_live_options_are_one_line(tmp_path: Path, monkeypatch, capsys, argv: tuple, message: str) -> None:
    code = _cli(tmp_path, monkeypatch, FakeSlurm(), _app_config(tmp_path), "cycle", "--dry-run", *argv)
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_a_recorded_runtime_is_part_of_the_scenario_format() -> None:
    base = {"name": "x", "cluster": {"gpus": 4}, "horizon": {"slots": 4}}
    job = {"id": "a", "type": "training", "gpus": 2, "duration": 3, "runtime": 2}
    day = scenario_from_dict({**base, "jobs": [job]})
    assert day.jobs[0].runtime == 2 and day.to_dict()["jobs"][0]["runtime"] == 2
    with pytest.raises(ScenarioError, match=r"jobs\[0\]\.runtime: a job runs at most its duration \(3 slots\)"):
        scenario_from_dict({**base, "jobs": [{**job, "runtime": 4}]})
    with pytest.raises(ScenarioError, match=r"jobs\[0\]\.runtime"):
        scenario_from_dict({**base, "jobs": [{**job, "runtime": 1, "running_on": [0, 1]}]})


def test_history_days_are_read_newest_last(tmp_path: Path) -> None:
    _past_days(tmp_path, n=3)
    assert [p.name for p in History(tmp_path).recent(2)] == ["2026-11-21.yaml", "2026-11-22.yaml"]


@pytest.mark.skipif(
    not (Path(__file__).resolve().parents[1] / "lab" / "policies" / "live_chooser.onnx").is_file(),
    reason="no shipped live chooser",
)
def test_the_learned_chooser_runs_the_loop_with_four_apps(tmp_path: Path, monkeypatch) -> None:
    """The loop's cycle with the shipped chooser (not offered by name: the loop is handed it) and four real-time
    apps: every plan validated; the chooser reads the slot of the day as the simulator does (``now`` of the
    configured ``day_slots``), though the Slurm state's window runs past the day's end."""
    from lab import live_chooser as chooser

    plain = LiveSetup.planner

    def with_chooser(self, config, gpus, recorded=()):  # type: ignore[no-untyped-def]
        inner = plain(self, config, gpus, recorded)
        return chooser.ChooserPlanner.load(inner, config.day_slots, name="live-chooser")

    monkeypatch.setattr(LiveSetup, "planner", with_chooser)

    apps = [{"name": f"app{i}", "demand": [1] * 8, "ramp": 8, "penalty": 10, "anchor": "day"} for i in range(4)]
    config = config_from_dict({**_config(tmp_path), "realtime": apps})
    fake = FakeSlurm()
    fake.queue = [pending("1", 2), pending("2", 4)]
    begins = DayClock.of(config).day_begins(NOW)
    seen: list[tuple[int, int]] = []
    real = chooser.ChooserPlanner.decide

    def spy(self, state, now, elapsed=None, options=None):  # type: ignore[no-untyped-def]
        seen.append((now, self.day_slots))
        return real(self, state, now, elapsed, options)

    monkeypatch.setattr(chooser.ChooserPlanner, "decide", spy)
    observe = lambda _c: ({f"app{i}": 1 for i in range(4)}, [])  # noqa: E731
    result = loop.cycle(config, fake, LiveSetup(), now=begins + 2 * HOUR + 60, observe=observe)
    summary = result.lines[-1]
    assert result.failed == 0 and summary["scheduler"] == "anticipate"  # the setup's name; the chooser decided
    assert validate(result.decision.scenario, result.decision.plan) == []
    assert seen == [(2, config.day_slots)]
