"""``gpualloc replay``: a recorded day played live with its demand as it came, and ``simulate --actual``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agents.cli import main
from agents.live import actual_of, replayed
from agents.live.forecast import NoiseModel, as_recorded, with_demand
from agents.simulator import simulate
from gpu_env.generators import generate
from gpu_env.scenario import ScenarioError, load_scenario, save_scenario
from lab.drawn_history import past_days


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("replay")
    day = generate("mixed-control", 4, num_jobs=6)
    actual = NoiseModel(0.3).draw(day, 2)
    paths = {"day": root / "day.yaml", "plain": root / "plain.yaml", "actual": root / "actual.yaml"}
    save_scenario(as_recorded(day, actual), paths["day"])
    save_scenario(day, paths["plain"])
    save_scenario(with_demand(day, actual), paths["actual"])
    for i, past in enumerate(past_days("mixed-control", day.gpus, 4, 2, 0.3, num_jobs=6)):
        paths[f"past{i}"] = root / f"past{i}.yaml"
        save_scenario(past, paths[f"past{i}"])
    return paths


def test_replayed_splits_a_recorded_day_into_the_forecast_and_what_came(files: dict[str, Path]) -> None:
    recorded = load_scenario(files["day"])
    planned, actual = replayed(recorded)
    assert planned.demand.tolist() == load_scenario(files["plain"]).demand.tolist()
    assert actual.tolist() == recorded.demand.tolist()
    assert all(app.forecast is None for app in planned.apps)


def test_the_replayed_day_scores_against_the_demand_that_came(files: dict[str, Path]) -> None:
    planned, actual = replayed(load_scenario(files["day"]))
    roll, _ = simulate(planned, "greedy", actual_demand=actual)
    assert roll.actual.demand.tolist() == actual.tolist()


def test_replay_and_simulate_actual_play_the_same_day(files: dict[str, Path], tmp_path: Path, capsys) -> None:
    common = ["--history", str(files["past0"]), str(files["past1"]), "--samples", "2", "--runtime-model", "exact"]
    assert main(["replay", str(files["day"]), *common, "-o", str(tmp_path / "a"), "--no-picture"]) == 0
    plain = ["simulate", str(files["plain"]), "--actual", str(files["actual"])]
    assert main([*plain, *common, "-o", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / x / "metrics.json").read_text())["rolling"] for x in "ab")
    timing = {k for k in a if k.startswith("solve_ms")}
    assert {k: v for k, v in a.items() if k not in timing} == {k: v for k, v in b.items() if k not in timing}
    assert (tmp_path / "a" / "decisions.md").exists()
    assert "as it came" in capsys.readouterr().err


def test_a_day_without_a_recorded_forecast_is_refused_in_one_line(files: dict[str, Path], capsys) -> None:
    assert main(["replay", str(files["plain"])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    why = "realtime[0].forecast: a replayed day must carry the forecast made for it"
    assert err == [f"gpualloc replay: error: {files['plain']}: {why}"]


def test_an_actual_of_other_apps_or_slots_is_refused_naming_the_field(
    files: dict[str, Path], tmp_path: Path, capsys
) -> None:
    day = load_scenario(files["plain"])
    other = generate("training-heavy", 1)
    assert other.slots == day.slots and {a.name for a in other.apps} != {a.name for a in day.apps}
    with pytest.raises(ScenarioError, match=r"x\.yaml: realtime: expected the played day's apps"):
        actual_of(day, other, "x.yaml")
    short = tmp_path / "short.yaml"
    save_scenario(_fewer_slots(day), short)
    assert main(["simulate", str(files["plain"]), "--actual", str(short)]) == 2
    assert "horizon.slots: expected the played day's 24 slots" in capsys.readouterr().err


def test_recorded_errors_are_required_where_asked(files: dict[str, Path], capsys) -> None:
    argv = ["replay", str(files["day"]), "--history", str(files["past0"]), str(files["plain"]), "--errors", "recorded"]
    assert main(argv) == 2
    assert "realtime[0].forecast: a past day must carry the forecast made for it" in capsys.readouterr().err


def _fewer_slots(day):  # the same apps over half the day
    from dataclasses import replace

    apps = tuple(replace(a, demand=a.demand[:12]) for a in day.apps)
    return replace(day, slots=12, apps=apps, jobs=())


def test_actual_of_reads_by_app_name() -> None:
    day = generate("mixed-control", 4, num_jobs=6)
    flipped = with_demand(day, day.demand + 1)
    from dataclasses import replace

    flipped = replace(flipped, apps=tuple(reversed(flipped.apps)))
    assert np.array_equal(actual_of(day, flipped), day.demand + 1)
