"""Training (agents.learned and train.py): config checking, labels from optima, the losses, a smoke run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

from agents.learned import training as tr  # noqa: E402
from agents.learned.config import ConfigError, choose_device, load_config  # noqa: E402
from agents.learned.optima import load_optima  # noqa: E402
from agents.learned.scorer import QueueScorer, order_log_prob  # noqa: E402
from gpu_env.generators import generate  # noqa: E402
from gpu_env.listsched import ListInstance, decode  # noqa: E402
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


def test_smoke_run_exports_a_policy_the_planner_loads(smoke_run):
    from agents import ppo
    from gpu_env.validation import validate

    tmp, _ = smoke_run
    path = tmp / "run" / "policy.onnx"
    card = json.loads(path.with_suffix(".json").read_text())
    assert card["config"]["hidden"] == 16 and card["history"] and card["evaluation"] in card["history"]
    sc = generate("training-heavy", seed=3)
    plan = ppo.plan(sc, ppo.PlanOptions(policy=path, samples=3, guard="none"))
    assert validate(sc, plan) == []


def test_same_seed_same_policy(smoke_run, tmp_path):
    tmp, _ = smoke_run
    result = run_train("--config", str(smoke_config(tmp_path)))
    assert result.returncode == 0, result.stderr
    first = json.loads((tmp / "run" / "summary.json").read_text())["history"]
    second = json.loads((tmp_path / "run" / "summary.json").read_text())["history"]
    strip = [{k: v for k, v in h.items() if k != "seconds"} for h in first]
    assert strip == [{k: v for k, v in h.items() if k != "seconds"} for h in second]


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
