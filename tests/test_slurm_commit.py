"""The commit on a fake Slurm (issue 25): read and checked before its first change, reservations that never drop
below the plan where Slurm leaves room, changes that are not repeated blindly, the confirmation, one writer.

The fake (tests/slurm_helpers.py) counts cores as Slurm does (4 per GPU here): a reservation is made only where
its cores are free, a released job starts only where its GPUs and cores are.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import replace
from pathlib import Path

import pytest

from agents.slurm import commit, loop, snapshot
from agents.slurm.config import config_from_dict
from agents.slurm.errors import SlurmError
from agents.slurm.lock import RUN, WRITER, BusyError, Lock
from tests.slurm_helpers import (
    LOST,
    NOW,
    UNANSWERED,
    FakeSlurm,
    JsonLines,
    core_reservation,
    driver_config,
    pending,
    running,
)

CONFIG = driver_config(default_type="training", chat=4)
NO_APPS = {**CONFIG, "realtime": []}


def _snap(fake: FakeSlurm, config: dict = CONFIG) -> snapshot.Snapshot:
    return snapshot.take(fake, config_from_dict(config), NOW)


def _reserve(snap: snapshot.Snapshot, node: str, gpus: int, app: str = "chat") -> commit.Change:
    """The change that brings the app to ``gpus`` GPUs on ``node`` from what the snapshot read there."""
    config = snap.config
    found = commit.node_pieces(snap, snap.reservations, node)
    return commit.Change(
        "reserve",
        node,
        nodes=(node,),
        gpus=((node, gpus),),
        users=("root",),
        pieces=tuple((r.name, snapshot.piece_gpus(config, r, node)) for r in found),
        want=((app, gpus),),
        shares=tuple((r.name, tuple(snapshot.split_of(config, r, node).items())) for r in found),
    )


def _held(fake: FakeSlurm, node: str, app: str = "chat") -> int:
    return sum(r.cores[node] // 4 for r in fake.held_reservations if r.name.startswith(f"gpualloc-{app}.{node}"))


def _creates_before_deletes(calls: list[tuple]) -> bool:
    kinds = [c[0] for c in calls if c[0] in ("create", "delete")]
    return kinds == sorted(kinds, key=["create", "delete"].index)


# ----------------------------------------------------------------------------- read and check first


def test_a_read_that_fails_before_the_first_change_changes_nothing() -> None:
    fake = FakeSlurm()
    fake.queue = [pending("1", 2, held=False), pending("2", 8, held=False)]
    snap = _snap(fake, NO_APPS)
    planned = [commit.Change("hold", "2"), commit.Change("place", "1", nodes=("n1",), gpus=(("n1", 2),))]
    for failing in ("sinfo_error", "squeue_error", "scontrol_error"):
        setattr(fake, failing, "Unable to contact slurm controller (connect failure)")
        with pytest.raises(commit.CommitReadError, match="before the first change"):
            commit.apply(snap, planned, fake, confirm_seconds=0)
        setattr(fake, failing, None)
    assert fake.calls == []


def test_a_cycle_that_cannot_read_at_its_commit_is_one_failed_line_and_changes_nothing(monkeypatch) -> None:
    fake = FakeSlurm()
    fake.queue = [pending("1", 2)]
    real = commit.read_fresh

    def unreadable(snap, client):
        fake.sinfo_error = "Socket timed out on send/recv operation"
        return real(snap, client)

    monkeypatch.setattr(commit, "read_fresh", unreadable)
    stream = JsonLines()
    lines = stream.lines

    config = config_from_dict(NO_APPS)
    assert loop.run_loop(config, fake, "greedy", 0.001, budget=0, cycles=1, out=stream, sleep=lambda s: None) == 1
    assert lines[-1]["cycle"] == "failed" and "before the first change" in lines[-1]["error"], lines
    assert fake.calls == []


def test_one_unreadable_node_is_left_alone_and_the_others_are_committed() -> None:
    """The old `_free_gpus` parsed every node's gres after the holds and deletes: one odd node cost every app its
    reservations for an interval. Now only that node's changes are dropped, before any change."""
    fake = FakeSlurm(nodes=("n1", "n2"))
    fake.queue = [pending("1", 4), pending("2", 4)]
    snap = _snap(fake)
    planned = [
        _reserve(snap, "n1", 2),
        _reserve(snap, "n2", 2),
        commit.Change("place", "1", nodes=("n1",), gpus=(("n1", 4),)),
        commit.Change("place", "2", nodes=("n2",), gpus=(("n2", 4),)),
    ]
    fake.bad_gres = {"n2"}
    fake.set_nodes("1", ("n1",))
    done = commit.apply(snap, planned, fake, confirm_seconds=0)
    failed = {c.target: why for c, why in done.failed}
    assert set(failed) == {"n2", "2"}
    assert all("node n2 is left alone now" in why and "gres" in why for why in failed.values()), failed
    assert _held(fake, "n1") == 2 and _held(fake, "n2") == 0
    assert {j.id: j.state for j in fake.queue} == {"1": "RUNNING", "2": "PENDING"}


def test_a_node_drained_since_the_snapshot_is_left_alone() -> None:
    fake = FakeSlurm(nodes=("n1", "n2"))
    fake.queue = [pending("1", 4)]
    snap = _snap(fake, NO_APPS)
    fake.node_states = {"n1": "DRAIN+IDLE"}
    done = commit.apply(snap, [commit.Change("place", "1", nodes=("n1",), gpus=(("n1", 4),))], fake, confirm_seconds=0)
    assert done.failed and "node n1 is left alone now: state DRAIN+IDLE" in done.failed[0][1]
    assert fake.calls == []


def test_a_foreign_job_that_took_the_gpus_since_the_snapshot_stops_the_release() -> None:
    fake = FakeSlurm()
    fake.queue = [pending("1", 6)]
    snap = _snap(fake, NO_APPS)
    fake.queue.append(running("9", "n1", 0, 4, partition="batch"))  # between the snapshot and the commit
    done = commit.apply(snap, [commit.Change("place", "1", nodes=("n1",), gpus=(("n1", 6),))], fake, confirm_seconds=0)
    assert done.failed[0][1] == "not released: 4 GPUs of node n1 taken since the snapshot; the next cycle plans from it"
    assert fake.calls == []


def test_a_job_slurm_started_since_the_snapshot_makes_its_node_wait_a_cycle() -> None:
    """Found by the kill tests on the live cluster: a job released by a commit that was killed starts while the next
    cycle plans, on GPUs that plan gives to others. Its hold fails (it runs), and its node's starts and growths wait
    for the next cycle instead of overbooking it; the shrinks and the other nodes go ahead."""
    fake = FakeSlurm(nodes=("n1", "n2"))
    fake.queue = [pending("1", 4, held=False, required_nodes=("n1",)), pending("2", 4), pending("3", 4)]
    snap = _snap(fake)
    planned = [
        commit.Change("hold", "1"),
        _reserve(snap, "n1", 2),
        commit.Change("place", "2", nodes=("n1",), gpus=(("n1", 4),)),
        commit.Change("place", "3", nodes=("n2",), gpus=(("n2", 4),)),
    ]
    fake.set_nodes("1", ("n1",))
    fake.release("1")  # Slurm starts it now, between the snapshot and the commit
    fake.calls.clear()
    done = commit.apply(snap, planned, fake, confirm_seconds=0)
    failed = {c.target: why for c, why in done.failed}
    assert failed["1"].startswith("not held: Slurm started it since the snapshot")
    assert failed["n1"] == "not grown: 4 GPUs of node n1 taken since the snapshot; the next cycle plans from it"
    assert failed["2"].startswith("not released: 4 GPUs of node n1 taken")
    assert [c[:2] for c in fake.calls] == [("nodes", "3"), ("release", "3")]


def test_a_foreign_job_between_the_check_and_the_release_never_shares_a_gpu() -> None:
    """Slurm itself never starts a job on GPUs another holds: the release goes, the job cannot start, and the
    confirmation holds it again."""
    fake = FakeSlurm()
    fake.queue = [pending("1", 6)]
    snap = _snap(fake, NO_APPS)

    def foreign(change) -> None:
        if change == ("release", "1"):
            fake.queue.append(running("9", "n1", 0, 4, partition="batch"))

    fake.before_change = foreign
    done = commit.apply(snap, [commit.Change("place", "1", nodes=("n1",), gpus=(("n1", 6),))], fake, confirm_seconds=1)
    jobs = {j.id: j for j in fake.queue}
    assert jobs["1"].state == "PENDING" and jobs["1"].held
    assert "released but not started within 1 s; held again" in done.failed[0][1]
    assert sum(4 for j in jobs.values() if j.state == "RUNNING") <= fake.size


def test_jobs_that_moved_since_the_snapshot_are_skipped_not_failed() -> None:
    fake = FakeSlurm()
    fake.queue = [pending("1", 2, held=False), pending("2", 2), pending("3", 2, held=False)]
    snap = _snap(fake, NO_APPS)
    fake.queue = [j for j in fake.queue if j.id != "2"]  # cancelled
    fake.hold("3")  # held by someone else meanwhile
    fake.calls.clear()
    planned = [
        commit.Change("hold", "3"),
        commit.Change("place", "2", nodes=("n1",), gpus=(("n1", 2),)),
    ]
    done = commit.apply(snap, planned, fake, confirm_seconds=0)
    assert not done.failed and fake.calls == []
    assert {c.target: why for c, why in done.skipped} == {
        "3": "held already",
        "2": "it left the queue since the snapshot",
    }


# ----------------------------------------------------------------------------- reservations


def test_growing_on_a_full_node_adds_a_reservation_beside_the_old_one() -> None:
    """4 GPUs run, the app holds 2 and grows to 4: 4 GPUs' cores beside its 2 do not fit, 2 more do."""
    fake = FakeSlurm()
    fake.queue = [running("9", "n1", 0, 4, partition="batch")]
    fake.held_reservations = [core_reservation("gpualloc-chat.n1", "n1", 8)]
    snap = _snap(fake)
    done = commit.apply(snap, [_reserve(snap, "n1", 4)], fake, confirm_seconds=0)
    assert not done.failed and not done.above_plan
    assert [c[:2] for c in fake.calls] == [("create", "gpualloc-chat.n1~2")]
    assert _held(fake, "n1") == 4
    again = _snap(fake)  # the snapshot adds the pieces up, and the node is not "in a foreign reservation"
    assert again.app_now["chat"] == {"n1": 4} and "n1" in again.nodes
    assert [r.name for r in again.reservations["chat"]["n1"]] == ["gpualloc-chat.n1", "gpualloc-chat.n1~2"]


def test_growing_with_room_keeps_the_old_reservation_and_makes_the_difference_beside_it() -> None:
    """One transition for one app and for several: the reservations kept (a replica may run in them) stay."""
    fake = FakeSlurm()
    fake.held_reservations = [core_reservation("gpualloc-chat.n1", "n1", 8)]
    snap = _snap(fake)
    done = commit.apply(snap, [_reserve(snap, "n1", 4)], fake, confirm_seconds=0)
    assert not done.failed
    assert [c[:2] for c in fake.calls] == [("create", "gpualloc-chat.n1~2")]
    assert [(r.name, r.cores["n1"]) for r in fake.held_reservations] == [
        ("gpualloc-chat.n1", 8),
        ("gpualloc-chat.n1~2", 8),
    ]


def test_shrinking_deletes_whole_reservations_where_they_add_up_to_the_plan() -> None:
    fake = FakeSlurm()
    fake.held_reservations = [
        core_reservation("gpualloc-chat.n1", "n1", 8),
        core_reservation("gpualloc-chat.n1~2", "n1", 4),
    ]
    snap = _snap(fake)
    done = commit.apply(snap, [_reserve(snap, "n1", 2)], fake, confirm_seconds=0)
    assert not done.failed and [c[:2] for c in fake.calls] == [("delete", "gpualloc-chat.n1~2")]


def test_shrinking_with_room_makes_the_smaller_one_first() -> None:
    fake = FakeSlurm()
    fake.held_reservations = [core_reservation("gpualloc-chat.n1", "n1", 16)]
    snap = _snap(fake)
    done = commit.apply(snap, [_reserve(snap, "n1", 3)], fake, confirm_seconds=0)
    assert not done.failed and not done.above_plan and _creates_before_deletes(fake.calls)
    assert [(r.name, r.cores["n1"]) for r in fake.held_reservations] == [("gpualloc-chat.n1~2", 12)]


def test_shrinking_on_a_full_node_makes_the_smaller_reservation_over_its_own_cores_first() -> None:
    """4 GPUs run and the app holds 4: the node is full, 3 GPUs beside the 4 cannot be reserved. Slurm cannot
    shrink a core reservation; one of 3 is made over the app's own cores (Flags=OVERLAP), then the 4 go. The app
    never holds less than its plan, and no core is free in between."""
    fake = FakeSlurm()
    fake.queue = [running("9", "n1", 0, 4, partition="batch")]
    fake.held_reservations = [core_reservation("gpualloc-chat.n1", "n1", 16)]
    snap = _snap(fake)
    free_between: list[int] = []
    fake.before_change = lambda change: free_between.append(fake.free_cores("n1"))
    done = commit.apply(snap, [_reserve(snap, "n1", 3)], fake, confirm_seconds=0)
    assert not done.failed and not done.above_plan and _held(fake, "n1") == 3
    assert [c[:2] for c in fake.calls] == [("create", "gpualloc-chat.n1~2"), ("delete", "gpualloc-chat.n1")]
    assert fake.calls[0][-1] == "overlap" and free_between == [0, 0]
    assert done.calls == ["create gpualloc-chat.n1~2 (3 GPUs on n1 over its own)", "delete gpualloc-chat.n1"]


def test_a_reservation_in_use_is_reported_and_the_app_keeps_more_than_its_plan() -> None:
    fake = FakeSlurm()
    fake.held_reservations = [core_reservation("gpualloc-chat.n1", "n1", 16)]
    fake.in_use = {"gpualloc-chat.n1"}
    snap = _snap(fake)
    done = commit.apply(snap, [_reserve(snap, "n1", 2)], fake, confirm_seconds=0)
    (why,) = [w for _, w in done.failed]
    assert "delete gpualloc-chat.n1" in why and "in use" in why
    assert _held(fake, "n1") == 6  # the old 4 and the new 2: never below the plan
    assert done.above_plan["n1"].startswith("chat holds 6, the plan 2: delete gpualloc-chat.n1")


def test_owned_jobs_outside_the_plan_are_held_and_say_why() -> None:
    """Released by a commit that died, then outside the plan (a dependency): held, never left released for Slurm
    to start outside any plan. A held one is left as it is; a job of another partition too. A released job that no
    cycle can ever plan (no time limit) is not held: it is Slurm's."""
    fake = FakeSlurm()
    fake.queue = [
        pending("1", 2, held=False, dependency="afterok:7"),
        replace(pending("2", 2, held=False), time_limit=None),
        pending("3", 2, held=True, dependency="afterok:7"),
        pending("4", 2, held=False, partition="cpu", comment="gpualloc"),
    ]
    config = config_from_dict({**NO_APPS, "owned": {"partitions": ["gpu"], "comment_tag": "gpualloc"}})
    result = loop.cycle(config, fake, "greedy", now=NOW, confirm_seconds=0)
    assert [c.summary() for c in result.changes] == ["hold 1"]
    assert fake.calls == [("hold", "1")] and not result.commit.failed
    held = {line["job"]: line["why"] for line in result.lines if line.get("action") == "hold"}
    assert held == {
        "1": "outside the plan: has a dependency (afterok:7); the allocator cannot tell when it becomes eligible",
        "3": "outside the plan: has a dependency (afterok:7); the allocator cannot tell when it becomes eligible",
    }
    left = {line["job"]: line["why"] for line in result.lines if line.get("action") == "leave"}
    assert left == {"2": "left to Slurm, never planned: has no time limit; the allocator plans only jobs with one "
                    "(sbatch --time)"}  # fmt: skip
    assert {"left_alone": "job 4", "why": "partition 'cpu' is not a GPU partition of slurm.partitions"} in result.lines


def test_a_job_no_cycle_can_ever_plan_is_left_to_slurm_not_held_for_ever() -> None:
    """Held jobs that no cycle can plan (GPUs per task, no time limit, more GPUs than every GPU node holds, another
    gres) are released to Slurm once, each with one line saying why; a job too big only for the nodes usable now
    (one drained) stays held, as does one with a dependency. The next cycle changes nothing."""
    fake = FakeSlurm(nodes=("n1", "n2"))
    fake.node_states = {"n2": "DRAIN"}
    fake.queue = [
        pending("1", 1, tres_other="gres:gpu:1"),
        replace(pending("2", 2), time_limit=None),
        replace(pending("3", 0), tres_per_node="", tres_per_job="gres:gpu:24"),
        replace(pending("4", 0), tres_per_node="", tres_per_job="gres:gpu:16"),
        replace(pending("5", 0), tres_per_node="gres:fpga:1"),
        pending("6", 2, dependency="afterok:7"),
        pending("7", 2),
    ]
    result = loop.cycle(config_from_dict(NO_APPS), fake, "greedy", now=NOW, confirm_seconds=0)
    assert [c.summary() for c in result.changes] == ["place 7", "leave 1", "leave 2", "leave 3", "leave 5"]
    assert [c for c in fake.calls if c[0] != "nodes"] == [("release", j) for j in ("7", "1", "2", "3", "5")]
    assert not result.commit.failed
    left = {line["job"]: line["why"] for line in result.lines if line.get("action") == "leave"}
    assert left == {
        "1": "left to Slurm, never planned: asks GPUs per task or socket (gres:gpu:1); only --gres and --gpus are read",
        "2": "left to Slurm, never planned: has no time limit; the allocator plans only jobs with one (sbatch --time)",
        "3": "left to Slurm, never planned: asks 24 GPUs; the partitions' GPU nodes hold 16",
        "5": "left to Slurm, never planned: asks for gres 'fpga', which the allocator does not know",
    }
    held = {line["job"] for line in result.lines if line.get("action") == "hold"}
    assert held == {"4", "6"}  # 16 GPUs fit once n2 is back; the dependency may be met
    fake.calls.clear()
    again = loop.cycle(config_from_dict(NO_APPS), fake, "greedy", now=NOW, confirm_seconds=0)
    assert again.changes == [] and fake.calls == []


def test_an_expiring_reservation_is_renewed_in_place() -> None:
    fake = FakeSlurm()
    soon = replace(core_reservation("gpualloc-chat.n1", "n1", 8), end_time=int(NOW + 600))  # 10 min of a 60-min slot
    fake.held_reservations = [soon]
    config = config_from_dict({**CONFIG, "realtime": [{**CONFIG["realtime"][0], "demand": [2] * 24}]})
    result = loop.cycle(config, fake, "greedy", now=NOW, confirm_seconds=0)
    assert [c.summary() for c in result.changes] == ["reserve n1 chat 2->2 (renew)"]
    assert fake.calls == [("renew", "gpualloc-chat.n1")] and not result.commit.failed


def test_a_reservation_changed_since_the_snapshot_is_left_to_the_next_cycle() -> None:
    fake = FakeSlurm()
    snap = _snap(fake)
    fake.held_reservations = [core_reservation("gpualloc-chat.n1", "n1", 8)]  # made by hand meanwhile
    done = commit.apply(snap, [_reserve(snap, "n1", 2)], fake, confirm_seconds=0)
    assert "changed since the snapshot (none then, gpualloc-chat.n1 2 now)" in done.failed[0][1]
    assert fake.calls == []


# ----------------------------------------------------------------------------- answers lost, not retried blindly


def test_a_create_whose_answer_is_lost_is_read_back_not_made_twice() -> None:
    fake = FakeSlurm()
    snap = _snap(fake)
    fake.faults = {("create", "gpualloc-chat.n1"): LOST}
    done = commit.apply(snap, [_reserve(snap, "n1", 2)], fake, confirm_seconds=0)
    assert not done.failed and [c[0] for c in fake.calls] == ["create"]
    assert done.confirmed and "read back: made" in done.confirmed[0]


def test_a_delete_whose_answer_is_lost_is_read_back() -> None:
    fake = FakeSlurm()
    fake.held_reservations = [core_reservation("gpualloc-chat.n1", "n1", 8)]
    snap = _snap(fake)
    fake.faults = {("delete", "gpualloc-chat.n1"): LOST}
    done = commit.apply(snap, [_reserve(snap, "n1", 0)], fake, confirm_seconds=0)
    assert not done.failed and fake.held_reservations == [] and len(done.confirmed) == 1


def test_a_create_that_got_no_answer_and_was_not_made_is_tried_again() -> None:
    fake = FakeSlurm()
    snap = _snap(fake)
    fake.faults = {("create", "gpualloc-chat.n1"): UNANSWERED}
    slept: list[float] = []
    done = commit.apply(snap, [_reserve(snap, "n1", 2)], fake, confirm_seconds=0, sleep=slept.append)
    assert not done.failed and _held(fake, "n1") == 2 and slept == [commit.RETRY_DELAY]


def test_a_refusal_is_not_tried_again() -> None:
    fake = FakeSlurm()
    snap = _snap(fake)
    fake.faults = {("create", "gpualloc-chat.n1"): "Invalid user id"}
    done = commit.apply(snap, [_reserve(snap, "n1", 2)], fake, confirm_seconds=0, sleep=lambda s: None)
    assert "Invalid user id" in done.failed[0][1] and fake.calls == []


def test_a_lost_answer_whose_read_back_fails_too_is_unknown_and_not_retried(monkeypatch) -> None:
    fake = FakeSlurm()
    snap = _snap(fake)
    fake.faults = {("create", "gpualloc-chat.n1"): UNANSWERED}
    real = fake.create_reservation

    def create_then_lose_scontrol(*args):
        fake.scontrol_error = "Unable to contact slurm controller"
        real(*args)

    monkeypatch.setattr(fake, "create_reservation", create_then_lose_scontrol)
    done = commit.apply(snap, [_reserve(snap, "n1", 2)], fake, confirm_seconds=0, sleep=lambda s: None)
    assert "unknown whether it was made" in done.failed[0][1] and fake.calls == []


def test_a_release_whose_answer_is_lost_counts_as_made() -> None:
    fake = FakeSlurm()
    fake.queue = [pending("1", 2)]
    snap = _snap(fake, NO_APPS)
    fake.faults = {("release", "1"): LOST}
    done = commit.apply(snap, [commit.Change("place", "1", nodes=("n1",), gpus=(("n1", 2),))], fake, confirm_seconds=1)
    assert not done.failed and [c[0] for c in fake.calls] == ["nodes", "release"]
    assert {j.id: j.state for j in fake.queue} == {"1": "RUNNING"} and done.confirmed


# ----------------------------------------------------------------------------- the confirmation


def _released(fake: FakeSlurm) -> tuple[snapshot.Snapshot, list[commit.Change]]:
    fake.queue = [pending("1", 2)]
    fake.start_released = False
    return _snap(fake, NO_APPS), [commit.Change("place", "1", nodes=("n1",), gpus=(("n1", 2),))]


class _Clock:
    """Moves by what is slept: the confirmation's wait without a wall clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.01)


def test_squeue_unreadable_through_the_confirmation_holds_nothing_again() -> None:
    fake = FakeSlurm()
    snap, planned = _released(fake)
    clock = _Clock()
    real = fake.release

    def release_then_lose_squeue(job: str) -> None:
        real(job)
        fake.squeue_error = "Socket timed out on send/recv operation"

    fake.release = release_then_lose_squeue
    done = commit.apply(snap, planned, fake, confirm_seconds=5, sleep=clock.sleep, clock=clock)
    (why,) = [w for _, w in done.failed]
    assert "whether it started is unknown" in why and "left as it is" in why
    assert ("hold", "1") not in fake.calls


def test_a_job_still_pending_after_the_wait_is_held_again_and_failed_reads_are_counted() -> None:
    fake = FakeSlurm()
    snap, planned = _released(fake)
    clock = _Clock()
    reads = {"n": 0, "queue": 0}
    real, whole = fake.pending_jobs, fake.jobs

    def flaky(jobs) -> set[str]:
        reads["n"] += 1
        if reads["n"] <= 3:  # three of the wait's reads of the released jobs fail
            raise SlurmError("squeue --jobs=1: failed 3 times: Socket timed out")
        return real(jobs)

    def counted() -> list:
        reads["queue"] += 1
        return whole()

    fake.pending_jobs, fake.jobs = flaky, counted
    done = commit.apply(snap, planned, fake, confirm_seconds=2, sleep=clock.sleep, clock=clock)
    (why,) = [w for _, w in done.failed]
    assert why.startswith("released but not started within 2 s (3 reads of squeue failed meanwhile); held again")
    assert fake.calls[-1] == ("hold", "1")
    # The wait read the released job alone; the whole queue twice: the commit's read first, the verdict after.
    assert reads["n"] > 3 and reads["queue"] == 2


def test_a_job_released_before_the_cycle_that_has_not_started_is_waited_for_and_held_again() -> None:
    """Found by the kill tests on the live cluster: a commit killed after a release leaves the job released and
    pending. The next cycle's plan starts it on the same nodes, so there is nothing to change; it is still waited
    for like the jobs this commit releases, and held again when it does not start (a cycle never leaves an owned
    job released and pending)."""
    fake = FakeSlurm()
    fake.queue = [pending("1", 2, held=False, required_nodes=("n1",))]
    fake.start_released = False
    result = loop.cycle(config_from_dict(NO_APPS), fake, "greedy", dry_run=True)
    assert [(c.kind, c.target, c.nodes) for c in result.changes] == [("confirm", "1", ("n1",))]
    snap = _snap(fake, NO_APPS)
    clock = _Clock()
    done = commit.apply(snap, list(result.changes), fake, confirm_seconds=2, sleep=clock.sleep, clock=clock)
    (why,) = [w for _, w in done.failed]
    assert why == "released but not started within 2 s; held again"
    assert fake.calls == [("hold", "1")]  # nothing set or released: only held again


def test_a_released_job_that_starts_meanwhile_is_only_waited_for() -> None:
    fake = FakeSlurm()
    fake.queue = [pending("1", 2, held=False, required_nodes=("n1",))]
    snap = _snap(fake, NO_APPS)
    planned = [commit.Change("confirm", "1", nodes=("n1",), gpus=(("n1", 2),))]
    real = fake.pending_jobs

    def starts_on_the_first_poll(jobs) -> set[str]:
        fake._node_list["1"] = ("n1",)
        fake._release("1")  # Slurm's scheduler starts it
        return real(jobs)

    fake.pending_jobs = starts_on_the_first_poll
    clock = _Clock()
    done = commit.apply(snap, planned, fake, confirm_seconds=2, sleep=clock.sleep, clock=clock)
    assert not done.failed and [c.kind for c in done.done] == ["confirm"]
    assert {j.id: j.state for j in fake.queue} == {"1": "RUNNING"}
    assert ("hold", "1") not in fake.calls and ("nodes", "1", ("n1",)) not in fake.calls


def test_a_released_job_that_cannot_start_as_planned_is_held_at_once() -> None:
    fake = FakeSlurm()
    fake.queue = [pending("1", 2, held=False, required_nodes=("n1",))]
    fake.start_released = False
    snap = _snap(fake, NO_APPS)
    planned = [commit.Change("confirm", "1", nodes=("n1",), gpus=(("n1", 2),))]
    fake.queue.append(running("9", "n1", 0, 8, partition="batch"))  # n1 filled since the snapshot
    done = commit.apply(snap, planned, fake, confirm_seconds=2, sleep=_Clock().sleep, clock=_Clock())
    assert [(c.kind, c.target) for c in done.done] == [("hold", "1")] and fake.calls == [("hold", "1")]


# ----------------------------------------------------------------------------- one writer


def test_a_second_writer_is_refused_with_the_holders_line(tmp_path: Path) -> None:
    path = tmp_path / "state" / WRITER
    with Lock(path, "gpualloc slurm run"):
        with pytest.raises(
            BusyError, match=r"another writer holds .*writer.lock \(pid \d+, gpualloc slurm run, since "
        ):
            Lock(path, "gpualloc slurm cycle").acquire()
    with Lock(path, "gpualloc slurm cycle"):  # free again
        assert f"pid {os.getpid()}, gpualloc slurm cycle" in path.read_text()
    assert path.read_text() == ""


def test_a_second_writer_waits_then_refuses(tmp_path: Path) -> None:
    path = tmp_path / WRITER
    clock = _Clock()
    said: list[str] = []
    with Lock(path, "gpualloc slurm run"):
        waiting = Lock(path, "gpualloc slurm cycle", wait=3, on_wait=said.append, sleep=clock.sleep, clock=clock)
        with pytest.raises(BusyError, match=r"; waited 3 s$"):
            waiting.acquire()
    assert len(said) == 1 and "gpualloc slurm run" in said[0] and clock.now >= 3


def test_a_waiting_writer_goes_on_once_the_holder_lets_go(tmp_path: Path) -> None:
    path = tmp_path / WRITER
    holder = Lock(path, "gpualloc slurm run")
    holder.acquire()
    sleeps = {"n": 0}

    def sleep(_seconds: float) -> None:
        sleeps["n"] += 1
        if sleeps["n"] == 2:
            holder.release()  # the other writer's commit ends while this one waits

    clock = _Clock()
    with Lock(path, "gpualloc slurm cycle", wait=1e9, sleep=sleep, clock=clock):
        assert "gpualloc slurm cycle" in path.read_text()
    assert sleeps["n"] == 2


def _cli(tmp_path: Path, monkeypatch, fake: FakeSlurm, *argv: str) -> int:
    import yaml

    from agents.cli import main
    from agents.slurm import client

    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump({**NO_APPS, "slurm": {**NO_APPS["slurm"], "state_dir": str(tmp_path / "state")}}))
    monkeypatch.setattr(client, "SlurmClient", lambda **_kwargs: fake)
    return main(["slurm", argv[0], "--config", str(path), *argv[1:]])


def test_the_cli_refuses_a_second_writer_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    fake = FakeSlurm()
    fake.queue = [pending("1", 2)]
    state = tmp_path / "state"
    with Lock(state / WRITER, "gpualloc slurm run"):
        assert _cli(tmp_path, monkeypatch, fake, "cycle", "--wait", "0") == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "another writer holds" in err[0] and err[0].endswith("(nothing changed)"), err
        assert fake.calls == [] and fake.polls == 0  # refused before the snapshot
        assert _cli(tmp_path, monkeypatch, fake, "cycle", "--dry-run") == 0  # reading needs no lock
        capsys.readouterr()
    with Lock(state / RUN, "gpualloc slurm run"):
        assert _cli(tmp_path, monkeypatch, fake, "run", "--every", "60", "--cycles", "1", "--budget", "0") == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "run.lock" in err[0] and "gpualloc slurm run" in err[0], err
    assert fake.calls == []
    assert _cli(tmp_path, monkeypatch, fake, "cycle") == 0 and fake.calls  # alone, it commits


def test_the_lock_is_an_flock_that_another_process_sees(tmp_path: Path) -> None:
    """What a second process meets: the kernel's lock on the file (and it goes with the process)."""
    path = tmp_path / WRITER
    with Lock(path, "gpualloc slurm run"):
        fd = os.open(path, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)


# ----------------------------------------------------------------------------- the budget


def test_the_loop_with_a_budget_plans_full_seeded_by_its_scheduler() -> None:
    from agents.options import PlanOptions
    from tests.conftest import HANG_GUARD_S

    fake = FakeSlurm()
    fake.queue = [pending("1", 4), pending("2", 8)]
    stream = JsonLines()
    lines = stream.lines

    options = PlanOptions(deterministic_time=0.01)  # CP-SAT's work is bounded; the wall budget is far away
    config = config_from_dict(CONFIG)
    failed = loop.run_loop(
        config, fake, "greedy", 60, options, budget=HANG_GUARD_S, cycles=1, out=stream, sleep=lambda s: None
    )
    summary = lines[-1]
    assert failed == 0 and summary["scheduler"] == "full" and summary["hint"] == "greedy", summary
    assert summary["status"] in ("optimal", "feasible")
