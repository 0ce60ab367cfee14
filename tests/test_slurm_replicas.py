"""The apps' replicas in their reservations, against a fake Slurm: counted once, drained before a shrink, never
cancelled by the allocator; removed apps' reservations retired; names that do not parse stop the cycle.

The same behaviours on a real Slurm: tests/test_slurm_replicas_cluster.py.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from agents.slurm import commit, snapshot
from agents.slurm.capacity import Teller, prometheus_text
from agents.slurm.config import Replicas, config_from_dict
from tests.slurm_helpers import NOW, FakeSlurm, core_reservation, driver_config, pending, running

CONFIG = {**driver_config(default_type="training", chat=2), "replicas": {"drain_seconds": 30}}


def _snap(fake: FakeSlurm, config: dict = CONFIG) -> snapshot.Snapshot:
    return snapshot.take(fake, config_from_dict(config), NOW)


def _replica(jid: str, node: str, first: int, reservation: str, gpus: int = 1):
    return running(jid, node, first, gpus, partition="gpu", reservation=reservation)


def _chat_pieces(fake: FakeSlurm, *gpus: int) -> None:
    """chat's reservations on n1, ``gpus`` GPUs each: gpualloc-chat.n1, then ~2, ..."""
    names = ["gpualloc-chat.n1", *(f"gpualloc-chat.n1~{k}" for k in range(2, len(gpus) + 1))]
    fake.held_reservations = [core_reservation(n, "n1", 4 * g) for n, g in zip(names, gpus, strict=True)]


class Clock:
    """A fake monotonic clock that a sleep moves on; ``on_sleep`` runs at each sleep (an autoscaler's step)."""

    def __init__(self, on_sleep=None) -> None:
        self.t = 0.0
        self.slept: list[float] = []
        self.on_sleep = on_sleep

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += max(seconds, 0.01)
        if self.on_sleep is not None:
            self.on_sleep()


def test_a_replica_is_counted_once_as_its_apps_capacity_not_as_a_running_job() -> None:
    """6 GPUs reserved for chat with 4 replicas in them, and another user's job of 2: the node is full, not over.
    Counted twice (as running jobs and as capacity) it would be 12 of 8, and chat would be relaxed to 2."""
    fake = FakeSlurm()
    fake.held_reservations = [core_reservation("gpualloc-chat.n1", "n1", 24)]
    fake.queue = [
        *(_replica(f"r{i}", "n1", i, "gpualloc-chat.n1") for i in range(4)),
        running("9", "n1", 4, 2, partition="batch"),
    ]
    snap = _snap(fake)
    assert set(snap.running) == {"9"} and set(snap.replicas) == {"r0", "r1", "r2", "r3"}
    assert snap.app_now["chat"] == {"n1": 6} and snap.scenario.apps[0].initial == 6
    assert snap.in_use == {"gpualloc-chat.n1": 4} and snap.app_replicas("chat") == {"n1": 4}
    assert not snap.relaxed
    assert [j.id for j in snap.scenario.jobs] == ["9"]


def test_a_pending_job_asking_for_an_apps_reservation_is_the_apps_own_never_held() -> None:
    fake = FakeSlurm()
    fake.held_reservations = [core_reservation("gpualloc-chat.n1", "n1", 8)]
    fake.queue = [pending("r9", 1, held=False, reservation="gpualloc-chat.n1"), pending("5", 2, held=False)]
    snap = _snap(fake)
    assert set(snap.owned) == {"5"} and "r9" not in snap.owned_outside


def _two_pieces_with_replicas(fake: FakeSlurm) -> None:
    """chat holds 1 + 1 GPUs on n1, a replica of 1 GPU in each piece."""
    _chat_pieces(fake, 1, 1)
    fake.queue = [_replica("r1", "n1", 0, "gpualloc-chat.n1"), _replica("r2", "n1", 1, "gpualloc-chat.n1~2")]


def _shrink_to(snap: snapshot.Snapshot, gpus: int) -> commit.Change:
    decision = SimpleNamespace(app_gpus_now={"chat": gpus}, plan=SimpleNamespace(placements=[]))
    return commit.node_change(snap, "n1", commit.app_layout(snap, decision))


def test_a_shrink_waits_for_the_replicas_to_leave_the_reservation_it_deletes_and_never_cancels_one() -> None:
    fake = FakeSlurm()
    _two_pieces_with_replicas(fake)
    fake.queue.append(pending("5", 6))
    snap = _snap(fake)
    told: list[dict] = []
    stopped: list[str] = []

    def autoscaler() -> None:  # the app's side: it stops its replicas in the reservations it is told to leave
        leave = {n for node in told[-1]["apps"]["chat"].values() for n in node["leave"]}
        for j in list(fake.queue):
            if j.reservation in leave:
                stopped.append(j.id)
                fake.queue.remove(j)

    clock = Clock(autoscaler)
    place = commit.Change("place", "5", nodes=("n1",), gpus=(("n1", 6),))
    done = commit.apply(
        snap, [_shrink_to(snap, 1), place], fake, confirm_seconds=0, sleep=clock.sleep, clock=clock,
        signal=lambda table: told.append(json.loads(json.dumps(table))) or [],
    )  # fmt: skip
    assert told[0]["apps"]["chat"]["n1"] == {
        "gpus": 1,
        "reservations": ["gpualloc-chat.n1"],
        "leave": ["gpualloc-chat.n1~2"],
    }
    assert stopped == ["r2"] and not done.failed and not done.above_plan, done.failed
    assert done.drained["n1"].startswith("drained in")
    assert [c[:2] for c in fake.calls] == [("delete", "gpualloc-chat.n1~2"), ("nodes", "5"), ("release", "5")]
    assert not any(c[0] == "cancel" for c in fake.calls)  # the allocator has no way to cancel a job at all
    assert told[-1]["apps"]["chat"]["n1"] == {"gpus": 1, "reservations": ["gpualloc-chat.n1"], "leave": []}


def test_a_replica_that_will_not_leave_keeps_the_app_above_its_plan_and_the_job_waits_saying_why() -> None:
    """The drain times out after replicas.drain_seconds: nothing is deleted, nothing is released onto the GPUs the
    replica still holds, and one line says why."""
    fake = FakeSlurm()
    _two_pieces_with_replicas(fake)
    fake.queue.append(pending("5", 6))
    snap = _snap(fake)
    clock = Clock()
    place = commit.Change("place", "5", nodes=("n1",), gpus=(("n1", 6),))
    done = commit.apply(
        snap, [_shrink_to(snap, 1), place], fake, confirm_seconds=0, sleep=clock.sleep, clock=clock,
        signal=lambda table: [],
    )  # fmt: skip
    assert fake.calls == [] and clock.t >= 30
    why = dict((c.target, w) for c, w in done.failed)
    assert why["n1"].startswith("not shrunk: the replicas did not leave gpualloc-chat.n1~2 (1 GPU) within 30 s")
    assert why["5"].startswith("not released: an app keeps more than the plan on n1: the replicas did not leave")
    assert {j.id: j.state for j in fake.queue} == {"r1": "RUNNING", "r2": "RUNNING", "5": "PENDING"}
    decision = SimpleNamespace(app_gpus_now={"chat": 1}, plan=SimpleNamespace(placements=[]), why={}, start_now=[])
    (app,) = [line for line in commit.decisions(snap, decision, done) if line.get("app") == "chat"]
    assert app["failed"] == {"n1": why["n1"]} and app["replicas"] == {"n1": 2} and app["held_now"] == {"n1": 2}


def test_a_shrink_keeps_the_reservations_replicas_run_in_and_needs_no_drain() -> None:
    """2 + 2 GPUs, one replica in the second piece, the plan wants 2: the busy piece stays, the idle one goes."""
    fake = FakeSlurm()
    _chat_pieces(fake, 2, 2)
    fake.queue = [_replica("r2", "n1", 0, "gpualloc-chat.n1~2")]
    snap = _snap(fake)
    clock = Clock()
    done = commit.apply(snap, [_shrink_to(snap, 2)], fake, confirm_seconds=0, sleep=clock.sleep, clock=clock)
    assert not done.failed and not done.drained and clock.slept == []
    assert [c[:2] for c in fake.calls] == [("delete", "gpualloc-chat.n1")]


def test_the_capacity_is_told_through_a_file_json_or_prometheus_and_a_command(tmp_path) -> None:
    table = {"time": "t", "apps": {"chat": {"n1": {"gpus": 2, "reservations": ["r"], "leave": []}}, "old": {}}}
    teller = Teller(
        Replicas(
            capacity_file=str(tmp_path / "cap.json"), scale_command=("sh", "-c", "cat > " + str(tmp_path / "in.json"))
        )
    )
    assert teller(table) == []
    assert json.loads((tmp_path / "cap.json").read_text()) == table == json.loads((tmp_path / "in.json").read_text())
    assert Teller(Replicas(capacity_file=str(tmp_path / "cap.prom")))(table) == []
    text = (tmp_path / "cap.prom").read_text()
    assert text == prometheus_text(table) and 'gpualloc_app_capacity_gpus{app="chat",node="n1"} 2\n' in text
    assert 'gpualloc_app_capacity_gpus{app="old",node=""} 0' in text
    assert not Teller(Replicas())


def test_a_scale_command_that_fails_or_hangs_is_one_line_and_the_commit_goes_on(tmp_path) -> None:
    table = {"time": "t", "apps": {}}
    (fails,) = Teller(Replicas(scale_command=("sh", "-c", "echo broken >&2; exit 3")))(table)
    assert fails == "replicas.scale_command sh: exit 3: broken"
    (hangs,) = Teller(Replicas(scale_command=("sleep", "600"), scale_timeout=0.2))(table)
    assert hangs == "replicas.scale_command sleep: no answer within 0.2 s"
    blocked = tmp_path / "file"
    blocked.write_text("")
    (unwritten,) = Teller(Replicas(capacity_file=str(blocked / "cap.json")))(table)
    assert unwritten.startswith(f"replicas.capacity_file {blocked / 'cap.json'}: not written:")
    fake = FakeSlurm()
    _two_pieces_with_replicas(fake)
    snap = _snap(fake)
    clock = Clock(lambda: fake.queue.remove(next(j for j in fake.queue if j.id == "r2")))
    done = commit.apply(
        snap, [_shrink_to(snap, 1)], fake, confirm_seconds=0, sleep=clock.sleep, clock=clock,
        signal=Teller(Replicas(scale_command=("sh", "-c", "exit 3"))),
    )  # fmt: skip
    assert done.signal == ["replicas.scale_command sh: exit 3"] * 2 and not done.failed
    assert [c[:2] for c in fake.calls] == [("delete", "gpualloc-chat.n1~2")]


def test_a_removed_apps_reservation_is_retired_once_no_job_runs_in_it() -> None:
    """Not read as foreign (the node would leave planning silently): its node waits, named, until it is deleted."""
    fake = FakeSlurm(nodes=("n1", "n2"))
    fake.held_reservations = [
        core_reservation("gpualloc-old.n2", "n2", 8),
        core_reservation("gpualloc-old.n2~2", "n2", 4),
    ]
    fake.queue = [_replica("r1", "n2", 0, "gpualloc-old.n2~2")]
    snap = _snap(fake)
    assert snap.departed == {"gpualloc-old.n2": "n2", "gpualloc-old.n2~2": "n2"} and snap.nodes == ("n1",)
    assert any("of app old, no longer configured; released once no job runs in it" in n.why for n in snap.notes)
    decision = SimpleNamespace(app_gpus_now={"chat": 2}, plan=SimpleNamespace(placements=[]), start_now=[])
    planned = commit.changes(snap, decision)
    assert [c.summary() for c in planned][:2] == ["retire gpualloc-old.n2", "retire gpualloc-old.n2~2"]
    done = commit.apply(snap, planned, fake, confirm_seconds=0)
    assert ("delete", "gpualloc-old.n2") in fake.calls and ("delete", "gpualloc-old.n2~2") not in fake.calls
    assert dict((c.target, w) for c, w in done.skipped)["gpualloc-old.n2~2"].startswith("in use (1 GPU of jobs")
    assert commit.capacity(snap, [], {})["apps"]["old"] == {}  # told: no capacity anywhere, its replicas stop


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("site-chat.n1", "site-chat.n1 is named for app chat under the prefix 'site-', but reservations.prefix is"),
        ("gpualloc-chat:x.n1", "gpualloc-chat:x.n1 has the prefix 'gpualloc-' but names no app, shared part or piece"),
    ],
)
def test_a_changed_prefix_or_a_name_that_does_not_parse_stops_the_cycle_before_any_change(name, said) -> None:
    fake = FakeSlurm()
    fake.held_reservations = [core_reservation(name, "n1", 8)]
    with pytest.raises(snapshot.ReservationNamesError, match="cannot read") as caught:
        _snap(fake)
    assert said in str(caught.value) and "Set reservations.prefix back" in str(caught.value)


def test_jobs_no_cycle_can_plan_are_released_only_after_the_placed_jobs_are_confirmed() -> None:
    """Released before the confirmation, a never-plannable job could take the GPUs of a job placed this cycle."""
    fake = FakeSlurm()
    fake.queue = [pending("1", 4), pending("7", 2, tres_other="gres:gpu:1")]
    snap = _snap(fake)
    assert "7" in snap.left_to_slurm
    polls_at: dict[str, int] = {}
    fake.before_change = lambda change: polls_at.setdefault(change[1], fake.polls) if change[0] == "release" else None
    planned = [commit.Change("place", "1", nodes=("n1",), gpus=(("n1", 4),)), commit.Change("leave", "7")]
    done = commit.apply(snap, planned, fake, confirm_seconds=5, sleep=lambda s: None)
    assert [c[:2] for c in fake.calls] == [("nodes", "1"), ("release", "1"), ("release", "7")]
    assert polls_at["7"] > polls_at["1"] and not done.failed  # squeue was read (the confirmation) in between


def test_each_app_gets_nodes_of_its_own_where_the_plan_allows() -> None:
    """Two apps of 4 GPUs on two empty nodes: one node each (Slurm keeps them apart), not both on the first."""
    config = {
        **CONFIG,
        "realtime": [*CONFIG["realtime"], {"name": "search", "demand": [4] * 24, "ramp": 4, "penalty": 8}],
    }
    fake = FakeSlurm(nodes=("n1", "n2"))
    fake.held_reservations = [core_reservation("gpualloc-search.n2", "n2", 4)]
    snap = _snap(fake, config)
    decision = SimpleNamespace(app_gpus_now={"chat": 4, "search": 4}, plan=SimpleNamespace(placements=[]))
    assert commit.app_layout(snap, decision) == {"chat": {"n1": 4}, "search": {"n2": 4}}
    decision = SimpleNamespace(app_gpus_now={"chat": 10, "search": 4}, plan=SimpleNamespace(placements=[]))
    assert commit.app_layout(snap, decision) == {
        "chat": {"n1": 8, "n2": 2},
        "search": {"n2": 4},
    }  # shared: no way round


def test_the_loop_does_not_start_on_reservations_its_configuration_cannot_read() -> None:
    from agents.slurm.loop import run_loop

    fake = FakeSlurm()
    fake.held_reservations = [core_reservation("site-chat.n1", "n1", 8)]
    with pytest.raises(snapshot.ReservationNamesError, match="under the prefix 'site-'"):
        run_loop(config_from_dict(CONFIG), fake, "greedy", 60, cycles=1)
    assert fake.calls == [] and fake.polls == 0


def test_replicas_coming_and_going_start_no_cycle() -> None:
    """The apps scale their replicas all day: no event, where an owned job submitted or ended is one."""
    from agents.slurm.events import Watch

    fake = FakeSlurm()
    watch = Watch(fake, replica_prefix="gpualloc-")
    fake.queue = [_replica("r1", "n1", 0, "gpualloc-chat.n1")]
    watch.saw(fake.jobs())
    fake.queue = [pending("r2", 1, held=False, reservation="gpualloc-chat.n1,gpualloc-chat.n1~2")]  # r1 ended
    assert not watch.poll()[0]
    fake.queue.append(pending("5", 2))
    assert watch.poll()[0].submitted == ("5",)


def test_a_replica_given_a_list_of_reservations_counts_once_and_holds_each_one() -> None:
    """Slurm 22.05 shows a running job's whole --reservation list, and refuses to delete any of them meanwhile."""
    fake = FakeSlurm()
    _chat_pieces(fake, 1, 1)
    fake.queue = [_replica("r1", "n1", 0, "gpualloc-chat.n1,gpualloc-chat.n1~2")]
    snap = _snap(fake)
    assert set(snap.replicas) == {"r1"} and snap.app_replicas("chat") == {"n1": 1}
    assert commit.jobs_in(snap.config, fake.jobs()) == {"gpualloc-chat.n1": 1, "gpualloc-chat.n1~2": 1}


def test_a_replica_that_comes_in_after_the_commits_read_is_drained_before_the_delete() -> None:
    """Seen on a real day: the app started a replica in a reservation between the commit's read (none there, so
    no drain) and the delete ("in use"). The delete waits for it within the drain time, then goes."""
    fake = FakeSlurm()
    _chat_pieces(fake, 1, 1)
    snap = _snap(fake)
    read = fake.reservations

    def reservations():  # the commit's read, then the app's replica comes in
        found = read()
        if not any(j.id == "r9" for j in fake.queue):
            fake.queue.append(_replica("r9", "n1", 1, "gpualloc-chat.n1~2"))
        return found

    fake.reservations = reservations
    clock = Clock(lambda: fake.queue.clear())  # the app stops it, told to leave
    done = commit.apply(snap, [_shrink_to(snap, 1)], fake, confirm_seconds=0, sleep=clock.sleep, clock=clock)
    assert not done.failed and not done.above_plan and done.drained["n1"].startswith("drained in")
    assert [c[:2] for c in fake.calls] == [("delete", "gpualloc-chat.n1~2")] and clock.t < 30


def test_a_replica_just_started_without_its_gres_detail_is_the_apps_not_a_job_taking_the_node() -> None:
    """Seen on a real day: a replica read by the commit before Slurm filled in its GPU indices made its node look
    taken since the snapshot, and the app's growth there waited a cycle. Its GPUs per node are what it asked."""
    fake = FakeSlurm()
    _chat_pieces(fake, 1)
    snap = _snap(fake)
    fake.queue = [_replica("r1", "n1", 0, "gpualloc-chat.n1")]
    fake.no_detail = {"r1"}
    decision = SimpleNamespace(app_gpus_now={"chat": 2}, plan=SimpleNamespace(placements=[]))
    grow = commit.node_change(snap, "n1", commit.app_layout(snap, decision))
    done = commit.apply(snap, [grow], fake, confirm_seconds=0)
    assert not done.failed and [c[:2] for c in fake.calls] == [("create", "gpualloc-chat.n1~2")]
