"""Idle gating: which idle states a CPU enters after a latency-sensitive task ran on it.

Models the condition of our idle-gating port (kernels/patches/0004-sched-idle-idle-gating-for-
latency-sensitive-tasks.patch, kernel/sched/idle.c): each CPU remembers the last marked task that
ran on it before it went idle (``set_next_task_idle()`` sees it as ``rq->curr``), and while that
task still belongs to the CPU, ``do_idle()`` polls instead of entering a cpuidle state; the trace
then shows ``cpu_idle`` with state 0 only. A task is marked when its comm starts with one of the
prefixes written to ``/sys/module/idle_gating/parameters/comm`` (6.12 has no latency_nice).

Each idle period (``cpu_idle`` entry to exit, from :meth:`IdleMissAnalysis.df_idle_periods`) is
checked against that condition from the trace (include/trace/events/sched.h): the last marked
task switched to idle from on this CPU, and where that task was last seen (switched in or out,
or woken with ``sched_wakeup``'s ``target_cpu``, standing in for ``task_cpu()``). A *marked*
period is one the patch gates. With gating, marked periods stay in state 0 while the others still
reach the deep states; without it, both kinds use every state the governor picks.
"""

from __future__ import annotations

import argparse
from typing import Any

import holoviews as hv
import numpy as np
import pandas as pd

from lisa_ext import compat
from lisa_ext.analysis._frames import event_times, has_event, int_column
from lisa_ext.analysis.base import StudyAnalysis, records

_trace = compat.import_lisa("lisa.trace")
requires_events = _trace.requires_events

__all__ = ["DEFAULT_PREFIXES", "IdleGatingAnalysis", "RESIDENCY_COLUMNS", "parse_prefixes"]

#: The comm prefixes the idle-gating study marks (kernels/idle-gating/gating.yml).
DEFAULT_PREFIXES = ("schbench", "postgres", "pgbench")

#: ``prev_state`` bits of a task's last switch-out (EXIT_DEAD | EXIT_ZOMBIE, include/linux/sched.h)
_EXIT_STATES = 0x10 | 0x20

#: Columns of :meth:`IdleGatingAnalysis.df_state_residency` (index: ``marked``, ``state``).
RESIDENCY_COLUMNS = ("periods", "time_s", "time_pct")


def parse_prefixes(comm: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """``"a,b"`` or a sequence -> the non-empty prefixes; None -> :data:`DEFAULT_PREFIXES`."""
    if comm is None:
        return DEFAULT_PREFIXES
    items = comm.split(",") if isinstance(comm, str) else list(comm)
    return tuple(p.strip() for p in items if p.strip())


def _startswith(comms: np.ndarray, prefixes: tuple[str, ...]) -> np.ndarray:
    """Which of ``comms`` start with one of ``prefixes``."""
    strings = comms.astype(str)
    return np.logical_or.reduce([np.char.startswith(strings, p) for p in prefixes] +
                                [np.zeros(len(strings), dtype=bool)])


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
    def df_idle_periods(self, comm: str | tuple[str, ...] | None = None) -> pd.DataFrame:
        """One row per idle period, indexed by entry time (s): the columns of
        :meth:`IdleMissAnalysis.df_idle_periods` (``cpu``, ``state``, ``duration``) plus

        * ``marked_pid`` / ``marked_comm``: the last task marked by ``comm`` (comma-separated
          prefixes, default :data:`DEFAULT_PREFIXES`) that this CPU switched to idle from
          (-1 / "" when none yet): the patch's per-CPU ``idle_gating_pid``;
        * ``marked``: that task still belongs to this CPU (its latest switch in or out, or
          ``sched_wakeup`` target, was on this CPU, and it has not exited): the periods the
          patch gates.
        """
        prefixes = parse_prefixes(comm)
        periods = self.trace.ana.idle_miss.df_idle_periods().reset_index().sort_values("Time", kind="stable")
        switch = self.trace.df_event("sched_switch")
        time, cpu = event_times(switch), int_column(switch, "__cpu")
        prev_pid, next_pid = int_column(switch, "prev_pid"), int_column(switch, "next_pid")
        prev_comm = switch["prev_comm"].astype(str).to_numpy()
        prev_marked = _startswith(prev_comm, prefixes)
        next_marked = _startswith(switch["next_comm"].astype(str).to_numpy(), prefixes)
        notes = prev_marked & (next_pid == 0)
        noted = pd.DataFrame({"Time": time[notes], "cpu": cpu[notes], "marked_pid": prev_pid[notes],
                              "marked_comm": prev_comm[notes]})
        out = pd.merge_asof(periods, noted, on="Time", by="cpu", direction="backward")
        out["marked_pid"] = out["marked_pid"].fillna(-1).astype(np.int64)
        out["marked_comm"] = out["marked_comm"].fillna("")
        # the last switch-out of an exiting task (EXIT_DEAD / EXIT_ZOMBIE in prev_state): it
        # belongs to no CPU any more, as PF_EXITING stops the patch's gating
        exited = (int_column(switch, "prev_state") & _EXIT_STATES) != 0
        seen = [pd.DataFrame({"Time": time[prev_marked], "marked_pid": prev_pid[prev_marked],
                              "task_cpu": np.where(exited, -1, cpu)[prev_marked]}),
                pd.DataFrame({"Time": time[next_marked], "marked_pid": next_pid[next_marked],
                              "task_cpu": cpu[next_marked]})]
        if has_event(self.trace, "sched_wakeup"):
            wake = self.trace.df_event("sched_wakeup")
            woken = _startswith(wake["comm"].astype(str).to_numpy(), prefixes)
            seen.append(pd.DataFrame({"Time": event_times(wake)[woken],
                                      "marked_pid": int_column(wake, "pid")[woken],
                                      "task_cpu": int_column(wake, "target_cpu")[woken]}))
        where = pd.concat(seen, ignore_index=True).sort_values("Time", kind="stable")
        where["marked_pid"] = where["marked_pid"].astype(np.int64)
        out = pd.merge_asof(out, where, on="Time", by="marked_pid", direction="backward")
        out["marked"] = (out["marked_pid"] >= 0) & (out["task_cpu"] == out["cpu"])
        return out.drop(columns="task_cpu").set_index("Time")

    @df_idle_periods.used_events
    def df_state_residency(self, comm: str | tuple[str, ...] | None = None) -> pd.DataFrame:
        """Idle time per state, for periods after marked tasks and after the others.

        Index ``marked`` (bool), ``state`` (idle-state index); columns ``periods`` (count),
        ``time_s`` (summed durations of the periods that ended in the trace) and
        ``time_pct`` (share of that group's idle time, %).
        """
        df = self.df_idle_periods(comm)
        grouped = df.groupby(["marked", "state"]).agg(periods=("duration", "size"),
                                                      time_s=("duration", "sum"))
        totals = grouped["time_s"].groupby(level="marked").transform("sum")
        grouped["time_pct"] = np.where(totals > 0, 100.0 * grouped["time_s"] / totals.where(totals > 0, 1.0),
                                       np.nan)
        return grouped[list(RESIDENCY_COLUMNS)]

    @df_idle_periods.used_events
    def summary(self, marked: str | None = None, **options: Any) -> dict[str, Any]:
        """The marked comm prefixes and :meth:`df_state_residency` per group and state:
        ``{"marked": [...], "residency": {"marked"|"other": {"<state>": {periods, time_s, time_pct}}}}``."""
        df = self.df_state_residency(marked)
        groups = {"marked": True, "other": False}
        return {"marked": list(parse_prefixes(marked)),
                "residency": {name: records(df.xs(flag, level="marked"), RESIDENCY_COLUMNS)
                              if flag in df.index.get_level_values("marked") else {}
                              for name, flag in groups.items()}}

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
