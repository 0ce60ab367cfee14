"""How far the apps' demand strays from its forecast: one error model, fitted on the errors that happened.

Every part of the live planner that must know how wrong the forecast may be asks this one object
(:class:`ErrorModel`): the futures' demand paths (:mod:`agents.live.anticipate`), the hedges' spread and the
newsvendor quantile (:mod:`agents.live.hedge`), the corrected forecast's margin (:class:`agents.live.Corrector`)
and the fill's ceiling (:mod:`agents.live.fill`).

**What it is fitted on.** Past days as a cluster records them: each app's ``forecast`` (made before the day) and
``demand`` (what came; :attr:`gpu_env.scenario.App.forecast`). Each past day gives one relative error path per app,
``e[t] = (A[t] - F[t]) / max(F[t], 1)``. Past days without a recorded forecast (files from before the field existed)
give each curve's error against the mean of the *other* past curves instead (leave one day out): the day-to-day
variation, an upper bound of a forecast's error. A history that mixes the two is refused (:class:`HistoryError`
naming the file and field), and so is a history without forecasts where ``require_forecasts`` asks for them.

**Futures** (:meth:`ErrorModel.sample`): a future's error path is a past day's whole path, read at the same slots of
the day, so that spikes, quiet afternoons and level shifts reach the futures as often as they happened. It is
conditioned on today: with ``e_now`` today's relative error over the last :data:`WINDOW` observed slots and ``p_now``
the past day's over the same slots, the path at lead ``h`` is ``e_past[now + h - 1] + rho**h * (e_now - p_now)``
(the past day's own innovations, started where today is). The past day is drawn with weight
``exp(-d**2 / 2)``, ``d`` the distance between its error then and today's in units of the error level (floored at
:data:`MIN_BANDWIDTH`), so that a day that has run high draws mostly from the past days that ran high; every
path is also read :data:`SHIFTS` slots early or late (a peak that comes an hour off). One past day is drawn for
every app at once, keeping the apps' errors together as they came. Without any past path (no history) the path is
the parametric AR(1) with today's level (the error's persistence :data:`DEFAULT_RHO`).

**Level** (:meth:`ErrorModel.level`): the root mean square of the recorded errors (per app) counting as
:data:`PRIOR_WEIGHT` observed slots, mixed with today's observed errors. With exact forecasts on the past days the
prior is 0, and with an exact forecast today the level falls to 0 within hours.

**Quantile** (:meth:`ErrorModel.quantile`): the ``q`` quantile at every lead of the conditioned paths of every past
day and shift, each with its weight: the demand to plan an app at to hedge at the newsvendor ratio
``penalty / (penalty + worth)``.

**Calibration** (:func:`calibration`): each past day in turn is played as if live against the model fitted on the
others; at every slot the central ``q`` band of its futures by lead is compared with what came. A calibrated model
covers the realized demand at rate ``q`` at every lead.

>>> import numpy as np
>>> F = np.array([[4, 4, 4, 4]])
>>> ErrorModel.none(1).level(F, np.array([[4, 4]]), 2).tolist()   # an exact forecast so far, no history: no error
[0.0]
>>> ErrorModel.none(1).sample(np.random.default_rng(0), F, np.array([[4, 4]]), 2, gpus=8).tolist()
[[4, 4]]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from agents.live.forecast import ERROR_RHO, ERROR_WINDOW, PRIOR_WEIGHT, observed_error_level
from agents.live.history import HistoryError, past_curves, persistence
from gpu_env.scenario import Scenario

__all__ = [
    "DEFAULT_RHO",
    "PRIOR_WEIGHT",
    "SOURCES",
    "WINDOW",
    "Calibration",
    "ErrorModel",
    "QuantileForecast",
    "calibration",
    "relative_errors",
]

DEFAULT_RHO = ERROR_RHO
"""The error's persistence without a history (:data:`agents.live.forecast.ERROR_RHO`)."""
WINDOW = ERROR_WINDOW
"""Observed slots today's error now is read over (:data:`agents.live.forecast.ERROR_WINDOW`)."""
MAX_LEVEL = 1.0
"""Largest relative error level."""
MIN_BANDWIDTH = 0.1
"""Smallest width, in relative error, of the kernel that weighs past days by their error now."""
SHIFTS = (-1, 0, 1)
"""Each past path is also read this many slots early or late (a peak that comes off its hour)."""
SOURCES = ("recorded", "profile", "none")
"""Where the paths come from: recorded forecasts, the past curves' leave-one-out mean, nothing."""


def relative_errors(forecast: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """``(actual - forecast) / max(forecast, 1)``, elementwise."""
    F = np.asarray(forecast, dtype=np.float64)
    return (np.asarray(actual, dtype=np.float64) - F) / np.maximum(F, 1.0)


def _error_now(errors: np.ndarray, now: int) -> np.ndarray:
    """The mean relative error over the last :data:`WINDOW` slots before ``now`` (last axis), 0 before any."""
    if now == 0:
        return np.zeros(errors.shape[:-1])
    return errors[..., max(0, now - WINDOW) : now].mean(axis=-1)


@dataclass(frozen=True)
class ErrorModel:
    """Each app's relative demand error: past paths, persistence, prior level (module docstring).

    Attributes:
        paths: Shape (days, apps, T): each past day's relative error path per app (NaN where a past day lacks the
            app); (0, apps, T) without a history.
        rho: Shape (apps,): each app's error persistence (lag-one autocorrelation of the paths).
        prior: Shape (apps,): the root mean square of the paths per app (0: no prior).
        source: One of :data:`SOURCES`.
        prior_weight: Observed slots the prior counts as.
    """

    paths: np.ndarray
    rho: np.ndarray
    prior: np.ndarray
    source: str = "none"
    prior_weight: float = PRIOR_WEIGHT
    _shifted: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0)), repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source: expected one of {', '.join(SOURCES)}, got {self.source!r}")
        if self.paths.size and self._shifted.size == 0:
            object.__setattr__(self, "_shifted", _shift_paths(self.paths))

    @classmethod
    def none(cls, apps: int, slots: int = 0) -> ErrorModel:
        """No history: the level is today's observed error alone, the paths parametric."""
        return cls(np.zeros((0, apps, slots)), np.full(apps, DEFAULT_RHO), np.zeros(apps), "none")

    @classmethod
    def fit(
        cls, days: Sequence[Scenario], day: Scenario, *, require_forecasts: bool = False, sources: Sequence[str] = ()
    ) -> ErrorModel:
        """The model of ``day``'s apps from past ``days`` (nothing of ``day`` but its apps' names is read).

        Args:
            days: Past days of the cluster (scenario files as recorded).
            day: The day being played.
            require_forecasts: Refuse past days without a recorded forecast.
            sources: The past days' file names, for the error messages (default: the days' names).

        Raises:
            HistoryError: A past day without a forecast among days with one, or where ``require_forecasts``;
                names the file and the field.
        """
        same = [d for d in days if d.slots == day.slots]
        names = [sources[i] if i < len(sources) else d.name for i, d in enumerate(days) if d.slots == day.slots]
        apps, T = len(day.apps), day.slots
        if not same or not apps:
            return cls.none(apps, T)
        recorded = [_has_forecasts(d, day) for d in same]
        if not all(recorded) and (any(recorded) or require_forecasts):
            i = recorded.index(False)
            j = next(k for k, app in enumerate(same[i].apps) if app.forecast is None)
            why = "a past day must carry the forecast made for it"
            if any(recorded):
                why += " when others do"
            raise HistoryError(names[i], f"realtime[{j}].forecast", why + " (the error model fits on recorded errors)")
        paths = np.full((len(same), apps, T), np.nan)
        for i, app in enumerate(day.apps):
            rows = [(d, next((a for a in past.apps if a.name == app.name), None)) for d, past in enumerate(same)]
            rows = [(d, a) for d, a in rows if a is not None]
            if all(recorded):
                for d, a in rows:
                    paths[d, i] = relative_errors(a.forecast, a.demand)  # type: ignore[arg-type]
            elif len(rows) >= 2:
                curves = np.array([a.demand for _, a in rows], dtype=np.float64)
                for k, (d, _) in enumerate(rows):
                    others = np.delete(curves, k, axis=0).mean(axis=0)
                    paths[d, i] = relative_errors(others, curves[k])
        paths = np.clip(paths, -1.0, 4.0)
        rho = np.full(apps, DEFAULT_RHO)
        prior = np.zeros(apps)
        for i in range(apps):
            rows = paths[:, i][~np.isnan(paths[:, i, 0])]
            if len(rows):
                prior[i] = min(MAX_LEVEL, float(np.sqrt(np.mean(rows**2))))
                rho[i] = persistence(rows, default=DEFAULT_RHO)
        source = "recorded" if all(recorded) else "profile"
        if source == "profile" and not np.any(prior > 0):
            return cls.none(apps, T)
        # a past day without one of the apps stands in as that app's forecast exactly met
        return cls(np.nan_to_num(paths, nan=0.0), rho, prior, source)

    # ------------------------------------------------------------------------- level

    def level(self, forecast: np.ndarray, observed: np.ndarray, now: int) -> np.ndarray:
        """Each app's error level at slot ``now``: the prior and the errors observed before ``now`` mixed.

        Args:
            forecast: The day's forecast, shape (apps, T) (columns before ``now`` are read).
            observed: The actual demand of slots before ``now``, shape (apps, now) or wider.
            now: The slot of the day.
        """
        out = observed_error_level(forecast, observed, now, self.prior, self.prior_weight)
        return np.minimum(out, MAX_LEVEL)

    def uncertain(self, forecast: np.ndarray, observed: np.ndarray, now: int) -> bool:
        """Whether any app's demand ahead is uncertain (otherwise every path is the forecast)."""
        return bool(np.any(self.level(forecast, observed, now) > 0))

    # ------------------------------------------------------------------------- paths

    def conditioned(self, forecast: np.ndarray, observed: np.ndarray, now: int) -> tuple[np.ndarray, np.ndarray]:
        """Every past path (day and shift) from ``now`` on, conditioned on today's error, and its weight.

        Returns:
            The paths, shape (paths, apps, T - now), relative errors, and their weights, shape (paths,), summing to 1.
            Without past paths: shapes (0, apps, T - now) and (0,).
        """
        F = np.asarray(forecast, dtype=np.float64)
        apps, T = F.shape
        if self._shifted.size == 0 or self._shifted.shape[2] != T:
            return np.zeros((0, apps, T - now)), np.zeros(0)
        past = self._shifted  # (paths, apps, T)
        today = _error_now(relative_errors(F[:, :now], np.asarray(observed, dtype=np.float64)[:, :now]), now)
        then = _error_now(past[:, :, :now], now)  # (paths, apps)
        gap = today[None, :] - then
        lead = np.arange(1, T - now + 1)
        decay = self.rho[None, :, None] ** lead[None, None, :]
        paths = past[:, :, now:] + decay * gap[:, :, None]
        width = np.maximum(self.level(F, observed, now), MIN_BANDWIDTH)
        distance = ((gap / width[None, :]) ** 2).sum(axis=1) if now else np.zeros(past.shape[0])
        weight = np.exp(-0.5 * (distance - distance.min()))
        return paths, weight / weight.sum()

    def sample(
        self, rng: np.random.Generator, forecast: np.ndarray, observed: np.ndarray, now: int, *, gpus: int
    ) -> np.ndarray:
        """One demand path of slots ``now..T-1`` for every app, shape (apps, T - now), integral in ``[0, gpus]``.

        Args:
            rng: The random source (seeded by the caller).
            forecast: The day's forecast, shape (apps, T).
            observed: The actual demand of slots before ``now`` (nothing after ``now - 1`` is read).
            now: The slot of the day.
            gpus: G.
        """
        F = np.asarray(forecast, dtype=np.float64)
        paths, weight = self.conditioned(F, observed, now)
        if len(weight):
            e = paths[int(rng.choice(len(weight), p=weight))]
        else:
            e = self._parametric(rng, F, observed, now)
        return np.clip(np.round(F[:, now:] * (1.0 + e)), 0, gpus).astype(np.int64)

    def _parametric(self, rng: np.random.Generator, F: np.ndarray, observed: np.ndarray, now: int) -> np.ndarray:
        """An AR(1) error path with today's level, started at today's error (no past path to resample)."""
        apps, T = F.shape
        sigma = self.level(F, observed, now)
        e = _error_now(relative_errors(F[:, :now], np.asarray(observed, dtype=np.float64)[:, :now]), now)
        z = rng.standard_normal((apps, T - now))
        path = np.empty((apps, T - now))
        innovation = sigma * np.sqrt(1.0 - self.rho**2)
        for h in range(T - now):
            e = self.rho * e + innovation * z[:, h]
            path[:, h] = e
        return path

    def quantile(
        self, q: np.ndarray | float, forecast: np.ndarray, observed: np.ndarray, now: int, *, gpus: int
    ) -> np.ndarray:
        """Each app's demand of slots ``now..T-1`` at its quantile ``q`` by lead, shape (apps, T - now).

        The weighted quantile of the conditioned past paths (:meth:`conditioned`); without them, the parametric
        AR(1) law's (normal, spread ``level * sqrt(1 - rho**(2h))`` around today's error carried forward).

        Args:
            q: One quantile, or one per app.
            forecast: The day's forecast, shape (apps, T).
            observed: The actual demand of slots before ``now``.
            now: The slot of the day.
            gpus: G.
        """
        from statistics import NormalDist

        F = np.asarray(forecast, dtype=np.float64)
        apps, T = F.shape
        q = np.broadcast_to(np.asarray(q, dtype=np.float64), (apps,))
        paths, weight = self.conditioned(F, observed, now)
        out = np.empty((apps, T - now))
        if len(weight):
            for i in range(apps):
                order = np.argsort(paths[:, i, :], axis=0)
                sorted_e = np.take_along_axis(paths[:, i, :], order, axis=0)
                cum = np.cumsum(weight[order], axis=0)
                k = np.argmax(cum >= q[i] - 1e-12, axis=0)
                out[i] = sorted_e[k, np.arange(T - now)]
        else:
            sigma = self.level(F, observed, now)
            e = _error_now(relative_errors(F[:, :now], np.asarray(observed, dtype=np.float64)[:, :now]), now)
            lead = np.arange(1, T - now + 1)
            for i in range(apps):
                z = NormalDist().inv_cdf(min(max(float(q[i]), 1e-6), 1 - 1e-6))
                out[i] = self.rho[i] ** lead * e[i] + z * sigma[i] * np.sqrt(1.0 - self.rho[i] ** (2 * lead))
        return np.clip(np.round(F[:, now:] * (1.0 + out)), 0, gpus).astype(np.int64)


@dataclass(frozen=True, eq=False)
class QuantileForecast:
    """The apps planned at a quantile of the error model's paths: the rolling loop's face (:class:`Corrector`'s).

    With ``q`` each app's newsvendor ratio ``penalty / (penalty + worth)`` (:func:`newsvendor_levels`), this is the
    hedge the penalty asks for, as the base decision's forecast: an app is held where a rise the recorded days make
    likely would otherwise find its GPUs taken by a job that cannot be preempted; on days that followed their
    forecast (recorded errors near 0) it is the forecast itself.

    Attributes:
        errors: The error model.
        q: Shape (apps,): each app's quantile.
    """

    errors: ErrorModel
    q: np.ndarray

    @property
    def label(self) -> str:
        """How traces show it: ``quantile 0.89`` (the mean over the apps)."""
        return f"quantile {float(np.mean(self.q)):.2f}"

    def forecast(self, forecast: np.ndarray, actual: np.ndarray, now: int, gpus: int) -> np.ndarray:
        """Forecast of slots ``now..T-1``, shape (apps, T - now): each app's quantile of the conditioned paths."""
        return self.errors.quantile(self.q, forecast, actual, now, gpus=gpus)


def _has_forecasts(past: Scenario, day: Scenario) -> bool:
    """Whether every app of ``day`` found in ``past`` carries its recorded forecast there."""
    names = {app.name for app in day.apps}
    return all(app.forecast is not None for app in past.apps if app.name in names)


def _shift_paths(paths: np.ndarray) -> np.ndarray:
    """Each path read :data:`SHIFTS` slots early or late, held flat past the day's ends: (days * shifts, apps, T)."""
    T = paths.shape[2]
    out = []
    for s in SHIFTS:
        idx = np.clip(np.arange(T) + s, 0, T - 1)
        out.append(paths[:, :, idx])
    return np.concatenate(out, axis=0)


# ----------------------------------------------------------------------------- calibration


@dataclass(frozen=True)
class Calibration:
    """How often what came fell inside the futures' central bands, by lead (:func:`calibration`).

    Attributes:
        quantiles: The bands' nominal coverage.
        leads: The leads reported (slots ahead, 1 = the slot being planned).
        coverage: Shape (quantiles, leads): the share of (day, slot, app) cells inside the band.
        cells: Shape (leads,): the cells counted at each lead.
        days: Past days played.
        source: The model's :attr:`ErrorModel.source`.
    """

    quantiles: tuple[float, ...]
    leads: tuple[int, ...]
    coverage: np.ndarray
    cells: np.ndarray
    days: int
    source: str

    def table(self) -> str:
        """Markdown: one row per band, one column per lead."""
        head = "| band | " + " | ".join(f"lead {h}" for h in self.leads) + " |"
        rows = [head, "| --- |" + " ---: |" * len(self.leads)]
        for q, row in zip(self.quantiles, self.coverage, strict=True):
            rows.append(f"| {q:.0%} | " + " | ".join("n/a" if np.isnan(x) else f"{x:.2f}" for x in row) + " |")
        rows.append("| cells | " + " | ".join(str(int(n)) for n in self.cells) + " |")
        return "\n".join(rows)


def calibration(
    days: Sequence[Scenario],
    *,
    quantiles: Sequence[float] = (0.5, 0.8, 0.9),
    leads: Sequence[int] = (1, 2, 4, 8, 12),
    samples: int = 64,
    seed: int = 0,
) -> Calibration:
    """Each past day played as if live against the model fitted on the others: band coverage by lead.

    At every slot ``t >= 1`` of the held-out day, ``samples`` futures are drawn from what the day showed before
    ``t``; the central ``q`` band of the futures at lead ``h`` (slot ``t + h - 1``) is checked against what came.
    Past days need recorded forecasts (or the profile stands in, as :meth:`ErrorModel.fit` does).

    Raises:
        ValueError: Fewer than two past days.
    """
    if len(days) < 2:
        raise ValueError("calibration: expected at least two past days")
    rng = np.random.default_rng(seed)
    hits = np.zeros((len(quantiles), len(leads)))
    cells = np.zeros(len(leads))
    source = "none"
    for d, day in enumerate(days):
        others = [x for k, x in enumerate(days) if k != d]
        model = ErrorModel.fit(others, day)
        source = model.source
        F = np.array([app.forecast if app.forecast is not None else app.demand for app in day.apps], dtype=np.int64)
        if model.source == "profile":  # no recorded forecast: the others' mean stands in, as the fit reads it
            curves = [past_curves(others, app.name, day.slots) for app in day.apps]
            F = np.rint(np.array([c.mean(axis=0) if len(c) else np.zeros(day.slots) for c in curves])).astype(np.int64)
        A = day.demand
        T = day.slots
        for t in range(1, T):
            draws = np.stack([model.sample(rng, F, A[:, :t], t, gpus=day.gpus) for _ in range(samples)])
            for j, h in enumerate(leads):
                s = t + h - 1
                if s >= T:
                    continue
                cells[j] += A.shape[0]
                for k, q in enumerate(quantiles):
                    lo = np.quantile(draws[:, :, h - 1], (1 - q) / 2, axis=0)
                    hi = np.quantile(draws[:, :, h - 1], (1 + q) / 2, axis=0)
                    hits[k, j] += int(((A[:, s] >= lo) & (A[:, s] <= hi)).sum())
    coverage = np.divide(hits, cells, out=np.full_like(hits, np.nan), where=cells > 0)
    return Calibration(tuple(quantiles), tuple(leads), coverage, cells, len(days), source)
