"""Apps that share a node, on the fake Slurm: they grow, shrink and swap GPUs there without a failed change.

Slurm 22.05 cannot resize a core reservation, and ``Flags=OVERLAP`` takes the lowest cores no running job holds,
whoever's reservation they are in. So where several apps hold or want GPUs on a node, their reservations there
are changed together (:func:`agents.slurm.commit.share`): kept where they add up, made beside where there is room,
else one reservation of the plan's total made over the apps' own cores and named by each app's part. After every
change (a refused one too), each app holds at least the smaller of before and its plan, and no core is free
that the plan keeps for an app. The fake counts cores as Slurm does (4 per GPU, 8 GPUs a node).
"""

from __future__ import annotations

import pytest

from agents.slurm import loop, snapshot
from agents.slurm.config import config_from_dict
from tests.slurm_helpers import NOW, FakeSlurm, core_reservation, pending, running


def _config(*apps: tuple[str, int]) -> dict:
    return {
        "slurm": {"partitions": ["gpu"], "cpus_per_gpu": 4},
        "owned": {"partitions": ["gpu"]},
        "horizon": {"slots": 24, "slot_minutes": 60},
        "workloads": {"default_type": "training"},
        "realtime": [{"name": n, "demand": [d] * 24, "ramp": 2, "penalty": 50} for n, d in apps],
    }


def _held(fake: FakeSlurm, config, node: str = "n1") -> dict[str, int]:
    """GPUs each app's reservations on ``node`` hold, as the snapshot reads them from the names and cores."""
    out: dict[str, int] = {}
    for r in fake.held_reservations:
        for app, g in snapshot.split_of(config, r, node).items():
            out[app] = out.get(app, 0) + g
    return out


def _watch(fake: FakeSlurm, config) -> list[tuple[dict[str, int], int]]:
    """After every change: each app's GPUs on n1 and the free cores there."""
    seen: list[tuple[dict[str, int], int]] = []
    fake.before_change = lambda change: seen.append((_held(fake, config), fake.free_cores("n1")))
    return seen


def _cycle(fake: FakeSlurm, config):
    result = loop.cycle(config, fake, "greedy", now=NOW, confirm_seconds=0)
    fake.before_change = None
    return result


@pytest.mark.parametrize("before", [{"a": 3, "b": 2}, {"a": 3, "b": 2, "c": 0}])
def test_an_app_shrinks_beside_another_on_a_full_node_and_a_planned_job_starts(before: dict[str, int]) -> None:
    """3 GPUs run, app a holds 3, app b 2: the node is full. a's forecast drops to 2 and a 1-GPU job is planned
    beside them: one reservation of 4 (a 2, b 2) is made over their cores, the old go, the job starts."""
    config = config_from_dict(_config(("a", 2), ("b", 2), *((("c", 0),) if "c" in before else ())))
    fake = FakeSlurm()
    fake.queue = [running("9", "n1", 0, 3, partition="batch"), pending("1", 1)]
    fake.held_reservations = [core_reservation("gpualloc-a.n1", "n1", 12), core_reservation("gpualloc-b.n1", "n1", 8)]
    seen = _watch(fake, config)
    result = _cycle(fake, config)
    assert not result.commit.failed and not result.commit.above_plan, result.commit.failed
    assert [c.summary() for c in result.changes] == ["reserve n1 a 3->2, b 2->2", "place 1"]
    assert [c[:2] for c in fake.calls if c[0] != "nodes"] == [
        ("create", "gpualloc-a:2+b:2.n1"),
        ("delete", "gpualloc-a.n1"),
        ("delete", "gpualloc-b.n1"),
        ("release", "1"),
    ]
    assert ("create", "gpualloc-a:2+b:2.n1", (("n1", 16),), "overlap") in fake.calls
    assert _held(fake, config) == {"a": 2, "b": 2}
    assert next(j for j in fake.queue if j.id == "1").state == "RUNNING"
    for held, free in seen:  # never below the plan, and no core free but the planned job's 1 GPU's
        assert held.get("a", 0) >= 2 and held.get("b", 0) >= 2 and free <= 4, seen
    again = _snap_apps(fake, config)
    assert again == {"a": {"n1": 2}, "b": {"n1": 2}, **({"c": {}} if "c" in before else {})}
    assert _cycle(fake, config).changes == []  # the next cycle reads the shared one back: nothing to change


def _snap_apps(fake: FakeSlurm, config) -> dict[str, dict[str, int]]:
    return snapshot.take(fake, config, NOW).app_now


def test_two_apps_swap_gpus_on_a_full_node_and_no_core_is_ever_free() -> None:
    """a 3 -> 1 and b 2 -> 4 on a full node (ramp 2): the total stays 5, so no core may be free at any point."""
    config = config_from_dict(_config(("a", 1), ("b", 4)))
    fake = FakeSlurm()
    fake.queue = [running("9", "n1", 0, 3, partition="batch")]
    fake.held_reservations = [core_reservation("gpualloc-a.n1", "n1", 12), core_reservation("gpualloc-b.n1", "n1", 8)]
    seen = _watch(fake, config)
    result = _cycle(fake, config)
    assert not result.commit.failed and not result.commit.above_plan
    assert _held(fake, config) == {"a": 1, "b": 4} and fake.free_cores("n1") == 0
    for held, free in seen:
        assert held.get("a", 0) >= 1 and held.get("b", 0) >= 2 and free == 0, seen
    assert [r.name for r in fake.held_reservations] == ["gpualloc-a:1+b:4.n1"]


def test_three_apps_on_one_full_node_grow_shrink_and_swap_over_cycles() -> None:
    """Three apps and a 2-GPU job fill one node; their forecasts move every cycle. No cycle fails, each app holds
    its plan after each, and no change leaves a core free that an app's plan keeps."""
    fake = FakeSlurm()
    fake.queue = [running("9", "n1", 0, 2, partition="batch")]
    fake.held_reservations = [
        core_reservation("gpualloc-a.n1", "n1", 8),
        core_reservation("gpualloc-b.n1", "n1", 8),
        core_reservation("gpualloc-c.n1", "n1", 8),
    ]
    for demand in [(1, 2, 3), (2, 2, 2), (3, 1, 2), (1, 3, 1), (2, 2, 2), (0, 4, 2)]:
        config = config_from_dict(_config(("a", demand[0]), ("b", demand[1]), ("c", demand[2])))
        before = _held(fake, config)
        seen = _watch(fake, config)
        result = _cycle(fake, config)
        assert not result.commit.failed and not result.commit.above_plan, (demand, result.commit.failed)
        plan = result.decision.app_gpus_now
        assert _held(fake, config) == {a: g for a, g in plan.items() if g}, (demand, fake.held_reservations)
        for held, _free in seen:
            for app in plan:
                assert held.get(app, 0) >= min(before.get(app, 0), plan[app]), (demand, seen)
        assert fake.free_cores("n1") == 4 * (8 - 2 - sum(plan.values()))


def test_apps_with_room_grow_by_reservations_of_their_own_beside() -> None:
    """On a node with room, each app's growth is a reservation of its own beside what it keeps (no OVERLAP)."""
    config = config_from_dict(_config(("a", 3), ("b", 3)))
    fake = FakeSlurm()
    fake.held_reservations = [core_reservation("gpualloc-a.n1", "n1", 4), core_reservation("gpualloc-b.n1", "n1", 4)]
    result = _cycle(fake, config)
    assert not result.commit.failed
    assert [c[:2] for c in fake.calls] == [("create", "gpualloc-a.n1~2"), ("create", "gpualloc-b.n1~2")]
    assert not any("overlap" in c for c in fake.calls)
    assert _held(fake, config) == {"a": 3, "b": 3}


def test_a_shared_reservation_goes_back_to_an_apps_own_once_the_other_leaves() -> None:
    """a 2 and b 2 share one reservation; b's forecast drops to 0: a keeps 2 in a reservation of its own, made
    beside (room) before the shared one goes."""
    config = config_from_dict(_config(("a", 2), ("b", 0)))
    fake = FakeSlurm()
    fake.held_reservations = [core_reservation("gpualloc-a:2+b:2.n1", "n1", 16)]
    assert _snap_apps(fake, config) == {"a": {"n1": 2}, "b": {"n1": 2}}
    result = _cycle(fake, config)
    assert not result.commit.failed
    assert [c[:2] for c in fake.calls] == [("create", "gpualloc-a.n1"), ("delete", "gpualloc-a:2+b:2.n1")]
    assert _held(fake, config) == {"a": 2}


def test_a_shared_reservation_in_use_keeps_the_apps_above_their_plan_and_says_so() -> None:
    config = config_from_dict(_config(("a", 1), ("b", 2)))
    fake = FakeSlurm()
    fake.queue = [running("9", "n1", 0, 3, partition="batch")]
    fake.held_reservations = [core_reservation("gpualloc-a:3+b:2.n1", "n1", 20)]
    fake.in_use = {"gpualloc-a:3+b:2.n1"}
    result = _cycle(fake, config)
    assert result.commit.above_plan["n1"].startswith(
        "a holds 4, the plan 1; b holds 4, the plan 2: delete gpualloc-a:3+b"
    )
    assert _held(fake, config) == {"a": 4, "b": 4}  # the old and the new: never below the plan


def test_shared_names_are_read_strictly() -> None:
    """Only names of configured apps with whole counts, two apps or more, are shared reservations."""
    config = config_from_dict(_config(("a", 1), ("b", 2)))
    assert config.shared_of("gpualloc-a:1+b:2.n1", "n1") == ({"a": 1, "b": 2}, 1)
    assert config.shared_of("gpualloc-a:1+b:2.n1~3", "n1") == ({"a": 1, "b": 2}, 3)
    for name in ("gpualloc-a:1.n1", "gpualloc-a:1+x:2.n1", "gpualloc-a:01+b:2.n1", "gpualloc-a:1+a:2.n1",
                 "gpualloc-a:1+b:2.n2", "other-a:1+b:2.n1", "gpualloc-a:1+b:.n1"):  # fmt: skip
        assert config.shared_of(name, "n1") is None, name
