"""Workqueue placement: where work items run relative to where they were queued.

Mirrors the workqueue tracepoints of include/trace/events/workqueue.h, fired
from kernel/workqueue.c: ``workqueue_queue_work`` in ``__queue_work()`` on the
queueing CPU (fields ``work``, ``function``, ``workqueue``, ``req_cpu`` — the
CPU asked for, ``WORK_CPU_UNBOUND`` = NR_CPUS when none — and ``cpu``, the CPU
of the chosen pool), ``workqueue_execute_start`` / ``workqueue_execute_end`` in
``process_one_work()`` on the worker's CPU.

A work item is queued again only once it has started (the PENDING bit), so a
work pointer's queue events pair with its start events first in, first out; a
start with nothing queued before it was queued before the trace began and is
left out. The end of an item is the next ``workqueue_execute_end`` of the same
pointer by the same worker. Same-LLC fractions need LLC domains
(:class:`lisa_ext.analysis.platform.Platform`); without them they are NaN.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

import holoviews as hv
import numpy as np
import pandas as pd

from lisa_ext import compat
from lisa_ext.analysis._frames import event_times, has_event, int_column, symbol_column
from lisa_ext.analysis.base import StudyAnalysis, records
from lisa_ext.analysis.platform import Platform
from lisa_ext.errors import UserError

_base = compat.import_lisa("lisa.analysis.base")
_trace = compat.import_lisa("lisa.trace")
TraceAnalysisBase = _base.TraceAnalysisBase
requires_events = _trace.requires_events
may_use_events = _trace.may_use_events

__all__ = ["WqPlacementAnalysis", "PLACEMENT_COLUMNS"]

#: Columns of :meth:`WqPlacementAnalysis.df_placement_stats`.
PLACEMENT_COLUMNS = ("count", "same_cpu_frac", "same_llc_frac", "lat_p50", "lat_p99")


class WqPlacementAnalysis(StudyAnalysis):
    """Queue-to-execution placement and latency of workqueue items.

    :param trace: input Trace object
    :type trace: lisa.trace.Trace
    """

    name = "wq_placement"
    cli_name = "wq-placement"
    EVENTS = ("workqueue_queue_work", "workqueue_execute_start")

    def _summary(self, platform: Platform) -> tuple[dict[str, Any], list[tuple[str, pd.DataFrame]]]:
        by_fn = self.df_placement_stats(by="function", platform=platform)
        by_wq = self.df_placement_stats(by="workqueue", platform=platform)
        matrix = self.df_placement_matrix()
        figures = {
            "functions": records(by_fn, PLACEMENT_COLUMNS),
            "workqueues": records(by_wq, PLACEMENT_COLUMNS),
            "matrix": {str(q): {str(e): int(v) for e, v in row.items()} for q, row in matrix.iterrows()},
        }
        return figures, [("per function", by_fn), ("per workqueue", by_wq),
                         ("queueing CPU x executing CPU", matrix)]

    def summary(self, platform: Platform) -> dict[str, Any]:
        """``functions``, ``workqueues``: :data:`PLACEMENT_COLUMNS` per group;
        ``matrix``: items per queueing CPU and executing CPU."""
        return self._summary(platform)[0]

    def summary_tables(self, platform: Platform) -> list[tuple[str, pd.DataFrame]]:
        return self._summary(platform)[1]

    @TraceAnalysisBase.cache
    @requires_events("workqueue_queue_work", "workqueue_execute_start")
    @may_use_events("workqueue_execute_end")
    def df_work_items(self) -> pd.DataFrame:
        """One row per work item that started executing, indexed by queue time (s):

        * ``work``: the ``struct work_struct`` pointer
        * ``function``: the work function (name, or ``0x...`` without symbols)
        * ``workqueue``: workqueue name, from the queue event
        * ``queue_cpu``: CPU the queue event fired on
        * ``req_cpu``: CPU requested by the caller (``WORK_CPU_UNBOUND`` = NR_CPUS)
        * ``pool_cpu``: the ``cpu`` field, CPU of the pool the work went to
        * ``exec_cpu``, ``worker_pid``: CPU and kworker that executed it
        * ``latency``: seconds from queueing to the start of execution
        * ``duration``: execution time in seconds (NaN without ``workqueue_execute_end``)
        """
        queue = self.trace.df_event("workqueue_queue_work")
        start = self.trace.df_event("workqueue_execute_start")
        q_time, s_time = event_times(queue), event_times(start)
        q_work, s_work = int_column(queue, "work"), int_column(start, "work")
        s_pid, s_cpu = int_column(start, "__pid"), int_column(start, "__cpu")

        # Merge both streams in time order (queue first on ties: it must precede its start).
        order = np.lexsort((np.r_[np.zeros(len(queue)), np.ones(len(start))], np.r_[q_time, s_time]))
        pending: dict[int, deque] = defaultdict(deque)
        pairs = []
        for i in order.tolist():
            if i < len(queue):
                pending[int(q_work[i])].append(i)
            else:
                j = i - len(queue)
                waiting = pending.get(int(s_work[j]))
                if waiting:
                    pairs.append((waiting.popleft(), j))
        qi = np.array([p[0] for p in pairs], dtype=int)
        si = np.array([p[1] for p in pairs], dtype=int)

        duration = np.full(len(si), np.nan)
        if has_event(self.trace, "workqueue_execute_end"):
            end = self.trace.df_event("workqueue_execute_end")
            ends: dict[tuple[int, int], list[float]] = defaultdict(list)
            for t, w, p in zip(event_times(end).tolist(), int_column(end, "work").tolist(), int_column(end, "__pid").tolist()):
                ends[(w, p)].append(t)
            for k, j in enumerate(si.tolist()):
                times = ends.get((int(s_work[j]), int(s_pid[j])))
                if times:
                    pos = np.searchsorted(times, s_time[j], side="left")
                    if pos < len(times):
                        duration[k] = times[pos] - s_time[j]

        df = pd.DataFrame(
            {
                "work": q_work[qi],
                "function": symbol_column(queue, "function")[qi],
                "workqueue": queue["workqueue"].astype(str).to_numpy(dtype=object)[qi],
                "queue_cpu": int_column(queue, "__cpu")[qi],
                "req_cpu": int_column(queue, "req_cpu")[qi],
                "pool_cpu": int_column(queue, "cpu")[qi],
                "exec_cpu": s_cpu[si],
                "worker_pid": s_pid[si],
                "latency": s_time[si] - q_time[qi],
                "duration": duration,
            },
            index=pd.Index(q_time[qi], name="Time"),
        )
        return df.sort_index(kind="stable")

    @df_work_items.used_events
    def df_placement_stats(self, by: str = "function", platform: Platform | None = None) -> pd.DataFrame:
        """Per ``by`` (``"function"`` or ``"workqueue"``): ``count`` of items,
        ``same_cpu_frac`` (executed on the queueing CPU), ``same_llc_frac``
        (executed in the queueing CPU's LLC domain; NaN when the domains are
        unknown), ``lat_p50`` and ``lat_p99`` of the queue-to-start latency (s)."""
        if by not in ("function", "workqueue"):
            raise UserError(f"work items can be grouped by function or workqueue, not {by!r}")
        items = self.df_work_items()
        same_cpu = items["queue_cpu"] == items["exec_cpu"]
        llc_of = platform.llc_of() if platform is not None else {}
        if llc_of:
            q_llc = items["queue_cpu"].map(llc_of)
            e_llc = items["exec_cpu"].map(llc_of)
            same_llc = (q_llc == e_llc) & q_llc.notna()
        frame = pd.DataFrame({by: items[by].to_numpy(), "same_cpu": same_cpu.to_numpy(), "latency": items["latency"].to_numpy()})
        if llc_of:
            frame["same_llc"] = same_llc.to_numpy()
        grouped = frame.groupby(by, sort=True)
        out = pd.DataFrame(
            {
                "count": grouped.size(),
                "same_cpu_frac": grouped["same_cpu"].mean(),
                "same_llc_frac": grouped["same_llc"].mean() if llc_of else np.nan,
                "lat_p50": grouped["latency"].quantile(0.5),
                "lat_p99": grouped["latency"].quantile(0.99),
            }
        )
        out.index.name = by
        return out

    @df_work_items.used_events
    def df_placement_matrix(self, function: str | None = None, workqueue: str | None = None) -> pd.DataFrame:
        """Items counted by queueing CPU (index ``queue_cpu``) × executing CPU
        (columns), optionally for one ``function`` or ``workqueue``."""
        items = self.df_work_items()
        if function is not None:
            items = items[items["function"] == function]
        if workqueue is not None:
            items = items[items["workqueue"] == workqueue]
        cpus = range(int(self.trace.cpus_count or 0) or (int(items[["queue_cpu", "exec_cpu"]].max().max()) + 1 if len(items) else 0))
        matrix = pd.crosstab(items["queue_cpu"], items["exec_cpu"]).reindex(index=cpus, columns=cpus, fill_value=0)
        matrix.index.name, matrix.columns.name = "queue_cpu", "exec_cpu"
        return matrix

    @TraceAnalysisBase.plot_method
    @df_placement_matrix.used_events
    def plot_placement_heatmap(self, function: str | None = None, workqueue: str | None = None):
        """Heatmap of :meth:`df_placement_matrix`."""
        matrix = self.df_placement_matrix(function=function, workqueue=workqueue)
        tidy = matrix.stack().rename("items").reset_index()
        return hv.HeatMap(tidy, kdims=["queue_cpu", "exec_cpu"], vdims=["items"]).options(
            title="Work items: queueing CPU × executing CPU", colorbar=True
        )
