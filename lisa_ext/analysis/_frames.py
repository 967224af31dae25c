"""Small helpers turning LISA event DataFrames into numpy arrays.

Both trace loaders (LISA's own and :func:`lisa_ext.trace.load_trace`) give
``trace.df_event(name)`` frames indexed by time in seconds with ``__cpu``,
``__pid``, ``__comm`` and the event's fields; column dtypes differ (categorical
vs Arrow strings, narrower integers), so everything goes through here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "event_times", "times_ns", "int_column", "str_column", "has_event", "symbol_column",
    "order_by_key_then_time", "grouped_stats",
]

#: ``cpu_idle``'s state for "exit" (PWR_EVENT_EXIT, -1 stored in a u32).
IDLE_EXIT = 4294967295


def has_event(trace: Any, event: str) -> bool:
    """True when ``event`` is in the trace (LISA's own check, no parsing)."""
    try:
        return event in trace.available_events
    except Exception:
        return False


def event_times(df: pd.DataFrame) -> np.ndarray:
    """Timestamps in seconds, float64."""
    return np.asarray(df.index, dtype=np.float64)


def int_column(df: pd.DataFrame, name: str) -> np.ndarray:
    return df[name].to_numpy(dtype=np.int64)


def str_column(df: pd.DataFrame, name: str) -> np.ndarray:
    return df[name].astype(str).to_numpy(dtype=object)


def symbol_column(df: pd.DataFrame, name: str) -> np.ndarray:
    """Kernel function pointers as names: LISA's loader resolves them with the
    trace's kallsyms, a reader that gives raw addresses yields ``0x...``."""
    col = df[name]
    if pd.api.types.is_integer_dtype(col.dtype):
        return np.array([f"0x{int(v):x}" for v in col.to_numpy()], dtype=object)
    return col.astype(str).to_numpy(dtype=object)


def times_ns(df: pd.DataFrame) -> np.ndarray:
    """Timestamps as int64 nanoseconds (exact for float seconds of a trace)."""
    return np.round(np.asarray(df.index, dtype=np.float64) * 1e9).astype(np.int64)


def _dense_keys(keys: np.ndarray) -> np.ndarray:
    """Small non-negative ids preserving the order of ``keys``: uint16 when
    possible, so numpy's stable sort is a radix sort."""
    keys = np.asarray(keys, dtype=np.int64)
    if len(keys) and keys.min() >= 0 and keys.max() < 1 << 24:
        present = np.bincount(keys) > 0
        lut = np.cumsum(present) - 1
        dense = lut[keys]
        return dense.astype(np.uint16 if present.sum() <= 1 << 16 else np.int32)
    return np.unique(keys, return_inverse=True)[1]


def order_by_key_then_time(keys: np.ndarray, time: np.ndarray) -> np.ndarray:
    """Permutation sorting rows by key, then time, then original position
    (so simultaneous rows keep the order they were concatenated in)."""
    by_time = np.argsort(time, kind="stable")
    return by_time[np.argsort(_dense_keys(keys[by_time]), kind="stable")]


def grouped_stats(groups: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """count, mean, gmean, p50/p90/p99 (linear interpolation, as numpy's
    default percentile) and max of ``values`` per distinct ``groups`` value,
    vectorised. Returns the sorted group keys under ``"key"``."""
    order = order_by_key_then_time(groups, values)
    g, v = groups[order], values[order]
    if not len(g):
        empty = np.array([])
        return {k: empty for k in ("key", "count", "mean", "gmean", "p50", "p90", "p99", "max")}
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    counts = np.diff(np.r_[starts, len(g)])
    out = {"key": g[starts], "count": counts}
    out["mean"] = np.add.reduceat(v, starts) / counts
    with np.errstate(divide="ignore"):
        out["gmean"] = np.exp(np.add.reduceat(np.log(v), starts) / counts)
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        pos = (counts - 1) * q
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, counts - 1)
        frac = pos - lo
        out[name] = v[starts + lo] + (v[starts + hi] - v[starts + lo]) * frac
    out["max"] = v[starts + counts - 1]
    return out
