"""Trace sources of the report on a real Juno trace, against ``trace-cmd report`` text.

../shared/traces/public/lisa/sched_load_trace.dat (from LISA's own tests) has
cpu_idle and cpu_frequency events but no wakeups, so it also shows how sources
whose events are missing are reported.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from lisa_ext.report import figures, traces

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "public" / "lisa" / \
    "sched_load_trace.dat"
_LINE = re.compile(r"^\s*.+?\s+\[(\d+)\]\s+([\d.]+):\s+(\w+):\s+(.*)$")


def _report_events():
    if shutil.which("trace-cmd") is None:
        pytest.skip("trace-cmd is not installed")
    text = subprocess.run(["trace-cmd", "report", "-N", "-i", str(TRACE)], capture_output=True,
                          text=True, check=True).stdout
    events = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            fields = dict(kv.split("=", 1) for kv in m.group(4).split() if "=" in kv)
            events.append((float(m.group(2)), m.group(3), fields))
    return events


def _residency_by_hand(events, name, end):
    per_cpu = defaultdict(list)
    for ts, event, fields in events:
        if event == name:
            per_cpu[int(fields["cpu_id"])].append((ts, int(fields["state"])))
    seconds = defaultdict(float)
    for cpu, seq in per_cpu.items():
        for (ts, state), nxt in zip(seq, seq[1:] + [(end, None)]):
            seconds[(cpu, state)] += nxt[0] - ts
    return seconds


@pytest.fixture(scope="module")
def found():
    trace = traces.load_trace(TRACE)
    findings, notes = traces.collect(trace)
    return trace, findings, notes


def test_frequency_residency_matches_trace_cmd_text(found):
    trace, findings, _ = found
    events = _report_events()
    end = float(trace.end)
    expected = _residency_by_hand(events, "cpu_frequency", end)
    got = findings.frames["frequency_residency"]
    assert len(got) == len(expected)
    for row in got.itertuples():
        assert row.seconds == pytest.approx(expected[(row.cpu, row.state)], abs=2e-6)


def test_idle_states_match_trace_cmd_text(found):
    _, findings, _ = found
    events = _report_events()
    by_hand = [(ts, int(f["cpu_id"]), int(f["state"])) for ts, e, f in events if e == "cpu_idle"]
    got = findings.frames["idle_states"]
    assert len(got) == len(by_hand) == 474
    assert list(got["cpu"]) == [c for _, c, _ in by_hand]
    # the u32 "exit" value is shown as -1, LISA's "running"
    assert list(got["state"]) == [-1 if s == 4294967295 else s for _, _, s in by_hand]
    residency = findings.frames["idle_residency"]
    assert set(residency["state"]) == {-1, 0, 1, 2}
    assert (residency["seconds"] >= 0).all()


def test_missing_events_are_noted(found):
    _, findings, notes = found
    assert "wakeup_latency: skipped, trace lacks sched_waking or sched_wakeup" in notes
    assert any(n.startswith("idle_miss: skipped") for n in notes)
    assert not any(name.startswith("wakeup") for name, *_ in findings.metrics)


def test_residency_and_timeline_figures_export_byte_stably(found, tmp_path):
    trace, findings, _ = found
    res = findings.frames["frequency_residency"]
    pct = res.assign(variant="juno", pct=100 * res["seconds"] / res["seconds"].sum(),
                     state=[f"{f / 1000:g} MHz" for f in res["state"]])
    pct = pct.groupby(["variant", "state"], as_index=False)["pct"].sum()
    freqs = findings.frames["frequencies"]
    t0 = float(freqs["time"].iloc[0])
    panel = freqs.assign(time=(freqs["time"] - t0) * 1e3)
    objs = [figures.residency_figure(pct, "frequency residency", "frequency"),
            figures.timeline_figure({"frequency (kHz)": (panel, "frequency")},
                                    pd.DataFrame({"time": [0.0]}), "Juno")]
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        for i, obj in enumerate(objs):
            figures.export(obj, tmp_path / run / f"f{i}")
        figures.export_html(objs, tmp_path / run / "all.html", "t")
    for path in sorted((tmp_path / "a").iterdir()):
        assert path.read_bytes() == (tmp_path / "b" / path.name).read_bytes(), path.name
