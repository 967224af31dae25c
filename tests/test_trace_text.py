"""Text and systrace readers: formats, shapes, and damaged input.

Expected values come from outside the code under test: ``trace-cmd report``
text compared with the binary decoder's tables for the same trace.dat, counts
of raw substrings in the files, and values read off the shared files by eye
(quoted next to each assertion).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import zlib
from pathlib import Path

import pyarrow as pa
import pytest

from lisa_ext.errors import UserError
from lisa_ext.trace import detect_format, read_trace
from lisa_ext.trace.systrace import read_systrace
from lisa_ext.trace.text import parse_text_lines, read_text

from shared_traces import DAT_TRACES, shared_trace
from tracedat_report import report_stdout

COMMON = ["__timestamp", "__cpu", "__pid", "__comm"]


def trace_cmd_report(path: Path, *flags: str, events: set[str] = frozenset()) -> list[str]:
    if shutil.which("trace-cmd") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("trace-cmd missing in CI")
        pytest.skip("trace-cmd not installed")
    return report_stdout(["trace-cmd", "report", "-N", "-t", *flags, "--", str(path)], events=events).splitlines()


def _events_with_rows(tables):
    return {e for e, t in tables.tables.items() if t.num_rows}


@pytest.mark.parametrize("rel", DAT_TRACES)
def test_raw_report_text_equals_binary_decoder(rel):
    """``trace-cmd report -R`` text read by us == the trace.dat decoder, field by field."""
    from lisa_ext.trace.tracedat import read_tracedat

    path = shared_trace(rel)
    binary = read_tracedat(path)
    text = parse_text_lines(trace_cmd_report(path, "-R", events=_events_with_rows(binary)), source=f"{rel} -R")
    assert set(text.tables) == _events_with_rows(binary)
    assert text.meta["warnings"] == []
    assert text.meta["cpus"] == binary.meta["cpus"]
    for event, table in text.tables.items():
        expected = binary[event]
        assert table.column_names[:4] == COMMON
        assert table.schema.field("__timestamp").type == pa.int64()
        assert table.schema.field("__cpu").type == pa.int32()
        assert table.num_rows == expected.num_rows == binary.meta["event_counts"][event]
        # raw bprint text holds no message; print-like events are read from non-raw text below
        columns = COMMON if event in ("print", "bprint", "bputs") else expected.column_names
        for column in columns:
            assert table.column(column).to_pylist() == expected.column(column).to_pylist(), (event, column)


@pytest.mark.parametrize("rel", ["public/lisa/example_rtapp_trace.dat", "public/lisa/raw_trace.dat",
                                 "public/lisa/tests_trace_2019.dat", "public/lisa/sched_load_trace.dat"])
def test_print_and_bprint_text_equals_binary_decoder(rel):
    from lisa_ext.trace.tracedat import read_tracedat

    path = shared_trace(rel)
    binary = read_tracedat(path)
    text = parse_text_lines(trace_cmd_report(path, events=_events_with_rows(binary)), source=rel)
    compared = 0
    for event in ("print", "bprint"):
        if event in text.tables:
            assert text[event].column_names == COMMON + (["ip", "fmt", "buf"] if event == "bprint" else ["ip", "buf"])
            assert text[event].column("buf").to_pylist() == binary[event].column("buf").to_pylist()
            assert text[event].column("fmt" if event == "bprint" else "buf").type == pa.string()
            compared += 1
    assert compared


def test_tracefs_text_with_tgid_and_flags():
    path = shared_trace("public/catapult/decompressed_atrace_data.txt")
    raw = path.read_text()
    tables = read_trace(path, cache=False)
    assert tables.meta["format"] == "text"
    # "# entries-in-buffer/entries-written: 1042/1042   #P:6"
    assert tables.meta["cpus"] == 6
    assert tables.meta["event_counts"] == {"tracing_mark_write": raw.count(": tracing_mark_write: ")}
    marks = tables["tracing_mark_write"]
    # first line: "<...>-19161 (-----) [001] ...1 683201.354908: tracing_mark_write: trace_event_clock_sync: parent_ts=683201.375000"
    first = marks.slice(0, 1).to_pylist()[0]
    assert first == {"__timestamp": 683201354908000, "__cpu": 1, "__pid": 19161, "__comm": "<...>",
                     "buf": "trace_event_clock_sync: parent_ts=683201.375000"}
    # " ndroid.systemui-13580 (13580) [001] ...1 683202.104223: tracing_mark_write: S|13580|deliverInputEvent|263"
    assert marks.column("__comm").to_pylist()[2] == "ndroid.systemui"
    assert marks.column("buf").to_pylist()[2] == "S|13580|deliverInputEvent|263"


def test_trace_cmd_plugin_format_and_continuation_lines():
    path = shared_trace("public/trappy/trace_not_raw.txt")
    tables = read_text(path)
    # "ls-4734  [002] 106439.675591: sched_switch:  trace-cmd:4734 [120] R ==> migration/2:18 [0]"
    row = tables["sched_switch"].slice(0, 1).to_pylist()[0]
    assert row == {"__timestamp": 106439675591000, "__cpu": 2, "__pid": 4734, "__comm": "ls",
                   "prev_comm": "trace-cmd", "prev_pid": 4734, "prev_prio": 120, "prev_state": "R",
                   "next_comm": "migration/2", "next_pid": 18, "next_prio": 0}
    assert tables["sched_switch"].num_rows == path.read_text().count(": sched_switch: ")
    # "bprint:  select_task_rq_fair: fig: cpu=0" followed by the line " gid=4"
    assert tables["bprint"].column("ip").to_pylist() == ["select_task_rq_fair"] * 2
    assert tables["bprint"].column("buf").to_pylist() == ["fig: cpu=0\n gid=4", "fig: cpu=5\n gid=1"]
    assert tables.meta["warnings"] == []


def test_human_sched_switch_and_positional_text():
    lines = [
        "          <idle>-0     [001] d..2  538.802663: cpu_idle: state=0 cpu_id=1",
        "ChromiumNet-7502 ( 7459) [004] d..3   538.802671: sugov_set_iowait_boost: skipping iow boost",
        "kworker/u16:7-347 ( 347) [004] d..3   538.802729: sched_switch: prev_comm=kworker/u16:7 prev_pid=347 "
        "prev_prio=120 prev_state=R+ ==> next_comm=sugov:4 next_pid=5860 next_prio=49",
    ]
    tables = parse_text_lines(lines)
    assert tables["sugov_set_iowait_boost"].column("__positional").to_pylist() == ["skipping iow boost"]
    switch = tables["sched_switch"].slice(0, 1).to_pylist()[0]
    assert switch["prev_state"] == "R+" and switch["next_comm"] == "sugov:4" and switch["next_prio"] == 49
    assert switch["__comm"] == "kworker/u16:7" and switch["__pid"] == 347
    assert tables["cpu_idle"].schema.field("state").type == pa.int64()


def test_systrace_old_javascript_string_form():
    path = shared_trace("public/catapult/android_systrace.html")
    raw = path.read_text()
    tables = read_systrace(path)
    assert tables.meta["format"] == "systrace" and detect_format(path) == "systrace"
    assert tables.meta["event_counts"]["sched_switch"] == raw.count(": sched_switch: ") == 11074
    assert tables.meta["event_counts"]["sched_wakeup"] == raw.count(": sched_wakeup: ") == 6827
    # first event: "atrace-14662 [000] 50260.647576: sched_switch: prev_comm=atrace prev_pid=14662
    #   prev_prio=120 prev_state=S ==> next_comm=kworker/0:0 next_pid=13696 next_prio=120\n\"
    first = tables["sched_switch"].slice(0, 1).to_pylist()[0]
    assert first["__timestamp"] == 50260647576000 and first["next_prio"] == 120
    assert first["next_comm"] == "kworker/0:0" and first["prev_state"] == "S"


def test_systrace_javascript_text_dump():
    """catapult's android_systrace.txt: the linuxPerfData string saved as text, lines end in ``\\n\\``."""
    path = shared_trace("public/catapult/android_systrace.txt")
    lines = path.read_text().splitlines()
    assert all(line.endswith("\\n\\") for line in lines if line)  # the format this test is about
    event_line = re.compile(r"^\s*(.+)-(\d+)\s+\[(\d+)\] (\d+)\.(\d+): (\w+): (.*)\\n\\$")
    parsed = [m for m in map(event_line.match, lines) if m]
    tables = read_trace(path, cache=False)
    assert detect_format(path) == "text" and tables.meta["warnings"] == []
    expected_counts = {}
    for m in parsed:
        expected_counts[m[6]] = expected_counts.get(m[6], 0) + 1
    assert tables.meta["event_counts"] == expected_counts
    assert expected_counts["sched_switch"] == 58 and expected_counts["sched_wakeup"] == 33
    switch_fields = re.compile(r"prev_comm=(.*) prev_pid=(\d+) prev_prio=(\d+) prev_state=(\S+) ==> "
                               r"next_comm=(.*) next_pid=(\d+) next_prio=(\d+)$")
    switches = [switch_fields.match(m[7]) for m in parsed if m[6] == "sched_switch"]
    got = tables["sched_switch"]
    # the last field of a line used to keep the "\n\" residue ("120\n\")
    assert got["next_prio"].to_pylist() == [int(s[7]) for s in switches]
    assert got["next_comm"].to_pylist() == [s[5] for s in switches]
    assert got["prev_state"].to_pylist() == [s[4] for s in switches]
    assert got["__timestamp"].to_pylist() == sorted(
        int(m[4]) * 10**9 + int(m[5].ljust(9, "0")) for m in parsed if m[6] == "sched_switch")
    wakeups = [re.search(r"target_cpu=(\d+)$", m[7]) for m in parsed if m[6] == "sched_wakeup"]
    assert tables["sched_wakeup"]["target_cpu"].to_pylist() == [int(w[1]) for w in wakeups]


def test_javascript_line_continuations_only_when_the_text_starts_so():
    end = "\\n\\"  # backslash, n, backslash
    plain = parse_text_lines(["  a-1 [000] 1.000001: x: v=2", "  a-1 [000] 1.000002: x: v=ends" + end])
    assert plain["x"]["v"].to_pylist() == ["2", "ends" + end]
    js = parse_text_lines(["# tracer: nop" + end, "  a-1 [000] 1.000001: x: v=q" + "\\\"" + "s" + end])
    assert js["x"]["v"].to_pylist() == ['q"s']


def test_systrace_compressed_trace_data_equals_plain(tmp_path):
    path = shared_trace("public/trappy/trace_surfaceflinger.html")
    html = path.read_text()
    plain = read_systrace(path)
    block = re.search(r'(<script class="trace-data" type="application/text">)(.*?)(</script>)', html, re.S)
    assert "# tracer: nop" in block.group(2)
    packed = base64.b64encode(zlib.compress(block.group(2).encode())).decode()
    compressed = tmp_path / "compressed.html"
    compressed.write_text(html[: block.start(2)] + packed + html[block.end(2):])
    again = read_systrace(compressed)
    assert plain.events == again.events
    for event in plain.events:
        assert plain[event].equals(again[event]), event
    assert plain.meta["event_counts"]["sugov_set_iowait_boost"] == html.count(": sugov_set_iowait_boost: ") == 366


def test_truncated_text_keeps_everything_before(tmp_path):
    src = shared_trace("public/lisa/lisa_tests_trace.txt").read_bytes()
    cut = src.index(b"\n", len(src) // 2) + 40  # 40 bytes into a line
    damaged = tmp_path / "truncated.txt"
    damaged.write_bytes(src[:cut])
    full_lines = src[:cut].count(b"\n")
    tables = read_text(damaged)
    (warning,) = tables.meta["warnings"]
    assert f"line {full_lines + 1}:" in warning and "truncated" in warning and str(damaged) in warning
    complete = src[: src.rindex(b"\n", 0, cut) + 1].decode()
    expected = sum(complete.count(f": {e}: ") for e in ("sched_switch", "sched_wakeup", "print", "sched_overutilized"))
    assert sum(t.num_rows for t in tables.tables.values()) == expected


def test_corrupted_lines_are_skipped_with_their_line_numbers(tmp_path):
    lines = shared_trace("public/lisa/lisa_tests_trace.txt").read_bytes().split(b"\n")
    lines[100] = b"\x00\xff\xfe garbage \x13\x37"
    lines[200] = lines[200][:25]
    damaged = tmp_path / "corrupted.txt"
    damaged.write_bytes(b"\n".join(lines))
    tables = read_text(damaged)
    assert any("line 101:" in w for w in tables.meta["warnings"])
    assert any("line 201:" in w for w in tables.meta["warnings"])
    good = read_text(shared_trace("public/lisa/lisa_tests_trace.txt"))
    lost = sum(good.meta["event_counts"].values()) - sum(tables.meta["event_counts"].values())
    assert lost == 2


def test_clear_errors(tmp_path):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 10)
    with pytest.raises(UserError, match=r"garbage\.bin: not a trace"):
        read_trace(garbage)
    only_header = tmp_path / "empty.txt"
    only_header.write_text("# tracer: nop\n#\n")
    with pytest.raises(UserError, match=r"empty\.txt: no ftrace event line found in 2 lines"):
        read_trace(only_header, cache=False)
    with pytest.raises(UserError, match=r"lisa_tests_trace\.txt: requested event\(s\) cpu_idle not in the trace; "
                                        r"it has: print, sched_overutilized, sched_switch, sched_wakeup"):
        read_trace(shared_trace("public/lisa/lisa_tests_trace.txt"), events=["cpu_idle"], cache=False)
    page = tmp_path / "page.html"
    page.write_text("<html><head></head><body><script>var x = 1;</script></body></html>")
    with pytest.raises(UserError, match=r"page\.html: no ftrace text found"):
        read_trace(page, cache=False)
    with pytest.raises(UserError, match=r"missing\.txt: cannot read"):
        read_trace(tmp_path / "missing.txt")
