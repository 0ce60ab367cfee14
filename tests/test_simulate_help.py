"""`gpualloc simulate`'s options say what the code does (issue 47): the forecasts, their margins, the samples."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from agents.cli import build_parser, main
from agents.live.anticipate import DEFAULT_SAMPLES, FORECASTS, LARGE_CLUSTER, forecast_of
from agents.live.forecast import Corrector
from gpu_env.generators import generate
from gpu_env.scenario import save_scenario

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _option(command: str, flag: str) -> argparse.Action:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return next(a for a in sub.choices[command]._actions if flag in a.option_strings)


def _simulate_row() -> str:
    (row,) = [line for line in (DOCS / "cli.md").read_text().splitlines() if line.startswith("| `gpualloc simulate")]
    return row


@pytest.mark.parametrize("command", ["simulate", "replay"])
def test_the_forecast_choices_are_the_codes(command: str) -> None:
    forecast = _option(command, "--forecast")
    assert tuple(forecast.choices) == FORECASTS and forecast.default == "auto"


def test_docs_cli_lists_every_forecast_and_the_samples_rule() -> None:
    row = _simulate_row()
    (listed,) = re.findall(r"\[--forecast ([^]]+)\]", row)
    assert listed.split("\\|") == list(FORECASTS)
    assert f"`--samples K` (default {DEFAULT_SAMPLES}) is halved, at least 1, from {LARGE_CLUSTER} GPUs" in row
    assert "`auto`, the default with or without `--history`, is `corrector`" in row


def test_the_help_says_auto_is_the_corrector_and_the_samples_halve() -> None:
    assert isinstance(forecast_of("auto", (), None), Corrector)  # what the help says of auto, with or without history
    forecast = " ".join(_option("simulate", "--forecast").help.split())
    assert "auto (the default, with or without --history) is corrector" in forecast
    assert all(name in forecast for name in FORECASTS)
    samples = _option("simulate", "--samples").help
    assert f"default {DEFAULT_SAMPLES}" in samples and f"from {LARGE_CLUSTER} GPUs" in samples and "half" in samples


@pytest.fixture
def day_and_past(tmp_path: Path) -> tuple[Path, Path]:
    save_scenario(generate("training-heavy", seed=3, num_jobs=4), tmp_path / "day.yaml")
    save_scenario(generate("training-heavy", seed=4, num_jobs=4), tmp_path / "past.yaml")
    return tmp_path / "day.yaml", tmp_path / "past.yaml"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--forecast", "record"], "--forecast record: needs past days"),  # was a traceback: not a CLI choice then
        (["--forecast", "history", "--history", "PAST", "--margin", "1"], "--forecast history has its own"),
        (["--forecast", "record", "--history", "PAST", "--margin", "1"], "--forecast record has its own"),
        (["--forecast", "point", "--correction", "bias"], "--forecast point has its own"),
    ],
)
def test_a_margin_a_forecast_cannot_take_is_one_line(
    day_and_past: tuple[Path, Path], capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    day, past = day_and_past
    extra = [str(past) if a == "PAST" else a for a in extra]
    assert main(["simulate", str(day), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.parametrize(("forecast", "label"), [("auto", None), ("corrector", None), ("point", "corrected + 1.5")])
def test_margin_replaces_the_forecasts_own(forecast: str, label: str | None) -> None:
    from agents.cli import _with_margin

    args = argparse.Namespace(margin=1.5, correction="ratio", forecast=forecast)
    made = _with_margin(forecast_of(forecast, (), None), args)
    assert made.margin == 1.5
    if label is not None:
        assert made.label == label
