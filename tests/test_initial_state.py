"""The state before slot 0 (SPEC section 1): the apps' ``initial`` and the inherited jobs fit the cluster.

Issue 47: a day whose apps' ``initial`` GPUs plus the inherited jobs' GPUs exceed the cluster, while the least
allocation the ramps allow still fits, used to load, and FIFO and backfill then broke rule 6 in slot 0. The loader
now refuses it, naming the field; every state it accepts has a plan that keeps every rule, and each scheduler
finds one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from agents import fifo
from agents.options import PlanOptions
from agents.registry import get_scheduler
from gpu_env import rules
from gpu_env.scenario import ScenarioError, scenario_from_dict
from gpu_env.validation import validate
from tests.conftest import make_scenario


def helios_day(inherited: int) -> dict[str, Any]:
    """The issue's day: 32 GPUs at 30-minute slots, initials 6 and 12 (ramp 1), ``inherited`` one-GPU jobs."""
    slots = 48
    return {
        "name": "helios-vc",
        "cluster": {"gpus": 32, "node_size": 8},
        "horizon": {"slots": slots, "slot_minutes": 30},
        "realtime": [
            {"name": "vc6e", "demand": [6] * 20 + [9] * 28, "ramp": 1, "initial": 6, "penalty": 8},
            {"name": "vcvlY", "demand": [12] * slots, "ramp": 1, "initial": 12, "penalty": 8},
        ],
        "jobs": [
            *(
                {"id": f"run{g}", "type": "training", "gpus": 1, "duration": 4, "running_on": [g]}
                for g in range(inherited)
            ),
            {"id": "wide", "type": "training", "gpus": 8, "duration": 6, "release": 2},
        ],
    }


def test_the_issues_day_is_refused_in_one_line_naming_the_field() -> None:
    # Before slot 0: 6 + 12 GPUs serve the apps and 15 run the inherited jobs, 33 of 32. The ramps' least
    # allocation in slot 0 (5 + 11 + 15 = 31) fits, which is why the former check let it through.
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(helios_day(15), "day.yaml")
    assert str(caught.value) == (
        "day.yaml: realtime[1].initial: the apps' initial GPUs (18) plus the inherited jobs' GPUs (15) "
        "exceed the cluster's 32 before slot 0"
    )
    assert caught.value.field == "realtime[1].initial"  # 15 + 6 fit; 15 + 6 + 12 do not


def test_the_cli_refuses_the_issues_day_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agents.cli import main

    path = tmp_path / "day.yaml"
    path.write_text(yaml.safe_dump(helios_day(15)))
    assert main(["plan", str(path), "--scheduler", "fifo", "-o", str(tmp_path / "plan.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(
        "realtime[1].initial: the apps' initial GPUs (18) plus the inherited jobs' GPUs (15) exceed the cluster's 32 "
        "before slot 0"
    )


@pytest.mark.parametrize("name", ["fifo", "backfill", "greedy", "ppo", "ppo-stepwise"])
def test_one_inherited_job_fewer_the_day_loads_and_every_plan_keeps_the_rules(name: str) -> None:
    day = scenario_from_dict(helios_day(14), "day.yaml")  # 18 + 14 = 32: a state that can exist
    plan = get_scheduler(name)(day, PlanOptions(seed=0))
    assert validate(day, plan) == []


def test_fifo_cuts_an_app_no_lower_than_the_apps_after_it_may_hold() -> None:
    """5 GPUs; a job runs on 2 for two slots; app a (1 GPU, ramp 3) heads for 4; app b holds 2 (ramp 1).

    Slot 0: 3 GPUs are free and b may shed only to 1, so a is cut to 2 (it used to take 3 and leave b 0, from 2:
    rule 6 broken), b keeps 1. Slot 1: nothing binds b (its floor is 0); a takes the 3 free. Slots 2-3: the job
    has ended; a reaches 4, b gets the 1 left.
    """
    day = make_scenario(
        cluster={"gpus": 5, "node_size": 5},
        horizon={"slots": 4},
        realtime=[
            {"name": "a", "demand": [4] * 4, "ramp": 3, "initial": 1, "penalty": 5},
            {"name": "b", "demand": [2] * 4, "ramp": 1, "initial": 2, "penalty": 5},
        ],
        jobs=[{"id": "run", "type": "training", "gpus": 2, "duration": 2, "running_on": [0, 1]}],
    )
    assert fifo.peak_reservation(day).tolist() == [[2, 3, 4, 4], [1, 0, 1, 1]]
    assert validate(day, fifo.plan(day)) == []


@st.composite
def states(draw: st.DrawFn) -> dict[str, Any]:
    """A cluster now: apps with any ``initial`` and ramp, inherited jobs on disjoint blocks, a few queued jobs.

    Nothing keeps the state inside the cluster: about half of the draws hold more before slot 0 than it has.
    """
    node = draw(st.integers(1, 4))
    gpus = node * draw(st.integers(1, 3))
    slots = draw(st.integers(1, 6))
    apps = [
        {
            "name": f"app{a}",
            "demand": draw(st.lists(st.integers(0, gpus), min_size=slots, max_size=slots)),
            "ramp": draw(st.integers(0, 3)),
            "initial": draw(st.integers(0, gpus)),
            "penalty": draw(st.sampled_from([0.5, 3.0, 8.0])),
        }
        for a in range(draw(st.integers(0, 3)))
    ]
    jobs: list[dict[str, Any]] = []
    free = [True] * gpus
    for i in range(draw(st.integers(0, 3))):
        k = draw(st.integers(1, gpus))
        starts = [int(a) for a in rules.allowed_block_starts(k, gpus, node) if all(free[a : a + k])]
        if not starts:
            continue
        first = draw(st.sampled_from(starts))
        free[first : first + k] = [False] * k
        duration = draw(st.integers(1, slots + 1))
        jobs.append({"id": f"run{i}", "type": "training", "gpus": k, "duration": duration, "running_on": [first]})
        jobs[-1]["running_on"] = list(range(first, first + k))
    for i in range(draw(st.integers(0, 3))):
        jobs.append(
            {
                "id": f"q{i}",
                "type": "batch_inference",
                "gpus": draw(st.integers(1, gpus)),
                "duration": draw(st.integers(1, 3)),
                "release": draw(st.integers(0, slots - 1)),
                "priority": draw(st.sampled_from([1.0, 2.0, 5.0])),
            }
        )
    return {
        "name": "state",
        "cluster": {"gpus": gpus, "node_size": node},
        "horizon": {"slots": slots},
        "realtime": apps,
        "jobs": jobs,
    }


@settings(max_examples=200)
@given(data=states())
def test_a_state_is_refused_naming_an_initial_or_every_scheduler_keeps_the_rules(data: dict[str, Any]) -> None:
    inherited = sum(len(job.get("running_on", ())) for job in data["jobs"])
    held = [inherited + sum(app["initial"] for app in data["realtime"][: a + 1]) for a in range(len(data["realtime"]))]
    try:
        day = scenario_from_dict(data, "state.yaml")
    except ScenarioError as exc:
        first = next(a for a, h in enumerate(held) if h > data["cluster"]["gpus"])
        assert exc.field == f"realtime[{first}].initial"
        return
    assert all(h <= day.gpus for h in held)  # refused exactly when the state before slot 0 overflows
    for name in ("fifo", "backfill", "greedy", "ppo", "ppo-stepwise"):
        plan = get_scheduler(name)(day, PlanOptions(seed=0))
        assert validate(day, plan) == [], name


@settings(max_examples=25)
@given(data=states())
def test_cpsat_keeps_the_rules_on_every_accepted_state(data: dict[str, Any]) -> None:
    try:
        day = scenario_from_dict(data, "state.yaml")
    except ScenarioError:
        return
    plan = get_scheduler("cpsat")(day, PlanOptions(seed=0, time_limit=60.0, workers=1, deterministic_time=1.0))
    assert validate(day, plan) == []
