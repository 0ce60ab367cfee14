"""``slurm_benchmark.py --part replicas`` runs (a smoke run, 2 slots of 30 s, greedy): the day's fields come back.

Marked ``slurm``; skipped without Debian's Slurm or root, as the other cluster tests. It starts the part's two
local clusters (Slurm alone and the loop's, the app's replicas under lab.slurm_replicas.Autoscaler); about three
minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_env.generators import generate
from gpu_env.scenario import save_scenario
from tests.real_slurm import skip_without_slurm

pytestmark = pytest.mark.slurm

skip_without_slurm()

ROOT = Path(__file__).resolve().parents[1]


def test_the_replicas_part_plays_a_short_day(tmp_path: Path) -> None:
    day = tmp_path / "day.yaml"
    save_scenario(generate("realtime-diurnal", 11, gpus=32), day)
    raw = tmp_path / "raw.json"
    argv = [sys.executable, str(ROOT / "benchmarks" / "slurm_benchmark.py"), "--part", "replicas", "--scenario",
            str(day), "--sigma", "0.3", "--seed", "11", "--slots", "2", "--slot-seconds", "30", "--scheduler",
            "greedy", "--runtime-model", "trace", "--raw", str(raw)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (found,) = json.loads(raw.read_text())["days"]
    for key in ("objective", "failed_cycles", "replicas_killed", "simulator_objective", "backfill_objective",
                "hindsight_objective", "drain_waits", "ramp_violations"):  # fmt: skip
        assert key in found, key
    assert found["failed_cycles"] == 0, found["raw"]["failures"]
    assert found["replicas_killed"] == 0, found["raw"]["replicas_killed_ids"]
    assert found["ramp_violations"] == 0
    assert len(found["drain_waits"]) == 2
    assert found["raw"]["replicas_submitted"] > 0  # the apps' replicas ran in their reservations
