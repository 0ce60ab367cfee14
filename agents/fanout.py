"""Fan independent planning tasks out: serially, over a local process pool, or over Ray.

A study runs many (scenario, planner, seed) tasks that do not depend on each
other. A :class:`Task` is picklable data (the scenario as a document or a file
path, the planner's name, the :class:`~agents.options.PlanOptions` fields, the
seed); :func:`run_task` plans it in whatever process it lands in exactly as a
serial run does (:func:`agents.registry.run_scheduler`, then
:func:`~gpu_env.validation.validate`), and returns a :class:`TaskResult` of
plain values. :func:`fan_out` yields ``(index, result)`` as tasks finish,
whatever the backend, so a progress bar counts finished tasks;
:func:`run_tasks` collects them in task order into a :class:`Run`.

Backends (:class:`Backend`, stated in :mod:`agents.backends` with their checks and errors), none of them a
scheduler of our own:

- ``serial``: in this process, one task after another (the default; tests use it).
- ``pool``: ``concurrent.futures.ProcessPoolExecutor`` with ``parallel`` processes
  started by ``forkserver`` (``spawn`` where there is none), never ``fork``.
- ``ray``: one ``ray.remote`` task per Task (``num_cpus`` = the task's CP-SAT
  ``workers``, ``max_retries=1`` so a killed worker is retried once),
  collected with ``ray.wait``. A local Ray is started (and stopped) when none
  is running; ``address`` joins a running cluster. Every node needs this
  package installed, and a scenario given as a path must be readable there:
  pass documents (:meth:`Task.make` does) to a real cluster.

Cores: a task may use ``workers`` cores (CP-SAT's ``num_workers``; the other
planners use one). A pool runs ``parallel`` tasks at once, so
``parallel * workers`` must not exceed the CPUs of this machine
(:func:`check_cpu_budget` refuses more with :class:`OversubscribedError`).
Ray places each task on a node with ``workers`` free CPUs, so it never
oversubscribes; :func:`fan_out` refuses ``workers`` above the largest node's CPUs
(such tasks would wait for ever).

Failures: a task that raises, or that runs past ``timeout`` seconds, becomes a
result with ``error`` set (``Type: message``); the other tasks complete, and
:attr:`Run.failures` names each failed task by scenario, planner and seed. The
timeout is an alarm inside the task (``SIGALRM``): Python code stops at once,
native code when it returns to Python (CP-SAT stops at its own ``time_limit``,
so give ``timeout`` a margin above it). A pool worker that dies (a crash, the
OOM killer) breaks the pool: the tasks it was running and those still queued
are reported as failed. Ray retries a task whose worker died once.

>>> from gpu_env.generators import generate
>>> tasks = [Task.make(generate("training-heavy", seed=0), p) for p in ("fifo", "greedy")]
>>> run = run_tasks(tasks)
>>> [(r.planner, r.error) for r in run.results], run.ok
([('fifo', None), ('greedy', None)], True)
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from agents.backends import (  # noqa: F401 - the backends, given here under the same names
    LOCAL_RAY,
    RAY_INSTALL_HINT,
    Backend,
    BackendKind,
    FanoutError,
    OversubscribedError,
    RayNotInstalledError,
    available_cpus,
    check_cpu_budget,
    require_ray,
)
from agents.options import Guard, PlanOptions
from agents.registry import run_scheduler
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Plan, without_timings
from gpu_env.scenario import Scenario, load_scenario, scenario_from_dict
from gpu_env.validation import validate

TIMING_FIELDS = ("solve_ms", "elapsed")  # what differs between two runs of the same task
PLACE_FIELDS = ("traceback",)  # what names where a task ran (a worker's file paths, Ray's own frames)
LEARNED = (
    "ppo",
    "ppo-stepwise",
    "full",
)  # planners that run the learned policy: warmed up once per process before timing


class TaskTimeout(BaseException):
    """A task ran past its time limit (raised inside the task by an alarm).

    A BaseException, like KeyboardInterrupt, so that a planner's ``except Exception`` lets it through.
    """


# ----------------------------------------------------------------------------- tasks and results


@dataclass(frozen=True)
class Task:
    """One planner on one scenario with one seed: picklable data only.

    Attributes:
        scenario: The scenario document (SPEC section 1, ``Scenario.to_dict()``) or a path to
            a scenario file readable where the task runs.
        planner: A scheduler name of :data:`agents.registry.SCHEDULERS`.
        seed: The seed of every random draw (``PlanOptions.seed``).
        time_limit: Seconds for anytime planners (``PlanOptions.time_limit``).
        workers: CP-SAT workers, and the CPUs the task may use (``PlanOptions.workers``).
        policy: An exported policy file for the learned planner (``PlanOptions.policy``).
        samples: Rollouts of the learned planner (``PlanOptions.samples``).
        guard: The learned planner's guard, ``none``, ``fifo`` or ``greedy`` (``PlanOptions.guard``).
        deterministic_time: CP-SAT's deterministic-time limit (``PlanOptions.deterministic_time``).
        params: Extra plain values for a task function other than :func:`run_task`
            (a forecast error, a re-planning period).
    """

    scenario: dict[str, Any] | str
    planner: str
    seed: int = 0
    time_limit: float = PlanOptions.time_limit
    workers: int = 1
    policy: str | None = None
    samples: int = PlanOptions.samples
    guard: str = str(PlanOptions.guard)
    params: dict[str, Any] = field(default_factory=dict)
    deterministic_time: float | None = None

    @classmethod
    def make(
        cls,
        scenario: Scenario | str | os.PathLike[str],
        planner: str,
        options: PlanOptions | None = None,
        **params: Any,
    ) -> Task:
        """A task from a loaded scenario (sent as its document) or a file path, and plan options."""
        options = options or PlanOptions()
        source: dict[str, Any] | str = scenario.to_dict() if isinstance(scenario, Scenario) else os.fspath(scenario)
        policy = None if options.policy is None else os.fspath(options.policy)
        return cls(
            source,
            planner,
            options.seed,
            options.time_limit,
            options.workers,
            policy,
            options.samples,
            str(options.guard),
            dict(params),
            options.deterministic_time,
        )

    @property
    def scenario_name(self) -> str:
        """The scenario's name (a file's stem until the file is read)."""
        if isinstance(self.scenario, Mapping):
            return str(self.scenario.get("name", "<dict>"))
        return Path(self.scenario).stem

    def options(self) -> PlanOptions:
        """The plan options this task describes."""
        policy = None if self.policy is None else Path(self.policy)
        return PlanOptions(
            time_limit=self.time_limit,
            seed=self.seed,
            workers=self.workers,
            policy=policy,
            samples=self.samples,
            guard=Guard(self.guard),
            deterministic_time=self.deterministic_time,
        )

    def load(self) -> Scenario:
        """The scenario, read and checked.

        Raises:
            ScenarioError: A malformed document or file.
        """
        if isinstance(self.scenario, Mapping):
            return scenario_from_dict(self.scenario, f"<{self.scenario_name}>")
        return load_scenario(self.scenario)

    def describe(self) -> str:
        """``scenario NAME, planner NAME, seed N``: how failures name the task."""
        return f"scenario {self.scenario_name!r}, planner {self.planner!r}, seed {self.seed}"


@dataclass
class TaskResult:
    """What one task produced, in plain values (picklable, JSON-ready with :meth:`to_dict`).

    Attributes:
        scenario: The scenario's name.
        planner: The planner's name.
        seed: The task's seed.
        objective: The plan's objective; None when the task failed.
        metrics: The plan's metrics (``Metrics.to_dict()``); empty when the task failed.
        plan: The plan JSON (``Plan.to_dict()`` without ``solve_ms``); None when the task failed.
        violations: The rules the plan breaks (empty for a valid plan).
        solve_ms: The planner's own time in milliseconds; None when the task failed.
        error: ``Type: message`` when the task raised or timed out, else None.
        traceback: The worker's formatted traceback when the task raised or timed out (where the
            alarm found it), Ray's own report when a Ray task failed; None otherwise.
        elapsed: Seconds the task took where it ran, reading the scenario included.
        values: Plain values from a task function other than :func:`run_task`, which
            returns no plan (a rolling comparison's rows, a benchmark's numbers).
    """

    scenario: str
    planner: str
    seed: int
    objective: float | None = None
    metrics: dict[str, float | int] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    violations: list[str] = field(default_factory=list)
    solve_ms: float | None = None
    error: str | None = None
    elapsed: float = 0.0
    values: dict[str, Any] = field(default_factory=dict)
    traceback: str | None = None

    @property
    def ok(self) -> bool:
        """The task finished without error and produced a plan that breaks no rule, or its values."""
        return self.error is None and not self.violations and (self.plan is not None or bool(self.values))

    def describe(self) -> str:
        """``scenario NAME, planner NAME, seed N``."""
        return f"scenario {self.scenario!r}, planner {self.planner!r}, seed {self.seed}"

    def to_dict(self) -> dict[str, Any]:
        """The record as a dict of plain values."""
        return asdict(self)

    def comparable(self) -> dict[str, Any]:
        """The record without its timings and traceback: equal for two runs of a deterministic planner."""
        data = self.to_dict()
        for name in (*TIMING_FIELDS, *PLACE_FIELDS):
            data.pop(name, None)
        if data.get("plan") is not None:
            data["plan"] = without_timings(data["plan"])  # an anytime trace's seconds
        return data

    def to_plan(self, scenario: Scenario) -> Plan | None:
        """The plan as a :class:`~gpu_env.plan.Plan` again, metrics and plan time attached (None when it failed).

        Args:
            scenario: The task's scenario; the metrics are computed again on it, unrounded.
        """
        if self.plan is None:
            return None
        plan = Plan.from_dict(self.plan, f"<{self.scenario}/{self.planner}>")
        plan.metrics = compute_metrics(scenario, plan)
        plan.solve_ms = self.solve_ms
        return plan

    @classmethod
    def failed(cls, task: Task, error: str, elapsed: float = 0.0, traceback: str | None = None) -> TaskResult:
        """The record of a task that produced no plan."""
        return cls(task.scenario_name, task.planner, task.seed, error=error, elapsed=elapsed, traceback=traceback)


TaskFunction = Callable[[Task], TaskResult]


def warm_up_learned(planner: str, options: PlanOptions) -> None:
    """Warm the learned policy up in this process before ``planner`` is timed (a no-op outside :data:`LEARNED`).

    Raises:
        PolicyError: For ``ppo``, no usable policy or runtime (``full`` falls back and says so).
    """
    if planner not in LEARNED:
        return
    from agents import ppo

    if planner == "ppo-stepwise":
        from agents import ppo_stepwise

        ppo_stepwise.warm_up(options.policy)
        return
    try:
        ppo.warm_up(options.policy)
    except ppo.PolicyError:  # no usable policy or runtime: ppo fails, full falls back, each saying why; a bug raises
        if planner == "ppo":
            raise


def run_task(task: Task) -> TaskResult:
    """Plan one task as a serial run does: read the scenario, run the scheduler, validate the plan.

    A planner that runs the learned policy (``ppo``, and ``full`` for its hint) is warmed up
    first, once per process (:func:`agents.ppo.warm_up`), so that ``solve_ms`` is a warm
    process's time whatever the backend and whichever task a worker runs first.

    Exceptions propagate; :func:`fan_out` turns them into failed results.
    """
    started = time.perf_counter()
    scenario = task.load()
    options = task.options()
    warm_up_learned(task.planner, options)  # the learned policy's one-time costs stay out of solve_ms
    plan = run_scheduler(task.planner, scenario, options)
    violations = [str(v) for v in validate(scenario, plan)]
    document = plan.to_dict()
    document.pop("solve_ms", None)  # a timing, kept in TaskResult.solve_ms
    return TaskResult(
        scenario=scenario.name,
        planner=task.planner,
        seed=task.seed,
        objective=None if plan.metrics is None else float(plan.metrics.objective),
        metrics={} if plan.metrics is None else dict(plan.metrics.to_dict()),
        plan=document,
        violations=violations,
        solve_ms=plan.solve_ms,
        elapsed=time.perf_counter() - started,
    )


def execute(function: TaskFunction, task: Task, timeout: float | None = None) -> TaskResult:
    """Run one task where it landed: any exception or a timeout becomes a failed result.

    The timeout is an alarm (``SIGALRM``), available in the main thread of a
    process on POSIX systems; elsewhere the task runs without one.
    """
    started = time.perf_counter()
    alarm = (
        timeout is not None and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    )
    previous: Any = None
    outer = (0.0, 0.0)  # a timer someone else had set (pytest-timeout, say), restored afterwards
    if alarm:

        def _expire(signum: int, frame: Any) -> None:
            raise TaskTimeout

        previous = signal.signal(signal.SIGALRM, _expire)
        outer = signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        try:
            return function(task)
        finally:
            if alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
                if outer[0] > 0:
                    left = outer[0] - (time.perf_counter() - started)
                    signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), outer[1])
    except TaskTimeout:
        elapsed = time.perf_counter() - started
        return TaskResult.failed(task, f"TaskTimeout: ran past {timeout:g} s", elapsed, traceback.format_exc())
    except Exception as exc:  # a failed task is reported, not fatal to the run, with the worker's traceback
        elapsed = time.perf_counter() - started
        return TaskResult.failed(task, f"{type(exc).__name__}: {exc}", elapsed, traceback.format_exc())


# ----------------------------------------------------------------------------- fanning out


def fan_out(
    tasks: Sequence[Task],
    backend: Backend | None = None,
    *,
    timeout: float | None = None,
    function: TaskFunction = run_task,
    cpus: int | None = None,
) -> Iterator[tuple[int, TaskResult]]:
    """Run tasks and yield ``(index in tasks, result)`` as each finishes.

    Args:
        tasks: The tasks; all should have the same ``workers``, the CPUs each one takes.
        backend: Where to run them (serial when None).
        timeout: Seconds a task may run before it is reported as timed out (None: no limit).
        function: What runs a task: a module-level function (pickled by reference),
            :func:`run_task` unless another kind of task needs another.
        cpus: The CPUs of this machine for the pool's budget check (default: :func:`available_cpus`).

    Raises:
        OversubscribedError: A pool of ``parallel`` tasks of ``workers`` CPUs each does not fit,
            or a Ray task needs more CPUs than any node has.
        RayNotInstalledError: A Ray backend without Ray.
    """
    backend = backend or Backend.serial()
    workers = max((t.workers for t in tasks), default=1)
    if backend.kind == "serial":
        for index, task in enumerate(tasks):
            yield index, execute(function, task, timeout)
    elif backend.kind == "pool":
        check_cpu_budget(backend.parallel, workers, cpus)
        yield from _pool(tasks, backend.parallel, timeout, function)
    elif backend.kind == "ray":
        yield from _ray(tasks, backend.address or LOCAL_RAY, workers, timeout, function)
    else:
        raise FanoutError(f"unknown backend {backend.kind!r} (expected serial, pool or ray)")


def _pool_context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _pool(
    tasks: Sequence[Task], parallel: int, timeout: float | None, function: TaskFunction
) -> Iterator[tuple[int, TaskResult]]:
    with cf.ProcessPoolExecutor(max_workers=min(parallel, max(1, len(tasks))), mp_context=_pool_context()) as pool:
        futures = {pool.submit(execute, function, task, timeout): i for i, task in enumerate(tasks)}
        try:
            for future in cf.as_completed(futures):
                index = futures[future]
                try:
                    result = future.result()
                except Exception as exc:  # the worker died (BrokenProcessPool) or the result did not unpickle
                    result = TaskResult.failed(tasks[index], f"{type(exc).__name__}: {exc}")
                yield index, result
        finally:
            for future in futures:  # a caller that stops early leaves nothing queued
                future.cancel()


def _ray(
    tasks: Sequence[Task], address: str, workers: int, timeout: float | None, function: TaskFunction
) -> Iterator[tuple[int, TaskResult]]:
    require_ray()
    import ray

    started_here = not ray.is_initialized()
    pending: dict[Any, int] = {}
    if started_here:
        if address == LOCAL_RAY:  # "local": a new instance, even where a cluster of `ray start` runs on this machine
            ray.init(address="local", include_dashboard=False, logging_level="warning", log_to_driver=False)
        else:
            ray.init(address=address, logging_level="warning", log_to_driver=False)
    try:
        largest = max(
            (node.get("Resources", {}).get("CPU", 0.0) for node in ray.nodes() if node.get("Alive")), default=0.0
        )
        if workers > largest:
            raise OversubscribedError(
                f"--workers {workers}: each Ray task asks for {workers} CPUs, "
                f"but the largest node of the Ray cluster has {largest:g}: lower --workers"
            )
        remote = ray.remote(execute).options(num_cpus=workers, max_retries=1, retry_exceptions=False)
        pending = {remote.remote(function, task, timeout): i for i, task in enumerate(tasks)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                index = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as exc:  # the worker died twice, or the task could not run
                    why = f"{type(exc).__name__}: {_first_line(exc)}"
                    result = TaskResult.failed(tasks[index], why, traceback=str(exc))  # Ray's report: the remote trace
                yield index, result
    finally:
        if started_here:
            ray.shutdown()
        else:
            for ref in pending:  # a caller that stops early leaves nothing running on the cluster
                ray.cancel(ref)


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else ""


# ----------------------------------------------------------------------------- a whole run


@dataclass
class Run:
    """Every task's result in task order, and what produced them.

    Attributes:
        results: One result per task, in the order of the tasks.
        backend: :meth:`Backend.describe` of the backend that ran them.
        wall_s: Wall-clock seconds of the whole run.
    """

    results: list[TaskResult]
    backend: str
    wall_s: float

    @property
    def failures(self) -> list[TaskResult]:
        """Results whose task raised, timed out, or whose plan breaks a rule."""
        return [r for r in self.results if not r.ok]

    @property
    def ok(self) -> bool:
        """No task failed: a caller exits non-zero otherwise."""
        return not self.failures

    def failure_lines(self, tracebacks: bool = False) -> list[str]:
        """One entry per failed task, naming its scenario, planner and seed.

        Args:
            tracebacks: Follow each entry's line with the worker's traceback, indented (what a
                command prints on stderr, so that a bug in a planner can be found from a run's log).
        """
        lines = []
        for r in self.failures:
            why = r.error if r.error is not None else f"invalid plan: {'; '.join(r.violations)}"
            line = f"{r.describe()}: {why}"
            if tracebacks and r.traceback:
                line += "\n" + "\n".join(f"    {text}" for text in r.traceback.rstrip().splitlines())
            lines.append(line)
        return lines

    def table(self) -> list[dict[str, Any]]:
        """Every result without its timings (:meth:`TaskResult.comparable`), in task order."""
        return [r.comparable() for r in self.results]


def run_tasks(
    tasks: Sequence[Task],
    backend: Backend | None = None,
    *,
    timeout: float | None = None,
    function: TaskFunction = run_task,
    on_result: Callable[[int, TaskResult], None] | None = None,
    cpus: int | None = None,
) -> Run:
    """Run every task (see :func:`fan_out`) and collect the results in task order.

    Args:
        tasks: The tasks.
        backend: Where to run them (serial when None).
        timeout: Seconds per task (None: no limit).
        function: What runs a task (:func:`run_task`).
        on_result: Called with ``(index, result)`` as each task finishes: update a progress bar here.
        cpus: The CPUs of this machine for the pool's budget check.
    """
    backend = backend or Backend.serial()
    started = time.perf_counter()
    results: list[TaskResult | None] = [None] * len(tasks)
    for index, result in fan_out(tasks, backend, timeout=timeout, function=function, cpus=cpus):
        results[index] = result
        if on_result is not None:
            on_result(index, result)
    workers = max((t.workers for t in tasks), default=1)
    done = [
        r if r is not None else TaskResult.failed(t, "no result came back") for r, t in zip(results, tasks, strict=True)
    ]
    return Run(done, backend.describe(workers), time.perf_counter() - started)


# ----------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agents.fanout``: every planner on every scenario and seed, one results table.

        python -m agents.fanout --scenarios configs/scenarios --planners fifo,greedy,ppo --seeds 3 --parallel 2
        python -m agents.fanout --planners cpsat --time-limit 10 --workers 2 --ray ray-head:6379 --out study.json

    Prints one line per task and a summary (backend, tasks, wall time); ``--out`` writes the
    :class:`Run` as JSON. Exit status: 0 every task ok, 1 a task failed or its plan is invalid
    (each named on stderr), 2 bad input (one line, before any task runs).
    """
    import argparse
    import json
    import sys

    from tqdm import tqdm

    from agents.arguments import add_fanout_options, add_plan_options, fanout_backend, int_at_least, plan_options
    from agents.registry import SCHEDULERS
    from gpu_env.scenario import ScenarioError, write_text_atomic

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> Any:
            self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    parser = _Parser(prog="python -m agents.fanout", description=main.__doc__.splitlines()[0] if main.__doc__ else "")
    parser.add_argument("--scenarios", nargs="+", type=Path, default=[Path("configs/scenarios")], metavar="PATH")
    parser.add_argument("--planners", default="fifo,greedy", metavar="NAMES", help="comma-separated (fifo,greedy)")
    parser.add_argument("--seeds", type=int_at_least(1), default=1, metavar="N", help="seeds --seed .. --seed+N-1")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write the run as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no line per task")
    add_plan_options(parser)
    add_fanout_options(parser)
    args = parser.parse_args(argv)
    try:
        planners = [p.strip() for p in args.planners.split(",") if p.strip()]
        unknown = [p for p in planners if p not in SCHEDULERS]
        if not planners or unknown:
            raise FanoutError(f"--planners: unknown {unknown or args.planners!r} (expected: {', '.join(SCHEDULERS)})")
        files: list[Path] = []
        for path in args.scenarios:
            found = sorted(p for p in path.glob("*.y*ml")) if path.is_dir() else [path]
            files += found
        if not files:
            raise FanoutError(f"--scenarios: no scenario files in {' '.join(map(str, args.scenarios))}")
        scenarios = [load_scenario(f) for f in files]
        backend = fanout_backend(args)
    except (FanoutError, ScenarioError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    options = plan_options(args)
    tasks = [
        Task.make(sc, planner, replace(options, seed=seed))
        for sc in scenarios
        for planner in planners
        for seed in range(args.seed, args.seed + args.seeds)
    ]
    with tqdm(total=len(tasks), unit="task", file=sys.stderr, disable=args.quiet, dynamic_ncols=True) as bar:
        try:
            run = run_tasks(tasks, backend, timeout=args.task_timeout, on_result=lambda i, r: bar.update(1))
        except FanoutError as exc:  # found only once the backend is up (a Ray node too small for --workers)
            print(f"{parser.prog}: error: {exc}", file=sys.stderr)
            return 2
    if not args.quiet:
        for r in run.results:
            objective = "-" if r.objective is None else f"{r.objective:.4f}"
            print(f"{r.scenario:24} {r.planner:8} seed {r.seed:<3} objective {objective:>12}  {r.elapsed:8.3f} s")
    print(f"{len(tasks)} tasks, {len(run.failures)} failed, {run.wall_s:.2f} s wall, {run.backend}")
    for line in run.failure_lines(tracebacks=True):
        print(f"failed: {line}", file=sys.stderr)
    if args.out is not None:
        document = {"backend": run.backend, "wall_s": run.wall_s, "results": [r.to_dict() for r in run.results]}
        write_text_atomic(args.out, json.dumps(document, indent=1) + "\n")
    return 0 if run.ok else 1


if __name__ == "__main__":
    # Run the imported module's main, so that pickled task functions name agents.fanout, not __main__.
    from agents import fanout as _fanout

    raise SystemExit(_fanout.main())
