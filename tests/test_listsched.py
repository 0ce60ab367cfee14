"""The compiled list-scheduling decoder: placement by placement against greedy's sweep, valid plans, a hand-worked
case, promotion, plain Python against compiled, and its input checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents import greedy
from gpu_env import listsched
from gpu_env.generators import FAMILIES, generate
from gpu_env.listsched import MODE_AFTER, MODE_INLINE, MODE_OFF, MODES, Decoded, ListInstance, decode
from gpu_env.metrics import compute_metrics
from gpu_env.scenario import Scenario
from gpu_env.validation import validate
from tests.conftest import HANG_GUARD_S, make_scenario

ROOT = Path(__file__).resolve().parents[1]
SIZES = (8, 16, 24, 32)


def quiet(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])


SMALL_CASES = {
    "family": st.sampled_from(sorted(FAMILIES)),
    "seed": st.integers(0, 10_000),
    "gpus": st.sampled_from((*SIZES, 12)),
    "data": st.data(),
}
"""A small scenario of any family (:func:`small`) and a draw of the test's own choices."""


def small(family: str, seed: int, gpus: int) -> Scenario:
    """A family's scenario at a small size (a node of 6 GPUs for ``gpus=12``: nodes that do not tile 64)."""
    if gpus == 12:
        return generate(replace(FAMILIES[family], gpus=12, node_size=6), seed)
    return generate(family, seed, gpus=gpus)


def pending(sc: Scenario) -> list[int]:
    return [i for i, job in enumerate(sc.jobs) if job.running_on is None]


def per_job(data: st.DataObject, inst: ListInstance, values: st.SearchStrategy[int]) -> np.ndarray:
    """One value drawn from ``values`` per job of the instance."""
    n = inst.k.size
    return np.array(data.draw(st.lists(values, min_size=n, max_size=n)), dtype=np.int64)


def three_orders(sc: Scenario, seed: int) -> np.ndarray:
    """Three random orders of the pending jobs (three empty ones where none is pending)."""
    rng = np.random.default_rng(seed)
    return np.array([rng.permutation(pending(sc)) for _ in range(3)]) if pending(sc) else np.zeros((3, 0), int)


def placements(dec: Decoded, i: int) -> dict[int, tuple[int, int]]:
    """Row i of a decode as job -> (start, first GPU), inherited jobs included."""
    return {j: (int(dec.start[i, j]), int(dec.first[i, j])) for j in range(dec.start.shape[1]) if dec.start[i, j] >= 0}


def assert_valid_rows(sc: Scenario, dec: Decoded) -> None:
    for i in range(dec.objective.size):
        plan = dec.plan(i, sc, "list")
        assert validate(sc, plan) == []
        assert dec.objective[i] == pytest.approx(compute_metrics(sc, plan).objective, rel=1e-6, abs=1e-6)


# Placement by placement against greedy's Python sweep as it was: tests/test_greedy_reference.py (recorded sweeps of
# random orders in every mode, and greedy's whole search, which is this decoder now).


# ----------------------------------------------------------------------------- every plan is valid


@quiet(40)
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    seed=st.integers(0, 10_000),
    gpus=st.sampled_from((*SIZES, 12)),
    rounds=st.sampled_from((0, 2)),
    data=st.data(),
)
def test_decoded_plans_validate_and_score_as_computed(
    family: str, seed: int, gpus: int, rounds: int, data: st.DataObject
):
    sc = small(family, seed, gpus)
    jobs = pending(sc)
    k = data.draw(st.integers(1, 4), label="candidates")
    orders = np.array([data.draw(st.permutations(jobs), label="order") for _ in range(k)]).reshape(k, len(jobs))
    modes = np.array(data.draw(st.lists(st.sampled_from(sorted(MODES.values())), min_size=k, max_size=k)))
    dec = decode(ListInstance.build(sc), orders, modes, promote_rounds=rounds)
    assert dec.objective.shape == (k,) and dec.start.shape == dec.first.shape == (k, len(sc.jobs))
    assert dec.curves.shape == (k, len(sc.apps), sc.slots)
    assert dec.best == int(np.argmax(dec.objective))
    assert_valid_rows(sc, dec)
    for j, job in enumerate(sc.jobs):
        if job.running_on is not None:  # inherited work stays where it is (rule 5)
            assert (dec.start[:, j] == 0).all() and (dec.first[:, j] == job.running_on[0]).all()


# ----------------------------------------------------------------------------- hand-worked cases


def two_gpus(**overrides: object) -> Scenario:
    """One node of 2 GPUs, 4 slots, decay 0.5: job A (2 GPUs, 2 slots, priority 2), B (1 GPU, 1 slot, priority 3)."""
    data: dict[str, object] = {
        "cluster": {"gpus": 2, "node_size": 2},
        "horizon": {"slots": 4, "decay": 0.5},
        "jobs": [
            {"id": "A", "type": "training", "gpus": 2, "duration": 2, "priority": 2},
            {"id": "B", "type": "training", "gpus": 1, "duration": 1, "priority": 3},
        ],
    }
    data.update(overrides)
    return make_scenario(**data)


def test_hand_worked_orders():
    sc = two_gpus()
    A, B = 0, 1
    inst = ListInstance.build(sc)
    dec = decode(inst, np.array([[B, A], [A, B]]), np.array([MODE_OFF, MODE_OFF]))
    # [B, A]: B at slot 0 on GPU 0 (earliest start, lowest block); A needs both GPUs for 2 slots, free from slot 1.
    assert placements(dec, 0) == {B: (0, 0), A: (1, 0)}
    # value = w * k * sum of decay**t over the job's slots: B 3 * 1 * 1, A 2 * 2 * (0.5 + 0.25)
    assert dec.objective[0] == pytest.approx(3.0 + 3.0)
    # [A, B]: A at slot 0 on GPUs 0-1 (slots 0 and 1); B's first free slot is 2, on GPU 0.
    assert placements(dec, 1) == {A: (0, 0), B: (2, 0)}
    assert dec.objective[1] == pytest.approx(2 * 2 * (1 + 0.5) + 3 * 1 * 0.25)
    assert dec.best == 1
    assert_valid_rows(sc, dec)


def test_hand_worked_horizon_and_deadline():
    # A must end by slot 4 (deadline): it starts at 0 or 1. B is released at slot 1.
    jobs = [
        {"id": "A", "type": "training", "gpus": 2, "duration": 3, "priority": 1, "deadline": 4},
        {"id": "B", "type": "training", "gpus": 1, "duration": 1, "priority": 1, "release": 1},
    ]
    sc = two_gpus(jobs=jobs, horizon={"slots": 4})
    dec = decode(ListInstance.build(sc), np.array([[0, 1], [1, 0]]), np.array([MODE_OFF, MODE_OFF]))
    # [A, B]: A at 0 (slots 0-2); B released at 1 finds GPU 0 free only at slot 3.
    assert placements(dec, 0) == {0: (0, 0), 1: (3, 0)}
    assert dec.objective[0] == pytest.approx(2 * 3 + 1)
    # [B, A]: B at its release, slot 1, on GPU 0; A's window is 0..1 and both slots 0 and 1 see B: A unplaced.
    assert placements(dec, 1) == {1: (1, 0)}
    assert dec.objective[1] == pytest.approx(1.0)
    assert_valid_rows(sc, dec)


@pytest.mark.parametrize(("penalty", "traded"), [(1.0, True), (11.0, False)])
def test_hand_worked_trade(penalty: float, traded: bool):
    # One app wants both GPUs in both slots (its ramp lets it drop to 0 at once); job A (2 GPUs, 1 slot, priority 10)
    # is worth 20 at slot 0 and 10 at slot 1 (decay 0.5). Only a trade places it: at slot 0 the app serves 0, then
    # ramps back to 2, a shortfall of 2 GPU-slots. It pays when 20 > 2 * penalty.
    sc = make_scenario(
        cluster={"gpus": 2, "node_size": 2},
        horizon={"slots": 2, "decay": 0.5},
        realtime=[{"name": "chat", "demand": [2, 2], "ramp": 2, "initial": 2, "penalty": penalty}],
        jobs=[{"id": "A", "type": "training", "gpus": 2, "duration": 1, "priority": 10}],
    )
    dec = decode(ListInstance.build(sc), np.array([[0]] * 3), np.array([MODE_OFF, MODE_INLINE, MODE_AFTER]))
    assert placements(dec, 0) == {}
    assert dec.objective[0] == pytest.approx(0.0)
    assert dec.curves[0].tolist() == [[2, 2]]
    for i in (1, 2):
        if traded:
            assert placements(dec, i) == {0: (0, 0)}
            assert dec.curves[i].tolist() == [[0, 2]]
            assert dec.objective[i] == pytest.approx(20 - 2 * penalty)
        else:
            assert placements(dec, i) == {}
            assert dec.objective[i] == pytest.approx(0.0)
    assert_valid_rows(sc, dec)


def test_inherited_work_is_placed_before_the_first_decision():
    jobs = [
        {"id": "R", "type": "training", "gpus": 1, "duration": 2, "running_on": [1]},
        {"id": "B", "type": "training", "gpus": 2, "duration": 1, "priority": 1},
    ]
    sc = two_gpus(jobs=jobs, horizon={"slots": 4})
    inst = ListInstance.build(sc)
    dec = decode(inst, np.array([[1], [0]]), np.array([MODE_OFF, MODE_OFF]))
    assert placements(dec, 0) == {0: (0, 1), 1: (2, 0)}  # R holds GPU 1 over slots 0-1
    assert placements(dec, 1) == {0: (0, 1)}
    assert dec.objective.tolist() == pytest.approx([2 + 2, 2])


# ----------------------------------------------------------------------------- promotion


def reversed_priority(sc: Scenario) -> list[int]:
    return greedy.orderings(sc, ("weight",))[0][::-1]


def first_improved(limit: int = 200) -> tuple[Scenario, list[int], int]:
    """The first (family, seed) in a fixed range where promotion improves the reversed-priority order."""
    for seed in range(limit):
        for family in sorted(FAMILIES):
            sc = generate(family, seed, gpus=16)
            order = reversed_priority(sc)
            for mode in (MODE_INLINE, MODE_OFF):
                dec = decode(ListInstance.build(sc), np.array([order]), np.array([mode]), promote_rounds=2)
                if dec.promotions > 0:
                    return sc, order, mode
    raise AssertionError("no instance in the range where promotion improves")


def test_promotion_strictly_improves_some_instance():
    sc, order, mode = first_improved()
    inst = ListInstance.build(sc)
    plain = decode(inst, np.array([order]), np.array([mode]))
    promoted = decode(inst, np.array([order]), np.array([mode]), promote_rounds=2)
    assert promoted.promotions > 0
    assert promoted.objective[0] > plain.objective[0] + 1e-9
    assert_valid_rows(sc, promoted)
    assert promoted.chosen == 0 and promoted.promotion_decodes >= promoted.promotions


@quiet(30)
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    seed=st.integers(0, 10_000),
    gpus=st.sampled_from(SIZES),
    limit=st.integers(0, 5),
    data=st.data(),
)
def test_promotion_never_lowers_the_best(family: str, seed: int, gpus: int, limit: int, data: st.DataObject):
    sc = generate(family, seed, gpus=gpus)
    jobs = pending(sc)
    k = data.draw(st.integers(1, 3), label="candidates")
    orders = np.array([data.draw(st.permutations(jobs), label="order") for _ in range(k)]).reshape(k, len(jobs))
    modes = np.array(data.draw(st.lists(st.sampled_from(sorted(MODES.values())), min_size=k, max_size=k)))
    inst = ListInstance.build(sc)
    plain = decode(inst, orders, modes)
    promoted = decode(inst, orders, modes, promote_rounds=2, promote_limit=limit)
    assert promoted.objective[promoted.best] >= plain.objective[plain.best] - 1e-9
    # Only the best candidate's row may change, and only upwards.
    b = plain.best
    others = [i for i in range(k) if i != b]
    assert np.array_equal(promoted.objective[others], plain.objective[others])
    assert np.array_equal(promoted.start[others], plain.start[others])
    if promoted.promotions == 0:
        assert np.array_equal(promoted.start, plain.start) and np.array_equal(promoted.objective, plain.objective)
    else:
        assert promoted.objective[b] > plain.objective[b]
        assert promoted.best == b
    assert_valid_rows(sc, promoted)


@quiet(40)
@given(**SMALL_CASES)
def test_a_group_of_more_candidates_never_gives_a_worse_plan(family: str, seed: int, gpus: int, data: st.DataObject):
    """Promotion refines each group's best: the candidates of group 0 alone give a plan no better than all of them."""
    sc = small(family, seed, gpus)
    jobs = pending(sc)
    k = data.draw(st.integers(1, 3), label="group 0")
    extra = data.draw(st.integers(1, 4), label="group 1")
    orders = np.array([data.draw(st.permutations(jobs), label="order") for _ in range(k + extra)])
    orders = orders.reshape(k + extra, len(jobs))
    mode_codes = st.sampled_from(sorted(MODES.values()))
    modes = np.array(data.draw(st.lists(mode_codes, min_size=k + extra, max_size=k + extra), label="modes"))
    inst = ListInstance.build(sc)
    alone = decode(inst, orders[:k], modes[:k], promote_rounds=2)
    grouped = decode(inst, orders, modes, promote_rounds=2, groups=np.array([0] * k + [1] * extra))
    assert grouped.objective[grouped.chosen] >= alone.objective[alone.chosen] - 1e-9
    # Group 0's rows are what group 0 alone decodes, promotion included.
    assert np.array_equal(grouped.objective[:k], alone.objective)
    assert np.array_equal(grouped.start[:k], alone.start)
    assert grouped.chosen == int(np.argmax(grouped.objective))  # margin 0: the first of the most valuable
    assert grouped.promoted is not None and grouped.promoted.sum() == grouped.promotions
    assert_valid_rows(sc, grouped)


def test_one_group_is_the_default(mixed: tuple[Scenario, ListInstance]):
    sc, inst = mixed
    jobs = pending(sc)
    orders = np.array([jobs, jobs[::-1]])
    modes = np.array([MODE_INLINE, MODE_AFTER])
    default = decode(inst, orders, modes, promote_rounds=2)
    one = decode(inst, orders, modes, promote_rounds=2, groups=np.zeros(2, dtype=np.int64))
    assert np.array_equal(default.objective, one.objective) and default.chosen == one.chosen
    assert np.count_nonzero(default.promoted) <= 1


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        (np.array([0]), "one promotion group per candidate"),
        (np.array([0, 2]), "among 0..1"),
        (np.array([0, -1]), "among 0..1"),
        (np.array([0.0, 1.0]), "must be integers"),
    ],
)
def test_bad_groups_raise(mixed: tuple[Scenario, ListInstance], groups: np.ndarray, message: str):
    sc, inst = mixed
    jobs = pending(sc)
    with pytest.raises(ValueError, match=message):
        decode(inst, np.array([jobs, jobs]), np.array([0, 0]), groups=groups)


# ----------------------------------------------------------------------------- plain Python equals compiled

PLAIN_SCRIPT = """
import json, sys
import numpy as np
from gpu_env import listsched
from gpu_env.generators import generate
from gpu_env.listsched import ListInstance, decode

assert not hasattr(listsched._decode_all, "py_func"), "GPUALLOC_NUMBA=0 should leave plain functions"
out = []
for case in json.loads(sys.argv[1]):
    sc = generate(case["family"], case["seed"], gpus=case["gpus"])
    dec = decode(ListInstance.build(sc), np.array(case["orders"]), np.array(case["modes"]), promote_rounds=2)
    out.append({"objective": dec.objective.tolist(), "start": dec.start.tolist(), "first": dec.first.tolist(),
                "curves": dec.curves.tolist(), "promotions": dec.promotions})
print(json.dumps(out))
"""


def test_plain_python_decodes_as_compiled():
    rng = np.random.default_rng(7)
    cases = []
    for family, seed, gpus in (("mixed-control", 1, 16), ("batch-fragmentation", 2, 8), ("scale-64x30", 0, 24)):
        sc = generate(family, seed, gpus=gpus)
        jobs = pending(sc)
        orders = [[int(j) for j in rng.permutation(jobs)] for _ in range(3)]
        cases.append({"family": family, "seed": seed, "gpus": gpus, "orders": orders, "modes": [0, 1, 2]})
    env = {**os.environ, "GPUALLOC_NUMBA": "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PLAIN_SCRIPT, json.dumps(cases)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=HANG_GUARD_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    plain = json.loads(done.stdout)
    try:
        import numba  # noqa: F401
    except ImportError:  # pragma: no cover - the dev install has numba
        pass
    else:
        assert hasattr(listsched._decode_all, "py_func"), "the decoder in this process should be compiled"
    for case, got in zip(cases, plain, strict=True):
        sc = generate(case["family"], case["seed"], gpus=case["gpus"])
        dec = decode(ListInstance.build(sc), np.array(case["orders"]), np.array(case["modes"]), promote_rounds=2)
        assert got["start"] == dec.start.tolist()
        assert got["first"] == dec.first.tolist()
        assert got["curves"] == dec.curves.tolist()
        assert got["promotions"] == dec.promotions
        assert got["objective"] == pytest.approx(dec.objective.tolist(), rel=1e-12, abs=1e-9)


# ----------------------------------------------------------------------------- input checks


@pytest.fixture(scope="module")
def mixed() -> tuple[Scenario, ListInstance]:
    sc = generate("mixed-control", 0, gpus=16)
    return sc, ListInstance.build(sc)


@pytest.mark.parametrize(
    ("orders", "modes", "message"),
    [
        (np.arange(5), np.array([0]), "orders must be"),
        (np.zeros((2, 3, 1)), np.array([0, 0]), "orders must be"),
        (np.zeros((2, 3)), np.array([0]), "modes"),
        (np.zeros((2, 3)), np.array([[0, 0]]), "modes"),
        (np.array([[0, 1, 99]]), np.array([0]), "outside 0.."),
        (np.array([[0, -2]]), np.array([0]), "outside 0.."),
    ],
)
def test_bad_inputs_raise(mixed: tuple[Scenario, ListInstance], orders: np.ndarray, modes: np.ndarray, message: str):
    _, inst = mixed
    with pytest.raises(ValueError, match=message):
        decode(inst, orders, modes)


def test_index_message_names_the_range(mixed: tuple[Scenario, ListInstance]):
    sc, inst = mixed
    with pytest.raises(ValueError, match=f"0..{len(sc.jobs) - 1}"):
        decode(inst, np.array([[len(sc.jobs)]]), np.array([0]))


def test_empty_inputs(mixed: tuple[Scenario, ListInstance]):
    sc, inst = mixed
    none = decode(inst, np.zeros((0, 4), dtype=np.int64), np.zeros(0, dtype=np.int64), promote_rounds=2)
    assert none.objective.shape == (0,) and none.start.shape == (0, len(sc.jobs))
    blank = decode(inst, np.full((1, 3), -1), np.array([MODE_INLINE]), promote_rounds=2)
    assert placements(blank, 0) == {j: (0, job.running_on[0]) for j, job in enumerate(sc.jobs) if job.running_on}
    assert blank.promotions == 0  # no job of the order is left out: nothing to promote
    assert_valid_rows(sc, blank)


@quiet(30)
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    seed=st.integers(0, 10_000),
    rounds=st.sampled_from((0, 2)),
    mode=st.sampled_from(sorted(MODES.values())),
    data=st.data(),
)
def test_padding_repeats_and_inherited_jobs_are_ignored(
    family: str, seed: int, rounds: int, mode: int, data: st.DataObject
):
    sc = generate(family, seed, gpus=16)
    clean = data.draw(st.permutations(pending(sc)), label="order")
    # A subset of the queue (jobs missing from an order stay unplaced) with noise inserted anywhere.
    clean = clean[: data.draw(st.integers(1, len(clean)), label="length")]
    inherited = [i for i, job in enumerate(sc.jobs) if job.running_on is not None]
    dirty: list[int] = []
    for p, j in enumerate(clean):
        noise = data.draw(st.lists(st.sampled_from([-1, *inherited, *clean[:p]]), max_size=3), label="noise")
        dirty += [*noise, j]
    dirty += data.draw(st.lists(st.sampled_from([-1, *inherited, *clean]), max_size=4), label="tail")
    inst = ListInstance.build(sc)
    a = decode(inst, np.array([clean]), np.array([mode]), promote_rounds=rounds)
    b = decode(inst, np.array([dirty]), np.array([mode]), promote_rounds=rounds)
    assert placements(b, 0) == placements(a, 0)
    assert b.objective[0] == a.objective[0]
    assert np.array_equal(b.curves, a.curves)
    assert b.promotions == a.promotions
    missing = set(pending(sc)) - set(clean)
    assert all(a.start[0, j] == -1 for j in missing)


@pytest.mark.parametrize("limit", [1, 2, 4])
def test_repeated_jobs_do_not_change_promotion(limit: int):
    # Every job twice: promotion must neither try a left-out job twice in one round (crowding out the next
    # candidate) nor build the promoted order from a row with unwritten cells (a repeat removed with the job).
    sc = generate("mixed-control", 0, gpus=16)
    inst = ListInstance.build(sc)
    order = reversed_priority(sc)
    clean = decode(inst, np.array([order]), np.array([MODE_INLINE]), promote_rounds=2, promote_limit=limit)
    twice = decode(inst, np.array([order + order]), np.array([MODE_INLINE]), promote_rounds=2, promote_limit=limit)
    assert clean.promotions > 0
    assert placements(twice, 0) == placements(clean, 0)
    assert twice.objective[0] == clean.objective[0]
    assert twice.promotions == clean.promotions


# ----------------------------------------------------------------------------- a seed, the margin, the choice


def test_a_seed_takes_its_placements_then_gives_the_rest_two_turns():
    sc = generate("mixed-control", 3)
    inst = ListInstance.build(sc)
    fifo = listsched.fifo_replay(sc, inst)
    arrival = np.array([pending(sc)])
    dec = decode(inst, arrival, np.array([MODE_AFTER]), seed=(fifo.start[0], fifo.first[0]))
    assert_valid_rows(sc, dec)
    kept = fifo.start[0] >= 0
    assert np.array_equal(dec.start[0, kept], fifo.start[0, kept])  # FIFO's placements, on greedy's curves
    assert dec.objective[0] >= fifo.objective[0] - 1e-9


def test_a_seed_that_does_not_fit_scores_minus_infinity():
    sc = generate("mixed-control", 3)
    inst = ListInstance.build(sc)
    jobs = pending(sc)
    two = [j for j in jobs if inst.k[j] <= sc.node_size][:2]
    start = np.full(len(sc.jobs), -1, dtype=np.int64)
    first = np.full(len(sc.jobs), -1, dtype=np.int64)
    start[two] = max(inst.lo[j] for j in two)
    first[two] = 0  # both on GPU 0 at one start: a cell taken twice
    orders = np.array([jobs, jobs])
    dec = decode(inst, orders, np.array([MODE_OFF, MODE_AFTER]), seed=(start, first), promote_rounds=2)
    assert dec.objective[1] == -np.inf and dec.chosen == 0


def test_the_margin_keeps_the_first_of_near_equals():
    sc = generate("mixed-control", 0, gpus=16)
    inst = ListInstance.build(sc)
    order = np.array([pending(sc)] * 2)
    assert decode(inst, order, np.array([MODE_OFF, MODE_OFF]), margin=1e-9).chosen == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"block_rule": "first"}, "block_rule"),
        ({"start_rule": "late"}, "start_rule"),
        ({"trade_candidates": 0}, "trade"),
    ],
)
def test_unknown_choices_raise(kwargs: dict, message: str):
    with pytest.raises(ValueError, match=message):
        listsched.choice(**kwargs)


# ----------------------------------------------------------------------------- a preferred block per job


def three_jobs(node_size: int = 4) -> Scenario:
    """4 GPUs, decay 0.5: A and B take 1 GPU, C 2 GPUs, each for 2 slots at priority 1."""
    jobs = [
        {"id": name, "type": "training", "gpus": k, "duration": 2, "priority": 1}
        for name, k in (("A", 1), ("B", 1), ("C", 2))
    ]
    return make_scenario(cluster={"gpus": 4, "node_size": node_size}, horizon={"slots": 6, "decay": 0.5}, jobs=jobs)


def test_hand_worked_preferred_block():
    sc = three_jobs()
    A, B, C = 0, 1, 2
    inst = ListInstance.build(sc)
    order = np.array([[A, B, C]])
    lowest = decode(inst, order, np.array([MODE_OFF]))
    # Lowest free blocks: A on GPU 0, B on GPU 1, C on GPUs 2-3, all from slot 0: 1.5 + 1.5 + 2 * 1.5.
    assert placements(lowest, 0) == {A: (0, 0), B: (0, 1), C: (0, 2)}
    assert lowest.objective[0] == pytest.approx(6.0)
    # A prefers GPU 2: B takes the lowest (GPU 0), and C finds no two adjacent free GPUs before slot 2.
    prefer = np.array([2, -1, -1])
    moved = decode(inst, order, np.array([MODE_OFF]), prefer=prefer)
    assert placements(moved, 0) == {A: (0, 2), B: (0, 0), C: (2, 0)}
    assert moved.objective[0] == pytest.approx(1.5 + 1.5 + 2 * (0.25 + 0.125))
    assert_valid_rows(sc, moved)
    # No preference at all is the plain decode.
    same = decode(inst, order, np.array([MODE_OFF]), prefer=np.full(3, -1))
    assert placements(same, 0) == placements(lowest, 0)


def test_a_preference_the_rules_or_the_grid_refuse_takes_the_nearest_allowed_free_block():
    sc = three_jobs(node_size=2)
    A, B, C = 0, 1, 2
    inst = ListInstance.build(sc)
    # C's block from GPU 1 would cross nodes (rule 4): GPUs 0-1 and 2-3 are one GPU away, the first is taken; B's
    # GPU 0 is A's at that start: GPU 1 is the nearest free.
    dec = decode(inst, np.array([[A, B, C]]), np.array([MODE_OFF]), prefer=np.array([-1, 0, 1]))
    assert placements(dec, 0) == {A: (0, 0), B: (0, 1), C: (0, 2)}
    assert_valid_rows(sc, dec)


def test_hand_worked_nearest_preferred_block():
    jobs = [{"id": n, "type": "training", "gpus": 1, "duration": 2, "priority": 1} for n in "AB"]
    sc = make_scenario(cluster={"gpus": 8, "node_size": 8}, horizon={"slots": 4}, jobs=jobs)
    inst = ListInstance.build(sc)
    # Both prefer GPU 6: A takes it; for B, GPUs 5 and 7 are equally near, and the lower wins (lowest would be 0).
    dec = decode(inst, np.array([[0, 1]]), np.array([MODE_OFF]), prefer=np.array([6, 6]))
    assert placements(dec, 0) == {0: (0, 6), 1: (0, 5)}


# ----------------------------------------------------------------------------- a block rule per job and candidate


def test_hand_worked_highest_block_rule():
    sc = three_jobs()
    A, B, C = 0, 1, 2
    inst = ListInstance.build(sc)
    # From the top: A on GPU 3, B on GPU 2, C on the highest free pair (GPUs 0-1); the same value as the lowest.
    dec = decode(inst, np.array([[A, B, C]]), np.array([MODE_OFF]), block_rule="highest")
    assert placements(dec, 0) == {A: (0, 3), B: (0, 2), C: (0, 0)}
    assert dec.objective[0] == pytest.approx(6.0)


def test_each_candidate_follows_its_own_rules():
    sc = three_jobs()
    A, B, C = 0, 1, 2
    inst = ListInstance.build(sc)
    lowest, highest = listsched.BLOCK_RULES["lowest"], listsched.BLOCK_RULES["highest"]
    orders = np.array([[A, B, C]] * 3)
    # Candidate 0 all lowest, 1 all highest, 2 mixed: A from the top, B and C from the bottom.
    rules = np.array([[lowest] * 3, [highest] * 3, [highest, lowest, lowest]])
    dec = decode(inst, orders, np.array([MODE_OFF] * 3), rules=rules)
    assert placements(dec, 0) == {A: (0, 0), B: (0, 1), C: (0, 2)}
    assert placements(dec, 1) == {A: (0, 3), B: (0, 2), C: (0, 0)}
    assert placements(dec, 2) == {A: (0, 3), B: (0, 0), C: (0, 1)}
    assert_valid_rows(sc, dec)


@quiet(25)
@given(**SMALL_CASES)
def test_the_rules_read_back_from_a_plan_decode_it_again(family: str, seed: int, gpus: int, data: st.DataObject):
    """Decoded with per-job rules, a plan's rules read back (:func:`rules_from_plan`) decode the same plan."""
    sc = small(family, seed, gpus)
    inst = ListInstance.build(sc)
    drawn = per_job(data, inst, st.sampled_from(sorted(listsched.BLOCK_RULES.values())))
    order = np.random.default_rng(seed).permutation(pending(sc)).astype(np.int64)
    dec = decode(inst, order[None, :], np.array([MODE_OFF]), rules=drawn[None, :])
    assert_valid_rows(sc, dec)
    placed = [(j, dec.start[0, j], dec.first[0, j]) for j in order if dec.start[0, j] >= 0]
    labels = listsched.rules_from_plan(inst, order, np.array(placed, dtype=np.int64).reshape(-1, 3))
    again = decode(inst, order[None, :], np.array([MODE_OFF]), rules=labels[None, :])
    assert placements(again, 0) == placements(dec, 0)


@quiet(25)
@given(**SMALL_CASES)
def test_decodes_with_the_learned_block_rule_validate(family: str, seed: int, gpus: int, data: st.DataObject):
    sc = small(family, seed, gpus)
    inst = ListInstance.build(sc)
    F = len(listsched.BLOCK_FEATURES)
    weights = np.array(data.draw(st.lists(st.floats(-3, 3), min_size=F, max_size=F)))
    orders = three_orders(sc, seed)
    rules = np.full((3, inst.k.size), listsched.BLOCK_LEARNED)
    dec = decode(inst, orders, np.array([MODE_OFF, MODE_INLINE, MODE_AFTER]), rules=rules, block_weights=weights)
    assert_valid_rows(sc, dec)
    # With zero weights every block scores alike and the first, the lowest, wins: the plain decode.
    plain = decode(inst, orders, np.array([MODE_OFF, MODE_INLINE, MODE_AFTER]))
    lowest = decode(inst, orders, np.array([MODE_OFF, MODE_INLINE, MODE_AFTER]), rules=rules, block_weights=np.zeros(F))
    assert (lowest.first == plain.first).all() and (lowest.start == plain.start).all()


def test_bad_block_weights_raise():
    inst = ListInstance.build(three_jobs())
    for weights in (np.zeros(3), np.full(len(listsched.BLOCK_FEATURES), np.nan)):
        with pytest.raises(ValueError, match="block weights"):
            decode(inst, np.array([[0, 1, 2]]), np.array([MODE_OFF]), block_weights=weights)


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (np.zeros((2, 3), dtype=np.int64), "one block rule per candidate"),
        (np.full((1, 3), 9), "must be among"),
        (np.full((1, 3), 1.5), "integers"),
        (np.full((1, 3), listsched.BLOCK_LEARNED), "no block_weights"),
    ],
)
def test_bad_rules_raise(rules: np.ndarray, message: str):
    inst = ListInstance.build(three_jobs())
    with pytest.raises(ValueError, match=message):
        decode(inst, np.array([[0, 1, 2]]), np.array([MODE_OFF]), rules=rules)


def test_rules_from_plan_refuses_what_it_cannot_read():
    inst = ListInstance.build(three_jobs())
    placed = np.array([[0, 0, 0], [1, 0, 1]])
    with pytest.raises(ValueError, match="offered"):
        listsched.rules_from_plan(inst, np.array([0, 1, 2]), placed, offered=())
    with pytest.raises(ValueError, match="offered"):
        listsched.rules_from_plan(inst, np.array([0, 1, 2]), placed, offered=("first",))
    with pytest.raises(ValueError, match=r"missing from the order: \[1\]"):
        listsched.rules_from_plan(inst, np.array([0, 2]), placed)


@quiet(25)
@given(**SMALL_CASES)
def test_decodes_with_any_preferred_blocks_validate(family: str, seed: int, gpus: int, data: st.DataObject):
    sc = small(family, seed, gpus)
    inst = ListInstance.build(sc)
    prefer = per_job(data, inst, st.integers(-1, sc.gpus - 1))
    orders = three_orders(sc, seed)
    dec = decode(inst, orders, np.array([MODE_OFF, MODE_INLINE, MODE_AFTER]), prefer=prefer)
    assert_valid_rows(sc, dec)


@pytest.mark.parametrize(
    ("prefer", "message"),
    [(np.zeros((2, 2), dtype=np.int64), "one first GPU per job"), ("range", "outside")],
)
def test_bad_preferences_raise(mixed: tuple[Scenario, ListInstance], prefer, message: str):
    sc, inst = mixed
    if isinstance(prefer, str):
        prefer = np.full(inst.k.size, sc.gpus)
    with pytest.raises(ValueError, match=message):
        decode(inst, np.array([pending(sc)]), np.array([MODE_OFF]), prefer=prefer)


# ----------------------------------------------------------------------------- the environment's kernels


@quiet(20)
@given(family=st.sampled_from(sorted(FAMILIES)), seed=st.integers(0, 10_000), mode=st.sampled_from(sorted(MODES)))
def test_kernels_step_by_step_are_the_decoder(family: str, seed: int, mode: str):
    sc = generate(family, seed, gpus=16)
    inst = ListInstance.build(sc)
    order = [int(j) for j in np.random.default_rng(seed).permutation(pending(sc))]
    live = listsched.new_live(inst)
    work = listsched.new_scratch(inst)
    fits = np.zeros(len(sc.jobs), dtype=np.bool_)
    trade = mode == "inline" and bool(sc.apps)
    for j in order:
        listsched.fits_somewhere(inst, live, fits, work)
        assert not fits[live.decided].any()
        placed = listsched.take_turn(inst, live, j, trade, listsched.CHOICE, work)
        assert placed == (live.start[j] >= 0) and live.decided[j]
        if not fits[j]:
            assert not placed  # a job that fits nowhere, even above the ramp floors, is skipped
    if mode == "after" and sc.apps:
        listsched.finish_after(inst, live, listsched.CHOICE, work)
    dec = decode(inst, np.array([order]), np.array([MODES[mode]]))
    assert np.array_equal(live.start, dec.start[0]) and np.array_equal(live.first, dec.first[0])
    assert np.array_equal(live.curves, dec.curves[0])
    assert live.money[0] - live.money[1] == pytest.approx(dec.objective[0], rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fifo_replay_is_fifo(family):
    """The decoder's FIFO (peak reservation, arrival order, no trades) is agents.fifo's plan, placement by placement."""
    from agents import fifo
    from gpu_env.listsched import fifo_replay

    for seed in range(3):
        for gpus in (None, 24):
            sc = generate(family, seed=seed, gpus=gpus)
            want = fifo.plan(sc)
            got = fifo_replay(sc, ListInstance.build(sc)).plan(0, sc, "fifo")
            assert got.placements == sorted(want.placements, key=lambda p: sc.job_index(p.job))
            assert got.curves == want.curves
            assert fifo_replay(sc, ListInstance.build(sc)).objective[0] == pytest.approx(
                compute_metrics(sc, want).objective, rel=1e-9, abs=1e-9
            )
