"""Actual runtimes: jobs end before their time limit.

A job's ``duration`` in a scenario is the **time limit** its user asked for, in
slots. Its actual runtime is that limit times a ratio in ``(0, 1]``, drawn from
:class:`RuntimeDistribution`. :data:`TRACE_RUNTIMES` is the ratio measured on a
public log that records both the limit and the runtime of every job (the KTH
IBM SP2 log of the Parallel Workloads Archive; ``benchmarks/fit_runtimes.py``
fits it, ``docs/runtimes.md`` gives the source, the figures and the choices).
:func:`draw_runtimes` draws every job's runtime for a simulated day, one
independent draw per job; the planners' view of a job that is still running
is :meth:`RuntimeDistribution.remaining_distribution`. :class:`RuntimeSampler` is what the live
planner asks of a runtime model (``RuntimeDistribution`` is one).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

import numpy as np

from gpu_env.scenario import Scenario

_TOL = 1e-9
"""Slack of the discretisation: ``ratio * limit`` within this of a whole number counts as that number."""


@runtime_checkable
class RuntimeSampler(Protocol):
    """What the live planner asks of a runtime model: draws of a job's runtime, in slots, below its limit.

    :class:`agents.live.anticipate.AnticipatingPlanner` draws, in each sampled future, the remaining
    runtime of every running job (:meth:`sample_remaining`) and the runtime of every queued one
    (:meth:`runtime_slots`). :class:`RuntimeDistribution` implements both.
    """

    def sample_remaining(self, limit: int, elapsed: int, rng: np.random.Generator) -> int:
        """A draw of the slots still to run of a job that has run ``elapsed`` slots and not ended.

        Args:
            limit: The job's time limit in slots (its whole limit, ``elapsed`` included), >= 1.
            elapsed: Slots it has run so far, ``0 <= elapsed < limit``.
            rng: The random source.

        Returns:
            The remaining runtime, in ``1..limit - elapsed``.
        """
        ...

    def runtime_slots(self, limit: int, u: float) -> int:
        """The runtime in whole slots of a job with this limit at probability ``u`` (its quantile).

        Args:
            limit: The time limit in slots, >= 1.
            u: A probability in ``[0, 1]``; a uniform draw gives a draw of the runtime.

        Returns:
            The runtime, in ``1..limit``, non-decreasing in ``u``.
        """
        ...


class RuntimeModel(StrEnum):
    """How a job's actual runtime relates to its time limit."""

    EXACT = "exact"  # every job runs to its limit: runtime = duration
    TRACE = "trace"  # runtime = ratio x limit, the ratio drawn from TRACE_RUNTIMES
    RECORDED = "recorded"  # a recorded day's: each job's ``runtime`` where the record has it, else its limit


@dataclass(frozen=True)
class RuntimeDistribution:
    """The distribution of ``ratio = actual runtime / time limit``, a mixture on ``(0, 1]``.

    With probability ``at_limit`` a job runs to its limit (ratio 1: it is
    killed there, or ends just before). Otherwise its ratio follows the
    continuous part, given by its quantile function at evenly spaced
    probabilities ``0, 1/(n-1), ..., 1`` and linear in between. The whole
    quantile function is therefore ``Q(u) = Qc(u / (1 - at_limit))`` for
    ``u < 1 - at_limit`` and ``Q(u) = 1`` above.

    In slots, a job with limit ``L`` and ratio ``x`` runs ``ceil(x * L)``
    slots, clipped to ``[1, L]``: it holds its GPUs until the end of the slot
    in which it ends (see :meth:`runtime_slots`).

    Attributes:
        at_limit: Share of jobs whose runtime reaches the limit, in ``[0, 1]``.
        quantiles: Quantiles of the ratio among the other jobs, non-decreasing, in
            ``(0, 1]``, at probabilities ``k / (len - 1)``; at least two.
        source: Where the figures come from.
    """

    at_limit: float
    quantiles: tuple[float, ...]
    source: str = ""

    def __post_init__(self) -> None:
        if not (isinstance(self.at_limit, int | float) and 0.0 <= self.at_limit <= 1.0):
            raise ValueError(f"at_limit must be a share in [0, 1], got {self.at_limit!r}")
        q = np.asarray(self.quantiles, dtype=np.float64)
        if q.ndim != 1 or q.size < 2:
            raise ValueError(f"quantiles must hold at least two values, got {len(self.quantiles)}")
        if not (np.isfinite(q).all() and (q > 0).all() and (q <= 1).all()):
            raise ValueError("quantiles must lie in (0, 1]")
        if (np.diff(q) < 0).any():
            raise ValueError("quantiles must be non-decreasing")

    # ------------------------------------------------------------------ the ratio

    @property
    def _grid(self) -> tuple[np.ndarray, np.ndarray]:
        """The continuous part's quantile table: probabilities and values."""
        q = np.asarray(self.quantiles, dtype=np.float64)
        return np.linspace(0.0, 1.0, q.size), q

    def ratio_quantile(self, u: np.ndarray) -> np.ndarray:
        """The ratio's quantile function at probabilities ``u`` in ``[0, 1]`` (same shape).

        Raises:
            ValueError: A ``u`` outside ``[0, 1]``.
        """
        u = np.asarray(u, dtype=np.float64)
        if not ((u >= 0) & (u <= 1)).all():
            raise ValueError("u must lie in [0, 1]")
        below = 1.0 - self.at_limit
        probs, values = self._grid
        if below <= 0.0:
            return np.ones_like(u)
        inner = np.interp(np.minimum(u / below, 1.0), probs, values)
        return np.where(u < below, inner, 1.0)

    def ratio_cdf(self, x: np.ndarray) -> np.ndarray:
        """``P(ratio <= x)``, the inverse of :meth:`ratio_quantile` (right-continuous; same shape as ``x``)."""
        x = np.asarray(x, dtype=np.float64)
        probs, values = self._grid
        # The largest probability whose quantile is <= x: the last table point at or below x, then linear.
        i = np.searchsorted(values, x, side="right") - 1
        inside = (i >= 0) & (i < values.size - 1)
        j = np.clip(i, 0, values.size - 2)
        lo, hi = values[j], values[j + 1]
        step = np.where(hi > lo, hi - lo, 1.0)
        frac = np.where(hi > lo, np.clip((x - lo) / step, 0.0, 1.0), 0.0)
        inner = np.where(inside, probs[j] + frac * (probs[j + 1] - probs[j]), np.where(i < 0, 0.0, 1.0))
        return np.where(x >= 1.0, 1.0, (1.0 - self.at_limit) * inner)

    def mean_ratio(self) -> float:
        """The mean ratio, exact for the piecewise-linear table."""
        _, values = self._grid
        continuous = float(np.mean((values[:-1] + values[1:]) / 2.0))
        return (1.0 - self.at_limit) * continuous + self.at_limit

    def sample_ratio(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` independent ratios, shape ``(n,)``."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return self.ratio_quantile(rng.random(n))

    # ------------------------------------------------------------------ in slots

    def runtime_slots(self, limit: int, u: float) -> int:
        """The actual runtime in whole slots of a job with this limit, at probability ``u``.

        ``ceil(Q(u) * limit)``, clipped to ``[1, limit]``: a job that ends part
        way through a slot holds its GPUs for the whole of that slot, and one
        that runs less than a slot still takes one. A product within 1e-9 of a
        whole number counts as that number (0.28 x 25 is 7 slots, not 8).

        Args:
            limit: The time limit in slots (the job's ``duration``), >= 1.
            u: A probability in ``[0, 1]``; a uniform draw gives a draw of the runtime.

        Raises:
            ValueError: A limit below 1 or a ``u`` outside ``[0, 1]``.
        """
        _check_limit(limit)
        x = float(self.ratio_quantile(np.asarray(u)))
        return min(limit, max(1, math.ceil(x * limit - _TOL)))

    def runtime_distribution(self, limit: int) -> np.ndarray:
        """``P(runtime = r)`` for ``r = 1..limit`` slots, shape ``(limit,)``: the law of :meth:`runtime_slots`."""
        _check_limit(limit)
        r = np.arange(1, limit + 1, dtype=np.float64)
        cdf = self.ratio_cdf((r + _TOL) / limit)
        cdf[-1] = 1.0
        return np.diff(cdf, prepend=0.0).clip(min=0.0)

    def remaining_distribution(self, limit: int, elapsed: int) -> np.ndarray:
        """``P(runtime = r | runtime > elapsed)`` for ``r = elapsed+1..limit``, shape ``(limit - elapsed,)``.

        What a planner knows of a job that has run ``elapsed`` slots and not
        ended: element ``k`` is the probability that it ends after slot
        ``elapsed + 1 + k`` of its run, that is, that ``k + 1`` slots remain.
        It sums to 1. Where the distribution gives the job no chance of still
        running (it has outlived every ratio in the table, possible only when
        ``at_limit`` is 0), the job is taken to run to its limit.

        Args:
            limit: The time limit in slots, >= 1.
            elapsed: Slots it has run so far, ``0 <= elapsed < limit``.

        Raises:
            ValueError: A limit below 1, or ``elapsed`` outside ``[0, limit)``.
        """
        _check_limit(limit)
        if isinstance(elapsed, bool) or not isinstance(elapsed, int | np.integer) or not 0 <= elapsed < limit:
            raise ValueError(f"elapsed must be an integer in [0, limit) = [0, {limit}), got {elapsed!r}")
        tail = self.runtime_distribution(limit)[elapsed:]
        alive = float(tail.sum())
        if alive <= _TOL:
            out = np.zeros(limit - elapsed)
            out[-1] = 1.0
            return out
        return tail / alive

    def sample_remaining(self, limit: int, elapsed: int, rng: np.random.Generator) -> int:
        """A draw of the slots still to run (``1..limit - elapsed``) of a job that has run ``elapsed`` slots.

        Raises:
            ValueError: As :meth:`remaining_distribution`.
        """
        cdf = np.cumsum(self.remaining_distribution(limit, elapsed))
        cdf /= cdf[-1]  # exactly 1 at the end, so that a draw u < 1 always lands on a slot with mass
        return int(np.searchsorted(cdf, rng.random(), side="right")) + 1

    def expected_runtime(self, limit: int) -> float:
        """The mean runtime in slots of a job with this limit (after the discretisation)."""
        p = self.runtime_distribution(limit)
        return float(np.dot(np.arange(1, limit + 1), p))


def _check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int | np.integer) or limit < 1:
        raise ValueError(f"limit must be an integer >= 1, got {limit!r}")


# ----------------------------------------------------------------------------- the shipped table

# Fitted by `python benchmarks/fit_runtimes.py KTH-SP2-1996-2.1-cln.swf` (docs/runtimes.md): the 15,707 jobs of
# the KTH IBM SP2 log (Parallel Workloads Archive, cleaned version 2.1) that ran and asked for at least an hour.
# at_limit: runtime >= 0.99 x requested time; quantiles: of runtime / requested time among the others, every 2 %.
TRACE_RUNTIMES = RuntimeDistribution(
    at_limit=0.220984,
    quantiles=(
        5e-06, 0.000149, 0.000379, 0.000667, 0.001042, 0.001792,
        0.002667, 0.005164, 0.011917, 0.021944, 0.039792, 0.059403,
        0.081083, 0.106681, 0.137139, 0.17163, 0.210752, 0.2511,
        0.287764, 0.333864, 0.368472, 0.406111, 0.44308, 0.475014,
        0.503607, 0.529311, 0.558167, 0.596561, 0.630838, 0.657873,
        0.680167, 0.718319, 0.745662, 0.771673, 0.792444, 0.812113,
        0.816795, 0.836492, 0.849735, 0.863509, 0.8785, 0.8855,
        0.890245, 0.907243, 0.913611, 0.921333, 0.928289, 0.944165,
        0.96625, 0.981667, 0.989928,
    ),
    source=(
        "KTH-SP2-1996-2.1-cln.swf (Parallel Workloads Archive), jobs that ran with a requested time >= 1 h; "
        "at limit: ratio >= 0.99"
    ),
)  # fmt: skip


# ----------------------------------------------------------------------------- one day's draws


def draw_runtimes(
    scenario: Scenario,
    model: RuntimeModel | str,
    seed: int,
    distribution: RuntimeDistribution = TRACE_RUNTIMES,
) -> dict[str, int]:
    """Every job's actual runtime in slots, ``1 <= r <= job.duration``, by job id.

    The ``duration`` of a job is its time limit; for an inherited job
    (``running_on``) it is what remains of its limit, and its actual remaining
    runtime is drawn from the same distribution (the scenario does not say
    how long it has run). Each job's draw comes from its own random stream,
    seeded by ``(seed, id)`` through a stable hash of the id: the same
    ``(scenario, seed)`` gives the same dict, and adding or removing a job
    leaves the other jobs' runtimes unchanged.

    Args:
        scenario: The day.
        model: ``exact`` (every job runs to its limit), ``trace`` (drawn from ``distribution``) or ``recorded``
            (a recorded day's ``runtime`` of each job, its limit where it has none).
        seed: A non-negative integer.
        distribution: The ratio distribution of the ``trace`` model.

    Raises:
        ValueError: An unknown model or a negative seed.
    """
    try:
        kind = RuntimeModel(model)
    except ValueError:
        names = ", ".join(m.value for m in RuntimeModel)
        raise ValueError(f"runtime model must be one of {names}, got {model!r}") from None
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if kind is RuntimeModel.EXACT:
        return {job.id: job.duration for job in scenario.jobs}
    if kind is RuntimeModel.RECORDED:
        return {job.id: job.duration if job.runtime is None else job.runtime for job in scenario.jobs}
    return {job.id: distribution.runtime_slots(job.duration, job_uniform(int(seed), job.id)) for job in scenario.jobs}


def job_uniform(seed: int, job_id: str) -> float:
    """The uniform draw in ``[0, 1)`` of one job: a function of ``(seed, job_id)`` alone, the same on every machine.

    The id is hashed with BLAKE2b (Python's ``hash`` is salted per process), and
    the seed and the hash seed a :class:`numpy.random.SeedSequence` of their own.
    """
    digest = hashlib.blake2b(job_id.encode("utf-8"), digest_size=16, person=b"gpualloc-runtime").digest()
    entropy = [int(seed), int.from_bytes(digest, "little")]
    return float(np.random.default_rng(np.random.SeedSequence(entropy)).random())
