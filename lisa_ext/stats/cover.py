"""The cover-letter table: per metric and variant, what a reviewer asks of a comparison.

For every (workload, metric) and variant: the mean over the runs (arithmetic ± sample
standard deviation, or the harmonic / geometric mean the metric calls for), the % change
against the baseline with its confidence interval (:mod:`lisa_ext.stats.change`), the
significance test and its p-value, n, and a one-word verdict. It is
:func:`lisa_ext.stats.compare.compare` narrowed to the metrics a letter quotes, in the
order it quotes them; :mod:`lisa_ext.report.cover` renders it as Markdown, HTML and
mmtests-style text.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from lisa_ext.errors import UserError
from lisa_ext.stats.compare import COMPARISON_COLUMNS, compare
from lisa_ext.stats.tests import DEFAULT_TEST

__all__ = ["COVER_COLUMNS", "VERDICTS", "cover_table", "verdict", "with_verdicts"]

#: what :func:`verdict` says of a row
VERDICTS = ("baseline", "better", "worse", "no significant change", "too few runs to test")
COVER_COLUMNS = COMPARISON_COLUMNS + ["confidence", "verdict"]


def verdict(row: dict) -> str:
    """One of :data:`VERDICTS` for a row of :func:`compare`: better / worse only when the
    test finds the change significant (with at least 3 runs a side), in the metric's own
    direction (``lower_is_better``)."""
    if row["is_baseline"]:
        return "baseline"
    if row["too_few"]:
        return "too few runs to test"
    if not row["significant"]:
        return "no significant change"
    return "better" if row["pct_change_better"] > 0 else "worse"


def with_verdicts(comparison: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """A :func:`compare` frame (computed at ``confidence``) with :data:`COVER_COLUMNS`: its
    ``confidence`` and each row's :func:`verdict`. A frame that has them is returned as is."""
    if "verdict" in comparison.columns:
        return comparison
    out = comparison.assign(confidence=confidence)
    out["verdict"] = [verdict(row) for row in out.to_dict("records")]
    return out[COVER_COLUMNS]


def cover_table(metrics: pd.DataFrame, baseline: str, *, metric_names: Sequence[str] | None = None,
                workloads: Sequence[str] | None = None, variants: Sequence[str] | None = None,
                mean: str = "auto", test: str = DEFAULT_TEST, alpha: float = 0.05,
                confidence: float = 0.95) -> pd.DataFrame:
    """:data:`COVER_COLUMNS` for ``metrics`` (a tidy metrics table) against ``baseline``.

    ``metric_names`` / ``workloads`` keep only those, in that order (default: all, in the
    table's order); ``variants`` as for :func:`compare`; ``mean``, ``test``, ``alpha`` and
    ``confidence`` (of the change's interval) as well.
    """
    for wanted, column in ((metric_names, "metric"), (workloads, "workload")):
        if wanted is not None:
            unknown = [w for w in wanted if w not in set(metrics[column])]
            if unknown:
                raise UserError(f"no {column} {', '.join(map(repr, unknown))} in the metrics; "
                                f"{column}s are: {', '.join(dict.fromkeys(metrics[column]))}")
            metrics = metrics[metrics[column].isin(wanted)]
    table = with_verdicts(compare(metrics, baseline, test=test, mean=mean, alpha=alpha,
                                  confidence=confidence, variants=variants), confidence)
    # rows by workload, then metric, in the order asked for (else the table's), variants as compared
    workload_order = list(workloads) if workloads is not None else list(dict.fromkeys(table["workload"]))
    metric_order = list(metric_names) if metric_names is not None else list(dict.fromkeys(table["metric"]))
    keys = pd.DataFrame({"w": table["workload"].map({w: i for i, w in enumerate(workload_order)}),
                         "m": table["metric"].map({m: i for i, m in enumerate(metric_order)})})
    table = table.loc[keys.sort_values(["w", "m"], kind="stable").index]
    return table.reset_index(drop=True)[COVER_COLUMNS]
