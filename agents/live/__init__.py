"""The live planner a site runs: "optimise the day, commit the hour", under forecast error.

- :mod:`agents.live.allocator`: the face to a cluster manager, :func:`decide` (the state now in, a plan and this
  slot's decisions out), and the one state builder;
- :mod:`agents.live.anticipate`: the live planner (:class:`~agents.live.anticipate.AnticipatingPlanner`) and
  :func:`~agents.live.anticipate.live_planner`, which builds it by name;
- :mod:`agents.live.forecast`: actual demand drawn around the forecast (:class:`NoiseModel`) and the forecast
  corrected by observation (:class:`Corrector`);
- :mod:`agents.live.error_model`: the one demand error model fitted on the recorded errors;
- :mod:`agents.live.hedge`, :mod:`agents.live.fill`, :mod:`agents.live.race`: the hedges and the forecast
  choice, the idle GPUs given to the apps, the race of candidates over sampled futures;
- :mod:`agents.live.history`: past days read, the arrival model and the history forecaster;
- :mod:`agents.live.runtimes`: jobs that end before their time limit, and what the live planner asks of a
  runtime model (:class:`RuntimeSampler`).

The simulator that plays a day with it is :mod:`agents.simulator`; ``docs/rolling.md`` describes the whole.
"""

from agents.live.allocator import ClusterState, Decision, RunningJob, decide
from agents.live.forecast import Correction, Corrector, NoiseModel, actual_of, replayed, with_demand
from agents.live.runtimes import RuntimeDistribution, RuntimeSampler

__all__ = [
    "ClusterState",
    "Correction",
    "Corrector",
    "Decision",
    "NoiseModel",
    "RunningJob",
    "RuntimeDistribution",
    "RuntimeSampler",
    "actual_of",
    "decide",
    "replayed",
    "with_demand",
]
