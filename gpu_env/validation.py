"""The plan validator: every rule of SPEC section 2 that a plan breaks, not only the first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpu_env import rules
from gpu_env.plan import Plan
from gpu_env.rules import Rule
from gpu_env.scenario import Scenario


@dataclass(frozen=True)
class Violation:
    """One broken rule, with a message that names the job, app, GPU or slot."""

    rule: Rule
    message: str

    def __str__(self) -> str:
        return f"rule {self.rule.value}: {self.message}"


_Placed = list[tuple[int, int, tuple[int, ...]]]
"""The placements of real jobs, once each: (job index, start, gpus), in plan order."""

_Flag = Callable[[Rule, str], None]
"""Records one violation: its rule and message."""


def validate(scenario: Scenario, plan: Plan) -> list[Violation]:
    """Check a plan against every rule of SPEC section 2.

    Returns:
        All violations found, in rule order; an empty list means the plan is valid.
    """
    out: list[Violation] = []

    def flag(rule: Rule, message: str) -> None:
        out.append(Violation(rule, message))

    seen, good = _known_placements(scenario, plan, flag)
    _check_sizes(scenario, good, flag)
    _check_times(scenario, good, flag)
    _check_blocks(scenario, good, flag)
    _check_inherited(scenario, seen, good, flag)
    _check_clashes(scenario, good, flag)
    curves = _check_curves(scenario, plan, flag)
    _check_capacity(scenario, good, curves, flag)
    out.sort(key=lambda v: v.rule.value.split("-")[0])  # rule order; stable within a rule
    return out


def _known_placements(scenario: Scenario, plan: Plan, flag: _Flag) -> tuple[dict[str, int], _Placed]:
    """Which placements refer to real jobs, once each.

    Args:
        scenario: The scenario.
        plan: The plan checked.
        flag: Records a violation; unknown and repeated jobs are flagged.

    Returns:
        The index of each job placed, by id, and the placements kept.
    """
    seen: dict[str, int] = {}
    good: _Placed = []
    for p in plan.placements:
        index = scenario.job_index(p.job)
        if index < 0:
            flag(Rule.PLAN_FORMAT, f"placement of unknown job {p.job!r}")
            continue
        if p.job in seen:
            flag(Rule.NO_PREEMPTION, f"job {p.job!r} is placed more than once")
            continue
        seen[p.job] = index
        good.append((index, p.start, p.gpus))
    return seen, good


def _check_sizes(scenario: Scenario, good: _Placed, flag: _Flag) -> None:
    """Rule 2: the same k GPUs for the whole run (a plan that lists more or fewer GPUs splits or grows the job).

    Args:
        scenario: The scenario.
        good: The placements of real jobs.
        flag: Records a violation.
    """
    for index, _, gpus in good:
        job = scenario.jobs[index]
        if len(gpus) != job.gpus:
            flag(Rule.NO_PREEMPTION, f"job {job.id!r} needs {job.gpus} GPUs, the plan gives {len(gpus)}")


def _check_times(scenario: Scenario, good: _Placed, flag: _Flag) -> None:
    """Rule 3: release, horizon, deadline (inherited jobs are left to rule 5).

    Args:
        scenario: The scenario.
        good: The placements of real jobs.
        flag: Records a violation.
    """
    T = scenario.slots
    for index, start, _ in good:
        job = scenario.jobs[index]
        if job.running_on is not None:
            continue  # rule 5 pins it
        if start < job.release:
            flag(Rule.RELEASE_HORIZON_DEADLINE, f"job {job.id!r} starts at {start}, before its release {job.release}")
        if start > T - 1:
            flag(Rule.RELEASE_HORIZON_DEADLINE, f"job {job.id!r} starts at {start}, after the last slot {T - 1}")
        if job.deadline is not None and start + job.duration > job.deadline:
            flag(
                Rule.RELEASE_HORIZON_DEADLINE,
                f"job {job.id!r} ends at {start + job.duration}, after its deadline {job.deadline}",
            )


def _check_blocks(scenario: Scenario, good: _Placed, flag: _Flag) -> None:
    """Rule 4: contiguous, node-aware blocks, of the ``good`` placements (real jobs) with the job's number of GPUs."""
    for index, _, gpus in good:
        job = scenario.jobs[index]
        if len(gpus) == job.gpus:
            problem = rules.block_problem(list(gpus), job.gpus, scenario.gpus, scenario.node_size)
            if problem:
                flag(Rule.CONTIGUOUS_BLOCK, f"job {job.id!r}: {problem}")


def _check_inherited(scenario: Scenario, seen: dict[str, int], good: _Placed, flag: _Flag) -> None:
    """Rule 5: inherited work held (placed at 0 on the GPUs it runs on).

    Args:
        scenario: The scenario.
        seen: The index of each job placed, by id.
        good: The placements of real jobs.
        flag: Records a violation.
    """
    for index, job in enumerate(scenario.jobs):
        if job.running_on is None:
            continue
        if job.id not in seen:
            flag(Rule.INHERITED_HELD, f"running job {job.id!r} is not placed")
            continue
        p = next(q for q in good if q[0] == index)
        if p[1] != 0 or tuple(p[2]) != job.running_on:
            flag(
                Rule.INHERITED_HELD,
                f"running job {job.id!r} must start at 0 on GPUs {list(job.running_on)}, "
                f"the plan has start {p[1]} on {list(p[2])}",
            )


def _check_clashes(scenario: Scenario, good: _Placed, flag: _Flag) -> None:
    """Rule 1: one job per GPU per slot among the ``good`` placements (real jobs), past the horizon too.

    Each pair of jobs is flagged once, at its first cell.
    """
    cells: dict[tuple[int, int], str] = {}
    clashes: dict[tuple[str, str], tuple[int, int]] = {}
    for index, start, gpus in good:
        job = scenario.jobs[index]
        for g in gpus:
            for t in range(max(start, 0), start + job.duration):
                other = cells.setdefault((g, t), job.id)
                if other != job.id:
                    clashes.setdefault((other, job.id), (g, t))
    for (a, b), (g, t) in clashes.items():
        flag(Rule.ONE_JOB_PER_GPU, f"jobs {a!r} and {b!r} both hold GPU {g} in slot {t}")


def _check_curves(scenario: Scenario, plan: Plan, flag: _Flag) -> np.ndarray:
    """Rule 6: ramps (and the plan's curves matching the scenario's apps).

    Args:
        scenario: The scenario.
        plan: The plan checked.
        flag: Records a violation (this rule's, and the curves' format problems).

    Returns:
        The curves (apps by slots, int64), negative values as 0; zero for an app whose
        curve is missing or of the wrong length.
    """
    T = scenario.slots
    names = {app.name for app in scenario.apps}
    for name in plan.curves:
        if name not in names:
            flag(Rule.PLAN_FORMAT, f"curve for unknown application {name!r}")
    curves = np.zeros((len(scenario.apps), T), dtype=np.int64)
    for i, app in enumerate(scenario.apps):
        if app.name not in plan.curves:
            flag(Rule.PLAN_FORMAT, f"no real-time curve for application {app.name!r}")
            continue
        curve = plan.curves[app.name]
        if len(curve) != T:
            flag(Rule.PLAN_FORMAT, f"curve of {app.name!r} has {len(curve)} values, expected {T}")
            continue
        r = np.asarray(curve, dtype=np.int64)
        negative = np.flatnonzero(r < 0)
        if negative.size:
            flag(Rule.REALTIME_RAMP, f"curve of {app.name!r} is negative in slot {int(negative[0])}")
        for t in rules.ramp_problems(r, app.initial, app.ramp):
            before = app.initial if t == 0 else int(r[t - 1])
            flag(
                Rule.REALTIME_RAMP,
                f"{app.name!r} moves from {before} to {int(r[t])} at slot {t}, more than its ramp {app.ramp}",
            )
        curves[i] = np.maximum(r, 0)
    return curves


def _check_capacity(scenario: Scenario, good: _Placed, curves: np.ndarray, flag: _Flag) -> None:
    """Rule 7: capacity in every slot inside the horizon.

    Args:
        scenario: The scenario.
        good: The placements of real jobs.
        curves: The real-time curves (apps by slots), as :func:`_check_curves` returns them.
        flag: Records a violation.
    """
    G, T = scenario.gpus, scenario.slots
    load = np.zeros(T, dtype=np.int64)
    for index, start, gpus in good:
        job = scenario.jobs[index]
        lo, hi = max(start, 0), min(start + job.duration, T)
        if hi > lo:
            load[lo:hi] += len(gpus)
    total = load + curves.sum(axis=0)
    for t in np.flatnonzero(total > G):
        flag(
            Rule.CAPACITY,
            f"slot {int(t)} uses {int(total[t])} GPUs ({int(load[t])} by jobs, "
            f"{int(total[t] - load[t])} real-time), more than {G}",
        )
