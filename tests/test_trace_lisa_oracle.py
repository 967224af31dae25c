"""load_trace() gives the same LISA frames as LISA's own parser, on the shared traces.

The oracle is ``lisa.trace.Trace(path)`` with LISA's default parser for the
file (``TxtTraceParser.from_dat`` over ``trace-cmd report`` for trace.dat,
``HRTxtTraceParser`` for text, ``SysTraceParser`` for HTML). Every event LISA
itself can parse is compared: index (exactly, after LISA's time
deduplication), columns, dtypes and values.

LISA's text route has a few known misparses; where one applies, the value we
give must be the correct reading of the same text, checked by the rule named
in ``_LISA_MISPARSES`` (never skipped silently):

* a task name with a space (``rs:main Q:Reg``): LISA's header regex keeps the
  last word;
* a ``trace_printk`` text spanning lines: LISA keeps the first line;
* a hex bitmask (``cpus=000000f0``): LISA reads it as a hex integer, we keep
  the text (text has no type information, see lisa_ext/trace/text.py);
* systrace HTML of the old ``linuxPerfData`` kind, and the same string saved
  as a text file (``android_systrace.txt``): LISA reads the JavaScript
  source, so the last field of each line keeps a literal ``\\n\\``;
* ``sched_stat_runtime`` printed as ``runtime=4479833 [ns]``: LISA splits
  fields at the wrong place; our values are checked against
  ``trace-cmd report`` separately (``test_sched_stat_runtime_values``).

Fields printed through ``%ps`` (``workqueue_*.function``) are compared with
no relaxation: on a trace with workqueue events, against LISA and against the
names parsed from ``trace-cmd report`` (``test_symbol_fields_equal_lisa_and_trace_cmd``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from shared_traces import DAT_TRACES, shared_trace

TEXT_TRACES = [
    "public/lisa/lisa_tests_trace.txt",
    "public/lisa/doc_trace.txt",
    "public/lisa/tests_trace_2015.txt",
    "public/lisa/trace_thermal.txt",
    "public/catapult/android_systrace.html",
    "public/catapult/android_systrace.txt",
]
# Events LISA's own parser fails on for these files (it raises), so there is
# nothing to compare with; our frames for them are checked by the text and
# trappy tests.
LISA_CANNOT_PARSE = {
    "public/lisa/lisa_tests_trace.txt": {"print", "sched_switch"},
    "public/lisa/tests_trace_2015.txt": {"print"},
    "public/lisa/trace_thermal.txt": {"bprint"},
    "public/catapult/android_systrace.html": {"0"},
}


@pytest.fixture(scope="module")
def trace_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LISA_EXT_CACHE", str(tmp_path_factory.mktemp("trace-cache")))
        yield


@pytest.fixture(scope="module")
def lisa():
    from lisa_ext.compat import import_lisa

    return import_lisa("lisa.trace")


def _as_list(series: pd.Series) -> list:
    return [None if (not isinstance(v, (bytes, list)) and pd.isna(v)) else v for v in series.astype(object)]


def _space_in_comm(ours, theirs):
    return isinstance(ours, str) and " " in ours and ours.rsplit(" ", 1)[-1] == theirs


def _first_line(ours, theirs):
    return isinstance(ours, bytes) and b"\n" in ours and ours.split(b"\n", 1)[0] == theirs


def _hex_bitmask(ours, theirs):
    try:
        return isinstance(ours, str) and int(ours.replace(",", ""), 16) == int(theirs)
    except (TypeError, ValueError):
        return False


def _js_residue(ours, theirs):
    return isinstance(theirs, str) and theirs.endswith("\\n\\") and str(theirs[:-3]).lstrip("0") == str(ours).lstrip("0")


_LISA_MISPARSES = [_space_in_comm, _first_line, _hex_bitmask, _js_residue]
# (event, column) whose LISA values are known garbage for every trace: see module docstring
_LISA_GARBAGE_COLUMNS = {("sched_stat_runtime", "runtime"), ("sched_stat_runtime", "vruntime")}


def assert_same_event(event: str, ours: pd.DataFrame, theirs: pd.DataFrame) -> None:
    assert len(ours) == len(theirs), f"{event}: {len(ours)} rows, LISA has {len(theirs)}"
    assert np.array_equal(ours.index.values, theirs.index.values), f"{event}: index differs"
    assert ours.index.name == theirs.index.name
    assert set(ours.columns) == set(theirs.columns), f"{event}: columns {sorted(ours.columns)} vs {sorted(theirs.columns)}"
    for col in theirs.columns:
        if (event, col) in _LISA_GARBAGE_COLUMNS:
            continue
        a, b = _as_list(ours[col]), _as_list(theirs[col])
        misparsed = False
        for x, y in zip(a, b):
            if x == y or (x is None and y is None):
                continue
            assert any(rule(x, y) for rule in _LISA_MISPARSES), f"{event}.{col}: {x!r} vs LISA {y!r}"
            misparsed = True
        if not misparsed:
            assert ours[col].dtype == theirs[col].dtype, f"{event}.{col}: {ours[col].dtype} vs {theirs[col].dtype}"


@pytest.mark.parametrize("rel", DAT_TRACES + TEXT_TRACES)
def test_every_event_equals_lisa(rel, trace_cache, lisa):
    from lisa_ext.trace import load_trace

    path = shared_trace(rel)
    if path.suffix == ".dat" and shutil.which("trace-cmd") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("trace-cmd missing in CI (LISA's parser needs it)")
        pytest.skip("trace-cmd not installed: LISA's own parser cannot read trace.dat")
    theirs_trace = lisa.Trace(str(path), enable_swap=False)
    ours_trace = load_trace(path)
    theirs_events = set(theirs_trace.available_events)
    ours_events = set(ours_trace.available_events)
    # LISA lists a meta event (userspace@..., from print markers) once some load parsed it,
    # and our Trace's swap lives in the content-keyed cache, so a meta event another test
    # parsed may already be listed: it must then be one LISA's own parser also yields.
    for meta in ours_events - theirs_events:
        assert "@" in meta, f"extra event {meta!r}"
        assert not theirs_trace.df_event(meta).empty, meta
    assert theirs_events <= ours_events
    assert ours_trace.basetime == theirs_trace.basetime
    # LISA's Trace keeps the time range of whichever of its parsing worker
    # processes reported last, and on a trace whose last line goes back in time
    # (android_systrace.html ends with a clock-sync marker at 0.0) they differ
    # by the one-ulp bump of its deduplication, from run to run.
    ulp = np.nextafter(theirs_trace.endtime, np.inf) - theirs_trace.endtime
    assert abs(ours_trace.endtime - theirs_trace.endtime) <= ulp
    compared = 0
    for event in sorted(theirs_events):
        if event in LISA_CANNOT_PARSE.get(rel, ()):
            with pytest.raises(Exception):
                theirs_trace.df_event(event)
            ours_trace.df_event(event)  # but ours reads it
            continue
        assert_same_event(event, ours_trace.df_event(event), theirs_trace.df_event(event))
        compared += 1
    assert compared >= 2


def _trace_cmd_rows(path: Path, event: str) -> list[str]:
    out = subprocess.run(["trace-cmd", "report", "-N", "-t", "-F", event, "--", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if f" {event}:" in line]


def test_sched_stat_runtime_values(trace_cache):
    """The columns LISA misparses, checked against trace-cmd's own text instead."""
    if shutil.which("trace-cmd") is None:
        pytest.skip("trace-cmd not installed")
    from lisa_ext.trace import load_trace

    path = shared_trace("public/lisa/tests_trace_2014.dat")
    df = load_trace(path).df_event("sched_stat_runtime")
    rows = _trace_cmd_rows(path, "sched_stat_runtime")
    parsed = [re.search(r"runtime=(\d+) \[ns\] vruntime=(\d+) \[ns\]", line) for line in rows]
    assert len(parsed) == len(df) == 7981
    assert df["runtime"].tolist() == [int(m.group(1)) for m in parsed]
    assert df["vruntime"].tolist() == [int(m.group(2)) for m in parsed]


# the fio trace is large (1.2M records): LISA parses only the workqueue events
WQ_TRACE = "local/fio_randread_2cpu_v7.dat"
WQ_EVENTS = ["workqueue_queue_work", "workqueue_activate_work", "workqueue_execute_start", "workqueue_execute_end"]


def test_symbol_fields_equal_lisa_and_trace_cmd(trace_cache, lisa):
    """``function`` (print fmt ``%ps``) is the symbol name, as trace-cmd report and LISA give it."""
    if shutil.which("trace-cmd") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("trace-cmd missing in CI (LISA's parser needs it)")
        pytest.skip("trace-cmd not installed")
    from lisa_ext.trace import load_trace, read_trace

    path = shared_trace(WQ_TRACE)
    ours_trace = load_trace(path)
    theirs_trace = lisa.Trace(str(path), enable_swap=False, events=WQ_EVENTS)
    raw = read_trace(path, WQ_EVENTS)
    for event in WQ_EVENTS:
        ours = ours_trace.df_event(event)
        assert_same_event(event, ours, theirs_trace.df_event(event))
        rows = _trace_cmd_rows(path, event)
        names = [re.search(r"function[ =](\S+)", line).group(1) for line in rows]
        assert len(names) == len(ours) > 1000
        assert ours["function"].tolist() == names
        assert ours["function"].dtype == "string"
        assert not any(n.startswith("0x") for n in names)
        # read_trace keeps the raw address (lisa_ext/trace/tables.py)
        assert pa.types.is_unsigned_integer(raw[event].schema.field("function").type)
    assert "blk_mq_run_work_fn" in set(ours_trace.df_event("workqueue_execute_start")["function"])


@pytest.mark.parametrize("print_fmt, expected", [
    ('"work struct %p: function %ps", REC->work, REC->function', {"function": "s"}),
    ('"cpu=%u callsite=%pS func=%ps csd=%p", REC->cpu, REC->callsite, REC->func, REC->csd',
     {"callsite": "S", "func": "s"}),
    ('"%*d %% %pF %pf", REC->w, REC->n, (void *)REC->a, f(REC->b, 1)', {"a": "F"}),
    ('"\\t=> %ps\\n", (void *)REC->caller[0]', {}),
])
def test_symbol_conversions_of_print_fmt(print_fmt, expected):
    from lisa_ext.trace.tracedat_format import symbol_conversions

    assert symbol_conversions(print_fmt) == expected


def _record_kmalloc(out: Path) -> None:
    """A short trace.dat with ``kmem:kmalloc`` (``call_site=%pS``), in a private instance."""
    def need(ok: bool, reason: str):
        if not ok:
            if os.environ.get("CI") == "true":
                pytest.fail(f"{reason} (required in CI)")
            pytest.skip(reason)

    need(os.geteuid() == 0, "needs root to record a trace")
    need(Path("/sys/kernel/tracing/events/kmem/kmalloc/format").is_file(), "no kmem:kmalloc event in tracefs")
    need(shutil.which("trace-cmd") is not None, "trace-cmd not installed")
    instance = f"lisa_ext_pS_{os.getpid()}"
    try:
        # `ls /` alone once recorded no kmalloc on a loaded host; each read of a seq_file allocates its
        # buffer with kmalloc, so 100 of them always leave events.
        # trace-cmd may exit 1 on its final cleanup with complete data: the file is checked below
        subprocess.run(["trace-cmd", "record", "--no-filter", "-d", "-B", instance, "-e", "kmem:kmalloc",
                        "-o", str(out), "--", "sh", "-c",
                        "for i in $(seq 100); do cat /proc/self/maps >/dev/null; done"],
                       capture_output=True, timeout=120)
    finally:
        if os.path.isdir(f"/sys/kernel/tracing/instances/{instance}"):
            os.rmdir(f"/sys/kernel/tracing/instances/{instance}")
    assert out.is_file() and out.stat().st_size > 0


def test_symbol_with_offset_field_equals_trace_cmd_and_lisa(tmp_path, trace_cache, lisa):
    """``%pS`` (``kmalloc.call_site``) reads ``name+0xoff``, as trace-cmd report prints it."""
    from lisa_ext.trace import load_trace

    path = tmp_path / "kmalloc.dat"
    _record_kmalloc(path)
    ours = load_trace(path).df_event("kmalloc")
    out = subprocess.run(["trace-cmd", "report", "-N", "-t", "--", str(path)],
                         capture_output=True, text=True, check=True).stdout
    sites = [re.search(r"call_site=(\S+)", line).group(1) for line in out.splitlines() if " kmalloc: " in line]
    assert len(sites) == len(ours) > 0
    assert ours["call_site"].tolist() == sites
    assert all(re.fullmatch(r"\w[\w.]*\+0x[0-9a-f]+", s) for s in sites)
    theirs = lisa.Trace(str(path), enable_swap=False, events=["kmalloc"]).df_event("kmalloc")
    assert ours["call_site"].tolist() == theirs["call_site"].tolist()
    assert ours["call_site"].dtype == theirs["call_site"].dtype
