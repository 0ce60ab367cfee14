"""An evaluation run: scenarios in, every scheduler's plan out, each validated (what ``evaluate.py`` reports on).

The steps are functions so that other modes can add to a run:
:func:`find_scenarios` and :func:`load_scenarios` check every input before any
planning, :func:`pick_schedulers` and :func:`check_policy` the planners,
:func:`run_evaluation` plans and validates, and :func:`exit_status` says how it
went. :mod:`lab.evaluation.outputs` writes the files; extra report sections go to
:attr:`Evaluation.sections`.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agents.fanout import Backend, Task, TaskResult, run_tasks
from agents.options import PlanOptions
from agents.registry import SchedulerUnavailableError, UnknownSchedulerError, available_schedulers, get_scheduler
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario, load_scenario
from gpu_env.validation import Violation, validate

SCENARIO_SUFFIXES = (".yaml", ".yml", ".json")
BASELINE = "fifo"


class InputError(Exception):
    """Bad input to evaluate.py: reported as one line, exit status 2."""


@dataclass
class Outcome:
    """One scheduler on one scenario.

    Attributes:
        scheduler: The scheduler's name.
        plan: The plan, with metrics and plan time; None when the scheduler failed.
        violations: What the validator found (empty for a valid plan).
        error: ``Type: message`` when the scheduler raised, else None.
        traceback: The worker's traceback when the scheduler raised, else None.
    """

    scheduler: str
    plan: Plan | None
    violations: list[Violation] = field(default_factory=list)
    error: str | None = None
    traceback: str | None = None

    @property
    def valid(self) -> bool:
        """A plan exists and breaks no rule."""
        return self.plan is not None and not self.violations


@dataclass
class ScenarioResult:
    """Every scheduler's outcome on one scenario, and the figures drawn for it."""

    scenario: Scenario
    source: Path
    outcomes: dict[str, Outcome]
    figures: dict[str, str] = field(default_factory=dict)  # kind -> path relative to the output folder

    @property
    def slug(self) -> str:
        """The scenario name made safe for file names."""
        return slugify(self.scenario.name)


@dataclass
class Evaluation:
    """A whole run: settings, per-scenario results, and extra report sections.

    Attributes:
        command: The command line that reproduces the run.
        schedulers: Scheduler names in report order.
        options: The options every scheduler got.
        results: One entry per scenario, in input order.
        sections: Extra Markdown sections appended to the report by other modes.
        figures: Figures of the whole run (kind -> path relative to the output folder).
        backend: What planned the tasks (:meth:`agents.fanout.Backend.describe`).
        wall_s: Wall-clock seconds of the planning.
        task_failures: Failed tasks of other modes (``--rolling``), one line each
            (:meth:`agents.fanout.Run.failure_lines`).
    """

    command: str
    schedulers: list[str]
    options: PlanOptions
    backend: str = "serial, 1 CP-SAT worker"
    wall_s: float = 0.0
    task_failures: list[str] = field(default_factory=list)
    results: list[ScenarioResult] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    figures: dict[str, str] = field(default_factory=dict)

    def failures(self) -> list[tuple[str, Outcome]]:
        """(scenario name, outcome) of every invalid plan or failed scheduler."""
        return [(r.scenario.name, o) for r in self.results for o in r.outcomes.values() if not o.valid]


def slugify(name: str) -> str:
    """A name made safe as a file or folder name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "scenario"


def find_scenarios(paths: Sequence[Path]) -> list[Path]:
    """Scenario files from files and folders (a folder contributes its scenario files, sorted).

    Raises:
        InputError: A path that does not exist, or no scenario at all.
    """
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in SCENARIO_SUFFIXES)
            if not found:
                raise InputError(f"{path}: no scenario files (*.yaml, *.yml, *.json) in this folder")
            files.extend(found)
        elif path.exists():
            files.append(path)
        else:
            raise InputError(f"{path}: <file>: no such file or folder (--scenarios)")
    return files


def load_scenarios(files: Sequence[Path]) -> list[tuple[Scenario, Path]]:
    """Load and check every scenario before any planning.

    Raises:
        ScenarioError: A malformed file (the message names file and field).
        InputError: Two files with the same scenario name (their plans would collide).
    """
    loaded: list[tuple[Scenario, Path]] = []
    seen: dict[str, Path] = {}
    for path in files:
        scenario = load_scenario(path)
        slug = slugify(scenario.name)
        if slug in seen:
            raise InputError(f"{path}: name: scenario name {scenario.name!r} is also used by {seen[slug]}")
        seen[slug] = path
        loaded.append((scenario, path))
    return loaded


def pick_schedulers(spec: str | None) -> list[str]:
    """Scheduler names to run, the baseline first.

    Raises:
        InputError: An unknown name, or a scheduler whose module cannot be imported here.
    """
    if spec is None:
        names = available_schedulers()
    else:
        names = list(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))
        if not names:
            raise InputError("--schedulers: expected a comma-separated list of names")
    for name in names:
        try:
            get_scheduler(name)
        except UnknownSchedulerError as exc:
            raise InputError(f"--schedulers: {exc}") from None
        except SchedulerUnavailableError as exc:
            raise InputError(f"--schedulers: {exc}") from None
    if BASELINE not in names:
        names.insert(0, BASELINE)
    else:
        names.remove(BASELINE)
        names.insert(0, BASELINE)
    return names


# ----------------------------------------------------------------------------- planning


def plan_tasks(
    scenarios: Sequence[tuple[Scenario, Path]], schedulers: Sequence[str], options: PlanOptions
) -> list[Task]:
    """One task per (scenario, scheduler), scenario-major: the order of the report.

    Each task carries its scenario as a document, so that it runs on any node of a cluster.
    """
    return [Task.make(scenario, name, options) for scenario, _ in scenarios for name in schedulers]


def outcome_from(result: TaskResult, scenario: Scenario) -> Outcome:
    """The outcome of one task, its plan rebuilt and validated again here against the loaded scenario."""
    if result.error is not None:
        return Outcome(result.planner, None, error=result.error, traceback=result.traceback)
    plan = result.to_plan(scenario)
    if plan is None:
        return Outcome(result.planner, None, error="no plan came back")
    return Outcome(result.planner, plan, validate(scenario, plan))


def run_evaluation(
    scenarios: Sequence[tuple[Scenario, Path]],
    schedulers: Sequence[str],
    options: PlanOptions,
    command: str = "python evaluate.py",
    show_progress: bool = True,
    *,
    backend: Backend | None = None,
    timeout: float | None = None,
) -> Evaluation:
    """Plan every scenario with every scheduler as tasks of :mod:`agents.fanout`, and validate every plan.

    The progress bar (stderr) counts finished tasks, whatever the backend. A task
    that raises or times out becomes a failed outcome; the others complete.

    Args:
        scenarios: (scenario, source file) pairs, in report order.
        schedulers: Scheduler names, in report order.
        options: The options every scheduler gets.
        command: The command line that reproduces the run.
        show_progress: Show the progress bar.
        backend: Where the tasks run (serial when None).
        timeout: Seconds per task before it is reported as timed out (None: no limit).

    Raises:
        FanoutError: The backend cannot run these tasks (found once it is up: a Ray node too small).
    """
    from tqdm import tqdm

    backend = backend or Backend.serial()
    tasks = plan_tasks(scenarios, schedulers, options)
    with tqdm(
        total=len(tasks), desc="planning", unit="plan", file=sys.stderr, disable=not show_progress, dynamic_ncols=True
    ) as progress:

        def finished(index: int, result: TaskResult) -> None:
            progress.set_postfix_str(f"{result.scenario} / {result.planner}")
            progress.update(1)

        run = run_tasks(tasks, backend, timeout=timeout, on_result=finished)
    evaluation = Evaluation(command, list(schedulers), options, backend=run.backend, wall_s=run.wall_s)
    results = iter(run.results)
    for scenario, source in scenarios:
        outcomes = {name: outcome_from(next(results), scenario) for name in schedulers}
        evaluation.results.append(ScenarioResult(scenario, source, outcomes))
    return evaluation


def check_policy(policy: Path | None, schedulers: Sequence[str]) -> None:
    """Check ``--policy`` before any planning: a bad policy file is bad input, not a scheduler failure per scenario.

    Raises:
        InputError: The file does not exist, or ``ppo`` runs and cannot load it.
    """
    if policy is not None and not policy.is_file():
        raise InputError(f"{policy}: <file>: no such policy file (--policy)")
    if "ppo" in schedulers:
        from agents.ppo import PolicyError, load_policy

        try:
            load_policy(policy)
        except PolicyError as exc:
            raise InputError(f"--policy: {exc}") from None


def exit_status(evaluation: Evaluation, report: Path) -> int:
    """Say on stderr how the run went: 1 with every invalid plan or failed task listed, else 0.

    Each failed task is named by scenario, planner and seed.
    """
    failures = evaluation.failures()
    if failures or evaluation.task_failures:
        count = len(failures) + len(evaluation.task_failures)
        print(f"evaluate.py: {count} invalid or failed plan(s) or task(s), see {report}", file=sys.stderr)
        for scenario, outcome in failures:
            what = outcome.error or f"{len(outcome.violations)} violation(s), first: {outcome.violations[0]}"
            task = f"scenario {scenario!r}, planner {outcome.scheduler!r}, seed {evaluation.options.seed}"
            print(f"  {task}: {what}", file=sys.stderr)
            if outcome.traceback:
                print(textwrap.indent(outcome.traceback.rstrip(), "      "), file=sys.stderr)
        for line in evaluation.task_failures:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(
        f"evaluate.py: {len(evaluation.results)} scenarios x {len(evaluation.schedulers)} schedulers, report: {report}",
        file=sys.stderr,
    )
    return 0
