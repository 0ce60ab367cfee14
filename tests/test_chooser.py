"""The live chooser: its features, its planner, its labels, its three training stages and its ONNX file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agents.live.allocator import ClusterState
from agents.live.anticipate import AnticipatingPlanner
from agents.live.forecast import NoiseModel, with_demand
from agents.policy_files import PolicyError
from agents.simulator.simulation import LiveDay, rolling
from gpu_env.generators import generate
from gpu_env.validation import validate
from lab.live_chooser import (
    FEATURES,
    KINDS,
    STATS,
    ChooserPlanner,
    candidate_features,
    day_fraction,
    kind_of,
    load_policy,
)
from lab.training.chooser_training import Cycle, DaySpec, NumpyScorer, base_decider, day_planner, label_cycle, play_day

COL = {name: i for i, name in enumerate(FEATURES)}


def race_pick(features: np.ndarray) -> np.ndarray:
    """A scorer that ranks the race's pick first: the chooser then is ``anticipate``."""
    return np.asarray(features)[:, COL["race_pick"]].astype(np.float64)


def last(features: np.ndarray) -> np.ndarray:
    """A scorer that ranks the last candidate first (a departure wherever there are two or more)."""
    return np.arange(len(features), dtype=np.float64)


# ----------------------------------------------------------------------------- features


def test_features_hand_worked() -> None:
    """Base 10, 10; a hold 12, 9: gains +0.2 and -0.1 of the base's value (mean 0.05), best in one future of two."""
    values = np.array([[10.0, 10.0], [12.0, 9.0]])
    state = ClusterState(gpus=8, horizon=4, error_level=(0.2,))
    f = candidate_features(values, ("the base plan", "holding j1"), 1, state, 6, 24)
    assert f.shape == (2, len(FEATURES))
    assert f[1, COL["gain_mean"]] == pytest.approx(0.05)
    assert f[1, COL["share_best"]] == pytest.approx(0.5) and f[0, COL["share_best"]] == pytest.approx(0.5)
    assert f[1, COL["regret_mean"]] == pytest.approx(0.05)  # (0 + 1) / 2 / 10
    assert f[1, COL["share_no_worse"]] == pytest.approx(0.5) and f[0, COL["share_no_worse"]] == 1.0
    assert f[1, COL["kind_holding one"]] == 1.0 and f[0, COL["kind_base"]] == 1.0
    assert f[1, COL["race_pick"]] == 1.0 and f[0, COL["race_pick"]] == 0.0
    assert f[0, COL["slot_of_day"]] == pytest.approx(0.25) and f[0, COL["error_level"]] == pytest.approx(0.2)
    assert kind_of("margin -1") == ("margin", -1.0) and len(STATS) + len(KINDS) + 4 == len(FEATURES)


def test_the_slot_of_the_day_is_read_one_way_wherever_the_horizon_ends() -> None:
    """The horizon convention: ``now / day_slots``, whatever horizon the state plans (a Slurm state's runs past
    the day's end, a simulator state's stops there)."""
    values = np.array([[10.0, 10.0], [11.0, 9.0]])
    short = ClusterState(gpus=8, horizon=6)  # the simulator at slot 18 of 24: 6 slots left
    long = ClusterState(gpus=8, horizon=24)  # a Slurm state at slot 18: a 24-slot window
    a = candidate_features(values, ("the base plan", "margin 1"), 0, short, 18, 24)
    b = candidate_features(values, ("the base plan", "margin 1"), 0, long, 18, 24)
    assert np.array_equal(a, b) and a[0, COL["slot_of_day"]] == pytest.approx(0.75)
    assert day_fraction(30, 24) == 1.0 and day_fraction(-1, 24) == 0.0


# ----------------------------------------------------------------------------- the planner


def _day(family: str = "mixed-control", seed: int = 61000) -> tuple:
    return day_planner(DaySpec(family, seed, 0.3, "exact"))


def test_a_chooser_that_ranks_the_race_pick_first_is_anticipate() -> None:
    day, realized, runtimes, planner = _day()
    chooser = ChooserPlanner(planner, race_pick, day.slots)
    ours = rolling(day, chooser, realized, runtimes=runtimes)
    theirs = rolling(day, planner, realized, runtimes=runtimes)
    assert ours.metrics.objective == theirs.metrics.objective
    assert chooser.departures.cycles > 0 and chooser.departures.from_race == 0


def test_every_departure_of_a_chooser_keeps_the_rules() -> None:
    """A chooser that always takes the last candidate: every slot's plan is validated (rolling checks it)."""
    day, realized, runtimes, planner = _day("priority-inversion", 61001)
    chooser = ChooserPlanner(planner, last, day.slots)
    sim = rolling(day, chooser, realized, runtimes=runtimes)
    assert validate(realized, sim.executed) == []
    assert chooser.departures.from_race > 0 and len(chooser.departures.slots) == chooser.departures.from_race
    assert sum(bool(r.chosen) for r in sim.slots if r.replanned) >= chooser.departures.from_race


def test_play_day_by_the_race_is_the_rolling_day_of_anticipate() -> None:
    day, realized, runtimes, planner = _day()
    played = play_day(DaySpec("mixed-control", 61000, 0.3, "exact"), "race")
    assert played.objective == pytest.approx(rolling(day, planner, realized, runtimes=runtimes).metrics.objective)
    assert played.departures == 0 and all(c.action == c.pick for c in played.cycles)


# ----------------------------------------------------------------------------- labels


def test_the_target_is_the_race_pick_unless_a_candidate_earns_clearly_more() -> None:
    cycle = Cycle(np.zeros((3, len(FEATURES))), np.array([100.0, 100.1, 99.0]), pick=2, action=2)
    assert cycle.gains()[0] == pytest.approx(1 / 99)
    assert cycle.target(0.02) == 2 and cycle.target(0.002) == 1
    assert Cycle.from_dict(cycle.to_dict()).target(0.002) == 1


def test_a_label_of_the_base_decision_is_the_base_day() -> None:
    """Committing the base decision now and playing the base after is exactly the base planner's day."""
    day = generate("training-heavy", 3)
    actual = with_demand(day, NoiseModel(0.3).draw(day, 3))
    base = AnticipatingPlanner()
    live = LiveDay(day, actual, corrector=base.forecaster)
    for _ in range(5):
        state, ran = live.state()
        live.commit(base.decide(state, live.t, ran))
    state, ran = live.state()
    value = label_cycle(live, [base.decide(state, live.t, ran)], base_decider(base))
    assert value[0] == pytest.approx(rolling(day, base, actual).metrics.objective)


# ----------------------------------------------------------------------------- training


def _separable(n: int = 60, seed: int = 0) -> list[Cycle]:
    """Cycles whose best candidate is the one with a positive ``gain_mean``; the race picks the base."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        features = rng.normal(0, 1, (3, len(FEATURES))).astype(np.float32)
        best = int(rng.integers(3))
        features[:, 0] = -1.0
        features[best, 0] = 1.0
        realized = np.full(3, 100.0)
        realized[best] = 110.0
        out.append(Cycle(features, realized, pick=0, action=0))
    return out


def test_imitation_learns_a_separable_choice() -> None:
    pytest.importorskip("torch")
    from lab.training.chooser_training import ChooserNet, imitate

    cycles = _separable()
    net = ChooserNet.for_cycles(cycles, hidden=16, seed=0)
    assert imitate(net, cycles, epochs=80) == 1.0
    score = net.scorer()
    assert all(int(np.argmax(score(c.features))) == int(np.argmax(c.realized)) for c in cycles)


def test_a_ppo_update_makes_a_choice_with_a_positive_advantage_likelier() -> None:
    """Drawn choices: candidate 1 gained over the race's pick, candidate 2 lost; PPO raises 1 and lowers 2."""
    pytest.importorskip("torch")
    from lab.training.chooser_training import ChooserNet, ppo_update

    features = np.eye(3, len(FEATURES), dtype=np.float32)
    cycles = [
        Cycle(features, np.array([100.0, 105.0, 95.0]), pick=0, action=a, logp=float(np.log(1 / 3))) for a in (1, 2)
    ] * 20
    net = ChooserNet.for_cycles(cycles, hidden=8, seed=0)
    before = net.scorer()(features)
    info = ppo_update(net, cycles, epochs=8, lr=1e-2)
    after = net.scorer()(features)
    assert info["departures"] == 1.0 and info["mean_gain"] == pytest.approx(0.0)
    assert after[1] - after[2] > before[1] - before[2]


def test_the_exported_network_scores_as_the_trained_one_and_reads_its_card(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from lab.training.chooser_training import ChooserNet, export_onnx, imitate

    cycles = _separable(20)
    net = ChooserNet.for_cycles(cycles, hidden=8, seed=0)
    imitate(net, cycles, epochs=5)
    scorer = net.scorer()
    export_onnx(net, tmp_path / "c.onnx", {"kept": "imitation"})
    policy = load_policy(tmp_path / "c.onnx")
    assert policy.card["kept"] == "imitation" and policy.card["spec"]["features"] == list(FEATURES)
    for c in cycles[:5]:
        (onnx_scores,) = policy.session.run(None, {"features": c.features})
        assert np.allclose(onnx_scores, scorer(c.features), atol=1e-4)
    again = NumpyScorer.from_dict(scorer.to_dict())
    assert np.array_equal(again(cycles[0].features), scorer(cycles[0].features))


def test_a_chooser_card_for_other_features_is_one_clear_error(tmp_path: Path) -> None:
    onnx = tmp_path / "c.onnx"
    onnx.write_bytes(b"not onnx")
    with pytest.raises(PolicyError, match="live chooser policy card"):
        load_policy(onnx)
    card = {"format": "gpualloc-live-chooser/1", "spec": {"features": ["gain_mean"]}}
    (tmp_path / "c.json").write_text(json.dumps(card))
    with pytest.raises(PolicyError, match=r"field 'spec\.features': the chooser was trained on \['gain_mean'\]"):
        load_policy(onnx)


def test_the_networks_train_on_cuda_where_there_is_one() -> None:
    """``train_live.py --device cuda``: the imitation and PPO stages run on the GPU and score as on the CPU."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from lab.training.chooser_training import ChooserNet, imitate, ppo_update

    cycles = _separable()
    net = ChooserNet.for_cycles(cycles, hidden=16, seed=0, device="cuda")
    assert imitate(net, cycles, epochs=80) == 1.0
    drawn = [Cycle(c.features, c.realized, c.pick, int(np.argmax(c.realized)), float(np.log(1 / 3))) for c in cycles]
    ppo_update(net, drawn, epochs=2)
    score = net.scorer()
    assert all(int(np.argmax(score(c.features))) == int(np.argmax(c.realized)) for c in cycles)


def test_the_shipped_chooser_departs_on_its_validation_days() -> None:
    """The shipped chooser takes, on a validation day it was chosen on, a candidate that is neither
    the base decision nor ``anticipate``'s (the retired raw-action policy never did)."""
    from lab.live_chooser import POLICY, onnx_scorer

    if not POLICY.is_file():
        pytest.skip("no shipped live chooser")
    policy = load_policy(POLICY)
    first, last_seed = policy.card["valid_seeds"]
    runtimes = policy.card["settings"]["runtimes"]
    scorer, margin = onnx_scorer(policy), float(policy.card.get("margin", 0.0))
    for seed in range(first, last_seed + 1):
        for family in ("mixed-control", "priority-inversion", "training-heavy"):
            for runtime in runtimes:
                spec = DaySpec(family, seed, policy.card["settings"]["sigma"], runtime)
                if play_day(spec, "argmax", scorer, margin=margin).departures:
                    return
    pytest.fail("the shipped chooser never departs from the base decision and anticipate's pick")
