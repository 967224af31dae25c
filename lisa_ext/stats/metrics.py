"""The tidy metrics table: one row per (run, metric).

This is the contract between the campaign store and the statistics: columns
``campaign``, ``variant``, ``workload``, ``metric``, ``unit``,
``lower_is_better``, ``iteration``, ``value``.
:mod:`lisa_ext.campaign.store.metrics` defines and validates it
(:func:`~lisa_ext.campaign.store.metrics.validate_metrics`); this module reads
tables saved as CSV or Parquet through the same check, so every later stage can
trust the column types.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from lisa_ext.campaign.store.metrics import validate_metrics
from lisa_ext.errors import UserError

__all__ = ["read_metrics"]


def read_metrics(path: str | os.PathLike) -> pd.DataFrame:
    """Read a tidy metrics table from ``.csv`` or ``.parquet`` and validate it."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such metrics file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            df = pd.read_csv(path, dtype={"unit": "string"}, keep_default_na=False,
                             na_values={"value": ["", "nan", "NaN"]})
        elif suffix in (".parquet", ".pq"):
            df = pd.read_parquet(path)
        else:
            raise UserError(f"{path}: expected a .csv or .parquet metrics table")
    except (ValueError, OSError) as exc:
        raise UserError(f"{path}: cannot read metrics table: {exc}") from exc
    return validate_metrics(df, path)
