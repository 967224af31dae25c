"""Randomized differential test of ``lisa_ext.analysis._task_scan.switch_scan``.

The scan was rewritten for speed: it cuts the ``sched_switch`` and wakeup
streams into time spans, sorts each span by task on its own and carries the
rows each task still needs (its last switch, a pending first wakeup and the
switch-out before it) into the next span. Such carrying is easy to get subtly
wrong, and the real traces of the other analysis tests are cut into spans of
64 K rows, so they hardly ever cross a span boundary in an interesting state.

This file pins the scan's two results to a plain reference written here (no
lisa_ext code): for each task, its events (time, kind, row) with kind
switch-out < wakeup < switch-in at equal times, sorted and walked in order.

* ``out_before_in[r]``: the switch-out row of the task switched in at row
  ``r`` when that task's previous switch event is a switch-out, else -1
  (sleeps, for iowait_boost).
* ``in_after_wake[w]``: for a wakeup whose task's previous event is a
  switch-out (or none: trace start), the row of the task's next switch event
  if that is a switch-in, else -1; wakeups following another wakeup or a
  switch-in are -1 (wakeup latencies, for wakeup_latency, which drops pid 0
  itself; the scan follows pid 0 like any task).

Thousands of small random traces (fixed seeds) are scanned with span sizes of
1, 2, 3 and 7 rows, and with the default size: many ties in time (within and
across the streams), few and many pids, pid 0, pids above 65535 (small pids
that equal them modulo 65536 too) and over 65536 distinct pids, pid columns
as uint32/int32/int64/pandas Int64, prev_pid == next_pid, empty frames and no
wakeup frame. ``SPAN_ROWS`` is a default argument of ``scan_by_task`` bound at
import, so patching the module attribute would change nothing: the span size
is forced by wrapping ``scan_by_task``, and the number of spans is checked.
"""

from __future__ import annotations

import functools
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from lisa_ext.analysis import _task_scan

OUT, WAKE, IN = 0, 1, 2
DTYPES = ("uint32", "int32", "int64", "Int64")


# --- the reference -----------------------------------------------------------


def reference(sw_time, prev_pid, next_pid, wk_time, wk_pid):
    """(out_before_in, in_after_wake) as lists, by walking each task's events."""
    events = defaultdict(list)  # pid -> [(time, kind, row)]
    for r in range(len(sw_time)):
        events[prev_pid[r]].append((sw_time[r], OUT, r))
        events[next_pid[r]].append((sw_time[r], IN, r))
    for w in range(len(wk_time)):
        events[wk_pid[w]].append((wk_time[w], WAKE, w))
    out_before_in = [-1] * len(sw_time)
    in_after_wake = [-1] * len(wk_time)
    for seq in events.values():
        seq.sort()
        previous_kind = None  # of the task's previous event, wakeups included
        last_switch = None  # (kind, row) of the task's previous switch event
        pending_wake = None  # row of a first wakeup since a switch-out, not yet switched in
        for _, kind, row in seq:
            if kind == WAKE:
                if previous_kind is None or previous_kind == OUT:
                    pending_wake = row
            else:
                if kind == IN:
                    if last_switch is not None and last_switch[0] == OUT:
                        out_before_in[row] = last_switch[1]
                    if pending_wake is not None:
                        in_after_wake[pending_wake] = row
                pending_wake = None
                last_switch = (kind, row)
            previous_kind = kind
    return out_before_in, in_after_wake


# --- frames --------------------------------------------------------------------


def switch_frame(times_ns, prev_pid, next_pid, dtype="uint32"):
    n = len(times_ns)
    return pd.DataFrame(
        {
            "__cpu": np.arange(n, dtype=np.uint32) % 4,
            "prev_pid": pd.array(np.asarray(prev_pid, dtype=np.int64), dtype=dtype),
            "next_pid": pd.array(np.asarray(next_pid, dtype=np.int64), dtype=dtype),
            "prev_state": np.ones(n, dtype=np.int64),
        },
        index=pd.Index(np.asarray(times_ns, dtype=np.int64) / 1e9, name="Time"),
    )


def wake_frame(times_ns, pid, dtype="uint32"):
    return pd.DataFrame(
        {
            "pid": pd.array(np.asarray(pid, dtype=np.int64), dtype=dtype),
            "comm": [f"t{p}" for p in pid],
        },
        index=pd.Index(np.asarray(times_ns, dtype=np.int64) / 1e9, name="Time"),
    )


@pytest.fixture
def span_rows(monkeypatch):
    """Calling it with ``n`` makes every later scan cut its streams into
    spans of ``n`` rows (None: the module's default); its ``spans`` attribute
    lists the number of spans of each of those scans, in order."""
    original = _task_scan.scan_by_task
    spans = []

    def set_size(n):
        def scan_by_task(streams, step, size=_task_scan.SPAN_ROWS):
            spans.append(0)

            def counting_step(rows):
                spans[-1] += 1
                return step(rows)

            return original(streams, counting_step, size if n is None else n)

        monkeypatch.setattr(_task_scan, "scan_by_task", scan_by_task)

    set_size.spans = spans
    return set_size


def scan_and_compare(sw_time, prev_pid, next_pid, wk_time, wk_pid, dtype="uint32", what=""):
    """Scans fresh frames (the scan is cached per frame) with and without
    the wakeups and checks both against the reference."""
    want_out, want_wake = reference(sw_time, prev_pid, next_pid, wk_time, wk_pid)
    switch = switch_frame(sw_time, prev_pid, next_pid, dtype)
    wake = wake_frame(wk_time, wk_pid, dtype)
    got = _task_scan.switch_scan(switch, wake)
    # Sleeps do not depend on the wakeups; the scan without them agrees.
    alone = _task_scan.switch_scan(switch_frame(sw_time, prev_pid, next_pid, dtype))
    assert got.in_after_wake is not None and alone.in_after_wake is None
    results = (got.out_before_in.tolist(), got.in_after_wake.tolist(), alone.out_before_in.tolist())
    if results != (want_out, want_wake, want_out):  # the frames only printed on failure: repr is slow
        names = ("out_before_in", "in_after_wake", "out_before_in without wakeups")
        wrong = [f"{n}: got {g}, want {w}" for n, g, w in zip(names, results, (want_out, want_wake, want_out)) if g != w]
        pytest.fail("\n".join([what, *wrong, f"switch:\n{switch}", f"wake:\n{wake}"]))
    return want_out, want_wake


# --- hand-written cases ----------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 3, None])
def test_woken_twice_latency_from_first_wakeup(span_rows, size):
    span_rows(size)
    # Task 5 is switched out (row 0), woken at 20 and 30, switched in (row 1).
    out, wake = scan_and_compare([10, 40], [5, 1], [1, 5], [20, 30], [5, 5])
    assert out == [-1, 0]  # row 1 switches 5 in after its sleep from row 0
    assert wake == [1, -1]  # the latency runs from the first wakeup


@pytest.mark.parametrize("size", [1, 2, 3, None])
def test_ties_trace_start_and_running_wakeups(span_rows, size):
    span_rows(size)
    sw_time = [10, 20, 30, 40]
    prev_pid = [3, 4, 3, 0]
    next_pid = [4, 3, 0, 3]
    # Wakeup 0: task 4 at 10, the time of its switch-in (row 0): a wakeup
    # comes before a simultaneous switch-in, and with no earlier event it is
    # a first wakeup (trace start): paired with row 0, latency 0.
    # Wakeup 1: task 3 at 20, the time of its switch-in (row 1), after its
    # switch-out (row 0): paired with row 1.
    # Wakeup 2: task 3 at 25, while running: not a first wakeup.
    # Wakeup 3: task 9, never switched in: no pair.
    # Wakeup 4: task 0 (idle) at 30, the time of its switch-in (row 2): the
    # scan follows it like any task (wakeup_latency drops it).
    wk_time = [10, 20, 25, 26, 30]
    wk_pid = [4, 3, 3, 9, 0]
    out, wake = scan_and_compare(sw_time, prev_pid, next_pid, wk_time, wk_pid)
    assert out == [-1, 0, -1, 2]  # 3 slept from row 0 to row 1 and from row 2 to row 3
    assert wake == [0, 1, -1, -1, 2]


@pytest.mark.parametrize("size", [1, 2, None])
def test_out_and_in_of_one_row(span_rows, size):
    span_rows(size)
    # Row 0 switches 7 out and back in at 10; a wakeup at 10 falls between.
    out, wake = scan_and_compare([10, 20, 30], [7, 7, 2], [7, 2, 7], [10, 25], [7, 7])
    assert out == [0, -1, 1]
    assert wake == [0, 2]


@pytest.mark.parametrize("size", [1, 2, None])
def test_pids_above_65535_are_not_their_low_16_bits(span_rows, size):
    span_rows(size)
    # 65541 and 70000 equal 5 and 4464 modulo 65536; 4194303 is the highest pid.
    sw_time, prev_pid, next_pid = [1, 2, 3, 4], [5, 65541, 4464, 70000], [65541, 5, 70000, 4194303]
    out, wake = scan_and_compare(sw_time, prev_pid, next_pid, [1, 2, 3, 3], [65541, 5, 70000, 4194303])
    assert out == [-1, 0, -1, -1]
    assert wake == [0, 1, 2, 3]


def test_empty_frames(span_rows):
    span_rows(1)
    assert scan_and_compare([], [], [], [], []) == ([], [])
    assert scan_and_compare([], [], [], [1, 2], [3, 0]) == ([], [-1, -1])
    # Simultaneous switches 0 -> 3 -> 0: at one time a task's switch-out
    # comes before its switch-in, whatever their rows.
    assert scan_and_compare([1, 1], [0, 3], [3, 0], [], []) == ([1, 0], [])


def test_frames_out_of_time_order_are_refused():
    with pytest.raises(ValueError, match="sched_switch"):
        _task_scan.switch_scan(switch_frame([2, 1], [1, 2], [2, 1]))
    with pytest.raises(ValueError, match="wakeup"):
        _task_scan.switch_scan(switch_frame([1, 2], [1, 2], [2, 1]), wake_frame([2, 1], [1, 2]))


# --- random traces ------------------------------------------------------------------


def pid_pool(rng):
    """Distinct pids a trace draws from: few or many, with or without 0,
    small and above 65535, sometimes ones equal modulo 65536."""
    kind = rng.integers(5)
    if kind == 0:  # one or two tasks, often the idle task
        pool = rng.choice([0, 1, 2, 65537], size=rng.integers(1, 3), replace=False)
    elif kind == 1:  # a few small pids
        pool = rng.choice(12, size=rng.integers(2, 6), replace=False)
    elif kind == 2:  # many small pids
        pool = rng.choice(40000, size=rng.integers(6, 30), replace=False)
    elif kind == 3:  # small pids and their twins above 65535
        small = rng.choice(30, size=rng.integers(1, 4), replace=False)
        pool = np.concatenate([small, small + 65536, [0]])
    else:  # large pids only (up to 200 K: the scan's lookup table spans 0..max pid)
        pool = rng.choice(np.arange(65536, 200_000, 97), size=rng.integers(1, 8), replace=False)
    return np.unique(pool)


def sorted_times(rng, n, span):
    """``n`` sorted ns times among ``span`` values: many ties when small."""
    return np.sort(1_000_000_000 + 7 * rng.integers(0, max(span, 1), size=n))


def random_trace(rng):
    pool = pid_pool(rng)
    n_sw = int(rng.choice([0, 1, 2, 3, 5, 8, 13, 21, 30]))
    n_wk = int(rng.choice([0, 1, 2, 4, 8, 16, 30]))
    # Times from one small range for both streams, so that their rows tie.
    time_range = int(rng.choice([1, 2, 4, 8, 20, 60]))
    sw_time = sorted_times(rng, n_sw, time_range)
    wk_time = sorted_times(rng, n_wk, time_range)
    prev_pid = rng.choice(pool, size=n_sw)
    next_pid = rng.choice(pool, size=n_sw)
    if len(pool) > 1 and rng.random() < 0.7:  # mostly a real switch: prev != next
        clash = prev_pid == next_pid
        while clash.any():
            next_pid[clash] = rng.choice(pool, size=int(clash.sum()))
            clash = prev_pid == next_pid
    wk_pid = rng.choice(pool, size=n_wk)
    return [x.tolist() for x in (sw_time, prev_pid, next_pid, wk_time, wk_pid)]


@pytest.mark.parametrize("size,seed,cases", [(1, 1, 400), (2, 2, 600), (3, 3, 600), (7, 7, 600), (None, 11, 300)])
def test_random_traces_match_the_reference(span_rows, size, seed, cases):
    span_rows(size)
    rng = np.random.default_rng(seed)
    crossed = 0
    for case in range(cases):
        trace = random_trace(rng)
        dtype = DTYPES[case % len(DTYPES)]
        scan_and_compare(*trace, dtype=dtype, what=f"span size {size}, seed {seed}, case {case}, {dtype}")
        n_rows = max(len(trace[0]), len(trace[3]))
        spans = span_rows.spans[-2]  # the scan with wakeups
        if size is None:
            assert (spans > 0) == (n_rows > 0) and spans <= 2  # a span ends where a stream does
        else:
            # Each span takes at least one row.
            assert (spans > 0) == (n_rows > 0) and spans <= len(trace[0]) + len(trace[3])
            crossed += spans > 1
    if size is not None:
        assert crossed > cases // 2  # span boundaries were exercised


@pytest.mark.parametrize("size", [1, 5])
def test_long_random_traces_of_few_tasks(span_rows, size):
    """Long traces of three tasks: each task crosses many span boundaries
    with every state carried (after a switch-in, a switch-out, a pending
    first wakeup, repeated wakeups)."""
    span_rows(size)
    rng = np.random.default_rng(100 + size)
    for case in range(20):
        pool = np.array([0, 1, 65537]) if case % 2 else np.array([3, 4, 5])
        n_sw, n_wk = int(rng.integers(100, 300)), int(rng.integers(0, 300))
        sw_time = sorted_times(rng, n_sw, n_sw)
        wk_time = sorted_times(rng, n_wk, n_sw)
        at = rng.integers(0, 3, size=n_sw)  # prev_pid != next_pid
        prev_pid, next_pid = pool[at], pool[(at + rng.integers(1, 3, size=n_sw)) % 3]
        wk_pid = rng.choice(pool, size=n_wk)
        trace = [x.tolist() for x in (sw_time, prev_pid, next_pid, wk_time, wk_pid)]
        _, want_wake = scan_and_compare(*trace, dtype=DTYPES[case % len(DTYPES)], what=f"size {size} case {case}")
        assert span_rows.spans[-2] > n_sw // (4 * size)
        assert sum(w >= 0 for w in want_wake) > 0 or n_wk == 0


def test_more_than_65536_distinct_pids(span_rows):
    """Task ids wider than uint16: over 65536 distinct pids, all above 65535."""
    span_rows(4096)
    rng = np.random.default_rng(65537)
    pids = rng.permutation(np.arange(70000, 70000 + 3 * 23000))
    n_sw = 40000
    # Most pids appear once; the first 11000 are switched out, then in.
    prev_pid = pids[:n_sw]
    next_pid = np.concatenate([pids[n_sw:], pids[: 2 * n_sw - len(pids)]])
    sw_time = sorted_times(rng, n_sw, n_sw // 2)
    wk_time = sorted_times(rng, 20000, n_sw // 2)
    wk_pid = rng.choice(pids, size=20000)
    assert len(np.unique(np.concatenate([prev_pid, next_pid, wk_pid]))) > 1 << 16
    trace = [x.tolist() for x in (sw_time, prev_pid, next_pid, wk_time, wk_pid)]
    out, wake = scan_and_compare(*trace, dtype="uint32")
    assert span_rows.spans[-2] > 5
    assert sum(o >= 0 for o in out) > 100 and sum(w >= 0 for w in wake) > 100
