"""The numbers of an evaluation: one flat row per scenario and scheduler, the optimality gap, and the CSV."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

from gpu_env.plan import Plan
from lab.evaluation.evaluation import BASELINE, Evaluation


def gap(plan: Plan) -> float | None:
    """The optimality gap ``(bound - objective) / |bound|`` when the plan carries a bound, else None."""
    bound = plan.info.get("bound")
    if not isinstance(bound, int | float) or isinstance(bound, bool) or plan.metrics is None:
        return None
    objective = plan.metrics.objective
    if bound == 0:
        return 0.0 if abs(objective) < 1e-9 else math.inf
    return (bound - objective) / abs(bound)


def result_rows(evaluation: Evaluation) -> list[dict[str, Any]]:
    """One flat row per (scenario, scheduler): the numbers of results.csv, results.json and the report.

    ``objective_vs_fifo_pct`` is ``100 * (objective - fifo) / fifo`` (None when FIFO's
    objective is not positive or FIFO has no valid plan); ``utilization_vs_fifo_pts``
    the difference in percentage points.
    """
    rows: list[dict[str, Any]] = []
    for result in evaluation.results:
        sc = result.scenario
        base = result.outcomes.get(BASELINE)
        base_m = base.plan.metrics if base is not None and base.valid and base.plan is not None else None
        for name, outcome in result.outcomes.items():
            row: dict[str, Any] = {
                "scenario": sc.name,
                "family": sc.family,
                "gpus": sc.gpus,
                "slots": sc.slots,
                "scheduler": name,
                "valid": outcome.valid,
                "violations": [str(v) for v in outcome.violations],
                "error": outcome.error,
            }
            plan = outcome.plan
            m = plan.metrics if plan is not None else None
            if m is not None:
                row.update(
                    objective=round(m.objective, 6),
                    job_value=round(m.job_value, 6),
                    shortfall=m.shortfall,
                    utilization=round(m.utilization, 6),
                    placed=m.placed,
                    completed=m.completed,
                    jobs=m.jobs,
                    solve_ms=round(plan.solve_ms or 0.0, 3),
                )
            else:
                row.update(
                    objective=None,
                    job_value=None,
                    shortfall=None,
                    utilization=None,
                    placed=None,
                    completed=None,
                    jobs=len(sc.jobs),
                    solve_ms=None,
                )
            vs = pts = None
            if m is not None and base_m is not None:
                if base_m.objective > 0:
                    vs = round(100.0 * (m.objective - base_m.objective) / base_m.objective, 3)
                pts = round(100.0 * (m.utilization - base_m.utilization), 3)
            row["objective_vs_fifo_pct"] = vs
            row["utilization_vs_fifo_pts"] = pts
            g = gap(plan) if plan is not None else None
            row["bound"] = plan.info.get("bound") if plan is not None else None
            row["gap"] = None if g is None else (round(g, 6) if math.isfinite(g) else "inf")
            row["status"] = plan.info.get("status") if plan is not None else None
            rows.append(row)
    return rows


CSV_COLUMNS = (
    "scenario",
    "family",
    "gpus",
    "slots",
    "scheduler",
    "valid",
    "objective",
    "objective_vs_fifo_pct",
    "job_value",
    "shortfall",
    "utilization",
    "utilization_vs_fifo_pts",
    "placed",
    "completed",
    "jobs",
    "solve_ms",
    "bound",
    "gap",
    "status",
    "violations",
    "error",
)


def results_csv(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV text with the columns of :data:`CSV_COLUMNS` (violations counted, None as empty)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        flat = dict(row)
        flat["violations"] = len(row["violations"])
        flat["error"] = row["error"] or ""
        writer.writerow({k: "" if flat.get(k) is None else flat[k] for k in CSV_COLUMNS})
    return buffer.getvalue()
