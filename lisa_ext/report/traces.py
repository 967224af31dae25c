"""Trace-derived metrics and figure data for a campaign report.

Every lisa-ext analysis of :data:`lisa_ext.analysis.registry.ANALYSIS_CLASSES` that
defines per-run figures is a source: its ``run_metrics()`` become rows of the metrics table and its
``run_frames()`` feed the figures, when the trace has the events the class
declares (``EVENTS`` / ``ANY_OF_EVENTS``). Two more sources use LISA's own
analyses and raw events, not ours:

``idle_residency``
    LISA's ``trace.ana.idle.df_cpu_idle_state_residency`` per CPU.
``frequency_residency``
    time per ``cpu_frequency`` value, per CPU (LISA's own residency needs the
    platform's frequency domains, which a bare trace does not carry).

A source runs on a run's ``trace.dat`` only when its events (and, for LISA's,
its ``trace.ana`` analysis) are there, so the report adapts to what each trace
recorded; a skipped or failed source is a note, never silent.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from lisa_ext.analysis.base import StudyAnalysis
from lisa_ext.analysis.registry import ANALYSIS_CLASSES
from lisa_ext.analysis.wakeup_latency import WakeupLatencyAnalysis
from lisa_ext.analysis.base import missing_events
from lisa_ext.report.cache import TraceFindings
from lisa_ext.trace import load_trace

__all__ = ["SOURCES", "TraceFindings", "TraceSource", "all_sources", "collect", "collect_file",
           "load_trace", "state_residency", "wakeup_latencies"]

#: the ``cpu_idle`` state meaning "exit", as a u32 and as LISA's signed -1
_IDLE_EXIT = (4294967295, -1)


@dataclass(frozen=True)
class TraceSource:
    name: str
    #: every one of these events is needed
    events: tuple[str, ...]
    #: the ``trace.ana`` analysis it needs, if any
    analysis: str | None
    collect: Callable[[Any], TraceFindings]
    #: and at least one of these
    any_of: tuple[str, ...] = ()

    def missing(self, trace) -> str | None:
        """Why this source cannot run on ``trace``, or None."""
        lacking = missing_events(self.events, self.any_of, set(trace.available_events))
        if lacking:
            return f"trace lacks {', '.join(lacking)}"
        if self.analysis and not hasattr(trace.ana, self.analysis):
            return f"analysis trace.ana.{self.analysis} is not installed"
        return None


def _ints(df: pd.DataFrame, col: str) -> np.ndarray:
    return pd.to_numeric(df[col]).to_numpy(dtype=np.int64)


def wakeup_latencies(trace) -> pd.DataFrame:
    """Every wakeup's latency: columns ``time`` (s), ``pid``, ``cpu``, ``latency``
    (s); see :meth:`~lisa_ext.analysis.wakeup_latency.WakeupLatencyAnalysis.run_frames`."""
    return getattr(trace.ana, WakeupLatencyAnalysis.name).run_frames()["wakeup_latency"]


def state_residency(df: pd.DataFrame, column: str, end: float) -> pd.DataFrame:
    """Seconds spent in each value of ``column`` per CPU, each event's value holding
    until that CPU's next event (the last one until ``end``). Columns ``cpu``,
    ``state``, ``seconds``."""
    frames = []
    for cpu, g in df.groupby("cpu", sort=True):
        g = g.sort_values("time", kind="stable")
        times = g["time"].to_numpy(float)
        held = np.diff(np.append(times, max(end, times[-1])))
        frames.append(pd.DataFrame({"cpu": cpu, "state": g[column].to_numpy(), "seconds": held}))
    if not frames:
        return pd.DataFrame(columns=["cpu", "state", "seconds"])
    out = pd.concat(frames, ignore_index=True)
    return out.groupby(["cpu", "state"], as_index=False, sort=True)["seconds"].sum()


def _idle_states(trace) -> pd.DataFrame:
    df = trace.df_event("cpu_idle")
    state = _ints(df, "state")
    state = np.where(np.isin(state, _IDLE_EXIT), -1, state)
    return pd.DataFrame({"time": np.asarray(df.index, float), "cpu": _ints(df, "cpu_id"),
                         "state": state})


def _idle_residency(trace) -> TraceFindings:
    # LISA's own per-CPU residency (it accounts the -1 "running" state too)
    states = _idle_states(trace)
    rows = []
    for cpu in sorted(states["cpu"].unique()):
        res = trace.ana.idle.df_cpu_idle_state_residency(int(cpu))
        for state, seconds in res["time"].items():
            rows.append({"cpu": int(cpu), "state": int(state), "seconds": float(seconds)})
    return TraceFindings(frames={"idle_residency": pd.DataFrame(rows, columns=["cpu", "state",
                                                                               "seconds"]),
                                 "idle_states": states})


def _frequencies(trace) -> pd.DataFrame:
    df = trace.df_event("cpu_frequency")
    return pd.DataFrame({"time": np.asarray(df.index, float), "cpu": _ints(df, "cpu_id"),
                         "frequency": _ints(df, "state")})


def _frequency_residency(trace) -> TraceFindings:
    freqs = _frequencies(trace)
    return TraceFindings(frames={"frequency_residency":
                                 state_residency(freqs, "frequency", float(trace.end)),
                                 "frequencies": freqs})


def _analysis_source(cls: type[StudyAnalysis]) -> TraceSource:
    def run(trace) -> TraceFindings:
        ana = getattr(trace.ana, cls.name)
        return TraceFindings(metrics=[tuple(m) for m in ana.run_metrics()], frames=ana.run_frames())

    return TraceSource(cls.name, cls.EVENTS, cls.name, run, any_of=cls.ANY_OF_EVENTS)


def _gives_report_figures(cls: type[StudyAnalysis]) -> bool:
    return (cls.run_metrics is not StudyAnalysis.run_metrics
            or cls.run_frames is not StudyAnalysis.run_frames)


def all_sources() -> list[TraceSource]:
    """Every source, in report order: lisa-ext's analyses that give per-run
    figures (``run_metrics`` / ``run_frames``), then LISA's."""
    return [_analysis_source(cls) for cls in ANALYSIS_CLASSES if _gives_report_figures(cls)] + SOURCES


#: the sources built on LISA's analyses and raw events (ours come from the registry)
SOURCES: list[TraceSource] = [
    TraceSource("idle_residency", ("cpu_idle",), "idle", _idle_residency),
    TraceSource("frequency_residency", ("cpu_frequency",), None, _frequency_residency),
]


def collect(trace, sources: list[TraceSource] | None = None) -> tuple[TraceFindings, list[str]]:
    """Run every applicable source on one trace: merged findings and one note per
    source that was skipped or failed (never silently)."""
    found, notes = TraceFindings(), []
    for source in all_sources() if sources is None else sources:
        why = source.missing(trace)
        if why:
            notes.append(f"{source.name}: skipped, {why}")
            continue
        try:
            result = source.collect(trace)
        except Exception as exc:  # one broken analysis must not sink the report
            notes.append(f"{source.name}: failed, {type(exc).__name__}: {exc}")
            continue
        found.metrics.extend(result.metrics)
        found.frames.update(result.frames)
    return found, notes


def collect_file(path: str) -> tuple[TraceFindings | None, list[str]]:
    """:func:`collect` on the trace at ``path``: one run's report work, whether in
    this process or as a Dask task (:func:`lisa_ext.trace.cluster.map_traces`).
    Findings are None when the trace cannot be read; the notes then say why,
    and name damage the reader found."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            findings, notes = collect(load_trace(path))
        except Exception as exc:
            findings, notes = None, [f"trace not read: {type(exc).__name__}: {exc}"]
    # a damaged trace is worth a line in the report; LISA 3.1's pandas
    # deprecation chatter is not
    notes += [f"trace warning: {w.message}" for w in caught
              if issubclass(w.category, UserWarning) and "Damage" in w.category.__name__]
    return findings, notes
