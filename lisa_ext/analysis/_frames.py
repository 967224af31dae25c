"""Small helpers turning LISA event DataFrames into numpy arrays.

Both trace loaders (LISA's own and :func:`lisa_ext.trace.load_trace`) give
``trace.df_event(name)`` frames indexed by time in seconds with ``__cpu``,
``__pid``, ``__comm`` and the event's fields; column dtypes differ (categorical
vs Arrow strings, narrower integers), so everything goes through here.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import numpy as np
import pandas as pd

__all__ = [
    "event_times", "times_ns", "int_column", "raw_int_column", "has_event", "symbol_column",
    "order_by_key_then_time", "grouped_stats", "dense_ids", "in_row_order", "last_per_group", "frame", "derived",
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


def raw_int_column(df: pd.DataFrame, name: str) -> np.ndarray:
    """The column's own integer array when it has one (no copy, often
    uint32), else :func:`int_column`. For gathering a few rows of a large
    column, or concatenating into int64, without a full-size int64 copy."""
    col = df[name]
    if isinstance(col.dtype, np.dtype) and col.dtype.kind in "iu":
        return col.to_numpy()
    return int_column(df, name)


def symbol_column(df: pd.DataFrame, name: str) -> np.ndarray:
    """Kernel function pointers as names: LISA's loader resolves them with the
    trace's kallsyms, a reader that gives raw addresses yields ``0x...``."""
    col = df[name]
    if pd.api.types.is_integer_dtype(col.dtype):
        return np.array([f"0x{int(v):x}" for v in col.to_numpy()], dtype=object)
    return col.astype(str).to_numpy(dtype=object)


# id of an object -> (its weakref, {name: value derived from it})
_DERIVED: dict[int, tuple[weakref.ref, dict[str, Any]]] = {}


def derived(obj: Any, name: str, compute: Callable[[], Any]) -> Any:
    """``compute()``, once per ``obj`` and ``name``, kept while ``obj``
    lives: for values derived from a trace's frames, which every analysis of
    the trace is given (the same objects) and nobody modifies. pandas
    objects are not hashable, so they are keyed by identity."""
    key = id(obj)
    entry = _DERIVED.get(key)
    if entry is None or entry[0]() is not obj:
        entry = (weakref.ref(obj, lambda _, key=key: _DERIVED.pop(key, None)), {})
        _DERIVED[key] = entry
    if name not in entry[1]:
        entry[1][name] = compute()
    return entry[1][name]


def times_ns(df: pd.DataFrame) -> np.ndarray:
    """Timestamps as int64 nanoseconds (exact for float seconds of a trace).
    Read-only, computed once per index (pandas indexes are immutable):
    several analyses of a trace convert the same large frames."""

    def compute() -> np.ndarray:
        ns = np.round(np.asarray(df.index, dtype=np.float64) * 1e9).astype(np.int64)
        ns.flags.writeable = False
        return ns

    return derived(df.index, "times_ns", compute)


def frame(columns: dict[str, Any], index: pd.Index) -> pd.DataFrame:
    """A DataFrame of freshly computed columns, taken as they are: pandas'
    default copies same-dtype columns into one 2-D block, a full-size copy
    (and its page faults) of data nobody else holds."""
    return pd.DataFrame(columns, index=index, copy=False)


def order_by_key_then_time(keys: np.ndarray, time: np.ndarray) -> np.ndarray:
    """Permutation sorting rows by key, then time, then original position
    (so simultaneous rows keep the order they were concatenated in)."""
    n = len(keys)
    by_time = np.argsort(time, kind="stable")
    keys = np.asarray(keys)[by_time]
    # The stable sort by key is a sort of (key, position) pairs packed in
    # one int64, which numpy sorts much faster than a stable sort of keys.
    bits = max(n - 1, 1).bit_length()
    if not n or keys.min() < 0 or int(keys.max()) >= 1 << (63 - bits):
        keys = dense_ids(keys)[1]  # ids < n: they fit
    packed = (keys.astype(np.int64) << bits) | np.arange(n)
    packed.sort()
    return by_time[packed & ((1 << bits) - 1)]


def dense_ids(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct sorted keys, id of each row in them), in O(n) for small keys.
    Ids are uint16 when there are few enough, so numpy's stable argsort of
    them is a radix sort."""
    keys = np.asarray(keys)
    if keys.dtype.kind != "u" or keys.dtype.itemsize > 4:  # narrow unsigned keys index as they are
        keys = keys.astype(np.int64, copy=False)
    if len(keys) and keys.min() >= 0 and keys.max() < 1 << 24:
        present = np.bincount(keys) > 0
        uniq = np.flatnonzero(present)
        lut = (np.cumsum(present) - 1).astype(np.uint16 if len(uniq) <= 1 << 16 else np.int64)
        return uniq, lut[keys]
    uniq, ids = np.unique(keys.astype(np.int64, copy=False), return_inverse=True)
    return uniq, ids


def in_row_order(rows: np.ndarray, n: int) -> np.ndarray:
    """Permutation putting distinct row numbers ``rows`` (< n) in increasing
    order, in O(n) instead of a sort."""
    slot = np.full(n, -1, dtype=np.int64)
    slot[rows] = np.arange(len(rows))
    return slot[slot >= 0]


def last_per_group(ids: np.ndarray, ngroups: int) -> np.ndarray:
    """Index of the last row of each group id (rows in order), -1 if none."""
    last = np.full(ngroups, -1, dtype=np.int64)
    np.maximum.at(last, ids, np.arange(len(ids)))
    return last


def grouped_stats(groups: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """count, mean, gmean, p50/p90/p99 (linear interpolation, as numpy's
    default percentile) and max of ``values`` (seconds, >= 0) per distinct
    ``groups`` value, vectorised. Returns the sorted group keys under ``"key"``."""
    keys, ids = dense_ids(groups)
    ns = np.multiply(values, 1e9, dtype=np.float64)  # in place from here: fewer fresh arrays
    ns = np.round(ns, out=ns).astype(np.int64)
    if not len(ids):
        empty = np.array([])
        return {k: empty for k in ("key", "count", "mean", "gmean", "p50", "p90", "p99", "max")}
    if ns.max() < 1 << 40 and len(keys) < 1 << 23:
        # One vectorised sort of (group, value) packed in an int64.
        packed = ids.astype(np.int64)
        packed <<= 40
        packed |= ns
        del ns
        packed.sort()
        g = packed >> 40
        packed &= (1 << 40) - 1
        v = packed / 1e9
        del packed
    else:
        order = np.lexsort((values, ids))
        g, v = ids[order], np.asarray(values, dtype=np.float64)[order]
    counts = np.bincount(g, minlength=len(keys))
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    out = {"key": keys, "count": counts}
    out["mean"] = np.add.reduceat(v, starts) / counts
    with np.errstate(divide="ignore"):
        out["gmean"] = np.exp(np.add.reduceat(np.log(v), starts) / counts)
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        pos = (counts - 1) * q
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, counts - 1)
        out[name] = v[starts + lo] + (v[starts + hi] - v[starts + lo]) * (pos - lo)
    out["max"] = v[starts + counts - 1]
    return out
