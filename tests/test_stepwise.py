"""The stepwise policy: its compiled turn-by-turn decoder, its features against a fresh computation, the planner
(``ppo-stepwise``) with the shipped policy, its card checks, the export round trip and training's seeding."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents import greedy
from agents import ppo_stepwise as stepwise
from agents.options import PlanOptions
from agents.ppo import PolicyError
from agents.registry import run_scheduler
from gpu_env import listsched, placement
from gpu_env import stepwise as compiled
from gpu_env.generators import FAMILIES, generate
from gpu_env.listsched import MODE_AFTER, MODE_INLINE, MODES, ListInstance, decode, new_live, new_scratch
from gpu_env.queue_features import cluster_features, job_features
from gpu_env.scenario import Scenario
from gpu_env.stepwise import STEP_FEATURES, WINDOW, StepHead
from gpu_env.validation import validate

D = len(STEP_FEATURES)
F = {name: i for i, name in enumerate(STEP_FEATURES)}


def quiet(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_head(rng: np.random.Generator, n: int, hidden: int = 6) -> tuple[np.ndarray, StepHead]:
    rows = rng.normal(size=(n, hidden))
    head = StepHead(rng.normal(size=(D, hidden)), rng.normal(size=hidden), rng.normal(size=1))
    return rows, head


def rank_head(n: int, hidden: int = 4) -> tuple[np.ndarray, StepHead]:
    """A head whose score falls with the window rank only: the argmax is the window's first job."""
    rows = np.zeros((n, hidden))
    rows[:, 0] = 1.0
    w_step = np.zeros((D, hidden))
    w_step[STEP_FEATURES.index("window_rank"), 0] = -0.9
    return rows, StepHead(w_step, np.eye(hidden)[0], np.zeros(1))


def ranked(sc: Scenario) -> tuple[ListInstance, np.ndarray, np.ndarray, StepHead]:
    """A scenario's list instance and priority base, and a head that reads only the window rank."""
    inst = ListInstance.build(sc)
    rows, head = rank_head(len(sc.jobs))
    return inst, stepwise.priority_base(sc, inst), rows, head


def drawn_case(
    family: str, seed: int, gpus: int, weights: int
) -> tuple[Scenario, ListInstance, np.ndarray, np.ndarray, StepHead]:
    """A family's scenario, its list instance and priority base, and a random head (seeded by ``weights``)."""
    sc = generate(family, seed, gpus=gpus)
    inst = ListInstance.build(sc)
    rows, head = random_head(np.random.default_rng(weights), len(sc.jobs))
    return sc, inst, stepwise.priority_base(sc, inst), rows, head


CASES = {
    "family": st.sampled_from(sorted(FAMILIES)),
    "seed": st.integers(0, 10_000),
    "gpus": st.sampled_from((8, 16, 32)),
    "mode": st.sampled_from(sorted(MODES.values())),
    "weights": st.integers(0, 2**31),
}


@quiet(30)
@given(**CASES)
def test_a_rollout_is_its_order_decoded(family: str, seed: int, gpus: int, mode: int, weights: int):
    """The turn order replayed by the decoder gives the rollout's plan: one rule set, placed by the decoder."""
    sc, inst, base, rows, head = drawn_case(family, seed, gpus, weights)
    r = compiled.roll(inst, base, rows, head, mode, temperature=0.5, seed=weights)
    assert sorted(r.order[: r.turns].tolist()) == sorted(base.tolist()) and r.turns == base.size
    replayed = decode(inst, r.order[None], np.array([mode]))
    assert replayed.objective[0] == pytest.approx(r.objective, abs=1e-9)
    assert validate(sc, replayed.plan(0, sc, "stepwise")) == []
    # Each turn's choice is in its window, and the window is the first undecided jobs in priority order.
    decided: set[int] = set()
    for i in range(r.turns):
        window = [j for j in r.window[i].tolist() if j >= 0]
        assert window == [j for j in base.tolist() if j not in decided][:WINDOW]
        assert r.order[i] == window[r.chosen[i]]
        decided.add(int(r.order[i]))


@quiet(25)
@given(**CASES)
def test_the_cached_earliest_starts_are_the_fresh_ones(family: str, seed: int, gpus: int, mode: int, weights: int):
    """Each turn's features, replayed turn by turn on the decoder's own state, from an earliest start found anew."""
    sc, inst, base, rows, head = drawn_case(family, seed, gpus, weights)
    mode = mode if sc.apps else listsched.MODE_OFF
    r = compiled.roll(inst, base, rows, head, mode, temperature=1.0, seed=weights)
    live, sc_ = new_live(inst), new_scratch(inst)
    how = listsched.choice()
    T = inst.slots
    for i in range(r.turns):
        listsched._set_room(inst, live.load, live.curves, sc_, live.excess)
        for w, j in enumerate(r.window[i].tolist()):
            if j < 0:
                continue
            t, _ = placement.earliest(inst, j, live.busy, sc_.room, sc_.span)
            fits, delay = r.features[i, w, 0], r.features[i, w, 1]
            assert fits == (1.0 if t >= 0 else 0.0), (i, j)
            assert delay == pytest.approx((t - inst.lo[j]) / T if t >= 0 else 1.0)
            if t >= 0:
                assert r.features[i, w, STEP_FEATURES.index("value_kept")] == pytest.approx(
                    inst.values[j, t] / inst.first_value[j]
                )
                assert r.features[i, w, F["trade_only"]] == 0.0 and r.features[i, w, F["trade_cost"]] == 0.0
                continue
            # No start in the room: the features of a trade, at the earliest start above the ramp floors.
            tf, _ = placement.earliest(inst, j, live.busy, sc_.floor_room, sc_.span)
            assert r.features[i, w, F["trade_only"]] == (1.0 if tf >= 0 else 0.0), (i, j)
            if tf < 0:
                assert r.features[i, w, F["trade_cost"]] == 0.0
                continue
            v, k, d = inst.values[j, tf], inst.k[j], inst.d[j]
            assert r.features[i, w, F["value_kept"]] == pytest.approx(v / inst.first_value[j])
            assert r.features[i, w, F["deadline_slack"]] == pytest.approx((inst.hi[j] - 1 - tf) / T)
            taken = sum(max(0, k - sc_.room[s] - live.excess[s]) for s in range(tf, min(tf + d, T)))
            cost = inst.min_penalty * taken if taken else 0.0
            want = min(compiled.TRADE_COST_CAP, cost / v) if v > 0 else compiled.TRADE_COST_CAP
            assert r.features[i, w, F["trade_cost"]] == pytest.approx(want)
        listsched.take_turn(inst, live, int(r.order[i]), mode == MODE_INLINE, how, sc_)


def test_a_job_that_fits_only_by_a_trade_shows_its_value_and_the_trades_cost():
    """training-heavy seed 20002 (8 GPUs): the 8-GPU, priority-8 job fits only by taking the app's GPU for 6 slots."""
    sc = generate("training-heavy", 20_002)
    inst, base, rows, head = ranked(sc)
    r = compiled.roll(inst, base, rows, head, MODE_INLINE)
    j = [job.id for job in sc.jobs].index("train-6")
    w = r.window[0].tolist().index(j)
    f = r.features[0, w]
    assert f[F["fits"]] == 0.0 and f[F["trade_only"]] == 1.0 and f[F["value_share"]] == 1.0
    app = sc.apps[0]
    start = 4  # its release: the cluster is empty then but for the app's demand
    taken = sum(app.demand[start : start + 6])  # all 8 GPUs for 6 slots: the app's whole demand there (1,1,1,1,1,2)
    assert taken == 7
    want = app.penalty * taken / inst.values[j, start]
    assert f[F["trade_cost"]] == pytest.approx(want)


def test_a_head_for_another_feature_set_is_refused():
    sc = generate("mixed-control", 0)
    inst = ListInstance.build(sc)
    rows, head = rank_head(len(sc.jobs))
    short = StepHead(head.w_step[:-1], head.w_out, head.b_out)
    with pytest.raises(ValueError, match="one row per step feature"):
        compiled.roll(inst, stepwise.priority_base(sc, inst), rows, short, MODE_INLINE)
    with pytest.raises(ValueError, match="one row per step feature"):
        compiled.orders(inst, stepwise.priority_base(sc, inst), rows, short, np.array([1]), np.zeros(1))


def test_a_head_that_reads_only_the_rank_sweeps_in_greedy_priority_order():
    for family in sorted(FAMILIES):
        sc = generate(family, 20_000)
        inst = ListInstance.build(sc)
        base = stepwise.priority_base(sc, inst)
        assert base.tolist() == greedy.orderings(sc, ["weight"])[0]
        rows, head = rank_head(len(sc.jobs))
        got = compiled.orders(inst, base, rows, head, np.array([MODE_INLINE, MODE_AFTER]), np.zeros(2))
        assert (got == base[None]).all()


def test_orders_checks_its_inputs():
    sc = generate("mixed-control", 0)
    inst = ListInstance.build(sc)
    rows, head = rank_head(len(sc.jobs))
    with pytest.raises(ValueError, match="modes and temperatures"):
        compiled.orders(inst, stepwise.priority_base(sc, inst), rows, head, np.array([1, 2]), np.zeros(3))


# ----------------------------------------------------------------------------- the planner


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_shipped_policy_plans_validate_and_more_candidates_never_plan_worse(family: str):
    sc = generate(family, seed=20_003)
    one = run_scheduler("ppo-stepwise", sc, PlanOptions(samples=1, guard="none"))
    assert validate(sc, one) == [] and one.scheduler == "ppo-stepwise"
    for seed in range(3):
        many = run_scheduler("ppo-stepwise", sc, PlanOptions(samples=12, guard="none", seed=seed))
        assert validate(sc, many) == []
        assert many.info["objectives"][0] == one.info["objectives"][0]
        assert many.metrics.objective >= one.metrics.objective - 1e-6
    shipped = run_scheduler("ppo-stepwise", sc)
    assert shipped.metrics.objective >= run_scheduler("fifo", sc).metrics.objective - 1e-6  # the FIFO guard


def test_same_seed_same_plan_and_seeds_differ():
    sc = generate("uniform-priority", seed=4)
    a = stepwise.plan(sc, PlanOptions(samples=8, guard="none", seed=3))
    b = stepwise.plan(sc, PlanOptions(samples=8, guard="none", seed=3))
    c = stepwise.plan(sc, PlanOptions(samples=8, guard="none", seed=4))
    assert a.info == b.info and a.placements == b.placements
    assert a.info["objectives"][:2] == c.info["objectives"][:2]  # the argmax candidates are not drawn
    assert a.info["objectives"][2:] != c.info["objectives"][2:]


def test_larger_clusters_than_in_training():
    sc = generate("scale-64x30", seed=1, gpus=512)
    plan = stepwise.plan(sc, PlanOptions(samples=3, guard="none"))
    assert validate(sc, plan) == [] and len(plan.placements) > 0


def test_the_shipped_card_matches_the_planner():
    card = json.loads(stepwise.DEFAULT_POLICY.with_suffix(".json").read_text())
    assert card["format"] == stepwise.CARD_FORMAT
    assert card["observation_spec"] == stepwise.observation_spec()
    assert card["temperature"] > 0 and "selection" in card and "evaluation" in card


@pytest.fixture
def copied(tmp_path):
    onnx = tmp_path / "p.onnx"
    shutil.copy(stepwise.DEFAULT_POLICY, onnx)
    shutil.copy(stepwise.DEFAULT_POLICY.with_suffix(".json"), onnx.with_suffix(".json"))
    return onnx


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda card: card.update(format="gpualloc-policy/3"), "field 'format'"),
        (lambda card: card["observation_spec"].update(window=3), "field 'observation_spec'"),
        (lambda card: card.update(temperature=0), "field 'temperature'"),
        (lambda card: card.update(temperature="hot"), "field 'temperature'"),
    ],
)
def test_a_card_for_another_planner_is_refused(copied, change, message):
    card = json.loads(copied.with_suffix(".json").read_text())
    change(card)
    copied.with_suffix(".json").write_text(json.dumps(card))
    with pytest.raises(PolicyError, match=message):
        stepwise.load_policy(copied)


def test_missing_or_corrupt_files_are_refused(copied, tmp_path):
    with pytest.raises(PolicyError, match="not found"):
        stepwise.load_policy(tmp_path / "none.onnx")
    copied.write_bytes(b"not onnx")
    with pytest.raises(PolicyError, match="not a loadable ONNX"):
        stepwise.load_policy(copied)
    copied.with_suffix(".json").write_text("{")
    with pytest.raises(PolicyError, match="not a readable JSON"):
        stepwise.load_policy(copied)


def test_cli_names_a_bad_policy_in_one_line(copied, tmp_path, capsys):
    from agents.cli import main as cli_main
    from gpu_env.scenario import save_scenario

    scenario = tmp_path / "s.yaml"
    save_scenario(generate("mixed-control", 0), scenario)
    copied.write_bytes(b"not onnx")
    code = cli_main(["plan", str(scenario), "--scheduler", "ppo-stepwise", "--policy", str(copied)])
    err = capsys.readouterr().err
    assert code != 0 and "not a loadable ONNX" in err and "Traceback" not in err


# ----------------------------------------------------------------------------- export and training

torch = pytest.importorskip("torch")


def test_export_round_trips_into_the_planner(tmp_path):
    from lab.training import stepwise_training as learned

    torch.manual_seed(0)
    model = learned.StepScorer(hidden=8, width=16)
    path = tmp_path / "s.onnx"
    card = learned.export_stepwise(model, path, 0.7, {"seed": 0})
    assert card["observation_spec"] == stepwise.observation_spec()
    policy = stepwise.load_policy(path)
    sc = generate("batch-fragmentation", 2)
    inst = ListInstance.build(sc)
    rows, head = policy.network(job_features(sc, inst), cluster_features(sc, inst))
    case = learned.make_case(sc)
    assert np.allclose(rows, learned.static_rows(model, case), atol=1e-5)
    want = model.head()
    assert all(np.allclose(g, w, atol=1e-6) for g, w in zip(head, want, strict=True))
    # The untrained network sweeps greedy's priority order, as documented.
    got = compiled.orders(inst, case.base, rows, head, np.array([MODE_INLINE]), np.zeros(1))
    assert got[0].tolist() == case.base.tolist()
    plan = stepwise.plan(sc, PlanOptions(policy=path, samples=4))
    assert validate(sc, plan) == []


def test_torch_scores_are_the_compiled_scores():
    """The log-probabilities training takes: the compiled argmax is the torch argmax at each turn."""
    from lab.training import stepwise_training as learned

    torch.manual_seed(1)
    model = learned.StepScorer(hidden=8, width=16)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    case = learned.make_case(generate("realtime-diurnal", 5))
    r = compiled.roll(case.item.inst, case.base, learned.static_rows(model, case), model.head(), MODE_INLINE)
    turns = learned.collect([(0, r, 0.0, False)])
    picked, _ = learned.log_probs(model, [case], turns, np.arange(turns.chosen.size))
    rows = model.rows(case.jobs, case.cluster)
    for i in range(turns.chosen.size):
        window = turns.window[i]
        valid = window >= 0
        scores = model.scores(rows[np.maximum(window, 0)][None], torch.as_tensor(turns.features[i][None]).float())[0]
        assert int(torch.argmax(scores.masked_fill(~torch.as_tensor(valid), -1e9))) == turns.chosen[i]
    assert torch.all(picked <= 0)


def test_training_is_seeded():
    from lab.training import stepwise_training as learned

    def run() -> list[float]:
        torch.manual_seed(0)
        cases = [learned.make_case(generate(f, 70_000)) for f in ("mixed-control", "batch-fragmentation")]
        model = learned.StepScorer(hidden=8, width=16)
        losses = learned.imitate(model, cases, epochs=2, seed=0)
        config = learned.PPOConfig(iterations=2, cases_per_iteration=2, rollouts=4, validate_every=1)
        state, history = learned.ppo(model, cases, cases[:1], config, seed=0, keep_initial=False)
        return [*losses, *(h["valid"] for h in history), float(state["b_out"][0])]

    assert run() == run()


def test_a_forced_first_turn_takes_that_window_position_and_the_policy_decides_the_rest():
    """POMO's multiple starts: ``first`` decides the first turn only; the rollout still decodes to its own plan."""
    sc = generate("mixed-control", 3)
    inst, base, rows, head = ranked(sc)
    plain = compiled.roll(inst, base, rows, head, MODE_INLINE)
    forced = compiled.roll(inst, base, rows, head, MODE_INLINE, first=3)
    assert plain.chosen[0] == 0 and forced.chosen[0] == 3 and forced.order[0] == base[3]
    assert forced.chosen[1 : forced.turns].tolist() == [0] * (forced.turns - 1)  # the rank head: the window's first
    replayed = decode(inst, forced.order[None], np.array([MODE_INLINE]))
    assert replayed.objective[0] == pytest.approx(forced.objective, abs=1e-9)
    too_far = compiled.roll(inst, base, rows, head, MODE_INLINE, first=WINDOW)  # beyond the window: no effect
    assert too_far.order.tolist() == plain.order.tolist()
