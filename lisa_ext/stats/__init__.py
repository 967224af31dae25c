"""Comparison statistics over a tidy metrics table (pure pandas/scipy).

:mod:`~lisa_ext.stats.metrics` reads and checks the table,
:mod:`~lisa_ext.stats.summary` computes per-variant statistics,
:mod:`~lisa_ext.stats.tests` holds the significance tests,
:mod:`~lisa_ext.stats.change` the confidence interval of a % change and
:mod:`~lisa_ext.stats.compare` puts them together against a baseline.
"""

from lisa_ext.stats.change import pct_change_ci, pct_change_ci_from_stats
from lisa_ext.stats.compare import (
    COMPARISON_COLUMNS, MIN_ITERATIONS, compare, compare_summaries, pct_change,
    pct_change_better,
)
from lisa_ext.stats.metrics import read_metrics
from lisa_ext.stats.summary import MEAN_KINDS, MeanKind, default_mean, describe, mean_ci, mean_of, summarise
from lisa_ext.stats.tests import TESTS, Sample, p_value

__all__ = [
    "COMPARISON_COLUMNS", "MIN_ITERATIONS", "compare", "compare_summaries", "pct_change",
    "pct_change_better", "pct_change_ci", "pct_change_ci_from_stats", "read_metrics",
    "MEAN_KINDS", "MeanKind", "default_mean", "describe", "mean_ci", "mean_of", "summarise", "TESTS", "Sample",
    "p_value",
]
