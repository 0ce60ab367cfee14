"""List scheduling: a job order in, a valid plan out, compiled.

The learned planner's action space (``docs/learned-mode.md``). A decision names
the next job of the queue; the rules place it. :func:`decode` runs whole
orders, many at once, in one compiled call (numba; plain Python when numba is
off, ``GPUALLOC_NUMBA=0``): no Python per decision.

Placement is greedy's sweep (:mod:`agents.greedy`, the reference the tests hold
this to, placement by placement):

* The real-time curves start demand-following (:func:`gpu_env.objective.realtime_curves`
  of the demand next to the inherited work), as in greedy.
* Each job takes its **earliest feasible start** (decay makes early slots worth
  more) on the **lowest-index free block** that rule 4 allows, in the capacity
  the curves leave (rule 7).
* **Trades.** A job may take real-time capacity instead: the starts where its
  block is free with the curves at their ramp floors are bounded (its value
  less the least penalty of the GPUs it would take beyond the slack and the
  curves' excess over demand), the best ``trade_candidates`` are evaluated
  exactly (curves recomputed with the job's load as a cap), and the best trade
  wins when it beats the start without one.
* A candidate's **mode** says when trades happen: :data:`MODE_OFF` never,
  :data:`MODE_INLINE` as each job comes, :data:`MODE_AFTER` once every job had
  its turn without trading, for the jobs left out, most valuable first.

Jobs are named by their index in ``scenario.jobs``; inherited jobs are placed
before the first decision and are ignored in an order. A job that fits nowhere
is skipped: its decision places nothing (the environment's mask forbids a job
with no start above the real-time ramp floors; one whose only starts take
real-time capacity may still place nothing, by its mode and the trade rule).

>>> from gpu_env.generators import generate
>>> sc = generate("mixed-control", seed=0)
>>> inst = ListInstance.build(sc)
>>> order = np.argsort([-job.weight for job in sc.jobs], kind="stable")
>>> result = decode(inst, order[None, :], np.array([MODE_INLINE]))
>>> plan = result.plan(0, sc, "example")
>>> from gpu_env.validation import validate
>>> validate(sc, plan)
[]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

# The compiled rules (njit: compiled, or the plain-Python stand-in with GPUALLOC_NUMBA=0): blocks, capacity and the
# real-time step, compiled once for the decoder and the batched engine alike.
from gpu_env import placement, rules
from gpu_env.objective import (
    peak_reservation,
    ramp_floors,
    realtime_curves,
    serving_order,
    shortfall_penalty,
    start_values,
)
from gpu_env.placement import (
    BLOCK_BEST_FIT,
    BLOCK_FEATURES,
    BLOCK_HIGHEST,
    BLOCK_LEARNED,
    BLOCK_LOWEST,
    BLOCK_NODE_FIT,
    njit,
)
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import Scenario

MODE_OFF = 0
MODE_INLINE = 1
MODE_AFTER = 2
MODES = {"off": MODE_OFF, "inline": MODE_INLINE, "after": MODE_AFTER}

TRADE_CANDIDATES = 8
"""Starts per job whose trade is evaluated exactly (greedy's ``trade_candidates``)."""
PROMOTE_LIMIT = 4
"""Promotions tried per round (greedy's ``promote_limit``)."""

BLOCK_RULES = {"lowest": BLOCK_LOWEST, "best_fit": BLOCK_BEST_FIT, "node_fit": BLOCK_NODE_FIT, "highest": BLOCK_HIGHEST}
"""Which free block a turn takes: the lowest-index one, the one with the largest touching perimeter (busy cells and
edges around it), the one in the node(s) busiest over the job's span (keeping emptier nodes whole), or the
highest-index one (packing from the other end of the cluster)."""
START_RULES = ("earliest", "packed")
"""Which start a turn takes: the earliest feasible one (the most valuable), or, ``packed``, among the first
:data:`PACK_ROWS` feasible starts worth at least ``1 - pack_tolerance`` of the earliest's value, the one whose
best-fit block touches most."""
PACK_TOLERANCE = 0.03
"""Fraction of a job's value the ``packed`` start rule may give up for a better fit (greedy's ``pack_tolerance``)."""


class Choice(NamedTuple):
    """How a turn chooses among the starts and blocks the rules allow (built by :func:`choice`).

    Attributes:
        trade_candidates: Starts per job whose trade is evaluated exactly.
        block_rule: A value of :data:`BLOCK_RULES`.
        packed: The ``packed`` start rule (else ``earliest``).
        pack_tolerance: Fraction of the value the ``packed`` rule may give up.
        prefer: (n,) preferred first GPU of each job, -1 for none; empty when no job has one. A job takes its
            preferred block wherever the rules allow it and it is free at the start the turn chose; elsewhere the
            allowed free block nearest it (:func:`gpu_env.placement.preferred_block`).
        rules: (n,) each job's block rule (a value of :data:`BLOCK_RULES`, or :data:`BLOCK_LEARNED`), replacing
            ``block_rule`` (the ``packed`` start rule picks its own best-fit block at the earliest start); empty
            when every job follows ``block_rule``.
        weights: (len(BLOCK_FEATURES),) the learned block rule's weights
            (:func:`gpu_env.placement.learned_block`); empty without them (the rule then takes the lowest block).
    """

    trade_candidates: np.int64
    block_rule: np.int64
    packed: np.bool_
    pack_tolerance: np.float64
    prefer: np.ndarray
    rules: np.ndarray
    weights: np.ndarray


_NO_RULES = np.zeros(0, dtype=np.int64)
_NO_WEIGHTS = np.zeros(0, dtype=np.float64)


def choice(
    trade_candidates: int = TRADE_CANDIDATES,
    block_rule: str = "lowest",
    start_rule: str = "earliest",
    pack_tolerance: float = PACK_TOLERANCE,
    prefer: np.ndarray | None = None,
    weights: np.ndarray | None = None,
) -> Choice:
    """A :class:`Choice` with the types the compiled code reads (one specialisation for every choice).

    Raises:
        ValueError: An unknown block or start rule, fewer than one trade candidate, or ``prefer`` not 1-D.
    """
    if block_rule not in BLOCK_RULES:
        raise ValueError(f"block_rule: expected one of {', '.join(BLOCK_RULES)}, got {block_rule!r}")
    if start_rule not in START_RULES:
        raise ValueError(f"start_rule: expected one of {', '.join(START_RULES)}, got {start_rule!r}")
    if trade_candidates < 1:
        raise ValueError(f"trade_candidates must be positive, got {trade_candidates}")
    wanted = np.ascontiguousarray(np.zeros(0) if prefer is None else prefer, dtype=np.int64)
    if wanted.ndim != 1:
        raise ValueError(f"prefer must be one first GPU per job, (n,), got shape {wanted.shape}")
    return Choice(
        np.int64(trade_candidates),
        np.int64(BLOCK_RULES[block_rule]),
        np.bool_(start_rule == "packed"),
        np.float64(pack_tolerance),
        wanted,
        _NO_RULES,
        _block_weights(weights),
    )


def _block_weights(weights: np.ndarray | None) -> np.ndarray:
    if weights is None:
        return _NO_WEIGHTS
    w = np.ascontiguousarray(weights, dtype=np.float64)
    if w.shape != (len(BLOCK_FEATURES),) or not np.isfinite(w).all():
        raise ValueError(f"block weights must be {len(BLOCK_FEATURES)} finite numbers (BLOCK_FEATURES), got {w}")
    return w


CHOICE = choice()
"""The decoder's default: earliest start, lowest block, :data:`TRADE_CANDIDATES`."""

_EPS = 1e-9
_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


class ListInstance(NamedTuple):
    """One scenario as the arrays the compiled decoder reads (built once per scenario).

    ``n`` jobs (every job of the scenario, file order), ``A`` apps, ``T`` slots,
    ``W = T + longest duration`` grid columns, ``NW`` 64-GPU words. The apps' arrays keep a leading
    episode axis of 1: the compiled real-time step reads them as one episode's
    (:class:`gpu_env.placement.RealtimeView`).
    """

    gpus: int
    slots: int
    node_size: int
    k: np.ndarray  # (n,) int64 GPUs
    d: np.ndarray  # (n,) int64 duration
    lo: np.ndarray  # (n,) int64 first allowed start (rules 3 and 5)
    hi: np.ndarray  # (n,) int64 one past the last allowed start (lo == hi: none)
    pending: np.ndarray  # (n,) bool: not inherited
    held_first: np.ndarray  # (n,) int64 first GPU of an inherited job, -1 for the others
    values: np.ndarray  # (n, T + 1) float64 value by start
    first_value: np.ndarray  # (n,) float64 value at the window's first start (0 without a window)
    block_pattern: np.ndarray  # (n,) uint64: bit a set when a block of k may start at a % 64 (k <= node_size)
    demand: np.ndarray  # (1, A, T) int64
    initial: np.ndarray  # (1, A) int64
    ramp: np.ndarray  # (1, A) int64
    order: np.ndarray  # (1, A) int64 serving order
    floors: np.ndarray  # (1, A, T) int64 ramp floors
    floor_total: np.ndarray  # (T,) int64
    penalty: np.ndarray  # (1, A) float64
    min_penalty: float  # least penalty of an app (inf without apps)
    gpus_arr: np.ndarray  # (1,) int64
    slots_arr: np.ndarray  # (1,) int64
    busy: np.ndarray  # (W, NW) uint64 inherited work
    load: np.ndarray  # (T,) int64 inherited load
    curves: np.ndarray  # (A, T) int64 demand-following curves next to the inherited work
    penalty0: float  # their penalty
    value0: float  # value of the inherited work

    @classmethod
    def build(cls, scenario: Scenario) -> ListInstance:
        """The arrays of a scenario, with its inherited work placed (rules 1 and 5)."""
        sc = scenario
        G, T, ns = sc.gpus, sc.slots, sc.node_size
        jobs = sc.jobs
        n = len(jobs)
        k = np.array([job.gpus for job in jobs], dtype=np.int64)
        d = np.array([job.duration for job in jobs], dtype=np.int64)
        windows = [rules.start_window(job, T) for job in jobs]
        lo = np.array([w.start for w in windows], dtype=np.int64)
        hi = np.array([max(w.start, w.stop) for w in windows], dtype=np.int64)
        pending = np.array([job.running_on is None for job in jobs], dtype=np.bool_)
        values = start_values(sc)
        first_value = np.where(hi > lo, values[np.arange(n), np.minimum(lo, T)], 0.0).astype(np.float64)
        pattern = np.array([placement.block_pattern(int(x), ns) for x in k], dtype=np.uint64)
        W = T + int(d.max(initial=0))
        busy = np.zeros((max(W, 1), (G + 63) // 64), dtype=np.uint64)
        load = rules.inherited_load(sc)
        held = np.flatnonzero(~pending)
        for i in held:
            placement.mark(busy, 0, int(d[i]), int(jobs[i].running_on[0]), int(k[i]))
        value0 = float(values[held, 0].sum()) if held.size else 0.0
        apps = sc.apps
        A = len(apps)
        demand = np.asarray(sc.demand, dtype=np.int64).reshape(A, T)
        floors = ramp_floors(sc).reshape(A, T)
        order = serving_order(apps).astype(np.int64)
        penalty = np.array([app.penalty for app in apps], dtype=np.float64)
        curves = realtime_curves(demand, apps, order, floors, G, load).astype(np.int64).reshape(A, T)
        return cls(
            gpus=G,
            slots=T,
            node_size=ns,
            k=k,
            d=d,
            lo=lo,
            hi=hi,
            pending=pending,
            held_first=np.array([-1 if job.running_on is None else job.running_on[0] for job in jobs], dtype=np.int64),
            values=values,
            first_value=first_value,
            block_pattern=pattern,
            demand=demand[None],
            initial=np.array([[app.initial for app in apps]], dtype=np.int64).reshape(1, A),
            ramp=np.array([[app.ramp for app in apps]], dtype=np.int64).reshape(1, A),
            order=order.reshape(1, A),
            floors=floors[None],
            floor_total=floors.sum(axis=0).astype(np.int64),
            penalty=penalty.reshape(1, A),
            min_penalty=float(penalty.min()) if A else float("inf"),
            gpus_arr=np.array([G], dtype=np.int64),
            slots_arr=np.array([T], dtype=np.int64),
            busy=busy,
            load=load,
            curves=curves,
            penalty0=shortfall_penalty(curves, demand, penalty),
            value0=value0,
        )


@dataclass(frozen=True)
class Decoded:
    """What :func:`decode` returns for K candidates.

    Attributes:
        objective: (K,) job value minus real-time penalty of each candidate's plan (SPEC section 3).
        start: (K, n) start of each job, -1 when unplaced (inherited jobs: 0).
        first: (K, n) first GPU of each job's block, -1 when unplaced.
        curves: (K, A, T) real-time curves.
        promotions: Promotions that improved a group's best candidate (its row holds the improved plan).
        chosen: The best candidate after promotion by :func:`decode`'s margin (-1 without candidates).
        promotion_decodes: Orders promotion decoded (improving or not).
        promoted: (K,) promotions kept on each candidate (only groups' best candidates have any).
    """

    objective: np.ndarray
    start: np.ndarray
    first: np.ndarray
    curves: np.ndarray
    promotions: int = 0
    chosen: int = -1
    promotion_decodes: int = 0
    promoted: np.ndarray | None = None

    @property
    def best(self) -> int:
        """Index of the most valuable candidate (the first of equals)."""
        return int(np.argmax(self.objective))

    def plan(self, i: int, scenario: Scenario, scheduler: str) -> Plan:
        """Candidate i as a plan (metrics not filled)."""
        placements = []
        for j, job in enumerate(scenario.jobs):
            t, a = int(self.start[i, j]), int(self.first[i, j])
            if t >= 0:
                placements.append(Placement(job.id, t, tuple(range(a, a + job.gpus))))
        curves = {app.name: [int(x) for x in self.curves[i, a]] for a, app in enumerate(scenario.apps)}
        return Plan(scenario.name, scheduler, placements, curves)


def rules_from_plan(
    inst: ListInstance, order: np.ndarray, placements: np.ndarray, offered: tuple[str, ...] = tuple(BLOCK_RULES)
) -> np.ndarray:
    """The block rule per job that chooses a plan's blocks: the labels a policy's block choice learns from.

    The plan's jobs are placed in ``order`` (each on the GPUs the plan gives it, the jobs before it in place); each
    takes the first rule of ``offered`` whose block at the plan's start is the plan's block, or the first rule
    when none is.

    Args:
        inst: The scenario's arrays.
        order: (m,) the jobs in turn order (:func:`lab.training.training.order_from_plan`).
        placements: (p, 3) rows of (job index, start, first GPU) of the placed non-inherited jobs.
        offered: The rules to choose among (names of :data:`BLOCK_RULES`).

    Returns:
        (n,) a value of :data:`BLOCK_RULES` per job (the first offered rule for the jobs the plan leaves out).

    Raises:
        ValueError: No rule offered, an unknown one, or a placed job missing from ``order``.
    """
    if not offered or any(r not in BLOCK_RULES for r in offered):
        raise ValueError(f"offered: expected one or more of {', '.join(BLOCK_RULES)}, got {offered!r}")
    codes = [BLOCK_RULES[r] for r in offered]
    out = np.full(inst.k.size, codes[0], dtype=np.int64)
    placed = {int(j): (int(t), int(a)) for j, t, a in np.asarray(placements, dtype=np.int64).reshape(-1, 3)}
    missing = sorted(set(placed) - {int(j) for j in order})
    if missing:
        raise ValueError(f"placed jobs missing from the order: {missing}")
    busy = inst.busy.copy()
    span = np.zeros(busy.shape[1], dtype=np.uint64)
    for j in map(int, order):
        if j not in placed:
            continue
        t, a = placed[j]
        for code in codes:
            if placement.pick_block(inst, j, t, busy, code, span)[0] == a:
                out[j] = code
                break
        placement.mark(busy, t, int(inst.d[j]), a, int(inst.k[j]))
    return out


def fifo_replay(scenario: Scenario, inst: ListInstance) -> Decoded:
    """FIFO's plan (SPEC section 4, :func:`agents.fifo.plan`) by the decoder, in one compiled call.

    FIFO reserves real-time capacity at each app's daily peak (:func:`gpu_env.objective.peak_reservation`), then
    places the jobs in arrival order (release, then file position) at their earliest start on the lowest
    free block, without trades: the decoder's ``MODE_OFF`` on an instance whose curves are the reservation.
    """
    A, T = inst.curves.shape
    curves = peak_reservation(scenario).astype(np.int64).reshape(A, T)
    penalty = shortfall_penalty(curves, inst.demand[0], inst.penalty[0])
    reserved = inst._replace(curves=curves, penalty0=penalty)
    pending = np.flatnonzero(inst.pending)
    release = np.array([scenario.jobs[j].release for j in pending], dtype=np.int64)
    order = pending[np.lexsort((pending, release))]
    return decode(reserved, order[None, :], np.array([MODE_OFF]))


@dataclass(frozen=True)
class CompileStats:
    """What numba did in this process for the decoder's entry point (the compiled call :func:`decode` makes).

    numba compiles the decoder on first use and writes it to its disk cache (``__pycache__`` beside this file,
    or ``NUMBA_CACHE_DIR``); a later process with the same source, numba and CPU loads it from there.

    Attributes:
        compiled: Whether numba is on (off with ``GPUALLOC_NUMBA=0``: plain Python, nothing to compile).
        cache_dir: Where the compiled code is cached (None with numba off).
        loaded: Specialisations loaded from the disk cache in this process.
        built: Specialisations compiled in this process (and written to the cache).
    """

    compiled: bool
    cache_dir: str | None
    loaded: int
    built: int

    def describe(self) -> str:
        """One line for people: compiled, loaded from the cache, or not yet used."""
        if not self.compiled:
            return "numba is off (GPUALLOC_NUMBA=0): the decoder runs as plain Python, nothing to compile"
        if self.built:
            return f"the decoder was compiled and cached in {self.cache_dir}; later processes load it from there"
        if self.loaded:
            return f"the decoder was loaded from numba's cache in {self.cache_dir} (nothing to compile)"
        return f"the decoder has not run in this process (numba's cache: {self.cache_dir})"


def compile_stats() -> CompileStats:
    """The decoder's :class:`CompileStats` in this process (numba's dispatcher statistics)."""
    stats = getattr(_decode_all, "stats", None)
    if stats is None:  # GPUALLOC_NUMBA=0: a plain function
        return CompileStats(False, None, 0, 0)
    return CompileStats(True, stats.cache_path, sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))


def _checked_rules(rules: np.ndarray | None, K: int, n: int, block_weights: np.ndarray | None) -> np.ndarray:
    """:func:`decode`'s ``rules`` as (K, n) int64 block-rule codes, (K, 0) when None; ``ValueError`` if malformed."""
    if rules is None:
        return np.zeros((K, 0), dtype=np.int64)
    given = np.asarray(rules)
    if given.size and not np.issubdtype(given.dtype, np.integer):
        raise ValueError(f"rules must be integers (block rule codes), got dtype {given.dtype}")
    per_job = np.ascontiguousarray(given, dtype=np.int64)
    if per_job.shape != (K, n):
        raise ValueError(f"rules must be one block rule per candidate and job, ({K}, {n}), got {per_job.shape}")
    if per_job.size and (per_job.min() < 0 or per_job.max() > BLOCK_LEARNED):
        raise ValueError(
            f"rules must be among {sorted(BLOCK_RULES.values())} ({', '.join(BLOCK_RULES)}) "
            f"or {BLOCK_LEARNED} (learned)"
        )
    if block_weights is None and (per_job == BLOCK_LEARNED).any():
        raise ValueError("rules name the learned block rule but no block_weights are given")
    return per_job


def _checked_seed(seed: tuple[np.ndarray, np.ndarray] | None, K: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`decode`'s ``seed`` as (start, first) int64 arrays, both empty when None; ``ValueError`` if malformed."""
    if seed is None:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    seed_start, seed_first = (np.ascontiguousarray(x, dtype=np.int64) for x in seed)
    if seed_start.shape != (n,) or seed_first.shape != (n,) or K == 0:
        raise ValueError(f"a seed is (start, first) of shape ({n},) each, for the last of at least one order")
    return seed_start, seed_first


def _checked_groups(groups: np.ndarray | None, K: int) -> np.ndarray:
    """:func:`decode`'s ``groups`` as (K,) int64 promotion groups, all 0 when None; ``ValueError`` if malformed."""
    if groups is None:
        return np.zeros(K, dtype=np.int64)
    given = np.asarray(groups)
    if given.size and not np.issubdtype(given.dtype, np.integer):
        raise ValueError(f"groups must be integers (promotion groups), got dtype {given.dtype}")
    group_of = np.ascontiguousarray(given, dtype=np.int64)
    if group_of.shape != (K,):
        raise ValueError(f"groups must be one promotion group per candidate, ({K},), got {group_of.shape}")
    if group_of.size and (group_of.min() < 0 or group_of.max() >= K):
        raise ValueError(f"groups must be among 0..{K - 1}")
    return group_of


def decode(
    inst: ListInstance,
    orders: np.ndarray,
    modes: np.ndarray,
    trade_candidates: int = TRADE_CANDIDATES,
    promote_rounds: int = 0,
    promote_limit: int = PROMOTE_LIMIT,
    *,
    block_rule: str = "lowest",
    start_rule: str = "earliest",
    pack_tolerance: float = PACK_TOLERANCE,
    seed: tuple[np.ndarray, np.ndarray] | None = None,
    margin: float = 0.0,
    prefer: np.ndarray | None = None,
    rules: np.ndarray | None = None,
    block_weights: np.ndarray | None = None,
    groups: np.ndarray | None = None,
) -> Decoded:
    """Decode K job orders into K plans, in one compiled call.

    The best candidate is the first whose objective exceeds every earlier one's by more than ``margin``. With
    ``promote_rounds``, candidates are then improved as greedy improves its best sweep: each of the ``promote_limit``
    most valuable jobs a plan left out is moved, one at a time, to the front of its order and the order decoded again;
    an improvement (by more than 1e-9) is kept (and replaces that candidate's plan in the result), and a round that
    improves nothing ends the pass.

    Promotion works on the best candidate of each of ``groups`` (by the same margin rule), and the best after it
    wins. A group's promoted plan is the one its candidates alone would give, so adding a group of candidates
    never gives a worse plan: the learned planner puts its argmax order in a group of its own, so that its sampled
    orders can only add to what that order alone earns (``docs/learned-mode.md``).

    Args:
        inst: The scenario's arrays (:meth:`ListInstance.build`).
        orders: (K, m) job indices; each row lists jobs in the order they are placed (-1 pads a row;
            inherited jobs and repeats are ignored; jobs missing from a row stay unplaced).
        modes: (K,) trade mode of each candidate (:data:`MODES`); without apps every mode is off.
        trade_candidates: Starts per job whose trade is evaluated exactly.
        promote_rounds: Rounds of promotion on the best candidate (0: none).
        promote_limit: Promotions tried per round.
        block_rule: Which free block a turn takes (:data:`BLOCK_RULES`).
        start_rule: Which feasible start a turn takes (:data:`START_RULES`).
        pack_tolerance: Fraction of a job's value the ``packed`` start rule may give up.
        seed: (start, first GPU) of each job, -1 for none, shape (n,) each: the last candidate takes these
            placements (in its order) instead of choosing, then the jobs it left out take a turn without trading
            and one more with (most valuable first); its mode is the one promotion decodes it in. A seed that does
            not fit (cells taken twice, or capacity short of the curves) gives that candidate the objective -inf.
        margin: How much more a candidate must be worth than the best before it to replace it.
        prefer: (n,) a preferred first GPU per job, -1 for none (every candidate's): a job takes that block where
            the rules allow it and it is free at the start its turn chose, else the allowed free block nearest it.
            Out-of-range values are refused.
        rules: (K, n) integers, each candidate's block rule per job (values of :data:`BLOCK_RULES`, or
            :data:`BLOCK_LEARNED`), replacing ``block_rule``; promotion keeps the best candidate's.
        block_weights: The learned block rule's weights (:data:`gpu_env.placement.BLOCK_FEATURES`), required by
            (and only read for) the jobs whose rule is :data:`BLOCK_LEARNED`.
        groups: (K,) integers from 0, the promotion group of each candidate (default: one group, promotion on the
            best candidate only).

    Returns:
        The K plans' placements, curves and objectives.
    """
    if prefer is not None:
        prefer = np.asarray(prefer)
        if prefer.shape != (inst.k.size,):
            raise ValueError(f"prefer must be one first GPU per job, ({inst.k.size},), got shape {prefer.shape}")
        if prefer.size and (prefer.min() < -1 or prefer.max() >= inst.gpus):
            raise ValueError(f"prefer names GPUs outside -1..{inst.gpus - 1}")
    how = choice(trade_candidates, block_rule, start_rule, pack_tolerance, prefer, block_weights)
    orders = np.ascontiguousarray(orders, dtype=np.int64)
    modes = np.ascontiguousarray(modes, dtype=np.int64)
    if orders.ndim != 2 or modes.shape != (orders.shape[0],):
        raise ValueError(f"orders must be (K, m) and modes (K,), got {orders.shape} and {modes.shape}")
    if modes.size and (modes.min() < 0 or modes.max() > MODE_AFTER):
        raise ValueError(
            f"modes must be among {sorted(MODES.values())} ({', '.join(MODES)}), got {sorted(set(modes.tolist()))}"
        )
    if orders.size and (orders.max() >= inst.k.size or orders.min() < -1):
        raise ValueError(f"orders name jobs outside 0..{inst.k.size - 1}")
    K, n = orders.shape[0], inst.k.size
    per_job = _checked_rules(rules, K, n, block_weights)
    seed_start, seed_first = _checked_seed(seed, K, n)
    group_of = _checked_groups(groups, K)
    A, T = inst.curves.shape
    objective = np.zeros(K, dtype=np.float64)
    start = np.full((K, n), -1, dtype=np.int64)
    first = np.full((K, n), -1, dtype=np.int64)
    curves = np.zeros((K, A, T), dtype=np.int64)
    counts = np.zeros(3, dtype=np.int64)
    promoted = np.zeros(K, dtype=np.int64)
    _decode_all(
        inst,
        orders,
        modes,
        how,
        per_job,
        group_of,
        int(promote_rounds),
        int(promote_limit),
        seed_start,
        seed_first,
        float(margin),
        objective,
        start,
        first,
        curves,
        counts,
        promoted,
    )
    return Decoded(objective, start, first, curves, int(counts[0]), int(counts[1]), int(counts[2]), promoted)


# ----------------------------------------------------------------------------- compiled


@njit(cache=True, nogil=True, inline="always")
def _copy(dst: np.ndarray, src: np.ndarray) -> None:  # pragma: no cover - compiled
    """``dst[...] = src`` for two C-contiguous arrays of one size, as a loop.

    numba's broadcasting assignment compiles a formatted shape-error message per statement, which cost
    more compile time than the decoder's own loops.
    """
    d = dst.reshape(dst.size)
    s = src.reshape(src.size)
    for i in range(d.size):
        d[i] = s[i]


class Scratch(NamedTuple):
    """The compiled turn's work space (:func:`new_scratch`), reused by every turn of an episode."""

    span: np.ndarray  # (NW,) uint64
    room: np.ndarray  # (T,) int64 slack
    floor_room: np.ndarray  # (T,) int64 capacity above the ramp floors
    need: np.ndarray  # (T + 1,) int64
    bound: np.ndarray  # (T,) float64
    rows: np.ndarray  # (T,) int64
    trial_load: np.ndarray  # (1, T) int64
    trial: np.ndarray  # (1, A, T) int64
    best_curves: np.ndarray  # (1, A, T) int64
    cost: np.ndarray  # (1,) float64
    work: np.ndarray  # (4, T) int64


@njit(cache=True, nogil=True, inline="always")
def _set_room(
    inst: ListInstance, load: np.ndarray, curves: np.ndarray, sc: Scratch, excess: np.ndarray
) -> None:  # pragma: no cover
    """Slack, capacity above the floors and the curves' excess over demand and floor, per slot."""
    A, T = curves.shape
    for t in range(T):
        total = 0
        ex = 0
        for a in range(A):
            c = curves[a, t]
            total += c
            keep = max(inst.demand[0, a, t], inst.floors[0, a, t])
            if c > keep:
                ex += c - keep
        sc.room[t] = placement.free_capacity(inst.gpus, load[t], total)
        sc.floor_room[t] = placement.free_capacity(inst.gpus, load[t], inst.floor_total[t])
        excess[t] = ex


@njit(cache=True, nogil=True)
def _decide(
    inst: ListInstance,
    j: int,
    trade: bool,
    busy: np.ndarray,
    load: np.ndarray,
    penalty: float,
    excess: np.ndarray,
    choice: Choice,
    sc: Scratch,
) -> tuple:  # pragma: no cover - compiled
    """Job j's decision: (start, first GPU, traded, new penalty); start -1 when it stays unplaced.

    After a trade the new curves are in ``sc.best_curves[0]``.
    """
    T = inst.slots
    k, d = inst.k[j], inst.d[j]
    rule = choice.rules[j] if choice.rules.size else choice.block_rule
    t0, a0 = placement.earliest(inst, j, busy, sc.room, sc.span)
    if t0 >= 0 and choice.packed:
        t0, a0 = placement.packed_start(inst, j, t0, a0, busy, choice.pack_tolerance, sc.room, sc.span)
    elif t0 >= 0 and rule == BLOCK_LEARNED:
        a0 = placement.learned_block(inst, j, t0, busy, choice.weights, sc.span)
    elif t0 >= 0 and rule != BLOCK_LOWEST:
        a0, _ = placement.pick_block(inst, j, t0, busy, rule, sc.span)
    if t0 >= 0 and choice.prefer.size:
        a0 = placement.preferred_block(inst, j, t0, a0, choice.prefer[j], busy)
    base = inst.values[j, t0] if t0 >= 0 else 0.0
    if not trade or not (inst.first_value[j] > base + inst.min_penalty):
        return t0, a0, False, penalty
    # A cheap bound on each start: its value less the least penalty of the GPUs beyond slack and excess.
    sc.need[0] = 0
    for t in range(T):
        sc.need[t + 1] = sc.need[t] + max(0, k - sc.room[t] - excess[t])
    n_rows = 0
    for t in range(inst.lo[j], inst.hi[j]):
        b = inst.values[j, t] - inst.min_penalty * (sc.need[min(t + d, T)] - sc.need[t])
        if (
            b > base + _EPS
            and placement.fits(k, t, d, T, sc.floor_room)
            and placement.find_block(inst, j, t, busy, sc.span) >= 0
        ):
            sc.rows[n_rows] = t
            sc.bound[n_rows] = b
            n_rows += 1
    if n_rows == 0:
        return t0, a0, False, penalty
    # The best few by bound, largest first (ties: earlier start), evaluated exactly.
    best_gain = 0.0
    best_t = np.int64(-1)  # not the literal -1: find_block below would be compiled for Literal[int](-1) too
    best_penalty = penalty
    for _ in range(min(choice.trade_candidates, n_rows)):
        r = -1
        for i in range(n_rows):
            if sc.rows[i] >= 0 and (r < 0 or sc.bound[i] > sc.bound[r]):
                r = i
        t = sc.rows[r]
        sc.rows[r] = -1
        if best_t >= 0 and sc.bound[r] <= best_gain + _EPS:
            break
        for s in range(T):
            sc.trial_load[0, s] = load[s]
        for s in range(t, min(t + d, T)):
            sc.trial_load[0, s] += k
        view = placement.RealtimeView(
            inst.demand,
            sc.trial,
            inst.demand,
            inst.floors,
            inst.gpus_arr,
            inst.initial,
            sc.trial_load,
            inst.order,
            inst.penalty,
            inst.ramp,
            sc.cost,
            inst.slots_arr,
        )
        placement.realtime_one(view, 0, sc.work)
        new_penalty = sc.cost[0]
        gain = inst.values[j, t] - (new_penalty - penalty)
        if gain > base + _EPS and (best_t < 0 or gain > best_gain + _EPS):
            best_gain = gain
            best_t = t
            best_penalty = new_penalty
            _copy(sc.best_curves, sc.trial)
    if best_t < 0:
        return t0, a0, False, penalty
    if rule == BLOCK_LEARNED:
        a = placement.learned_block(inst, j, best_t, busy, choice.weights, sc.span)
    else:
        a, _ = placement.pick_block(inst, j, best_t, busy, rule, sc.span)
    if choice.prefer.size:
        a = placement.preferred_block(inst, j, best_t, a, choice.prefer[j], busy)
    return best_t, a, True, best_penalty


@njit(cache=True, nogil=True, inline="always")
def _place(inst: ListInstance, j: int, t: int, a: int, busy: np.ndarray, load: np.ndarray) -> None:  # pragma: no cover
    k, d = inst.k[j], inst.d[j]
    placement.mark(busy, t, d, a, k)
    for s in range(t, min(t + d, inst.slots)):
        load[s] += k


class Live(NamedTuple):
    """The state of one list-scheduling episode (the compiled step reads and writes it in place).

    Attributes:
        busy: (W, NW) uint64 busy GPUs per grid column.
        load: (T,) GPUs held by jobs.
        curves: (A, T) real-time curves.
        money: (2,) float64: job value, real-time penalty (the objective is their difference).
        excess: (T,) GPUs the curves hold above demand and ramp floor.
        start: (n,) start of each job, -1 while unplaced.
        first: (n,) first GPU of each job, -1 while unplaced.
        decided: (n,) whether each job had its turn (or is inherited).
        left: (n,) the jobs whose turn placed nothing, in turn order (the first ``count[0]``).
        count: (1,) int64 how many ``left`` holds.
    """

    busy: np.ndarray
    load: np.ndarray
    curves: np.ndarray
    money: np.ndarray
    excess: np.ndarray
    start: np.ndarray
    first: np.ndarray
    decided: np.ndarray
    left: np.ndarray
    count: np.ndarray


def new_live(inst: ListInstance) -> Live:
    """The state before the first decision: inherited work placed, demand-following curves."""
    n = inst.k.size
    live = Live(
        busy=inst.busy.copy(),
        load=inst.load.copy(),
        curves=inst.curves.copy(),
        money=np.array([inst.value0, inst.penalty0], dtype=np.float64),
        excess=np.zeros(inst.slots, dtype=np.int64),
        start=np.where(inst.pending, -1, 0).astype(np.int64),
        first=inst.held_first.copy(),
        decided=~inst.pending,
        left=np.zeros(n, dtype=np.int64),
        count=np.zeros(1, dtype=np.int64),
    )
    return live


@njit(cache=True, nogil=True)
def new_scratch(inst: ListInstance) -> Scratch:  # pragma: no cover - compiled
    """A :class:`Scratch` sized for an instance."""
    A, T = inst.curves.shape
    nw = inst.busy.shape[1]
    return Scratch(
        np.zeros(nw, dtype=np.uint64),
        np.zeros(T, dtype=np.int64),
        np.zeros(T, dtype=np.int64),
        np.zeros(T + 1, dtype=np.int64),
        np.zeros(max(T, 1), dtype=np.float64),
        np.zeros(max(T, 1), dtype=np.int64),
        np.zeros((1, T), dtype=np.int64),
        np.zeros((1, A, T), dtype=np.int64),
        np.zeros((1, A, T), dtype=np.int64),
        np.zeros(1, dtype=np.float64),
        np.zeros((4, T), dtype=np.int64),
    )


@njit(cache=True, nogil=True)
def blank_live(inst: ListInstance) -> Live:  # pragma: no cover - compiled
    """A :class:`Live` sized for an instance, its contents unset: a decode resets it before use."""
    n = inst.k.size
    return Live(
        np.empty_like(inst.busy),
        np.empty_like(inst.load),
        np.empty_like(inst.curves),
        np.zeros(2, dtype=np.float64),
        np.zeros(inst.slots, dtype=np.int64),
        np.empty(n, dtype=np.int64),
        np.empty(n, dtype=np.int64),
        np.empty(n, dtype=np.bool_),
        np.zeros(n, dtype=np.int64),
        np.zeros(1, dtype=np.int64),
    )


@njit(cache=True, nogil=True)
def _turn(inst: ListInstance, live: Live, j: int, trade: bool, choice: Choice, sc: Scratch) -> bool:  # pragma: no cover
    """Job j's decision applied to ``live`` (``sc.room`` and ``live.excess`` current); whether it was placed."""
    t, a, traded, new_penalty = _decide(inst, j, trade, live.busy, live.load, live.money[1], live.excess, choice, sc)
    if t < 0:
        return False
    _place(inst, j, t, a, live.busy, live.load)
    live.money[0] += inst.values[j, t]
    live.start[j] = t
    live.first[j] = a
    if traded:
        _copy(live.curves, sc.best_curves[0])
        live.money[1] = new_penalty
    _set_room(inst, live.load, live.curves, sc, live.excess)
    return True


@njit(cache=True, nogil=True)
def _run(
    inst: ListInstance, live: Live, order: np.ndarray, trade: bool, choice: Choice, sc: Scratch
) -> None:  # pragma: no cover - compiled
    """Every job of ``order`` not decided yet takes its turn; jobs that fit nowhere join ``live.left``."""
    _set_room(inst, live.load, live.curves, sc, live.excess)
    for p in range(order.size):
        j = order[p]
        if j < 0 or live.decided[j]:
            continue
        live.decided[j] = True
        if not _turn(inst, live, j, trade, choice, sc):
            live.left[live.count[0]] = j
            live.count[0] += 1


@njit(cache=True, nogil=True)
def _second_turn(
    inst: ListInstance, live: Live, trade: bool, choice: Choice, sc: Scratch
) -> None:  # pragma: no cover - compiled
    """The jobs left out, most valuable first (ties: job index), take another turn (with ``trade``, trading)."""
    left = live.left
    n_left = live.count[0]
    for i in range(1, n_left):
        x = left[i]
        m = i - 1
        while m >= 0 and (
            inst.first_value[left[m]] < inst.first_value[x]
            or (inst.first_value[left[m]] == inst.first_value[x] and left[m] > x)
        ):
            left[m + 1] = left[m]
            m -= 1
        left[m + 1] = x
    _set_room(inst, live.load, live.curves, sc, live.excess)
    kept = 0
    for i in range(n_left):
        j = left[i]
        if not _turn(inst, live, j, trade, choice, sc):
            left[kept] = j
            kept += 1
    live.count[0] = kept


@njit(cache=True, nogil=True)
def take_turn(
    inst: ListInstance, live: Live, j: int, trade: bool, choice: Choice, sc: Scratch
) -> bool:  # pragma: no cover - compiled
    """One decision of the environment: job j takes its turn (``sc``: the work space of :func:`new_scratch`).

    Returns:
        Whether it was placed (False too when it had its turn already).
    """
    if live.decided[j]:
        return False
    one = np.full(1, j, dtype=np.int64)
    before = live.count[0]
    _run(inst, live, one, trade, choice, sc)
    return live.count[0] == before


@njit(cache=True, nogil=True)
def finish_after(inst: ListInstance, live: Live, choice: Choice, sc: Scratch) -> None:  # pragma: no cover - compiled
    """MODE_AFTER's end of an episode: the jobs left out take their second turn, in which they may trade."""
    _second_turn(inst, live, np.bool_(True), choice, sc)  # np.bool_: not a literal, one compile


@njit(cache=True, nogil=True)
def fits_somewhere(inst: ListInstance, live: Live, out: np.ndarray, sc: Scratch) -> None:  # pragma: no cover
    """Whether each job may take its turn: out[j] when job j is undecided and fits somewhere.

    Fits: a start in its window whose block is free and whose capacity above the ramp floors covers
    it (a start the rules allow, taking real-time capacity where needed).
    """
    room = sc.floor_room  # _set_room's definition; every turn recomputes it before use
    for t in range(inst.slots):
        room[t] = placement.free_capacity(inst.gpus, live.load[t], inst.floor_total[t])
    for j in range(inst.k.size):
        out[j] = False
        if live.decided[j]:
            continue
        t, _ = placement.earliest(inst, j, live.busy, room, sc.span)
        out[j] = t >= 0


@njit(cache=True, nogil=True, inline="always")
def _reset(inst: ListInstance, live: Live) -> None:  # pragma: no cover - compiled
    """``live`` back to the state before the first decision (inherited work, demand-following curves)."""
    _copy(live.busy, inst.busy)
    _copy(live.load, inst.load)
    _copy(live.curves, inst.curves)
    live.money[0] = inst.value0
    live.money[1] = inst.penalty0
    live.count[0] = 0
    for j in range(inst.k.size):
        live.decided[j] = not inst.pending[j]
        live.start[j] = -1 if inst.pending[j] else 0
        live.first[j] = inst.held_first[j]


@njit(cache=True, nogil=True)
def _decode_one(
    inst: ListInstance, live: Live, order: np.ndarray, mode: int, choice: Choice, sc: Scratch
) -> float:  # pragma: no cover - compiled
    """Decode one order into ``live`` (reset first); returns the plan's objective."""
    _reset(inst, live)
    if inst.curves.shape[0] == 0:
        mode = 0
    _run(inst, live, order, mode == 1, choice, sc)
    if mode == 2:
        _second_turn(inst, live, np.bool_(True), choice, sc)
    return live.money[0] - live.money[1]


@njit(cache=True, nogil=True)
def _decode_seeded(
    inst: ListInstance,
    live: Live,
    order: np.ndarray,
    seed_start: np.ndarray,
    seed_first: np.ndarray,
    choice: Choice,
    sc: Scratch,
) -> float:  # pragma: no cover - compiled
    """Take a seed's placements (in ``order``), then give the jobs it left out two more turns; the objective.

    -inf when the placements do not fit: a cell taken twice, or less capacity than the curves leave.
    """
    _reset(inst, live)
    for p in range(order.size):
        j = order[p]
        if j < 0 or live.decided[j]:
            continue
        live.decided[j] = True
        t, a = seed_start[j], seed_first[j]
        if t < 0:
            live.left[live.count[0]] = j
            live.count[0] += 1
            continue
        if not placement.block_free(inst, j, t, a, live.busy):
            return -np.inf
        _place(inst, j, t, a, live.busy, live.load)
        live.money[0] += inst.values[j, t]
        live.start[j] = t
        live.first[j] = a
    A, T = live.curves.shape
    for t in range(T):
        used = live.load[t]
        for c in range(A):
            used += live.curves[c, t]
        if used > inst.gpus:
            return -np.inf
    _second_turn(inst, live, np.bool_(False), choice, sc)
    _second_turn(inst, live, np.bool_(True), choice, sc)
    return live.money[0] - live.money[1]


@njit(cache=True, nogil=True, inline="always")
def _with_rules(choice: Choice, rules: np.ndarray) -> Choice:  # pragma: no cover - compiled
    """``choice`` with per-job block rules."""
    c = choice
    return Choice(c.trade_candidates, c.block_rule, c.packed, c.pack_tolerance, c.prefer, rules, c.weights)


@njit(cache=True, nogil=True)
def _promote(
    inst: ListInstance,
    live: Live,
    sc: Scratch,
    order: np.ndarray,
    mode: int,
    choice: Choice,
    best: int,
    promote_rounds: int,
    promote_limit: int,
    objective: np.ndarray,
    start: np.ndarray,
    first: np.ndarray,
    curves_out: np.ndarray,
    counts: np.ndarray,
    promoted: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Greedy's promotion on candidate ``best`` (its order in ``order``, changed in place as promotions are kept).

    The most valuable jobs its plan left out, one at a time, go to the front of its order; an improvement replaces
    that candidate's plan (its row of the outputs). ``counts``: (promotions kept, -, promotion decodes) added to.
    """
    m = order.size
    trial = np.empty(m, dtype=np.int64)
    top = np.empty(max(promote_limit, 1), dtype=np.int64)
    for _ in range(promote_rounds):
        # The unplaced jobs of the best plan, most valuable first (ties: job index), at most promote_limit.
        n_top = 0
        for p in range(m):
            j = order[p]
            if j < 0 or start[best, j] >= 0 or not inst.pending[j]:
                continue
            seen = False
            for i in range(n_top):
                seen = seen or top[i] == j
            if seen:
                continue  # a repeat of the order
            q = n_top if n_top < promote_limit else promote_limit
            while q > 0 and (
                inst.first_value[top[q - 1]] < inst.first_value[j]
                or (inst.first_value[top[q - 1]] == inst.first_value[j] and top[q - 1] > j)
            ):
                if q < promote_limit:
                    top[q] = top[q - 1]
                q -= 1
            if q < promote_limit:
                top[q] = j
                if n_top < promote_limit:
                    n_top += 1
        improved = False
        for i in range(n_top):
            u = top[i]
            if start[best, u] >= 0:
                continue  # placed by an earlier promotion of this round
            trial[0] = u
            w = 1
            for p in range(m):
                if order[p] != u:
                    trial[w] = order[p]
                    w += 1
            trial[w:] = -1  # repeats of u removed with it leave cells to pad
            value = _decode_one(inst, live, trial, mode, choice, sc)
            counts[2] += 1
            if value > objective[best] + _EPS:
                objective[best] = value
                _copy(start[best], live.start)
                _copy(first[best], live.first)
                _copy(curves_out[best], live.curves)
                _copy(order, trial)
                counts[0] += 1
                promoted[best] += 1
                improved = True
        if not improved:
            return


@njit(cache=True, nogil=True)
def _decode_all(
    inst: ListInstance,
    orders: np.ndarray,
    modes: np.ndarray,
    shared: Choice,
    rules: np.ndarray,
    groups: np.ndarray,
    promote_rounds: int,
    promote_limit: int,
    seed_start: np.ndarray,
    seed_first: np.ndarray,
    margin: float,
    objective: np.ndarray,
    start: np.ndarray,
    first: np.ndarray,
    curves_out: np.ndarray,
    counts: np.ndarray,
    promoted: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """:func:`decode`'s compiled body.

    ``counts`` receives (promotions, chosen candidate, promotion decodes), ``promoted`` the promotions kept per
    candidate.
    """
    sc = new_scratch(inst)
    live = blank_live(inst)
    K, m = orders.shape
    n_groups = 1
    for c in range(K):
        n_groups = max(n_groups, groups[c] + 1)
    leader = np.full(n_groups, -1, dtype=np.int64)  # each group's best candidate by the margin rule
    for c in range(K):
        choice = _with_rules(shared, rules[c]) if rules.shape[1] else shared
        if seed_start.size and c == K - 1:
            objective[c] = _decode_seeded(inst, live, orders[c], seed_start, seed_first, choice, sc)
        else:
            objective[c] = _decode_one(inst, live, orders[c], modes[c], choice, sc)
        _copy(start[c], live.start)
        _copy(first[c], live.first)
        _copy(curves_out[c], live.curves)
        g = groups[c]
        if leader[g] < 0 or objective[c] > objective[leader[g]] + margin:
            leader[g] = c
    if promote_rounds > 0:
        # Promotion (greedy's) on each group's leader: a group's promoted plan is what that group alone would give.
        order = np.empty(m, dtype=np.int64)
        for g in range(n_groups):
            c = leader[g]
            if c < 0:
                continue
            _copy(order, orders[c])
            choice = _with_rules(shared, rules[c]) if rules.shape[1] else shared
            _promote(
                inst, live, sc, order, modes[c], choice, c, promote_rounds, promote_limit,
                objective, start, first, curves_out, counts, promoted,
            )  # fmt: skip
    best = -1
    for c in range(K):
        if best < 0 or objective[c] > objective[best] + margin:
            best = c
    counts[1] = best
