"""Trace-derived metrics and figure data for a campaign report.

Each :class:`TraceSource` declares up front the events it needs and, where it
relies on one, the ``trace.ana`` analysis; a source runs on a run's
``trace.dat`` only when both are there, so the report adapts to what each
trace recorded and to which analyses are installed. Sources:

``wakeup_latency``
    ``trace.ana.wakeup_latency`` (:mod:`lisa_ext.analysis.wakeup_latency`):
    wakeup to switch-in of every task; mean and p99 as metrics, the
    distribution for the CDF.
``idle_miss``
    ``trace.ana.idle_miss`` (:mod:`lisa_ext.analysis.idle_miss`) over
    ``cpu_idle_miss`` events: too-deep / too-shallow % of wakeups.
``idle_residency``
    LISA's ``trace.ana.idle.df_cpu_idle_state_residency`` per CPU.
``frequency_residency``
    time per ``cpu_frequency`` value, per CPU (LISA's own residency needs the
    platform's frequency domains, which a bare trace does not carry).

Add a source by appending to :data:`SOURCES`.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

__all__ = ["TraceFindings", "TraceSource", "SOURCES", "load_trace", "collect",
           "wakeup_latencies", "state_residency"]

#: the ``cpu_idle`` state meaning "exit", as a u32 and as LISA's signed -1
_IDLE_EXIT = (4294967295, -1)


@dataclass
class TraceFindings:
    #: (name, value, unit, lower_is_better)
    metrics: list[tuple[str, float, str, bool]] = field(default_factory=list)
    #: frame name -> data for figures
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)


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
        available = set(trace.available_events)
        lacking = [e for e in self.events if e not in available]
        if self.any_of and not available.intersection(self.any_of):
            lacking.append(" or ".join(self.any_of))
        if lacking:
            return f"trace lacks {', '.join(lacking)}"
        if self.analysis and not hasattr(trace.ana, self.analysis):
            return f"analysis trace.ana.{self.analysis} is not installed"
        return None


def load_trace(path: str | os.PathLike):
    """lisa-ext's fast cached loader when installed, else LISA's own ``Trace``."""
    try:
        from lisa_ext.trace import load_trace as fast_load
    except ImportError:
        fast_load = None
    try:  # importing registers lisa-ext's analyses on trace.ana
        import lisa_ext.analysis  # noqa: F401
    except ImportError:
        pass
    if fast_load is not None:
        return fast_load(path)
    from lisa_ext.compat import import_lisa

    return import_lisa("lisa.trace").Trace(os.fspath(path), enable_swap=False)


def _ints(df: pd.DataFrame, col: str) -> np.ndarray:
    return pd.to_numeric(df[col]).to_numpy(dtype=np.int64)


def _sched_switches(trace) -> pd.DataFrame:
    df = trace.df_event("sched_switch")
    return pd.DataFrame({"time": np.asarray(df.index, float), "cpu": _ints(df, "__cpu"),
                         "next_pid": _ints(df, "next_pid")})


def wakeup_latencies(trace) -> pd.DataFrame:
    """Every wakeup's latency from ``trace.ana.wakeup_latency``
    (:mod:`lisa_ext.analysis.wakeup_latency`): columns ``time`` (s), ``pid``,
    ``cpu``, ``latency`` (s)."""
    df = trace.ana.wakeup_latency.df_all_wakeup_latencies()
    return pd.DataFrame({"time": np.asarray(df.index, float),
                         "pid": df["pid"].to_numpy(np.int64),
                         "cpu": df["cpu"].to_numpy(np.int64),
                         "latency": df["latency"].to_numpy(float)})


def _wakeup_latency(trace) -> TraceFindings:
    lat = wakeup_latencies(trace)
    us = lat["latency"].to_numpy() * 1e6
    out = TraceFindings(frames={"wakeup_latency": lat, "switches": _sched_switches(trace)})
    if us.size:
        out.metrics = [("wakeup latency mean", float(us.mean()), "us", True),
                       ("wakeup latency p99", float(np.percentile(us, 99)), "us", True)]
    return out


def _idle_miss(trace) -> TraceFindings:
    counts = trace.ana.idle_miss.df_idle_miss_counts(mode="event")
    wakeups = counts["wakeups"].sum()
    if wakeups == 0:
        return TraceFindings()
    return TraceFindings(metrics=[
        ("too deep", float(100.0 * counts["too_deep"].sum() / wakeups), "%", True),
        ("too shallow", float(100.0 * counts["too_shallow"].sum() / wakeups), "%", True),
    ])


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


SOURCES: list[TraceSource] = [
    TraceSource("wakeup_latency", ("sched_switch",), "wakeup_latency", _wakeup_latency,
                any_of=("sched_waking", "sched_wakeup")),
    TraceSource("idle_miss", ("cpu_idle", "cpu_idle_miss"), "idle_miss", _idle_miss),
    TraceSource("idle_residency", ("cpu_idle",), "idle", _idle_residency),
    TraceSource("frequency_residency", ("cpu_frequency",), None, _frequency_residency),
]


def collect(trace, sources: list[TraceSource] | None = None) -> tuple[TraceFindings, list[str]]:
    """Run every applicable source on one trace: merged findings and one note per
    source that was skipped or failed (never silently)."""
    found, notes = TraceFindings(), []
    for source in SOURCES if sources is None else sources:
        why = source.missing(trace)
        if why:
            notes.append(f"{source.name}: skipped, {why}")
            continue
        try:
            with warnings.catch_warnings():
                # LISA 3.1's analyses trip pandas 2.3 FutureWarnings on every call
                warnings.simplefilter("ignore", FutureWarning)
                result = source.collect(trace)
        except Exception as exc:  # one broken analysis must not sink the report
            notes.append(f"{source.name}: failed, {type(exc).__name__}: {exc}")
            continue
        found.metrics.extend(result.metrics)
        found.frames.update(result.frames)
    return found, notes
