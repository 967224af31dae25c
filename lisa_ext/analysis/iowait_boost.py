"""Frequency behaviour of IO-bound tasks, for studies of iowait boosting.

Mirrors what kernel/sched/cpufreq_schedutil.c (``sugov_iowait_boost()``)
reacts to: tasks waking from an IO sleep. The sources, all optional except
``sched_switch``:

* ``sched_stat_iowait`` (include/trace/events/sched.h, CONFIG_SCHEDSTATS):
  ``pid``, ``delay`` (ns) of each iowait sleep. Without it, iowait sleeps are
  approximated by uninterruptible (D) sleeps: a ``sched_switch`` out with
  ``prev_state & TASK_UNINTERRUPTIBLE`` (0x2, excluding TASK_NOLOAD 0x400
  idle waits of old kernels) up to the task's next switch-in, run-queue wait
  included.
* ``cpu_frequency`` (include/trace/events/power.h): the frequency (kHz) of
  ``cpu_id`` from the event on; before a CPU's first event it is unknown.
* ``sugov_set_iowait_boost``: an Android-kernel event, kept as a timeline.
* ``block_rq_issue`` / ``block_rq_complete`` (include/trace/events/block.h):
  a completion pairs with the latest unpaired issue of the same device and
  sector; completions issued before the trace started are left out.

Running time is counted between consecutive ``sched_switch`` events of a CPU;
the slice still running at the CPU's last ``sched_switch`` is not counted.
"""

from __future__ import annotations

import argparse
from typing import Any

import holoviews as hv
import numpy as np
import pandas as pd

from lisa_ext import compat
from lisa_ext.analysis._frames import (
    dense_ids,
    event_times,
    frame,
    has_event,
    in_row_order,
    int_column,
    last_per_group,
    order_by_key_then_time,
    raw_int_column,
    times_ns,
)
from lisa_ext.analysis._task_scan import switch_scan
from lisa_ext.analysis.base import StudyAnalysis, records, window_seconds
from lisa_ext.errors import UserError

_base = compat.import_lisa("lisa.analysis.base")
_trace = compat.import_lisa("lisa.trace")
TraceAnalysisBase = _base.TraceAnalysisBase
requires_events = _trace.requires_events
may_use_events = _trace.may_use_events

__all__ = ["IowaitBoostAnalysis", "TASK_COLUMNS", "DEVICE_COLUMNS", "format_dev"]

TASK_UNINTERRUPTIBLE = 0x2
TASK_NOLOAD = 0x400

#: how a frequency window after wakeups is named in errors: the parameter and its option
WINDOW_NAME = "window_ms (--window-ms)"
#: Columns of :meth:`IowaitBoostAnalysis.df_task_iowait`.
TASK_COLUMNS = ("comm", "iowait_count", "iowait_delay_s", "runtime_s", "mean_freq_running_khz")
#: Columns of :meth:`IowaitBoostAnalysis.df_device_io`.
DEVICE_COLUMNS = ("requests", "iops", "service_p50", "service_p90", "service_p99")


def format_dev(dev: int) -> str:
    """``dev_t`` as the block tracepoints print it (``MAJOR,MINOR``; MINORBITS = 20)."""
    return f"{int(dev) >> 20},{int(dev) & 0xFFFFF}"


class _FrequencySteps:
    """Piecewise-constant frequency of each CPU with O(log n) interval means."""

    def __init__(self, df: pd.DataFrame | None):
        self.steps: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        if df is None or not len(df):
            return
        time, cpu, freq = event_times(df), int_column(df, "cpu_id"), int_column(df, "state")
        for c in np.unique(cpu):
            sel = cpu == c
            t, f = time[sel], freq[sel].astype(float)
            area = np.concatenate([[0.0], np.cumsum(f[:-1] * np.diff(t))])
            self.steps[int(c)] = (t, f, area)

    def integrate(self, cpu: int, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(∫ freq dt, known seconds) over each [start, end) on ``cpu``."""
        start, end = np.asarray(start, float), np.asarray(end, float)
        if cpu not in self.steps:
            return np.zeros(len(start)), np.zeros(len(start))
        t, f, area = self.steps[cpu]
        a, b = np.maximum(start, t[0]), np.maximum(end, t[0])

        def cumulative(x):
            k = np.searchsorted(t, x, side="right") - 1
            return area[k] + f[k] * (x - t[k])

        return cumulative(b) - cumulative(a), b - a

    def freq_at(self, cpu: int, x: np.ndarray) -> np.ndarray:
        t, f, _ = self.steps[cpu]
        k = np.searchsorted(t, x, side="right") - 1
        return np.where(k >= 0, f[np.maximum(k, 0)], np.nan)


def _is_d_state(prev_state: np.ndarray) -> np.ndarray:
    """Uninterruptible sleep, not an idle (TASK_NOLOAD) wait: see module doc."""
    return ((prev_state & TASK_UNINTERRUPTIBLE) != 0) & ((prev_state & TASK_NOLOAD) == 0)


class IowaitBoostAnalysis(StudyAnalysis):
    """IO sleeps, running time and CPU frequency of tasks; block device service times.

    :param trace: input Trace object
    :type trace: lisa.trace.Trace
    """

    name = "iowait_boost"
    cli_name = "iowait-boost"
    EVENTS = ("sched_switch",)

    @classmethod
    def add_cli_arguments(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("iowait-boost")
        g.add_argument("--window-ms", type=float, default=4.0, metavar="MS",
                       help="frequency window after each wakeup (default 4 ms)")

    def _summary(self, window_ms: float) -> tuple[dict[str, Any], list[tuple[str, pd.DataFrame]]]:
        window_seconds(WINDOW_NAME, window_ms)  # also when the trace has no cpu_frequency to use it
        trace = self.trace
        tasks = self.df_task_iowait()
        figures: dict[str, Any] = {
            "iowait_source": "sched_stat_iowait" if has_event(trace, "sched_stat_iowait") else "d_state",
            "tasks": records(tasks, TASK_COLUMNS)}
        tables = [("tasks", tasks.sort_values("iowait_count", ascending=False))]
        if has_event(trace, "block_rq_issue") and has_event(trace, "block_rq_complete"):
            devices = self.df_device_io()
            figures["devices"] = records(devices, DEVICE_COLUMNS)
            tables.append(("block devices", devices))
        else:
            figures["devices"] = {}
        if has_event(trace, "cpu_frequency"):
            summary = self.df_wakeup_frequency_summary(window_ms=window_ms)
            figures["wakeup_frequency"] = {
                ("after_iowait" if k else "other"): {"wakeups": int(r["wakeups"]),
                                                     "mean_freq_khz": r["mean_freq_khz"]}
                for k, r in summary.iterrows()}
            tables.append((f"mean frequency in the {window_ms:g} ms after wakeups (kHz)", summary))
            tables.append(("frequency residency inside / outside IO-task activity (s)",
                           self.df_frequency_residency()))
        if has_event(trace, "sugov_set_iowait_boost"):
            boost = self.df_iowait_boost_events()
            figures["iowait_boost_events"] = int(len(boost))
            tables.append(("sugov_set_iowait_boost timeline", boost))
        return figures, tables

    def summary(self, window_ms: float = 4.0) -> dict[str, Any]:
        """``iowait_source``; ``tasks``: :data:`TASK_COLUMNS` per pid; ``devices``:
        :data:`DEVICE_COLUMNS` per device (block events); ``wakeup_frequency``
        (``cpu_frequency``); ``iowait_boost_events`` (``sugov_set_iowait_boost``)."""
        return self._summary(window_ms)[0]

    def summary_tables(self, window_ms: float = 4.0) -> list[tuple[str, pd.DataFrame]]:
        return self._summary(window_ms)[1]

    def _frequency(self) -> _FrequencySteps:
        if has_event(self.trace, "cpu_frequency"):
            return _FrequencySteps(self.trace.df_event("cpu_frequency"))
        return _FrequencySteps(None)

    def _running_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The slices of :meth:`df_running_slices` as ``sched_switch`` rows
        (in order) and their durations (ns), without the frame, which
        :meth:`df_task_iowait` does not need."""
        df = self.trace.df_event("sched_switch")
        time, cpu = times_ns(df), raw_int_column(df, "__cpu")
        # A stable sort by CPU keeps each CPU's rows in row (time) order:
        # a radix sort of the CPU numbers as uint8 when they fit.
        ids = cpu.astype(np.uint8) if len(cpu) and cpu.max() < 1 << 8 else dense_ids(cpu)[1]
        counts = np.bincount(ids)
        last = (np.cumsum(counts) - 1)[counts > 0]  # each CPU's last, in that order
        order = np.argsort(ids, kind="stable")
        del ids
        next_row = np.empty(len(order), dtype=np.int64)  # of the same CPU
        next_row[order[:-1]] = order[1:]
        next_row[order[last]] = -1
        del order
        # Durations of all rows, in place (each CPU's last reads the last
        # row's time: dropped), then those with a next row.
        duration = time[next_row]
        duration -= time
        rows = np.flatnonzero(next_row >= 0)
        return rows, duration[rows]

    @TraceAnalysisBase.cache
    @requires_events("sched_switch")
    def df_running_slices(self) -> pd.DataFrame:
        """Who ran when, indexed by slice start (s): ``cpu``, ``pid``, ``comm``
        (the switched-in task, idle is pid 0), ``duration`` (s) up to the CPU's
        next ``sched_switch``; the last slice of each CPU is left out."""
        df = self.trace.df_event("sched_switch")
        rows, duration = self._running_rows()
        return frame(
            {
                "cpu": raw_int_column(df, "__cpu")[rows].astype(np.int64),
                "pid": raw_int_column(df, "next_pid")[rows].astype(np.int64),
                "comm": df["next_comm"].array.take(rows),
                "duration": duration / 1e9,
            },
            index=pd.Index(times_ns(df)[rows] / 1e9, name="Time"),
        )

    @TraceAnalysisBase.cache
    @requires_events("sched_switch")
    @may_use_events("sched_stat_iowait")
    def df_iowait_sleeps(self) -> pd.DataFrame:
        """One row per IO sleep, indexed by its end (s): ``pid``, ``delay`` (s),
        ``source`` (``"sched_stat_iowait"`` or ``"d_state"``, see module doc)."""
        if has_event(self.trace, "sched_stat_iowait"):
            df = self.trace.df_event("sched_stat_iowait")
            return pd.DataFrame(
                {
                    "pid": int_column(df, "pid"),
                    "delay": int_column(df, "delay") / 1e9,
                    "source": "sched_stat_iowait",
                },
                index=pd.Index(event_times(df), name="Time"),
            )
        # The D-state sleeps of df_sleeps, without building all of it.
        df = self.trace.df_event("sched_switch")
        in_rows, out_rows, _ = self._sleep_rows(d_state_only=True)
        time = times_ns(df)
        in_time = time[in_rows]
        return frame(
            {
                "pid": raw_int_column(df, "next_pid")[in_rows].astype(np.int64),
                "delay": (in_time - time[out_rows]) / 1e9,
                "source": "d_state",
            },
            index=pd.Index(in_time / 1e9, name="Time"),
        )

    def _sleep_rows(self, d_state_only: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Switch-in rows (in time order), switch-out rows and the out's
        ``prev_state`` of the sleeps of :meth:`df_sleeps` (D-state ones only
        with ``d_state_only``)."""
        df = self.trace.df_event("sched_switch")
        # Shared with the wakeup-latency analysis when it scanned this trace.
        out_of = switch_scan(df).out_before_in
        # Masks over all rows, narrow, before any list of rows: where out_of
        # is -1 the state read is the last row's, masked out.
        state = raw_int_column(df, "prev_state")[out_of]
        # Not the idle task; 0 = TASK_RUNNING (preempted), 0x100+ preempt markers.
        sleep = (out_of >= 0) & (raw_int_column(df, "next_pid") != 0) & ((state & 0xFF) != 0)
        if d_state_only:
            sleep &= _is_d_state(state)
        in_rows = np.flatnonzero(sleep)
        return in_rows, out_of[in_rows], state[in_rows]

    @TraceAnalysisBase.cache
    @requires_events("sched_switch")
    def df_sleeps(self) -> pd.DataFrame:
        """Every sleep (switch-out not preempted) to the next switch-in of the
        task, indexed by the switch-in: ``pid``, ``cpu`` (switched in on),
        ``delay`` (s), ``d_state`` (bool)."""
        df = self.trace.df_event("sched_switch")
        in_rows, out_rows, out_state = self._sleep_rows()
        time = times_ns(df)
        in_time = time[in_rows]
        return frame(
            {
                "pid": raw_int_column(df, "next_pid")[in_rows].astype(np.int64),
                "cpu": raw_int_column(df, "__cpu")[in_rows].astype(np.int64),
                "delay": (in_time - time[out_rows]) / 1e9,
                "d_state": _is_d_state(out_state),
            },
            index=pd.Index(in_time / 1e9, name="Time"),
        )

    @df_running_slices.used_events
    @may_use_events("cpu_frequency")
    def df_task_iowait(self) -> pd.DataFrame:
        """Per task (index ``pid``, idle excluded): ``comm`` (last switched-in
        name), ``iowait_count``, ``iowait_delay_s``, ``runtime_s``,
        ``mean_freq_running_khz`` (time-weighted over the part of its running
        time where the CPU frequency is known; NaN if none)."""
        # The running slices as sched_switch rows: building df_running_slices
        # (a row per switch) only to read it costs more. Idle's slices (pid
        # 0) are summed like the others, which leaves the others' sums as
        # they are, and its row dropped below.
        switch = self.trace.df_event("sched_switch")
        rows, duration = self._running_rows()
        duration = duration / 1e9
        slice_pid = raw_int_column(switch, "next_pid")[rows]
        freq = self._frequency()
        integral = np.zeros(len(rows))
        known = np.zeros(len(rows))
        if freq.steps:
            start = times_ns(switch)[rows] / 1e9
            end = start + duration
            cpu = raw_int_column(switch, "__cpu")[rows].astype(np.int64)
            for c in np.unique(cpu):
                sel = cpu == c
                integral[sel], known[sel] = freq.integrate(int(c), start[sel], end[sel])
        sleeps = self.df_iowait_sleeps()
        sleep_pid = sleeps["pid"].to_numpy()
        pids, ids = dense_ids(np.concatenate([slice_pid, sleep_pid], dtype=np.int64))
        slice_id, sleep_id = ids[: len(slice_pid)], ids[len(slice_pid) :]
        k = len(pids)
        last = last_per_group(slice_id, k)
        comm = np.full(k, None, dtype=object)
        ran = last >= 0
        comm[ran] = np.asarray(switch["next_comm"].array.take(rows[last[ran]]), dtype=object)
        known_s = np.bincount(slice_id, weights=known, minlength=k)
        area = np.bincount(slice_id, weights=integral, minlength=k)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean_freq = np.where(known_s > 0, area / known_s, np.nan)
        tasks = pd.DataFrame(
            {
                "comm": comm,
                "iowait_count": np.bincount(sleep_id, minlength=k),
                "iowait_delay_s": np.bincount(sleep_id, weights=sleeps["delay"].to_numpy(), minlength=k),
                "runtime_s": np.bincount(slice_id, weights=duration, minlength=k),
                "mean_freq_running_khz": mean_freq,
            },
            index=pd.Index(pids, name="pid"),
        )
        tasks = tasks[tasks.index != 0]
        tasks.index.name = "pid"
        return tasks[list(TASK_COLUMNS)]

    @df_running_slices.used_events
    @requires_events("cpu_frequency")
    def df_wakeup_frequency(self, window_ms: float = 4.0) -> pd.DataFrame:
        """Per wakeup (a switch-in ending a sleep), indexed by the switch-in:
        ``pid``, ``cpu``, ``after_iowait`` (the sleep was D-state),
        ``mean_freq_khz`` of that CPU over the next ``window_ms`` (NaN where unknown)."""
        window_s = window_seconds(WINDOW_NAME, window_ms)
        sleeps = self.df_sleeps()
        freq = self._frequency()
        start = sleeps.index.to_numpy()
        mean = np.full(len(sleeps), np.nan)
        cpu = sleeps["cpu"].to_numpy()
        for c in np.unique(cpu):
            sel = cpu == c
            integral, known = freq.integrate(int(c), start[sel], start[sel] + window_s)
            with np.errstate(divide="ignore", invalid="ignore"):
                mean[sel] = np.where(known > 0, integral / known, np.nan)
        return pd.DataFrame(
            {"pid": sleeps["pid"].to_numpy(), "cpu": cpu, "after_iowait": sleeps["d_state"].to_numpy(), "mean_freq_khz": mean},
            index=sleeps.index,
        )

    @df_wakeup_frequency.used_events
    def df_wakeup_frequency_summary(self, window_ms: float = 4.0) -> pd.DataFrame:
        """Wakeups after IO sleeps vs other wakeups (index ``after_iowait``):
        ``wakeups`` and ``mean_freq_khz`` (mean of the per-wakeup means)."""
        df = self.df_wakeup_frequency(window_ms=window_ms)
        g = df.groupby("after_iowait")
        return pd.DataFrame({"wakeups": g.size(), "mean_freq_khz": g["mean_freq_khz"].mean()})

    @df_running_slices.used_events
    @requires_events("cpu_frequency")
    def df_frequency_residency(self, pids: list[int] | None = None) -> pd.DataFrame:
        """Seconds each CPU spent at each frequency while an IO task ran on it
        (``inside``) and otherwise (``outside``); index (``cpu``, ``freq_khz``).
        IO tasks: ``pids``, by default every task with an IO sleep. Time runs
        from a CPU's first ``cpu_frequency`` event to the last ``sched_switch``
        or ``cpu_frequency`` event of the trace."""
        freq = self._frequency()
        slices = self.df_running_slices()
        if pids is None:
            pids = self.df_iowait_sleeps()["pid"].unique().tolist()
        io = slices[slices["pid"].isin(pids) & (slices["pid"] != 0)]
        switch_end = float(self.trace.df_event("sched_switch").index.max())
        end = max(switch_end, max((float(t[-1]) for t, _, _ in freq.steps.values()), default=switch_end))
        rows = []
        for c, (t, f, _) in freq.steps.items():
            on = io[io["cpu"] == c]
            s_start = on.index.to_numpy()
            s_end = s_start + on["duration"].to_numpy()
            cuts = np.unique(np.concatenate([t, s_start, s_end, [end]]))
            cuts = cuts[(cuts >= t[0]) & (cuts <= end)]
            if len(cuts) < 2:
                continue
            left, width = cuts[:-1], np.diff(cuts)
            level = freq.freq_at(c, left)
            k = np.searchsorted(s_start, left, side="right") - 1
            inside = (k >= 0) & (left < np.where(k >= 0, s_end[np.maximum(k, 0)], -np.inf)) if len(s_start) else np.zeros(len(left), bool)
            part = pd.DataFrame({"freq_khz": level.astype(np.int64), "inside": np.where(inside, width, 0.0), "outside": np.where(inside, 0.0, width)})
            summed = part.groupby("freq_khz").sum()
            summed.insert(0, "cpu", c)
            rows.append(summed.reset_index())
        if not rows:
            return pd.DataFrame(columns=["cpu", "freq_khz", "inside", "outside"]).set_index(["cpu", "freq_khz"])
        return pd.concat(rows).set_index(["cpu", "freq_khz"]).sort_index()

    @requires_events("sugov_set_iowait_boost")
    def df_iowait_boost_events(self) -> pd.DataFrame:
        """The ``sugov_set_iowait_boost`` timeline (Android kernels), indexed by
        time: ``cpu`` plus the event's own fields as the loader decoded them."""
        df = self.trace.df_event("sugov_set_iowait_boost")
        out = df.drop(columns=[c for c in ("__comm", "__pid") if c in df.columns]).rename(columns={"__cpu": "cpu"})
        out.index.name = "Time"
        return out

    @TraceAnalysisBase.cache
    @requires_events("block_rq_issue", "block_rq_complete")
    def df_block_requests(self) -> pd.DataFrame:
        """Completed block requests, indexed by issue time (s): ``dev``
        (``"MAJ,MIN"``), ``sector``, ``nr_sector``, ``rwbs``, ``service``
        (seconds from issue to completion)."""
        issue = self.trace.df_event("block_rq_issue")
        done = self.trace.df_event("block_rq_complete")
        ni, nc = len(issue), len(done)
        dev = np.r_[int_column(issue, "dev"), int_column(done, "dev")]
        sector = np.r_[int_column(issue, "sector"), int_column(done, "sector")]
        t = np.r_[times_ns(issue), times_ns(done)]
        devs = np.unique(dev)
        dev_id = np.searchsorted(devs, dev)  # few devices: cheaper than unique's inverse
        order = order_by_key_then_time(sector * len(devs) + dev_id, t)
        dev, sector, t = dev[order], sector[order], t[order]
        is_done = order >= ni
        src = np.where(is_done, order - ni, order)
        pair = np.zeros(len(t), dtype=bool)
        pair[:-1] = (~is_done[:-1]) & is_done[1:] & (dev[:-1] == dev[1:]) & (sector[:-1] == sector[1:])
        i = np.flatnonzero(pair)
        i = i[in_row_order(src[i], ni)]  # by issue row
        rows = src[i]
        dev_names = np.array([format_dev(d) for d in devs], dtype=object)
        return frame(
            {
                "dev": dev_names[dev_id[order[i]]],
                "sector": sector[i],
                "nr_sector": int_column(issue, "nr_sector")[rows],
                "rwbs": issue["rwbs"].array.take(rows),
                "service": (t[i + 1] - t[i]) / 1e9,
            },
            index=pd.Index(t[i] / 1e9, name="Time"),
        )

    @df_block_requests.used_events
    def df_device_io(self) -> pd.DataFrame:
        """Per device (index ``dev``): ``requests`` (paired completions),
        ``iops`` (``block_rq_complete`` events of the device over the time from
        its first to its last completion), ``service_p50/p90/p99`` (s)."""
        reqs = self.df_block_requests()
        done = self.trace.df_event("block_rq_complete")
        done_dev = int_column(done, "dev")
        done_t = event_times(done)
        # One grouping of the request frame (object strings) rather than a
        # comparison of its whole dev column per device.
        service_of = {name: group.to_numpy() for name, group in reqs.groupby("dev", sort=False)["service"]}
        rows = []
        for dev in np.unique(done_dev):
            name = format_dev(dev)
            t = done_t[done_dev == dev]
            span = t.max() - t.min()
            service = service_of.get(name, np.zeros(0))
            p = np.percentile(service, [50, 90, 99]) if len(service) else [np.nan] * 3
            rows.append(
                {
                    "dev": name,
                    "requests": int(len(service)),
                    "iops": (len(t) / span) if span > 0 else np.nan,
                    "service_p50": p[0],
                    "service_p90": p[1],
                    "service_p99": p[2],
                }
            )
        return pd.DataFrame(rows, columns=["dev", *DEVICE_COLUMNS]).set_index("dev")

    @TraceAnalysisBase.plot_method
    @df_frequency_residency.used_events
    def plot_frequency_residency(self, cpu: int, pids: list[int] | None = None):
        """Time at each frequency of ``cpu``, inside vs outside IO-task activity."""
        df = self.df_frequency_residency(pids=pids)
        if cpu not in df.index.get_level_values("cpu"):
            raise UserError(f"no cpu_frequency events for CPU{cpu}")
        tidy = df.loc[cpu].reset_index().melt(id_vars="freq_khz", var_name="activity", value_name="seconds")
        tidy["freq_khz"] = tidy["freq_khz"].astype(str)
        return hv.Bars(tidy, kdims=["freq_khz", "activity"], vdims=["seconds"]).options(
            title=f"CPU{cpu} frequency residency around IO tasks", multi_level=False
        )

    @TraceAnalysisBase.plot_method
    @df_block_requests.used_events
    def plot_service_time_cdf(self, dev: str | None = None):
        """CDF of block request service times (one device or all)."""
        reqs = self.df_block_requests()
        if dev is not None:
            reqs = reqs[reqs["dev"] == dev]
        service = np.sort(reqs["service"].to_numpy())
        frac = np.arange(1, len(service) + 1) / max(len(service), 1)
        return hv.Curve((service, frac), "service time (s)", "fraction of requests").options(
            title="Block request service time CDF", interpolation="steps-post"
        )
