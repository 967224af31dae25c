"""Lost events: the decoder reports what the kernel lost while a trace was recorded.

The oracle is trace-cmd itself: ``trace-cmd report --stat`` prints the ring-buffer
statistics saved in the file (``overrun``, ``dropped events`` per buffer and CPU) and
``trace-cmd report`` prints one ``[... EVENTS DROPPED]`` line per page the kernel
flagged. The live test overflows a 4 KiB-per-CPU buffer on purpose and reads it with
``trace-cmd extract``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from lisa_ext.trace.tracedat import count_events
from shared_traces import TRACES

TRACEFS = Path("/sys/kernel/tracing")


def _need_trace_cmd() -> None:
    if shutil.which("trace-cmd") is None:
        pytest.skip("trace-cmd is not installed")


def _report_stat_lost(path: Path) -> dict[str, int]:
    """Per-CPU overrun + dropped events from `trace-cmd report --stat`, summed over buffers."""
    out = subprocess.run(["trace-cmd", "report", "--stat", str(path)], capture_output=True, text=True,
                         check=True).stdout
    per_cpu: dict[str, int] = {}
    for block in re.split(r"\n(?=CPU: \d+\n)", out):
        m = re.match(r"CPU: (\d+)\n", block)
        if not m:
            continue
        n = sum(int(v) for v in re.findall(r"^(?:overrun|dropped events): (\d+)$", block, re.M))
        per_cpu[m[1]] = per_cpu.get(m[1], 0) + n
    return per_cpu


def _report_dropped_lines(path: Path) -> list[str]:
    out = subprocess.run(["trace-cmd", "report", str(path)], capture_output=True, text=True, errors="replace",
                         check=True).stdout
    return [line for line in out.splitlines() if "EVENTS DROPPED]" in line]


def _check_against_trace_cmd(path: Path) -> dict:
    lost = count_events(path)["lost_events"]
    stat = _report_stat_lost(path)
    if stat:
        assert lost["source"] == "ring-buffer statistics"
        assert lost["per_cpu"] == {cpu: n for cpu, n in stat.items() if n or cpu in lost["per_cpu"]}
    assert lost["flagged_pages"] == len(_report_dropped_lines(path))
    assert lost["total"] == sum(lost["per_cpu"].values())
    return lost


@pytest.mark.parametrize("rel", sorted(str(p.relative_to(TRACES)) for p in TRACES.rglob("*.dat"))
                         if TRACES.is_dir() else ["(no shared traces)"])
def test_shared_traces_agree_with_trace_cmd(rel):
    _need_trace_cmd()
    path = TRACES / rel
    if not path.is_file():
        pytest.skip(f"{path} not available")
    lost = _check_against_trace_cmd(path)
    # none of the shared traces lost events: trace-cmd prints no DROPPED line for any of them
    assert lost["flagged_pages"] == 0 and lost["first_lost_ns"] is None


@pytest.mark.live
def test_overflowing_buffer_reports_lost_events(tmp_path):
    _need_trace_cmd()
    if os.geteuid() != 0 or not (TRACEFS / "instances").is_dir():
        pytest.skip("recording needs root and tracefs")
    if shutil.which("stress-ng") is None:
        pytest.skip("stress-ng is not installed")
    instance = f"lxtest_lost_{uuid.uuid4().hex[:8]}"
    root = TRACEFS / "instances" / instance
    dat = tmp_path / "lost.dat"
    try:
        # No reader while the storm runs: a 4 KiB-per-CPU ring buffer in overwrite mode loses all but
        # its last page, whatever the machine's load (a live reader may keep up on a quiet machine).
        root.mkdir()
        (root / "buffer_size_kb").write_text("4")
        for event in ("sched_switch", "sched_wakeup", "sched_waking"):
            (root / "events" / "sched" / event / "enable").write_text("1")
        (root / "tracing_on").write_text("1")
        subprocess.run(["stress-ng", "--switch", "2", "-t", "1", "--quiet"], check=False, timeout=120)
        (root / "tracing_on").write_text("0")
        subprocess.run(["trace-cmd", "extract", "-B", instance, "-o", str(dat)],
                       capture_output=True, timeout=120, check=False)
    finally:
        if root.exists():
            os.rmdir(root)
    assert dat.exists() and dat.stat().st_size > 0, "trace-cmd extract wrote no file"
    lost = _check_against_trace_cmd(dat)
    assert lost["total"] > 0, "a 4 KiB buffer under a context-switch storm lost nothing: the test proves nothing"
    assert lost["flagged_pages"] > 0
    assert lost["first_lost_ns"] <= lost["last_lost_ns"]
    # the known counts the flagged pages carry never exceed the kernel's own total
    known = sum(int(n) for n in re.findall(r"\[(\d+) EVENTS DROPPED\]", "\n".join(_report_dropped_lines(dat))))
    assert known <= lost["total"]
