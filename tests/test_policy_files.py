"""The learned planners' one loader (agents.policy_files): card checks, missing and corrupt files, the cache."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents import policy_files, ppo
from agents import ppo_stepwise as stepwise
from agents.policy_files import PolicyError, PolicyFile, PolicyKind
from gpu_env.generators import generate
from gpu_env.scenario import save_scenario
from lab import live_chooser as chooser

SHIPPED = Path(__file__).resolve().parents[1] / "agents" / "policies"
# planner: (shipped file, its loader, a card change that makes it another planner's, the field the error names)
KINDS: dict[str, tuple[str, Callable[[Any], Any], Callable[[dict[str, Any]], None], str]] = {
    "ppo": (
        "default.onnx",
        ppo.load_policy,
        lambda card: card["observation_spec"]["features"]["jobs"].pop(),
        "observation_spec.features.jobs",
    ),
    "ppo-stepwise": (
        "stepwise.onnx",
        stepwise.load_policy,
        lambda card: card["observation_spec"].update(window=1),
        "observation_spec",
    ),
    "live-chooser": (
        "live_chooser.onnx",
        chooser.load_policy,
        lambda card: card["spec"]["features"].pop(),
        "spec.features",
    ),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path, Callable[[Any], Any]]:
    """A copy of a shipped policy and its card, with its planner's name and loader."""
    name, load, _, _ = KINDS[request.param]
    if not (SHIPPED / name).is_file():
        pytest.skip(f"no shipped {name}")
    copied = tmp_path / name
    shutil.copy(SHIPPED / name, copied)
    shutil.copy((SHIPPED / name).with_suffix(".json"), copied.with_suffix(".json"))
    return request.param, copied, load


def _one_line(error: pytest.ExceptionInfo[PolicyError], file: Path) -> str:
    message = str(error.value)
    assert message.startswith(f"{file}: ") and "\n" not in message
    return message


def test_a_copy_of_each_shipped_policy_loads_with_its_hash(kind) -> None:
    _, path, load = kind
    loaded = load(path)
    assert loaded.path == path and len(loaded.sha256) == 64 and loaded.card["format"]


def test_a_missing_file_or_card_is_one_line_naming_it(kind) -> None:
    _, path, load = kind
    path.with_suffix(".json").unlink()
    with pytest.raises(PolicyError) as card:
        load(path)
    assert "policy card not found (train one with train" in _one_line(card, path.with_suffix(".json"))
    missing = path.parent / "none.onnx"
    with pytest.raises(PolicyError) as file:
        load(missing)
    assert "policy file not found" in _one_line(file, missing)


def test_a_corrupt_onnx_file_is_one_line_naming_it(kind) -> None:
    _, path, load = kind
    path.write_bytes(b"not onnx")
    with pytest.raises(PolicyError) as error:
        load(path)
    assert "not a loadable ONNX policy" in _one_line(error, path)


def test_a_card_for_other_inputs_or_of_another_format_is_refused_naming_the_field(kind) -> None:
    planner, path, load = kind
    _, _, change, field = KINDS[planner]
    card_file = path.with_suffix(".json")
    card = json.loads(card_file.read_text())
    change(card)
    card_file.write_text(json.dumps(card))
    with pytest.raises(PolicyError) as error:
        load(path)
    assert f"field '{field}" in _one_line(error, card_file)
    card_file.write_text(json.dumps({**card, "format": "gpualloc-other/1"}))
    with pytest.raises(PolicyError, match="field 'format'"):
        load(path)
    card_file.write_text("{")
    with pytest.raises(PolicyError, match="not a readable JSON policy card"):
        load(path)


def test_a_second_load_of_the_same_file_version_is_a_cache_hit(kind, monkeypatch) -> None:
    _, path, load = kind
    sessions = []
    real = policy_files.onnx_session
    monkeypatch.setattr(policy_files, "onnx_session", lambda p: sessions.append(p) or real(p))
    first = load(path)
    assert load(path) is first and load(str(path)) is first and len(sessions) == 1
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a new version of the file
    assert load(path) is not first and len(sessions) == 2


def test_the_shared_loader_checks_in_order_and_caches_what_the_planner_builds(tmp_path: Path) -> None:
    shutil.copy(SHIPPED / "default.onnx", tmp_path / "p.onnx")
    card = tmp_path / "p.json"
    card.write_text(json.dumps({"format": "test/1", "ok": True}))
    checked, built = [], []

    def check(card: dict[str, Any], card_file: Path) -> None:
        checked.append(card_file)
        if not card.get("ok"):
            raise PolicyError(f"{card_file}: field 'ok': expected true")

    kind = PolicyKind("test policy", ("test/1",), "make one", check)
    cache: dict[policy_files.CacheKey, str] = {}

    def build(policy: PolicyFile) -> str:
        built.append(policy)
        return policy.sha256

    digest = policy_files.load(tmp_path / "p.onnx", kind, cache, build)
    assert policy_files.load(tmp_path / "p.onnx", kind, cache, build) == digest
    assert len(checked) == 1 and len(built) == 1 and len(cache) == 1
    assert built[0].card == {"format": "test/1", "ok": True} and built[0].session is not None
    with pytest.raises(PolicyError, match="test policy file not found \\(make one\\)"):
        policy_files.load(tmp_path / "q.onnx", kind, cache, build)
    card.write_text(json.dumps({"format": "test/1", "ok": False}))
    with pytest.raises(PolicyError, match="field 'ok'"):
        policy_files.load(tmp_path / "p.onnx", kind, cache, build)


@pytest.mark.parametrize("planner", ["ppo", "ppo-stepwise"])
def test_the_cli_reports_a_corrupt_policy_in_one_line_and_exits_2(planner, tmp_path: Path, capsys) -> None:
    from agents.cli import main as cli_main

    scenario = tmp_path / "s.yaml"
    save_scenario(generate("mixed-control", 0), scenario)
    corrupt = tmp_path / "p.onnx"
    corrupt.write_bytes(b"not onnx")
    shutil.copy((SHIPPED / KINDS[planner][0]).with_suffix(".json"), corrupt.with_suffix(".json"))
    code = cli_main(["plan", str(scenario), "--scheduler", planner, "--policy", str(corrupt)])
    err = capsys.readouterr().err
    assert code == 2 and f"{corrupt}: not a loadable ONNX policy" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
