"""Task wakeup latency: from ``sched_waking`` to the task's next switch-in.

Mirrors the scheduler's tracepoints in include/trace/events/sched.h:
``sched_waking`` fires in ``try_to_wake_up()`` (kernel/sched/core.c) on the
waker's CPU, before the task is enqueued; ``sched_switch`` with
``next_pid`` = the task is the moment it gets a CPU. Traces without
``sched_waking`` (before v4.3) use ``sched_wakeup``, which fires once the task
is enqueued, so their latencies are a little shorter.

One latency per wakeup of a task that is not on a CPU: a wakeup while the
task's last ``sched_switch`` put it in (it is still running, e.g. woken
between setting its state and calling schedule()) starts nothing, and repeated
wakeups before the switch-in count once, from the first. A wakeup followed by
a switch-out of the same task rather than a switch-in (lost events) is dropped.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import holoviews as hv
import numpy as np
import pandas as pd

from lisa_ext import compat
from lisa_ext.analysis._frames import (
    dense_ids,
    frame,
    grouped_stats,
    has_event,
    last_per_group,
    raw_int_column,
    times_ns,
)
from lisa_ext.analysis._task_scan import switch_scan
from lisa_ext.analysis.base import RunMetric, StudyAnalysis, records
from lisa_ext.analysis.tasks import select_pids
from lisa_ext.errors import UserError

_base = compat.import_lisa("lisa.analysis.base")
_trace = compat.import_lisa("lisa.trace")
TraceAnalysisBase = _base.TraceAnalysisBase
requires_events = _trace.requires_events
requires_one_event_of = _trace.requires_one_event_of

__all__ = ["WakeupLatencyAnalysis", "STAT_COLUMNS", "latency_stats"]

#: Columns of :meth:`WakeupLatencyAnalysis.df_wakeup_latency_stats`.
STAT_COLUMNS = ("count", "mean", "gmean", "p50", "p90", "p99", "max")


def latency_stats(latencies: np.ndarray) -> dict[str, float]:
    """count, mean, geometric mean, p50/p90/p99 (linear interpolation) and max."""
    x = np.asarray(latencies, dtype=float)
    if not len(x):
        return {"count": 0, **{k: np.nan for k in STAT_COLUMNS[1:]}}
    with np.errstate(divide="ignore"):
        gmean = float(np.exp(np.mean(np.log(x))))
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return {
        "count": int(len(x)),
        "mean": float(x.mean()),
        "gmean": gmean,
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "max": float(x.max()),
    }


class WakeupLatencyAnalysis(StudyAnalysis):
    """Wakeup-to-running latency of every task, with per-task and per-CPU figures.

    :param trace: input Trace object
    :type trace: lisa.trace.Trace
    """

    name = "wakeup_latency"
    cli_name = "wakeup-latency"
    EVENTS = ("sched_switch",)
    ANY_OF_EVENTS = ("sched_waking", "sched_wakeup")

    @classmethod
    def add_cli_arguments(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("wakeup-latency")
        g.add_argument("--pid", type=int, metavar="PID", help="only this task")
        g.add_argument("--comm", metavar="REGEX", help="only tasks whose comm matches")
        g.add_argument("--per-cpu", action="store_true", help="split each task's figures per CPU")

    def summary(self, pid: int | None = None, comm: str | None = None, per_cpu: bool = False,
                tasks: str | None = None) -> dict[str, Any]:
        """``event`` (:meth:`wakeup_event`); ``tasks``: comm and :data:`STAT_COLUMNS`
        per pid; ``cpus``: :data:`STAT_COLUMNS` per CPU."""
        stats = self.df_wakeup_latency_stats(pid=pid, comm=comm, tasks=tasks)
        cpus = self.df_cpu_wakeup_latency_stats(pid=pid, comm=comm, tasks=tasks)
        return {"event": self.wakeup_event(), "tasks": records(stats, ["comm", *STAT_COLUMNS]),
                "cpus": records(cpus, list(STAT_COLUMNS))}

    def summary_tables(self, pid: int | None = None, comm: str | None = None, per_cpu: bool = False,
                       tasks: str | None = None) -> list[tuple[str, pd.DataFrame]]:
        tables = [("wakeup latency per task (s)", self.df_wakeup_latency_stats(pid=pid, comm=comm, tasks=tasks)),
                  ("wakeup latency per CPU (s)", self.df_cpu_wakeup_latency_stats(pid=pid, comm=comm, tasks=tasks))]
        if per_cpu:
            tables.append(("per task and CPU (s)",
                           self.df_wakeup_latency_stats(pid=pid, comm=comm, per_cpu=True, tasks=tasks)))
        return tables

    def run_metrics(self) -> list[RunMetric]:
        """Mean and p99 of every wakeup's latency, in microseconds."""
        us = self.df_all_wakeup_latencies()["latency"].to_numpy(float) * 1e6
        if not us.size:
            return []
        return [RunMetric("wakeup latency mean", float(us.mean()), "us", True),
                RunMetric("wakeup latency p99", float(np.percentile(us, 99)), "us", True)]

    def run_frames(self) -> dict[str, pd.DataFrame]:
        """``wakeup_latency``: every wakeup (``time``, ``pid``, ``cpu``, ``latency``
        in s); ``switches``: every ``sched_switch`` (``time``, ``cpu``, ``next_pid``)."""
        df = self.df_all_wakeup_latencies()
        lat = pd.DataFrame({"time": np.asarray(df.index, float),
                            "pid": df["pid"].to_numpy(np.int64),
                            "cpu": df["cpu"].to_numpy(np.int64),
                            "latency": df["latency"].to_numpy(float)})
        sw = self.trace.df_event("sched_switch")
        switches = pd.DataFrame({"time": np.asarray(sw.index, float),
                                 "cpu": pd.to_numeric(sw["__cpu"]).to_numpy(dtype=np.int64),
                                 "next_pid": pd.to_numeric(sw["next_pid"]).to_numpy(dtype=np.int64)})
        return {"wakeup_latency": lat, "switches": switches}

    def wakeup_event(self) -> str:
        """``sched_waking`` when the trace has it, else ``sched_wakeup``."""
        return "sched_waking" if has_event(self.trace, "sched_waking") else "sched_wakeup"

    @TraceAnalysisBase.cache
    @requires_events("sched_switch", requires_one_event_of("sched_waking", "sched_wakeup"))
    def df_all_wakeup_latencies(self) -> pd.DataFrame:
        """One row per wakeup, indexed by wakeup time (s):

        * ``pid``, ``comm``: the woken task (``comm`` as the wakeup event names it)
        * ``cpu``: the CPU it was switched in on
        * ``latency``: seconds from the wakeup to that switch-in
        """
        wake = self.trace.df_event(self.wakeup_event())
        switch = self.trace.df_event("sched_switch")
        # For each wakeup starting a latency, the switch-in ending it (see
        # _task_scan). The idle task (pid 0) is followed like the others,
        # cheaper than taking it out of each stream; its latencies are dropped.
        switch_of = switch_scan(switch, wake).in_after_wake
        wk_pid = raw_int_column(wake, "pid")
        wake_rows = np.flatnonzero(switch_of >= 0)
        wake_rows = wake_rows[wk_pid[wake_rows] != 0]
        switch_rows = switch_of[wake_rows]
        sw_time, wake_time = times_ns(switch), times_ns(wake)[wake_rows]
        return frame(
            {
                "pid": wk_pid[wake_rows].astype(np.int64),
                "comm": wake["comm"].array.take(wake_rows),
                "cpu": raw_int_column(switch, "__cpu")[switch_rows].astype(np.int64),
                "latency": (sw_time[switch_rows] - wake_time) / 1e9,
            },
            index=pd.Index(wake_time / 1e9, name="Time"),
        )

    @df_all_wakeup_latencies.used_events
    def df_wakeup_latencies(self, pid: int | None = None, comm: str | None = None,
                            tasks: str | None = None) -> pd.DataFrame:
        """:meth:`df_all_wakeup_latencies` restricted to a ``pid``, a task whose ``comm``
        matches the regular expression ``comm`` (``re.search``) and/or the ``tasks`` a
        selector names (:mod:`lisa_ext.analysis.tasks`: ``tgid:N``, ``tree:N``,
        ``exec:NAME``...)."""
        df = self.df_all_wakeup_latencies()
        if pid is not None:
            df = df[df["pid"] == pid]
        if tasks is not None:
            df = df[df["pid"].isin(sorted(select_pids(self.trace, tasks)))]
        if comm is not None:
            try:
                pattern = re.compile(comm)
            except re.error as exc:
                raise UserError(f"bad comm pattern {comm!r}: {exc}") from None
            comms = df["comm"].unique()
            df = df[df["comm"].isin([c for c in comms if pattern.search(c)])]
        return df

    @df_wakeup_latencies.used_events
    def df_wakeup_latency_stats(
        self, pid: int | None = None, comm: str | None = None, per_cpu: bool = False,
        tasks: str | None = None
    ) -> pd.DataFrame:
        """Per task (index ``pid``; with ``per_cpu``, index ``pid``, ``cpu``):
        ``comm`` (the last seen), then ``count``, ``mean``, ``gmean``, ``p50``,
        ``p90``, ``p99``, ``max`` of the latency in seconds."""
        df = self.df_wakeup_latencies(pid=pid, comm=comm, tasks=tasks)
        pids = df["pid"].to_numpy()
        if per_cpu:
            ncpu = int(df["cpu"].max()) + 1 if len(df) else 1
            groups = pids * ncpu + df["cpu"].to_numpy()
        else:
            groups = pids
        stats = grouped_stats(groups, df["latency"].to_numpy())
        _, ids = dense_ids(groups)
        last = last_per_group(ids, len(stats["key"]))
        comm = df["comm"].array.take(last) if len(df) else []
        if per_cpu:
            index = pd.MultiIndex.from_arrays([stats["key"] // ncpu, stats["key"] % ncpu], names=["pid", "cpu"])
        else:
            index = pd.Index(stats["key"], name="pid")
        out = pd.DataFrame({"comm": np.asarray(comm, dtype=object)}, index=index)
        for col in STAT_COLUMNS:
            out[col] = stats[col]
        out["count"] = out["count"].astype(int)
        return out

    @df_wakeup_latencies.used_events
    def df_cpu_wakeup_latency_stats(self, pid: int | None = None, comm: str | None = None,
                                    tasks: str | None = None) -> pd.DataFrame:
        """Same figures over all selected tasks, one row per CPU (index ``cpu``)."""
        df = self.df_wakeup_latencies(pid=pid, comm=comm, tasks=tasks)
        # Each CPU's latencies in row order, as df.groupby("cpu") gives them,
        # without copying every column for each group.
        cpus, ids = dense_ids(df["cpu"].to_numpy())
        by_cpu = df["latency"].to_numpy()[np.argsort(ids, kind="stable")]
        groups = np.split(by_cpu, np.cumsum(np.bincount(ids, minlength=len(cpus)))[:-1])
        rows = [{"cpu": cpu, **latency_stats(x)} for cpu, x in zip(cpus, groups)]
        return pd.DataFrame(rows, columns=["cpu", *STAT_COLUMNS]).set_index("cpu")

    @TraceAnalysisBase.plot_method
    @df_wakeup_latencies.used_events
    def plot_wakeup_latency_cdf(self, pid: int | None = None, comm: str | None = None,
                                tasks: str | None = None):
        """Cumulative distribution of the wakeup latencies of the selected tasks."""
        lat = np.sort(self.df_wakeup_latencies(pid=pid, comm=comm, tasks=tasks)["latency"].to_numpy())
        frac = np.arange(1, len(lat) + 1) / max(len(lat), 1)
        return hv.Curve((lat, frac), "latency (s)", "fraction of wakeups").options(
            title="Wakeup latency CDF", interpolation="steps-post", logx=True
        )

    @TraceAnalysisBase.plot_method
    @df_wakeup_latencies.used_events
    def plot_wakeup_latency_histogram(
        self, pid: int | None = None, comm: str | None = None, bins: int = 50, tasks: str | None = None
    ):
        """Histogram of the wakeup latencies of the selected tasks."""
        lat = self.df_wakeup_latencies(pid=pid, comm=comm, tasks=tasks)["latency"].to_numpy()
        counts, edges = np.histogram(lat, bins=bins)
        return hv.Histogram((edges, counts), kdims=["latency (s)"], vdims=["wakeups"]).options(
            title="Wakeup latency histogram"
        )
