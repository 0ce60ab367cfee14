"""How much to plan each real-time app for: the hedge, both ways, and the forecast chosen by the past.

A live planner plans each app at a forecast of its demand. How far above (or below) the point forecast to
plan is the hedge: planning high protects against the shortfall penalty and costs the work that the
reserved GPUs could have run; planning low does the opposite. Three things live here:

- :func:`hedged_demand`: the point forecast moved by ``z`` error levels at every lead, the error level
  being what the level correction leaves (:func:`agents.live.forecast.residual_error_level`) and the
  spread growing with the lead as the AR(1) error's does (``sqrt(1 - rho**(2h))``). ``z < 0`` plans below
  the forecast (a low quantile of the demand model's paths: ``z = -1`` is about the 16th percentile),
  ``z = 0`` at it, ``z > 0`` above it. The live planner (:mod:`agents.live.anticipate`) commits each
  such plan's slot 0 in every sampled future and keeps the one the futures say is worth most.
- :class:`HedgedForecaster` and :func:`choose_forecast`: a point forecast (the day's forecast corrected
  by what today has shown, the profile of the past days corrected the same way, or their mean) raised by
  a margin, and the choice among them made by a backtest: each past day is played as if it were live
  (at every slot, the slots ahead forecast from the slots before), and each forecaster is charged what
  its forecast would have cost: the penalty for each GPU-slot of demand above it and the worth of a
  GPU-slot of work for each one reserved and not used (the newsvendor's loss). The past days do not
  record the forecast that was made for them, so the day's own forecast stands in for it (a site's
  forecast of a day of this cluster; the families' forecasts differ little from day to day).
- :func:`newsvendor_forecaster`: the hedge a site would try first, as a baseline: the point forecast
  plus the history's error quantile at the newsvendor ratio ``penalty / (penalty + worth)``.

>>> import numpy as np
>>> point = np.array([[10.0, 10.0, 10.0]])
>>> hedged_demand(point, np.array([0.2]), np.array([0.8]), z=1.0, gpus=32).tolist()  # +0.2 x 0.6, 0.77, 0.88
[[11, 12, 12]]
>>> hedged_demand(point, np.array([0.2]), np.array([0.8]), z=-1.0, gpus=32).tolist()
[[9, 8, 8]]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from agents.live.forecast import ERROR_RHO, ERROR_WINDOW, PRIOR_WEIGHT, residual_error_level
from agents.live.history import level_corrected, past_curves
from gpu_env.scenario import Scenario

__all__ = [
    "BACKTEST_LEADS",
    "MARGINS",
    "POINTS",
    "Backtest",
    "ChosenForecast",
    "HedgedForecaster",
    "choose_forecast",
    "forecast_by_record",
    "hedged_demand",
    "newsvendor_forecaster",
    "newsvendor_ratio",
    "work_worth",
]

POINTS = ("corrected", "history", "blend")
"""The point forecasts: the day's forecast corrected by today's level, the past days' profile corrected the
same way, and the mean of the two."""
MARGINS = (0.0, 0.5, 1.0, 1.5, 2.0)
"""The margins (error levels above the point forecast) the backtest weighs."""
BACKTEST_LEADS = 6
"""Slots ahead a backtest charges: the decisions a cycle commits reach this far before being revised."""
RHO = ERROR_RHO
"""The error's persistence (:data:`agents.live.forecast.ERROR_RHO`)."""
WINDOW = ERROR_WINDOW
"""Observed slots the level correction reads (:data:`agents.live.forecast.ERROR_WINDOW`)."""


def hedged_demand(point: np.ndarray, level: np.ndarray, rho: np.ndarray, z: float, gpus: int) -> np.ndarray:
    """The point forecast moved by ``z`` error levels by lead: ``point * (1 + z * level * sqrt(1 - rho**(2h)))``.

    Args:
        point: Shape (apps, H): the point forecast of slots now.. (lead 1 first).
        level: Shape (apps,): each app's error level (stationary SD of the relative error).
        rho: Shape (apps,): each app's error persistence.
        z: Error levels above (negative: below) the point forecast.
        gpus: G: the result is integral in ``[0, gpus]``.
    """
    point = np.asarray(point, dtype=np.float64)
    lead = np.arange(1, point.shape[1] + 1)
    rho = np.asarray(rho, dtype=np.float64).reshape(-1, 1)
    spread = np.asarray(level, dtype=np.float64).reshape(-1, 1) * np.sqrt(1.0 - rho ** (2 * lead))
    return np.clip(np.round(point * np.maximum(0.0, 1.0 + z * spread)), 0, gpus).astype(np.int64)


@dataclass(frozen=True)
class HedgedForecaster:
    """A point forecast raised by ``margin`` error levels at every lead (:func:`hedged_demand`).

    The error level is what the level correction leaves today (:func:`residual_error_level` of the point
    forecast's reference: the day's forecast for ``corrected``, the past profile for ``history``), mixed with
    ``prior`` (the same level measured on the past days) counted as ``prior_weight`` observed slots.

    Attributes:
        point: ``corrected``, ``history`` or ``blend`` (:data:`POINTS`).
        margin: Error levels above the point forecast (0: the point forecast itself).
        profile: Shape (apps, T): the past days' mean curves (``history`` and ``blend``; empty otherwise).
        prior: Shape (apps,): the history's error level per app (zeros: today's alone).
        rho: The error's persistence.
        window: Observed slots the level correction reads.
        prior_weight: Observed slots the prior counts as.
    """

    point: str = "corrected"
    margin: float = 0.0
    profile: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    prior: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rho: float = RHO
    window: int = WINDOW
    prior_weight: float = PRIOR_WEIGHT

    def __post_init__(self) -> None:
        if self.point not in POINTS:
            raise ValueError(f"point: expected one of {', '.join(POINTS)}, got {self.point!r}")
        if self.point != "corrected" and self.profile.size == 0:
            raise ValueError(f"point {self.point!r} needs the past days' profile")
        if not (np.isfinite(self.margin) and self.margin >= 0):
            raise ValueError(f"margin: expected a number >= 0, got {self.margin}")

    @property
    def label(self) -> str:
        """How the choice is reported: ``corrected + 1`` (the point forecast and the margin)."""
        return f"{self.point} + {self.margin:g}"

    def point_forecast(self, forecast: np.ndarray, actual: np.ndarray, now: int) -> np.ndarray:
        """The point forecast of slots ``now..T-1``, shape (apps, T - now), as floats."""
        F = np.asarray(forecast, dtype=np.float64)
        apps = F.shape[0]
        out = []
        for i in range(apps):
            row = np.asarray(actual[i] if now else (), dtype=np.float64)
            parts = []
            if self.point in ("corrected", "blend"):
                parts.append(level_corrected(F[i], row, now, self.rho, self.window, 1.0))
            if self.point in ("history", "blend"):
                parts.append(level_corrected(self.profile[i], row, now, self.rho, self.window, 1.0))
            out.append(np.mean(parts, axis=0))
        return np.array(out, dtype=np.float64).reshape(apps, F.shape[1] - now)

    def level(self, forecast: np.ndarray, actual: np.ndarray, now: int) -> np.ndarray:
        """Each app's error level now: what the level correction leaves, mixed with the history's."""
        prior = self.prior if self.prior.size else 0.0
        refs = []
        if self.point in ("corrected", "blend"):
            refs.append(np.asarray(forecast, dtype=np.float64))
        if self.point in ("history", "blend"):
            refs.append(self.profile)
        levels = [
            residual_error_level(r, actual, now, self.rho, self.window, 1.0, prior, self.prior_weight) for r in refs
        ]
        return np.mean(levels, axis=0)

    def forecast(self, forecast: np.ndarray, actual: np.ndarray, now: int, gpus: int) -> np.ndarray:
        """Forecast of slots ``now..T-1``, shape (apps, T - now): the rolling loop's face (:class:`Corrector`'s)."""
        point = self.point_forecast(forecast, actual, now)
        if self.margin == 0:
            return np.clip(np.round(point), 0, gpus).astype(np.int64)
        level = self.level(forecast, actual, now)
        return hedged_demand(point, level, np.full(point.shape[0], self.rho), self.margin, gpus)


# ----------------------------------------------------------------------------- the backtest


def work_worth(days: Sequence[Scenario], day: Scenario) -> float:
    """What a GPU-slot of work is worth on this cluster: the mean worth per GPU-slot of the jobs of the days.

    The past days' jobs where there are any, else the day's jobs known at its start (running, or released at
    slot 0: a later arrival is never read); 1 without any job.
    """
    weights = [j.weight for d in days for j in d.jobs] or [
        j.weight for j in day.jobs if j.running_on is not None or j.release == 0
    ]
    return float(np.mean(weights)) if weights else 1.0


def newsvendor_ratio(penalty: float, worth: float) -> float:
    """The quantile of demand to plan an app at: ``penalty / (penalty + worth)``.

    >>> round(newsvendor_ratio(8.0, 1.0), 3)
    0.889
    """
    return penalty / (penalty + worth) if penalty + worth > 0 else 0.5


@dataclass(frozen=True)
class Backtest:
    """What each forecaster would have cost on the past days, played as if live.

    Attributes:
        losses: Forecaster label -> mean newsvendor loss per past day (lower is better).
        chosen: The label of the forecaster with the least loss.
        days: Past days played.
        worth: The worth of a GPU-slot of work charged for each GPU-slot planned and not used.
        cells: Forecaster label -> (slot, lead) cells charged over all the past days.
    """

    losses: dict[str, float]
    chosen: str
    days: int
    worth: float
    cells: dict[str, int] = field(default_factory=dict)

    def table(self) -> str:
        """The record as Markdown, least loss first."""
        rows = ["| forecaster | loss per day |", "| --- | ---: |"]
        for label, loss in sorted(self.losses.items(), key=lambda kv: kv[1]):
            mark = " (chosen)" if label == self.chosen else ""
            rows.append(f"| {label}{mark} | {loss:.2f} |")
        return "\n".join(rows)


def _prior_levels(curves: Sequence[np.ndarray], references: Sequence[np.ndarray], rho: float) -> float:
    """The level the correction leaves on past days (each read whole against its reference)."""
    squares, n = 0.0, 0
    for c, ref in zip(curves, references, strict=True):
        level = residual_error_level(ref.reshape(1, -1), c.reshape(1, -1), c.shape[0], rho, WINDOW)
        squares += float(level[0] ** 2) * c.shape[0]
        n += c.shape[0]
    return float(np.sqrt(squares / n)) if n else 0.0


def choose_forecast(
    days: Sequence[Scenario],
    day: Scenario,
    *,
    points: Sequence[str] = POINTS,
    margins: Sequence[float] = MARGINS,
    leads: int = BACKTEST_LEADS,
    worth: float | None = None,
) -> tuple[HedgedForecaster, Backtest]:
    """The forecaster (point forecast and margin) that cost least on the past days, played as if live.

    Each past day's curve of each of the day's apps is forecast at every slot ``t >= 1`` from its slots
    before ``t``, by each point forecast at each margin; the forecasts of leads ``1..leads`` are charged
    ``penalty * max(actual - forecast, 0) + worth * max(forecast - actual, 0)`` per GPU-slot. The day's
    forecast stands in for each past day's own (module docstring); the past profile a past day is
    forecast from leaves that day out. Ties go to the earlier point and the smaller margin.

    Args:
        days: Past days of the cluster (their curves are what happened).
        day: The day being played (its forecast, apps and penalties; its own demand is the forecast, never
            an observation).
        points: Point forecasts to weigh (``history`` and ``blend`` need two or more past days with the app).
        margins: Margins to weigh.
        leads: Slots ahead charged at each slot.
        worth: The worth of a GPU-slot of work (default: :func:`work_worth`).

    Returns:
        The chosen forecaster (with the whole history's profile and prior), and the record.

    Raises:
        ValueError: No past days.
    """
    if not days:
        raise ValueError("choose_forecast: expected at least one past day")
    worth = work_worth(days, day) if worth is None else worth
    if not day.apps:  # nothing to forecast
        return HedgedForecaster(), Backtest({"corrected + 0": 0.0}, "corrected + 0", 0, worth, {"corrected + 0": 0})
    T = day.slots
    F = day.demand.astype(np.float64)
    curves = [past_curves([d for d in days if d.slots == T], app.name, T) for app in day.apps]
    usable = [p for p in points if p == "corrected" or all(len(c) >= 2 for c in curves)]
    penalties = np.array([app.penalty for app in day.apps], dtype=np.float64)
    n_days = min((len(c) for c in curves), default=0)
    losses: dict[str, float] = {}
    cells: dict[str, int] = {}
    best: tuple[float, int, int] | None = None
    for pi, point in enumerate(usable):
        for mi, margin in enumerate(margins):
            total, count = 0.0, 0
            for d in range(n_days):
                actual = np.array([c[d] for c in curves])
                f = _fitted(point, margin, curves, F, d)
                charge, n = _day_loss(f, F, actual, penalties, worth, leads, day.gpus)
                total, count = total + charge, count + n
            loss = total / max(n_days, 1)
            label = f"{point} + {margin:g}"
            losses[label], cells[label] = loss, count
            if best is None or loss < best[0] - 1e-9:
                best = (loss, pi, mi)
    assert best is not None
    point, margin = usable[best[1]], margins[best[2]]
    chosen = _fitted(point, margin, curves, F, None)
    return chosen, Backtest(losses, chosen.label, n_days, worth, cells)


def _fitted(
    point: str,
    margin: float,
    curves: Sequence[np.ndarray],
    F: np.ndarray,
    leave_out: int | None,
) -> HedgedForecaster:
    """The forecaster of ``point`` and ``margin`` fitted on the past curves, leaving day ``leave_out`` out."""
    kept = [c if leave_out is None else np.delete(c, leave_out, axis=0) for c in curves]
    profile = np.array([c.mean(axis=0) for c in kept]) if point != "corrected" else np.zeros((0, 0))
    prior = []
    for i, c in enumerate(kept):
        refs = []
        if point in ("corrected", "blend"):
            refs.append([F[i]] * len(c))
        if point in ("history", "blend"):
            refs.append([np.delete(c, k, axis=0).mean(axis=0) if len(c) > 1 else c[k] for k in range(len(c))])
        prior.append(float(np.mean([_prior_levels(list(c), r, RHO) for r in refs])) if len(c) else 0.0)
    return HedgedForecaster(
        point,
        margin,
        profile,
        np.array(prior),
    )


def _charge(ahead: np.ndarray, real: np.ndarray, penalties: np.ndarray, worth: float) -> float:
    """A forecast's newsvendor loss against what came: the penalty per GPU-slot short, the worth per GPU-slot idle."""
    short = np.maximum(real - ahead, 0.0)
    idle = np.maximum(ahead - real, 0.0)
    return float((penalties.reshape(-1, 1) * short).sum() + worth * idle.sum())


def _day_loss(
    forecaster: HedgedForecaster | ChosenForecast,
    F: np.ndarray,
    actual: np.ndarray,
    penalties: np.ndarray,
    worth: float,
    leads: int,
    gpus: int,
) -> tuple[float, int]:
    """The newsvendor loss of one past day played as if live, and the (slot, lead) cells it charged.

    Slots 1.. are forecast from the slots before.
    """
    T = F.shape[1]
    total, cells = 0.0, 0
    for t in range(1, T):
        ahead = forecaster.forecast(F, actual[:, :t], t, gpus)[:, :leads]
        total += _charge(ahead, actual[:, t : t + ahead.shape[1]], penalties, worth)
        cells += ahead.shape[1]
    return total, cells


@dataclass(eq=False)
class ChosenForecast:
    """The forecaster with the best record: the past days' backtest, updated by today's own record as it comes.

    Each cycle, every option's record today is scored as the backtest scores the past days: at each observed
    slot ``s >= 1`` the forecast it would have made from the slots before ``s`` is charged the newsvendor loss
    over the slots observed since (up to ``leads`` ahead). Its mean loss per (slot, lead) cell today is mixed
    with its mean on the past days, the past counting as ``prior_cells`` cells, and the option with the least
    wins this cycle. A day whose demand follows the forecast exactly soon hands the choice to the plain
    corrected forecast, whatever the past days said; a day like the past days keeps their choice.

    Attributes:
        options: The forecasters weighed (each fitted on the whole history).
        history: Each option's mean loss per cell on the past days.
        penalties: Each app's penalty per GPU-slot short.
        worth: The worth of a GPU-slot of work.
        leads: Slots ahead charged.
        prior_cells: Cells of today's record the past days count as.
    """

    options: tuple[HedgedForecaster, ...]
    history: np.ndarray
    penalties: np.ndarray
    worth: float
    leads: int = BACKTEST_LEADS
    prior_cells: float = 8.0 * BACKTEST_LEADS
    _made: dict[tuple[int, bytes], np.ndarray] = field(default_factory=dict, repr=False)
    _last: int = -1

    @property
    def current(self) -> HedgedForecaster:
        """The option the last cycle chose (before any: the past days' best)."""
        return self.options[self._last if self._last >= 0 else int(np.argmin(self.history))]

    @property
    def label(self) -> str:
        """:attr:`current` as traces show it."""
        return self.current.label

    def record(self, forecast: np.ndarray, actual: np.ndarray, now: int, gpus: int) -> tuple[np.ndarray, int]:
        """Each option's loss today so far, and the cells charged (the same for every option)."""
        F = np.asarray(forecast)
        seen = np.asarray(actual)[:, :now]
        losses = np.zeros(len(self.options))
        cells = 0
        for s in range(1, now):
            key = (s, seen[:, :s].tobytes())
            made = self._made.get(key)
            if made is None:
                made = np.stack([f.forecast(F, seen[:, :s], s, gpus)[:, : self.leads] for f in self.options])
                self._made[key] = made
            upto = min(now, s + made.shape[2])
            real = seen[:, s:upto]
            for i in range(len(self.options)):
                losses[i] += _charge(made[i][:, : upto - s], real, self.penalties, self.worth)
            cells += upto - s
        return losses, cells

    def choose(self, forecast: np.ndarray, actual: np.ndarray, now: int, gpus: int) -> int:
        """The option with the least loss per cell, the past days and today's record mixed."""
        losses, cells = self.record(forecast, actual, now, gpus)
        mixed = (self.prior_cells * self.history + losses) / (self.prior_cells + cells)
        return int(np.argmin(mixed))

    def forecast(self, forecast: np.ndarray, actual: np.ndarray, now: int, gpus: int) -> np.ndarray:
        """Forecast of slots ``now..T-1`` by the option the record chooses now (the rolling loop's face)."""
        self._last = self.choose(forecast, actual, now, gpus)
        return self.options[self._last].forecast(forecast, actual, now, gpus)


def forecast_by_record(
    days: Sequence[Scenario],
    day: Scenario,
    *,
    points: Sequence[str] = POINTS,
    margins: Sequence[float] = MARGINS,
    leads: int = BACKTEST_LEADS,
    worth: float | None = None,
    prior_cells: float = 8.0 * BACKTEST_LEADS,
) -> ChosenForecast:
    """Every point forecast at every margin with its record on the past days, chosen among by that record and today's.

    The past days' record is :func:`choose_forecast`'s backtest; the choice is :class:`ChosenForecast`'s.
    """
    worth = work_worth(days, day) if worth is None else worth
    _, record = choose_forecast(days, day, points=points, margins=margins, leads=leads, worth=worth)
    T = day.slots
    F = day.demand.astype(np.float64)
    curves = [past_curves([d for d in days if d.slots == T], app.name, T) for app in day.apps]
    options, history = [], []
    for label, loss in record.losses.items():
        point, _, margin = label.partition(" + ")
        options.append(_fitted(point, float(margin), curves, F, None))
        history.append(loss * record.days / max(record.cells[label], 1))
    penalties = np.array([app.penalty for app in day.apps], dtype=np.float64)
    return ChosenForecast(tuple(options), np.array(history), penalties, worth, leads, prior_cells)


# ----------------------------------------------------------------------------- the simple hedge


@dataclass(frozen=True)
class QuantileForecaster:
    """The day's forecast corrected by today's level, plus a fixed relative margin per app and lead.

    Attributes:
        uplift: Shape (apps, T + 1): the relative margin at lead h (index h; index 0 unused).
        rho: The level correction's persistence.
        window: Observed slots the level correction reads.
    """

    uplift: np.ndarray
    rho: float = RHO
    window: int = WINDOW

    def forecast(self, forecast: np.ndarray, actual: np.ndarray, now: int, gpus: int) -> np.ndarray:
        """Forecast of slots ``now..T-1``, shape (apps, T - now)."""
        F = np.asarray(forecast, dtype=np.float64)
        T = F.shape[1]
        rows = []
        for i in range(F.shape[0]):
            seen = np.asarray(actual[i] if now else (), dtype=np.float64)
            ahead = level_corrected(F[i], seen, now, self.rho, self.window, 1.0)
            rows.append(ahead * (1.0 + self.uplift[i, 1 : T - now + 1]))
        out = np.array(rows).reshape(F.shape[0], T - now)
        return np.clip(np.round(out), 0, gpus).astype(np.int64)


def newsvendor_forecaster(days: Sequence[Scenario], day: Scenario, worth: float | None = None) -> QuantileForecaster:
    """The simple hedge: the corrected forecast plus the history's relative error at the newsvendor quantile.

    For each app, the past days are played as if live (the day's forecast standing in for theirs, as in
    :func:`choose_forecast`) and the relative errors of the corrected forecast at each lead are collected;
    the margin at lead ``h`` is their quantile at ``penalty / (penalty + worth)`` (:func:`newsvendor_ratio`),
    floored at 0 and never smaller at a longer lead. Without past days of an app, its margin is 0.

    Args:
        days: Past days of the cluster.
        day: The day being played.
        worth: The worth of a GPU-slot of work (default: :func:`work_worth`).
    """
    worth = work_worth(days, day) if worth is None else worth
    T = day.slots
    F = day.demand.astype(np.float64)
    uplift = np.zeros((len(day.apps), T + 1))
    for i, app in enumerate(day.apps):
        curves = past_curves([d for d in days if d.slots == T], app.name, T)
        if not len(curves):
            continue
        q = newsvendor_ratio(app.penalty, worth)
        errors: list[list[float]] = [[] for _ in range(T + 1)]
        for c in curves:
            for t in range(1, T):
                ahead = level_corrected(F[i], c, t, RHO, WINDOW, 1.0)
                for h, r in enumerate((c[t:] - ahead) / np.maximum(ahead, 1.0), start=1):
                    errors[h].append(float(r))
        for h in range(1, T + 1):
            if errors[h]:
                uplift[i, h] = max(0.0, float(np.quantile(errors[h], q)))
        uplift[i, 1:] = np.maximum.accumulate(uplift[i, 1:])
    return QuantileForecaster(uplift)
