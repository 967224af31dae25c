"""Lost trace events per run: stored with the run, flagged wherever runs are listed.

When the ftrace ring buffer of a traced run overflows (``kernel/trace/ring_buffer.c``:
``overrun`` counts events overwritten before a reader took them, ``dropped_events``
those refused because the buffer was full), every count an analysis makes from
that trace is short. The runner stores the loss the trace itself records
(:func:`lisa_ext.trace.tracedat.count_events`, ``"lost_events"``) under the run's
``meta.json`` key ``"trace_lost_events"``; ``campaign status`` and the report
name the runs whose traces lost events instead of silently under-counting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from lisa_ext.campaign.store.layout import RUN_TRACE
from lisa_ext.campaign.store.reader import Run
from lisa_ext.errors import SpecError
from lisa_ext.trace.tracedat import count_events

__all__ = ["META_KEY", "lost_total", "read_run_lost", "record_lost_events", "warning_line"]

META_KEY = "trace_lost_events"


def record_lost_events(run_dir: Path, meta: dict) -> None:
    """Store the loss of ``run_dir/trace.dat`` (if any) in ``meta[META_KEY]``.

    A trace the reader cannot walk is recorded as ``{"error": ...}``: the run
    keeps its result, and the reason is there for whoever reads the trace later.
    """
    trace = Path(run_dir) / RUN_TRACE
    if not trace.is_file():
        return
    try:
        meta[META_KEY] = count_events(trace)["lost_events"]
    except Exception as exc:  # noqa: BLE001 -- a damaged trace must not fail a finished run
        meta[META_KEY] = {"error": f"{type(exc).__name__}: {exc}"}


def lost_total(meta: Mapping) -> int:
    """Events a run's trace lost according to its meta (0 when untraced or unknown)."""
    lost = meta.get(META_KEY)
    if not isinstance(lost, dict):
        return 0
    total = lost.get("total", 0)
    return total if isinstance(total, int) and not isinstance(total, bool) else 0


def read_run_lost(run: Run) -> int:
    """Events lost by the trace of a finished run, read from its ``meta.json`` (0 when that
    cannot be read: the loss is a warning, not what decides whether the run counts)."""
    try:
        return lost_total(run.meta)
    except SpecError:
        return 0


def warning_line(lost: dict[str, int]) -> str:
    """One line naming the runs (label -> events lost) whose traces are incomplete."""
    runs = ", ".join(f"{label} ({n} events)" for label, n in sorted(lost.items()))
    return (f"warning: {len(lost)} run{'s' if len(lost) != 1 else ''} lost trace events "
            f"(ftrace buffer overflow; trace-derived counts under-count, raise "
            f"trace: buffer-size-kb): {runs}")
