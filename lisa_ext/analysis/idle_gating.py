"""Idle gating: which idle states a CPU enters after a latency-sensitive task ran on it.

Models the condition of our idle-gating port (kernels/patches/0004-sched-idle-idle-gating-for-
latency-sensitive-tasks.patch, kernel/sched/idle.c): each CPU remembers the last marked task that
ran on it before it went idle (``set_next_task_idle()`` sees it as ``rq->curr``), and while that
task still belongs to the CPU, ``do_idle()`` polls instead of entering a cpuidle state; the trace
then shows ``cpu_idle`` with state 0 only. A task is marked when its comm starts with one of the
prefixes written to ``/sys/module/idle_gating/parameters/comm`` (6.12 has no latency_nice).

Each idle period (``cpu_idle`` entry to exit, from :meth:`IdleMissAnalysis.df_idle_periods`) is
attributed to the task that the CPU switched away from last before it (``sched_switch`` to the
idle task, include/trace/events/sched.h): a *marked* period follows a marked task. With gating,
marked periods stay in state 0 while the others still reach the deep states; without it, both
kinds use every state the governor picks.
"""

from __future__ import annotations

import argparse
from typing import Any

import holoviews as hv
import numpy as np
import pandas as pd

from lisa_ext import compat
from lisa_ext.analysis._frames import event_times, int_column
from lisa_ext.analysis.base import StudyAnalysis, records

_trace = compat.import_lisa("lisa.trace")
requires_events = _trace.requires_events

__all__ = ["DEFAULT_PREFIXES", "IdleGatingAnalysis", "RESIDENCY_COLUMNS", "parse_prefixes"]

#: The comm prefixes the idle-gating study marks (kernels/idle-gating/gating.yml).
DEFAULT_PREFIXES = ("schbench", "postgres", "pgbench")

#: Columns of :meth:`IdleGatingAnalysis.df_state_residency` (index: ``marked``, ``state``).
RESIDENCY_COLUMNS = ("periods", "time_s", "time_pct")


def parse_prefixes(comm: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """``"a,b"`` or a sequence -> the non-empty prefixes; None -> :data:`DEFAULT_PREFIXES`."""
    if comm is None:
        return DEFAULT_PREFIXES
    items = comm.split(",") if isinstance(comm, str) else list(comm)
    return tuple(p.strip() for p in items if p.strip())


class IdleGatingAnalysis(StudyAnalysis):
    """Idle-state residency of the CPUs after marked (latency-sensitive) tasks vs the others.

    :param trace: input Trace object
    :type trace: lisa.trace.Trace
    """

    name = "idle_gating"
    cli_name = "idle-gating"
    #: The events every figure needs, declared once.
    EVENTS = ("sched_switch", "cpu_idle")

    @classmethod
    def add_cli_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--marked", metavar="PREFIXES", default=",".join(DEFAULT_PREFIXES),
                            help="idle-gating: comma-separated comm prefixes of the marked tasks "
                                 f"(default {','.join(DEFAULT_PREFIXES)})")

    @StudyAnalysis.cache
    @requires_events(*EVENTS)
    def df_idle_periods(self) -> pd.DataFrame:
        """One row per idle period, indexed by entry time (s): the columns of
        :meth:`IdleMissAnalysis.df_idle_periods` (``cpu``, ``state``, ``duration``) plus
        ``last_comm`` and ``last_pid``, the task the CPU switched to idle from last
        (empty / -1 when the trace has no such switch before the period)."""
        periods = self.trace.ana.idle_miss.df_idle_periods().reset_index()
        switch = self.trace.df_event("sched_switch")
        to_idle = int_column(switch, "next_pid") == 0
        last = pd.DataFrame({
            "Time": event_times(switch)[to_idle],
            "cpu": int_column(switch, "__cpu")[to_idle],
            "last_comm": switch["prev_comm"].astype(str).to_numpy()[to_idle],
            "last_pid": int_column(switch, "prev_pid")[to_idle],
        }).sort_values("Time", kind="stable")
        periods = periods.sort_values("Time", kind="stable")
        out = pd.merge_asof(periods, last, on="Time", by="cpu", direction="backward")
        out["last_comm"] = out["last_comm"].fillna("")
        out["last_pid"] = out["last_pid"].fillna(-1).astype(np.int64)
        return out.set_index("Time")

    @df_idle_periods.used_events
    def df_marked_idle_periods(self, comm: str | tuple[str, ...] | None = None) -> pd.DataFrame:
        """:meth:`df_idle_periods` plus ``marked``: the last task's comm starts with one
        of the ``comm`` prefixes (comma-separated; default :data:`DEFAULT_PREFIXES`)."""
        prefixes = parse_prefixes(comm)
        df = self.df_idle_periods().copy()
        df["marked"] = df["last_comm"].str.startswith(prefixes) if prefixes else False
        return df

    @df_idle_periods.used_events
    def df_state_residency(self, comm: str | tuple[str, ...] | None = None) -> pd.DataFrame:
        """Idle time per state, for periods after marked tasks and after the others.

        Index ``marked`` (bool), ``state`` (idle-state index); columns ``periods`` (count),
        ``time_s`` (summed durations of the periods that ended in the trace) and
        ``time_pct`` (share of that group's idle time, %).
        """
        df = self.df_marked_idle_periods(comm)
        grouped = df.groupby(["marked", "state"]).agg(periods=("duration", "size"),
                                                      time_s=("duration", "sum"))
        totals = grouped["time_s"].groupby(level="marked").transform("sum")
        grouped["time_pct"] = np.where(totals > 0, 100.0 * grouped["time_s"] / totals.where(totals > 0, 1.0),
                                       np.nan)
        return grouped[list(RESIDENCY_COLUMNS)]

    @df_idle_periods.used_events
    def summary(self, marked: str | None = None, **options: Any) -> dict[str, Any]:
        """The marked comm prefixes and :meth:`df_state_residency` as records."""
        return {"marked": list(parse_prefixes(marked)),
                "residency": records(self.df_state_residency(marked).reset_index())}

    @df_idle_periods.used_events
    def summary_tables(self, marked: str | None = None, **options: Any) -> list[tuple[str, pd.DataFrame]]:
        return [(f"idle time per state after tasks {','.join(parse_prefixes(marked))}* (marked) "
                 "and after the others", self.df_state_residency(marked))]

    @df_idle_periods.used_events
    def plot_state_residency(self, comm: str | None = None) -> hv.Bars:
        """Share of idle time per state, marked vs other periods."""
        df = self.df_state_residency(comm).reset_index()
        df["after"] = np.where(df["marked"], "marked task", "other task")
        df["state"] = df["state"].astype(str)
        return hv.Bars(df, kdims=["after", "state"], vdims=["time_pct"]).opts(
            title="idle time per state after marked / other tasks", ylabel="% of idle time")
