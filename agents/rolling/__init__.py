"""Rolling horizon under forecast error: "optimise the day, commit the hour".

- :mod:`agents.rolling.allocator`: the face to a cluster manager, :func:`decide`
  (the state now in, a plan and this slot's decisions out);
- :mod:`agents.rolling.forecast`: actual demand drawn around the forecast
  (:class:`NoiseModel`) and the forecast corrected by observation (:class:`Corrector`);
- :mod:`agents.rolling.simulation`: one simulated day, open loop (:func:`open_loop`)
  and rolling (:func:`rolling`), and comparisons over many (:func:`compare`);
- :mod:`agents.rolling.hindsight`: the realized day planned whole by full mode
  (:func:`plan_hindsight`), the executed day's objective as a share of it;
- :mod:`agents.rolling.tasks`: the same comparisons as tasks of :mod:`agents.fanout`
  (:func:`compare_tasks`), over a process pool or Ray;
- :mod:`agents.rolling.runtimes`: jobs that end before their time limit, and what the live
  planner asks of a runtime model (:class:`RuntimeSampler`).

Statistics, tables, files and figures of the comparison are in
:mod:`agents.report.rolling`. ``docs/rolling.md`` describes the whole.
"""

from agents.rolling.allocator import ClusterState, Decision, RunningJob, decide
from agents.rolling.forecast import Correction, Corrector, NoiseModel, actual_of, replayed, with_demand
from agents.rolling.hindsight import Hindsight, plan_hindsight
from agents.rolling.runtimes import RuntimeDistribution, RuntimeSampler
from agents.rolling.simulation import (
    MODES,
    Reveal,
    RollingError,
    Simulation,
    SlotRecord,
    compare,
    open_loop,
    rolling,
    simulate,
    state_at,
)
from agents.rolling.tasks import compare_task, compare_tasks, comparison_tasks, ordered_rows

__all__ = [
    "MODES",
    "ClusterState",
    "Correction",
    "Corrector",
    "Decision",
    "Hindsight",
    "NoiseModel",
    "Reveal",
    "RollingError",
    "RunningJob",
    "RuntimeDistribution",
    "RuntimeSampler",
    "Simulation",
    "SlotRecord",
    "actual_of",
    "compare",
    "compare_task",
    "compare_tasks",
    "comparison_tasks",
    "decide",
    "open_loop",
    "ordered_rows",
    "plan_hindsight",
    "replayed",
    "rolling",
    "simulate",
    "state_at",
    "with_demand",
]
