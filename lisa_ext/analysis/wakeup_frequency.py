"""The frequency a task's CPU restarts at when the task wakes it from idle.

Models what RFC 003 ("cpufreq: governor: Be friendly towards latency-sensitive
bursty workloads") changed in drivers/cpufreq/cpufreq_governor.c
``dbs_update()``: ondemand computes each CPU's load over the window since its
previous update, and no update runs while the CPU is idle, so the first update
after a long sleep sees a window that is almost all idle. Without the RFC's
logic it computes a near-zero load and ondemand (drivers/cpufreq/cpufreq_ondemand.c
``od_update()``) drops the policy to a low OPP until the next sample, one
sampling period later; with it (6.12's default, our switch
``cpufreq_governor.copy_prev_load``) the previous window's load is reused once
and the frequency stays where it was.

Sources: ``sched_switch`` (include/trace/events/sched.h) for when the task
sleeps (switched out with ``prev_state`` S or D) and wakes (switched back in),
and whether the CPU left its idle task (``prev_pid`` 0) during the sleep; ``cpu_frequency``
(include/trace/events/power.h) for the frequency (kHz) of ``cpu_id`` from the
event on, unknown (NaN) before a CPU's first event.
"""

from __future__ import annotations

import argparse
from typing import Any

import holoviews as hv
import numpy as np
import pandas as pd

from lisa_ext import compat
from lisa_ext.analysis._frames import has_event
from lisa_ext.analysis.base import RunMetric, StudyAnalysis, window_seconds
from lisa_ext.analysis.idle_wakeups import WAKEUP_COLUMNS, frequency_after_wakeups, wakeups_from_idle
from lisa_ext.analysis.tasks import select_pids
from lisa_ext.errors import UserError

_base = compat.import_lisa("lisa.analysis.base")
_trace = compat.import_lisa("lisa.trace")
TraceAnalysisBase = _base.TraceAnalysisBase
requires_events = _trace.requires_events

__all__ = ["WakeupFrequencyAnalysis"]

class WakeupFrequencyAnalysis(StudyAnalysis):
    """Frequency of a task's CPU after each wake-up from idle (RFC 003's mechanism).

    :param trace: input Trace object
    :type trace: lisa.trace.Trace
    """

    name = "wakeup_frequency"
    cli_name = "wakeup-frequency"
    EVENTS = ("sched_switch", "cpu_frequency")

    @classmethod
    def add_cli_arguments(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("wakeup-frequency")
        g.add_argument("--task", default="ebizzy", metavar="COMM",
                       help="the bursty task's name, exactly (default: ebizzy; --tasks SELECTOR instead "
                            "picks tasks by selector, e.g. rt-app's threads of task bursty: comm:^bursty-)")
        g.add_argument("--burst-window-ms", type=float, default=None, metavar="MS",
                       help="look at most this long after each wake-up (default: the whole burst)")

    @TraceAnalysisBase.cache
    @requires_events("sched_switch", "cpu_frequency")
    def df_wakeups(self, comm: str = "ebizzy", window_ms: float | None = None,
                   min_sleep_ms: float = 0.0, tasks: str | None = None) -> pd.DataFrame:
        """:func:`wakeups_from_idle` of this trace (columns :data:`WAKEUP_COLUMNS`): of the tasks
        named ``comm`` exactly, or, given ``tasks``, of the tasks that selector picks
        (:mod:`lisa_ext.analysis.tasks`: ``comm:REGEX``, ``pid:N``, ``exec:NAME``, ...; rt-app's
        threads are named ``<task>-<index>``, so ``comm:^bursty-`` picks the task ``bursty``)."""
        switches, frequencies = self.trace.df_event("sched_switch"), self.trace.df_event("cpu_frequency")
        window_s = None if window_ms is None else window_seconds("burst window (--burst-window-ms)", window_ms)
        if tasks is not None:
            return wakeups_from_idle(switches, frequencies, pids=select_pids(self.trace, tasks),
                                     window_s=window_s, min_sleep_s=min_sleep_ms / 1e3)
        return wakeups_from_idle(switches, frequencies, comm, window_s=window_s, min_sleep_s=min_sleep_ms / 1e3)

    @TraceAnalysisBase.cache
    @df_wakeups.used_events
    def df_frequency_after_wakeup(self, comm: str = "ebizzy", tasks: str | None = None,
                                  horizon_ms: float = 30.0, step_ms: float = 0.5) -> pd.DataFrame:
        """The frequency of the CPU each wake-up from idle of :meth:`df_wakeups` woke on, every
        ``step_ms`` from the wake-up to ``horizon_ms`` after it: columns
        :data:`~lisa_ext.analysis.idle_wakeups.AFTER_WAKEUP_COLUMNS` (``wakeup_s``, ``cpu``,
        ``pid``, ``offset_s``, ``freq_khz``), one row per wake-up and offset."""
        horizon_s = window_seconds("horizon (horizon_ms)", horizon_ms)
        step_s = window_seconds("step (step_ms)", step_ms)
        if horizon_s / step_s > 10_000:
            raise UserError(f"frequency after wake-up: {horizon_ms} ms in steps of {step_ms} ms is more than "
                            "10000 points per wake-up; expected a coarser step")
        offsets = np.arange(int(np.floor(horizon_s / step_s + 1e-9)) + 1) * step_s
        return frequency_after_wakeups(self.df_wakeups(comm=comm, tasks=tasks),
                                       self.trace.df_event("cpu_frequency"), offsets)

    def summary(self, task: str = "ebizzy", burst_window_ms: float | None = None,
                tasks: str | None = None) -> dict[str, Any]:
        """``wakeups``; medians of ``sleep_s``, ``restart_freq_khz``, ``time_below_s``,
        ``time_at_min_s``; ``restarted_below_frac``: wake-ups whose first decision
        went below the frequency of the sleep."""
        df = self.df_wakeups(comm=task, window_ms=burst_window_ms, tasks=tasks)
        out: dict[str, Any] = {"comm": task, "wakeups": int(len(df))} if tasks is None else \
            {"tasks": tasks, "wakeups": int(len(df))}
        for col in ("sleep_s", "restart_freq_khz", "time_below_s", "time_at_min_s"):
            out[f"median_{col}"] = float(df[col].median()) if len(df) else None
        below = df["restart_freq_khz"] < df["freq_at_sleep_khz"]
        out["restarted_below_frac"] = float(below.mean()) if len(df) else None
        return out

    def summary_tables(self, task: str = "ebizzy", burst_window_ms: float | None = None,
                       tasks: str | None = None) -> list[tuple[str, pd.DataFrame]]:
        return [(f"wake-ups from idle of {tasks or task}",
                 self.df_wakeups(comm=task, window_ms=burst_window_ms, tasks=tasks))]

    def run_metrics(self) -> list[RunMetric]:
        """Medians over the ebizzy wake-ups: restart frequency, ms below the frequency of the sleep."""
        if not (has_event(self.trace, "sched_switch") and has_event(self.trace, "cpu_frequency")):
            return []
        df = self.df_wakeups()
        if not len(df):
            return []
        return [RunMetric("wakeup_restart_freq_p50", float(df["restart_freq_khz"].median()), "kHz", False),
                RunMetric("wakeup_time_below_p50", float(df["time_below_s"].median() * 1e3), "ms", True)]

    @TraceAnalysisBase.plot_method
    @df_wakeups.used_events
    def plot_wakeup_restart(self, comm: str = "ebizzy"):
        """Restart frequency against the frequency of the sleep, one point per wake-up."""
        df = self.df_wakeups(comm=comm).reset_index()
        return hv.Scatter(df, kdims=["Time"], vdims=["restart_freq_khz", "freq_at_sleep_khz"]).options(
            title=f"{comm}: frequency after each wake-up from idle (kHz)")
