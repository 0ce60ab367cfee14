"""Forecast error: actual real-time demand drawn around the forecast, and the forecast corrected by what is observed.

:class:`NoiseModel` draws the day's actual demand (a time shift and a
persistent relative error); :func:`with_demand` puts demand curves into a
scenario; :class:`Corrector` is what the rolling planner sees at each slot: the
forecast of the slots ahead, corrected by the demand observed so far and raised
by a safety margin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import numpy as np

from gpu_env.scenario import Scenario, ScenarioError

ERROR_RHO = 0.8
"""The demand error's persistence where nothing measured says otherwise: the noise model's, the corrector's, the
hedges' and the error model's without a history (one value, stated once)."""
ERROR_WINDOW = 2
"""Observed slots today's error is read over (the corrector's level correction, the error model's error now)."""
PRIOR_WEIGHT = 4.0
"""Observed slots a prior error level counts as, wherever one is mixed with today's errors."""

# ----------------------------------------------------------------------------- the noise model


@dataclass(frozen=True)
class NoiseModel:
    """How actual real-time demand departs from the forecast.

    For each app, independently: a time shift ``tau ~ N(0, (shift * sigma)^2)``
    slots (the forecast curve is read at ``t - tau`` by linear interpolation,
    held flat past the ends), then a multiplicative error ``1 + e_t`` with
    ``e_0 ~ N(0, sigma^2)`` and ``e_t = rho * e_{t-1} + sqrt(1 - rho^2) * sigma * z_t``
    (a stationary AR(1) process). The result is rounded and clipped to ``[0, G]``.

    Attributes:
        sigma: Standard deviation of the relative error (0: the forecast is exact).
        rho: Slot-to-slot persistence of the error (0.8: about five slots of memory).
        shift: Standard deviation of the time shift, in slots per unit of sigma.
    """

    sigma: float = 0.0
    rho: float = ERROR_RHO
    shift: float = 4.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise ValueError(f"forecast error sigma must be a number >= 0, got {self.sigma}")
        if not 0 <= self.rho < 1:
            raise ValueError(f"rho must lie in [0, 1), got {self.rho}")
        if not (math.isfinite(self.shift) and self.shift >= 0):
            raise ValueError(f"shift must be a number >= 0, got {self.shift}")

    def draw(self, scenario: Scenario, seed: int) -> np.ndarray:
        """Actual demand around the scenario's forecast, shape (apps, T); the same seed gives the same curves."""
        rng = np.random.default_rng(seed)
        T = scenario.slots
        forecast = scenario.demand.astype(np.float64)
        out = np.zeros_like(forecast, dtype=np.int64)
        slots = np.arange(T, dtype=np.float64)
        for i in range(forecast.shape[0]):
            tau = rng.normal(0.0, self.shift * self.sigma)
            shifted = np.interp(slots - tau, slots, forecast[i])
            z = rng.normal(0.0, 1.0, T)
            e = np.empty(T)
            e[0] = self.sigma * z[0]
            for t in range(1, T):
                e[t] = self.rho * e[t - 1] + math.sqrt(1 - self.rho**2) * self.sigma * z[t]
            out[i] = np.clip(np.round(shifted * (1.0 + e)), 0, scenario.gpus).astype(np.int64)
        return out


def with_demand(scenario: Scenario, demand: np.ndarray, name: str | None = None) -> Scenario:
    """The scenario with other demand curves (``initial`` kept: the state before slot 0 is what it is)."""
    demand = np.asarray(demand, dtype=np.int64)
    if demand.shape != (len(scenario.apps), scenario.slots):
        raise ValueError(f"demand must have shape {(len(scenario.apps), scenario.slots)}, got {demand.shape}")
    if (demand < 0).any():
        raise ValueError("demand must be non-negative")
    apps = tuple(replace(app, demand=tuple(int(x) for x in demand[i])) for i, app in enumerate(scenario.apps))
    return replace(scenario, name=name or scenario.name, apps=apps)


def as_recorded(scenario: Scenario, actual: np.ndarray, name: str | None = None) -> Scenario:
    """A day as a cluster's log holds it.

    Each app's ``demand`` is what came (``actual``), its ``forecast`` the scenario's demand (the forecast made for
    the day).
    """
    day = with_demand(scenario, actual, name)
    apps = tuple(replace(app, forecast=before.demand) for app, before in zip(day.apps, scenario.apps, strict=True))
    return replace(day, apps=apps)


def day_forecast(day: Scenario) -> np.ndarray | None:
    """A recorded day's forecast, shape (apps, T); None when any app lacks one."""
    if not day.apps or any(app.forecast is None for app in day.apps):
        return None
    return np.array([app.forecast for app in day.apps], dtype=np.int64).reshape(len(day.apps), day.slots)


def replayed(day: Scenario, source: str = "<day>") -> tuple[Scenario, np.ndarray]:
    """A recorded day split for playing it again live: the day as forecast, and the demand that came.

    The first is the day with each app's ``demand`` set to its recorded ``forecast`` (what a planner is told; the
    ``forecast`` field itself dropped), the second each app's recorded ``demand``, shape (apps, T).

    Raises:
        ScenarioError: An app without a recorded forecast (names ``source`` and the field).
    """
    for i, app in enumerate(day.apps):
        if app.forecast is None:
            raise ScenarioError(source, f"realtime[{i}].forecast", "a replayed day must carry the forecast made for it")
    actual = day.demand
    apps = tuple(replace(app, demand=app.forecast, forecast=None) for app in day.apps)
    return replace(day, apps=apps), actual


def actual_of(day: Scenario, actual: Scenario, source: str = "<actual>") -> np.ndarray:
    """The demand that came, read from ``actual`` (a scenario of the same apps and slots as ``day``), shape (apps, T).

    Raises:
        ScenarioError: Another number of slots or other apps (names ``source`` and the field).
    """
    if actual.slots != day.slots:
        raise ScenarioError(source, "horizon.slots", f"expected the played day's {day.slots} slots, got {actual.slots}")
    names = [app.name for app in day.apps]
    theirs = [app.name for app in actual.apps]
    if sorted(names) != sorted(theirs):
        raise ScenarioError(source, "realtime", f"expected the played day's apps {names}, got {theirs}")
    by_name = {app.name: app.demand for app in actual.apps}
    return np.array([by_name[n] for n in names], dtype=np.int64).reshape(len(names), day.slots)


# ----------------------------------------------------------------------------- forecast correction


def observed_error_level(
    forecast: np.ndarray, actual: np.ndarray, now: int, prior: float | np.ndarray = 0.0, weight: float = PRIOR_WEIGHT
) -> np.ndarray:
    """Each app's root-mean-square relative error ``(actual - forecast) / max(forecast, 1)`` before ``now``.

    A prior level (one for every app, or one per app; 0: none) counts as ``weight`` observed slots; an app
    with no prior and nothing observed has level 0.

    Args:
        forecast: The day's forecast, shape (apps, T) (columns before ``now`` are read).
        actual: The demand observed before ``now``, shape (apps, now) or wider.
        now: Slots observed.
        prior: The prior level.
        weight: How many observed slots the prior counts as.
    """
    F = np.asarray(forecast, dtype=np.float64)[:, :now]
    errors = (np.asarray(actual, dtype=np.float64)[:, :now] - F) / np.maximum(F, 1.0)
    prior = np.broadcast_to(np.asarray(prior, dtype=np.float64), (F.shape[0],))
    w = np.where(prior > 0, weight, 0.0)
    total = w + now
    squares = w * prior**2 + (errors**2).sum(axis=1)
    return np.sqrt(np.divide(squares, total, out=np.zeros_like(squares), where=total > 0))


def residual_error_level(
    forecast: np.ndarray,
    actual: np.ndarray,
    now: int,
    rho: float | np.ndarray = ERROR_RHO,
    window: int = ERROR_WINDOW,
    limit: float = 1.0,
    prior: float | np.ndarray = 0.0,
    weight: float = PRIOR_WEIGHT,
) -> np.ndarray:
    """Each app's error level after the level correction: what the corrected forecast still misses.

    At every observed slot ``s >= 1`` the ratio correction made at ``s`` (:class:`Corrector`) predicts the
    relative error ``e_s = (A_s - F_s) / max(F_s, 1)`` as ``rho * (sum A / sum F - 1)`` over the ``window``
    slots before ``s``; the residual is ``e_s`` less that prediction: the AR(1) innovation. Its root mean
    square, divided by ``sqrt(1 - rho**2)``, is the stationary level the margin scales by lead
    (``sigma * sqrt(1 - rho**(2h))`` is then exactly the innovations' spread at lead ``h``). A steady bias,
    which the correction removes, no longer counts: on a day whose demand runs at half the forecast the raw
    level is 0.5 and this one half of it, most of that the first slot's error. Slot 0, whose error no correction
    could have seen, counts as it is. The prior (one, or one per app; 0: none) counts as ``weight`` observed slots.

    >>> import numpy as np
    >>> F = np.array([[8, 8, 8, 8, 8, 8]])
    >>> A = np.array([[4, 4, 4, 4, 4, 4]])                      # half the forecast, every slot
    >>> round(float(observed_error_level(F, A, 6)[0]), 3), round(float(residual_error_level(F, A, 6)[0]), 3)
    (0.5, 0.255)
    """
    F = np.asarray(forecast, dtype=np.float64)[:, :now]
    A = np.asarray(actual, dtype=np.float64)[:, :now]
    apps = F.shape[0]
    prior = np.broadcast_to(np.asarray(prior, dtype=np.float64), (apps,))
    rho_ = np.broadcast_to(np.asarray(rho, dtype=np.float64), (apps,))
    w = np.where(prior > 0, weight, 0.0)
    squares = w * prior**2
    if now > 0:
        errors = (A - F) / np.maximum(F, 1.0)
        squares = squares + errors[:, 0] ** 2
        if now > 1:
            scale = 1.0 / np.maximum(1.0 - rho_**2, 1e-6)
            zero = np.zeros((apps, 1))
            cf, ca = np.hstack([zero, np.cumsum(F, axis=1)]), np.hstack([zero, np.cumsum(A, axis=1)])
            s = np.arange(1, now)
            lo = np.maximum(0, s - window)
            seen_f, seen_a = cf[:, s] - cf[:, lo], ca[:, s] - ca[:, lo]
            ratio = np.divide(seen_a, seen_f, out=np.ones_like(seen_f), where=seen_f > 0) - 1.0
            predicted = rho_.reshape(-1, 1) * np.clip(ratio, -1.0, limit)
            squares = squares + scale * ((errors[:, 1:] - predicted) ** 2).sum(axis=1)
    total = w + now
    return np.sqrt(np.divide(squares, total, out=np.zeros_like(squares), where=total > 0))


class Spread(StrEnum):
    """What a :class:`Corrector`'s margin is a multiple of."""

    RAW = "raw"  # the root mean square of the raw relative errors (a steady bias counts)
    RESIDUAL = "residual"  # ... of what the level correction leaves (:func:`residual_error_level`)


class Correction(StrEnum):
    """How a :class:`Corrector` turns the error seen so far into a forecast."""

    RATIO = "ratio"  # scale the forecast by the observed actual / forecast
    BIAS = "bias"  # shift it by the observed difference
    NONE = "none"  # the forecast unchanged, no margin


@dataclass(frozen=True)
class Corrector:
    """The forecast the planner sees at slot t, corrected by the demand observed in slots before t.

    ``ratio`` (default): the relative error over the last ``window`` observed
    slots, ``e = sum(actual) / sum(forecast) - 1`` clipped to ``[-1, limit]``,
    is carried forward with the noise model's persistence: slot ``s >= t`` is
    forecast as ``F_s * (1 + rho**(s - t + 1) * e)``. Where the forecast of
    those slots is 0 the error is taken as a difference instead
    (``F_s + rho**(s - t + 1) * mean(actual - forecast)``). ``bias`` always uses
    the difference; ``none`` keeps the forecast.

    A safety margin then raises the forecast of lead ``h = s - t + 1`` by
    ``margin * sigma_hat * sqrt(1 - rho**(2h))`` of itself, where ``sigma_hat``
    is the root mean square of the relative errors observed so far
    (``(actual - forecast) / max(forecast, 1)`` over slots before t): the
    planner learns how wrong the forecast is and keeps that much head-room, more
    for slots further ahead. Shortfall costs the penalty, a reserved idle GPU at
    most a job's worth, so erring high is cheaper (the newsvendor's argument).
    Without a prior the margin is 0 until something is observed; with
    ``prior_sigma`` (an error level known from history) it counts as
    ``prior_weight`` observed slots, and before any observation the margin is
    ``margin * prior_sigma`` at every lead.

    With ``spread="residual"`` the error level is :func:`residual_error_level`'s: what the level
    correction leaves, so that a day running steadily below (or above) the forecast is corrected, not also
    hedged against.

    Attributes:
        method: ``ratio``, ``bias`` or ``none`` (``none``: the forecast unchanged, no margin).
        rho: Persistence assumed for the error (the noise model's).
        window: Observed slots the error is estimated from.
        limit: Largest relative error carried forward.
        margin: Safety margin in standard deviations of the error (0: none).
        prior_sigma: Relative error level known before the day (0: none).
        prior_weight: How many observed slots the prior counts as.
        spread: ``raw`` (as shipped to rolling) or ``residual``: the error level the margin multiplies.
        errors: The live planner's error model (:class:`agents.live.error_model.ErrorModel`): when given, the margin
            multiplies its level (the history's recorded error as the prior, today's errors mixed in) instead.
    """

    method: Correction = Correction.RATIO
    rho: float = ERROR_RHO
    window: int = ERROR_WINDOW
    limit: float = 1.0
    margin: float = 1.0
    prior_sigma: float = 0.0
    prior_weight: float = PRIOR_WEIGHT
    spread: Spread = Spread.RAW
    errors: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.method not in tuple(Correction):
            raise ValueError(f"unknown correction {self.method!r} (expected ratio, bias or none)")
        if self.spread not in tuple(Spread):
            raise ValueError(f"unknown spread {self.spread!r} (expected raw or residual)")
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise ValueError(f"margin: expected a number >= 0, got {self.margin}")
        object.__setattr__(self, "method", Correction(self.method))
        object.__setattr__(self, "spread", Spread(self.spread))

    def error_level(self, forecast: np.ndarray, actual: np.ndarray, now: int) -> np.ndarray:
        """Each app's root-mean-square relative error, ``(actual - forecast) / max(forecast, 1)`` before ``now``.

        With ``prior_sigma`` the prior counts as ``prior_weight`` observed slots; with nothing observed
        and no prior it is 0.

        Args:
            forecast: The day's forecast, shape (apps, T).
            actual: The demand observed in the slots before ``now``, shape (apps, now) or wider (columns
                ``>= now`` are not read).
            now: The slot being planned.
        """
        if self.errors is not None:
            return np.asarray(self.errors.level(forecast, actual, now), dtype=np.float64)
        if self.spread == Spread.RESIDUAL:
            return residual_error_level(
                forecast, actual, now, self.rho, self.window, self.limit, self.prior_sigma, self.prior_weight
            )
        return observed_error_level(forecast, actual, now, self.prior_sigma, self.prior_weight)

    def forecast(self, forecast: np.ndarray, actual: np.ndarray, now: int, gpus: int) -> np.ndarray:
        """Forecast of slots ``now..T-1``, shape (apps, T - now), from the actual demand of slots before ``now``.

        Args:
            forecast: The day's forecast, shape (apps, T).
            actual: The demand observed in the slots before ``now``, shape (apps, now) or wider (columns
                ``>= now`` are not read).
            now: The slot being planned.
            gpus: G, the largest allocation.
        """
        F = forecast.astype(np.float64)
        ahead = F[:, now:]
        if self.method == "none":
            return np.clip(np.round(ahead), 0, gpus).astype(np.int64)
        if now == 0:
            level = self.error_level(F, actual, 0)  # nothing observed: the prior (the error model's, or prior_sigma)
            raised = ahead * (1.0 + self.margin * level.reshape(-1, 1))
            return self._integral(raised, gpus)
        lo = max(0, now - self.window)
        seen_f = F[:, lo:now].sum(axis=1)
        seen_a = actual[:, lo:now].astype(np.float64).sum(axis=1)
        lead = np.arange(1, ahead.shape[1] + 1)
        decay = self.rho**lead
        out = np.empty_like(ahead)
        level = self.error_level(F, actual, now) if self.margin > 0 else np.zeros(F.shape[0])
        for i in range(F.shape[0]):
            if self.method == "ratio" and seen_f[i] > 0:
                e = min(self.limit, max(-1.0, seen_a[i] / seen_f[i] - 1.0))
                out[i] = ahead[i] * (1.0 + decay * e)
            else:
                bias = (seen_a[i] - seen_f[i]) / (now - lo)
                out[i] = ahead[i] + decay * bias
            if self.margin > 0:
                out[i] = out[i] * (1.0 + self.margin * level[i] * np.sqrt(1.0 - self.rho ** (2 * lead)))
        return self._integral(out, gpus)

    def _integral(self, values: np.ndarray, gpus: int) -> np.ndarray:
        return np.clip(np.round(values), 0, gpus).astype(np.int64)
