"""Benchmarks of the learned fast mode (``ppo``: one scoring call, K decoded job orders) against its targets.

    PYTHONPATH=. .venv/bin/python benchmarks/ppo_benchmarks.py --quick     # 2-3 minutes: results/ppo_quick.md
    PYTHONPATH=. .venv/bin/python benchmarks/ppo_benchmarks.py             # full run, ~20 min serially: results/ppo.md
        [--policy agents/policies/default.onnx] [--instances 30] [--best-time-limit 2] [--seven-time-limit 30]
        [--rounds 50] [--time-sizes 256,1024] [--time-instances 2]
        [--scale-families ...] [--scale-sizes 128,256,1024] [--scale-instances 1] [--scale-time-limit 30]
        [--deterministic-time D] [--skip quality,seven,time,scale]   # full mode also stops after D work units
    PYTHONPATH=. .venv/bin/python benchmarks/ppo_benchmarks.py --seven-only  # the seven scenarios' table only
        [--parallel N | --ray [ADDRESS]] [--task-timeout S]               # any of them, fanned out

Every planner runs side by side on the same instances, in one warm process
per task (the policy loaded once):

* **(a) Quality.** Fresh instances of every family of
  :data:`gpu_env.generators.FAMILIES` at the family's own size
  (``generate(family, seed)``), seeds 20000, 20001, ..., checked disjoint from
  every (family, seed, GPUs) that training with ``configs/train/default.yaml``
  drew (:func:`training_draws`: ``train.py``'s calls of
  :func:`lab.training.training.draw_specs` listed, its held-out
  evaluation draws included, and the optima cache's records). Per instance:
  FIFO, greedy, the policy alone with one candidate (``samples=1, guard="none"``)
  with and without the promotion pass, and ppo as shipped (12 candidates and the
  FIFO guard). Best known: the best of those and of full mode
  (:func:`agents.full.solve`) with ``--best-time-limit`` seconds, flagged where
  CP-SAT proved it optimal (elsewhere a ratio to it is an upper bound). A second
  table puts each planner's quality and plan time (its one run in the task) side
  by side. The seven benchmark scenarios (``configs/scenarios/``, no ``trace-*``)
  get their own table, full mode with ``--seven-time-limit``.
* **(b) Plan time.** Greedy, ppo as shipped (the guard's FIFO plan counts), the
  policy alone with one candidate and FIFO, interleaved in that order for ``--rounds`` rounds
  after 2 warm-up rounds, on each of the seven scenarios and on
  ``--time-instances`` fresh instances per size of ``--time-sizes``, pinned to
  one CPU core: median and p90 of each, and of the per-round ratio to greedy;
  and each plan's objective over greedy's beside them.
* **(c) Large clusters.** ``--scale-instances`` fresh instances per family of
  ``--scale-families`` and size of ``--scale-sizes``
  (``generate(family, seed, gpus=G)``, jobs scaled with the family): greedy,
  the policy alone (one candidate), as shipped, FIFO, and full mode with
  ``--scale-time-limit`` seconds as best known (or the best planner where full
  mode is worse); ratios and plan times (one run each, after a warm-up).

Greedy with restarts, the fair baseline at the shipped planner's decode count and at its time, is measured
side by side with the learned planners by ``benchmarks/ppo_equal_time.py`` (results/ppo_equal_time.md), not here.

The targets are marked met or missed in the report, with the measured numbers.
Times are wall clock on a shared machine: noisy; the report's header gives the
load average before and after.

**Fan-out** (:mod:`agents.fanout`, docs/fanout.md). The instances of (a) and (c)
are tasks, one per instance (:func:`measure_task`, :func:`scale_task`), run by
``agents.fanout.run_tasks`` with their rows put back in input order: serially by
default, ``--parallel N`` N at once in a local process pool, ``--ray`` on a local
Ray, ``--ray ADDRESS`` on a running cluster; ``--task-timeout S`` reports a task
still running after S seconds as failed (keep S above the full-mode limits).
Every planner here is deterministic, so the quality tables are those of a serial
run wherever full mode proves the optimum (``--seven-only`` is byte-identical),
and everywhere when full mode stops at ``--deterministic-time D`` before any time
limit; (c)'s plan times are then measured beside other tasks. (b) always runs
serially in this process, pinned to one core. A failed task is named (scenario,
planner, seed) on stderr and in the report, the others complete, and the exit
status is 1.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# full (OR-Tools) imported here, where a fan-out worker starts, not inside a task's timeout alarm (docs/fanout.md):
# best_known imports it lazily, so without this line the first task of each worker would
import agents.full  # noqa: E402, F401
from agents import ppo  # noqa: E402
from agents.arguments import add_fanout_options, family_names, fanout_backend, gpu_counts  # noqa: E402
from agents.fanout import Backend, FanoutError, Task, TaskFunction, TaskResult, run_tasks  # noqa: E402
from agents.options import DEFAULT_GUARD, DEFAULT_SAMPLES, PlanOptions  # noqa: E402
from agents.registry import run_scheduler  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import FAMILIES  # noqa: E402
from gpu_env.plan import Plan  # noqa: E402
from gpu_env.scenario import Scenario, load_scenario  # noqa: E402
from lab.benchmarking import EPS, best_known, checked, machine, one_core, table  # noqa: E402
from lab.equal_time import (  # noqa: E402
    one_options,
    shipped_options,
)
from lab.training.fresh_draws import FRESH_SEED, TRAIN_CONFIG, check_fresh, fresh  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "ppo.md"
QUICK_RESULTS = ROOT / "benchmarks" / "results" / "ppo_quick.md"
SCENARIOS = ROOT / "configs" / "scenarios"
TIME_SEED = 25_000  # (b)'s large instances
SCALE_SEED = 30_000  # (c)
# The targets of the learned fast mode.
SHIPPED_TARGET = 0.99  # as shipped: mean objective / best known over every fresh instance of (a)
SHIPPED_MOONSHOT = 0.995
LARGE_TIME_RATIO = 0.5  # as shipped at 256-1,024 GPUs: median plan time at most half of greedy's
MOONSHOT_SCENARIO, MOONSHOT_MS = "scale-64x30", 1.0  # as shipped, median plan time at 64 GPUs x 30 jobs


def seven_scenarios() -> list[Path]:
    """The seven benchmark scenarios: one file per generator family in ``configs/scenarios`` (no ``trace-*``)."""
    return [SCENARIOS / f"{family}.yaml" for family in FAMILIES]


# ----------------------------------------------------------------------------- fan-out


@dataclass
class Fanout:
    """Where the instances' tasks run, and what failed: every section's tasks go through :meth:`run`."""

    backend: Backend = field(default_factory=Backend.serial)
    timeout: float | None = None
    failed: list[str] = field(default_factory=list)  # Run.failure_lines() of every run

    def run(self, tasks: list[Task], function: TaskFunction, label: str) -> list[dict | None]:
        """Each task's ``values`` in task order (None where it failed, named in :attr:`failed`)."""
        from tqdm import tqdm

        with tqdm(total=len(tasks), desc=label, unit="task", file=sys.stderr, dynamic_ncols=True) as bar:
            run = run_tasks(
                tasks, self.backend, timeout=self.timeout, function=function, on_result=lambda i, r: bar.update()
            )
        print(f"{label}: {len(tasks)} tasks in {run.wall_s:.0f} s, {run.backend}", file=sys.stderr)
        self.failed.extend(run.failure_lines(tracebacks=True))
        return [r.values if r.ok else None for r in run.results]

    def exit_status(self) -> int:
        """Name every failed task on stderr: 1 when there is one, else 0."""
        for line in self.failed:
            print(f"failed: {line}", file=sys.stderr)
        return 1 if self.failed else 0


# ----------------------------------------------------------------------------- planners


def one_without_promotion(sc: Scenario, policy: Path) -> float:
    """The objective of the argmax order as it decodes, without the promotion pass."""
    (plan,) = ppo.candidates(sc, ppo.load_policy(policy), 1, promote_rounds=0)
    return checked(sc, plan).metrics.objective


# ----------------------------------------------------------------------------- (a) quality


@dataclass
class Row:
    """One instance's objectives; best known is a proven optimum when ``proven``."""

    family: str
    name: str
    gpus: int
    jobs: int
    fifo: float
    greedy: float
    one: float  # samples=1, guard none
    one_raw: float  # the same without promotion
    alone: float  # the shipped candidates without the guard
    shipped: float
    best: float
    proven: bool
    winner: int | str
    ms: dict[str, float] = field(default_factory=dict)  # each planner's plan time in its task (one run, ms)


def measure(
    sc: Scenario,
    family: str,
    policy: Path,
    best_time: float,
    deterministic_time: float | None = None,
) -> Row:
    """Every planner on one instance, and the best known (full mode for ``best_time`` s, 0: none)."""
    plans = {
        "fifo": checked(sc, run_scheduler("fifo", sc)),
        "greedy": checked(sc, run_scheduler("greedy", sc)),
        "one": checked(sc, run_scheduler("ppo", sc, one_options(policy))),
        "shipped": checked(sc, run_scheduler("ppo", sc, shipped_options(policy))),
    }
    objective = {key: plan.metrics.objective for key, plan in plans.items()}
    one_raw = one_without_promotion(sc, policy)
    shipped = plans["shipped"]
    alone = max(shipped.info["objectives"])
    values = [*objective.values(), one_raw]
    best, _, _, proven = best_known(sc, policy, values, best_time, deterministic_time)
    return Row(
        family, sc.name, sc.gpus, len(sc.jobs), objective["fifo"], objective["greedy"], objective["one"], one_raw,
        alone, objective["shipped"], best, proven, shipped.info["winner"],
        {key: plan.solve_ms for key, plan in plans.items()},
    )  # fmt: skip


def measure_task(task: Task) -> TaskResult:
    """:func:`measure` on one instance where the task landed (a task function of :mod:`agents.fanout`).

    The task: the instance, ``policy`` and ``deterministic_time``; ``params``: ``family`` and ``best_time``. The
    policy is warmed up first.
    """
    sc = task.load()
    policy = Path(task.policy or ppo.DEFAULT_POLICY)
    ppo.warm_up(policy)
    params = task.params
    row = measure(sc, params["family"], policy, params["best_time"], task.deterministic_time)
    return TaskResult(sc.name, task.planner, task.seed, values=asdict(row))


def measure_all(
    instances: list[tuple[Scenario, str, float]],
    policy: Path,
    fan: Fanout,
    label: str,
    deterministic_time: float | None = None,
) -> list[Row]:
    """:func:`measure` on every (scenario, family, full-mode seconds), one task each; failed tasks left out."""
    options = PlanOptions(policy=policy, deterministic_time=deterministic_time)
    tasks = [Task.make(sc, "ppo", options, family=f, best_time=t) for sc, f, t in instances]
    return [Row(**v) for v in fan.run(tasks, measure_task, label) if v is not None]


def _mean(rows: list[Row], key: str, over: str = "best") -> float:
    return float(np.mean([getattr(r, key) / getattr(r, over) for r in rows]))


COLUMNS = (("fifo", "FIFO"), ("greedy", "greedy"), ("one_raw", "one, no promotion"), ("one", "one"))


def quality_table(rows: list[Row]) -> list[str]:
    """Per family and over all: mean objective / best known and / greedy, and counts."""
    lines = [
        f"| family | GPUs x jobs | n | proven | FIFO / best | greedy / best | one, no promotion / best "
        f"| one / best | {DEFAULT_SAMPLES} unguarded / best | **shipped / best** | one / greedy | **shipped / greedy** "
        f"| one < greedy | shipped < greedy | shipped < FIFO | won by the {DEFAULT_GUARD.value} guard |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: |",
    ]
    for family in [*dict.fromkeys(r.family for r in rows), "all"]:
        rs = [r for r in rows if family in ("all", r.family)]
        size = "–" if family == "all" else f"{rs[0].gpus} x {rs[0].jobs}"
        lines.append(
            f"| {family} | {size} | {len(rs)} | {sum(r.proven for r in rs)} | {_mean(rs, 'fifo'):.4f} "
            f"| {_mean(rs, 'greedy'):.4f} | {_mean(rs, 'one_raw'):.4f} | {_mean(rs, 'one'):.4f} "
            f"| {_mean(rs, 'alone'):.4f} | **{_mean(rs, 'shipped'):.4f}** | {_mean(rs, 'one', 'greedy'):.4f} "
            f"| **{_mean(rs, 'shipped', 'greedy'):.4f}** | {sum(r.one < r.greedy - EPS for r in rs)} "
            f"| {sum(r.shipped < r.greedy - EPS for r in rs)} | {sum(r.shipped < r.fifo - EPS for r in rs)} "
            f"| {sum(isinstance(r.winner, str) for r in rs)} |"
        )
    return lines


def arms_table(rows: list[Row]) -> list[str]:
    """Every planner over all of (a)'s instances: quality and plan time side by side (one timed run per instance)."""
    arms = [
        ("fifo", "FIFO", "fifo"),
        ("greedy", "greedy", "greedy"),
        ("one", "one (policy alone)", "one"),
        ("shipped", f"shipped ({DEFAULT_SAMPLES} candidates, {DEFAULT_GUARD.value} guard)", "shipped"),
    ]
    body = []
    for key, label, ms_key in arms:
        rs = [r for r in rows if getattr(r, key) is not None and ms_key in r.ms and "greedy" in r.ms]
        if rs:
            body.append([
                label,
                f"{_mean(rs, key):.4f}",
                f"{_mean(rs, key, 'greedy'):.4f}",
                f"{sum(getattr(r, key) < r.greedy - EPS for r in rs)} of {len(rs)}",
                f"{np.median([r.ms[ms_key] for r in rs]):.2f}",
                f"{np.median([r.ms[ms_key] / r.ms['greedy'] for r in rs]):.2f}",
            ])  # fmt: skip
    head = ["planner", "mean / best", "mean / greedy", "below greedy", "median ms", "median ms / greedy's"]
    return table(head, body).splitlines()


def seven_table(rows: list[Row]) -> list[str]:
    """The seven benchmark scenarios' objectives, one row each."""
    lines = [
        "| scenario | FIFO | greedy | one, no promotion | one | shipped | best known | proven | greedy / best "
        "| one / best | shipped / best |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.fifo:.1f} | {r.greedy:.1f} | {r.one_raw:.1f} | {r.one:.1f} | {r.shipped:.1f} "
            f"| {r.best:.3f} | {'yes' if r.proven else 'no'} | {r.greedy / r.best:.3f} | {r.one / r.best:.3f} "
            f"| {r.shipped / r.best:.3f} |"
        )
    return lines


def _mark(met: bool) -> str:
    return "**met**" if met else "**missed**"


def quality_targets(rows: list[Row]) -> list[str]:
    """The quality targets on (a)'s fresh instances, each met or missed, with the numbers."""
    shipped, one, raw, greedy = (_mean(rows, k) for k in ("shipped", "one", "one_raw", "greedy"))
    unproven = sum(not r.proven for r in rows)
    flag = f" ({unproven} of {len(rows)} best known not proven: there the ratio is an upper bound)" if unproven else ""
    below = []
    for family in dict.fromkeys(r.family for r in rows):
        rs = [r for r in rows if r.family == family]
        s, g = _mean(rs, "shipped", "best"), _mean(rs, "greedy", "best")
        if s < g - EPS:
            below.append(f"{family} {s:.4f} < {g:.4f}")
    return [
        f"- (a) As shipped, at least greedy's mean on every family at the seed's sizes: {_mark(not below)}"
        + (f" (missed on {'; '.join(below)})." if below else f" ({len(set(r.family for r in rows))} families)."),
        f"- (a) As shipped, at least {SHIPPED_TARGET} of best known over all: {_mark(shipped >= SHIPPED_TARGET)}, "
        f"{shipped:.4f}{flag}; moonshot {SHIPPED_MOONSHOT}: {_mark(shipped >= SHIPPED_MOONSHOT)}.",
        f"- (a) The policy alone, one candidate, at least greedy's mean over all: {_mark(one >= greedy - EPS)}, "
        f"{one:.4f} of best known against greedy's {greedy:.4f} (without promotion: {raw:.4f}).",
    ]


def fifo_target(rows: list[Row], scale: list[dict[str, Any]]) -> list[str]:
    """Never below FIFO, counted over every instance of (a), the seven scenarios and (c)."""
    below = [r.name for r in rows if r.shipped < r.fifo - EPS]
    below += [v["name"] for v in scale if v["shipped"] < v["fifo"] - EPS]
    n = len(rows) + len(scale)
    return [
        f"- (a), the seven, (c) As shipped, never below FIFO: {_mark(not below)}, {len(below)} of {n} instances"
        + (f" ({', '.join(below[:10])})." if below else ".")
    ]


# ----------------------------------------------------------------------------- (b) plan time


def _cell(t: dict[str, np.ndarray], key: str) -> str:
    return f"{np.median(t[key]):.2f} ({np.percentile(t[key], 90):.2f})"


def _ratio(t: dict[str, np.ndarray], key: str, over: str = "greedy") -> str:
    per_round = t[key] / t[over]
    return f"{np.median(per_round):.2f} ({np.percentile(per_round, 90):.2f})"


def time_instances(sizes: list[int], per_size: int) -> list[Scenario]:
    """(b)'s fresh large instances: ``per_size`` per size, families in turn across the sizes (seeds 25000...)."""
    names = list(FAMILIES)
    out = []
    for k, gpus in enumerate(sizes):
        for i in range(per_size):
            out.append(fresh(names[(k * per_size + i) % len(names)], TIME_SEED + i, gpus))
    return out


def plan_time(
    policy: Path,
    rounds: int,
    large: list[Scenario],
) -> tuple[list[str], list[str]]:
    """The planners interleaved on the seven scenarios and ``large``: the table and the target lines.

    Always serial in this process, pinned to one core after the policy's warm-up; the CPUs are given back
    afterwards.
    """
    ppo.warm_up(policy)
    with one_core():
        return _plan_time(policy, rounds, large)


def _plan_time(policy: Path, rounds: int, large: list[Scenario]) -> tuple[list[str], list[str]]:
    lines = [
        "| scenario | GPUs x jobs | greedy ms | shipped ms | **shipped / greedy** | one ms | one / greedy "
        "| FIFO ms | FIFO / greedy | objective / greedy's: shipped, one |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    seed_sizes: dict[str, float] = {}
    large_sizes: dict[str, float] = {}
    medians: dict[str, float] = {}
    scenarios = [load_scenario(path) for path in seven_scenarios()] + large
    for k, sc in enumerate(scenarios):
        configs: dict[str, Callable[[], Plan]] = {
            "greedy": lambda sc=sc: run_scheduler("greedy", sc),
            "shipped": lambda sc=sc: run_scheduler("ppo", sc, shipped_options(policy)),
            "one": lambda sc=sc: run_scheduler("ppo", sc, one_options(policy)),
            "fifo": lambda sc=sc: run_scheduler("fifo", sc),
        }
        times: dict[str, list[float]] = {key: [] for key in configs}
        objectives: dict[str, float] = {}
        for r in range(rounds + 2):  # 2 warm-up rounds dropped
            for key, call in configs.items():
                started = time.perf_counter()
                plan = call()
                ms = (time.perf_counter() - started) * 1000.0
                objectives[key] = plan.metrics.objective
                if r >= 2:
                    times[key].append(ms)
        t = {key: np.array(v) for key, v in times.items()}
        ratio = float(np.median(t["shipped"] / t["greedy"]))
        (seed_sizes if k < len(FAMILIES) else large_sizes)[sc.name] = ratio
        medians[sc.name] = float(np.median(t["shipped"]))
        quality = [objectives[key] / objectives["greedy"] for key in ("shipped", "one")]
        lines.append(
            f"| {sc.name} | {sc.gpus} x {len(sc.jobs)} | {_cell(t, 'greedy')} | {_cell(t, 'shipped')} "
            f"| **{_ratio(t, 'shipped')}** | {_cell(t, 'one')} | {_ratio(t, 'one')} | {_cell(t, 'fifo')} "
            f"| {_ratio(t, 'fifo')} | {', '.join(f'{q:.4f}' for q in quality)} |"
        )
        print(f"plan time: {sc.name} done", file=sys.stderr)
    slow = [f"{n} {x:.2f}" for n, x in seed_sizes.items() if x > 1.0]
    slow_large = [f"{n} {x:.2f}" for n, x in large_sizes.items() if x > LARGE_TIME_RATIO]
    moon = medians.get(MOONSHOT_SCENARIO)
    worst = max(seed_sizes.values())
    targets = [
        "- (b) As shipped, a median plan time at most greedy's at the seed's sizes (median per-round ratio <= 1 on "
        f"each of the seven scenarios): {_mark(not slow)}"
        + (f", missed on {len(slow)}: {', '.join(slow)}." if slow else f", the highest ratio {worst:.2f}."),
    ]
    if large_sizes:
        worst_large = max(large_sizes.values())
        targets.append(
            f"- (b) As shipped, at most {LARGE_TIME_RATIO:g} of greedy's median at 256-1,024 GPUs (each large "
            f"instance): {_mark(not slow_large)}"
            + (f", missed on {', '.join(slow_large)}." if slow_large else f", the highest ratio {worst_large:.2f}.")
        )
    if moon is not None:
        targets.append(
            f"- (b) Moonshot, {MOONSHOT_MS:g} ms at 64 GPUs x 30 jobs ({MOONSHOT_SCENARIO}, as shipped, median): "
            f"{_mark(moon <= MOONSHOT_MS)}, {moon:.2f} ms."
        )
    return lines, targets


# ----------------------------------------------------------------------------- (c) large clusters


def scale_task(task: Task) -> TaskResult:
    """(c) on one large instance where the task landed: FIFO, greedy, ppo (one candidate, shipped), full mode.

    The task: the instance, ``policy`` and ``deterministic_time``; ``params``: ``family`` and ``time_limit``
    (full mode's). Plan times are one run each, after the policy's warm-up in this process.
    """
    sc = task.load()
    policy, time_limit = Path(task.policy or ppo.DEFAULT_POLICY), task.params["time_limit"]
    ppo.warm_up(policy)
    plans = {
        "fifo": checked(sc, run_scheduler("fifo", sc)),
        "greedy": checked(sc, run_scheduler("greedy", sc)),
        "one": checked(sc, run_scheduler("ppo", sc, one_options(policy))),
        "shipped": checked(sc, run_scheduler("ppo", sc, shipped_options(policy))),
    }
    values: dict[str, Any] = {"family": task.params["family"], "name": sc.name, "gpus": sc.gpus, "jobs": len(sc.jobs)}
    for key, plan in plans.items():
        values[key] = plan.metrics.objective
        values[f"{key}_ms"] = plan.solve_ms
    started = time.perf_counter()
    best, objective, status, proven = best_known(
        sc, policy, [p.metrics.objective for p in plans.values()], time_limit, task.deterministic_time
    )
    values.update(best=best, full=objective, status=status, proven=proven, full_s=time.perf_counter() - started)
    return TaskResult(sc.name, task.planner, task.seed, values=values)


def scale_instances(families: list[str], sizes: list[int], per: int) -> list[Scenario]:
    """(c)'s instances: ``per`` per family and size, seeds 30000..."""
    return [fresh(family, SCALE_SEED + i, gpus) for family in families for gpus in sizes for i in range(per)]


def large_clusters(
    policy: Path,
    instances: list[Scenario],
    time_limit: float,
    fan: Fanout,
    deterministic_time: float | None = None,
) -> list[dict[str, Any]]:
    """(c)'s measurements, one task per instance over ``fan``; failed tasks left out."""
    options = PlanOptions(policy=policy, deterministic_time=deterministic_time)
    tasks = [Task.make(sc, "ppo", options, family=sc.family, time_limit=time_limit) for sc in instances]
    return [v for v in fan.run(tasks, scale_task, "large clusters") if v is not None]


def scale_table(values: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Per family and size: mean ratios to best known and to greedy, and mean plan times; then the target lines."""
    lines = [
        "| family | GPUs x jobs | n | full mode (status) | greedy / best | one / best | **shipped / best** "
        "| shipped / greedy | greedy ms | one ms | shipped ms (/ greedy) | full s |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def mean(vs: list[dict[str, Any]], key: str, over: str = "best") -> float:
        return float(np.mean([v[key] / v[over] for v in vs]))

    below: list[str] = []
    groups = dict.fromkeys((v["family"], v["gpus"]) for v in values)
    for family, gpus in groups:
        vs = [v for v in values if (v["family"], v["gpus"]) == (family, gpus)]
        status = ", ".join(f"{s} {sum(v['status'] == s for v in vs)}" for s in dict.fromkeys(v["status"] for v in vs))
        full_cell = (
            f"{mean([v for v in vs if v['full'] is not None], 'full'):.4f}"
            if any(v["full"] is not None for v in vs)
            else "n/a"
        )
        s, g = mean(vs, "shipped"), mean(vs, "greedy")
        if s < g - EPS:
            below.append(f"{family} at {gpus} {s:.4f} < {g:.4f}")
        greedy_ms = float(np.mean([v["greedy_ms"] for v in vs]))
        shipped_ms = float(np.mean([v["shipped_ms"] for v in vs]))
        lines.append(
            f"| {family} | {gpus} x {vs[0]['jobs']} | {len(vs)} | {full_cell} ({status}) | {g:.4f} "
            f"| {mean(vs, 'one'):.4f} | **{s:.4f}** | {mean(vs, 'shipped', 'greedy'):.4f} | {greedy_ms:.1f} "
            f"| {np.mean([v['one_ms'] for v in vs]):.1f} | {shipped_ms:.1f} ({shipped_ms / greedy_ms:.2f}x) "
            f"| {np.mean([v['full_s'] for v in vs]):.1f} |"
        )
    if values:
        lines.append(
            f"| all | – | {len(values)} | – | {mean(values, 'greedy'):.4f} | {mean(values, 'one'):.4f} "
            f"| **{mean(values, 'shipped'):.4f}** | {mean(values, 'shipped', 'greedy'):.4f} | – | – | – | – |"
        )
    one, greedy = mean(values, "one"), mean(values, "greedy")
    targets = [
        f"- (c) As shipped, at least greedy's mean on every family at every large size: {_mark(not below)}"
        + (f" (missed on {'; '.join(below)})." if below else f" ({len(groups)} family-size groups)."),
        f"- (c) The policy alone, one candidate, at least greedy's mean over all: {_mark(one >= greedy - EPS)}, "
        f"{one:.4f} of best known against greedy's {greedy:.4f}.",
    ]
    return lines, targets


# ----------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    from agents.arguments import int_at_least, positive_float

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run of every section (2-3 minutes)")
    parser.add_argument("--policy", type=Path, default=ppo.DEFAULT_POLICY)
    parser.add_argument("--instances", type=int_at_least(0), help="(a): fresh instances per family (30; quick 8)")
    parser.add_argument("--best-time-limit", type=float, default=2.0, help="(a): full-mode seconds (2)")
    parser.add_argument("--seven-time-limit", type=float, help="full-mode seconds on the seven scenarios (30; quick 5)")
    parser.add_argument("--seven-only", action="store_true", help="only the seven scenarios' table (stdout)")
    parser.add_argument("--rounds", type=int_at_least(1), help="(b): interleaved rounds per instance (50; quick 10)")
    parser.add_argument("--time-sizes", type=gpu_counts, default=[256, 1024], help="(b): large GPU counts (256,1024)")
    parser.add_argument("--time-instances", type=int_at_least(0), help="(b): instances per large size (2; quick 1)")
    parser.add_argument("--scale-families", type=family_names, help="(c): families (all)")
    parser.add_argument("--scale-sizes", type=gpu_counts, help="(c): GPU counts (128,256,1024; quick 128,256)")
    parser.add_argument("--scale-instances", type=int_at_least(1), default=1, help="(c): per family and size (1)")
    parser.add_argument("--scale-time-limit", type=float, help="(c): full-mode seconds (30; quick 5)")
    parser.add_argument(
        "--deterministic-time",
        type=positive_float,
        metavar="D",
        help="also stop full mode's CP-SAT after D units of its deterministic time (machine-independent work): "
        "with a --*-time-limit never reached, the same tables at any machine load (default: none)",
    )
    parser.add_argument("--skip", default="", help="comma-separated sections to skip: quality,seven,time,scale")
    parser.add_argument("--out", type=Path, help="output file (default: results/ppo.md; quick: results/ppo_quick.md)")
    add_fanout_options(parser)  # --parallel N, --ray [ADDRESS], --task-timeout S: where (a) and (c) run
    return parser


def _seven_only(
    policy: Path, fan: Fanout, seven_time: float, dtime: float | None, out: Path | None, started: float
) -> int:
    """``--seven-only``: the seven scenarios' table, printed (and written to ``out``); the exit status."""
    rows = measure_all([(load_scenario(p), p.stem, seven_time) for p in seven_scenarios()], policy, fan, "seven", dtime)
    text = "\n".join(seven_table(rows)) + "\n"
    if out is not None:
        write_text_atomic(out, text)
    print(text, end="")
    print(f"{time.perf_counter() - started:.0f} s, tasks on {fan.backend.describe()}", file=sys.stderr)
    return fan.exit_status()


def _header(argv: list[str], args: argparse.Namespace, fan: Fanout, policy: Path) -> list[str]:
    """The report's title, command, date, machine, policy, fan-out and the arms' names."""
    quick = args.quick
    header = machine()
    loaded = ppo.load_policy(policy)
    rel = policy.relative_to(ROOT) if policy.is_relative_to(ROOT) else policy
    exe = Path(sys.executable)
    exe_text = os.path.relpath(exe, ROOT) if exe.is_relative_to(ROOT) else str(exe)
    command = shlex.join([f"PYTHONPATH={ROOT}", exe_text, "benchmarks/ppo_benchmarks.py", *argv])
    network = loaded.card.get("network", {})
    return [
        "# Learned fast mode (ppo) against its targets" + (" (quick run)" if quick else ""),
        "",
        f"- Command: `{command}`",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M %Z')}",
        f"- Machine: {header} (at the start)",
        f"- Policy: `{rel}` ({loaded.path.name}), SHA-256 `{loaded.sha256}`, "
        f"{network.get('parameters', 'n/a')} parameters, temperature {loaded.temperature:g}",
        f"- Tasks of (a) and (c): `agents.fanout`, one per instance, on {fan.backend.describe()}"
        + (f", task timeout {args.task_timeout:g} s" if args.task_timeout else "")
        + "; (b) serially in this process, pinned to one core.",
        "",
        f"'shipped': `ppo` as shipped, {DEFAULT_SAMPLES} candidates and the {DEFAULT_GUARD.value} guard (its plan "
        f"when worth more). '{DEFAULT_SAMPLES} unguarded': the same candidates' best (`guard=\"none\"`). 'one': "
        'the policy alone, one candidate (`samples=1, guard="none"`: the argmax order and the promotion pass). '
        "'one, no promotion': the argmax order as it decodes (`ppo.candidates(sc, policy, 1, promote_rounds=0)`).",
    ]


def _quality_section(
    rows: list[Row], instances: int, best_time: float, dtime: float | None, quality_lines: list[str]
) -> list[str]:
    """Section (a): the quality table, quality beside time, and its target lines."""
    return [
        "",
        "## (a) Quality at the seed's sizes",
        "",
        f"Objective / best known (and / greedy), mean per family over {instances} fresh instances each at the "
        f"family's own size (seeds {FRESH_SEED}..{FRESH_SEED + instances - 1}; none of their (family, seed, GPUs) "
        f"is among training's draws, replayed from `{TRAIN_CONFIG.relative_to(ROOT)}`, nor in the optima cache). "
        f"Best known: the best of every planner here and of full mode with {best_time:g} s"
        + (f" or {dtime:g} deterministic units" if dtime else "")
        + "; 'proven': CP-SAT proved it optimal, elsewhere the ratios are upper bounds. The last four columns "
        "count instances.",
        "",
        *quality_table(rows),
        "",
        "Quality and plan time side by side over all of them (ms: the one run of each planner in the instance's "
        "task, through `run_scheduler`, after the policy's warm-up; beside other tasks under `--parallel`; "
        "section (b) times them interleaved):",
        "",
        *arms_table(rows),
        "",
        *quality_lines,
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        fan = Fanout(fanout_backend(args), args.task_timeout)
    except FanoutError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    quick = args.quick
    instances = args.instances if args.instances is not None else (8 if quick else 30)
    seven_time = args.seven_time_limit if args.seven_time_limit is not None else (5.0 if quick else 30.0)
    rounds = args.rounds or (10 if quick else 50)
    per_size = args.time_instances if args.time_instances is not None else (1 if quick else 2)
    scale_families = args.scale_families or list(FAMILIES)
    scale_sizes = args.scale_sizes or ([128, 256] if quick else [128, 256, 1024])
    scale_time = args.scale_time_limit if args.scale_time_limit is not None else (5.0 if quick else 30.0)
    skip = set(filter(None, args.skip.split(",")))
    policy = args.policy.resolve()
    dtime = args.deterministic_time
    started = time.perf_counter()
    if args.seven_only:
        return _seven_only(policy, fan, seven_time, dtime, args.out, started)

    fresh_rows = [fresh(f, FRESH_SEED + i) for f in FAMILIES for i in range(instances)]
    timed = time_instances(args.time_sizes, per_size)
    scaled = [] if "scale" in skip else scale_instances(scale_families, scale_sizes, args.scale_instances)
    # (c) at 1,024 GPUs in the quick run: one instance, the smallest family's.
    if quick and args.scale_sizes is None and "scale" not in skip:
        scaled.append(fresh("scale-64x30", SCALE_SEED, 1024))
    check_fresh(fresh_rows + timed + scaled)
    out = _header(argv, args, fan, policy)
    rows: list[Row] = []
    seven: list[Row] = []
    scale: list[dict[str, Any]] = []
    targets: list[str] = []
    if "quality" not in skip:
        rows = measure_all([(sc, sc.family, args.best_time_limit) for sc in fresh_rows], policy, fan, "quality", dtime)
        quality_lines = quality_targets(rows)
        targets += quality_lines
        out += _quality_section(rows, instances, args.best_time_limit, dtime, quality_lines)
    if "seven" not in skip:
        seven = measure_all(
            [(load_scenario(p), p.stem, seven_time) for p in seven_scenarios()], policy, fan, "seven", dtime
        )
        out += ["", f"The seven benchmark scenarios (full mode {seven_time:g} s):", "", *seven_table(seven)]
    if "time" not in skip:
        table, time_targets = plan_time(policy, rounds, timed)
        targets += time_targets
        out += [
            "",
            "## (b) Plan time",
            "",
            "Wall ms per plan through `agents.registry.run_scheduler` (metrics included) in this one warm process, "
            f"pinned to one core, {rounds} rounds after 2 warm-up rounds; each round runs greedy, shipped, one and "
            "FIFO one after the other. Cells: median (p90); ratios are per round (against greedy's plan in the same "
            f"round), then median (p90). The seven scenarios, then {per_size} fresh instance(s) per size of "
            f"{', '.join(map(str, args.time_sizes))} GPUs (seeds {TIME_SEED}...). The last column: each plan's "
            "objective over greedy's, quality beside time.",
            "",
            *table,
            "",
            *time_targets,
        ]
    if "scale" not in skip:
        scale = large_clusters(policy, scaled, scale_time, fan, dtime)
        table, scale_targets = scale_table(scale)
        targets += scale_targets
        out += [
            "",
            "## (c) Large clusters",
            "",
            f"{args.scale_instances} fresh instance(s) per family and size (seeds {SCALE_SEED}..., jobs scaled with "
            f"the family's jobs per GPU); best known: full mode with {scale_time:g} s (its time includes its hints "
            "and the model build), or the best planner where full mode is worse. Ratios are means over the group; "
            "plan times are one run each (mean over the group), after a warm-up.",
            "",
            *table,
            "",
            *scale_targets,
        ]
    fifo_lines = fifo_target(rows + seven, scale)
    targets += fifo_lines
    if "scale" not in skip or rows or seven:
        out += ["", "## Never below FIFO", "", *fifo_lines]
    out += ["", "## Targets", "", *targets]
    if fan.failed:
        out += ["", "## Failed tasks", "", "Left out of the tables above:", "", *(f"- {line}" for line in fan.failed)]
    out += ["", f"Total benchmark time {time.perf_counter() - started:.0f} s; at the end: {machine()}.", ""]
    write_text_atomic(args.out or (QUICK_RESULTS if quick else RESULTS), "\n".join(out))
    print("\n".join(out))
    return fan.exit_status()


if __name__ == "__main__":
    sys.exit(main())
