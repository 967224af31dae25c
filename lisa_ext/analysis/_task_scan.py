"""Each task's switches and wakeups in time order, one time span at a time.

The wakeup-latency and iowait-boost analyses follow each task through its
switch-outs (``prev_pid``), wakeups and switch-ins (``next_pid``) in time
order, simultaneous events of a task ordered out < wakeup < in, then by row.
Sorting all of them at once, by time then task, takes several arrays 2-3 times
the switch count: over 32 MB, glibc maps each afresh, and on a VM their page
faults cost more than the sorts (measured: up to 4 ms per MB, 0.6-0.9 s of
system time for the wakeup latencies of a 6 M-event trace).

Here each stream, in time order already (LISA frames are sorted by time;
checked), is cut into consecutive time spans of about 64 K rows, rows of one
time never split. Each span is sorted on its own, in small arrays that the
allocator reuses and the cache holds, and the rows of each task that the next
span needs (its last switch, say) are carried into it, before its own rows.

:func:`switch_scan` does that once per trace for both analyses: one scan
finds both the sleeps (a switch-out followed by the task's next switch being
a switch-in) and the wakeup latencies.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import pandas as pd

from lisa_ext.analysis._frames import derived, raw_int_column, times_ns

__all__ = [
    "SPAN_ROWS", "TaskIds", "TaskRows", "SwitchScan", "group_ends", "require_time_order", "scan_by_task",
    "switch_scan", "time_spans",
]

#: Rows of each stream per time span: arrays of about 0.5 MB.
SPAN_ROWS = 1 << 16

#: Streams of :func:`switch_scan`, in the order of simultaneous events of one task.
OUT, WAKE, IN = 0, 1, 2

_BEFORE_ALL = np.iinfo(np.int64).min


def require_time_order(df: pd.DataFrame, event: str) -> None:
    """Refuse a frame not sorted by time, which no loader gives: the scan
    takes row order as time order (pandas caches the check on the index)."""
    if not df.index.is_monotonic_increasing:
        raise ValueError(f"{event} rows are not in time order")


class TaskIds:
    """Small ids for the pids of some columns, equal for equal pids: the pids
    themselves as uint16 when they all fit, else their index among the
    distinct pids (uint16 if at most 65536), since numpy's stable argsort of
    uint16 is a radix sort."""

    def __init__(self, pid_columns: Sequence[np.ndarray]):
        size = 1 + max((int(p.max()) for p in pid_columns if len(p)), default=0)
        self._lut: np.ndarray | None = None
        if size > 1 << 16:
            present = np.zeros(size, dtype=bool)
            for p in pid_columns:
                present[p] = True
            lut = np.cumsum(present, dtype=np.int64) - 1
            self._lut = lut.astype(np.uint16 if lut[-1] < 1 << 16 else np.int64)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint16) if self._lut is None else self._lut.dtype

    def __call__(self, pid: np.ndarray) -> np.ndarray:
        return pid.astype(np.uint16) if self._lut is None else self._lut[pid]


@dataclass(frozen=True)
class TaskRows:
    """Rows of one span, carried rows first, by task, then time, then
    stream, then row: ``task`` id, ``stream`` (index in the scanned streams)
    and ``row`` (in that stream) of each."""

    task: np.ndarray
    stream: np.ndarray
    row: np.ndarray


def time_spans(times: Sequence[np.ndarray], size: int = SPAN_ROWS) -> Iterator[list[slice]]:
    """Slices of time-sorted arrays covering consecutive time spans: at most
    about ``size`` rows of each, and all rows of a time in the same span."""
    starts = [0] * len(times)
    while any(s < len(t) for s, t in zip(starts, times)):
        # The span ends where some stream has ``size`` more rows (or its end).
        end_time = min(t[min(s + size, len(t)) - 1] for s, t in zip(starts, times) if s < len(t))
        ends = [int(np.searchsorted(t, end_time, side="right")) for t in times]
        yield [slice(s, e) for s, e in zip(starts, ends)]
        starts = ends


def group_ends(task: np.ndarray) -> np.ndarray:
    """Position of the last row of each run of equal ``task`` values."""
    if not len(task):
        return np.zeros(0, dtype=np.int64)
    return np.append(np.flatnonzero(task[1:] != task[:-1]), len(task) - 1)


def scan_by_task(
    streams: Sequence[tuple[np.ndarray, np.ndarray]],
    step: Callable[[TaskRows], np.ndarray],
    size: int = SPAN_ROWS,
) -> None:
    """Calls ``step`` on the rows of each time span of ``streams`` ((int64
    time, pid) column pairs, time-sorted), in time order. ``step`` returns
    the positions (in its ``TaskRows``, increasing) of the rows to carry into
    the next span; they keep their stream and row and come before the
    task's rows of the next span, in the same order."""
    ids = TaskIds([pid for _, pid in streams])
    carried = TaskRows(
        task=np.zeros(0, dtype=ids.dtype), stream=np.zeros(0, dtype=np.int8), row=np.zeros(0, dtype=np.int64)
    )
    for spans in time_spans([time for time, _ in streams], size):
        time = np.concatenate([np.full(len(carried.task), _BEFORE_ALL), *(t[s] for (t, _), s in zip(streams, spans))])
        task = np.concatenate([carried.task, *(ids(pid[s]) for (_, pid), s in zip(streams, spans))])
        stream = np.concatenate(
            [carried.stream, *(np.full(s.stop - s.start, k, dtype=np.int8) for k, s in enumerate(spans))]
        )
        row = np.concatenate([carried.row, *(np.arange(s.start, s.stop) for s in spans)])
        by_time = np.argsort(time, kind="stable")  # merges the sorted runs
        order = by_time[np.argsort(task[by_time], kind="stable")]  # radix sort of small ids
        rows = TaskRows(task=task[order], stream=stream[order], row=row[order])
        carry = step(rows)
        carried = TaskRows(task=rows.task[carry], stream=rows.stream[carry], row=rows.row[carry])


@dataclass(frozen=True)
class SwitchScan:
    """What one scan of a trace's switches (and wakeups) found, by row:

    * ``out_before_in``: for each ``sched_switch`` row, when the previous
      switch of the task it switches in (``next_pid``) switched it out, the
      row of that switch-out; else -1
    * ``in_after_wake``: for each row of the wakeup frame scanned (None if
      none was), when it is the task's first wakeup since a switch-out (or
      since the trace start) and the task's next switch is a switch-in, the
      row of that switch-in; else -1
    """

    out_before_in: np.ndarray
    in_after_wake: np.ndarray | None


def _scan(switch: pd.DataFrame, wake: pd.DataFrame | None) -> SwitchScan:
    require_time_order(switch, "sched_switch")
    sw_time = times_ns(switch)
    out_before_in = np.full(len(sw_time), -1, dtype=np.int64)
    if wake is None:
        wk_time = wk_pid = in_after_wake = np.zeros(0, dtype=np.int64)
    else:
        require_time_order(wake, "wakeup")
        wk_time, wk_pid = times_ns(wake), raw_int_column(wake, "pid")
        in_after_wake = np.full(len(wk_time), -1, dtype=np.int64)

    def step(rows: TaskRows) -> np.ndarray:
        task, stream = rows.task, rows.stream
        # Only first wakeups matter: the task's previous row is a switch-out
        # or nothing (it is off-CPU and not already woken). Without the
        # others, a first wakeup is followed by the task's next switch, and
        # an out by the next switch or by a first wakeup then the next switch.
        after_out = np.ones(len(task), dtype=bool)
        after_out[1:] = (task[1:] != task[:-1]) | (stream[:-1] == OUT)
        keep = np.flatnonzero((stream != WAKE) | after_out)
        k_stream, k_task, k_row = stream[keep], task[keep], rows.row[keep]
        same = k_task[1:] == k_task[:-1]
        is_out, is_wake, is_in = k_stream == OUT, k_stream == WAKE, k_stream == IN
        latency = np.flatnonzero(is_wake[:-1] & is_in[1:] & same)
        in_after_wake[k_row[latency]] = k_row[latency + 1]
        sleep = np.flatnonzero(is_out[:-1] & is_in[1:] & same)
        out_before_in[k_row[sleep + 1]] = k_row[sleep]
        woken = latency[latency > 0]
        woken = woken[is_out[woken - 1] & same[woken - 1]]
        out_before_in[k_row[woken + 1]] = k_row[woken - 1]
        # The next span needs each task's last switch and its first wakeup
        # since, if any: the last row kept, and the out before it if a wakeup.
        last = group_ends(k_task)
        pending = last[is_wake[last] & (last > 0)]
        pending = pending[same[pending - 1]]
        return keep[np.sort(np.concatenate([last, pending - 1]))]

    scan_by_task(
        [
            (sw_time, raw_int_column(switch, "prev_pid")),
            (wk_time, wk_pid),
            (sw_time, raw_int_column(switch, "next_pid")),
        ],
        step,
    )
    return SwitchScan(out_before_in=out_before_in, in_after_wake=None if wake is None else in_after_wake)


def switch_scan(switch: pd.DataFrame, wake: pd.DataFrame | None = None) -> SwitchScan:
    """:class:`SwitchScan` of a ``sched_switch`` frame and, if given, a
    wakeup frame (``sched_waking`` or ``sched_wakeup``), kept while the
    switch frame lives: ``trace.df_event`` gives every analysis of a trace
    the same frames, so they scan it once. A scan with wakeups also answers
    without."""
    last = derived(switch, "switch_scan", dict)  # the last scan: {"wake": weakref or None, "scan": SwitchScan}
    if last and (wake is None or (last["wake"] is not None and last["wake"]() is wake)):
        return last["scan"]
    scan = _scan(switch, wake)
    last.update(wake=None if wake is None else weakref.ref(wake), scan=scan)
    return scan
