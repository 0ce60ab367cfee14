"""Rolling comparisons fanned out (:mod:`agents.fanout`): one task per scenario and scheduler.

:func:`agents.simulator.compare` loops over scenarios, forecast errors, seeds and
schedulers. Its slices for one scenario and one scheduler share nothing but the
open-loop plan, which :func:`compare` makes once per scenario, scheduler and
planning demand. A task here is such a slice: :func:`compare_task` runs
:func:`compare` on one scenario and one scheduler, every sigma and seed, wherever
the task lands, so the open-loop plan is made exactly as often as in a serial
run. :func:`compare_tasks` runs the slices over a backend and returns the rows in
the order of a serial :func:`compare`: the same rows, for every planner that
plans the same on the same input.

>>> from gpu_env.generators import generate
>>> sc = generate("training-heavy", seed=0, num_jobs=4)
>>> rows, run = compare_tasks([sc], ["fifo", "greedy"], [0.0, 0.2], [0, 1])
>>> def untimed(rows):
...     return [{k: v for k, v in r.items() if not k.startswith("solve_ms")} for r in rows]
>>> untimed(rows) == untimed(compare([sc], ["fifo", "greedy"], [0.0, 0.2], [0, 1])), run.ok
(True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from agents.fanout import Backend, Run, Task, TaskResult, run_tasks, warm_up_learned
from agents.options import PlanOptions
from agents.simulator.simulation import MODES, Reveal, compare
from gpu_env.scenario import Scenario


def _options_dict(options: PlanOptions) -> dict[str, Any]:
    """The plan options as plain values (a task's params): every field, the policy as a string."""
    values = {f.name: getattr(options, f.name) for f in fields(PlanOptions)}
    values["policy"] = None if options.policy is None else str(options.policy)
    values["guard"] = str(options.guard)
    return values


def _options_from(values: Mapping[str, Any]) -> PlanOptions:
    """The inverse of :func:`_options_dict`."""
    policy = values.get("policy")
    return PlanOptions(**{**values, "policy": None if policy is None else Path(policy)})


def comparison_tasks(
    scenarios: Sequence[Scenario],
    schedulers: Sequence[str],
    sigmas: Sequence[float],
    seeds: Sequence[int],
    *,
    replan_every: int = 1,
    options: Mapping[str, PlanOptions] | None = None,
    open_options: Mapping[str, PlanOptions] | None = None,
    reveal: Reveal | str = Reveal.RELEASE,
    corrector: str = "ratio",
    margin: float = 1.0,
    open_margin: float = 0.0,
    told_sigma: bool = False,
) -> list[Task]:
    """One task per (scenario, scheduler), scenario-major; the arguments are those of :func:`compare`.

    Each task carries its scenario as a document and the comparison's settings in
    ``params``; its ``workers`` (the CPUs it takes) is the larger of its two options'.
    """
    options = options or {}
    open_options = options if open_options is None else open_options
    tasks = []
    for scenario in scenarios:
        for name in schedulers:
            plan = options.get(name) or PlanOptions()
            fixed = open_options.get(name) or PlanOptions()
            params = {
                "sigmas": [float(s) for s in sigmas],
                "seeds": [int(s) for s in seeds],
                "replan_every": int(replan_every),
                "open_options": _options_dict(fixed),
                "reveal": str(reveal),
                "corrector": corrector,
                "margin": float(margin),
                "open_margin": float(open_margin),
                "told_sigma": bool(told_sigma),
            }
            task = Task.make(scenario, name, plan, **params)
            tasks.append(replace(task, workers=max(plan.workers, fixed.workers)))
    return tasks


def compare_task(task: Task) -> TaskResult:
    """Run one (scenario, scheduler) slice of :func:`compare` where the task landed.

    Returns:
        A result whose ``values["rows"]`` are :func:`compare`'s rows for this slice, and
        whose ``violations`` name every executed schedule that breaks a rule.
    """
    scenario = task.load()
    p = task.params
    warm_up_learned(task.planner, task.options())  # the first re-plan's time without one-time costs
    rows = compare(
        [scenario],
        [task.planner],
        p["sigmas"],
        p["seeds"],
        replan_every=p["replan_every"],
        options={task.planner: task.options()},
        open_options={task.planner: _options_from(p["open_options"])},
        reveal=p["reveal"],
        corrector=p["corrector"],
        margin=p["margin"],
        open_margin=p["open_margin"],
        told_sigma=p["told_sigma"],
    )
    invalid = [f"{r['mode']} sigma={r['sigma']:g} seed={r['seed']}" for r in rows if not r["valid"]]
    return TaskResult(scenario.name, task.planner, task.seed, violations=invalid, values={"rows": rows})


def compare_tasks(
    scenarios: Sequence[Scenario],
    schedulers: Sequence[str],
    sigmas: Sequence[float],
    seeds: Sequence[int],
    *,
    backend: Backend | None = None,
    timeout: float | None = None,
    on_result: Callable[[int, TaskResult], None] | None = None,
    **kwargs: Any,
) -> tuple[list[dict[str, Any]], Run]:
    """:func:`compare` as tasks over a backend: the same rows in the same order, and the run.

    Args:
        scenarios: The scenarios (their demand is the forecast).
        schedulers: Scheduler names.
        sigmas: Forecast errors.
        seeds: Seeds of the actual-demand draws.
        backend: Where the tasks run (serial when None).
        timeout: Seconds per task (None: no limit).
        on_result: Called with ``(index, result)`` as each task finishes (a progress bar).
        **kwargs: The other arguments of :func:`compare` (``replan_every``, ``options``, ...).

    Returns:
        The rows of every task that finished (a failed task contributes none: see
        :attr:`Run.failures`), ordered as :func:`compare` orders them, and the run.
    """
    tasks = comparison_tasks(scenarios, schedulers, sigmas, seeds, **kwargs)
    run = run_tasks(tasks, backend, timeout=timeout, function=compare_task, on_result=on_result)
    return ordered_rows(run.results, schedulers, sigmas, seeds), run


def ordered_rows(
    results: Sequence[TaskResult], schedulers: Sequence[str], sigmas: Sequence[float], seeds: Sequence[int]
) -> list[dict[str, Any]]:
    """The rows of the results of :func:`comparison_tasks`' tasks, in the order of a serial :func:`compare`.

    Args:
        results: One result per task, in the order of the tasks (scenario-major, then scheduler).
        schedulers: The schedulers the tasks were made for.
        sigmas: Their forecast errors.
        seeds: Their seeds.
    """
    sigma_at = {float(s): i for i, s in reversed(list(enumerate(sigmas)))}
    seed_at = {int(s): i for i, s in reversed(list(enumerate(seeds)))}
    keyed = []
    for index, result in enumerate(results):
        scenario_at, scheduler_at = divmod(index, len(schedulers))
        for row in result.values.get("rows", []):
            mode_at = MODES.index(row["mode"]) if row["mode"] in MODES else len(MODES)
            key = (scenario_at, sigma_at[float(row["sigma"])], seed_at[int(row["seed"])], scheduler_at, mode_at)
            keyed.append((key, row))
    keyed.sort(key=lambda pair: pair[0])
    return [row for _, row in keyed]
