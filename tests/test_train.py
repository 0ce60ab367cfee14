"""Training (lab.training and train.py): config checking, labels from optima, the losses, a smoke run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

from gpu_env.generators import generate  # noqa: E402
from gpu_env.listsched import ListInstance, decode  # noqa: E402
from lab.training import training as tr  # noqa: E402
from lab.training.optima import load_optima  # noqa: E402
from lab.training.scorer import QueueScorer, order_log_prob  # noqa: E402
from lab.training.train_config import ConfigError, choose_device, load_config  # noqa: E402
from tests.conftest import HANG_GUARD_S  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "configs" / "train" / "smoke.yaml"


def smoke_config(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load(SMOKE.read_text())
    data["run_dir"] = str(tmp_path / "run")
    data["export"] = str(tmp_path / "run" / "policy.onnx")
    data.update(changes)
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run_train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "train.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S
    )


# ----------------------------------------------------------------------------- config


def test_shipped_configs_load():
    for path in (ROOT / "configs" / "train").glob("*.yaml"):
        cfg = load_config(path)
        assert cfg.families


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": "x"}, "field seed: expected an integer"),
        ({"families": {"no-such": 1}}, "field families: unknown family 'no-such'"),
        ({"families": {"mixed-control": 0}}, "field families.mixed-control: expected a positive weight"),
        ({"small": {"samples": 0}}, "field small.samples: expected a positive number"),
        ({"small": {"sizes": []}}, "field small.sizes: expected a non-empty list of integers"),
        ({"large": {"sizes": [0]}}, "field large.sizes: expected positive cluster sizes"),
        ({"eval": {"nope": 1}}, "unknown field eval.nope"),
        ({"learning_rate": -1}, "field learning_rate: expected a positive number"),
        ({"imitation_epochs": -2}, "field imitation_epochs: expected a number >= 0"),
        ({"rl": {"algorithm": "a2c"}}, "field rl.algorithm: expected one of ppo, pomo"),
        ({"rl": {"ratio": "token"}}, "field rl.ratio: expected one of job, order"),
        ({"rl": {"epochs": 0}}, "field rl.epochs: expected an integer >= 1"),
        ({"rl": {"clip": 1.5}}, r"field rl.clip: expected a number in \(0, 1\)"),
        ({"rl": {"entropy_coef": -0.1}}, "field rl.entropy_coef: expected a number >= 0"),
        ({"validation": {"seed": 10001}}, "field eval.seed: .* differ from the validation seeds"),
        ({"validation": {"seed": 1}}, "field validation.seed: .* differ from the training seeds"),
    ],
)
def test_bad_configs_name_file_and_field(tmp_path, change, message):
    data = yaml.safe_load(SMOKE.read_text())
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict) and key != "families":
            data[key].update(value)
        else:
            data[key] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_bad_config_exits_2_without_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("seed: [1\n")
    result = run_train("--config", str(path))
    assert result.returncode == 2
    assert "bad.yaml: not valid YAML" in result.stderr and "Traceback" not in result.stderr
    missing = smoke_config(tmp_path, optima=str(tmp_path / "none.json.gz"))
    result = run_train("--config", str(missing), "--no-export")
    assert result.returncode == 2 and "none.json.gz" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "policy.onnx").exists()


def test_set_replaces_a_field_and_is_checked_as_the_file(tmp_path):
    path = smoke_config(tmp_path)
    cfg = load_config(path, ["rl.algorithm=pomo", "small.rounds=5", "seed=3", "validation.seed=500"])
    assert (cfg.rl.algorithm, cfg.small.rounds, cfg.seed, cfg.validation.seed) == ("pomo", 5, 3, 500)
    assert cfg.small.samples == load_config(path).small.samples  # the section's other fields stay
    for item, message in (
        ("rl.epochs=x", "field rl.epochs: expected an integer"),
        ("rl.nope=1", "unknown field rl.nope"),
        ("seed.x=1", "--set 'seed.x=1': field seed is not a section"),
        ("seed", "--set 'seed': expected FIELD=VALUE"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_config(path, [item])
    result = run_train("--config", str(path), "--no-export", "--set", "rl.algorithm=a2c")
    assert result.returncode == 2 and "field rl.algorithm" in result.stderr and "Traceback" not in result.stderr


def test_cuda_without_cuda_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ConfigError, match="--device cuda"):
        choose_device("cuda")
    assert choose_device("auto") == "cpu"


# ----------------------------------------------------------------------------- labels and losses


def test_optimum_replayed_as_an_order():
    """A proven optimum's placed jobs by start; where list scheduling reaches it, the decode equals it."""
    reached = 0
    records = [r for r in load_optima() if r.optimal][:12]
    for rec in records:
        sc = rec.scenario()
        inst = ListInstance.build(sc)
        order = tr.order_from_plan(inst, rec.placements)
        assert sorted(order.tolist()) == np.flatnonzero(inst.pending).tolist()
        starts = {int(j): (int(t), int(a)) for j, t, a in rec.placements}
        placed = [j for j in order if j in starts]
        assert [starts[j] for j in placed] == sorted(starts[j] for j in placed)
        decoded = decode(inst, np.array([order] * 3), np.array([0, 1, 2]))
        assert decoded.objective.max() <= rec.objective + 1e-6  # never above a proven optimum
        reached += decoded.objective.max() >= rec.objective - 1e-6
    assert reached > 0


def test_first_label_is_the_best_of_the_optimum_and_greedy_orders():
    rec = next(r for r in load_optima() if r.optimal)
    item = tr.prepare(rec.scenario(), rec.placements, rec.objective)
    assert item.optimum == rec.objective and item.label_objective <= rec.objective + 1e-6
    again = decode(item.inst, item.label[None], np.array([item.label_mode]))
    assert again.objective[0] == pytest.approx(item.label_objective, abs=1e-6)
    plain = tr.prepare(rec.scenario())
    assert item.label_objective >= plain.label_objective - 1e-9


def test_plackett_luce_log_prob_by_hand():
    scores = torch.tensor([[1.0, 0.0, 2.0, -5.0]])
    orders = torch.tensor([[2, 0, 1, 0]])
    lengths = torch.tensor([3])
    got = float(order_log_prob(scores, orders, lengths)[0])
    e = np.exp
    want = np.log(e(2) / (e(2) + e(1) + e(0))) + np.log(e(1) / (e(1) + e(0))) + 0.0
    assert got == pytest.approx(want, abs=1e-5)
    # The probabilities of every order of three jobs add up to one.
    import itertools

    total = sum(
        float(order_log_prob(scores, torch.tensor([[*p, 0]]), lengths).exp()[0])
        for p in itertools.permutations([0, 1, 2])
    )
    assert total == pytest.approx(1.0, abs=1e-5)


def test_imitation_raises_the_likelihood_of_the_labels():
    torch.manual_seed(0)
    items = [tr.prepare(generate("mixed-control", seed=s)) for s in range(4)]
    model = QueueScorer(hidden=16)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    before = float(tr.imitation_loss(model, items).detach())
    tr.fit_imitation(model, opt, items, epochs=30, batch=4, seed=0)
    assert float(tr.imitation_loss(model, items).detach()) < before - 0.05


def test_self_labelling_never_lowers_a_label():
    torch.manual_seed(0)
    items = [tr.prepare(generate("batch-fragmentation", seed=s)) for s in range(3)]
    before = [it.label_objective for it in items]
    model = QueueScorer(hidden=16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    stats = tr.self_label_round(model, opt, items, 6, np.random.default_rng(0), 1.0, 0.5, 2)
    assert np.isfinite(stats.loss)
    for it, old in zip(items, before, strict=True):
        assert it.label_objective >= old - 1e-9
        again = decode(it.inst, it.label[None], np.array([it.label_mode]))
        assert again.objective[0] == pytest.approx(it.label_objective, abs=1e-6)


def test_gumbel_top_k_draws_follow_the_plackett_luce_log_prob_at_the_temperature():
    """The draws of sample_orders are Plackett-Luce samples of scores / T, whose log-probability draw_log_prob gives."""
    import itertools

    scores = np.array([1.0, 0.0, 2.0, -9.0])
    pending = np.array([0, 1, 2])
    temperature = 0.7
    orders = tr.sample_orders(scores, pending, 30_000, np.random.default_rng(0), temperature)
    counts = {tuple(o): 0 for o in itertools.permutations(pending.tolist())}
    for o in map(tuple, orders.tolist()):
        counts[o] += 1
    perms = torch.tensor([list(p) for p in counts])
    after = torch.tensor([1.0] * 6)
    logp = tr.draw_log_prob(
        torch.tensor(scores, dtype=torch.float32).expand(6, -1),
        torch.zeros(6),  # the mode: p(after) = 1/2
        perms,
        torch.full((6,), 3),
        after,
        temperature,
        per_job=False,
    )
    want = (logp - np.log(0.5)).exp().numpy()
    got = np.array(list(counts.values())) / orders.shape[0]
    assert want.sum() == pytest.approx(1.0, abs=1e-5)
    assert np.abs(got - want).max() < 0.01
    per_job = tr.draw_log_prob(
        torch.tensor(scores, dtype=torch.float32).expand(6, -1), torch.zeros(6), perms, torch.full((6,), 3), after,
        temperature, per_job=True,
    )  # fmt: skip
    assert torch.allclose(per_job, (logp - np.log(0.5)) / 3 + np.log(0.5), atol=1e-5)


def test_clipped_surrogate_by_hand():
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    ratio = torch.tensor([1.5, 0.9, 1.5, 0.5], requires_grad=True)
    value = tr.clipped_surrogate(ratio.log(), adv, 0.2)
    # min(r A, clip(r) A): 1.2 (clipped), 0.9, -1.5, -0.8 (clipped)
    assert float(value.detach()) == pytest.approx((1.2 + 0.9 - 1.5 - 0.8) / 4, abs=1e-6)
    value.backward()
    assert ratio.grad[0] == 0 and ratio.grad[3] == 0  # no push past the clip
    assert ratio.grad[1] > 0 and ratio.grad[2] < 0


def test_explained_variance_of_the_group_baseline():
    assert tr.explained_variance([np.array([1.0, 1.0]), np.array([2.0, 2.0])]) == pytest.approx(1.0)
    assert tr.explained_variance([np.array([1.0, 2.0]), np.array([1.0, 2.0])]) == pytest.approx(0.0)
    assert tr.explained_variance([np.array([3.0, 3.0])]) == 0.0  # nothing to explain


def test_a_ppo_round_stores_the_drawing_policy_and_never_lowers_a_label():
    from lab.training.train_config import RLConfig

    torch.manual_seed(0)
    items = [tr.prepare(generate(f, seed=s)) for f in ("batch-fragmentation", "mixed-control") for s in range(2)]
    model = QueueScorer(hidden=16)
    before = [it.label_objective for it in items]
    draws = tr.collect_draws(model, items, 6, np.random.default_rng(0), 1.0, 3, True, tr.RoundStats())
    # The stored log-probabilities are the policy's: before any step every ratio is 1.
    for it, d in zip(items, draws, strict=True):
        scores, mode = model(*tr.collate([it]))
        orders, lengths = tr.pad_orders(list(d.orders))
        again = tr.draw_log_prob(
            scores.expand(6, -1), mode.expand(6), orders, lengths, torch.from_numpy(d.after), 1.0, per_job=True
        )
        assert np.allclose(again.detach().numpy(), d.old_log_prob, atol=1e-5)
        assert d.orders.shape == (6, it.pending.size) and d.reward.shape == (6,)
        assert abs(float(d.advantage.mean())) < 1e-6  # centred on the group's mean
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    stats = tr.ppo_round(model, opt, items, 6, np.random.default_rng(1), 1.0, 1.0, 2, RLConfig(epochs=3))
    assert isinstance(stats, tr.PPOStats) and np.isfinite(stats.loss)
    assert 0.0 <= stats.clip_fraction <= 1.0 and stats.approx_kl >= 0.0 and stats.approx_kl > 0.0
    assert stats.explained_variance <= 1.0 and stats.entropy > 0
    for it, old in zip(items, before, strict=True):
        assert it.label_objective >= old - 1e-9
        again = decode(it.inst, it.label[None], np.array([it.label_mode]))
        assert again.objective[0] == pytest.approx(it.label_objective, abs=1e-6)


# ----------------------------------------------------------------------------- the smoke run


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("smoke")
    result = run_train("--config", str(smoke_config(tmp)))
    assert result.returncode == 0, result.stderr
    return tmp, result


def test_smoke_run_writes_tensorboard_events_and_a_summary(smoke_run):
    tmp, result = smoke_run
    events = list((tmp / "run" / "tb").glob("events.out.tfevents.*"))
    assert events
    summary = json.loads((tmp / "run" / "summary.json").read_text())
    phases = [h["phase"] for h in summary["history"]]
    assert phases == ["imitation", "small", "small", "large"]
    assert summary["device"] == "cpu" and summary["best"] in summary["history"]
    assert "labels: 6 CP-SAT plans" in result.stderr
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = set()
    for path in events:
        acc = EventAccumulator(str(path))
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
    ppo = {"ppo/clip_fraction", "ppo/approx_kl", "ppo/explained_variance", "ppo/entropy", "ppo/surrogate"}
    assert ppo <= tags and "validation/shipped_vs_greedy" in tags and "eval/shipped_vs_greedy" in tags


def test_smoke_run_selects_on_validation_and_reports_the_evaluation(smoke_run):
    tmp, _ = smoke_run
    summary = json.loads((tmp / "run" / "summary.json").read_text())
    cfg = load_config(smoke_config(tmp))
    selection, evaluation = summary["selection"], summary["evaluation"]
    assert selection["set"] == "validation" and selection["seed"] == cfg.validation.seed
    assert selection["instances"] == [cfg.validation.instances, cfg.validation.large_instances]
    assert {k: v for k, v in selection.items() if k in summary["best"]} == summary["best"]
    chosen = max(
        summary["history"],
        key=lambda h: h["alone_vs_greedy"] + h["shipped_vs_greedy"] + h["large_alone_vs_greedy"]
        + h["large_shipped_vs_greedy"],
    )  # fmt: skip
    assert summary["best"] == chosen
    assert evaluation["set"] == "eval" and evaluation["seed"] == cfg.eval.seed != cfg.validation.seed
    assert evaluation["instances"] == [cfg.eval.instances, cfg.eval.large_instances]
    assert (evaluation["phase"], evaluation["step"]) == (selection["phase"], selection["step"])
    assert set(evaluation["per_family"]) <= set(cfg.families)


def test_smoke_run_exports_a_policy_the_planner_loads(smoke_run):
    from agents import ppo
    from gpu_env.validation import validate

    tmp, _ = smoke_run
    path = tmp / "run" / "policy.onnx"
    card = json.loads(path.with_suffix(".json").read_text())
    assert card["format"] == ppo.CARD_FORMAT == "gpualloc-policy/3"
    assert card["config"]["hidden"] == 16 and card["config"]["rl"]["algorithm"] == "ppo" and card["history"]
    assert card["selection"]["set"] == "validation" and card["evaluation"]["set"] == "eval"
    assert {k: v for k, v in card["selection"].items() if k in card["history"][0]} in card["history"]
    sc = generate("training-heavy", seed=3)
    plan = ppo.plan(sc, ppo.PlanOptions(policy=path, samples=3, guard="none"))
    assert validate(sc, plan) == []


def test_same_seed_same_policy(smoke_run, tmp_path):
    tmp, _ = smoke_run
    result = run_train("--config", str(smoke_config(tmp_path)))
    assert result.returncode == 0, result.stderr
    first = json.loads((tmp / "run" / "summary.json").read_text())["history"]
    second = json.loads((tmp_path / "run" / "summary.json").read_text())["history"]
    clocks = ("seconds", "cpu_seconds")
    strip = [{k: v for k, v in h.items() if k not in clocks} for h in first]
    assert strip == [{k: v for k, v in h.items() if k not in clocks} for h in second]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_training_on_cuda(tmp_path):
    result = run_train("--config", str(smoke_config(tmp_path)), "--device", "cuda")
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["device"] == "cuda" and np.isfinite(summary["best"]["shipped_vs_greedy"])


def test_held_out_seeds_apart_from_training(tmp_path):
    for bad in (0, 1, -1):
        with pytest.raises(ConfigError, match=r"field eval\.seed"):
            load_config(smoke_config(tmp_path, eval={"seed": bad}))
    with pytest.raises(ConfigError, match=r"field validation\.seed"):
        load_config(smoke_config(tmp_path, validation={"seed": 0}))


def test_training_validation_and_evaluation_draw_no_instance_in_common():
    from lab.training.train_config import draw_specs

    cfg = load_config(ROOT / "configs" / "train" / "default.yaml")
    draws = cfg.draws()
    sets = {
        name: {d for key in keys for d in draw_specs(cfg.families, *draws[key])}
        for name, keys in {
            "training": ("small", "large"),
            "validation": ("validation", "validation_large"),
            "eval": ("eval", "eval_large"),
        }.items()
    }
    assert len(sets["validation"]) == cfg.validation.instances + cfg.validation.large_instances
    assert len(sets["eval"]) == cfg.eval.instances + cfg.eval.large_instances
    assert not sets["training"] & sets["validation"] and not sets["training"] & sets["eval"]
    assert not sets["validation"] & sets["eval"]
