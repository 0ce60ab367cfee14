"""How live demand departs from the forecast: an error model fitted from past days, sampled into futures.

The live planner's futures (:mod:`agents.rolling.anticipate`) carry a demand path for every app as well as
arrivals. The path is the day's forecast times ``1 + e``, where ``e`` is each app's relative error, an AR(1)
process in the form the history shows and conditioned on what today has shown so far:

- **Level** ``sigma``: the root mean square of the relative error. The history gives a prior, each past
  day's curve against the mean of the past curves by slot (``(curve - profile) / max(profile, 1)``: a
  recorded day holds what happened, not what was forecast, so this is the day-to-day variation of the
  demand, an upper bound of a forecast's error); today's observed errors ``(A - F) / max(F, 1)`` before now
  update it, the prior counting as :data:`PRIOR_WEIGHT` observed slots. With an exact forecast the level
  falls towards 0 within hours, whatever the history says.
- **Persistence** ``rho``: the lag-one autocorrelation of the past days' relative deviations (clipped to
  ``[0, 0.95]``; :data:`DEFAULT_RHO` without a history).
- **Now**: the error of the last observed slots (the mean over :data:`WINDOW` slots) is the AR(1)
  process's last value, so that a path starts where the day is and its error fades with ``rho**h``.
- **Spread by lead**: the AR(1) conditional law, ``sd = sigma * sqrt(1 - rho**(2h))`` at lead ``h``; the
  paths are drawn whole (``e_s = rho e_(s-1) + sqrt(1 - rho**2) sigma z_s``), so that a high hour is
  followed by high hours as on a real day.

What it assumes: the error is multiplicative, the same law at every slot of the day, independent between
apps; a peak that comes early or late is seen as a level error that persists (no separate time shift).
Demand is rounded and clipped to ``[0, G]``.

>>> import numpy as np
>>> model = DemandModel(sigma_prior=np.array([0.0]), rho=np.array([0.8]))
>>> F = np.array([[4, 4, 4, 4]])
>>> model.level(F, np.array([[4, 4]]), 2).tolist()   # an exact forecast so far, no prior: no error
[0.0]
>>> model.sample(np.random.default_rng(0), F, np.array([[4, 4]]), 2, gpus=8).tolist()
[[4, 4]]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agents.rolling.forecast import observed_error_level, residual_error_level
from agents.rolling.history import past_curves, persistence, relative_deviations
from gpu_env.scenario import Scenario

PRIOR_WEIGHT = 4.0
"""How many observed slots the history's error level counts as."""
DEFAULT_RHO = 0.8
"""Persistence without a history (the noise model's, docs/rolling.md)."""
WINDOW = 2
"""Observed slots the error now is read from (:class:`agents.rolling.Corrector`'s window)."""
MAX_LEVEL = 1.0
"""Largest relative error level sampled."""


@dataclass(frozen=True)
class DemandModel:
    """Each app's relative demand error: prior level and persistence (module docstring).

    Attributes:
        sigma_prior: Shape (apps,): the history's error level per app (0: none; today's errors alone).
        rho: Shape (apps,): persistence per app.
        prior_weight: Observed slots the prior counts as.
        spread: How today's errors count: ``raw`` (their root mean square: a steady bias counts as noise) or
            ``residual`` (what the level correction leaves, :func:`agents.rolling.forecast.residual_error_level`;
            the bias is carried by the paths' starting error instead).
    """

    sigma_prior: np.ndarray
    rho: np.ndarray
    prior_weight: float = PRIOR_WEIGHT
    spread: str = "raw"

    @classmethod
    def fit(cls, days: Sequence[Scenario], day: Scenario) -> DemandModel:
        """The model of ``day``'s apps from past ``days`` (the day's own curves are not read).

        An app with fewer than two past curves has no prior level (0) and the default persistence.
        """
        same = [d for d in days if d.slots == day.slots]
        n = len(day.apps)
        sigma = np.zeros(n)
        rho = np.full(n, DEFAULT_RHO)
        for i, app in enumerate(day.apps):
            c = past_curves(same, app.name, day.slots)
            if len(c) < 2:
                continue
            dev = relative_deviations(c)
            sigma[i] = min(MAX_LEVEL, float(np.sqrt(np.mean(dev**2))))
            rho[i] = persistence(dev, default=DEFAULT_RHO)
        return cls(sigma, rho)

    @classmethod
    def observed_only(cls, apps: int) -> DemandModel:
        """No history: the level is today's observed error alone, the persistence the default."""
        return cls(np.zeros(apps), np.full(apps, DEFAULT_RHO))

    def level(self, forecast: np.ndarray, observed: np.ndarray, now: int) -> np.ndarray:
        """Each app's error level at slot ``now``: the prior and the errors observed before ``now`` mixed.

        Args:
            forecast: The day's forecast, shape (apps, T) (columns before ``now`` are read).
            observed: The actual demand of slots before ``now``, shape (apps, now) or wider.
            now: The slot of the day.
        """
        if self.spread == "residual":
            out = residual_error_level(
                forecast, observed, now, self.rho, WINDOW, MAX_LEVEL, self.sigma_prior, self.prior_weight
            )
        else:
            out = observed_error_level(forecast, observed, now, self.sigma_prior, self.prior_weight)
        return np.minimum(out, MAX_LEVEL)

    def error_now(self, forecast: np.ndarray, observed: np.ndarray, now: int) -> np.ndarray:
        """Each app's relative error over the last :data:`WINDOW` observed slots (0 before anything is seen)."""
        if now == 0:
            return np.zeros(forecast.shape[0])
        lo = max(0, now - WINDOW)
        seen_f = np.asarray(forecast, dtype=np.float64)[:, lo:now].sum(axis=1)
        seen_a = np.asarray(observed, dtype=np.float64)[:, lo:now].sum(axis=1)
        e = np.divide(seen_a - seen_f, seen_f, out=np.zeros_like(seen_f), where=seen_f > 0)
        return np.clip(e, -1.0, MAX_LEVEL)

    def uncertain(self, forecast: np.ndarray, observed: np.ndarray, now: int) -> bool:
        """Whether any app's demand ahead is uncertain (otherwise every path is the corrected forecast)."""
        return bool(np.any(self.level(forecast, observed, now) > 0))

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
        apps, T = F.shape
        sigma = self.level(F, observed, now)
        e = self.error_now(F, observed, now)
        rho = np.asarray(self.rho, dtype=np.float64)
        z = rng.standard_normal((apps, T - now))
        path = np.empty((apps, T - now))
        innovation = sigma * np.sqrt(1.0 - rho**2)
        for h in range(T - now):
            e = rho * e + innovation * z[:, h]
            path[:, h] = e
        return np.clip(np.round(F[:, now:] * (1.0 + path)), 0, gpus).astype(np.int64)
