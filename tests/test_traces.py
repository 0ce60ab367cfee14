"""Trace -> scenario conversion: readers, the documented mapping, the trace-* families."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from agents.cli import main
from agents.registry import run_scheduler
from gpu_env import traces
from gpu_env.generators import generate
from gpu_env.scenario import ScenarioError, load_scenario, save_scenario
from gpu_env.validation import validate

DATA = Path(__file__).resolve().parent / "data" / "traces"
PODS = DATA / "openb_pod_list_excerpt.csv"
LORA = DATA / "lora_requests_per_hour_excerpt.csv"
HELIOS = DATA / "vc6YE_cluster_sequence_vc_excerpt.csv"
ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"
DAY = 135  # the excerpt's window: origin-aligned day 135, first 4 hours
W = DAY * 86_400


def _excerpt_request(**spec_overrides) -> traces.TraceRequest:
    spec = traces.TraceSpec("excerpt", gpus=64, node_size=8, slots=4, slot_minutes=60.0, apps=("lora",))
    for key, value in spec_overrides.items():
        spec = replace(spec, **{key: value})
    return traces.TraceRequest(
        spec,
        job_day=DAY,
        demand_day=0,
        pods=PODS,
        demand_paths={"lora": LORA, "helios-vc6YE": HELIOS},
        num_jobs=10_000,  # keep every job: the mapping is checked row by row
    )


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


# ----------------------------------------------------------------------------- the mapping, row by row


def test_gpu_counts_round_up_to_powers_of_two():
    assert [traces.gpu_block(n) for n in (0, 1, 2, 3, 4, 5, 7, 8, 9)] == [1, 1, 2, 4, 4, 8, 8, 8, 16]


def test_excerpt_becomes_a_valid_scenario_with_the_documented_sizes():
    scenario, summary = traces.from_trace(_excerpt_request())
    assert (scenario.gpus, scenario.node_size, scenario.slots, scenario.slot_minutes) == (64, 8, 4, 60.0)
    jobs = {job.id: job for job in scenario.jobs}

    # Expected from the CSV by hand: GPU tasks alive in [W, W + 4 h) that were scheduled.
    end = W + 4 * 3600
    expected_running, expected_arrivals = {}, {}
    for row in _rows(PODS):
        created, deleted = int(row["creation_time"]), int(row["deletion_time"])
        if created >= end or deleted <= W or int(row["num_gpu"]) == 0 or not row["scheduled_time"]:
            continue
        scheduled = int(row["scheduled_time"])
        k = 1 << (int(row["num_gpu"]) - 1).bit_length()
        if scheduled <= W:
            expected_running[row["name"]] = (k, min(8, math.ceil((deleted - W) / 3600)))
        else:
            d = min(8, max(1, math.ceil((deleted - scheduled) / 3600)))
            expected_arrivals[row["name"]] = (k, d, max(0, (created - W) // 3600), row["qos"])
    assert expected_running and expected_arrivals
    assert set(jobs) == set(expected_running) | set(expected_arrivals)
    for name, (k, remaining) in expected_running.items():
        job = jobs[name]
        assert job.running_on is not None and len(job.running_on) == k
        assert (job.gpus, job.duration) == (k, remaining)
    for name, (k, d, release, qos) in expected_arrivals.items():
        job = jobs[name]
        assert job.running_on is None
        assert (job.gpus, job.duration, job.release) == (k, d, release)
        assert job.priority == {"BE": 1.0, "Burstable": 2.0, "LS": 3.0, "Guaranteed": 4.0}[qos]  # docs/traces.md
    assert summary["kept"] == len(jobs)
    assert summary["pods_left_out"]  # some rows have no GPU or were never scheduled

    # Demand, worked by hand from the excerpt: the hourly counts of 2024-11-16 00:00-03:00 are 0, 8, 6, 0.
    # The peak 8 maps to peak * G = 0.4 * 64 = 25.6 GPUs, a factor 3.2: 0, 25.6, 19.2, 0 round to 0, 26,
    # 19, 0, and a cluster of 8 GPUs or more keeps each app at least 1: 1, 26, 19, 1. The changes are
    # 25, 7, 18; their 90th percentile (linear, between 18 and 25 at 0.8) is 23.6, so the ramp is 24.
    counts = {r["hour_start"]: int(r["requests"]) for r in _rows(LORA)}
    assert [counts[f"2024-11-16 0{h}:00:00"] for h in range(4)] == [0, 8, 6, 0]
    (app,) = scenario.apps
    assert app.name == "imagegen"
    assert list(app.demand) == [1, 26, 19, 1]
    assert app.initial == 1
    assert app.ramp == 24


def test_helios_demand_is_running_plus_pending_averaged_per_slot():
    request = _excerpt_request(slot_minutes=10.0, slots=6, apps=("helios-vc6YE",))
    series = traces.read_helios_demand(HELIOS, 10.0, "helios-vc6YE")
    rows = _rows(HELIOS)
    minute = np.array([int(r["running_gpu_num"]) + int(r["pending_gpu_num"]) for r in rows], dtype=float)
    assert np.allclose(series.values, minute.reshape(6, 10).mean(axis=1))
    scenario, _ = traces.from_trace(request)
    (app,) = scenario.apps
    assert app.name == "vc6YE" and len(app.demand) == 6 and max(app.demand) == round(0.4 * 64)
    assert not validate(scenario, run_scheduler("fifo", scenario))


def test_thinning_keeps_a_seeded_subset_and_saves_round_trip(tmp_path: Path):
    request = replace(_excerpt_request(gpus=16), num_jobs=12, seed=3)
    a, _ = traces.from_trace(request)
    b, _ = traces.from_trace(request)
    assert a == b
    assert len(a.jobs) <= 12
    save_scenario(a, tmp_path / "s.yaml")
    assert load_scenario(tmp_path / "s.yaml") == a
    for name in ("fifo", "greedy"):
        assert not validate(a, run_scheduler(name, a))


def test_job_types_follow_run_length():
    assert traces.job_type(0.5).value == "quantization"
    assert traces.job_type(2).value == "batch_inference"
    assert traces.job_type(4).value == "training"


# ----------------------------------------------------------------------------- bad input


def test_missing_file_and_column_name_the_file(tmp_path: Path):
    with pytest.raises(ScenarioError, match="no such file"):
        traces.read_pods(tmp_path / "nope.csv")
    bad = tmp_path / "pods.csv"
    bad.write_text("name,num_gpu\nx,1\n")
    with pytest.raises(ScenarioError, match=r"pods\.csv: <header>: missing column"):
        traces.read_pods(bad)
    worse = tmp_path / "pods2.csv"
    header = PODS.read_text().splitlines()[0]
    worse.write_text(header + "\nx,1,1,one,1000,,LS,Running,0,10,0\n")
    with pytest.raises(ScenarioError, match=r"line 2, num_gpu"):
        traces.read_pods(worse)


def test_day_outside_the_trace_is_refused():
    with pytest.raises(ValueError, match="not a complete window"):
        traces.from_trace(replace(_excerpt_request(), job_day=3))
    with pytest.raises(ValueError, match="outside the series"):
        traces.from_trace(replace(_excerpt_request(), demand_day=5))


def test_hourly_counts_cannot_be_cut_finer_than_an_hour():
    with pytest.raises(ScenarioError, match="multiple of the file's 60-minute step"):
        traces.read_requests_per_hour(LORA, 30.0)


# ----------------------------------------------------------------------------- the trace-* families


@pytest.mark.parametrize("family", sorted(traces.TRACE_FAMILIES))
def test_trace_families_draw_from_shipped_statistics(family: str):
    a = generate(family, 5)
    assert a == generate(family, 5) and a != generate(family, 6)
    assert a.family == family and a.seed == 5 and a.slots == 24
    assert any(job.running_on for job in a.jobs)
    for job in a.jobs:
        assert job.gpus & (job.gpus - 1) == 0 and job.gpus <= a.gpus
    for app in a.apps:
        assert max(app.demand) <= a.gpus
    assert not validate(a, run_scheduler("fifo", a))
    small = generate(family, 5, gpus=8, num_jobs=10)
    assert small.gpus == 8 and len(small.jobs) <= 10


def test_shipped_statistics_are_small_and_cite_their_sources():
    text = traces.STATS_PATH.read_text()
    assert len(text) < 40_000
    stats = json.loads(text)
    assert "Weng et al." in stats["about"] and "Hu et al." in stats["about"]
    assert sum(stats["pods"]["day_arrivals"]) == sum(stats["pods"]["arrival_hours"])


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces is not beside the repository")
@pytest.mark.parametrize("name", ["trace-alibaba", "trace-helios"])
def test_committed_trace_scenarios_are_what_from_trace_builds(name: str):
    committed = load_scenario(ROOT / "configs" / "scenarios" / f"{name}.yaml")
    request = traces.TraceRequest(
        replace(traces.TRACE_FAMILIES[name], family=None),
        job_day=traces.BENCHMARK_DAYS[name][0],
        demand_day=traces.BENCHMARK_DAYS[name][1],
        traces=SHARED,
    )
    built, _ = traces.from_trace(request)
    assert built == committed


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces is not beside the repository")
def test_shipped_statistics_are_what_extraction_gives():
    assert traces.extract_stats(SHARED) == json.loads(traces.STATS_PATH.read_text())


def test_gpualloc_from_trace_on_the_excerpt(tmp_path: Path, capsys):
    out = tmp_path / "excerpt.yaml"
    args = ["from-trace", "--pods", str(PODS), "--demand", f"lora={LORA}", "--job-day", str(DAY)]
    args += ["--slots", "4", "--gpus", "16", "-o", str(out)]
    assert main(args) == 0
    scenario = load_scenario(out)
    assert scenario.slots == 4 and scenario.gpus == 16 and scenario.jobs
    assert "kept of" in capsys.readouterr().err
    assert main([*args[:-2], "--job-day", "3", "-o", str(tmp_path / "bad.yaml")]) == 2
    assert "not a complete window" in capsys.readouterr().err
    assert not (tmp_path / "bad.yaml").exists()


def test_extract_requires_the_traces_folder(tmp_path: Path, capsys):
    out = tmp_path / "stats.json"
    assert traces.main(["extract", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--traces DIR" in err and "not given" in err
    assert traces.main(["extract", "--traces", str(tmp_path / "absent"), "-o", str(out)]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert not out.exists()


def test_from_trace_without_a_traces_folder_names_the_missing_file(tmp_path: Path, capsys):
    out = tmp_path / "x.yaml"
    assert main(["from-trace", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "traces" in err and "--pods CSV" in err
    assert main(["from-trace", "--pods", str(PODS), "-o", str(out)]) == 2
    assert "--demand lora=CSV" in capsys.readouterr().err
    assert not out.exists()
