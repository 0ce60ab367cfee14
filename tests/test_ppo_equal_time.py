"""benchmarks/ppo_equal_time.py: the quick run writes every table, the guaranteed counts are 0, and it repeats.

The script runs in a subprocess as a user runs it (``--quick``: a few instances and seeds, about 15 s). Time is a
controlled input: full mode stops at a deterministic-time limit (CP-SAT's machine-independent work) and never at the
wall clock, and the second run fixes greedy's equal-time restarts to the counts the first run calibrated, so its
quality numbers are those of the first at any machine speed. No test reads a measured time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import benchmarks.ppo_equal_time as eq
from agents.registry import SCHEDULERS
from tests.conftest import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]
NO_WALL = ("--best-time-limit", "10000", "--large-time-limit", "10000", "--deterministic-time", "0.5")
ARMS = ["greedy", "restarts", "restarts_time", "one", "unguarded", "shipped"]


def run_script(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "benchmarks/ppo_equal_time.py", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], ...]:
    """The quick run (restarts calibrated), then again with the restarts it chose fixed: (report, document) each."""
    out = tmp_path_factory.mktemp("equal_time")
    first = run_script("--quick", *NO_WALL, "--out", str(out / "a.md"), "--json", str(out / "a.json"))
    assert first.returncode == 0, first.stderr
    a = json.loads((out / "a.json").read_text())
    fixed = ",".join(f"{c}={r}" for c, r in a["restarts_time"].items())
    second = run_script(
        "--quick", *NO_WALL, "--restarts-at-time", fixed, "--out", str(out / "b.md"), "--json", str(out / "b.json")
    )
    assert second.returncode == 0, second.stderr
    b = json.loads((out / "b.json").read_text())
    return (
        {"text": (out / "a.md").read_text(), "doc": a, "stderr": first.stderr},
        {"text": (out / "b.md").read_text(), "doc": b, "stderr": second.stderr},
    )


def _section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_the_quick_run_writes_every_table_and_more_candidates_are_never_worse(two_runs):
    text, doc = two_runs[0]["text"], two_runs[0]["doc"]
    for heading in (
        "## The seed's sizes (8-64 GPUs): quality and time",
        "## 128 GPUs: quality and time",
        "## More candidates, a worse plan?",
        "## Head to head",
        "## Tuning: the restart temperature",
        "## Calibration: the equal-time restarts",
    ):
        assert heading in text
    assert "SHA-256 `" in text and "load average" in text and "--deterministic-time 0.5" in text
    stepwise = "ppo-stepwise" in SCHEDULERS
    arms = ARMS + (["stepwise_one", "stepwise"] if stepwise else [])
    assert ("its arms are in" if stepwise else "its arms are left out") in text
    assert set(doc["restarts_time"]) == {"seed", "128"}
    assert doc["temperature"] in (0.1, 0.4)  # the quick tuning grid
    # every arm on every instance with every seed: 3 families at their size, 2 at 128 GPUs, seeds 0-2
    assert len(doc["instances"]) == 5
    assert {(r["instance"], r["arm"], r["seed"]) for r in doc["runs"]} == {
        (i["name"], arm, seed) for i in doc["instances"] for arm in arms for seed in range(3)
    }
    assert len(doc["runs"]) == 5 * len(arms) * 3
    for c in ("seed", "128"):
        assert [a["key"] for a in doc["arms"][c]] == arms
    assert all(i["best"] >= i["arms_best"] - 1e-9 for i in doc["instances"])
    assert all(r["objective"] <= doc_best(doc, r) + 1e-6 for r in doc["runs"])
    # the guaranteed properties: 0 runs where 12 candidates are below one decode, or greedy + restarts below greedy
    totals = doc["more_candidates_worse"]
    assert {k: totals[k] for k in ("unguarded", "shipped", "restarts", "restarts_time")} == dict.fromkeys(
        ("unguarded", "shipped", "restarts", "restarts_time"), 0
    )
    counts = _section(text, "## More candidates, a worse plan?").splitlines()
    guaranteed = [line for line in counts if line.startswith(("| 12 candidates", "| as shipped", "| greedy + "))]
    assert len(guaranteed) == 4 and all(line.endswith("| **0 of 15** |") for line in guaranteed)
    for c in ("seed", "128"):
        table = _section(text, f"## {'The seed' if c == 'seed' else '128 GPUs'}")
        rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
        assert len(rows) == 1 + len(arms) + 1 + (3 if c == "seed" else 2)  # arms' table, family table
    assert "tuning 1/5" in two_runs[0]["stderr"] and "evaluation 5/5" in two_runs[0]["stderr"]


def doc_best(doc: dict[str, Any], run: dict[str, Any]) -> float:
    return next(i["best"] for i in doc["instances"] if i["name"] == run["instance"])


def _quality(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "temperature": doc["temperature"],
        "restarts_time": doc["restarts_time"],
        "instances": [{k: v for k, v in i.items() if k != "full_s"} for i in doc["instances"]],
        "runs": [{k: v for k, v in r.items() if k != "ms"} for r in doc["runs"]],
        "tuning": [{k: v for k, v in r.items() if k != "ms"} for r in doc["tuning"]],
        "more_candidates_worse": doc["more_candidates_worse"],
    }


def test_two_runs_with_the_same_seeds_give_the_same_quality_numbers(two_runs):
    a, b = two_runs
    assert "(calibrated below)" in a["text"] and "(`--restarts-at-time`)" in b["text"]
    assert _quality(a["doc"]) == _quality(b["doc"])
    heading = "## More candidates, a worse plan?"
    assert _section(a["text"], heading) == _section(b["text"], heading)
    assert _family_tables(a["text"]) == _family_tables(b["text"])
    assert len(_family_tables(a["text"])) == 2


def _family_tables(text: str) -> list[str]:
    """The per-family tables (quality only), one per size class."""
    return [part.split("\n\n")[1] for part in text.split("Per family, mean objective / best known:")[1:]]


def test_the_restart_counts_parse_and_the_stepwise_arms_follow_the_registry(monkeypatch):
    assert eq._restarts("12") == {"*": 12}
    assert eq._restarts("seed=20,128=14") == {"seed": 20, "128": 14}
    with pytest.raises(Exception, match="expected R"):
        eq._restarts("seed=x")
    monkeypatch.delitem(SCHEDULERS, "ppo-stepwise", raising=False)
    assert eq.stepwise_scheduler()[0] is None
    assert [a.key for a in eq.make_arms(Path("p.onnx"), 3, 0.1)] == ARMS
    monkeypatch.setitem(SCHEDULERS, "ppo-stepwise", "agents.ppo:plan")
    plan, note = eq.stepwise_scheduler()
    assert plan is not None and "its arms are in" in note
    assert [a.key for a in eq.make_arms(Path("p.onnx"), 3, 0.1, plan)] == [*ARMS, "stepwise_one", "stepwise"]
