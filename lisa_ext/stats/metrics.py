"""The tidy metrics table: one row per (run, metric).

This is the contract between the campaign store (``result.json`` files, see
:mod:`lisa_ext.report.campaign`) and the statistics: columns ``campaign``,
``variant``, ``workload``, ``metric``, ``unit``, ``lower_is_better``,
``iteration``, ``value``. Tables are read from CSV or Parquet and checked here
once, so every later stage can trust the column types.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from lisa_ext.errors import SpecError, UserError

__all__ = ["METRIC_COLUMNS", "read_metrics", "validate_metrics"]

#: column -> pandas dtype of the tidy metrics table
METRIC_COLUMNS: dict[str, str] = {
    "campaign": "string",
    "variant": "string",
    "workload": "string",
    "metric": "string",
    "unit": "string",
    "lower_is_better": "bool",
    "iteration": "int64",
    "value": "float64",
}

_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}


def _as_bool(series: pd.Series, source: str) -> pd.Series:
    if series.dtype == bool:
        return series
    text = series.astype("string").str.strip().str.lower()
    bad = ~(text.isin(_TRUE) | text.isin(_FALSE))
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        raise SpecError(source, f"row {row + 1}: lower_is_better",
                        f"expected true/false, got {series.iloc[row]!r}")
    return text.isin(_TRUE)


def validate_metrics(df: pd.DataFrame, source: str | os.PathLike = "<metrics>") -> pd.DataFrame:
    """Check and normalise a tidy metrics table; returns a new frame with exact dtypes.

    Raises :class:`~lisa_ext.errors.SpecError` naming the first missing column
    or the first row whose value cannot be read.
    """
    source = os.fspath(source)
    missing = [c for c in METRIC_COLUMNS if c not in df.columns]
    if missing:
        raise SpecError(source, "columns",
                        f"missing {', '.join(missing)}; a metrics table needs "
                        f"{', '.join(METRIC_COLUMNS)}")
    out = df.loc[:, list(METRIC_COLUMNS)].copy()
    out["lower_is_better"] = _as_bool(out["lower_is_better"], source)
    for col in ("iteration", "value"):
        num = pd.to_numeric(out[col], errors="coerce")
        bad = num.isna() & out[col].notna() if col == "value" else num.isna()
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise SpecError(source, f"row {row + 1}: {col}",
                            f"expected a number, got {out[col].iloc[row]!r}")
        out[col] = num
    out["iteration"] = out["iteration"].astype("int64")
    out["value"] = out["value"].astype("float64")
    for col in ("campaign", "variant", "workload", "metric", "unit"):
        out[col] = out[col].astype("string").fillna("")
    for col in ("variant", "workload", "metric"):
        empty = out[col] == ""
        if empty.any():
            row = int(empty.to_numpy().nonzero()[0][0])
            raise SpecError(source, f"row {row + 1}: {col}", "must not be empty")
    # one metric has one unit and one direction, or its comparison means nothing
    for col in ("unit", "lower_is_better"):
        per_metric = out.groupby(["workload", "metric"], sort=False)[col].nunique()
        clash = per_metric[per_metric > 1]
        if not clash.empty:
            workload, metric = clash.index[0]
            raise SpecError(source, f"{workload}/{metric}: {col}",
                            f"differs between rows; one metric needs one {col}")
    return out.reset_index(drop=True)


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
