"""A live campaign whose trace buffer overflows: the loss is stored per run and flagged.

A 4 KiB-per-CPU ftrace buffer cannot hold the context switches of ``stress-ng
--switch`` running beside the workload, so the kernel drops events; the run's
``meta.json`` must carry ``trace_lost_events`` (checked against ``trace-cmd
report --stat``), and ``campaign status``, the report and ``lisa-ext analyse``
must name it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from campaign_helpers import LISA_EXT, require_live, write_spec

pytestmark = pytest.mark.live


def _stat_lost(path: Path) -> int:
    out = subprocess.run(["trace-cmd", "report", "--stat", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return sum(int(v) for v in re.findall(r"^(?:overrun|dropped events): (\d+)$", out, re.M))


def _lisa_ext(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(LISA_EXT + list(args), capture_output=True, text=True, cwd=cwd, timeout=600)


def test_overflowing_trace_is_stored_and_flagged(tmp_path):
    require_live()
    if shutil.which("stress-ng") is None:
        pytest.skip("stress-ng is not installed")
    spec = write_spec(tmp_path / "lost.yml", """\
name: lost
target: @TARGET@
iterations: 1
trace:
  events: [sched:sched_switch, sched:sched_wakeup, sched:sched_waking]
  buffer-size-kb: 4
variants:
  - name: tiny-buffer
workloads:
  - name: io
    kind: fio
    options: {rw: randread, bs: 4k, ioengine: psync, size: 8M, runtime: 2, time_based: 1}
""")
    # The storm runs beside the campaign: ftrace records every CPU, so its switches fill the buffer.
    # Whether trace-cmd's reader falls behind depends on how busy the machine is (20000 switches/s
    # lost ~15000 events in 2 s on a loaded machine): a harder storm is tried when a run lost nothing.
    for rate in ("20000", "200000", "0"):
        out = tmp_path / f"campaign-{rate}"
        storm = subprocess.Popen(["stress-ng", "--switch", "1", "--switch-freq", rate, "-t", "300", "--quiet"])
        try:
            proc = _lisa_ext("campaign", "run", str(spec), "--out", str(out), "--no-progress", cwd=tmp_path)
        finally:
            storm.terminate()
            storm.wait(timeout=30)
        assert proc.returncode == 0, proc.stderr
        run = out / "runs" / "tiny-buffer" / "io" / "0"
        meta = json.loads((run / "meta.json").read_text())
        lost = meta["trace_lost_events"]
        if lost["total"] > 0:
            break
    assert lost["total"] > 0, "a 4 KiB buffer beside a switch storm lost nothing: the test proves nothing"
    assert lost["total"] == _stat_lost(run / "trace.dat")
    assert lost["total"] == sum(lost["per_cpu"].values())

    status = _lisa_ext("campaign", "status", str(out), cwd=tmp_path)
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"done     tiny-buffer/io/0  [trace lost {lost['total']} events]" in status.stdout
    assert re.search(rf"warning: 1 run lost trace events .*tiny-buffer/io/0 \({lost['total']} events\)",
                     status.stdout)

    report = _lisa_ext("report", str(out), "--no-traces", "--no-html", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    readme = (out / "report" / "README.md").read_text()
    assert "1 with lost trace events" in readme
    assert f"- `tiny-buffer/io/0`: {lost['total']} events lost" in readme

    ana = _lisa_ext("analyse", "wakeup-latency", str(run / "trace.dat"), "--json", cwd=tmp_path)
    assert ana.returncode == 0, ana.stderr
    assert json.loads(ana.stdout)["lost_events"] == lost["total"]
    assert f"the trace lost {lost['total']} events" in ana.stderr
