"""The day with hindsight: the realized day planned whole, and the executed day as a share of it.

``actual.yaml`` (:func:`agents.simulator.simulation.realized_day`) is the day as it happened: every
job, its actual runtime and the actual demand, known from slot 0. Planned by full mode (CP-SAT
warm-started from the fast plan, :mod:`agents.full`) it gives the **hindsight optimum**, or, when
the time limit ends the search first, the best plan found and a proven upper bound on the optimum.
The executed day is scored against the same file, so its objective over the hindsight objective is
the share of the optimum reached live (``gpualloc simulate --hindsight``, ``docs/rolling.md``).

>>> from agents.options import PlanOptions
>>> from gpu_env.generators import generate
>>> day = generate("training-heavy", seed=0)
>>> plan_hindsight(day, PlanOptions(time_limit=60, deterministic_time=5)).status
'optimal'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.options import PlanOptions
from agents.registry import run_scheduler
from gpu_env.metrics import Metrics, compute_metrics
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario
from gpu_env.validation import validate

HINDSIGHT_SCHEDULER = "full"
DEFAULT_SECONDS = 10.0
"""Seconds of ``gpualloc simulate --hindsight`` without a value: the seed's sizes are proven optimal well within."""


@dataclass
class Hindsight:
    """The realized day planned with hindsight by full mode.

    Attributes:
        plan: The hindsight plan (scheduler ``full/hindsight``), valid against the realized day.
        metrics: Its metrics, scored against the realized day.
        status: CP-SAT's verdict on it: ``optimal`` (it is the hindsight optimum), ``feasible``
            (the time limit ended the search first) or ``unknown``.
        bound: Proven upper bound on the hindsight optimum (None when none was proved).
        bound_source: Which bound it is: ``cpsat`` or ``lp-dual`` (the certified LP relaxation).
        gap: Relative gap between the plan's objective and the bound.
        options: The options it was planned with (its ``time_limit`` is the seconds of ``--hindsight``).
        violations: The validator's verdict on the plan against the realized day (empty: valid).
        greedy: Greedy's objective on the realized day, where asked for (``floor="greedy"``; None otherwise).
        scheduler: What planned it: ``full`` (``gpualloc simulate --hindsight``) or ``cpsat`` (the live benchmark).
    """

    plan: Plan
    metrics: Metrics
    status: str
    bound: float | None
    bound_source: str | None
    gap: float | None
    options: PlanOptions
    violations: list[str] = field(default_factory=list)
    greedy: float | None = None
    scheduler: str = "full"

    @property
    def reference(self) -> float:
        """What the executed day is a share of: the hindsight objective, or greedy's hindsight plan where worth more."""
        return self.objective if self.greedy is None else max(self.objective, self.greedy)

    @property
    def objective(self) -> float:
        """The hindsight plan's objective against the realized day."""
        return self.metrics.objective

    @property
    def optimal(self) -> bool:
        """Whether CP-SAT proved the plan optimal."""
        return self.status == "optimal"

    def share(self, objective: float) -> float | None:
        """``objective`` as a share of the hindsight objective; None when the hindsight objective is not positive."""
        return objective / self.objective if self.objective > 0 else None

    def bound_share(self, objective: float) -> float | None:
        """``objective`` over the bound: a share of the hindsight optimum that ``objective`` reaches at least.

        None without a positive bound.
        """
        return objective / self.bound if self.bound is not None and self.bound > 0 else None

    def summary(self, executed: float, open_loop: float | None = None) -> dict[str, Any]:
        """Plain numbers for files: the hindsight plan's, and the executed (and open-loop) objective as shares of it.

        Args:
            executed: The executed (rolling) day's objective against the realized day.
            open_loop: The open-loop plan's objective against the realized day, if any.
        """
        data: dict[str, Any] = {
            "scheduler": self.scheduler,
            "time_limit": self.options.time_limit,
            "deterministic_time": self.options.deterministic_time,
            "status": self.status,
            "objective": round(self.objective, 6),
            "bound": None if self.bound is None else round(self.bound, 6),
            "bound_source": self.bound_source,
            "gap": self.gap,
            "executed_objective": round(executed, 6),
            "executed_share": _rounded(self.share(executed)),
            "executed_share_of_bound": _rounded(self.bound_share(executed)),
        }
        if open_loop is not None:
            data["open_loop_objective"] = round(open_loop, 6)
            data["open_loop_share"] = _rounded(self.share(open_loop))
        data["metrics"] = self.metrics.to_dict()
        data["solve_ms"] = None if self.plan.solve_ms is None else round(self.plan.solve_ms, 3)
        data["valid"] = not self.violations
        return data

    def describe(self, executed: float, open_loop: float | None = None) -> str:
        """One line for humans: the executed objective as a share of the hindsight objective, and the proof.

        For example ``executed 812.00 = 0.874 of the hindsight optimum 929.30 (CP-SAT: optimal; bound 929.30)``.
        """
        proof = f"CP-SAT: {self.status}"
        if self.bound is not None:
            proof += f"; bound {self.bound:.2f}" + ("" if self.bound_source in (None, "cpsat") else ", LP relaxation")
        what = "hindsight optimum " if self.optimal else f"best hindsight plan found in {self.options.time_limit:g} s, "
        share = self.share(executed)
        if share is None:
            line = f"executed {executed:.2f}; the {what}{self.objective:.2f} ({proof}) leaves no share"
        else:
            line = f"executed {executed:.2f} = {share:.3f} of the {what}{self.objective:.2f} ({proof})"
            least = self.bound_share(executed)
            if not self.optimal and least is not None:
                line += f", so at least {least:.3f} of the optimum"
        if open_loop is not None and share is not None:
            line += f"; open loop {open_loop:.2f} = {self.share(open_loop):.3f}"
        return line


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 9)


def plan_hindsight(
    day: Scenario, options: PlanOptions | None = None, *, scheduler: str = HINDSIGHT_SCHEDULER, floor: str | None = None
) -> Hindsight:
    """Plan the realized day with hindsight: the hindsight optimum, or the best plan and a bound within the limit.

    The one hindsight reference of the project: ``gpualloc simulate --hindsight`` plans with full mode; the live
    benchmark with CP-SAT alone under deterministic time (reproducible on any machine) and greedy's plan as a
    floor (at large sizes CP-SAT may find nothing in time).

    Args:
        day: The realized day (``actual.yaml``, :func:`agents.simulator.simulation.realized_day`).
        options: Passed to the scheduler: ``time_limit`` (wall seconds, hint included), ``deterministic_time``,
            ``workers`` and ``seed`` (default :class:`PlanOptions` with :data:`DEFAULT_SECONDS`).
        scheduler: ``full`` or ``cpsat``.
        floor: ``greedy``: also plan the day with greedy; :attr:`Hindsight.reference` is the better of the two.

    Returns:
        The hindsight plan with its status and bound (``plan.info``: :func:`agents.full.solve`).
    """
    if scheduler not in ("full", "cpsat"):
        raise ValueError(f"scheduler: expected full or cpsat, got {scheduler!r}")
    options = options or PlanOptions(time_limit=DEFAULT_SECONDS)
    plan = run_scheduler(scheduler, day, options)
    plan.scheduler = f"{scheduler}/hindsight"
    metrics = plan.metrics or compute_metrics(day, plan)
    plan.metrics = metrics
    info = plan.info or {}
    bound = info.get("bound")
    return Hindsight(
        plan=plan,
        metrics=metrics,
        status=str(info.get("status", "unknown")),
        bound=None if bound is None else float(bound),
        bound_source=info.get("bound_source"),
        gap=info.get("gap"),
        options=options,
        violations=[str(v) for v in validate(day, plan)],
        greedy=float(run_scheduler("greedy", day).metrics.objective) if floor == "greedy" else None,
        scheduler=scheduler,
    )


BENCHMARK_OPTIONS = PlanOptions(time_limit=10.0, workers=1, seed=0, deterministic_time=2.0)
"""The live benchmarks' hindsight: CP-SAT on one worker under 2 s of deterministic time (the same reference on any
machine), a 10 s wall-clock guard."""
