"""Whether a rerun of a campaign says what the first run said, row by row.

The same comparison (:func:`~lisa_ext.stats.compare.compare`, every variant against one
baseline) in two metrics tables: the first run and its rerun (another day, another host's load,
another board of the same kind). For each (workload, metric, variant) both hold, the baseline's
own rows left out: each run's % change against the baseline with its confidence interval and its
verdict (:func:`~lisa_ext.stats.cover.verdict`), whether the verdicts are the same, whether each
run's estimate lies inside the other's interval, and how far apart the two estimates are, in
percentage points. A row only one run holds is kept, its other run's columns empty (``in_runs``
says which).
"""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from lisa_ext.stats.compare import compare
from lisa_ext.stats.cover import with_verdicts
from lisa_ext.stats.summary import GROUP_COLUMNS
from lisa_ext.stats.tests import DEFAULT_TEST

__all__ = ["RERUN_COLUMNS", "rerun_summary", "rerun_table"]

_KEY = GROUP_COLUMNS + ["variant"]
_PER_RUN = ["pct_change", "pct_ci_low", "pct_ci_high", "verdict", "n"]
#: columns of :func:`rerun_table`, in order
RERUN_COLUMNS = _KEY + ["in_runs"] + [f"{c}_{run}" for run in ("first", "second") for c in _PER_RUN] + [
    "same_verdict", "first_in_second", "second_in_first", "difference_points"]
_IN_RUNS = {"both": "both", "left_only": "first only", "right_only": "second only"}


#: how far outside an interval an estimate may fall and still be in it: equal runs give an interval
#: [x, x] whose ends the arithmetic puts a few ulps from the estimate x
_ROUNDING = 1e-9


def _inside(value: float, low: float, high: float) -> bool:
    if any(math.isnan(x) for x in (value, low, high)):
        return False
    slack = _ROUNDING * max(1.0, abs(value))
    return low - slack <= value <= high + slack


def _has_interval(low: float, high: float) -> bool:
    return not (math.isnan(low) or math.isnan(high))


def rerun_table(first: pd.DataFrame, second: pd.DataFrame, baseline: str, *, test: str = DEFAULT_TEST,
                mean: str = "auto", alpha: float = 0.05, confidence: float = 0.95,
                variants: Sequence[str] | None = None) -> pd.DataFrame:
    """:data:`RERUN_COLUMNS` for two tidy metrics tables compared with ``baseline`` the same way
    (``test``, ``mean``, ``alpha``, ``confidence`` and ``variants`` as for
    :func:`~lisa_ext.stats.compare.compare`); one row per (workload, metric, variant) either holds."""
    tables = []
    for metrics in (first, second):
        table = with_verdicts(compare(metrics, baseline, test=test, mean=mean, alpha=alpha,
                                      confidence=confidence, variants=variants), confidence)
        tables.append(table[~table["is_baseline"]][_KEY + _PER_RUN])
    rows = tables[0].merge(tables[1], on=_KEY, how="outer", suffixes=("_first", "_second"), indicator="in_runs")
    rows["in_runs"] = rows["in_runs"].astype(str).map(_IN_RUNS)
    rows["same_verdict"] = (rows["in_runs"] == "both") & (rows["verdict_first"] == rows["verdict_second"])
    rows["first_in_second"] = [_inside(r.pct_change_first, r.pct_ci_low_second, r.pct_ci_high_second)
                               for r in rows.itertuples()]
    rows["second_in_first"] = [_inside(r.pct_change_second, r.pct_ci_low_first, r.pct_ci_high_first)
                               for r in rows.itertuples()]
    rows["difference_points"] = rows["pct_change_second"] - rows["pct_change_first"]
    return rows[RERUN_COLUMNS].reset_index(drop=True)


def rerun_summary(table: pd.DataFrame) -> str:
    """One sentence on a :func:`rerun_table`: how many rows agree, and how far apart they are."""
    both = table[table["in_runs"] == "both"]
    alone = len(table) - len(both)
    bounded = [_has_interval(r.pct_ci_low_first, r.pct_ci_high_first)
               and _has_interval(r.pct_ci_low_second, r.pct_ci_high_second) for r in both.itertuples()]
    text = (f"{len(both)} rows in both runs: the same verdict in {int(both['same_verdict'].sum())}, each "
            f"estimate inside the other run's interval in "
            f"{int((both['first_in_second'] & both['second_in_first']).sum())}")
    if not all(bounded):
        # a baseline of zeros (a CPU the workload never used) has no ratio, so no interval
        text += f" of the {sum(bounded)} with an interval in both"
    differences = both["difference_points"].abs()
    if differences.notna().any():
        widest = both.loc[differences.idxmax()]
        text += (f"; the estimates differ by at most {differences.max():.1f} points "
                 f"({widest['workload']}/{widest['metric']}/{widest['variant']})")
    if alone:
        text += f"; rows in one run only: {alone}"
    return text
