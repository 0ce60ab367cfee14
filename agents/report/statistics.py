"""Small statistics for paired comparisons over seeds: the 95 % t quantile and a mean with its confidence interval."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

# Two-sided 95 % Student t quantiles by degrees of freedom (larger: the normal 1.96).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
_T95.update({11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 19: 2.093, 24: 2.064, 29: 2.045})


def t95(n: int) -> float:
    """The two-sided 95 % t quantile for a mean of n values (``n - 1`` degrees of freedom)."""
    df = n - 1
    if df < 1:
        return float("nan")
    if df in _T95:
        return _T95[df]
    known = sorted(k for k in _T95 if k <= df)
    return _T95[known[-1]] if df < 30 else 1.96


def mean_ci(values: Iterable[float]) -> tuple[float, float]:
    """Mean and half-width of its 95 % confidence interval (t distribution; nan for one value)."""
    x = np.asarray(list(values), dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan")
    if x.size == 1:
        return float(x[0]), float("nan")
    return float(x.mean()), float(t95(x.size) * x.std(ddof=1) / math.sqrt(x.size))
