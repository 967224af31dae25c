"""Compare variants against a baseline: mean, % change and significance per metric.

The % change follows mmtests' ``pdiff``: ``(new - base) / base * 100``. It is
given raw (``pct_change``, what Markdown/LKP tables print) and sign-normalised
(``pct_change_better``: positive means better, mmtests' ``pndiff`` convention
for lower-is-better metrics, what the mmtests table prints).

A comparison with fewer than :data:`MIN_ITERATIONS` runs on either side is
flagged ``too_few`` and never marked significant, whatever its p-value.

``pct_ci_low`` / ``pct_ci_high`` bound the raw % change at the comparison's
confidence (:mod:`lisa_ext.stats.change`: Fieller's interval of the ratio of the
two means, both samples' noise counted); NaN with fewer than two runs a side.
"""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from lisa_ext.errors import UserError
from lisa_ext.stats.change import pct_change_ci, pct_change_ci_from_stats
from lisa_ext.stats.summary import (
    GROUP_COLUMNS, MEAN_KINDS, default_mean, describe, mean_ci, mean_of,
)
from lisa_ext.stats.tests import DEFAULT_TEST, TESTS, Sample, p_value

__all__ = [
    "MIN_ITERATIONS",
    "COMPARISON_COLUMNS",
    "pct_change",
    "pct_change_better",
    "resolve_mean",
    "compare",
    "compare_summaries",
]

MIN_ITERATIONS = 3

COMPARISON_COLUMNS = GROUP_COLUMNS + [
    "variant", "is_baseline", "n", "mean_kind", "mean", "ci_low", "ci_high",
    "amean", "hmean", "gmean", "stddev", "cv_pct", "min", "max",
    "baseline_mean", "pct_change", "pct_change_better", "pct_ci_low", "pct_ci_high",
    "test", "alpha", "p_value", "significant", "too_few",
]


def pct_change(new: float, base: float) -> float:
    """Raw % change of ``new`` over ``base``; 0 when equal, NaN when base is 0."""
    if new == base:
        return 0.0
    if base == 0 or not (math.isfinite(new) and math.isfinite(base)):
        return math.nan
    return (new - base) * 100.0 / base


def pct_change_better(new: float, base: float, lower_is_better: bool) -> float:
    """% change signed so that positive is an improvement."""
    raw = pct_change(new, base)
    return -raw if lower_is_better and raw != 0 else raw


def resolve_mean(mean: str, lower_is_better: bool, all_positive: bool = True) -> str:
    """``auto``: hmean for higher-is-better metrics, amean otherwise, and amean
    too when some value is zero or negative (an hmean is then undefined)."""
    if mean == "auto":
        return default_mean(lower_is_better) if all_positive else "amean"
    if mean not in MEAN_KINDS:
        raise UserError(f"unknown mean {mean!r}; expected auto or one of {', '.join(MEAN_KINDS)}")
    return mean


def _check_args(test: str, alpha: float) -> None:
    if test not in TESTS:
        raise UserError(f"unknown test {test!r}; expected one of {', '.join(TESTS)}")
    if not 0 < alpha < 1:
        raise UserError(f"alpha must be between 0 and 1, got {alpha}")


def _variant_order(present: Sequence[str], baseline: str,
                   variants: Sequence[str] | None) -> list[str]:
    if baseline not in present:
        raise UserError(f"baseline variant {baseline!r} is not in the table; "
                        f"variants are: {', '.join(present)}")
    if variants is None:
        return [baseline] + [v for v in present if v != baseline]
    unknown = [v for v in variants if v not in present]
    if unknown:
        raise UserError(f"unknown variant(s) {', '.join(unknown)}; "
                        f"variants are: {', '.join(present)}")
    return [baseline] + [v for v in variants if v != baseline]


def _change_ci(base: Sample, new: Sample, kind: str, confidence: float) -> tuple[float, float]:
    if base.values is not None and new.values is not None:
        return pct_change_ci(base.values, new.values, kind, confidence)
    if kind != "amean":  # a published hmean/gmean comes without the spread of 1/x or log x
        return math.nan, math.nan
    return pct_change_ci_from_stats(base.mean, base.stddev, base.n, new.mean, new.stddev, new.n,
                                    confidence)


def _rows(groups: dict, order: list[str], baseline: str, mean: str, test: str,
          alpha: float, kinds: dict | None = None, confidence: float = 0.95) -> pd.DataFrame:
    """``groups``: (workload, metric, unit, lib) -> {variant: (stats dict, Sample)};
    ``kinds``: the mean kind per group when not simply resolved from ``mean``."""
    rows = []
    for key, by_variant in groups.items():
        lower_is_better = bool(key[3])
        kind = (kinds or {}).get(key) or resolve_mean(mean, lower_is_better)
        base = by_variant.get(baseline)
        for variant in order:
            if variant not in by_variant:
                continue
            stats, sample = by_variant[variant]
            row = dict(zip(GROUP_COLUMNS, key))
            row.update(variant=variant, is_baseline=variant == baseline, mean_kind=kind)
            row.update(stats)
            row["mean"] = sample.mean
            row["too_few"] = stats["n"] < MIN_ITERATIONS
            row["test"], row["alpha"] = test, alpha
            if base is None:
                row.update(baseline_mean=math.nan, pct_change=math.nan,
                           pct_change_better=math.nan, pct_ci_low=math.nan, pct_ci_high=math.nan,
                           p_value=math.nan, significant=False)
            else:
                bstats, bsample = base
                row["baseline_mean"] = bsample.mean
                row["pct_change"] = pct_change(sample.mean, bsample.mean)
                row["pct_change_better"] = pct_change_better(sample.mean, bsample.mean,
                                                             lower_is_better)
                row["too_few"] = row["too_few"] or bstats["n"] < MIN_ITERATIONS
                if variant == baseline:
                    row["pct_ci_low"] = row["pct_ci_high"] = math.nan
                    row["p_value"], row["significant"] = math.nan, False
                else:
                    row["pct_ci_low"], row["pct_ci_high"] = _change_ci(bsample, sample, kind, confidence)
                    p = p_value(test, bsample, sample)
                    row["p_value"] = p
                    row["significant"] = bool(not row["too_few"] and math.isfinite(p) and p < alpha)
            rows.append(row)
    out = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    out["n"] = out["n"].astype("int64")
    for col in ("lower_is_better", "is_baseline", "significant", "too_few"):
        out[col] = out[col].astype(bool)
    return out


def compare(metrics: pd.DataFrame, baseline: str, *, test: str = DEFAULT_TEST,
            mean: str = "auto", alpha: float = 0.05, confidence: float = 0.95,
            variants: Sequence[str] | None = None) -> pd.DataFrame:
    """Compare every variant of a tidy metrics table with ``baseline``.

    Returns one row per (workload, metric, variant) with :data:`COMPARISON_COLUMNS`;
    ``mean`` is the mean of kind ``mean_kind`` (``auto``: hmean when higher is
    better, else amean) and ``ci_low``/``ci_high`` its t confidence interval.
    """
    _check_args(test, alpha)
    present = list(dict.fromkeys(metrics["variant"]))
    order = _variant_order(present, baseline, variants)
    positive = metrics.groupby(GROUP_COLUMNS, sort=False, dropna=False)["value"].agg(
        lambda v: bool((v.dropna() > 0).all()))
    groups: dict = {}
    for key, group in metrics.groupby(GROUP_COLUMNS + ["variant"], sort=False, dropna=False):
        *gkey, variant = key
        values = group["value"].dropna().to_numpy(dtype=float)
        kind = resolve_mean(mean, bool(gkey[3]), positive[tuple(gkey)])
        stats = describe(values, confidence)
        stats["ci_low"], stats["ci_high"] = mean_ci(values, kind, confidence)
        sample = Sample(mean=mean_of(values, kind), stddev=stats["stddev"], n=stats["n"],
                        values=tuple(values), amean=stats["amean"])
        groups.setdefault(tuple(gkey), {})[variant] = (stats, sample)
    return _rows(groups, order, baseline, mean, test, alpha,
                 kinds={k: resolve_mean(mean, bool(k[3]), v) for k, v in positive.items()},
                 confidence=confidence)


def compare_summaries(summary: pd.DataFrame, baseline: str, *, test: str = DEFAULT_TEST,
                      mean: str = "auto", alpha: float = 0.05,
                      variants: Sequence[str] | None = None) -> pd.DataFrame:
    """Compare from published summaries instead of raw runs.

    ``summary`` has the :data:`~lisa_ext.stats.summary.GROUP_COLUMNS`, ``variant``,
    ``n`` and the mean column(s) (``amean``/``hmean``/``gmean``) the chosen mean
    needs; ``stddev`` is optional. Only tests that work from summaries
    (``welch``, ``mmtests``) can give a p-value; the others give NaN.
    """
    _check_args(test, alpha)
    present = list(dict.fromkeys(summary["variant"]))
    order = _variant_order(present, baseline, variants)
    groups: dict = {}
    for rec in summary.to_dict("records"):
        gkey = tuple(rec[c] for c in GROUP_COLUMNS)
        kind = resolve_mean(mean, bool(rec["lower_is_better"]))
        if kind not in rec or rec[kind] is None or pd.isna(rec[kind]):
            raise UserError(f"{rec['workload']}/{rec['metric']}/{rec['variant']}: "
                            f"summary has no {kind} value")
        stats = {c: rec.get(c, math.nan) for c in
                 ("amean", "hmean", "gmean", "stddev", "cv_pct", "min", "max")}
        stats["n"] = int(rec["n"])
        stats["ci_low"] = stats["ci_high"] = math.nan
        sample = Sample(mean=float(rec[kind]), stddev=float(stats["stddev"]), n=stats["n"],
                        amean=None if pd.isna(stats["amean"]) else float(stats["amean"]))
        groups.setdefault(gkey, {})[rec["variant"]] = (stats, sample)
    return _rows(groups, order, baseline, mean, test, alpha)
