"""Candidates raced over sampled futures: futures spent where the candidates are close.

The live planner weighs a handful of decisions for this slot by their value over the same sampled futures
(common random numbers: each future is drawn once and every candidate is scored in it, so that their
differences are paired). A fixed number of futures and a fixed bar either waste futures on candidates that
are plainly worse or leave a close call to chance. :func:`race` is a sequential rule in the manner of
successive halving and racing algorithms (Maron and Moore's Hoeffding races; Jamieson and Talwalkar 2016):

1. Every candidate is scored in the first ``first`` futures.
2. After each round, a challenger (any candidate but the base decision, index 0) whose paired gain over
   the base cannot clear the bar even at ``drop`` standard errors above its mean is dropped, and so
   is one whose upper bound lies below the leader's lower bound (both at ``drop`` standard errors).
3. If the leader clears the bar (its paired gain is above ``confidence`` standard errors, ``min_gain`` of
   the base's value and the ``min_share`` test) and no other challenger is left within reach of it, it is
   taken at once. Otherwise the futures double for the candidates left, up to ``most``.
4. At ``most`` futures the leader is taken if it clears the bar; else the base decision stands.

Every future a candidate is scored in is one all the survivors are scored in, so every comparison stays
paired. The bar is the old one (:func:`choose`); what changes is that a close call gets more futures.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> noise = rng.normal(0, 1, 64)
>>> table = np.array([10 + noise, 10.3 + noise + rng.normal(0, 0.5, 64)])  # a small, real gain
>>> race(lambda c, k: float(table[c, k]), 2, first=8, most=64).best
1
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

__all__ = ["RaceResult", "choose", "race"]


@dataclass(frozen=True)
class RaceResult:
    """What a race decided.

    Attributes:
        best: The candidate taken (0: the base decision).
        gain: Its mean paired gain over the base (0 for the base).
        se: That gain's standard error.
        futures: Futures the deciding comparison was made over.
        scored: Candidate-future evaluations spent.
        values: Shape (candidates, futures drawn): each evaluation (NaN where a candidate was dropped).
    """

    best: int
    gain: float
    se: float
    futures: int
    scored: int
    values: np.ndarray


def _bar(base_mean: float, se: np.ndarray, confidence: float, min_gain: float) -> np.ndarray:
    return np.maximum(confidence * se, min_gain * max(1.0, abs(base_mean)))


def critical(confidence: float, challengers: int, futures: int) -> float:
    """The bar in standard errors for one of ``challengers`` over ``futures`` paired futures.

    ``confidence`` standard errors of a normal mean fix the one-sided false-departure rate of one challenger
    (2: 2.3 %); it is shared among the challengers (Bonferroni), and read off Student's t with ``futures - 1``
    degrees of freedom (the Cornish-Fisher expansion), since the standard error is itself estimated from a
    handful of futures.

    >>> round(critical(2.0, 1, 10_000), 2), round(critical(2.0, 4, 8), 2), round(critical(2.0, 4, 16), 2)
    (2.0, 3.37, 2.88)
    """
    if challengers < 1 or futures < 2:
        return math.inf
    p = (1.0 - NormalDist().cdf(confidence)) / challengers
    z = NormalDist().inv_cdf(1.0 - p)
    v = futures - 1
    return z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)


def race(
    value: Callable[[int, int], float],
    candidates: int,
    *,
    first: int = 8,
    most: int = 32,
    confidence: float = 2.0,
    min_gain: float = 0.002,
    min_share: float = 0.0,
    corrected: bool = True,
    drop: float = 1.0,
) -> RaceResult:
    """Race ``candidates`` (index 0 the base decision) over futures; the module docstring says how.

    Args:
        value: ``value(c, k)``: candidate ``c``'s objective in future ``k`` (each pair asked once).
        candidates: How many (at least 1).
        first: Futures every candidate is scored in.
        most: Futures at the most.
        confidence: Standard errors of the paired gain a departure must clear.
        min_gain: ... and this share of the base's mean value (at least 1 in absolute value).
        min_share: ... and be at least as good as the base in this share of the futures.
        corrected: The bar is :func:`critical` (``confidence`` shared among the challengers of the first round,
            on Student's t); False: ``confidence`` standard errors as they are (the fixed rule's bar).
        drop: A challenger is dropped when its gain plus this many standard errors cannot clear the bar, or lies
            below the leader's gain less as many.
    """
    if candidates < 1 or first < 1 or most < first:
        raise ValueError("race: expected candidates >= 1 and 1 <= first <= most")
    values = np.full((candidates, most), np.nan)
    scored = 0
    alive = list(range(1, candidates))
    challengers = len(alive)
    n = first

    def fill(rows: list[int], upto: int) -> None:
        nonlocal scored
        for c in rows:
            for k in range(upto):
                if math.isnan(values[c, k]):
                    values[c, k] = value(c, k)
                    scored += 1

    while True:
        fill([0, *alive], n)
        if not alive:  # the base alone: nothing to race
            return RaceResult(0, 0.0, 0.0, n, scored, values[:, :n])
        base = values[0, :n]
        diffs = values[alive, :n] - base
        gain = diffs.mean(axis=1)
        se = diffs.std(axis=1, ddof=1) / math.sqrt(n) if n > 1 else np.full(len(alive), np.inf)
        sd = critical(confidence, challengers, n) if corrected else confidence
        bar = _bar(float(base.mean()), se, sd, min_gain)
        share = (diffs >= -1e-9).mean(axis=1)
        clears = (gain > bar + 1e-9) & (share >= min_share - 1e-9)
        lead = int(np.argmax(np.where(clears, gain, -np.inf))) if clears.any() else int(np.argmax(gain))
        upper = gain + drop * se
        lower_lead = gain[lead] - drop * se[lead]
        # a challenger that cannot clear the bar, or lies below the leader, is out
        keep = (upper > _bar(float(base.mean()), np.zeros_like(se), sd, min_gain) + 1e-9) & (
            (upper >= lower_lead - 1e-9) | (np.arange(len(alive)) == lead)
        )
        close = [i for i in range(len(alive)) if keep[i] and i != lead and upper[i] > gain[lead]]
        if n >= most or (clears[lead] and not close):
            if clears[lead]:
                return RaceResult(alive[lead], float(gain[lead]), float(se[lead]), n, scored, values[:, :n])
            if n >= most:
                return RaceResult(0, 0.0, 0.0, n, scored, values[:, :n])
        alive = [c for c, k in zip(alive, keep, strict=True) if k]
        if not alive:
            return RaceResult(0, 0.0, 0.0, n, scored, values[:, :n])
        n = min(most, 2 * n)


def choose(
    values: np.ndarray, confidence: float, min_gain: float, min_share: float | np.ndarray = 0.0
) -> tuple[int, float, float]:
    """The fixed-futures rule: the candidate whose paired gain over candidate 0 is largest and clears the bar.

    Args:
        values: Shape (candidates, futures): each candidate's objective in each future, candidate 0 the base.
        confidence: Standard errors of the paired gain a candidate must clear.
        min_gain: ... and this share of the base's mean value (of its absolute value, at least 1).
        min_share: ... and be at least as good as the base in this share of the futures (one share, or one
            per candidate after the base).

    Returns:
        (index, mean gain, its standard error); index 0, gain 0 when no candidate clears the bar.

    >>> import numpy as np
    >>> choose(np.array([[10.0, 10, 10, 10], [12, 11, 12, 11]]), 1.0, 0.01)[0]
    1
    >>> choose(np.array([[10.0, 10, 10, 10], [14, 7, 14, 7]]), 1.0, 0.01)[0]   # a gamble: mean +0.5, SE 1.7
    0
    """
    base = values[0]
    diffs = values[1:] - base
    n = values.shape[1]
    gain = diffs.mean(axis=1)
    se = diffs.std(axis=1, ddof=1) / math.sqrt(n) if n > 1 else np.full(diffs.shape[0], np.inf)
    bar = _bar(float(base.mean()), se, confidence, min_gain)
    clears = (gain > bar + 1e-9) & ((diffs >= -1e-9).mean(axis=1) >= min_share - 1e-9)
    if not clears.any():
        return 0, 0.0, 0.0
    i = int(np.argmax(np.where(clears, gain, -np.inf)))
    return i + 1, float(gain[i]), float(se[i])
