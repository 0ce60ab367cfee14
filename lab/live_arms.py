"""The live benchmark's arms: each planner by name, the settings of a run, and one planner on one realized day.

What the live benchmarks share (``benchmarks/online_benchmark.py``, ``benchmarks/slurm_benchmark.py``,
``benchmarks/live_rule_variants.py``): the planners a live run compares (the plain schedulers rolled with today's
``Corrector``, the newsvendor hedge, the live planner's variants and their ``-oracle`` twins), the
:class:`Settings` of a run, the hindsight reference of a realized day (:func:`hindsight`), and :func:`play`: one
planner live on one realized day, scored, validated and timed.
"""

from __future__ import annotations

import hashlib
import json
import time
import traceback
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from agents.live.anticipate import DEFAULT_SAMPLES
from agents.live.forecast import Corrector
from agents.live.hedge import newsvendor_forecaster
from agents.options import PlanOptions
from agents.registry import SCHEDULERS, available_schedulers
from agents.simulator.decisions import late_starts
from agents.simulator.hindsight import plan_hindsight
from agents.simulator.simulation import rolling
from gpu_env.scenario import Scenario
from gpu_env.validation import validate
from lab.variants import LIVE, build

SIGMAS = (0.0, 0.2, 0.3, 0.4)
RUNTIMES = ("exact", "trace")
PLAIN = ("fifo", "backfill", "greedy", "ppo", "full")
"""Schedulers rolled as they are, with today's ``Corrector()``."""
NEWSVENDOR = "greedy-newsvendor"
"""The simple hedge as a baseline: rolling greedy planning each app at the corrected forecast plus the history's
error quantile at the newsvendor ratio (:func:`agents.live.hedge.newsvendor_forecaster`)."""
ORACLE: dict[str, str] = {f"{name}-oracle": name for name in LIVE}
"""The information limit: each live variant told the actual demand of the whole day (``--oracle``), name -> the
variant. Its forecaster is :class:`ActualDemand`; ``anticipate-histfc-oracle`` differs from ``anticipate-oracle``
only where the planner reads more of its forecast kind than its forecaster."""
ONE_POINT = 0.01
"""One point of the hindsight optimum: the moonshot's distance to the information limit."""
LIVE_PLANNER = "anticipate"
"""The live planner the targets are about: jobs at submission, with the history."""
TIMING_KEYS = ("cycle_ms", "hindsight_ms", "wall_s")
"""What differs between two runs of the same day: everything else is reproducible."""
EPS = 1e-9


def is_live(name: str) -> bool:
    """Whether ``name`` is a live planner's variant (:data:`LIVE`) or its oracle twin (:data:`ORACLE`)."""
    return name in LIVE or name in ORACLE


def with_oracles(planners: Sequence[str]) -> tuple[str, ...]:
    """The planners and, after them, the ``-oracle`` twin of each live variant among them (``--oracle``)."""
    twins = [f"{p}-oracle" for p in planners if p in LIVE and f"{p}-oracle" not in planners]
    return (*planners, *dict.fromkeys(twins))


DEFAULT_LIVE = (
    "anticipate",
    "anticipate-base",
    "anticipate-nohist",
    "anticipate-residual",
    "anticipate-backtest",
    "anticipate-histfc",
    "anticipate-consensus",
)
"""The live variants a run plays unless ``--planners`` says (the ablations of :data:`LIVE_OPTIONS` on request)."""


def default_planners() -> tuple[str, ...]:
    """fifo, backfill (where the registry has it), greedy, ppo (where it imports), and the live variants."""
    here = set(available_schedulers())
    plain = (p for p in ("fifo", "backfill", "greedy", "ppo") if p in SCHEDULERS and p in here)
    return (*plain, NEWSVENDOR, *DEFAULT_LIVE)


@dataclass(frozen=True)
class Settings:
    """What one day is played with (the same for every day of a run).

    Attributes:
        sigmas: Forecast errors.
        runtimes: Runtime models (``exact``, ``trace``).
        planners: Plain scheduler names, live variants (:data:`LIVE`) and their oracle twins (:data:`ORACLE`).
        history_days: Past days per played day.
        samples: Futures per cycle of the live planner.
        hindsight_time_limit: Wall-clock seconds of the hindsight CP-SAT (a guard).
        hindsight_dtime: Its deterministic-time limit (None: none; the result then depends on the machine).
        full_time_limit: Seconds per re-plan of ``full`` when it is among the planners.
    """

    sigmas: tuple[float, ...] = SIGMAS
    runtimes: tuple[str, ...] = RUNTIMES
    planners: tuple[str, ...] = ("fifo", "greedy", *LIVE)
    history_days: int = 8
    samples: int = DEFAULT_SAMPLES
    hindsight_time_limit: float = 10.0
    hindsight_dtime: float | None = 2.0
    full_time_limit: float = 0.3

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settings:
        """The inverse of ``asdict`` (lists back to tuples)."""
        return cls(
            **{f.name: tuple(data[f.name]) if isinstance(data[f.name], list) else data[f.name] for f in fields(cls)}
        )

    def hindsight_options(self) -> PlanOptions:
        """CP-SAT for the hindsight optimum: one worker, seed 0, the deterministic limit."""
        return PlanOptions(
            time_limit=self.hindsight_time_limit, workers=1, seed=0, deterministic_time=self.hindsight_dtime
        )


# ----------------------------------------------------------------------------- one day


def hindsight(realized: Scenario, settings: Settings) -> dict[str, Any]:
    """The hindsight optimum of the realized day: CP-SAT's plan, its status and bound, and the reference.

    The reference is CP-SAT's objective, or greedy's with hindsight where that is worth more (CP-SAT may
    find no plan in time at large sizes); ``proven`` when CP-SAT proved its plan optimal.
    """
    started = time.perf_counter()
    best = plan_hindsight(realized, settings.hindsight_options(), scheduler="cpsat", floor="greedy")
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    if best.violations:  # a bug of the exact mode: no reference can come from it
        raise RuntimeError(f"the hindsight CP-SAT plan of {realized.name} breaks a rule: {best.violations[0]}")
    greedy = float(best.greedy or 0.0)
    return {
        "hindsight": round(best.objective, 6),
        "hindsight_status": best.status,
        "hindsight_bound": None if best.bound is None else round(best.bound, 6),
        "hindsight_greedy": round(greedy, 6),
        "reference": round(best.reference, 6),
        "proven": best.optimal and best.objective >= greedy - EPS,
        "hindsight_ms": round(elapsed_ms, 1),
        "hindsight_starts": {p.job: p.start for p in best.plan.placements},
    }


def share_of(value: float, over: float | None) -> float | None:
    """``value / over`` rounded to 6 places; None where there is nothing to be a share of."""
    return None if over is None or over <= EPS else round(value / over, 6)


def realized_digest(realized: Scenario, runtimes: Mapping[str, int]) -> str:
    """A fingerprint of the day a planner played: the actual demand and every job's actual runtime.

    Computed in :func:`play` from what it hands to :func:`rolling` (the realized scenario and the
    runtimes), so that two rows with the same digest met the same day.
    """
    digest = hashlib.sha256()
    demand = np.ascontiguousarray(realized.demand, dtype=np.int64)
    digest.update(repr(demand.shape).encode())
    digest.update(demand.tobytes())
    jobs = sorted((job.id, int(job.duration), int(runtimes.get(job.id, job.duration))) for job in realized.jobs)
    digest.update(json.dumps(jobs, separators=(",", ":")).encode())
    return digest.hexdigest()[:16]


@dataclass(frozen=True, eq=False)  # eq=False: an array field does not compare as a dataclass field would
class ActualDemand:
    """An oracle forecaster: the actual demand of the realized day's slots ahead (the information limit).

    It answers from the demand it was told alone, never from the ``actual`` the rolling loop hands it
    (which may come to hold only the slots observed so far).

    Attributes:
        demand: The realized day's actual demand, shape (apps, T) (kept as a read-only int64 copy).
    """

    demand: np.ndarray

    def __post_init__(self) -> None:
        demand = np.array(self.demand, dtype=np.int64)
        if demand.ndim != 2:
            raise ValueError(f"demand: expected shape (apps, T), got {demand.shape}")
        demand.setflags(write=False)
        object.__setattr__(self, "demand", demand)

    def forecast(self, forecast: np.ndarray, actual: np.ndarray, now: int, gpus: int) -> np.ndarray:
        """Slots ``now..T-1`` of the told demand, shape (apps, T - now), clipped to ``[0, gpus]``.

        ``forecast`` and ``actual`` are not read.
        """
        return np.clip(self.demand[:, now:], 0, gpus).astype(np.int64)


def told_the_day(planner: Any, realized: Scenario) -> Any:
    """The live planner told the realized day's actual demand: the information limit of its forecast.

    Its forecaster becomes :class:`ActualDemand`; where the planner has an ``errors`` field (its demand error
    model) it is set to None, so that the futures use the told demand as it is.
    """
    changes: dict[str, Any] = {"forecaster": ActualDemand(realized.demand)}
    if any(f.name == "errors" for f in fields(planner)):
        changes["errors"] = None
    return replace(planner, **changes)


def live_scheduler(
    name: str,
    day: Scenario,
    realized: Scenario,
    past: Sequence[Scenario],
    model: str,
    seed: int,
    settings: Settings,
) -> tuple[Any, Corrector | None, PlanOptions]:
    """What :func:`rolling` is given for a planner: the scheduler (a name or a live planner), its forecast, options.

    An oracle twin (:data:`ORACLE`) is its live variant :func:`told_the_day` of ``realized``.
    """
    variant = ORACLE.get(name, name)
    if variant in LIVE:
        planner = build(variant, day, past, settings.samples, seed, name)
        if name in ORACLE:
            planner = told_the_day(planner, realized)
        return planner, None, PlanOptions(seed=0)  # None: rolling takes planner.forecaster
    if name == NEWSVENDOR:
        return "greedy", newsvendor_forecaster(past, day) if past else Corrector(), PlanOptions(seed=0)
    if name == "full":
        return name, Corrector(), PlanOptions(time_limit=settings.full_time_limit, seed=0, workers=1)
    return name, Corrector(), PlanOptions(seed=0)


def play(
    name: str,
    day: Scenario,
    realized: Scenario,
    runtimes: Mapping[str, int],
    past: Sequence[Scenario],
    model: str,
    seed: int,
    settings: Settings,
    hindsight_starts: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """One planner live on one realized day: its executed objective, validation, re-plans and cycle times.

    The row's ``realized_digest`` (:func:`realized_digest`) fingerprints the day handed to :func:`rolling`.
    With ``hindsight_starts`` (the hindsight plan's start of each job), ``late`` lists the jobs that started
    more than :data:`agents.simulator.decisions.LATE_SLACK` slots after it, or never, each with its cause
    (:func:`agents.simulator.decisions.late_starts`); ``departures`` counts the cycles whose decision departed
    from the planner's base decision, ``margins`` the margins the cycles planned the apps at.

    An exception (a planner's plan that breaks a rule for its state raises ``RollingError``) is recorded
    in ``error``, not raised: the day's other planners still run.
    """
    started = time.perf_counter()
    digest = realized_digest(realized, runtimes)
    try:
        scheduler, corrector, options = live_scheduler(name, day, realized, past, model, seed, settings)
        sim = rolling(
            day,
            scheduler,
            realized,
            replan_every=1,
            options=options,
            corrector=corrector,
            reveal="release",
            runtimes=runtimes,
        )
    except Exception as exc:  # a bug in a planner: recorded and reported loudly, the others go on
        return {
            "planner": name,
            "realized_digest": digest,
            "objective": None,
            "valid": False,
            "violations": [],
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
            "cycle_ms": [],
            "replans": 0,
            "wall_s": round(time.perf_counter() - started, 3),
        }
    problems = [str(v) for v in validate(realized, sim.executed)]
    m = sim.metrics
    late = [] if hindsight_starts is None else late_starts(sim.slots, sim.executed, hindsight_starts)
    cycles = [r for r in sim.slots if r.replanned]
    return {
        "planner": name,
        "realized_digest": digest,
        "objective": round(m.objective, 6),
        "shortfall": m.shortfall,
        "utilization": round(m.utilization, 6),
        "placed": m.placed,
        "completed": m.completed,
        "valid": not problems,
        "violations": problems[:5],
        "error": None,
        "replans": sim.replans,
        "departures": sum(bool(r.chosen) for r in cycles),
        "margins": dict(Counter(r.margin for r in cycles if r.margin)),
        "late": [{"job": x.job, "cause": x.cause, "line": x.describe()} for x in late],
        "cycle_ms": [round(float(x), 3) for x in sim.solve_ms],
        "wall_s": round(time.perf_counter() - started, 3),
    }
