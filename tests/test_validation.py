"""The validator: one test per rule that a plan breaks, and all violations listed."""

from __future__ import annotations

from gpu_env.plan import Placement, Plan
from gpu_env.rules import Rule
from gpu_env.validation import validate
from tests.conftest import make_job, make_scenario, two_node_day


def scenario():
    # G=4 in nodes of 2, T=6; one app; a running job on GPU 3; three pending jobs.
    return two_node_day(
        [1, 1, 1, 1, 1, 1],
        make_job("a", 2, 3, release=1, deadline=5),
        make_job("b", 1, 2, type="quantization"),
        make_job("big", 4, 1),
    )


RT = {"rt": [1, 1, 1, 1, 1, 1]}
GOOD = [Placement("run", 0, (3,)), Placement("a", 1, (0, 1)), Placement("b", 4, (2,))]


def rules_broken(placements, realtime=RT):
    return [v.rule for v in validate(scenario(), Plan("tiny", "t", placements, realtime))]


def test_good_plan_is_valid():
    assert rules_broken(GOOD) == []


def test_rule1_two_jobs_on_one_gpu():
    plan = [*GOOD[:2], Placement("b", 2, (1,))]  # b on GPU 1 in slots 2-3, where a runs
    assert Rule.ONE_JOB_PER_GPU in rules_broken(plan)


def test_rule1_holds_past_the_horizon():
    s = make_scenario(horizon={"slots": 3}, jobs=[make_job("x", 1, 5), make_job("y", 1, 2)])
    # x runs 0-4 (past T = 3), y runs 2-3: one clash reported, at its first cell.
    plan = Plan("tiny", "t", [Placement("x", 0, (0,)), Placement("y", 2, (0,))], {})
    messages = [str(v) for v in validate(s, plan)]
    assert len(messages) == 1 and "GPU 0 in slot 2" in messages[0]


def test_rule2_placed_twice_or_with_the_wrong_size():
    assert Rule.NO_PREEMPTION in rules_broken([*GOOD, Placement("b", 4, (2,))])
    assert Rule.NO_PREEMPTION in rules_broken([*GOOD[:2], Placement("b", 0, (1, 2))])


def test_rule3_release_horizon_deadline():
    assert rules_broken([GOOD[0], Placement("a", 0, (0, 1)), GOOD[2]]) == [Rule.RELEASE_HORIZON_DEADLINE]
    # a would end at 3 + 3 = 6 > deadline 5.
    assert rules_broken([GOOD[0], Placement("a", 3, (0, 1)), GOOD[2]]) == [Rule.RELEASE_HORIZON_DEADLINE]
    # b starts at slot 6 = T.
    assert rules_broken([*GOOD[:2], Placement("b", 6, (2,))]) == [Rule.RELEASE_HORIZON_DEADLINE]


def test_rule4_blocks_contiguous_and_inside_a_node():
    assert rules_broken([GOOD[0], Placement("a", 1, (1, 2)), GOOD[2]]) == [Rule.CONTIGUOUS_BLOCK]  # spans nodes
    assert Rule.CONTIGUOUS_BLOCK in rules_broken([GOOD[0], Placement("a", 1, (0, 2)), Placement("b", 0, (1,))])
    # A 4-GPU job (> node_size 2) must start on a node boundary: 0..3 is fine in a slot with room.
    s = scenario()
    plan = Plan("tiny", "t", [GOOD[0], Placement("big", 5, (0, 1, 2, 3))], RT)
    assert Rule.CONTIGUOUS_BLOCK not in [v.rule for v in validate(s, plan)]


def test_rule5_inherited_work_held():
    assert rules_broken(GOOD[1:]) == [Rule.INHERITED_HELD]
    assert Rule.INHERITED_HELD in rules_broken([Placement("run", 1, (3,)), *GOOD[1:]])
    assert Rule.INHERITED_HELD in rules_broken([Placement("run", 0, (2,)), GOOD[1], Placement("b", 0, (0,))])


def test_rule6_ramp():
    # 1 -> 3 and 3 -> 1 both move by 2 > R = 1; slot 2 then also holds a's 2 GPUs + 3 real-time > 4.
    assert rules_broken(GOOD, {"rt": [1, 1, 3, 1, 1, 1]}) == [Rule.REALTIME_RAMP, Rule.REALTIME_RAMP, Rule.CAPACITY]
    assert rules_broken(GOOD, {"rt": [1, 1, 1, 1, 1, 3]}) == [Rule.REALTIME_RAMP]  # 1 -> 3 in the last slot


def test_rule7_capacity():
    # b moved to slot 1: run (1) + a (2) + b (1) + rt 1 = 5 > 4 in slot 1 only.
    assert rules_broken([*GOOD[:2], Placement("b", 1, (2,))]) == [Rule.CAPACITY]


def test_plan_format_unknown_names_and_lengths():
    assert rules_broken([*GOOD, Placement("ghost", 0, (0,))]) == [Rule.PLAN_FORMAT]
    assert rules_broken(GOOD, {}) == [Rule.PLAN_FORMAT]
    assert rules_broken(GOOD, {"rt": [1, 1]}) == [Rule.PLAN_FORMAT]
    assert rules_broken(GOOD, {**RT, "other": [0] * 6}) == [Rule.PLAN_FORMAT]


def test_every_violation_listed_not_only_the_first():
    plan = [
        Placement("run", 1, (3,)),  # rule 5
        Placement("a", 0, (1, 2)),  # rules 3 and 4
        Placement("b", 0, (1,)),  # rule 1 with a on GPU 1
    ]
    # rt jumps 1 -> 4 -> 1 (rule 6 twice); slots 0 and 1 then hold 7 and 5 GPUs (rule 7 twice).
    broken = rules_broken(plan, {"rt": [4, 1, 1, 1, 1, 1]})
    assert broken == [
        Rule.ONE_JOB_PER_GPU,
        Rule.RELEASE_HORIZON_DEADLINE,
        Rule.CONTIGUOUS_BLOCK,
        Rule.INHERITED_HELD,
        Rule.REALTIME_RAMP,
        Rule.REALTIME_RAMP,
        Rule.CAPACITY,
        Rule.CAPACITY,
    ]
