"""Live: tracefs text recorded here reads the same as trace-cmd's trace.dat of it.

A private ftrace instance records sched_switch and trace_marker writes while a
small workload runs; its ``trace`` file (the tracefs text format) is read with
:func:`lisa_ext.trace.text.read_text`, then ``trace-cmd extract`` saves the same
buffer as trace.dat, read with the binary decoder: both must agree event by
event. The text is finally loaded into LISA to check that the markers come out
as ``userspace@`` meta events.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

TRACEFS = Path("/sys/kernel/tracing")

pytestmark = pytest.mark.live


def _need(condition: bool, reason: str):
    if not condition:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (required in CI)")
        pytest.skip(reason)


@pytest.fixture
def instance():
    _need(os.geteuid() == 0, "needs root to create an ftrace instance")
    _need((TRACEFS / "instances").is_dir(), f"tracefs not mounted at {TRACEFS}")
    _need(shutil.which("trace-cmd") is not None, "trace-cmd not installed")
    path = TRACEFS / "instances" / f"lisa_ext_text_{os.getpid()}"
    path.mkdir()
    try:
        yield path
    finally:
        # `trace-cmd extract -B` removes the instance itself once it is read
        if path.is_dir():
            (path / "tracing_on").write_text("0")
            (path / "events/sched/sched_switch/enable").write_text("0")
            path.rmdir()


def test_tracefs_text_equals_trace_dat_of_same_buffer(instance, tmp_path, monkeypatch):
    from lisa_ext.trace import load_trace
    from lisa_ext.trace.text import read_text
    from lisa_ext.trace.tracedat import read_tracedat

    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "cache"))
    (instance / "buffer_size_kb").write_text("2048")
    (instance / "events/sched/sched_switch/enable").write_text("1")
    (instance / "tracing_on").write_text("1")
    with open(instance / "trace_marker", "w") as marker:
        for i in range(5):
            marker.write(f"lisa_ext_probe: iteration={i} phase=run\n")
            marker.flush()
            subprocess.run(["sleep", "0.01"], check=True)
    (instance / "tracing_on").write_text("0")

    text_path = tmp_path / "trace.txt"
    text_path.write_text((instance / "trace").read_text())
    dat_path = tmp_path / "trace.dat"
    subprocess.run(["trace-cmd", "extract", "-B", instance.name, "-o", str(dat_path)],
                   check=False, capture_output=True)
    assert dat_path.is_file() and dat_path.stat().st_size > 0

    text = read_text(text_path)
    binary = read_tracedat(dat_path)
    assert text.meta["warnings"] == []
    switches = text["sched_switch"]
    expected = binary["sched_switch"]
    assert switches.num_rows == expected.num_rows >= 10
    # tracefs prints microseconds, rounded (ns2usecs() in kernel/trace/trace.h adds 500 ns)
    rounded = [(t + 500) // 1000 * 1000 for t in expected.column("__timestamp").to_pylist()]
    assert switches.column("__timestamp").to_pylist() == rounded
    for column in ("__cpu", "__pid", "prev_comm", "prev_pid", "prev_prio", "next_comm", "next_pid", "next_prio"):
        assert switches.column(column).to_pylist() == expected.column(column).to_pylist(), column
    marks = text["tracing_mark_write"]
    assert marks.column("buf").to_pylist() == binary["print"].column("buf").to_pylist()
    assert marks.column("buf").to_pylist() == [f"lisa_ext_probe: iteration={i} phase=run" for i in range(5)]

    trace = load_trace(text_path)
    probes = trace.df_event("userspace@lisa_ext_probe")
    assert probes["iteration"].tolist() == list(range(5))
    assert probes["phase"].astype(str).tolist() == ["run"] * 5
