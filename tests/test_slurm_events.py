"""``gpualloc slurm run`` cycles on events besides the clock (issue 24): a job that ends or is submitted starts a
cycle at the next poll, debounced; the clock's cycles stay on their grid; a failing poll is one line.

Time is an input here: the loop's ``clock`` and ``sleep`` are a fake clock that a test's script of Slurm events
(a job ends at t = 12 s, ...) advances, so every assertion is on seconds of that clock, at any machine speed.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from agents.slurm import loop
from agents.slurm.config import config_from_dict
from agents.slurm.events import Events, Queue, Watch, events
from tests.slurm_helpers import FakeSlurm, JsonLines, pending, running

CONFIG = config_from_dict(
    {
        "slurm": {"partitions": ["gpu"], "cpus_per_gpu": 4, "confirm": 0},
        "owned": {"partitions": ["gpu"]},
        "horizon": {"slots": 24, "slot_minutes": 60},
        "workloads": {"default_type": "batch_inference"},
    }
)


class FakeTime:
    """A clock that only ``sleep`` moves; at each scripted time its action changes the fake Slurm."""

    def __init__(self, script: list[tuple[float, Callable[[], None]]]) -> None:
        self.t = 0.0
        self.script = sorted(script, key=lambda item: item[0])

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert 0 <= seconds <= 1.0, seconds  # the loop never sleeps past a second: a stop is seen in time
        self.t += seconds
        while self.script and self.script[0][0] <= self.t + 1e-9:
            self.script.pop(0)[1]()


def _run(fake: FakeSlurm, script, *, every: float, poll: float, debounce: float, end: float) -> list[dict]:
    """Run the loop until ``end`` seconds of the fake clock; every line it wrote, each with the clock's time."""
    clock = FakeTime(script)
    stream = JsonLines(stamp=lambda: {"at": round(clock.t, 6)})
    lines = stream.lines

    failures = loop.run_loop(
        CONFIG,
        fake,
        "greedy",
        every,
        budget=0,
        out=stream,
        poll_seconds=poll,
        debounce_seconds=debounce,
        sleep=clock.sleep,
        clock=clock,
        should_stop=lambda: clock.t >= end,
    )
    assert failures == 0
    return lines


def _cycles(lines: list[dict]) -> list[tuple[float, str]]:
    return [(line["at"], line["trigger"]) for line in lines if "cycle" in line]


def _busy_node() -> FakeSlurm:
    """Job 1 runs on all 8 GPUs (its limit is an hour away); job 2 (8 GPUs) is held, planned after it."""
    fake = FakeSlurm()
    fake.queue = [running("1", "n1", 0, 8), pending("2", 8)]
    return fake


def _end(fake: FakeSlurm, jid: str) -> Callable[[], None]:
    return lambda: setattr(fake, "queue", [j for j in fake.queue if j.id != jid])


def _submit(fake: FakeSlurm, jid: str, gpus: int) -> Callable[[], None]:
    return lambda: fake.queue.append(pending(jid, gpus))


def test_a_job_ending_starts_a_cycle_at_the_next_poll_and_the_next_job_starts() -> None:
    fake = _busy_node()
    lines = _run(fake, [(12.0, _end(fake, "1"))], every=0.5, poll=5, debounce=2, end=100)
    # polls at 5, 10, 15 (sees job 1 gone) -> the cycle 2 s later; the clock's cycles stay at 0, 30, 60, 90
    assert _cycles(lines) == [(0, "clock"), (17, "ended"), (30, "clock"), (60, "clock"), (90, "clock")]
    event = next(line for line in lines if line.get("trigger") == "ended")
    assert event["events"] == {"ended": {"jobs": 1, "ids": ["1"]}} and event["start_now"] == ["2"]
    assert [c for c in fake.calls if c[0] == "release"] == [("release", "2")]
    assert {j.id: j.state for j in fake.queue} == {"2": "RUNNING"}  # the loop's own start is no event


def test_a_submission_starts_a_cycle() -> None:
    fake = _busy_node()
    lines = _run(fake, [(12.0, _submit(fake, "3", 2))], every=60, poll=5, debounce=2, end=100)
    assert _cycles(lines) == [(0, "clock"), (17, "submitted")]
    event = lines[[line.get("trigger") for line in lines].index("submitted")]
    assert event["events"] == {"submitted": {"jobs": 1, "ids": ["3"]}} and event["start_now"] == []


def test_a_burst_within_the_debounce_is_one_cycle() -> None:
    fake = _busy_node()
    script = [(10.5, _end(fake, "1")), (11.5, _submit(fake, "3", 1)), (12.5, _submit(fake, "4", 1))]
    lines = _run(fake, script, every=60, poll=1, debounce=3, end=100)
    # the poll at 11 sees job 1 gone, those at 12 and 13 the submissions: one cycle at 11 + 3
    assert _cycles(lines) == [(0, "clock"), (14, "ended")]
    assert lines[-1]["events"] == {"ended": {"jobs": 1, "ids": ["1"]}, "submitted": {"jobs": 2, "ids": ["3", "4"]}}


def test_no_change_is_only_the_clocks_cycles() -> None:
    fake = _busy_node()
    lines = _run(fake, [], every=1, poll=5, debounce=2, end=250)
    assert _cycles(lines) == [(0, "clock"), (60, "clock"), (120, "clock"), (180, "clock"), (240, "clock")]
    assert fake.polls > 40  # polled all along (5 snapshots' reads among them)
    assert all("events" not in line for line in lines)


def test_without_polling_only_the_clock_starts_cycles() -> None:
    fake = _busy_node()
    lines = _run(fake, [(12.0, _end(fake, "1"))], every=1, poll=0, debounce=2, end=100)
    # the two snapshots and the read of the second cycle's commit (it starts job 2): no poll in between
    assert _cycles(lines) == [(0, "clock"), (60, "clock")] and fake.polls == 3


def test_a_failing_poll_is_one_line_and_the_loop_goes_on() -> None:
    fake = _busy_node()
    script = [
        (7.0, lambda: setattr(fake, "squeue_error", "Unable to contact slurm controller")),
        (30.0, lambda: setattr(fake, "squeue_error", None)),
        (32.0, _end(fake, "1")),
    ]
    lines = _run(fake, script, every=60, poll=5, debounce=2, end=100)
    failed = [line for line in lines if "poll" in line]
    assert len(failed) == 1 and failed[0]["poll"] == "failed" and failed[0]["at"] == 10
    assert "Unable to contact slurm controller" in failed[0]["error"]
    assert _cycles(lines) == [(0, "clock"), (37, "ended")]


def test_a_job_ended_while_polls_failed_is_still_seen() -> None:
    fake = _busy_node()
    script = [
        (7.0, lambda: setattr(fake, "squeue_error", "Socket timed out")),
        (12.0, _end(fake, "1")),
        (21.0, lambda: setattr(fake, "squeue_error", None)),
    ]
    lines = _run(fake, script, every=60, poll=5, debounce=2, end=100)
    assert _cycles(lines) == [(0, "clock"), (27, "ended")]  # the poll at 25 compares with the read at 5


def test_queue_differences() -> None:
    before = Queue.of([running("1", "n1", 0, 2), pending("2", 2), pending("3", 2), running("5", "n1", 2, 2)])
    after = Queue.of(
        [
            running("2", "n1", 0, 2),  # released by a cycle: no event
            pending("4", 1),  # new
            pending("5", 2, held=False),  # requeued: it no longer runs
            running("1", "n1", 0, 2, state="COMPLETED"),  # still listed (MinJobAge), no longer running
        ]
    )  # job 3 left the queue (cancelled)
    assert events(before, after) == Events(submitted=("4",), ended=("1", "3", "5"))
    assert not events(after, after)
    assert Events(("9",), ()).merge(Events(("10", "9"), ("2",))) == Events(("9", "10"), ("2",))


def test_watch_compares_with_the_last_read_made_anywhere() -> None:
    fake = _busy_node()
    watch = Watch(fake)
    assert watch.poll() == (Events(), None)  # the first read: nothing to compare with
    fake.queue.append(pending("3", 1))
    watch.saw(fake.queue)  # a cycle's snapshot saw job 3
    assert watch.poll() == (Events(), None)
    fake.squeue_error = "boom"
    assert watch.poll()[1].endswith("boom") and watch.poll() == (Events(), None)


def test_event_cycles_move_an_app_at_most_its_ramp_a_slot() -> None:
    """Each cycle's slot 0 is now, but the ramp is per slot: event cycles plan the app from where the slot began."""
    fake = FakeSlurm()
    config = config_from_dict(
        {
            "slurm": {"partitions": ["gpu"], "cpus_per_gpu": 4, "confirm": 0},
            "owned": {"partitions": ["gpu"]},
            "workloads": {"default_type": "batch_inference"},
            "realtime": [{"name": "chat", "demand": [6] * 24, "ramp": 2, "penalty": 8}],
        }
    )
    clock = FakeTime([(12.0, _submit(fake, "3", 1)), (22.0, _submit(fake, "4", 1))])
    stream = JsonLines(stamp=lambda: {"at": round(clock.t, 6)})
    lines = stream.lines

    loop.run_loop(
        config, fake, "greedy", 1, budget=0, out=stream, poll_seconds=5, debounce_seconds=2, sleep=clock.sleep,
        clock=clock, should_stop=lambda: clock.t >= 100,
    )  # fmt: skip
    assert _cycles(lines) == [(0, "clock"), (17, "submitted"), (24, "submitted"), (60, "clock")]
    assert [line["gpus"] for line in lines if line.get("app") == "chat"] == [2, 2, 2, 4]  # from 0, 2 a slot
    assert {j.id: j.state for j in fake.queue} == {"3": "RUNNING", "4": "RUNNING"}


def test_the_cli_takes_poll_and_debounce(tmp_path, monkeypatch, capsys) -> None:
    import yaml

    from agents.cli import main
    from agents.slurm import client

    path = tmp_path / "slurm.yaml"
    config = {"slurm": {"state_dir": str(tmp_path / "state")}, "owned": {"partitions": ["gpu"]}}
    path.write_text(yaml.safe_dump({**config, "workloads": {"default_type": "training"}}))
    fake = _busy_node()
    monkeypatch.setattr(client, "SlurmClient", lambda **_kwargs: fake)
    argv = ["slurm", "run", "--config", str(path), "--every", "60", "--cycles", "1", "--budget", "0"]
    assert main([*argv, "--poll", "0.5", "--debounce", "0"]) == 0
    (summary,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"cycle"' in line]
    assert summary["trigger"] == "clock" and summary["n"] == 1
    assert main([*argv, "--poll", "-1"]) == 2
    assert "--poll: expected seconds >= 0, got '-1'" in capsys.readouterr().err
