"""The tidy metrics table: its columns and their dtypes, and the one check every table passes
(exact dtypes, one unit and direction per metric) before the statistics read it."""

from __future__ import annotations

import os

import pandas as pd

from lisa_ext.errors import SpecError

__all__ = ["METRICS_COLUMNS", "METRIC_DTYPES", "validate_metrics"]

#: column -> pandas dtype of the tidy metrics table (one row per run and metric)
METRIC_DTYPES: dict[str, str] = {
    "campaign": "string",
    "variant": "string",
    "workload": "string",
    "metric": "string",
    "unit": "string",
    "lower_is_better": "bool",
    "iteration": "int64",
    "value": "float64",
}
METRICS_COLUMNS = list(METRIC_DTYPES)

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
    missing = [c for c in METRIC_DTYPES if c not in df.columns]
    if missing:
        raise SpecError(source, "columns",
                        f"missing {', '.join(missing)}; a metrics table needs "
                        f"{', '.join(METRIC_DTYPES)}")
    out = df.loc[:, list(METRIC_DTYPES)].copy()
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
