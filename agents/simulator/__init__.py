"""The simulator that plays a day: a planner rolled over a realized day, and the references it is scored by.

- :mod:`agents.simulator.simulation`: one simulated day, open loop (:func:`open_loop`) and rolling
  (:func:`rolling`), and comparisons over many (:func:`compare`);
- :mod:`agents.simulator.hindsight`: the realized day planned whole by full mode (:func:`plan_hindsight`), the
  executed day's objective as a share of it;
- :mod:`agents.simulator.decisions`: what each cycle decided, and the starts that came late;
- :mod:`agents.simulator.tasks`: the same comparisons as tasks of :mod:`agents.fanout` (:func:`compare_tasks`),
  over a process pool or Ray.

The planner it plays is :mod:`agents.live`; statistics, tables, files and figures of the comparison are in
:mod:`agents.report.rolling`. ``docs/rolling.md`` describes the whole.
"""

from agents.simulator.hindsight import Hindsight, plan_hindsight
from agents.simulator.simulation import (
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
from agents.simulator.tasks import compare_task, compare_tasks, comparison_tasks, ordered_rows

__all__ = [
    "MODES",
    "Hindsight",
    "Reveal",
    "RollingError",
    "Simulation",
    "SlotRecord",
    "compare",
    "compare_task",
    "compare_tasks",
    "comparison_tasks",
    "open_loop",
    "ordered_rows",
    "plan_hindsight",
    "rolling",
    "simulate",
    "state_at",
]
