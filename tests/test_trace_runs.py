"""Runs of recorded days from the traces (``gpu_env.trace_runs``, ``gpualloc from-trace --run``) and the
shipped compact data they read (``benchmarks/data/traces``)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

import agents.trace_forecasts  # noqa: F401  (registers the history method)
from agents.cli import main
from gpu_env import trace_runs, traces
from gpu_env.scenario import ScenarioError, load_scenario

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "benchmarks" / "data" / "traces"
PODS = Path(__file__).resolve().parent / "data" / "traces" / "openb_pod_list_excerpt.csv"
LORA_SPEC = replace(traces.TRACE_FAMILIES["trace-alibaba"], gpus=32)
HELIOS_SPEC = replace(traces.TRACE_FAMILIES["trace-helios"], gpus=64)


# ----------------------------------------------------------------------------- the shipped compact data


def test_shipped_data_is_small_and_names_its_sources():
    files = [p for p in SHIPPED.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 700_000
    readme = (SHIPPED / "README.md").read_text()
    for name in (traces.POD_FILE, *traces.DEMAND_FILES.values()):
        assert (SHIPPED / name).is_file() and name.split("/")[-1] in readme
    for text in ("7a6c496e4f4b6ce6150be8f881cb051bf2abff42", "bdaae109c21f8038a2331e6a23a582d5ae78ab5b", "CC BY 4.0"):
        assert text in readme
    assert "python -m gpu_env.traces compact" in readme


def test_shipped_data_gives_the_shipped_statistics_and_committed_scenarios():
    """What the raw traces gave (checked against them when the data was cut), from the compact files alone."""
    assert traces.extract_stats(SHIPPED) == json.loads(traces.STATS_PATH.read_text())
    for name, (job_day, demand_day) in traces.BENCHMARK_DAYS.items():
        spec = replace(traces.TRACE_FAMILIES[name], family=None)
        built, _ = traces.from_trace(traces.TraceRequest(spec, job_day=job_day, demand_day=demand_day, traces=SHIPPED))
        assert built == load_scenario(ROOT / "configs" / "scenarios" / f"{name}.yaml")


def test_compact_helios_file_reads_hourly_sums_and_refuses_finer_slots():
    hourly = traces.read_demand("helios-vc6YE", SHIPPED, 60.0)
    assert hourly.days == 31 and hourly.start == datetime(2020, 5, 1)
    first = (SHIPPED / traces.DEMAND_FILES["helios-vc6YE"]).read_text().splitlines()[1]
    assert hourly.values[0] == int(first.split(",")[2]) / 60
    two = traces.read_demand("helios-vc6YE", SHIPPED, 120.0)
    assert two.values[0] == (hourly.values[0] * 60 + hourly.values[1] * 60) / 120
    with pytest.raises(ScenarioError, match=r"slot_minutes.*60-minute step"):
        traces.read_demand("helios-vc6YE", SHIPPED, 30.0)


# ----------------------------------------------------------------------------- a hand-made series

DAY0 = [10] * 24  # the fit day: 99th percentile 10 -> scale 50 / 10 = 5 GPUs per request
DAY1 = [4 + 2 * (s % 2) for s in range(24)]  # 4, 6, 4, 6, ... -> 20, 30, ...
DAY2 = [2] + [12] * 23  # -> 10, 60, ...
DAY3 = [16] * 24  # -> 80


def _lora(path: Path, days: list[list[int]]) -> Path:
    start = datetime(2024, 1, 1)
    rows = ["hour_start,requests,succeeded_requests"]
    for d, values in enumerate(days):
        for s, v in enumerate(values):
            rows.append(f"{start + timedelta(days=d, hours=s):%Y-%m-%d %H:%M:%S},{v},{v}")
    path.write_text("\n".join(rows) + "\n")
    return path


def _hand_request(lora: Path, **changes) -> trace_runs.RunRequest:
    spec = traces.TraceSpec("hand", gpus=100, node_size=8, peak=0.5, apps=("lora",))
    request = trace_runs.RunRequest(
        spec, first_day=1, days=3, fit_days=1, job_day=135, forecast="mean:2", pods=PODS, demand_paths={"lora": lora}
    )
    return replace(request, **changes)


def _forecasts(run: trace_runs.TraceRun) -> list[list[int]]:
    return [list(s.apps[0].forecast) for s in run.scenarios]


def test_mean_forecast_by_hand(tmp_path: Path):
    run = trace_runs.trace_run(_hand_request(_lora(tmp_path / "h.csv", [DAY0, DAY1, DAY2, DAY3])))
    assert run.manifest["apps"][0]["scale"] == 5.0 and run.manifest["apps"][0]["ramp"] == 1
    # day 1: one day before it: day 0's mean 10 -> 50; day 2: (10 + 4) / 2 = 7 -> 35, (10 + 6) / 2 = 8 -> 40;
    # day 3: the last two days, (4 + 2) / 2 = 3 -> 15, then (4 + 12) / 2 = 8 -> 40 and (6 + 12) / 2 = 9 -> 45
    assert _forecasts(run) == [
        [50] * 24,
        [35 if s % 2 == 0 else 40 for s in range(24)],
        [15] + [40 if s % 2 == 0 else 45 for s in range(1, 24)],
    ]
    assert [list(s.apps[0].demand) for s in run.scenarios] == [
        [5 * v for v in DAY1],
        [5 * v for v in DAY2],
        [5 * v for v in DAY3],
    ]
    assert [s.apps[0].initial for s in run.scenarios] == [20, 10, 80]


@pytest.mark.parametrize("method", ["mean:2", "history", "history:2"])
def test_a_days_forecast_reads_nothing_of_that_day_or_later(tmp_path: Path, method: str):
    base = trace_runs.trace_run(_hand_request(_lora(tmp_path / "a.csv", [DAY0, DAY1, DAY2, DAY3]), forecast=method))
    for d in (1, 2, 3):  # change demand day d and every later day: the forecasts of days up to d stay
        days = [DAY0, DAY1, DAY2, DAY3]
        changed = days[:d] + [[(v * 7 + 3) % 19 for v in x] for x in days[d:]]
        other = trace_runs.trace_run(_hand_request(_lora(tmp_path / f"b{d}.csv", changed), forecast=method))
        assert _forecasts(other)[:d] == _forecasts(base)[:d]
        assert other.scenarios[d - 1].apps[0].demand != base.scenarios[d - 1].apps[0].demand  # the day changed


def test_history_forecast_of_one_past_day_is_that_day(tmp_path: Path):
    run = trace_runs.trace_run(_hand_request(_lora(tmp_path / "h.csv", [DAY0, DAY1, DAY2, DAY3]), forecast="history:1"))
    assert _forecasts(run) == [[50] * 24, [5 * v for v in DAY1], [5 * v for v in DAY2]]


def test_file_forecast_is_scaled_like_the_demand(tmp_path: Path):
    lora = _lora(tmp_path / "h.csv", [DAY0, DAY1, DAY2, DAY3])
    rows = ["time,lora"]
    for d in (1, 2, 3):
        rows += [
            f"{datetime(2024, 1, 1) + timedelta(days=d, hours=s):%Y-%m-%d %H:%M:%S},{d + s / 10}" for s in range(24)
        ]
    site = tmp_path / "site.csv"
    site.write_text("\n".join(rows) + "\n")
    run = trace_runs.trace_run(_hand_request(lora, forecast=f"file:{site}"))
    assert _forecasts(run) == [[int(np.round(5 * (d + s / 10))) for s in range(24)] for d in (1, 2, 3)]


def test_a_new_forecast_method_is_one_function(tmp_path: Path):
    def flat(arg: str) -> trace_runs.Forecaster:
        return lambda inp: np.full((len(inp.apps), inp.slots), float(arg))

    trace_runs.register_forecast(trace_runs.ForecastMethod("flat", "flat:X", "X GPUs in every slot", flat))
    try:
        run = trace_runs.trace_run(
            _hand_request(_lora(tmp_path / "h.csv", [DAY0, DAY1, DAY2, DAY3]), forecast="flat:7")
        )
        assert _forecasts(run) == [[7] * 24] * 3
    finally:
        del trace_runs.FORECASTS["flat"]


# ----------------------------------------------------------------------------- runs of the shipped data


def test_run_of_the_shipped_data(tmp_path: Path):
    run = trace_runs.trace_run(trace_runs.RunRequest(LORA_SPEC, days=4))
    manifest = run.manifest
    assert [d["demand_day"] for d in manifest["days"]] == [7, 8, 9, 10]
    assert [d["job_day"] for d in manifest["days"]] == [116, 117, 118, 119]
    assert manifest["fit_days"] == list(range(7)) and manifest["forecast"] == "mean:7"
    assert manifest["sources"]["pods"] == f"benchmarks/data/traces/{traces.POD_FILE}"
    # one scale for the run, fitted on the week before: each day's demand is the series times it
    series = traces.read_demand("lora", SHIPPED, 60.0)
    (app,) = manifest["apps"]
    scale = 0.4 * 32 / np.percentile(series.values[: 7 * 24], 99)
    assert app["scale"] == pytest.approx(scale, rel=1e-12)
    for scenario, info in run.days:
        raw = series.window(info["demand_day"], 24)
        assert list(scenario.apps[0].demand) == [int(x) for x in np.clip(np.round(raw * app["scale"]), 1, 32)]
        assert scenario.apps[0].ramp == app["ramp"] and scenario.apps[0].initial == scenario.apps[0].demand[0]
    assert len({max(s.apps[0].demand) for s in run.scenarios}) > 1  # the level varies from day to day
    files = trace_runs.write_run(run, tmp_path / "run")
    assert [p.name for p in files] == [d["file"] for d in manifest["days"]] + ["run.json"]
    assert json.loads((tmp_path / "run" / "run.json").read_text()) == json.loads(json.dumps(manifest))
    for path, scenario in zip(trace_runs.load_run(tmp_path / "run"), run.scenarios, strict=True):
        loaded = load_scenario(path)
        assert loaded == scenario and all(a.forecast is not None for a in loaded.apps)


@pytest.mark.parametrize(
    ("spec", "days", "apps"), [(LORA_SPEC, 15, ["imagegen"]), (HELIOS_SPEC, 24, ["vc6YE", "vcvlY"])]
)
def test_the_benchmark_runs_cover_every_day_after_the_first_week(spec: traces.TraceSpec, days: int, apps: list[str]):
    run = trace_runs.trace_run(trace_runs.RunRequest(spec))
    assert len(run.days) == days and run.manifest["days"][0]["demand_day"] == 7
    assert all([a.name for a in s.apps] == apps and s.slots == 24 and s.slot_minutes == 60 for s in run.scenarios)
    jobs = [d["job_day"] for d in run.manifest["days"]]
    assert jobs == list(range(116, 116 + days))
    for s in run.scenarios:  # the inherited jobs fit beside the initial demand
        held = sum(len(j.running_on) for j in s.jobs if j.running_on is not None)
        assert held + sum(a.initial for a in s.apps) <= s.gpus or held == 0


def test_cli_run_is_reproducible_and_loads(tmp_path: Path, capsys):
    args = ["from-trace", "--family", "trace-helios", "--gpus", "32", "--days", "2", "--first-day", "9"]
    assert main([*args, "--run", str(tmp_path / "a")]) == 0
    assert main([*args, "--run", str(tmp_path / "b"), "--traces", str(SHIPPED)]) == 0
    err = capsys.readouterr().err
    assert "2 days" in err and "job days 116..117" in err
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["00-2020-05-10.yaml", "01-2020-05-11.yaml", "run.json"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    for name in names[:2]:
        day = load_scenario(tmp_path / "a" / name)
        assert [a.name for a in day.apps] == ["vc6YE", "vcvlY"] and all(a.forecast for a in day.apps)
    # another seed thins differently, the demand stays
    assert main([*args, "--run", str(tmp_path / "c"), "--seed", "1"]) == 0
    a, c = load_scenario(tmp_path / "a" / names[1]), load_scenario(tmp_path / "c" / names[1])
    assert a.apps == c.apps and a.jobs != c.jobs


def _bad_site(tmp_path: Path, body: str) -> str:
    path = tmp_path / "site.csv"
    path.write_text(body)
    return f"file:{path}"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--first-day", "20", "--days", "5"], "lora_requests_per_hour.csv: --first-day 20 --days 5 runs past"),
        (["--days", "30"], "runs past the series (22 whole days"),
        (["--job-day", "146", "--days", "5"], "openb_pod_list_default.csv: --job-day 146 --days 5 needs pod-trace"),
        (["--first-day", "3"], "--first-day 3: the scales are fitted on the --fit-days 7 days before it"),
        (["--first-day", "0"], "--first-day 0: a day's forecast is made from the days before it"),
        (["--forecast", "oracle"], "--forecast oracle: unknown forecast method 'oracle' (expected one of: mean:K"),
        (["--forecast", "mean:x"], "--forecast mean:x: expected a whole number"),
        (["--forecast", "file:/nonexistent/site.csv"], "/nonexistent/site.csv: <file>: no such file"),
        (["--demand-day", "3"], "--demand-day: not with --run"),
        (["-o", "x.yaml"], "-o: not with --run"),
        (["--slot-minutes", "7"], "--slot-minutes 7: a run's days need slots that divide 24 hours"),
    ],
)
def test_bad_run_input_is_one_line_and_exit_2(tmp_path: Path, capsys, extra: list[str], expected: str):
    out = tmp_path / "run"
    assert main(["from-trace", "--gpus", "32", "--run", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpualloc from-trace: error:") and expected in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("time,other\n2024-11-23 00:00:00,1\n", "site.csv: <header>: missing column 'lora'"),
        ("time,lora\n2024-11-23 00:00:00,1\n", "site.csv: time: no row for 2024-11-23 01:00:00"),
        ("time,lora\n2024-11-23 00:00:00,lots\n", "site.csv: line 2, lora: expected a number, got 'lots'"),
        ("time,lora\n2024-11-23 00:00:00,-1\n", "site.csv: line 2, lora: expected a number >= 0"),
        ("time,lora\nyesterday,1\n", "site.csv: line 2, time: expected YYYY-MM-DD HH:MM:SS"),
        ("when,lora\n", "site.csv: <header>: missing column(s): time"),
    ],
)
def test_malformed_forecast_file_names_file_and_field(tmp_path: Path, capsys, body: str, expected: str):
    out = tmp_path / "run"
    assert main(["from-trace", "--run", str(out), "--days", "1", "--forecast", _bad_site(tmp_path, body)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
    assert not out.exists()
