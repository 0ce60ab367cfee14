"""Exact mode: a CP-SAT model of every rule of SPEC section 2 and of the objective of section 3.

The model
---------
Each job j has a presence literal ``x_j``, a start ``s_j`` and a first GPU ``a_j``.
Every rule is one function below, keyed by :class:`gpu_env.rules.Rule` in
:data:`RULE_CONSTRAINTS` and called from one place (:meth:`ScheduleModel.build`):

- rule 3 (release, horizon, deadline): the domain of ``s_j`` is ``rules.start_window``;
- rule 4 (contiguous blocks): the domain of ``a_j`` is ``rules.allowed_block_starts``;
- rule 5 (inherited work): ``x_j = 1``, ``s_j = 0``, ``a_j`` = its running block;
- rule 2 (no preemption): one fixed-size optional interval ``[s_j, s_j + d)`` on
  the time axis and one ``[a_j, a_j + k)`` on the GPU axis;
- rule 1 (one job per GPU per slot): ``add_no_overlap_2d`` over those boxes. The
  time axis is not cut at T, so jobs that run past the horizon keep it there too;
- rule 6 (ramps): integer curves ``r_{a,t}`` with ``|r_t - r_{t-1}| <= R``;
- rule 7 (capacity): one cumulative of capacity G over the jobs' time intervals
  (demand k) and one unit interval per slot t < T with demand ``sum_a r_{a,t}``.

Objective: ``sum_j value_j(s_j) x_j - sum_{a,t} P_a y_{a,t}`` with shortfall
``y_{a,t} >= D_t - r_{a,t}``, ``y >= 0``. ``value_j(t)`` is precomputed for every
start by :func:`gpu_env.objective.start_values` (decay and slots past T included).

Without loss of optimality: ``r_{a,t}`` lies between the ramp floor and the
least demand-covering curve ``rules.cover_curve`` (clipping any valid curve to it
keeps the ramp and the served demand and frees capacity); identical jobs are
ordered (see :func:`_symmetry`).

Strengthening (measured in ``docs/exact-mode.md``, chosen by :class:`Formulation`):
one literal per (job, start) where values depend on the start, with the
objective written on them and one linear capacity row per slot (a time-indexed
LP relaxation on top of the interval model), symmetry breaking and copy caps
between identical jobs, normal patterns on knapsack-like scenarios, CP-SAT's
no-overlap-2D timetabling; and, measured but off by default, node-level
cumulatives, a GPU-axis cumulative, GPU-cell rows (a fully time-indexed rule 1)
and the other no-overlap-2D propagators.

Integer objective
-----------------
CP-SAT needs integer coefficients. Values and penalties are multiplied by the
smallest of 1, 10, 100, 1000 that makes every one of them integral (within
1e-6); when none does, by :data:`VALUE_SCALE` with values rounded up and
penalties rounded down. The model's objective is then never below the true
objective times the scale, so ``best_objective_bound / scale`` is a valid upper
bound on the true optimum. The reported objective is always recomputed exactly
by :func:`gpu_env.metrics.compute_metrics`; "optimal" means optimal for the
scaled objective, within ``jobs / scale`` of the true optimum when rounding was
needed (a gap of a few 1e-6 on the benchmark scenarios).

>>> from gpu_env.generators import generate
>>> result = solve(generate("training-heavy", seed=0), time_limit=10, workers=1)
>>> result.status.value
'optimal'
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
from ortools.sat.python import cp_model
from ortools.util.python.sorted_interval_list import Domain

from agents.options import PlanOptions
from gpu_env import rules
from gpu_env.metrics import compute_metrics
from gpu_env.objective import shortfall, start_values
from gpu_env.plan import Placement, Plan
from gpu_env.rules import Rule
from gpu_env.scenario import Job, Scenario

VALUE_SCALE = 10_000  # objective units per unit of value when no power of ten up to 1000 makes values integral
_INTEGRAL_SCALES = (1, 10, 100, 1000)
_TOL = 1e-6


class Status(StrEnum):
    """What the solver proved about the plan it returns."""

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    UNKNOWN = "unknown"


SOLVER_STATUS = {  # CP-SAT's status codes as a Status
    cp_model.OPTIMAL: Status.OPTIMAL,
    cp_model.FEASIBLE: Status.FEASIBLE,
    cp_model.INFEASIBLE: Status.INFEASIBLE,
    cp_model.UNKNOWN: Status.UNKNOWN,
}


class StartLiterals(StrEnum):
    """Whether the model has one literal per (job, start)."""

    AUTO = "auto"  # when some job's value depends on its start and there are few enough
    ALWAYS = "always"
    NEVER = "never"


@dataclass(frozen=True)
class Formulation:
    """Which redundant constraints and search options the model uses.

    The defaults are the formulation chosen in ``docs/exact-mode.md``; the other
    settings exist so that ``benchmarks/cpsat_benchmarks.py`` can measure them.

    Attributes:
        start_literals: "auto", "always" or "never": one literal per (job, start), with the
            value and a linear capacity row per slot written on them. "auto" uses them when
            some job's value depends on its start and there are at most ``max_start_literals``.
        slot_rows: With start literals, one linear capacity row per slot t < T (the time-indexed LP).
        max_start_literals: The size limit of "auto".
        value_encoding: Without start literals, "element" (value = table[start]) is the only encoding.
        symmetry: Order identical jobs (presence, then (start, first GPU)) and cap their count.
        normal_patterns: On knapsack-like scenarios (see :func:`_normal_patterns`), starts and first
            GPUs restricted to sums of other jobs' durations and sizes.
        cumulative_always: Keep the time cumulative when there are no real-time apps (then it is redundant).
        gpu_cumulative: A redundant cumulative on the GPU axis (demand d, capacity T + longest d).
        node_cumulative: Node-level decomposition: a node literal per job and a cumulative per node.
        node_rows: With start literals, one literal per (job, node, start) and a capacity row per node and slot.
        gpu_cells: Rule 1 as one at-most-one row per GPU-slot over (start, block) literals
            (a fully time-indexed model) instead of ``add_no_overlap_2d``.
        timetabling: CP-SAT ``use_timetabling_in_no_overlap_2d``.
        energetic: CP-SAT ``use_energetic_reasoning_in_no_overlap_2d``.
        area_energetic: CP-SAT ``use_area_energetic_reasoning_in_no_overlap_2d``.
        try_edge: CP-SAT ``use_try_edge_reasoning_in_no_overlap_2d``.
    """

    start_literals: StartLiterals = StartLiterals.AUTO
    slot_rows: bool = True
    max_start_literals: int = 20000
    symmetry: bool = True
    normal_patterns: bool = True
    cumulative_always: bool = True
    gpu_cumulative: bool = False
    node_cumulative: bool = False
    node_rows: bool = False
    gpu_cells: bool = False
    timetabling: bool = True
    energetic: bool = False
    area_energetic: bool = False
    try_edge: bool = False

    def __post_init__(self) -> None:
        if self.start_literals not in tuple(StartLiterals):
            raise ValueError(f"start_literals must be auto, always or never, got {self.start_literals!r}")
        object.__setattr__(self, "start_literals", StartLiterals(self.start_literals))


@dataclass(frozen=True)
class TracePoint:
    """One improving solution: seconds since the call began, its (scaled-back) objective and the bound then."""

    seconds: float
    objective: float
    bound: float


@dataclass
class Result:
    """What :func:`solve` returns.

    Attributes:
        status: What was proved about ``plan``.
        plan: The best plan found (metrics and ``info`` filled), or None when none was found.
        objective: The plan's objective, recomputed exactly by ``compute_metrics`` (None without a plan).
        bound: A proven upper bound on the optimum objective (None when the solver gave none).
        runtime: Seconds spent in the call, model building included.
        trace: Improving solutions in order of time.
        scale: The integer scale of the objective (see the module docstring).
        deterministic_time: CP-SAT's deterministic time of the search (machine-independent work).
    """

    status: Status
    plan: Plan | None
    objective: float | None
    bound: float | None
    runtime: float
    trace: list[TracePoint] = field(default_factory=list)
    scale: int = 1
    deterministic_time: float = 0.0

    @property
    def gap(self) -> float | None:
        """``(bound - objective) / |bound|``, or None when it is undefined."""
        return optimality_gap(self.objective, self.bound)


def optimality_gap(objective: float | None, bound: float | None) -> float | None:
    """``(bound - objective) / |bound|``, at least 0; 0 when both are 0; None when either is missing."""
    if objective is None or bound is None or not math.isfinite(bound):
        return None
    if abs(bound) < 1e-9:
        return 0.0 if objective >= bound - 1e-9 else None
    return max(0.0, (bound - objective) / abs(bound))


# ----------------------------------------------------------------------------- a plan as variable values


@dataclass
class Assignment:
    """Values of the decision variables: where each placed job goes, and the real-time curves.

    Attributes:
        spots: job index -> (start, first GPU) for placed jobs.
        curves: (apps, T) real-time allocation.
    """

    spots: dict[int, tuple[int, int]]
    curves: np.ndarray


# ----------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Restriction:
    """Part of the plan held constant: the small model that large-neighbourhood search solves (``agents/lns.py``).

    Every rule stays posted; the restriction only shrinks domains and adds constant load,
    so every solution of the restricted model, with the held part added back, is a valid plan
    whenever the held part is (the caller's side of the contract: ``reserved`` holds every job
    left out of the model, and every left-out job's box lies outside ``gpus`` x ``slots``).

    Attributes:
        pinned: Job index -> (start, first GPU): the job is placed there, a constant of the model.
        reserved: (T,) GPUs held in each slot t < T by jobs that are not in the model (rule 7).
        gpus: (lo, hi): every job that is not pinned takes a block inside GPUs ``lo..hi-1``.
        slots: (lo, hi): every job that is not pinned starts at ``lo`` or later and, when ``hi`` is not
            None, ends by ``hi``.
    """

    pinned: dict[int, tuple[int, int]] = field(default_factory=dict)
    reserved: np.ndarray | None = None
    gpus: tuple[int, int] | None = None
    slots: tuple[int, int | None] | None = None


@dataclass
class JobVars:
    """The variables of one job."""

    index: int
    job: Job
    present: cp_model.IntVar
    start: cp_model.IntVar
    first: cp_model.IntVar
    starts: list[int] = field(default_factory=list)  # allowed starts (rules 3 and 5)
    blocks: list[int] = field(default_factory=list)  # allowed first GPUs (rules 4 and 5)
    time: cp_model.IntervalVar | None = None
    gpus: cp_model.IntervalVar | None = None
    start_lits: dict[int, cp_model.IntVar] = field(default_factory=dict)
    table: dict[int, int] = field(default_factory=dict)  # scaled value per allowed start


class ScheduleModel:
    """The CP-SAT model of one scenario, with the hint value of every variable it creates.

    Attributes:
        model: The CP-SAT model.
        jobs: Per-job variables, in scenario order.
        curves: (apps, T) curve variables.
        shortfall: (apps, T) shortfall variables.
        scale: Objective units per unit of value.
        groups: Identical jobs, as lists of job indices (each list in file order).
    """

    def __init__(
        self, scenario: Scenario, formulation: Formulation | None = None, restriction: Restriction | None = None
    ) -> None:
        self.scenario = scenario
        self.formulation = formulation or Formulation()
        if restriction is not None and self.formulation.gpu_cells:
            raise ValueError("a restriction needs the no-overlap-2D encoding of rule 1, not gpu_cells")
        self.restriction = restriction
        reserved = None if restriction is None else restriction.reserved
        self.reserved = np.zeros(scenario.slots, dtype=np.int64) if reserved is None else np.asarray(reserved)
        self.model = cp_model.CpModel()
        self.values = start_values(scenario)  # (jobs, T + 1) value of each start, before scaling
        self.scale = _choose_scale(scenario, self.values)
        self.jobs: list[JobVars] = []
        self.curves: list[list[cp_model.IntVar]] = []
        self.shortfall: list[list[cp_model.IntVar]] = []
        self.slot_load: list[cp_model.IntVar | int] = []  # total real-time allocation per slot
        self.groups: list[list[int]] = []
        self._hints: list[tuple[cp_model.IntVar, Callable[[Assignment], int]]] = []
        self._tabled = False
        self.normalized = False  # starts and first GPUs restricted to normal patterns
        self.objective: Any = 0  # the objective expression, in model units
        self.build()

    # ------------------------------------------------------------------ helpers

    def new_var(self, lo: int, hi: int, name: str, hint: Callable[[Assignment], int]) -> cp_model.IntVar:
        """A new integer variable with the function that gives its hint from an assignment."""
        var = self.model.new_int_var(lo, hi, name)
        self._hints.append((var, hint))
        return var

    def new_bool(self, name: str, hint: Callable[[Assignment], bool]) -> cp_model.IntVar:
        """A new literal with the function that gives its hint from an assignment."""
        var = self.model.new_bool_var(name)
        self._hints.append((var, lambda a: int(hint(a))))
        return var

    def use_start_literals(self) -> bool:
        """Whether the formulation asks for (job, start) literals on this scenario."""
        mode = self.formulation.start_literals
        if mode != "auto":
            return mode == "always"
        count = sum(len(jv.starts) for jv in self.jobs if jv.job.running_on is None)
        varies = any(len(set(jv.table.values())) > 1 for jv in self.jobs if jv.job.running_on is None)
        return varies and count <= self.formulation.max_start_literals

    # ------------------------------------------------------------------ building, in one place

    def build(self) -> None:
        """Variables, every rule of :data:`RULE_CONSTRAINTS` in order, the strengthening, the objective."""
        _job_variables(self)
        for rule_constraint in RULE_CONSTRAINTS.values():
            rule_constraint(self)
        if self.restriction is not None:
            _restrict(self, self.restriction)
        self.start_literals()
        if self.formulation.slot_rows and self.jobs and all(jv.start_lits for jv in self.jobs):
            _slot_rows(self)
        if self.formulation.normal_patterns:
            _normal_patterns(self)
        if self.formulation.symmetry:
            _symmetry(self)
        if self.formulation.node_cumulative:
            _node_cumulative(self)
        if self.formulation.node_rows and self.jobs and all(jv.start_lits for jv in self.jobs):
            _node_rows(self)
        if self.formulation.gpu_cumulative:
            _gpu_cumulative(self)
        _objective(self)

    def start_literals(self) -> None:
        """Value tables per allowed start, and the (job, start) literals when used (once; needs rules 3-5 posted)."""
        if self._tabled:
            return
        self._tabled = True
        for jv in self.jobs:
            values = self.values[jv.index]
            jv.table = {t: _scaled(float(values[t]), self.scale, up=True) for t in jv.starts}
        if self.use_start_literals() or self.formulation.gpu_cells:
            _start_literals(self)

    # ------------------------------------------------------------------ hints and solutions

    def assignment_from_plan(self, plan: Plan) -> Assignment:
        """The variable values of a valid plan, with identical jobs reordered to meet the symmetry breaking.

        Curves are clipped to the least demand-covering curve (which keeps them valid and no worse);
        with normal patterns, jobs are pushed to earlier slots and lower GPUs first (same value).
        """
        sc = self.scenario
        spots: dict[int, tuple[int, int]] = {}
        for p in plan.placements:
            index = sc.job_index(p.job)
            if index >= 0 and p.gpus:
                spots[index] = (int(p.start), int(p.gpus[0]))
        if self.normalized:
            spots = _compact(sc, spots)
        if self.formulation.symmetry:
            for group in self.groups:
                placed = sorted(spots.pop(i) for i in group if i in spots)
                spots.update(zip(group, placed, strict=False))
        curves = np.zeros((len(sc.apps), sc.slots), dtype=np.int64)
        for i, app in enumerate(sc.apps):
            upper = _curve_upper(app, sc)
            curves[i] = np.minimum(plan.curve(app.name, sc.slots), upper)
        return Assignment(spots, curves)

    def add_hint(self, assignment: Assignment) -> None:
        """Hint every variable of the model with its value under ``assignment``."""
        self.model.clear_hints()
        for var, value in self._hints:
            self.model.add_hint(var, int(value(assignment)))

    def objective_of(self, assignment: Assignment) -> int:
        """The model's (scaled, rounded) objective of an assignment."""
        value = sum(self.jobs[j].table[start] for j, (start, _) in assignment.spots.items())
        short = shortfall(assignment.curves, self.scenario.demand).tolist()
        for app, unserved in zip(self.scenario.apps, short, strict=True):
            value -= _scaled(app.penalty, self.scale, up=False) * unserved
        return int(value)

    def hinted_variables(self) -> int:
        """How many variables have a hint function (every variable the model has)."""
        return len(self._hints)

    def read_solution(self, value: Callable[[Any], int]) -> Assignment:
        """The assignment of a solution, reading each variable with ``value``."""
        spots = {jv.index: (int(value(jv.start)), int(value(jv.first))) for jv in self.jobs if value(jv.present)}
        T = self.scenario.slots
        curves = np.array([[int(value(r)) for r in rs] for rs in self.curves], dtype=np.int64).reshape(-1, T)
        return Assignment(spots, curves)

    def plan_from(self, assignment: Assignment, scheduler: str = "cpsat") -> Plan:
        """The plan of an assignment."""
        sc = self.scenario
        placements = []
        for index in sorted(assignment.spots):
            start, first = assignment.spots[index]
            job = sc.jobs[index]
            placements.append(Placement(job.id, start, tuple(range(first, first + job.gpus))))
        curves = {app.name: [int(x) for x in assignment.curves[i]] for i, app in enumerate(sc.apps)}
        return Plan(sc.name, scheduler, placements, curves)


# ----------------------------------------------------------------------------- scaling


def _choose_scale(scenario: Scenario, values: np.ndarray) -> int:
    """The scale of the integer objective: see the module's "Integer objective" (``values``: ``start_values``)."""
    numbers = [app.penalty for app in scenario.apps]
    for j, job in enumerate(scenario.jobs):
        numbers.extend(float(values[j, t]) for t in rules.start_window(job, scenario.slots))
    for scale in _INTEGRAL_SCALES:
        if all(abs(x * scale - round(x * scale)) <= _TOL for x in numbers):
            return scale
    return VALUE_SCALE


def _scaled(x: float, scale: int, up: bool) -> int:
    y = x * scale
    if abs(y - round(y)) <= _TOL:
        return round(y)
    return math.ceil(y) if up else math.floor(y)


def _lower(var: cp_model.IntVar) -> int:
    return int(var.proto.domain[0])


def _upper(var: cp_model.IntVar) -> int:
    return int(list(var.proto.domain)[-1])  # (the proto's repeated field reads index -1 as 0)


def _curve_upper(app: Any, scenario: Scenario) -> np.ndarray:
    """The least demand-covering ramp-feasible curve, clipped to G: an upper bound that loses nothing."""
    return np.minimum(rules.cover_curve(app.demand, app.initial, app.ramp), scenario.gpus)


# ----------------------------------------------------------------------------- variables


def _job_variables(m: ScheduleModel) -> None:
    sc = m.scenario
    for j, job in enumerate(sc.jobs):

        def spot(a: Assignment, j: int = j) -> tuple[int, int] | None:
            return a.spots.get(j)

        jv_holder: list[JobVars] = []
        present = m.new_bool(f"x{j}", lambda a, spot=spot: spot(a) is not None)
        start = m.new_var(
            0, sc.slots - 1, f"s{j}", lambda a, spot=spot, h=jv_holder: spot(a)[0] if spot(a) else h[0].starts[0]
        )
        first = m.new_var(
            0, sc.gpus - job.gpus, f"a{j}", lambda a, spot=spot, h=jv_holder: spot(a)[1] if spot(a) else h[0].blocks[0]
        )
        jv = JobVars(j, job, present, start, first)
        jv_holder.append(jv)
        m.jobs.append(jv)


# ----------------------------------------------------------------------------- the rules, one function each


def _release_horizon_deadline(m: ScheduleModel) -> None:
    """Rule 3: starts in ``release..T-1`` ending by the deadline; a job with no allowed start is absent."""
    for jv in m.jobs:
        window = list(rules.start_window(jv.job, m.scenario.slots))
        if not window:
            window = [0]
            jv.present.with_domain(Domain(0, 0))
        jv.starts = window
        jv.start.with_domain(Domain.from_values(window))


def _contiguous_block(m: ScheduleModel) -> None:
    """Rule 4: the first GPU is one that starts an allowed (node-aware) block."""
    sc = m.scenario
    for jv in m.jobs:
        jv.blocks = [int(a) for a in rules.allowed_block_starts(jv.job.gpus, sc.gpus, sc.node_size)]
        jv.first.with_domain(Domain.from_values(jv.blocks))


def _inherited_held(m: ScheduleModel) -> None:
    """Rule 5: a running job is present at start 0 on its GPUs."""
    for jv in m.jobs:
        if jv.job.running_on is not None:
            jv.present.with_domain(Domain(1, 1))
            jv.starts = [0]
            jv.blocks = [jv.job.running_on[0]]
            jv.start.with_domain(Domain(0, 0))
            jv.first.with_domain(Domain(jv.blocks[0], jv.blocks[0]))


def _no_preemption(m: ScheduleModel) -> None:
    """Rule 2: one run of d consecutive slots on k fixed GPUs: a fixed-size optional interval on each axis."""
    for jv in m.jobs:
        jv.time = m.model.new_optional_fixed_size_interval_var(jv.start, jv.job.duration, jv.present, f"T{jv.index}")
        jv.gpus = m.model.new_optional_fixed_size_interval_var(jv.first, jv.job.gpus, jv.present, f"G{jv.index}")


def _one_job_per_gpu(m: ScheduleModel) -> None:
    """Rule 1: no GPU-slot is held twice, past the horizon too (:func:`_no_overlap_2d` or :func:`_gpu_cells`)."""
    if m.formulation.gpu_cells:
        m.start_literals()
        _gpu_cells(m)
    else:
        _no_overlap_2d(m)


def _realtime_ramp(m: ScheduleModel) -> None:
    """Rule 6: ``|r_0 - initial| <= R``, ``|r_t - r_{t-1}| <= R``; r between the ramp floor and the cover curve."""
    sc = m.scenario
    for i, app in enumerate(sc.apps):
        floor = rules.ramp_floor(app.initial, app.ramp, sc.slots)
        upper = _curve_upper(app, sc)
        curve = [
            m.new_var(int(floor[t]), int(max(floor[t], upper[t])), f"r{i}_{t}", lambda a, i=i, t=t: a.curves[i, t])
            for t in range(sc.slots)
        ]
        previous: Any = app.initial
        for r in curve:
            m.model.add_linear_constraint(r - previous, -app.ramp, app.ramp)
            previous = r
        m.curves.append(curve)


def _capacity(m: ScheduleModel) -> None:
    """Rule 7: jobs' GPUs plus real-time GPUs at most G in every slot t < T (one cumulative)."""
    sc = m.scenario
    intervals = [jv.time for jv in m.jobs]
    demands: list[Any] = [jv.job.gpus for jv in m.jobs]
    for t in range(sc.slots):
        if len(m.curves) == 1:
            load: Any = m.curves[0][t]
        elif m.curves:
            hi = min(sc.gpus, sum(_upper(m.curves[i][t]) for i in range(len(m.curves))))
            load = m.new_var(0, hi, f"rt{t}", lambda a, t=t: int(a.curves[:, t].sum()))
            m.model.add(load == sum(curve[t] for curve in m.curves))
        else:
            load = 0
        m.slot_load.append(load)
        held = int(m.reserved[t])
        if m.curves or held:
            intervals.append(m.model.new_fixed_size_interval_var(t, 1, f"slot{t}"))
            demands.append(load + held if held else load)
    if m.curves or m.reserved.any() or m.formulation.cumulative_always:
        m.model.add_cumulative(intervals, demands, sc.gpus)


RULE_CONSTRAINTS: dict[Rule, Callable[[ScheduleModel], None]] = {
    Rule.RELEASE_HORIZON_DEADLINE: _release_horizon_deadline,
    Rule.CONTIGUOUS_BLOCK: _contiguous_block,
    Rule.INHERITED_HELD: _inherited_held,
    Rule.NO_PREEMPTION: _no_preemption,
    Rule.ONE_JOB_PER_GPU: _one_job_per_gpu,
    Rule.REALTIME_RAMP: _realtime_ramp,
    Rule.CAPACITY: _capacity,
}
"""Every rule of SPEC section 2 (PLAN_FORMAT is about files, not plans), in the order they are posted."""


def _restrict(m: ScheduleModel, restriction: Restriction) -> None:
    """Pinned jobs placed at their spot; every other job's starts and blocks cut to the region (or absent)."""
    glo, ghi = restriction.gpus or (0, m.scenario.gpus)
    tlo, thi = restriction.slots or (0, None)
    for jv in m.jobs:
        spot = restriction.pinned.get(jv.index)
        if spot is not None:
            start, first = spot
            if start not in jv.starts or first not in jv.blocks:
                raise ValueError(f"pinned job {jv.job.id!r} at {spot} breaks rule 3, 4 or 5")
            jv.present.with_domain(Domain(1, 1))
            jv.starts, jv.blocks = [start], [first]
        else:
            d, k = jv.job.duration, jv.job.gpus
            starts = [t for t in jv.starts if t >= tlo and (thi is None or t + d <= thi)]
            blocks = [a for a in jv.blocks if glo <= a and a + k <= ghi]
            if not starts or not blocks:  # nowhere to go in the region: absent (one value per domain)
                jv.present.with_domain(Domain(0, 0))
                starts, blocks = jv.starts[:1], jv.blocks[:1]
            jv.starts, jv.blocks = starts, blocks
        jv.start.with_domain(Domain.from_values(jv.starts))
        jv.first.with_domain(Domain.from_values(jv.blocks))


# ----------------------------------------------------------------------------- rule 1, two encodings


def _no_overlap_2d(m: ScheduleModel) -> None:
    """Rule 1: the (time x GPU) boxes of the jobs do not overlap, past the horizon too."""
    m.model.add_no_overlap_2d([jv.time for jv in m.jobs], [jv.gpus for jv in m.jobs])


def _gpu_cells(m: ScheduleModel) -> None:
    """Rule 1, time-indexed: one literal per (job, start, block); at most one covers each GPU-slot."""
    cells: dict[tuple[int, int], list[cp_model.IntVar]] = {}
    for jv in m.jobs:
        job = jv.job
        lits = []
        for t in jv.starts:
            for first in jv.blocks:
                lit = m.new_bool(
                    f"y{jv.index}_{t}_{first}", lambda a, j=jv.index, t=t, f=first: a.spots.get(j) == (t, f)
                )
                lits.append((t, first, lit))
                for g in range(first, first + job.gpus):
                    for u in range(t, t + job.duration):
                        cells.setdefault((g, u), []).append(lit)
        m.model.add(sum(lit for _, _, lit in lits) == jv.present)
        m.model.add(jv.first == sum(f * lit for _, f, lit in lits)).only_enforce_if(jv.present)
        for t, lit_t in jv.start_lits.items():
            m.model.add(lit_t == sum(lit for s, _, lit in lits if s == t))
    for lits in cells.values():
        if len(lits) > 1:
            m.model.add_at_most_one(lits)


# ----------------------------------------------------------------------------- strengthening


def _start_literals(m: ScheduleModel) -> None:
    """One literal per (job, allowed start): exactly one when present, linked to the start."""
    for jv in m.jobs:
        lits = {
            t: m.new_bool(f"b{jv.index}_{t}", lambda a, j=jv.index, t=t: (a.spots.get(j) or (None,))[0] == t)
            for t in jv.starts
        }
        m.model.add(sum(lits.values()) == jv.present)
        m.model.add(jv.start == sum(t * lit for t, lit in lits.items())).only_enforce_if(jv.present)
        jv.start_lits = lits


def _slot_rows(m: ScheduleModel) -> None:
    """Capacity (rule 7) once more as linear rows on the start literals: the time-indexed LP relaxation."""
    sc = m.scenario
    for t in range(sc.slots):
        terms = []
        for jv in m.jobs:
            d = jv.job.duration
            covering = [lit for s, lit in jv.start_lits.items() if s <= t < s + d]
            if covering:
                terms.append(jv.job.gpus * sum(covering))
        if terms:
            m.model.add(sum(terms) + m.slot_load[t] <= sc.gpus - int(m.reserved[t]))


def _symmetry(m: ScheduleModel) -> None:
    """Identical jobs: the first ones are placed, in increasing (start, first GPU); at most as many as fit.

    Jobs are identical when size, duration, release, deadline and value per start
    agree and neither is inherited: any plan can swap them, so ordering them
    loses no objective. A group of n identical jobs fits at most
    ``(blocks that fit side by side) * (runs that fit one after another in its window)``
    times: every block of k GPUs (inside one node) holds exactly one GPU of index
    ``k-1 mod k`` counted inside its node, and every run holds one slot of index
    ``release + d - 1 mod d``, so two boxes never share both.
    """
    sc = m.scenario
    groups: dict[tuple[Any, ...], list[int]] = {}
    pinned = {} if m.restriction is None else m.restriction.pinned
    for jv in m.jobs:
        job = jv.job
        if job.running_on is not None or not jv.starts or _upper(jv.present) == 0 or jv.index in pinned:
            continue
        key = (job.gpus, job.duration, job.release, job.deadline, tuple(sorted(jv.table.items())))
        groups.setdefault(key, []).append(jv.index)
    m.groups = [g for g in groups.values() if len(g) > 1]
    for group in m.groups:
        members = [m.jobs[i] for i in group]
        job = members[0].job
        for a, b in itertools.pairwise(members):
            m.model.add_implication(b.present, a.present)
            m.model.add(a.start * sc.gpus + a.first < b.start * sc.gpus + b.first).only_enforce_if(b.present)
        k, d = job.gpus, job.duration
        if k <= sc.node_size:
            side = (sc.gpus // sc.node_size) * (sc.node_size // k) + (sc.gpus % sc.node_size) // k
        else:
            side = sc.gpus // k
        runs = (members[0].starts[-1] + d - members[0].starts[0]) // d
        cap = side * runs
        for jv in members[cap:]:
            m.model.add(jv.present == 0)


def _subset_sums(sizes: list[int], limit: int) -> int:
    """Bitset (bit v set) of every subset sum of ``sizes`` up to ``limit``."""
    reach, mask = 1, (1 << (limit + 1)) - 1
    for size in sizes:
        reach = (reach | (reach << size)) & mask
    return reach


def _normal_patterns(m: ScheduleModel) -> None:
    """Starts and first GPUs at sums of other jobs' durations and sizes (Herz 1972; Christofides-Whitlock 1977).

    Applies when a job may move to an earlier start or a lower GPU without
    changing its value or breaking a rule: no real-time apps, no inherited jobs,
    one node, every release 0 and every job's value the same at every allowed
    start (the 2D knapsack of SPEC section 6). Then any plan becomes one of the
    same value by pushing every job to earlier slots and lower GPUs until none
    can move; there, each job's start is the sum of the durations of a chain of
    jobs below it, and its first GPU the sum of the sizes of a chain beside it.
    """
    sc = m.scenario
    jobs = [jv for jv in m.jobs if _upper(jv.present) == 1]
    if (
        m.restriction is not None
        or sc.apps
        or sc.node_size != sc.gpus
        or any(jv.job.running_on is not None or jv.job.release != 0 or len(set(jv.table.values())) > 1 for jv in jobs)
    ):
        return
    for jv in jobs:
        others = [o for o in jobs if o is not jv]
        times = _subset_sums([o.job.duration for o in others], jv.starts[-1])
        starts = [t for t in jv.starts if times >> t & 1]
        gpus = _subset_sums([o.job.gpus for o in others], jv.blocks[-1])
        blocks = [a for a in jv.blocks if gpus >> a & 1]
        for t in set(jv.starts) - set(starts):
            if t in jv.start_lits:
                m.model.add(jv.start_lits[t] == 0)
        jv.start.with_domain(Domain.from_values(starts))
        jv.first.with_domain(Domain.from_values(blocks))
    m.normalized = True


def _compact(scenario: Scenario, spots: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Push every job to earlier slots, then lower GPUs, until none moves: a plan on normal patterns.

    Each move takes a job down to the highest end of the jobs below it (or 0) and
    left to the highest edge of the jobs beside it (or 0), so nothing ever overlaps;
    coordinates only fall, so it ends.
    """
    jobs = scenario.jobs
    boxes = dict(spots)
    moved = True
    while moved:
        moved = False
        for j in sorted(boxes, key=boxes.__getitem__):
            t, a = boxes[j]
            k, d = jobs[j].gpus, jobs[j].duration
            beside = [o for o in boxes if o != j and boxes[o][1] < a + k and a < boxes[o][1] + jobs[o].gpus]
            low = max((boxes[o][0] + jobs[o].duration for o in beside if boxes[o][0] < t), default=0)
            over = [o for o in boxes if o != j and boxes[o][0] < low + d and low < boxes[o][0] + jobs[o].duration]
            left = max((boxes[o][1] + jobs[o].gpus for o in over if boxes[o][1] < a), default=0)
            if (low, left) != (t, a):
                boxes[j] = (low, left)
                moved = True
    return boxes


def _node_cumulative(m: ScheduleModel) -> None:
    """Node-level decomposition: a literal for the node of the first GPU, and a cumulative per node."""
    sc = m.scenario
    ns = sc.node_size
    nodes = -(-sc.gpus // ns)
    if nodes == 1:
        return
    per_node: list[tuple[list[Any], list[int]]] = [([], []) for _ in range(nodes)]
    for jv in m.jobs:
        job = jv.job
        lits = []
        for n in sorted({b // ns for b in jv.blocks}):
            lit = m.new_bool(f"n{jv.index}_{n}", lambda a, j=jv.index, n=n: (a.spots.get(j) or (0, -ns))[1] // ns == n)
            m.model.add_linear_constraint(jv.first, n * ns, n * ns + ns - 1).only_enforce_if(lit)
            interval = m.model.new_optional_fixed_size_interval_var(jv.start, job.duration, lit, f"N{jv.index}_{n}")
            first = n * ns
            for node in range(n, nodes):
                covered = min(first + job.gpus, (node + 1) * ns) - max(first, node * ns)
                if covered <= 0:
                    break
                per_node[node][0].append(interval)
                per_node[node][1].append(covered)
            lits.append(lit)
        m.model.add(sum(lits) == jv.present)
    for node, (intervals, demands) in enumerate(per_node):
        if intervals:
            m.model.add_cumulative(intervals, demands, min(ns, sc.gpus - node * ns))


def _node_rows(m: ScheduleModel) -> None:
    """Node-level time-indexed rows: a literal per (job, node of its first GPU, start).

    Per node and slot (inside the horizon and past it), the jobs there hold at most the node's GPUs.
    """
    sc = m.scenario
    ns = sc.node_size
    nodes = -(-sc.gpus // ns)
    if nodes == 1:
        return
    width = sc.slots + max(jv.job.duration for jv in m.jobs)
    rows: dict[tuple[int, int], list[Any]] = {}
    for jv in m.jobs:
        job = jv.job
        by_node: dict[int, list[Any]] = {}
        by_start: dict[int, list[Any]] = {}
        for n in sorted({b // ns for b in jv.blocks}):
            spans = []
            for node in range(n, nodes):
                covered = min(n * ns + job.gpus, (node + 1) * ns) - max(n * ns, node * ns)
                if covered <= 0:
                    break
                spans.append((node, covered))
            for t in jv.start_lits:
                z = m.new_bool(
                    f"z{jv.index}_{n}_{t}",
                    lambda a, j=jv.index, n=n, t=t: (
                        (a.spots.get(j) or (None, -ns))[0] == t and a.spots[j][1] // ns == n
                    ),
                )
                by_node.setdefault(n, []).append(z)
                by_start.setdefault(t, []).append(z)
                for node, covered in spans:
                    for u in range(t, min(width, t + job.duration)):
                        rows.setdefault((node, u), []).append(covered * z)
            lit_n = m.new_bool(
                f"w{jv.index}_{n}", lambda a, j=jv.index, n=n: (a.spots.get(j) or (0, -ns))[1] // ns == n
            )
            m.model.add(sum(by_node[n]) == lit_n)
            m.model.add_linear_constraint(jv.first, n * ns, n * ns + ns - 1).only_enforce_if(lit_n)
        for t, lit_t in jv.start_lits.items():
            m.model.add(sum(by_start[t]) == lit_t)
    for (node, _u), terms in rows.items():
        m.model.add(sum(terms) <= min(ns, sc.gpus - node * ns))


def _gpu_cumulative(m: ScheduleModel) -> None:
    """A redundant cumulative on the GPU axis: over each GPU, runs fit in T + the longest duration."""
    width = m.scenario.slots + max((jv.job.duration for jv in m.jobs), default=0)
    m.model.add_cumulative([jv.gpus for jv in m.jobs], [jv.job.duration for jv in m.jobs], width)


# ----------------------------------------------------------------------------- objective


def _objective(m: ScheduleModel) -> None:
    """Maximise job value (a precomputed value per start) minus the shortfall penalty."""
    terms: list[Any] = []
    for jv in m.jobs:
        table = jv.table
        values = set(table.values())
        if len(values) == 1:
            terms.append(values.pop() * jv.present)
        elif jv.start_lits:
            terms.append(sum(table[t] * lit for t, lit in jv.start_lits.items()))
        else:  # element over the window, zero when absent
            lo, hi = min(values), max(values)
            offset = jv.starts[0]
            dense = [table.get(t, lo) for t in range(offset, jv.starts[-1] + 1)]

            def at_start(a: Assignment, jv: JobVars = jv) -> int:
                spot = a.spots.get(jv.index)
                return jv.table[spot[0]] if spot else jv.table[jv.starts[0]]

            element = m.new_var(lo, hi, f"e{jv.index}", at_start)
            m.model.add_element(jv.start - offset, dense, element)
            value = m.new_var(0, hi, f"v{jv.index}", lambda a, f=at_start, j=jv.index: f(a) if j in a.spots else 0)
            m.model.add(value <= element)
            m.model.add(value <= hi * jv.present)
            terms.append(value)
    sc = m.scenario
    for i, app in enumerate(sc.apps):
        penalty = _scaled(app.penalty, m.scale, up=False)
        row = []
        for t, r in enumerate(m.curves[i]):
            demand = app.demand[t]
            most = max(0, demand - _lower(r))
            y = m.new_var(0, most, f"y{i}_{t}", lambda a, i=i, t=t, d=demand: max(0, d - int(a.curves[i, t])))
            m.model.add(y >= demand - r)
            row.append(y)
        m.shortfall.append(row)
        if penalty:
            terms.append(-penalty * sum(row))
    m.objective = sum(terms)
    m.model.maximize(m.objective)


# ----------------------------------------------------------------------------- solving


class _Trace(cp_model.CpSolverSolutionCallback):
    def __init__(
        self, started: float, scale: int, model: ScheduleModel, on_plan: Callable[[Plan], None] | None = None
    ) -> None:
        super().__init__()
        self.started = started
        self.scale = scale
        self.points: list[TracePoint] = []
        self.schedule = model
        self.on_plan = on_plan

    def on_solution_callback(self) -> None:
        self.points.append(
            TracePoint(
                time.perf_counter() - self.started,
                self.objective_value / self.scale,
                self.best_objective_bound / self.scale,
            )
        )
        if self.on_plan is not None:
            self.on_plan(self.schedule.plan_from(self.schedule.read_solution(self.value)))


def new_solver(
    formulation: Formulation, seconds: float, workers: int, seed: int, deterministic_time: float | None, log: bool
) -> cp_model.CpSolver:
    """A CP-SAT solver for a formulation, with the time, worker, seed and logging parameters of a solve."""
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = max(0.001, seconds)
    if deterministic_time is not None:
        params.max_deterministic_time = deterministic_time
    params.num_workers = max(1, int(workers))
    params.random_seed = int(seed)
    params.log_search_progress = log
    params.use_timetabling_in_no_overlap_2d = formulation.timetabling
    params.use_energetic_reasoning_in_no_overlap_2d = formulation.energetic
    params.use_area_energetic_reasoning_in_no_overlap_2d = formulation.area_energetic
    params.use_try_edge_reasoning_in_no_overlap_2d = formulation.try_edge
    return solver


def solve(
    scenario: Scenario,
    *,
    time_limit: float = 10.0,
    workers: int = 1,
    seed: int = 0,
    deterministic_time: float | None = None,
    hint: Plan | None = None,
    cutoff: Plan | None = None,
    formulation: Formulation | None = None,
    log: bool = False,
    started: float | None = None,
    on_solver: Callable[[cp_model.CpSolver], None] | None = None,
    on_plan: Callable[[Plan], None] | None = None,
) -> Result:
    """Solve a scenario exactly, anytime.

    Args:
        scenario: The problem.
        time_limit: Wall-clock seconds for the whole call, model building included.
        workers: CP-SAT workers.
        seed: CP-SAT ``random_seed``.
        deterministic_time: Also stop after this much deterministic time (repeatable with one worker).
        hint: A valid plan to start from: every variable is hinted with its value.
        cutoff: A valid plan whose objective the model must reach (a constraint on the objective).
        formulation: Model options (default: the chosen formulation).
        log: Print CP-SAT's search log.
        started: ``time.perf_counter()`` at which the caller's clock began (trace times count from it).
        on_solver: Called with the solver just before the search (another thread may then
            ``stop_search()`` it: full mode's portfolio, ``agents/full.py``).
        on_plan: Called with the plan of every improving solution, from the solver's thread.

    Returns:
        The best plan found with its status, exact objective, proven bound and trace.
    """
    started = time.perf_counter() if started is None else started
    m = ScheduleModel(scenario, formulation)
    f = m.formulation
    if hint is not None:
        m.add_hint(m.assignment_from_plan(hint))
    if cutoff is not None:
        m.model.add(m.objective >= m.objective_of(m.assignment_from_plan(cutoff)))
    remaining = time_limit - (time.perf_counter() - started)
    solver = new_solver(f, remaining, workers, seed, deterministic_time, log)
    trace = _Trace(started, m.scale, m, on_plan)
    if on_solver is not None:
        on_solver(solver)
    code = solver.solve(m.model, trace)
    if code == cp_model.MODEL_INVALID:  # a bug in this module, never the user's input
        raise RuntimeError(f"CP-SAT model invalid: {m.model.validate()}")
    status = SOLVER_STATUS[code]
    # With no solution CP-SAT's bound is not one (it reads 0.0 when the limit struck before the search): none.
    scaled_bound = solver.best_objective_bound if code in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None
    assignment = m.read_solution(solver.value) if code in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None
    dtime = solver.deterministic_time
    bound = None if scaled_bound is None else scaled_bound / m.scale
    plan = None
    objective = None
    if assignment is not None:
        plan = m.plan_from(assignment)
        plan.metrics = compute_metrics(scenario, plan)
        objective = plan.metrics.objective
        if bound is not None:
            bound = max(bound, objective)  # rounding: the exact objective may exceed the scaled bound by < 1e-6
    runtime = time.perf_counter() - started
    result = Result(status, plan, objective, bound, runtime, trace.points, m.scale, dtime)
    if plan is not None:
        plan.info = plan_info(result.status, bound, result.gap)
    return result


def plan_info(status: Status, bound: float | None, gap: float | None) -> dict[str, Any]:
    """What a plan stores about its proof: ``{"status", "bound", "gap"}``."""
    return {
        "status": status.value,
        "bound": None if bound is None else round(bound, 6),
        "gap": None if gap is None else round(gap, 9),
    }


def trace_info(points: list[TracePoint]) -> dict[str, list[float | None]]:
    """A trace as ``plan.info["trace"]``: seconds, objective and bound (null while none is proved), in order."""
    return {
        "seconds": [round(p.seconds, 4) for p in points],
        "objective": [round(p.objective, 6) for p in points],
        "bound": [round(p.bound, 6) if math.isfinite(p.bound) else None for p in points],
    }


def fallback_plan(scenario: Scenario, scheduler: str) -> Plan:
    """A valid plan when the solver found none in time: inherited jobs only, each app at its ramp floor."""
    placements = [Placement(job.id, 0, tuple(job.running_on)) for job in scenario.jobs if job.running_on is not None]
    curves = {
        app.name: [int(x) for x in rules.ramp_floor(app.initial, app.ramp, scenario.slots)] for app in scenario.apps
    }
    return Plan(scenario.name, scheduler, placements, curves)


def plan(scenario: Scenario, options: PlanOptions | None = None) -> Plan:
    """The exact mode as a scheduler: the best plan CP-SAT finds within ``options.time_limit``.

    ``plan.info`` holds the solver status, the proven bound and the optimality gap.
    When no plan is found in time, the plan holds only the inherited jobs (status "unknown").
    """
    options = options or PlanOptions()
    result = solve(
        scenario,
        time_limit=options.time_limit,
        workers=options.workers,
        seed=options.seed,
        deterministic_time=options.deterministic_time,
    )
    if result.plan is not None:
        result.plan.info["trace"] = trace_info(result.trace)
        return result.plan
    fallback = fallback_plan(scenario, "cpsat")
    objective = compute_metrics(scenario, fallback).objective
    fallback.info = plan_info(result.status, result.bound, optimality_gap(objective, result.bound))
    return fallback
