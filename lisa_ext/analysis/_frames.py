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

__all__ = ["event_times", "int_column", "str_column", "has_event", "symbol_column"]

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
