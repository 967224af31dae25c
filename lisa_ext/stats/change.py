"""Confidence interval of a % change between two independent samples.

A cover letter says "-12.3 % (95 % CI -15.1 .. -9.4 %)": how far the mean of the new
variant is from the baseline's, and how sure the runs make us. The interval is of the
*ratio* of the two means, minus one, so both samples' noise counts (dividing a
difference interval by the baseline mean would pretend the baseline is exact):

``amean``
    Fieller's interval for the ratio of two independent means (Fieller 1954): the
    ratios R for which ``new_mean - R * base_mean`` is not significantly different
    from zero, with Welch–Satterthwaite degrees of freedom. When the baseline's own
    mean is not significantly different from zero the set is unbounded: (-inf, inf).
``gmean``
    the Welch t interval of the difference of the mean logs, exponentiated: the
    interval of the ratio of the geometric means.
``hmean``
    Fieller's interval on the reciprocals: a harmonic mean is the reciprocal of the
    mean of 1/x, so the ratio of two is a ratio of two means of reciprocals.

With fewer than two values on either side there is no interval (NaN, NaN); with no
spread on both sides it is the point itself. :func:`pct_change_ci` takes the runs,
:func:`pct_change_ci_from_stats` a published mean, standard deviation and n.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np
from scipy import stats as sps

from lisa_ext.stats.summary import sample_sd

__all__ = ["pct_change_ci", "pct_change_ci_from_stats"]

_NO_INTERVAL = (math.nan, math.nan)


def _values(values: Iterable[float]) -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    return arr[~np.isnan(arr)]


def _welch_df(var_a: float, n_a: int, var_b: float, n_b: int) -> float:
    """Welch–Satterthwaite degrees of freedom of a sum of two mean variances (``var`` = sd²/n)."""
    denominator = var_a ** 2 / (n_a - 1) + var_b ** 2 / (n_b - 1)
    return (var_a + var_b) ** 2 / denominator if denominator > 0 else float(n_a + n_b - 2)


def _fieller_ratio(num_mean: float, num_sd: float, num_n: int, den_mean: float, den_sd: float,
                   den_n: int, confidence: float) -> tuple[float, float]:
    """Interval of ``num_mean / den_mean`` for two independent samples (Fieller)."""
    if num_n < 2 or den_n < 2 or den_mean == 0 or not all(
            math.isfinite(x) for x in (num_mean, num_sd, den_mean, den_sd)):
        return _NO_INTERVAL
    ratio = num_mean / den_mean
    var_num, var_den = num_sd ** 2 / num_n, den_sd ** 2 / den_n
    if var_num == 0 and var_den == 0:
        return ratio, ratio
    # degrees of freedom of num - R * den at the point estimate
    df = _welch_df(var_num, num_n, ratio ** 2 * var_den, den_n)
    t2 = sps.t.ppf(0.5 + confidence / 2.0, df) ** 2
    a = den_mean ** 2 - t2 * var_den
    if a <= 0:  # the denominator's mean is not significantly different from zero
        return -math.inf, math.inf
    half = math.sqrt(t2 * (den_mean ** 2 * var_num + num_mean ** 2 * var_den - t2 * var_num * var_den))
    return (num_mean * den_mean - half) / a, (num_mean * den_mean + half) / a


def _to_pct(interval: tuple[float, float]) -> tuple[float, float]:
    low, high = interval
    return (low - 1.0) * 100.0, (high - 1.0) * 100.0


def pct_change_ci_from_stats(base_mean: float, base_sd: float, base_n: int, new_mean: float,
                             new_sd: float, new_n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Interval (%) of the change of an arithmetic mean from summaries: Fieller's, as
    :func:`pct_change_ci` with ``kind="amean"``."""
    return _to_pct(_fieller_ratio(new_mean, new_sd, new_n, base_mean, base_sd, base_n, confidence))


def pct_change_ci(base: Iterable[float], new: Iterable[float], kind: str = "amean",
                  confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided ``confidence`` interval, in %, of the change of ``new``'s mean of kind
    ``kind`` (``amean``, ``hmean``, ``gmean``) over ``base``'s: the same change as
    :func:`lisa_ext.stats.compare.pct_change` of the two means. NaN, NaN with fewer than
    two values on a side, or non-positive values for hmean / gmean."""
    a, b = _values(base), _values(new)
    if a.size < 2 or b.size < 2:
        return _NO_INTERVAL
    if kind == "amean":
        return pct_change_ci_from_stats(float(a.mean()), sample_sd(a), a.size,
                                        float(b.mean()), sample_sd(b), b.size, confidence)
    if (a <= 0).any() or (b <= 0).any():
        return _NO_INTERVAL
    if kind == "hmean":
        # hmean_new / hmean_base = mean(1/base) / mean(1/new)
        inv_a, inv_b = 1.0 / a, 1.0 / b
        return _to_pct(_fieller_ratio(float(inv_a.mean()), sample_sd(inv_a), a.size,
                                      float(inv_b.mean()), sample_sd(inv_b), b.size, confidence))
    if kind == "gmean":
        log_a, log_b = np.log(a), np.log(b)
        diff = float(log_b.mean() - log_a.mean())
        var_a, var_b = sample_sd(log_a) ** 2 / a.size, sample_sd(log_b) ** 2 / b.size
        if var_a == 0 and var_b == 0:
            return _to_pct((math.exp(diff), math.exp(diff)))
        half = sps.t.ppf(0.5 + confidence / 2.0, _welch_df(var_a, a.size, var_b, b.size)) * math.sqrt(var_a + var_b)
        return _to_pct((math.exp(diff - half), math.exp(diff + half)))
    raise ValueError(f"unknown mean kind {kind!r}; expected amean, hmean or gmean")
