"""Benchmarks of the learned fast mode: quality per family, latency, generalisation, training cost.

    .venv/bin/python benchmarks/ppo_benchmarks.py [--policy agents/policies/default.onnx] [--instances 50]
        [--best-time-limit 2] [--seven-time-limit 30] [--repeats 50] [--samples 8]
    .venv/bin/python benchmarks/ppo_benchmarks.py --seven-only   # the seven scenarios' table only (about a minute)

Writes ``benchmarks/results/ppo.md``:

* **Quality.** The seven scenarios (``configs/scenarios/``) and ``--instances``
  fresh instances per family (seeds 20000, 20001, ...; the training draws and
  the training-time evaluation seeds are elsewhere). Per instance: FIFO, greedy,
  ppo (one rollout: the most likely action at each step; and the best of
  several sampled rollouts) and the best known objective: the best of those and
  of full mode (CP-SAT hinted with the better of greedy and ppo) with
  ``--best-time-limit`` seconds, which is a proven optimum where CP-SAT proves it.
  The seven benchmark scenarios get ``--seven-time-limit`` seconds instead: CP-SAT
  proves each of them in a few seconds, so their ratios are against proven optima.
  ``--seven-only`` measures just those seven and prints their table (``--out`` to write it).
* **Latency.** Wall time of ``agents.ppo.plan`` (policy loaded once), pinned to
  one CPU core, ``--repeats`` times per benchmark scenario: median, p90, p99, max.
* **Generalisation.** Instances of sizes the policy did not train on: 128 GPUs
  with 60 jobs, and 16 GPUs for the families trained at another size.
* **Training.** Time, steps and steps per second from the run's ``summary.json``.

Times are wall clock on a shared 2-core machine: noisy, and a lower bound on
quality of service only when the machine is quiet.

The instances of quality and generalisation are tasks of :mod:`agents.fanout`
(one per instance): ``--parallel N`` measures N at once in a process pool,
``--ray [ADDRESS]`` on Ray, with the same objectives as a serial run (full mode
with a time limit may find more or less when it does not prove optimality, as it
may serially). Latency is always measured serially: tasks running beside it would
distort it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import ppo  # noqa: E402
from agents.arguments import add_fanout_options, fanout_backend  # noqa: E402
from agents.fanout import Backend, FanoutError, Task, TaskResult, run_tasks  # noqa: E402
from agents.options import PlanOptions  # noqa: E402
from agents.registry import run_scheduler  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import FAMILIES, generate  # noqa: E402
from gpu_env.scenario import Scenario, load_scenario  # noqa: E402
from gpu_env.validation import validate  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "ppo.md"
FRESH_SEED = 20_000
FAILED: list[str] = []  # failed measurement tasks, by scenario, planner and seed: the exit status is then 1


@dataclass
class Row:
    """One instance's objectives."""

    family: str
    name: str
    fifo: float
    greedy: float
    ppo: float
    sampled: float
    best: float
    proven: bool
    guarded: bool


def ppo_objective(sc: Scenario, policy: Path, samples: int, guard: bool) -> tuple[float, bool]:
    plan = ppo.plan(sc, PlanOptions(policy=policy), samples=samples, guard=guard)
    problems = validate(sc, plan)
    if problems:
        raise RuntimeError(f"ppo plan invalid on {sc.name}: {problems[0]}")
    return plan.metrics.objective, plan.info["guard"]


def measure(sc: Scenario, family: str, policy: Path, samples: int, best_time: float) -> Row:
    fifo = run_scheduler("fifo", sc).metrics.objective
    greedy = run_scheduler("greedy", sc).metrics.objective
    one, _ = ppo_objective(sc, policy, 1, guard=False)  # the policy alone
    sampled, guarded = ppo_objective(sc, policy, samples, guard=True)  # the scheduler as shipped
    best, proven = max(fifo, greedy, one, sampled), False
    if best_time > 0:
        from agents import full

        result = full.solve(sc, time_limit=best_time, options=PlanOptions(time_limit=best_time, policy=policy))
        if result.objective is not None:
            best = max(best, result.objective)
        proven = result.status.value == "optimal"
    return Row(family, sc.name, fifo, greedy, one, sampled, best, proven, guarded)


def measure_task(task: Task) -> TaskResult:
    """:func:`measure` on one instance where the task landed (a task function of :mod:`agents.fanout`)."""
    sc = task.load()
    p = task.params
    row = measure(sc, p["family"], Path(task.policy or ppo.DEFAULT_POLICY), p["samples"], p["best_time"])
    return TaskResult(sc.name, task.planner, task.seed, values=asdict(row))


def measure_all(
    instances: list[tuple[Scenario, str, float]],
    policy: Path,
    samples: int,
    backend: Backend | None,
    timeout: float | None,
    label: str,
) -> list[Row | None]:
    """:func:`measure` every (scenario, family, full-mode seconds) as tasks over ``backend``, rows in input order.

    A failed task's row is None, and the task is named in :data:`FAILED`.
    """
    from tqdm import tqdm

    options = PlanOptions(policy=policy)
    tasks = [Task.make(sc, "ppo", options, family=f, samples=samples, best_time=t) for sc, f, t in instances]
    with tqdm(total=len(tasks), desc=label, unit="task", file=sys.stderr, dynamic_ncols=True) as bar:
        run = run_tasks(tasks, backend, timeout=timeout, function=measure_task, on_result=lambda i, r: bar.update())
    print(f"{label}: {len(tasks)} tasks in {run.wall_s:.0f} s, {run.backend}", file=sys.stderr)
    FAILED.extend(run.failure_lines())
    return [Row(**r.values) if r.ok else None for r in run.results]


def quality(
    policy: Path,
    instances: int,
    samples: int,
    best_time: float,
    seven_time: float,
    backend: Backend | None = None,
    timeout: float | None = None,
) -> list[Row]:
    """Each family's benchmark scenario (full mode ``seven_time`` s) and ``instances`` fresh ones (``best_time`` s)."""
    todo = []
    for family in FAMILIES:
        benchmark = load_scenario(ROOT / "configs" / "scenarios" / f"{family}.yaml")
        todo.append((benchmark, family, max(best_time, seven_time)))
        for i in range(instances):
            sc = generate(family, FRESH_SEED + i, name=f"{family}-{FRESH_SEED + i}")
            todo.append((sc, family, best_time))
    return [row for row in measure_all(todo, policy, samples, backend, timeout, "quality") if row is not None]


def quality_table(rows: list[Row], samples: int) -> list[str]:
    lines = [
        f"| family | n | FIFO / best | greedy / best | ppo 1 / best | ppo {samples} / best | ppo {samples} / greedy "
        f"| ppo {samples} < greedy | ppo 1 < FIFO | ppo {samples} < FIFO | FIFO guard fired | proven optima |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    fams = list(dict.fromkeys(r.family for r in rows))
    for family in [*fams, "all"]:
        rs = [r for r in rows if family in ("all", r.family)]
        a = np.array([(r.fifo, r.greedy, r.ppo, r.sampled, r.best) for r in rs])
        best = a[:, 4]
        lines.append(
            f"| {family} | {len(rs)} | {np.mean(a[:, 0] / best):.3f} | {np.mean(a[:, 1] / best):.3f} "
            f"| {np.mean(a[:, 2] / best):.3f} | {np.mean(a[:, 3] / best):.3f} | {np.mean(a[:, 3] / a[:, 1]):.3f} "
            f"| {int(np.sum(a[:, 3] < a[:, 1] - 1e-6))} | {int(np.sum(a[:, 2] < a[:, 0] - 1e-6))} "
            f"| {int(np.sum(a[:, 3] < a[:, 0] - 1e-6))} | {sum(r.guarded for r in rs)} | {sum(r.proven for r in rs)} |"
        )
    return lines


def seven_table(rows: list[Row]) -> list[str]:
    lines = [
        "| scenario | FIFO | greedy | ppo 1 | ppo N | best known | proven | greedy / best | ppo N / best |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for r in rows:
        if r.name in FAMILIES:
            lines.append(
                f"| {r.name} | {r.fifo:.1f} | {r.greedy:.1f} | {r.ppo:.1f} | {r.sampled:.1f} | {r.best:.3f} "
                f"| {'yes' if r.proven else 'no'} | {r.greedy / r.best:.3f} | {r.sampled / r.best:.3f} |"
            )
    return lines


def latency(policy: Path, repeats: int, samples_list: list[int]) -> list[str]:
    """Latency pinned to one core; the process's CPUs are given back afterwards (later tasks fan out again)."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if cpus is not None:
        os.sched_setaffinity(0, {sorted(cpus)[0]})
    try:
        return _latency(policy, repeats, samples_list)
    finally:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)


def _latency(policy: Path, repeats: int, samples_list: list[int]) -> list[str]:
    ppo.load_policy(policy)
    lines = [
        "| scenario | GPUs x jobs | samples | placements | median ms | p90 ms | p99 ms | max ms | median CPU ms "
        "| greedy median ms |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for family in FAMILIES:
        sc = load_scenario(ROOT / "configs" / "scenarios" / f"{family}.yaml")
        greedy_times = []
        for _ in range(max(5, repeats // 5)):
            t0 = time.perf_counter()
            run_scheduler("greedy", sc)
            greedy_times.append((time.perf_counter() - t0) * 1000)
        for samples in samples_list:
            times, cpu = [], []
            for i in range(repeats + 3):
                t0, c0 = time.perf_counter(), time.thread_time()
                plan = ppo.plan(sc, PlanOptions(policy=policy, seed=i), samples=samples)
                if i >= 3:  # warm-up runs dropped
                    times.append((time.perf_counter() - t0) * 1000)
                    cpu.append((time.thread_time() - c0) * 1000)
            q = np.percentile(times, [50, 90, 99])
            lines.append(
                f"| {family} | {sc.gpus} x {len(sc.jobs)} | {samples} | {len(plan.placements)} | {q[0]:.2f} "
                f"| {q[1]:.2f} | {q[2]:.2f} | {max(times):.2f} | {statistics.median(cpu):.2f} "
                f"| {statistics.median(greedy_times):.2f} |"
            )
        print(f"latency: {family} done", file=sys.stderr)
    return lines


def generalisation(
    policy: Path,
    instances: int,
    samples: int,
    best_time: float,
    backend: Backend | None = None,
    timeout: float | None = None,
) -> list[str]:
    card = ppo.load_policy(policy).card
    trained = card.get("config", {}) or {}
    sized = trained.get("scenarios", {}).get("gpus")
    lines = [
        "| family | size | n | ppo 1 / greedy | ppo N / greedy | ppo N / FIFO | ppo N / best known | ppo 1 < FIFO "
        "| guard fired |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    groups = []  # (family, size label, the instances' indices in todo)
    todo = []
    for family, fam in FAMILIES.items():
        sizes = [(128, 60)]
        if fam.gpus != 16 and sized is None:
            sizes.insert(0, (16, None))
        for gpus, jobs in sizes:
            indices = []
            for i in range(instances):
                sc = generate(family, FRESH_SEED + 500 + i, gpus=gpus, num_jobs=jobs)
                todo.append((sc, family, best_time if gpus <= 64 else 0.0))
                indices.append(len(todo) - 1)
            label = f"{gpus} GPUs" + (f", {jobs} jobs" if jobs else f", {len(sc.jobs)} jobs (last)")
            groups.append((family, label, indices))
    measured = measure_all(todo, policy, samples, backend, timeout, "generalisation")
    for family, label, indices in groups:
        rows = [measured[i] for i in indices if measured[i] is not None]
        if not rows:
            lines.append(f"| {family} | {label} | 0 | – | – | – | – | – | – |")
            continue
        a = np.array([(r.fifo, r.greedy, r.ppo, r.sampled, r.best) for r in rows])
        lines.append(
            f"| {family} | {label} | {len(rows)} | {np.mean(a[:, 2] / a[:, 1]):.3f} "
            f"| {np.mean(a[:, 3] / a[:, 1]):.3f} | {np.mean(a[:, 3] / a[:, 0]):.3f} "
            f"| {np.mean(a[:, 3] / a[:, 4]):.3f} | {int(np.sum(a[:, 2] < a[:, 0] - 1e-6))} "
            f"| {sum(r.guarded for r in rows)} |"
        )
    return lines


def training_section(policy: Path) -> list[str]:
    card = ppo.load_policy(policy).card
    info = card.get("training", {})
    lines = [
        f"- Policy: `{policy.relative_to(ROOT) if policy.is_relative_to(ROOT) else policy}`, "
        f"seed {card.get('seed')}, PPO steps {card.get('training_steps')} (the best evaluation's checkpoint), "
        f"{card['network']['parameters']} parameters, file {policy.stat().st_size / 1024:.0f} KiB.",
        f"- Device: {info.get('device')}; imitation: {info.get('imitation_samples')} teacher decisions"
        + (
            f", {info['imitation_samples_with_dagger']} after {len(info.get('dagger_agreement', []))} DAgger rounds "
            f"(agreement on the policy's own states {', '.join(f'{a:.0%}' for a in info.get('dagger_agreement', []))})"
            if info.get("imitation_samples_with_dagger")
            else ""
        )
        + f"; {_fmt(info.get('imitation_seconds'))} s for "
        + ("fitting (demonstrations from the run's cache)" if info.get("imitation_data_cached") else "data and fitting")
        + f"; PPO: {info.get('ppo_steps')} steps in {_fmt(info.get('ppo_seconds'))} s, "
        f"{_fmt(info.get('steps_per_second'))} steps/s.",
    ]
    history = info.get("history") or []  # the card holds the training-time evaluations
    if history:
        lines += [
            "",
            "Training-time evaluation (most likely action, fixed instances, mean over families):",
            "",
            "| PPO steps | ppo / greedy | ppo / FIFO | below FIFO |",
            "| ---: | ---: | ---: | ---: |",
        ]
        lines += [
            f"| {h['steps']} | {h['mean_vs_greedy']:.3f} | {h['mean_vs_fifo']:.3f} | {int(h['below_fifo'])} |"
            for h in history
        ]
    return lines


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=Path, default=ppo.DEFAULT_POLICY)
    parser.add_argument("--instances", type=int, default=50, help="fresh instances per family (quality)")
    parser.add_argument("--general-instances", type=int, default=10, help="instances per family and size")
    parser.add_argument("--best-time-limit", type=float, default=1.0, help="full-mode seconds for the best known")
    parser.add_argument(
        "--seven-time-limit", type=float, default=30.0, help="full-mode seconds for the seven benchmark scenarios"
    )
    parser.add_argument("--seven-only", action="store_true", help="only the seven scenarios' table (stdout)")
    parser.add_argument("--repeats", type=int, default=50, help="latency repeats per scenario")
    parser.add_argument("--samples", type=int, default=ppo.DEFAULT_SAMPLES, help="rollouts of the default columns")
    parser.add_argument("--skip", default="", help="comma-separated sections to skip: quality,latency,general")
    parser.add_argument("--out", type=Path, default=None, help=f"output file (default: {RESULTS.relative_to(ROOT)})")
    add_fanout_options(parser)
    args = parser.parse_args()
    try:
        backend = fanout_backend(args)
    except FanoutError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    run = {"backend": backend, "timeout": args.task_timeout}
    samples = args.samples
    skip = set(filter(None, args.skip.split(",")))
    policy = args.policy.resolve()
    started = time.perf_counter()
    if args.seven_only:
        rows = quality(policy, 0, samples, args.best_time_limit, args.seven_time_limit, **run)
        text = "\n".join(seven_table(rows)) + "\n"
        if args.out is not None:
            write_text_atomic(args.out, text)
        print(text, end="")
        print(f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
        return _failed()
    out = [
        "# Learned fast mode (ppo): quality, latency, generalisation",
        "",
        f"Written by `.venv/bin/python benchmarks/ppo_benchmarks.py {' '.join(sys.argv[1:])}` on "
        f"{time.strftime('%Y-%m-%d')} (Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs shared with other work).",
        "",
        "## Training",
        "",
        *training_section(policy),
    ]
    if "quality" not in skip:
        rows = quality(policy, args.instances, samples, args.best_time_limit, args.seven_time_limit, **run)
        out += [
            "",
            "## Quality",
            "",
            f"Objective / best known, averaged per family over the benchmark scenario and {args.instances} fresh "
            f"instances (seeds {FRESH_SEED}..{FRESH_SEED + args.instances - 1}). Best known: the best of FIFO, "
            f"greedy, ppo and full mode with {args.best_time_limit:g} s (hinted with the better of greedy and ppo); "
            f"the seven benchmark scenarios get {args.seven_time_limit:g} s. "
            "'proven optima': instances where CP-SAT proved it optimal. 'ppo 1': the policy alone, one rollout "
            f"(most likely action), no guard. 'ppo {samples}': the scheduler as shipped, {samples} rollouts in one "
            "batch and the FIFO guard. '<' columns count instances where the ppo plan is worse.",
            "",
            *quality_table(rows, samples),
            "",
            "The seven benchmark scenarios:",
            "",
            *seven_table(rows),
        ]
    if "latency" not in skip:
        out += [
            "",
            "## Latency",
            "",
            f"`agents.ppo.plan` on the benchmark scenarios, policy loaded once, pinned to one core, {args.repeats} "
            "runs after 3 warm-up runs (wall ms; the machine is shared, so the tail is noisy).",
            "",
            *latency(policy, args.repeats, sorted({1, samples})),
        ]
    if "general" not in skip:
        out += [
            "",
            "## Generalisation",
            "",
            f"{args.general_instances} instances per family and size (seeds {FRESH_SEED + 500}...), sizes the "
            "policy never saw in training. Best known: full mode where G <= 64, else the best of the fast modes.",
            "",
            *generalisation(policy, args.general_instances, samples, args.best_time_limit, **run),
        ]
    out += ["", f"Total benchmark time {time.perf_counter() - started:.0f} s.", ""]
    write_text_atomic(args.out or RESULTS, "\n".join(out))
    print("\n".join(out))
    return _failed()


def _failed() -> int:
    """Name every failed task on stderr: exit status 1 when there is one, else 0."""
    for line in FAILED:
        print(f"failed: {line}", file=sys.stderr)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
