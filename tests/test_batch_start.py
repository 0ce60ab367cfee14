"""The batched engine's start state, against numbers worked by hand from SPEC.md (not against Episode).

The engine copies its start from the reference :class:`gpu_env.episode.Episode`,
so the differential tests of ``test_batch.py`` cannot see an error there: both
would start wrong alike. Here one tiny scenario is worked out on paper:

* G = 4 GPUs in nodes of 2, T = 4 slots, decay 0.5 (slot weights 1, 0.5, 0.25, 0.125).
* App ``chat``: demand 3, 3, 1, 0; ramp 1; initial 2; penalty 5.
  Ramp floors ``max(0, 2 - (t + 1))`` = 1, 0, 0, 0 (SPEC rule 6).
* ``inh`` (first in the file): 2 GPUs x 3 slots, running on GPUs 2-3 (rule 5),
  so jobs hold 2, 2, 2, 0 GPUs and GPUs 2-3 are busy in slots 0-2.
  Worth 1 * 2 * (1 + 0.5 + 0.25) = 3.5.
  Before slot 0 chat's 2 GPUs and ``inh``'s 2 fill the cluster exactly (SPEC section 1; initial 3 would be refused).
* Real-time under that load: at most 4 - 2 = 2 GPUs in slots 0-2. The least-shortfall
  ramp-feasible curve is 2, 2, 1, 0 (it holds initial 2, then steps down by 1 twice):
  shortfall 1 + 1 = 2 GPU-slots, penalty 10. Objective before any action 3.5 - 10 = -6.5.
* Rows (jobs to place, file order): 0 ``a`` (training, 2 GPUs x 2, release 1, priority 2),
  1 ``b`` (1 GPU x 1, deadline 2: starts 0..1), 2 ``c`` (4 GPUs x 1: wider than a node,
  so only first GPU 0 is allowed by rule 4).
* Trading real time, a job may use ``G - floors - job load`` = 1, 2, 2, 4 GPUs per slot. So
  ``b`` can start at 0 at the earliest (GPU 0 or 1), ``a`` at its release 1 (needs 2 GPUs in
  slots 1-2; only the block 0-1 is free there), ``c`` at 3 (needs all 4). The clock starts at 0,
  and only ``b``'s three placement actions and ADVANCE are allowed. ``b`` still trades: the
  slack at slot 0 is 0, so its GPU comes off chat's curve.
* Without trading, a job may use only the slack ``G - job load - curves`` = 0, 0, 1, 4:
  ``b`` can never start (its window ends at slot 1), ``a`` can start at 3 on block 0-1 or 2-3,
  ``c`` at 3, and the clock starts at 3.
* ADVANCE at slot 0 moves ``b`` on to its last start, slot 1 (room 2 there, GPUs 0-1 free),
  and the clock to 1, where ``a`` and ``b`` can both start.
* The reward scale is G * T * w_max = 4 * 4 * 2 = 32.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_env.batch import BatchEngine, Sizes, sizes_for
from gpu_env.batch.batch_observation import buffers, observe
from gpu_env.observation import GLOBAL_FEATURES, JOB_FEATURES, SLOT_FEATURES
from tests.conftest import make_scenario

SCALE = 32.0  # G * T * w_max


def scenario():
    return make_scenario(
        cluster={"gpus": 4, "node_size": 2},
        horizon={"slots": 4, "decay": 0.5},
        realtime=[{"name": "chat", "demand": [3, 3, 1, 0], "ramp": 1, "initial": 2, "penalty": 5}],
        jobs=[
            {"id": "inh", "type": "batch_inference", "gpus": 2, "duration": 3, "running_on": [2, 3]},
            {"id": "a", "type": "training", "gpus": 2, "duration": 2, "release": 1, "priority": 2},
            {"id": "b", "type": "quantization", "gpus": 1, "duration": 1, "deadline": 2},
            {"id": "c", "type": "training", "gpus": 4, "duration": 1},
        ],
    )


def engine_for(sc, *, trade_realtime=True, sizes=None, batch=2):
    engine = BatchEngine(batch, sizes or sizes_for([sc]), trade_realtime=trade_realtime)
    engine.reset(sc)
    return engine


def test_named_column_ranges_hold_the_features_they_name():
    from gpu_env import observation as o

    static = ("gpus", "gpus_per_node", "duration", "weight", "release", "last_start", "deadline")
    assert JOB_FEATURES[o.JOB_STATIC] == static  # Episode.row_table's columns, in its order
    assert JOB_FEATURES[o.JOB_TIMES] == ("release", "last_start")
    assert JOB_FEATURES[o.JOB_NOW][:3] == ("realtime_take", "realtime_cost", "blocks_now")
    assert o.JOB_NOW.stop == len(JOB_FEATURES)
    assert JOB_FEATURES[o._J_FLAGS] == ("pending", "placed", "now")  # the Encoder writes these together
    assert JOB_FEATURES[o._J_VALUES] == ("earliest", "value_now", "value_earliest")


def test_sizes_of_the_hand_scenario():
    assert sizes_for([scenario()]) == Sizes(jobs=3, gpus=4, slots=4, apps=1, duration=3)


def test_start_state_by_hand():
    s = engine_for(scenario()).state
    for i in range(2):  # both episodes of the batch start alike
        assert s.gpus[i] == 4 and s.slots[i] == 4 and s.node[i] == 2 and s.n_rows[i] == 3
        assert s.valid[i].tolist() == [True, True, True]
        assert s.k[i].tolist() == [2, 1, 4] and s.d[i].tolist() == [2, 1, 1]
        assert s.lo[i].tolist() == [1, 0, 0] and s.hi[i].tolist() == [4, 2, 4]  # windows 1..3, 0..1, 0..3
        assert s.wide[i].tolist() == [False, False, True]
        # Rule 4: 2 GPUs inside a node of 2 start on 0 or 2; 1 GPU anywhere; 4 GPUs on the node boundary 0 only.
        assert s.allowed[i, :, 0].tolist() == [0b0101, 0b1111, 0b0001]
        # Occupied GPU-slots: the inherited job holds GPUs 2-3 in slots 0-2 and nothing else is busy.
        assert s.busy[i, :, 0].tolist() == [0b1100] * 3 + [0] * (s.busy.shape[1] - 3)
        assert s.load[i].tolist() == [2, 2, 2, 0]
        assert s.demand[i].tolist() == [[3, 3, 1, 0]]
        assert s.floors[i].tolist() == [[1, 0, 0, 0]] and s.floor_total[i].tolist() == [1, 0, 0, 0]
        assert s.curves[i].tolist() == [[2, 2, 1, 0]]
        assert s.penalty[i].tolist() == [5.0] and s.initial[i].tolist() == [2] and s.ramp[i].tolist() == [1]
        assert s.cheapest[i] == 5.0 and s.decay[i] == 0.5
        assert s.decay_weights[i].tolist() == [1.0, 0.5, 0.25, 0.125]
        assert s.reward_scale[i] == SCALE
        # Values of each start 0..3 (and 0 at T): a earns 2 * 2 per slot, b 1, c 4, times the slot weights.
        assert s.values[i].tolist() == [
            [6.0, 3.0, 1.5, 0.5, 0.0],
            [1.0, 0.5, 0.25, 0.125, 0.0],
            [4.0, 2.0, 1.0, 0.5, 0.0],
        ]
        assert s.earliest[i].tolist() == [1, 0, 3]
        # a at 1 only on GPUs 0-1 (2-3 busy), b at 0 on GPU 0 or 1, c at 3 on 0.
        assert s.at[i, :, 0].tolist() == [0b0001, 0b0011, 0b0001]
        assert s.clock[i] == 0 and not s.done[i] and s.steps[i] == 0
        assert not s.placed[i].any() and s.start[i].tolist() == [-1] * 3 and s.first[i].tolist() == [-1] * 3
        assert s.job_value[i] == 3.5 and s.shortfall_cost[i] == 10.0
        assert s.objective[i] == -6.5 and s.unpaid[i] == -6.5
        # From the clock (slot 0) GPUs 0-1 are free to the end (capped at T + 1 = 5), GPUs 2-3 busy now.
        assert s.free_now[i].tolist() == [5, 5, 0, 0]


def test_masks_at_step_zero_by_hand():
    engine = engine_for(scenario())
    masks = engine.action_masks()
    assert masks.shape == (2, 3 * 3 + 1)
    assert [np.flatnonzero(m).tolist() for m in masks] == [[3, 4, 5, 9]] * 2  # row b's three rules, ADVANCE


def test_observation_at_step_zero_by_hand():
    check_observation(observe(engine_for(scenario())), "compiled")


def test_observation_at_step_zero_by_hand_with_plain_kernels(monkeypatch):
    from tests.test_batch import use_plain_kernels

    use_plain_kernels(monkeypatch)
    check_observation(observe(engine_for(scenario())), "plain")


def test_observation_into_buffers_by_hand():
    engine = engine_for(scenario())
    out = buffers(engine)
    for array in out.values():
        array.fill(7)  # every cell is written
    assert observe(engine, out=out) is out
    check_observation(out, "buffers")
    with pytest.raises(ValueError, match="jobs"):
        observe(engine, out={"jobs": out["jobs"][:1]})


def check_observation(obs, where):
    close = {"rtol": 0, "atol": 1e-7, "err_msg": where}
    glob = dict(zip(GLOBAL_FEATURES, obs["globals"][0].tolist(), strict=True))
    expected = {
        "clock": 0.0,
        "remaining": 4 / 4,
        "horizon": 1.0,
        "gpus": 1.0,
        "node_size": 2 / 4,
        "pending": 3 / 3,
        "objective": -6.5 / SCALE,
        "decay": 0.5,
        "trade_realtime": 1.0,
    }
    np.testing.assert_allclose([glob[k] for k in expected], list(expected.values()), **close)

    slots = {name: obs["slots"][0, :, j].tolist() for j, name in enumerate(SLOT_FEATURES)}
    expected = {
        "inside": [1, 1, 1, 1],
        "past": [0, 0, 0, 0],
        "job_load": [0.5, 0.5, 0.5, 0],
        "realtime": [0.5, 0.5, 0.25, 0],
        "demand": [0.75, 0.75, 0.25, 0],
        "shortfall": [0.25, 0.25, 0, 0],
        "slack": [0, 0, 0.25, 1],
        "room": [0.25, 0.5, 0.5, 1],
        "decay": [1, 0.5, 0.25, 0.125],
    }
    for name, values in expected.items():
        np.testing.assert_allclose(slots[name], values, **{**close, "err_msg": f"{where}: slots.{name}"})

    # valid, node position (g mod 2) / 2, free run from the clock / H (capped at 1)
    np.testing.assert_allclose(obs["gpus"][0], [[1, 0, 1], [1, 0.5, 1], [1, 0, 0], [1, 0.5, 0]], **close)
    apps = [[0.75, 0.5, 0.25], [0.75, 0.5, 0], [0.25, 0.25, 0], [0, 0, 0]]  # per slot: demand, curve, floor / G
    np.testing.assert_allclose(obs["apps"][0, 0], apps, **close)
    np.testing.assert_allclose(obs["app_info"][0], [[1, 5 / 2, 1 / 4, 2 / 4]], **close)  # valid, P/w, R/G, initial/G
    grid = np.zeros((4, 4, 2))
    grid[2:4, 0:3, 1] = 1  # inherited work on GPUs 2-3 in slots 0-2; nothing placed yet
    np.testing.assert_array_equal(obs["grid"][0], grid, err_msg=where)

    jobs = [dict(zip(JOB_FEATURES, row.tolist(), strict=True)) for row in obs["jobs"][0]]
    a, b, c = jobs
    common = {"valid": 1, "pending": 1, "placed": 0}
    expected_a = {**common, "now": 0, "gpus": 0.5, "gpus_per_node": 1, "duration": 0.5, "weight": 1, "release": 0.25}
    expected_a |= {"last_start": 0.75, "deadline": 0, "earliest": 0.25, "value_now": 0, "value_earliest": 3 / SCALE}
    expected_b = {**common, "now": 1, "gpus": 0.25, "gpus_per_node": 0.5, "duration": 0.25, "weight": 0.5}
    expected_b |= {"release": 0, "last_start": 0.25, "deadline": 1, "earliest": 0}
    expected_b |= {"value_now": 1 / SCALE, "value_earliest": 1 / SCALE}
    # At slot 0 the slack is 0, so b's one GPU-slot comes out of the real-time curve: take 1 (per k d = 1),
    # costing the cheapest penalty 5; 2 of the 4 one-GPU blocks are free; the free run in node 0 is GPUs 0-1,
    # so first and best fit pick GPU 0 and last fit GPU 1, each leaving 1 GPU of the run (1 / node = 0.5).
    expected_b |= {"realtime_take": 1, "realtime_cost": 5 / SCALE, "blocks_now": 0.5}
    expected_b |= {"first_gpu": 0, "first_waste": 0.5, "best_gpu": 0, "best_waste": 0.5, "last_gpu": 0.25}
    expected_b |= {"last_waste": 0.5}
    expected_c = {**common, "now": 0, "gpus": 1, "gpus_per_node": 2, "duration": 0.25, "weight": 0.5}
    expected_c |= {"release": 0, "last_start": 0.75, "deadline": 0, "earliest": 0.75, "value_earliest": 0.5 / SCALE}
    for name, got, want in (("a", a, expected_a), ("b", b, expected_b), ("c", c, expected_c)):
        want = {key: want.get(key, 0.0) for key in JOB_FEATURES}  # every feature not listed is 0
        np.testing.assert_allclose(list(got.values()), list(want.values()), **{**close, "err_msg": f"{where}: {name}"})
    np.testing.assert_array_equal(obs["action_mask"][0], np.isin(np.arange(10), [3, 4, 5, 9]).astype(np.int8))


def test_start_without_trading_realtime_by_hand():
    engine = engine_for(scenario(), trade_realtime=False)
    s = engine.state
    assert s.curves[0].tolist() == [[2, 2, 1, 0]] and s.objective[0] == -6.5  # the same start curves
    assert s.earliest[0].tolist() == [3, -1, 3]  # b cannot start in 0..1: no slack there
    assert s.at[0, :, 0].tolist() == [0b0101, 0, 0b0001]  # a on 0-1 or 2-3 at slot 3
    assert s.clock[0] == 3
    assert np.flatnonzero(engine.action_masks()[0]).tolist() == [0, 1, 2, 6, 7, 8, 9]
    obs = observe(engine)
    np.testing.assert_allclose(obs["slots"][0, :, SLOT_FEATURES.index("room")], [0, 0, 0.25, 1], rtol=0, atol=1e-7)
    assert obs["globals"][0, GLOBAL_FEATURES.index("pending")] == pytest.approx(2 / 3)
    assert obs["globals"][0, GLOBAL_FEATURES.index("trade_realtime")] == 0.0


def test_start_padded_to_larger_sizes_by_hand():
    sizes = Sizes(jobs=5, gpus=8, slots=6, apps=2, duration=4)
    engine = engine_for(scenario(), sizes=sizes, batch=1)
    s = engine.state
    assert s.valid[0].tolist() == [True] * 3 + [False] * 2
    assert s.earliest[0].tolist() == [1, 0, 3, -1, -1] and s.clock[0] == 0
    assert s.load[0].tolist() == [2, 2, 2, 0, 0, 0] and s.curves[0].tolist() == [[2, 2, 1, 0, 0, 0], [0] * 6]
    assert s.values[0, 0].tolist() == [6.0, 3.0, 1.5, 0.5, 0.0, 0.0, 0.0]  # nothing is earned from T = 4 on
    assert s.free_now[0].tolist() == [7, 7, 0, 0, 0, 0, 0, 0]  # capped at the padded T + 1; padding GPUs 0
    masks = engine.action_masks()
    assert masks.shape == (1, 5 * 3 + 1) and np.flatnonzero(masks[0]).tolist() == [3, 4, 5, 15]
    obs = observe(engine)
    glob = dict(zip(GLOBAL_FEATURES, obs["globals"][0].tolist(), strict=True))
    assert glob["remaining"] == pytest.approx(4 / 6) and glob["horizon"] == pytest.approx(4 / 6)
    assert glob["gpus"] == pytest.approx(4 / 8) and glob["pending"] == pytest.approx(3 / 5)
    assert obs["slots"][0, :, SLOT_FEATURES.index("inside")].tolist() == [1, 1, 1, 1, 0, 0]
    assert obs["gpus"][0, :, 0].tolist() == [1] * 4 + [0] * 4
    assert not obs["jobs"][0, 3:].any() and not obs["app_info"][0, 1].any()


def test_first_step_pays_the_start_value_by_hand():
    """ADVANCE at slot 0: b moves to its last start 1, where a can start too; the reward is the start's -6.5."""
    engine = engine_for(scenario(), batch=1)
    rewards, done = engine.step([engine.layout.advance])
    assert rewards.tolist() == [-6.5] and not done[0]
    s = engine.state
    assert s.clock[0] == 1 and s.earliest[0].tolist() == [1, 1, 3] and s.unpaid[0] == 0.0
    assert s.at[0, :, 0].tolist() == [0b0001, 0b0011, 0b0001]  # slot 1: a on GPUs 0-1, b on GPU 0 or 1
    assert np.flatnonzero(engine.action_masks()[0]).tolist() == [0, 1, 2, 3, 4, 5, 9]


def test_plan_at_the_start_holds_only_the_inherited_job():
    plan = engine_for(scenario(), batch=1).plan(0)
    assert [(p.job, p.start, tuple(p.gpus)) for p in plan.placements] == [("inh", 0, (2, 3))]
    assert plan.curves == {"chat": [2, 2, 1, 0]}
    assert plan.metrics.objective == -6.5 and plan.metrics.shortfall == 2
