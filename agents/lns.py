"""Large-neighbourhood search around CP-SAT: full mode at the sizes of a real cluster.

At the seed's sizes CP-SAT proves the optimum of the whole model in seconds. At
hundreds of GPUs and jobs the whole model is too big to improve in the time:
its search adds nothing to the hint. Here the plan is improved a piece at a time:

1. **Free a neighbourhood.** A region of the grid, GPUs ``g0..g1-1`` (whole
   nodes) by slots ``t0..t1-1`` (``t1 = T``: no end, runs past the horizon
   included), chosen by one of :data:`KINDS`: a range of nodes over the whole
   day, a window of slots over the whole cluster, a box of both around a random
   cell, or a box around a spot where a job the plan leaves out could go. The
   placed jobs whose box lies inside the region are *freed* (up to the
   neighbourhood's size, a random subset when more lie inside), and jobs left
   out that could fit inside it are *candidates*.
2. **Solve the small model.** :class:`agents.cpsat.ScheduleModel` of a
   sub-scenario holding the freed jobs and the candidates, restricted to the
   region (:class:`agents.cpsat.Restriction`), the placed jobs whose boxes meet
   the region *pinned* where they are, every other job as constant load per slot
   (rule 7), and the real-time curves free. Every rule is posted, so any solution
   of the small model, with the rest of the plan added back, is a valid plan:
   the freed and the candidate jobs stay inside the region, where only pinned
   boxes can be (rule 1), and the other placed jobs' load is in every slot's
   capacity (rule 7). CP-SAT gets the current plan as a complete hint and a short
   limit (wall seconds and deterministic time).
3. **Keep improvements.** The move is accepted when the exact objective (the
   job values of :func:`gpu_env.objective.start_values`, the shortfall penalty)
   rises; the plan therefore never falls below the hint.
4. **Adapt.** Each kind's size (freed jobs) grows by a fifth after a sub-solve
   that proves its optimum and shrinks by a fifth after one that runs out of
   time; kinds are drawn in proportion to the gain per deterministic second they
   brought lately (a multi-armed bandit with an exponential average, a floor so
   that no kind starves).

With one worker and a deterministic budget (``deterministic_time``: the sum of
the sub-solves' deterministic times) the search is repeatable: every choice is
drawn from one seeded generator and every adaptation reads only statuses,
gains and deterministic times, never the clock.

The bound is :func:`agents.relaxation.lp_bound`, the time-indexed LP relaxation
certified by its dual (full mode adds CP-SAT's bound on the whole model where its
portfolio runs one). ``docs/exact-mode.md`` has the measurements.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from agents import cpsat
from agents.relaxation import Bound, lp_bound
from gpu_env import rules
from gpu_env.metrics import compute_metrics
from gpu_env.objective import shortfall, start_values
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import Scenario

LNS_ABOVE_JOBS = 180
"""Full mode solves the whole model up to this many jobs and searches neighbourhoods above it.

The seed's seven scenarios and their fresh draws have at most 30 jobs (proved in 0.06-2 s
whole). At 141-166 jobs the whole model (30 s, 2 workers) reached 0.995-0.999 of the bound
and beat LNS; from 192 jobs on it often added nothing to its hint (docs/exact-mode.md).
Above the switch, full mode's portfolio (``agents/full.py``) still runs the whole model
beside the search up to 300 jobs."""

KINDS = ("nodes", "window", "box", "unplaced")
"""Neighbourhood kinds: a node range over the day, a slot window over the cluster, a box, a box for a left-out job."""

INITIAL_SIZE = 16  # freed jobs per neighbourhood at the start, per kind
MIN_SIZE, MAX_SIZE = 4, 400
GROW, SHRINK = 1.2, 0.8  # size factor after a sub-solve that proves its optimum / that runs out of time
AVERAGE = 0.3  # weight of the newest gain in a kind's exponential average
FLOOR = 0.1  # each kind is drawn at least in proportion to this share of the mean average
MOVE_SHARE, MOVE_LEAST, MOVE_MOST = 0.05, 0.2, 1.5  # a sub-solve's limit: this share of the budget, within these
_EPS = 1e-9


def use_lns(scenario: Scenario) -> bool:
    """Whether full mode searches neighbourhoods (more than :data:`LNS_ABOVE_JOBS` jobs) rather than the whole model."""
    return len(scenario.jobs) > LNS_ABOVE_JOBS


@dataclass
class Region:
    """A neighbourhood: a region of the grid and the jobs in play.

    Attributes:
        kind: One of :data:`KINDS`.
        gpus: (g0, g1), whole nodes.
        slots: (t0, t1); ``t1 == T`` means no end.
        freed: Placed jobs moved freely inside the region (scenario indices).
        candidates: Left-out jobs that may be placed inside it.
        pinned: Placed jobs held where they are whose boxes meet the region.
    """

    kind: str
    gpus: tuple[int, int]
    slots: tuple[int, int]
    freed: list[int] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)
    pinned: list[int] = field(default_factory=list)


@dataclass
class Move:
    """One sub-solve: what was freed, what CP-SAT proved, what it gained."""

    kind: str
    freed: int
    candidates: int
    pinned: int
    status: str
    deterministic_time: float
    gain: float
    seconds: float = 0.0


@dataclass
class Outcome:
    """What :func:`search` returns.

    Attributes:
        plan: The best plan (metrics filled), never worse than the hint.
        objective: Its objective (``compute_metrics``).
        bound: The proven bound used for the gap.
        trace: (seconds, objective, bound) after the hint, the bound and each accepted move.
        moves: Every sub-solve in order.
        deterministic_time: The sum of the sub-solves' deterministic times.
        adopted: How many plans from ``incoming`` the search continued from.
    """

    plan: Plan
    objective: float
    bound: Bound
    trace: list[cpsat.TracePoint]
    moves: list[Move]
    deterministic_time: float
    adopted: int = 0


class _State:
    """The current plan as arrays (placed, start, first GPU per job) and curves, with its exact objective."""

    def __init__(self, scenario: Scenario, plan: Plan) -> None:
        sc = self.scenario = scenario
        n = len(sc.jobs)
        self.values = start_values(sc)
        self.k = np.array([j.gpus for j in sc.jobs], dtype=np.int64)
        self.d = np.array([j.duration for j in sc.jobs], dtype=np.int64)
        self.inherited = np.array([j.running_on is not None for j in sc.jobs], dtype=bool)
        self.release = np.array([j.release for j in sc.jobs], dtype=np.int64)
        self.last = np.array([rules.start_window(j, sc.slots).stop - 1 for j in sc.jobs], dtype=np.int64)
        self.weight = np.array([j.weight for j in sc.jobs], dtype=np.float64)
        self.placed = np.zeros(n, dtype=bool)
        self.start = np.zeros(n, dtype=np.int64)
        self.first = np.zeros(n, dtype=np.int64)
        for p in plan.placements:
            j = sc.job_index(p.job)
            self.placed[j], self.start[j], self.first[j] = True, p.start, p.gpus[0]
        self.curves = np.array([plan.curve(app.name, sc.slots) for app in sc.apps], dtype=np.int64).reshape(
            len(sc.apps), sc.slots
        )
        self.penalty = np.array([app.penalty for app in sc.apps], dtype=np.float64)
        self.blocks = {k: rules.allowed_block_starts(int(k), sc.gpus, sc.node_size) for k in set(self.k.tolist())}
        has_block = np.array([self.blocks[int(k)].size > 0 for k in self.k], dtype=bool)
        self.placeable = has_block & (self.last >= self.release) & ~self.inherited  # some start and block allowed

    def load(self, jobs: np.ndarray) -> np.ndarray:
        """(T,) GPUs held in each slot t < T by the placed jobs of the mask ``jobs``."""
        T = self.scenario.slots
        delta = np.zeros(T + 1, dtype=np.int64)
        idx = np.flatnonzero(jobs & self.placed)
        np.add.at(delta, np.minimum(self.start[idx], T), self.k[idx])
        np.add.at(delta, np.minimum(self.start[idx] + self.d[idx], T), -self.k[idx])
        return np.cumsum(delta)[:T]

    def curve_penalty(self, curves: np.ndarray) -> float:
        """The shortfall penalty of curves (0 without apps)."""
        if not self.scenario.apps:
            return 0.0
        return float((self.penalty * shortfall(curves, self.scenario.demand)).sum())

    def objective(self) -> float:
        """The plan's objective from the value table (equal to ``compute_metrics`` up to float rounding)."""
        idx = np.flatnonzero(self.placed)
        return float(self.values[idx, self.start[idx]].sum()) - self.curve_penalty(self.curves)

    def plan(self) -> Plan:
        """The current plan."""
        sc = self.scenario
        placements = [
            Placement(
                sc.jobs[j].id, int(self.start[j]), tuple(range(int(self.first[j]), int(self.first[j] + self.k[j])))
            )
            for j in np.flatnonzero(self.placed)
        ]
        curves = {app.name: [int(x) for x in self.curves[i]] for i, app in enumerate(sc.apps)}
        return Plan(sc.name, "full", placements, curves)


# ----------------------------------------------------------------------------- neighbourhoods


def _inside(state: _State, gpus: tuple[int, int], slots: tuple[int, int]) -> np.ndarray:
    """Placed, not inherited jobs whose box lies inside the region."""
    g0, g1 = gpus
    t0, t1 = slots
    end_ok = (state.start + state.d <= t1) | (t1 >= state.scenario.slots)
    return (
        state.placed
        & ~state.inherited
        & (state.first >= g0)
        & (state.first + state.k <= g1)
        & (state.start >= t0)
        & end_ok
    )


def _meets(state: _State, gpus: tuple[int, int], slots: tuple[int, int]) -> np.ndarray:
    """Placed jobs whose box meets the region."""
    g0, g1 = gpus
    t0, t1 = slots
    far = t1 >= state.scenario.slots
    return (
        state.placed
        & (state.first < g1)
        & (state.first + state.k > g0)
        & (far | (state.start < t1))
        & (state.start + state.d > t0)
    )


def _grow(
    state: _State, rng: np.random.Generator, size: int, nodes: tuple[int, int], slots: tuple[int, int], axes: str
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Widen a region (in node and slot units) along ``axes`` ("n", "t" or "nt") until ``size`` jobs lie inside."""
    sc = state.scenario
    ns = sc.node_size
    n_nodes = -(-sc.gpus // ns)
    T = sc.slots
    (n0, n1), (t0, t1) = nodes, slots

    def region() -> tuple[tuple[int, int], tuple[int, int]]:
        return (n0 * ns, min(sc.gpus, n1 * ns)), (t0, t1)

    while int(_inside(state, *region()).sum()) < size:
        options = []
        if "n" in axes and (n0 > 0 or n1 < n_nodes):
            options.append("n")
        if "t" in axes and (t0 > 0 or t1 < T):
            options.append("t")
        if not options:
            break
        axis = options[int(rng.integers(len(options)))]
        if axis == "n":
            if n0 > 0 and (n1 >= n_nodes or rng.random() < 0.5):
                n0 -= 1
            else:
                n1 += 1
        elif t0 > 0 and (t1 >= T or rng.random() < 0.5):
            t0 -= 1
        else:
            t1 += 1
    return region()


def choose_region(state: _State, rng: np.random.Generator, kind: str, size: int) -> Region:
    """Draw a neighbourhood of ``kind`` with about ``size`` freed jobs (see the module docstring)."""
    sc = state.scenario
    ns, T = sc.node_size, sc.slots
    n_nodes = -(-sc.gpus // ns)
    forced: list[int] = []
    left_out = np.flatnonzero(~state.placed & state.placeable)
    if kind == "unplaced" and left_out.size == 0:
        kind = "box"
    if kind == "nodes":
        c = int(rng.integers(n_nodes))
        gpus, slots = _grow(state, rng, size, (c, c + 1), (0, T), "n")
    elif kind == "window":
        t = int(rng.integers(T))
        gpus, slots = _grow(state, rng, size, (0, n_nodes), (t, t + 1), "t")
    elif kind == "box":
        c, t = int(rng.integers(n_nodes)), int(rng.integers(T))
        gpus, slots = _grow(state, rng, size, (c, c + 1), (t, t + 1), "nt")
    else:  # a spot where a left-out job could go, chosen in proportion to what the job is worth
        worth = state.weight[left_out] * state.k[left_out] * state.d[left_out]
        u = int(left_out[int(rng.choice(left_out.size, p=worth / worth.sum()))])
        blocks = state.blocks[int(state.k[u])]
        a = int(blocks[int(rng.integers(blocks.size))])
        s = int(rng.integers(state.release[u], state.last[u] + 1))
        end = s + int(state.d[u])
        nodes = (a // ns, -(-(a + int(state.k[u])) // ns))
        gpus, slots = _grow(state, rng, size, nodes, (s, T if end >= T else end), "nt")
        forced = [u]
    inside = np.flatnonzero(_inside(state, gpus, slots))
    if inside.size > size:
        inside = np.sort(rng.choice(inside, size=size, replace=False))
    freed = inside.tolist()
    free_mask = np.zeros(len(sc.jobs), dtype=bool)
    free_mask[inside] = True
    pinned = np.flatnonzero(_meets(state, gpus, slots) & ~free_mask).tolist()
    candidates = _candidates(state, rng, left_out, gpus, slots, max(2, size // 2), forced)
    return Region(kind, gpus, slots, freed, candidates, pinned)


def _candidates(
    state: _State,
    rng: np.random.Generator,
    left_out: np.ndarray,
    gpus: tuple[int, int],
    slots: tuple[int, int],
    most: int,
    forced: list[int],
) -> list[int]:
    """Left-out jobs with an allowed start and block inside the region; the ``most`` most valuable per GPU-slot."""
    g0, g1 = gpus
    t0, t1 = slots
    T = state.scenario.slots
    fits = []
    for u in left_out.tolist():
        first = max(int(state.release[u]), t0)
        if first > state.last[u] or (t1 < T and first + state.d[u] > t1):
            continue
        blocks = state.blocks[int(state.k[u])]
        if not np.any((blocks >= g0) & (blocks + state.k[u] <= g1)):
            continue
        fits.append(u)
    keep = fits
    if len(fits) > most:
        score = state.weight[fits] * (1.0 + 0.5 * rng.random(len(fits)))
        keep = [fits[i] for i in np.argsort(-score, kind="stable")[:most]]
        keep += [u for u in forced if u in fits and u not in keep]
    return sorted(keep)


# ----------------------------------------------------------------------------- one move


def solve_region(
    state: _State,
    region: Region,
    *,
    seconds: float,
    deterministic_time: float | None,
    workers: int,
    seed: int,
    formulation: cpsat.Formulation | None = None,
) -> tuple[Move, dict[int, tuple[int, int]] | None, np.ndarray | None]:
    """Re-optimise one neighbourhood with the rest of the plan as constants.

    Returns:
        The move's record, and when it improves the plan the new spots of the freed and
        candidate jobs (scenario index -> (start, first GPU); a job missing is left out)
        and the new curves; otherwise (None, None).
    """
    sc = state.scenario
    clock = time.perf_counter()
    members = sorted({*region.freed, *region.candidates, *region.pinned})
    sub = replace(sc, jobs=tuple(sc.jobs[j] for j in members))
    position = {j: i for i, j in enumerate(members)}
    in_model = np.zeros(len(sc.jobs), dtype=bool)
    in_model[region.freed + region.pinned] = True
    reserved = state.load(~in_model)
    pinned = {position[j]: (int(state.start[j]), int(state.first[j])) for j in region.pinned}
    t0, t1 = region.slots
    restriction = cpsat.Restriction(pinned, reserved, region.gpus, (t0, None if t1 >= sc.slots else t1))
    m = cpsat.ScheduleModel(sub, formulation, restriction)
    current = {position[j]: (int(state.start[j]), int(state.first[j])) for j in region.freed + region.pinned}
    hint = m.assignment_from_plan(m.plan_from(cpsat.Assignment(current, state.curves.copy())))
    m.add_hint(hint)
    solver = cpsat.new_solver(m.formulation, seconds, workers, seed, deterministic_time, False)
    code = solver.solve(m.model)
    status = cpsat.SOLVER_STATUS[code].value
    record = Move(region.kind, len(region.freed), len(region.candidates), len(region.pinned), status, 0.0, 0.0)
    record.deterministic_time = float(solver.deterministic_time)
    record.seconds = time.perf_counter() - clock
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return record, None, None
    found = m.read_solution(solver.value)
    old = sum(float(state.values[j, state.start[j]]) for j in region.freed) - state.curve_penalty(state.curves)
    held = set(region.pinned)
    spots = {members[i]: spot for i, spot in found.spots.items() if members[i] not in held}
    new = sum(float(state.values[j, s]) for j, (s, _) in spots.items()) - state.curve_penalty(found.curves)
    record.gain = new - old
    if record.gain <= _EPS:
        return record, None, None
    return record, spots, found.curves


def _apply(state: _State, region: Region, spots: dict[int, tuple[int, int]], curves: np.ndarray) -> None:
    for j in region.freed + region.candidates:
        state.placed[j] = False
    for j, (s, a) in spots.items():
        state.placed[j], state.start[j], state.first[j] = True, s, a
    state.curves = np.asarray(curves, dtype=np.int64)


# ----------------------------------------------------------------------------- the search


def search(
    scenario: Scenario,
    hint: Plan,
    *,
    time_limit: float,
    workers: int = 1,
    seed: int = 0,
    deterministic_time: float | None = None,
    max_moves: int | None = None,
    started: float | None = None,
    bound: Bound | None = None,
    formulation: cpsat.Formulation | None = None,
    move_seconds: float | None = None,
    stop: threading.Event | None = None,
    incoming: Callable[[], Plan | None] | None = None,
    outgoing: Callable[[Plan], None] | None = None,
) -> Outcome:
    """Improve a valid plan by large-neighbourhood search until a budget runs out.

    Args:
        scenario: The problem.
        hint: A valid plan to start from.
        time_limit: Wall seconds from ``started`` (the bound's LP included).
        workers: CP-SAT workers of each sub-solve.
        seed: Seed of every draw and of each sub-solve (``seed + move``).
        deterministic_time: Stop when the sub-solves' deterministic times add up to this
            (the repeatable budget: with one worker the same plan on any machine, as long as
            ``time_limit`` is not reached first).
        max_moves: Stop after this many sub-solves.
        started: ``time.perf_counter()`` at which the caller's clock began.
        bound: A proven bound to use (default: :func:`agents.relaxation.lp_bound`).
        formulation: The small models' formulation.
        move_seconds: A sub-solve's limit, in wall seconds and in deterministic time
            (default :func:`move_limit` of ``time_limit``).
        stop: Stop before the next move once this is set (another thread proved the optimum).
        incoming: Asked before each move for a valid plan found elsewhere (or None); the search
            continues from it when it is worth more than its own.
        outgoing: Called with the plan after each accepted move.

    Returns:
        The best plan and its record; the plan is never worse than ``hint``.
    """
    started = time.perf_counter() if started is None else started
    rng = np.random.default_rng(seed)
    state = _State(scenario, hint)
    objective = state.objective()
    trace = [cpsat.TracePoint(time.perf_counter() - started, objective, math.inf)]
    bound = bound or lp_bound(scenario)
    trace.append(cpsat.TracePoint(time.perf_counter() - started, objective, bound.value))
    sizes = dict.fromkeys(KINDS, float(INITIAL_SIZE))
    average: dict[str, float | None] = dict.fromkeys(KINDS, None)
    move_seconds = move_limit(time_limit) if move_seconds is None else move_seconds
    moves: list[Move] = []
    spent = 0.0
    adopted = 0
    while True:
        left = time_limit - (time.perf_counter() - started)
        if left <= 0.05 or (max_moves is not None and len(moves) >= max_moves):
            break
        if deterministic_time is not None and spent >= deterministic_time - 1e-12:
            break
        if objective >= bound.value - 1e-9 * max(1.0, abs(bound.value)) or (stop is not None and stop.is_set()):
            break  # proved optimal, here or elsewhere
        other = incoming() if incoming is not None else None
        if other is not None:
            arrived = _State(scenario, other)
            if arrived.objective() > objective + _EPS:
                state, objective = arrived, arrived.objective()
                adopted += 1
                trace.append(cpsat.TracePoint(time.perf_counter() - started, objective, bound.value))
                if outgoing is not None:
                    outgoing(state.plan())
        kind = _draw_kind(rng, average)
        region = choose_region(state, rng, kind, round(sizes[kind]))
        if not region.freed and not region.candidates:
            moves.append(Move(region.kind, 0, 0, len(region.pinned), "empty", 0.0, 0.0))
            sizes[kind] = min(MAX_SIZE, sizes[kind] * GROW + 1)
            continue
        if deterministic_time is not None:
            seconds, dtime = left, min(move_seconds, deterministic_time - spent)
        else:
            seconds, dtime = min(left, move_seconds), move_seconds
        record, spots, curves = solve_region(
            state,
            region,
            seconds=seconds,
            deterministic_time=dtime,
            workers=workers,
            seed=seed + len(moves),
            formulation=formulation,
        )
        moves.append(record)
        spent += record.deterministic_time
        if spots is not None and curves is not None:
            _apply(state, region, spots, curves)
            objective = state.objective()
            trace.append(cpsat.TracePoint(time.perf_counter() - started, objective, bound.value))
            if outgoing is not None:
                outgoing(state.plan())
        if record.status == "optimal":
            sizes[kind] = min(MAX_SIZE, sizes[kind] * GROW + 1)
        elif record.status in ("feasible", "unknown"):
            sizes[kind] = max(MIN_SIZE, sizes[kind] * SHRINK)
        reward = max(0.0, record.gain) / (record.deterministic_time + 0.05)
        previous = average[kind]
        average[kind] = reward if previous is None else (1 - AVERAGE) * previous + AVERAGE * reward
    trace.append(cpsat.TracePoint(time.perf_counter() - started, objective, bound.value))  # the end of the run
    plan = state.plan()
    plan.metrics = compute_metrics(scenario, plan)
    return Outcome(plan, plan.metrics.objective, bound, trace, moves, spent, adopted)


def move_limit(time_limit: float) -> float:
    """A sub-solve's limit for a budget of ``time_limit`` seconds: :data:`MOVE_SHARE` of it, within bounds."""
    return min(MOVE_MOST, max(MOVE_LEAST, MOVE_SHARE * time_limit))


def _draw_kind(rng: np.random.Generator, average: dict[str, float | None]) -> str:
    """The next kind: each untried one first, then in proportion to its average gain (with a floor)."""
    for kind, value in average.items():
        if value is None:
            return kind
    values = np.array([float(v or 0.0) for v in average.values()])
    weights = values + FLOOR * max(values.mean(), _EPS)
    return KINDS[int(rng.choice(len(KINDS), p=weights / weights.sum()))]


def summary(moves: list[Move]) -> dict[str, Any]:
    """Per kind: sub-solves, accepted moves, proved sub-solves, total gain (for ``plan.info["lns"]``)."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        mine = [m for m in moves if m.kind == kind]
        out[kind] = {
            "moves": len(mine),
            "accepted": sum(m.gain > _EPS for m in mine),
            "proved": sum(m.status == "optimal" for m in mine),
            "gain": round(sum(max(0.0, m.gain) for m in mine), 6),
            "mean_freed": round(float(np.mean([m.freed for m in mine])), 1) if mine else 0.0,
        }
    return out
