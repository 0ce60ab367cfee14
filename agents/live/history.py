"""What past days of a cluster say about today: when jobs arrive, what they look like, and the apps' demand.

A cluster's history is a few past days in the scenario format (``--history FILE...``): their pending
jobs (those without ``running_on``) are the record of arrivals, each released at its ``release`` slot;
their ``realtime`` curves are the record of each app's demand. Two models are fitted from it, and
nothing in them ever comes from the day being played:

- :class:`ArrivalModel`: the arrival rate by slot of the day (the mean count over the days, smoothed
  over neighbouring slots so that a handful of days gives a usable rate), and the joint distribution of
  a job's attributes (type, GPUs, time limit, worth per GPU-slot, deadline slack) as the empirical
  distribution of the jobs that arrived near that slot, resampled whole so that the joint structure is
  kept. :meth:`ArrivalModel.sample` draws one possible rest of the day.
- :class:`HistoryForecaster`: each app's demand forecast from its own past days: a seasonal profile
  (the mean of the past curves by slot), a level correction by the ratio observed today carried forward
  with a persistence fitted on the history, and a safety margin by lead learned from the errors this very
  forecaster made on the past days (leave one day out).

>>> from gpu_env.generators import generate
>>> days = [generate("mixed-control", seed=s) for s in (1, 2, 3)]
>>> model = ArrivalModel.fit(days)
>>> pending = sum(1 for d in days for j in d.jobs if j.running_on is None)
>>> round(model.expected_count(0, 24), 6) == round(pending / 3, 6)
True
"""

from __future__ import annotations

import functools
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpu_env import rules
from gpu_env.scenario import Job, JobType, Scenario, ScenarioError, load_scenario

SMOOTHING = (0.25, 0.5, 0.25)
"""Kernel over neighbouring slots for the arrival rate (slot - 1, slot, slot + 1): with a handful of days
a job seen at 10:00 is evidence of arrivals around 10:00, not exactly then."""
POOL_RADIUS = 2
"""A sampled job at slot s is drawn from the jobs that arrived within this many slots of s."""


class HistoryError(ScenarioError):
    """A history file that cannot describe the day being played (names the file and the field)."""


def load_history(paths: Sequence[str | os.PathLike[str]], day: Scenario | None = None) -> list[Scenario]:
    """Load past days, checked like any scenario file and against the day being played.

    Args:
        paths: Scenario files of past days of the same cluster.
        day: The day being played: every history day must have its number of slots, and apps of the
            same names (an app missing from a past day is allowed; its demand history is then shorter).

    Raises:
        HistoryError: A file that breaks a rule, or a day of another shape; the message names the file and field.
    """
    days = []
    for path in paths:
        try:
            past = load_scenario(path)
        except ScenarioError as exc:
            raise HistoryError(exc.source, exc.field, exc.reason) from None
        if day is not None and past.slots != day.slots:
            raise HistoryError(
                str(path), "horizon.slots", f"a past day must have the played day's {day.slots} slots, got {past.slots}"
            )
        days.append(past)
    return days


# ----------------------------------------------------------------------------- arrivals


@dataclass(frozen=True)
class PastJob:
    """One arrival of the history, in the form a sampled job takes.

    Attributes:
        slot: The slot of the day it was released at.
        type: Its job type.
        gpus: GPUs it asked for.
        duration: Its time limit in slots.
        weight: Its worth per GPU-slot (``Job.weight``).
        slack: ``deadline - release - duration`` (None: no deadline).
    """

    slot: int
    type: JobType
    gpus: int
    duration: int
    weight: float
    slack: int | None


@dataclass(frozen=True)
class ArrivalModel:
    """Arrivals by slot of the day, fitted from past days.

    Attributes:
        rate: Expected arrivals per slot of the day, shape (T,), smoothed (:data:`SMOOTHING`).
        jobs: Every past arrival.
        days: Number of past days fitted.
        gpus: GPUs of the past days' cluster (the largest, when they differ).
    """

    rate: np.ndarray
    jobs: tuple[PastJob, ...]
    days: int
    gpus: int
    _pools: tuple[np.ndarray, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def fit(cls, days: Sequence[Scenario]) -> ArrivalModel:
        """Fit the rate and the attribute pools from past days (at least one).

        Raises:
            ValueError: No days, or days with different numbers of slots.
        """
        if not days:
            raise ValueError("history: expected at least one past day")
        T = days[0].slots
        if any(d.slots != T for d in days):
            raise ValueError("history: every past day must have the same number of slots")
        counts = np.zeros(T)
        jobs: list[PastJob] = []
        for day in days:
            for job in day.jobs:
                if job.running_on is not None or job.release >= T:
                    continue
                counts[job.release] += 1
                slack = None if job.deadline is None else max(0, job.deadline - job.release - job.duration)
                jobs.append(PastJob(job.release, job.type, job.gpus, job.duration, job.weight, slack))
        raw = counts / len(days)
        rate = np.zeros(T)
        for offset, w in zip((-1, 0, 1), SMOOTHING, strict=True):
            shifted = np.zeros(T)
            lo, hi = max(0, -offset), min(T, T - offset)
            shifted[lo:hi] = raw[lo + offset : hi + offset]
            rate += w * shifted
        # Mass smoothed past either end of the day stays in the day: scale to the observed total.
        if rate.sum() > 0:
            rate *= raw.sum() / rate.sum()
        slots = np.array([j.slot for j in jobs], dtype=np.int64)
        pools = tuple(np.flatnonzero(np.abs(slots - s) <= POOL_RADIUS) for s in range(T))
        return cls(rate, tuple(jobs), len(days), max(d.gpus for d in days), pools)

    def expected_count(self, start: int, stop: int) -> float:
        """Expected arrivals in slots ``start..stop-1`` of the day."""
        return float(self.rate[max(0, start) : max(0, stop)].sum())

    def sample(
        self,
        rng: np.random.Generator,
        now: int,
        gpus: int,
        node_size: int,
        horizon: int,
        *,
        prefix: str = "future",
        value_scale: float = 1.0,
    ) -> list[Job]:
        """One possible rest of the day: jobs released after slot ``now``, with release counted from ``now``.

        Arrivals in slot ``s > now`` are Poisson with mean ``rate[s]`` (scaled by ``gpus / self.gpus``
        for a cluster of another size); each is a past job drawn uniformly from those that arrived within
        :data:`POOL_RADIUS` slots of ``s`` (all past jobs when none did) among those whose size the cluster
        can place, released at ``s``, with its deadline slack kept.

        Args:
            rng: The random source (seeded by the caller).
            now: The slot of the day that is slot 0 of the state.
            gpus: G of the cluster being planned.
            node_size: Its node size.
            horizon: Slots planned from ``now`` (arrivals at ``now + horizon`` or later are not drawn).
            prefix: Start of the sampled jobs' ids (no real job's id should start with it).
            value_scale: Multiplies each sampled job's worth per GPU-slot: ``decay**now`` for a state whose known
                jobs are worth that much less (:attr:`agents.live.ClusterState.value_scale`), so that an arrival
                is worth what a known job of its kind is.
        """
        scale = gpus / self.gpus if self.gpus else 1.0
        fits = np.array([_placeable(j.gpus, gpus, node_size) for j in self.jobs], dtype=bool)
        out: list[Job] = []
        T = self.rate.shape[0]
        for s in range(now + 1, min(T, now + horizon)):
            n = int(rng.poisson(self.rate[s] * scale))
            if n == 0:
                continue
            pool = self._pools[s] if self._pools else np.arange(len(self.jobs))
            pool = pool[fits[pool]] if pool.size else pool
            if pool.size == 0:
                pool = np.flatnonzero(fits)
            if pool.size == 0:
                continue
            for i in rng.choice(pool, size=n):
                past = self.jobs[int(i)]
                release = s - now
                deadline = None if past.slack is None else release + past.duration + past.slack
                out.append(
                    Job(
                        id=f"{prefix}-{s}-{len(out)}",
                        type=past.type,
                        gpus=past.gpus,
                        duration=past.duration,
                        release=release,
                        priority=past.weight * value_scale,
                        deadline=deadline,
                    )
                )
        return out


@functools.lru_cache(maxsize=4096)
def _placeable(k: int, gpus: int, node_size: int) -> bool:
    return k <= gpus and rules.allowed_block_starts(k, gpus, node_size).size > 0


def stable_seed(*parts: object) -> int:
    """A seed from values, the same in every process (Python's ``hash`` of a string is salted)."""
    return zlib.crc32(repr(parts).encode())


# ----------------------------------------------------------------------------- demand


@dataclass(frozen=True)
class HistoryForecaster:
    """An app's demand forecast from its own past days.

    At slot ``t`` of the day the forecast of slot ``s >= t`` (lead ``h = s - t + 1``) is::

        profile[s] * (1 + rho**h * e) * (1 + margin[h])

    where ``profile`` is the mean of the past days' curves by slot, ``e`` the relative error of the
    profile over the last ``window`` observed slots today (clipped to ``[-1, limit]``; a difference when
    the profile there is 0), ``rho`` the lag-one autocorrelation of the past days' relative deviations
    from the profile (clipped to ``[0, 0.95]``), and ``margin[h]`` the ``quantile`` of the relative
    errors this forecaster made at lead ``h`` on the past days, each day forecast from the others' profile
    (leave one day out), floored at 0. With one past day there is nothing to leave out: the margin is 0.

    Attributes:
        names: App names, in the played day's order.
        profile: Shape (apps, T).
        rho: Persistence of the level correction, per app.
        margin: Shape (apps, T + 1): the relative margin at lead h (index h; index 0 unused).
        window: Observed slots the level correction is estimated from.
        limit: Largest relative correction.
        quantile: The error quantile the margin is set at.
    """

    names: tuple[str, ...]
    profile: np.ndarray
    rho: np.ndarray
    margin: np.ndarray
    window: int = 3
    limit: float = 1.0
    quantile: float = 0.8

    @classmethod
    def fit(
        cls, days: Sequence[Scenario], day: Scenario, *, window: int = 3, quantile: float = 0.8
    ) -> HistoryForecaster:
        """Fit a forecaster for the apps of ``day`` from past ``days`` (the day's own curves are not read).

        An app absent from every past day gets a flat profile at the mean of nothing: 0, so its
        forecast is the level correction alone; the caller may prefer the day's own forecast then.

        Raises:
            ValueError: No past days, or ``quantile`` outside (0, 1).
        """
        if not days:
            raise ValueError("history: expected at least one past day")
        if not 0 < quantile < 1:
            raise ValueError(f"quantile: expected a number in (0, 1), got {quantile}")
        T = day.slots
        names = tuple(app.name for app in day.apps)
        curves = [past_curves(days, name, T) for name in names]
        profile = np.array([c.mean(axis=0) if len(c) else np.zeros(T) for c in curves]).reshape(len(names), T)
        rho = np.zeros(len(names))
        margin = np.zeros((len(names), T + 1))
        for i, c in enumerate(curves):
            if len(c) == 0:
                continue
            rho[i] = persistence(relative_deviations(c), default=0.0)
            if len(c) < 2:
                continue
            errors: list[list[float]] = [[] for _ in range(T + 1)]
            for d in range(len(c)):
                others = np.delete(c, d, axis=0).mean(axis=0)
                for t in range(1, T):
                    ahead = level_corrected(others, c[d], t, rho[i], window, 1.0)
                    rel = (c[d, t:] - ahead) / np.maximum(ahead, 1.0)
                    for h, r in enumerate(rel, start=1):
                        errors[h].append(float(r))
            for h in range(1, T + 1):
                if errors[h]:
                    margin[i, h] = max(0.0, float(np.quantile(errors[h], quantile)))
            # a longer lead is never more certain than a shorter one
            margin[i, 1:] = np.maximum.accumulate(margin[i, 1:])
        return cls(names, profile, rho, margin, window, 1.0, quantile)

    def forecast(self, forecast: np.ndarray | None, actual: np.ndarray, now: int, gpus: int) -> np.ndarray:
        """Forecast of slots ``now..T-1``, shape (apps, T - now), from the demand observed before ``now``.

        ``forecast`` (the day's own forecast) is not read: the face is :class:`agents.live.Corrector`'s.

        Args:
            forecast: The day's forecast (unused; may be None).
            actual: The demand observed in the slots before ``now``, shape (apps, now) or wider (columns
                ``>= now`` are not read).
            now: The slot being planned.
            gpus: G, the largest allocation.
        """
        T = self.profile.shape[1]
        out = np.empty((len(self.names), T - now))
        for i in range(len(self.names)):
            ahead = level_corrected(self.profile[i], actual[i], now, self.rho[i], self.window, self.limit)
            out[i] = ahead * (1.0 + self.margin[i, 1 : T - now + 1])
        return np.clip(np.round(out), 0, gpus).astype(np.int64)


def past_curves(days: Sequence[Scenario], name: str, T: int) -> np.ndarray:
    """The curves of the app ``name`` in the past days (those that have it), shape (days with it, T)."""
    rows = [list(app.demand) for d in days for app in d.apps if app.name == name]
    return np.array(rows, dtype=np.float64).reshape(len(rows), T)


def relative_deviations(curves: np.ndarray) -> np.ndarray:
    """Each past curve's deviation from their mean by slot, relative to it: ``(c - profile) / max(profile, 1)``."""
    profile = curves.mean(axis=0)
    return (curves - profile) / np.maximum(profile, 1.0)


def persistence(deviations: np.ndarray, default: float) -> float:
    """The lag-one autocorrelation of relative deviations (one row a day), clipped to ``[0, 0.95]``.

    ``default`` where it is undefined (fewer than two pairs of slots, or no variation).
    """
    a, b = deviations[:, :-1].ravel(), deviations[:, 1:].ravel()
    if a.size > 1 and a.std() > 0 and b.std() > 0:
        return float(np.clip(np.corrcoef(a, b)[0, 1], 0.0, 0.95))
    return default


def level_corrected(
    profile: np.ndarray, actual: np.ndarray, now: int, rho: float, window: int, limit: float
) -> np.ndarray:
    """The profile of slots ``now..`` corrected by the level observed over the last ``window`` slots.

    ``actual`` is one app's observed demand, ``now`` slots or more (only ``actual[:now]`` is read).
    """
    ahead = profile[now:].astype(np.float64)
    if now == 0:
        return ahead
    lo = max(0, now - window)
    seen_p = float(profile[lo:now].sum())
    seen_a = float(np.asarray(actual[lo:now], dtype=np.float64).sum())
    decay = rho ** np.arange(1, ahead.shape[0] + 1)
    if seen_p > 0:
        e = min(limit, max(-1.0, seen_a / seen_p - 1.0))
        return ahead * (1.0 + decay * e)
    return np.maximum(0.0, ahead + decay * (seen_a - seen_p) / (now - lo))
