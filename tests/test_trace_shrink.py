"""lisa-ext trace shrink: a committed sample trace gets small and prints exactly as before."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lisa_ext.trace.strip import shrink_trace, strip_kallsyms
from lisa_ext.trace.tracedat import read_tracedat
from lisa_ext.trace.tracedat_format import TraceDatError, open_tracedat

TRACE = Path(__file__).resolve().parents[1] / "data/samples/wq-affinity/runs/cache/fio-randread/0/trace.dat"


def _report(path: Path) -> str:
    return subprocess.run(["trace-cmd", "report", str(path)], capture_output=True, text=True, check=True).stdout


def test_shrink_keeps_every_event_and_resolved_symbol(tmp_path):
    out = tmp_path / "small.dat"
    before, after = shrink_trace(TRACE, out)
    assert after < before / 3, (before, after)
    assert _report(out) == _report(TRACE)  # work functions still resolve, nothing dropped
    small, full = read_tracedat(out), read_tracedat(TRACE)
    assert small.events == full.events
    for event in full.events:
        assert small[event].equals(full[event]), event
    kept = {name for _, name in open_tracedat(out).kallsyms}
    assert "wb_workfn" in kept and len(kept) < 100


def test_strip_refuses_a_compressed_file(tmp_path):
    with pytest.raises(TraceDatError, match="version 6"):
        strip_kallsyms(TRACE, tmp_path / "x.dat")
