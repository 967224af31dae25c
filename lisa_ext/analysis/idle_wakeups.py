"""Wake-ups from idle of a task and the frequency its CPU restarts at, from plain frames.

The computation behind ``trace.ana.wakeup_frequency``
(:class:`lisa_ext.analysis.wakeup_frequency.WakeupFrequencyAnalysis`, which
explains the kernel side: drivers/cpufreq/cpufreq_governor.c ``dbs_update()``),
on ``sched_switch`` and ``cpu_frequency`` frames in LISA's layout. It imports
neither LISA nor holoviews, so a study or a test that already has the frames
(from the parquet cache, or parsed from a console) does not pay LISA's start-up.
"""

from __future__ import annotations

from typing import Any, Collection, Sequence

import numpy as np
import pandas as pd

from lisa_ext.analysis._frames import event_times, int_column

__all__ = ["AFTER_WAKEUP_COLUMNS", "SLEEP_STATES", "WAKEUP_COLUMNS", "frequency_after_wakeups", "wakeups_from_idle"]

#: ``prev_state`` bits of a sleep: TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE
#: (a preempted task reports 0 or TASK_REPORT_MAX, a running one is not asleep)
SLEEP_STATES = 0x3

#: Columns of :meth:`WakeupFrequencyAnalysis.df_wakeups` / :func:`wakeups_from_idle`.
WAKEUP_COLUMNS = ("cpu", "pid", "comm", "sleep_s", "freq_at_sleep_khz", "freq_at_wakeup_khz",
                  "restart_freq_khz", "first_change_s", "burst_s", "time_below_s", "time_at_min_s",
                  "min_freq_khz")
#: Columns of :func:`frequency_after_wakeups`.
AFTER_WAKEUP_COLUMNS = ("wakeup_s", "cpu", "pid", "offset_s", "freq_khz")


class _Steps:
    """The piecewise-constant frequency of one CPU."""

    def __init__(self, time: np.ndarray, freq: np.ndarray):
        self.time, self.freq = time, freq.astype(float)

    def at(self, x: float) -> float:
        k = int(np.searchsorted(self.time, x, side="right")) - 1
        return float(self.freq[k]) if k >= 0 else np.nan

    def changes(self, start: float, end: float) -> np.ndarray:
        """Indices of the changes in (start, end)."""
        return np.arange(np.searchsorted(self.time, start, side="right"),
                         np.searchsorted(self.time, end, side="left"))

    def time_where(self, start: float, end: float, keep) -> float:
        """Seconds of [start, end) during which ``keep(freq)`` holds."""
        k = self.changes(start, end)
        edges = np.r_[start, self.time[k], end]
        levels = np.array([self.at(start), *self.freq[k]])
        return float(np.sum(np.diff(edges)[keep(levels)]))


def _steps_per_cpu(freq: pd.DataFrame) -> dict[int, _Steps]:
    time, cpu, state = event_times(freq), int_column(freq, "cpu_id"), int_column(freq, "state")
    return {int(c): _Steps(time[cpu == c], state[cpu == c]) for c in np.unique(cpu)}


def wakeups_from_idle(switches: pd.DataFrame, frequencies: pd.DataFrame, comm: str | None = None, *,
                      pids: Collection[int] | None = None, window_s: float | None = None,
                      min_sleep_s: float = 0.0, min_freq_khz: float | None = None) -> pd.DataFrame:
    """Every wake-up from idle of the tasks named ``comm`` (exactly), or of the tasks ``pids``
    (one of the two), indexed by its time (s).

    ``switches``: ``sched_switch`` rows indexed by time (s) with ``__cpu``,
    ``prev_comm``, ``prev_pid``, ``prev_state``, ``next_comm``, ``next_pid``;
    ``frequencies``: ``cpu_frequency`` rows with ``cpu_id`` and ``state`` (kHz).
    A wake-up is the first switch-in of the task after it switched out asleep (at
    least ``min_sleep_s`` earlier); it is from idle when the CPU left its idle task
    during the sleep (the governor's kworker often runs between the two, as in the
    RFC's excerpt); its burst lasts until the task next switches out asleep
    (preemptions included), cut at ``window_s``.
    Columns (:data:`WAKEUP_COLUMNS`): ``cpu``, ``pid``, ``comm`` (the task's name at the
    wake-up); ``sleep_s``;
    the CPU's frequency when the task slept (``freq_at_sleep_khz``), at the
    switch-in (``freq_at_wakeup_khz``) and after the first change from the CPU's
    exit from idle to the end of the burst, the governor's first decision
    (``restart_freq_khz``, the switch-in's frequency when nothing changed),
    ``first_change_s`` from the switch-in to that change (negative when the
    governor ran first; NaN: no change);
    ``burst_s``; in the burst, the seconds below the frequency of the sleep
    (``time_below_s``) and at ``min_freq_khz`` (``time_at_min_s``; default: the
    lowest frequency of the trace's ``cpu_frequency`` events).
    """
    steps = _steps_per_cpu(frequencies)
    if min_freq_khz is None:
        min_freq_khz = float(frequencies["state"].min()) if len(frequencies) else np.nan
    time, cpu = event_times(switches), int_column(switches, "__cpu")
    prev_pid, next_pid = int_column(switches, "prev_pid"), int_column(switches, "next_pid")
    asleep = (int_column(switches, "prev_state") & SLEEP_STATES) != 0
    if (comm is None) == (pids is None):
        raise ValueError("wakeups_from_idle: give either comm or pids")
    if pids is None:
        is_out = (switches["prev_comm"] == comm).to_numpy() & asleep
        is_in = (switches["next_comm"] == comm).to_numpy()
    else:
        chosen = np.fromiter(pids, dtype=np.int64)
        is_out = np.isin(prev_pid, chosen) & asleep
        is_in = np.isin(next_pid, chosen)
    next_comm = switches["next_comm"].to_numpy()
    rows: list[dict[str, Any]] = []
    index: list[float] = []
    idle_exits = {int(c): time[(cpu == c) & (prev_pid == 0)] for c in np.unique(cpu)}
    for pid in np.unique(np.r_[prev_pid[is_out], next_pid[is_in]]):
        outs = np.flatnonzero(is_out & (prev_pid == pid))
        ins = np.flatnonzero(is_in & (next_pid == pid))
        for i in ins:
            before = outs[outs < i]
            after = outs[outs > i]
            if not len(before) or not len(after):
                continue
            slept, woke, ended = time[before[-1]], time[i], time[after[0]]
            # a wake-up: the last switch-in before it was before the sleep
            if ins[ins < i].size and time[ins[ins < i][-1]] > slept or woke - slept < min_sleep_s:
                continue
            exits = idle_exits[int(cpu[i])]
            exits = exits[(exits > slept) & (exits <= woke)]
            if not len(exits):
                continue
            rows.append(_wakeup_row(steps.get(int(cpu[i])), int(cpu[i]), int(pid), str(next_comm[i]), slept,
                                    float(exits[-1]), woke, ended if window_s is None else min(ended, woke + window_s),
                                    ended - woke, min_freq_khz))
            index.append(woke)
    df = pd.DataFrame(rows, columns=list(WAKEUP_COLUMNS), index=pd.Index(index, name="Time", dtype=float))
    return df.sort_index(kind="stable")


def _wakeup_row(steps: _Steps | None, cpu: int, pid: int, comm: str, slept: float, idle_exit: float,
                woke: float, until: float, burst: float, min_freq: float) -> dict[str, Any]:
    row: dict[str, Any] = {"cpu": cpu, "pid": pid, "comm": comm, "sleep_s": woke - slept, "burst_s": burst,
                           "min_freq_khz": min_freq}
    if steps is None:  # the trace never saw this CPU's frequency
        return row | dict.fromkeys(("freq_at_sleep_khz", "freq_at_wakeup_khz", "restart_freq_khz",
                                    "first_change_s", "time_below_s", "time_at_min_s"), np.nan)
    level, at_wakeup = steps.at(slept), steps.at(woke)
    changes = steps.changes(idle_exit, until)
    first = changes[0] if len(changes) else None
    unknown = np.isnan(at_wakeup)
    return row | {
        "freq_at_sleep_khz": level,
        "freq_at_wakeup_khz": at_wakeup,
        "restart_freq_khz": float(steps.freq[first]) if first is not None else at_wakeup,
        "first_change_s": float(steps.time[first] - woke) if first is not None else np.nan,
        "time_below_s": np.nan if unknown or np.isnan(level) else
        steps.time_where(woke, until, lambda f: f < level),
        "time_at_min_s": np.nan if unknown else steps.time_where(woke, until, lambda f: f <= min_freq),
    }


def frequency_after_wakeups(wakeups: pd.DataFrame, frequencies: pd.DataFrame,
                            offsets_s: Sequence[float]) -> pd.DataFrame:
    """The frequency of the CPU each wake-up woke on, at each of ``offsets_s`` after it.

    ``wakeups``: :func:`wakeups_from_idle` (its index the wake-up's time, ``cpu``, ``pid``);
    ``frequencies``: ``cpu_frequency`` rows as there. The CPU is the one the task woke on, also
    after the task went back to sleep or moved: what its governor chose for it.
    One row per wake-up and offset (:data:`AFTER_WAKEUP_COLUMNS`): ``wakeup_s``, ``cpu``,
    ``pid``, ``offset_s``, ``freq_khz`` (NaN before the CPU's first ``cpu_frequency`` event).
    """
    offsets = np.asarray(offsets_s, dtype=float)
    woke = wakeups.index.to_numpy(dtype=float)
    cpus = wakeups["cpu"].to_numpy(dtype=np.int64)
    freq = np.full((len(woke), len(offsets)), np.nan)
    for cpu, steps in _steps_per_cpu(frequencies).items():
        rows = np.flatnonzero(cpus == cpu)
        if not rows.size:
            continue
        at = np.searchsorted(steps.time, woke[rows, None] + offsets[None, :], side="right") - 1
        freq[rows] = np.where(at >= 0, steps.freq[np.maximum(at, 0)], np.nan)
    return pd.DataFrame({"wakeup_s": np.repeat(woke, len(offsets)), "cpu": np.repeat(cpus, len(offsets)),
                         "pid": np.repeat(wakeups["pid"].to_numpy(dtype=np.int64), len(offsets)),
                         "offset_s": np.tile(offsets, len(woke)), "freq_khz": freq.ravel()},
                        columns=list(AFTER_WAKEUP_COLUMNS))
