"""Per-variant summary statistics of a tidy metrics table.

Follows mmtests' ``bin/lib/VMR/Stat.pm`` (``calc_mean``, ``calc_harmmean``,
``calc_geomean``, ``calc_stddev``, ``calc_coeffvar``) for the definitions, and
its compare modules for the default mean: throughput-like metrics (higher is
better) are summarised by the harmonic mean, everything else by the arithmetic
mean. Studies may override it (the teo util-awareness RFC reports gmeans).

Confidence intervals use Student's t distribution with n-1 degrees of freedom.
The interval of a harmonic or geometric mean is the t interval of the mean of
1/x or log(x), mapped back, so it always brackets the mean it belongs to.
"""

from __future__ import annotations

import math
from typing import Iterable, Literal

import numpy as np
import pandas as pd
from scipy import stats as sps

__all__ = [
    "MeanKind",
    "MEAN_KINDS",
    "GROUP_COLUMNS",
    "SUMMARY_COLUMNS",
    "default_mean",
    "mean_of",
    "describe",
    "mean_ci",
    "sample_sd",
    "summarise",
]

MeanKind = Literal["amean", "hmean", "gmean"]
MEAN_KINDS: tuple[str, ...] = ("amean", "hmean", "gmean")

#: identify one compared quantity (plus the variant it was measured on)
GROUP_COLUMNS = ["workload", "metric", "unit", "lower_is_better"]

#: columns of :func:`summarise`, in order
SUMMARY_COLUMNS = GROUP_COLUMNS + [
    "variant", "n", "amean", "hmean", "gmean", "stddev", "cv_pct",
    "ci_low", "ci_high", "min", "max",
]


def default_mean(lower_is_better: bool) -> MeanKind:
    """mmtests' choice: hmean for higher-is-better (rates), amean otherwise
    (:func:`lisa_ext.stats.compare.resolve_mean` also falls back to amean for a
    metric with a zero or negative value)."""
    return "amean" if lower_is_better else "hmean"

#: relative difference below which two measured values are the same value: a few ulps of a double
_ROUNDING = 1e-12


def _clean(values: Iterable[float]) -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    return arr[~np.isnan(arr)]


def sample_sd(values: Iterable[float]) -> float:
    """Sample standard deviation (n - 1); NaN below two values, 0 for values equal within rounding.

    Runs that measured the same thing can differ in their last bits (a rate computed as 15.7 * 3 / 3
    in one and 0.1 * 157 in another), and numpy gives even identical values a few ulps of spread
    through their mean: 1.8e-15 for three runs of 15.7, which a page printed as a spread and an
    interval widened by. Values within ``_ROUNDING`` of each other, relative to their size, are
    equal."""
    arr = _clean(values)
    if arr.size < 2:
        return math.nan
    if arr.max() - arr.min() <= _ROUNDING * float(np.abs(arr).max()):
        return 0.0
    return float(arr.std(ddof=1))


def mean_of(values: Iterable[float], kind: MeanKind) -> float:
    """Arithmetic, harmonic or geometric mean; NaN when undefined.

    The harmonic and geometric means need strictly positive values (as in
    mmtests, a non-positive sample makes them undefined rather than wrong).
    """
    arr = _clean(values)
    if arr.size == 0:
        return math.nan
    if kind == "amean":
        return float(arr.mean())
    if (arr <= 0).any():
        return math.nan
    if kind == "hmean":
        return float(arr.size / np.sum(1.0 / arr))
    if kind == "gmean":
        return float(np.exp(np.mean(np.log(arr))))
    raise ValueError(f"unknown mean kind {kind!r}; expected one of {MEAN_KINDS}")


def _t_halfwidth(arr: np.ndarray, confidence: float) -> float:
    n = arr.size
    if n < 2:
        return math.nan
    q = sps.t.ppf(0.5 + confidence / 2.0, n - 1)
    return float(q * sample_sd(arr) / math.sqrt(n))


def mean_ci(values: Iterable[float], kind: MeanKind = "amean",
            confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided t confidence interval of the chosen mean; (NaN, NaN) if n < 2."""
    arr = _clean(values)
    if kind == "amean":
        h = _t_halfwidth(arr, confidence)
        m = arr.mean() if arr.size else math.nan
        return (float(m - h), float(m + h))
    if arr.size < 2 or (arr <= 0).any():
        return (math.nan, math.nan)
    if kind == "gmean":
        logs = np.log(arr)
        h = _t_halfwidth(logs, confidence)
        return (float(np.exp(logs.mean() - h)), float(np.exp(logs.mean() + h)))
    if kind == "hmean":
        inv = 1.0 / arr
        h = _t_halfwidth(inv, confidence)
        lo_inv, hi_inv = inv.mean() - h, inv.mean() + h
        # a reciprocal interval reaching zero is unbounded above
        return (float(1.0 / hi_inv), float(1.0 / lo_inv) if lo_inv > 0 else math.inf)
    raise ValueError(f"unknown mean kind {kind!r}; expected one of {MEAN_KINDS}")


def describe(values: Iterable[float], confidence: float = 0.95) -> dict[str, float]:
    """n, the three means, stddev, coefficient of variation (%), CI of the amean, min, max."""
    arr = _clean(values)
    n = int(arr.size)
    amean = mean_of(arr, "amean")
    stddev = sample_sd(arr)
    ci_low, ci_high = mean_ci(arr, "amean", confidence)
    return {
        "n": n,
        "amean": amean,
        "hmean": mean_of(arr, "hmean"),
        "gmean": mean_of(arr, "gmean"),
        "stddev": stddev,
        "cv_pct": stddev * 100.0 / amean if n >= 2 and amean != 0 else math.nan,
        "ci_low": ci_low,
        "ci_high": ci_high,
        "min": float(arr.min()) if n else math.nan,
        "max": float(arr.max()) if n else math.nan,
    }


def summarise(metrics: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """One row per (workload, metric, variant) with :data:`SUMMARY_COLUMNS`.

    Rows keep the order in which workloads, metrics and variants first appear
    in ``metrics``, so the same table always gives the same summary.
    """
    rows = []
    keys = GROUP_COLUMNS + ["variant"]
    for key, group in metrics.groupby(keys, sort=False, dropna=False):
        row = dict(zip(keys, key))
        row.update(describe(group["value"], confidence))
        rows.append(row)
    out = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    out["n"] = out["n"].astype("int64")
    out["lower_is_better"] = out["lower_is_better"].astype(bool)
    return out
