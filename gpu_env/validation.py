"""The plan validator: every rule of SPEC section 2 that a plan breaks, not only the first."""

from __future__ import annotations

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


def validate(scenario: Scenario, plan: Plan) -> list[Violation]:
    """Check a plan against every rule of SPEC section 2.

    Returns:
        All violations found, in rule order; an empty list means the plan is valid.
    """
    out: list[Violation] = []
    G, T = scenario.gpus, scenario.slots

    def flag(rule: Rule, message: str) -> None:
        out.append(Violation(rule, message))

    # Which placements refer to real jobs, once each.
    seen: dict[str, int] = {}
    good: list[tuple[int, int, tuple[int, ...]]] = []  # (job index, start, gpus)
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

    # Rule 2: the same k GPUs for the whole run (a plan that lists more or fewer GPUs splits or grows the job).
    for index, _, gpus in good:
        job = scenario.jobs[index]
        if len(gpus) != job.gpus:
            flag(Rule.NO_PREEMPTION, f"job {job.id!r} needs {job.gpus} GPUs, the plan gives {len(gpus)}")

    # Rule 3: release, horizon, deadline.
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

    # Rule 4: contiguous, node-aware blocks.
    for index, _, gpus in good:
        job = scenario.jobs[index]
        if len(gpus) == job.gpus:
            problem = rules.block_problem(list(gpus), job.gpus, G, scenario.node_size)
            if problem:
                flag(Rule.CONTIGUOUS_BLOCK, f"job {job.id!r}: {problem}")

    # Rule 5: inherited work held.
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

    # Rule 1: one job per GPU per slot, past the horizon too.
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

    # Rule 6: ramps (and the plan's curves matching the scenario's apps).
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

    # Rule 7: capacity in every slot inside the horizon.
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

    out.sort(key=lambda v: v.rule.value.split("-")[0])  # rule order; stable within a rule
    return out
