"""The live planner in the Slurm loop: the cluster's own history in, the slot's decisions and why out.

``gpualloc slurm cycle`` and ``run`` plan, by default, with the live planner of ``gpualloc simulate``
(:func:`agents.live.anticipate.live_planner`), fed as the simulator feeds it:

- **the slot of the day** from the day's clock (:mod:`agents.slurm.clock`): where the arrival model
  is read, and the decay of the day's objective (job worth is scaled by ``decay ** slot``, as the
  simulator scores a day);
- **the forecast corrected** by the demand observed in the day's slots before this one
  (:data:`agents.live.anticipate.LIVE_FORECAST`), from the day's record (:mod:`agents.slurm.record`);
  a reading counts for the slot it was taken in, so the plan of slot ``s`` reads slots ``0..s-1``,
  exactly what the simulator hands the planner at ``s``;
- **the history**: the past days recorded in ``slurm.history_dir`` (the newest
  ``slurm.history_days``) or the files of ``--history``;
- **how long each running job has run**, from Slurm's start times.

What the planner decides departs from its base plan only where the sampled futures say so, and each
departure comes with a sentence (:attr:`agents.live.allocator.Decision.why`) that the cycle prints.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agents.live.allocator import ClusterState, Decision, RunningJob, with_forecast
from agents.live.anticipate import LIVE_FORECAST, AnticipatingPlanner, live_planner
from agents.live.history import HistoryError, load_history
from agents.options import PlanOptions
from agents.slurm.clock import DayClock
from agents.slurm.config import SlurmConfig
from agents.slurm.record import DayRecord
from agents.slurm.snapshot import Snapshot
from gpu_env.scenario import MAX_SLOTS, App, Job, Scenario, scenario_from_dict


@dataclass
class LiveSetup:
    """What the loop plans with live: the planner's name, its history and its draws.

    Attributes:
        name: A live planner (:data:`agents.live.anticipate.LIVE_PLANNERS`).
        history: Past-day files given on the command line (``--history``); empty: the recorded days.
        samples: Futures per cycle (None: the planner's default).
        seed: Seed of every draw.
    """

    name: str = "anticipate"
    history: Sequence[str | os.PathLike[str]] = ()
    samples: int | None = None
    seed: int = 0
    notes: list[str] = field(default_factory=list)

    def planner(self, config: SlurmConfig, gpus: int, recorded: Sequence[os.PathLike[str]] = ()) -> AnticipatingPlanner:
        """The planner for a cluster of ``gpus`` GPUs, fitted on ``--history`` or else the ``recorded`` days.

        A past day that cannot be read, or is of another shape than the configuration's day, is reported
        in :attr:`notes` and left out; the planner plans with the rest.
        """
        day = day_template(config, gpus)
        days: list[Scenario] = []
        for path in self.history or recorded:
            try:
                days.extend(load_history([path], day))
            except HistoryError as exc:
                self.notes.append(f"history: left out: {exc}")
        kwargs = {} if self.samples is None else {"samples": self.samples}
        return live_planner(self.name, history=days, day=day, seed=self.seed, **kwargs)


def day_template(config: SlurmConfig, gpus: int) -> Scenario:
    """The configuration's day as a scenario: its slots and apps (what the history is checked against).

    Raises:
        ValueError: The configuration's day is longer than a scenario holds (set ``horizon.day_slots``).
    """
    if config.day_slots > MAX_SLOTS:
        raise ValueError(
            f"{config.source}: horizon.day_slots: a day of {config.day_slots} slots is longer than the {MAX_SLOTS} "
            "a scenario holds; set horizon.day_slots (and day_start) to the day the history records"
        )
    return scenario_from_dict(
        {
            "name": "slurm-day",
            "cluster": {"gpus": gpus, "node_size": gpus},
            "horizon": {"slots": config.day_slots, "slot_minutes": config.slot_minutes, "decay": config.decay},
            "realtime": [
                {"name": a.name, "demand": [0] * config.day_slots, "ramp": a.ramp, "initial": 0, "penalty": a.penalty}
                for a in config.apps
            ],
            "jobs": [],
        },
        f"{config.source}: the day",
    )


def state_of(
    snapshot: Snapshot, record: DayRecord | None, clock: DayClock, forecaster: Any = LIVE_FORECAST
) -> tuple[ClusterState, int, dict[str, int]]:
    """The snapshot as the live planner's state, the slot of the day, and the slots each running job has run.

    The day's forecast is the record's forecast of the slots before now followed by the snapshot's
    forecast ahead; what was observed is the record's (a slot without a reading: its forecast, no error).
    The apps' demand ahead is ``forecaster``'s (the planner's own, as the simulator hands it), built by the
    simulator's own builder (:func:`agents.live.allocator.with_forecast`).
    """
    scenario = snapshot.scenario
    config = snapshot.config
    s = clock.slot_of_day(snapshot.now)
    ahead = scenario.demand.astype(np.int64)  # (apps, slots): the configuration's forecast from now
    n_apps = len(scenario.apps)
    before = np.zeros((n_apps, s), dtype=np.int64)
    seen = np.zeros((n_apps, s), dtype=np.int64)
    for i, app in enumerate(scenario.apps):
        fallback = _forecast_before(config, app.name, s, int(ahead[i, 0]) if ahead.shape[1] else 0)
        if record is not None:
            before[i] = record.forecast_before(app.name, s, fallback)
            seen[i] = record.observed_before(app.name, s, list(before[i]))
        else:
            before[i] = fallback
            seen[i] = before[i]
    day = np.concatenate([before, ahead], axis=1)
    running: list[RunningJob] = []
    queue: list[Job] = []
    elapsed: dict[str, int] = {}
    for job in scenario.jobs:
        if job.running_on is not None:
            running.append(RunningJob(job, tuple(job.running_on), job.duration))
            started = snapshot.running.get(job.id)
            if started is not None and started.start_time:
                elapsed[job.id] = max(0, math.floor((snapshot.now - started.start_time) / config.slot_seconds + 1e-9))
        else:
            queue.append(job)
    apps = tuple(App(app.name, app.demand, app.ramp, app.initial, app.penalty) for app in scenario.apps)
    state = ClusterState.at(
        scenario, s, horizon=scenario.slots, running=running, queue=queue, apps=apps, name=f"slurm@{s}"
    )
    state = with_forecast(state, day, seen, s, forecaster) if n_apps else state
    return state, s, elapsed


def _forecast_before(config: SlurmConfig, app: str, slot: int, now_value: int) -> list[int]:
    """The configuration's forecast of the day's slots before ``slot`` (``anchor: now``: the value now)."""
    spec = next(a for a in config.apps if a.name == app)
    if spec.anchor == "day":
        return [int(spec.demand[t % len(spec.demand)]) for t in range(slot)]
    return [now_value] * slot


def decide(
    planner: AnticipatingPlanner,
    snapshot: Snapshot,
    record: DayRecord | None,
    options: PlanOptions | None = None,
) -> Decision:
    """The live planner's decision for the snapshot (its scenario: the snapshot's, with the corrected forecast)."""
    clock = DayClock.of(snapshot.config)
    state, s, elapsed = state_of(snapshot, record, clock, getattr(planner, "forecaster", LIVE_FORECAST))
    return planner.decide(state, s, elapsed, options)
