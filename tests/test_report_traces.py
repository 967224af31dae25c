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


PHONE = TRACE.parents[1] / "trappy" / "trace_surfaceflinger.html"


def test_report_on_a_phone_systrace(tmp_path):
    """A run holding an Android systrace (8 CPUs, cpufreq, cpuidle, wakeups): the
    report gets wakeup metrics from it and draws every trace figure. The run has
    no workload metrics of its own; the trace is linked, not copied."""
    from lisa_ext.cli import main

    root = tmp_path / "phone"
    run = root / "runs" / "surfaceflinger" / "systrace" / "0"
    run.mkdir(parents=True)
    (run / "trace.html").symlink_to(PHONE)
    (run / "result.json").write_text(
        '{"campaign": "phone", "variant": "surfaceflinger", "workload": "systrace", '
        '"iteration": 0, "status": "ok", "error": null, "metrics": []}')
    assert main(["report", str(root)]) == 0
    report = root / "report"
    names = {p.name for p in (report / "figures").iterdir()}
    for stem in ("systrace_wakeup_latency_cdf", "systrace_idle_residency",
                 "systrace_frequency_residency", "systrace_surfaceflinger_timeline",
                 "systrace_trace_wakeup_latency_mean"):
        assert {f"{stem}.png", f"{stem}.svg"} <= names, stem
    readme = (report / "README.md").read_text()
    assert "idle_residency: skipped" not in readme
    assert "frequency_residency: skipped" not in readme
    assert "idle_miss: skipped, trace lacks cpu_idle_miss" in readme
    html = (report / "figures.html").read_text()
    assert "frequency (MHz)" in html and "idle state (-1 = running)" in html
    # n = 1: shown, flagged, never starred
    mmtests = (report / "comparison.mmtests.txt").read_text()
    assert "Amean     trace wakeup latency mean" in mmtests
    metrics = pd.read_csv(report / "metrics.csv")
    assert set(metrics["metric"]) == {"trace wakeup latency mean", "trace wakeup latency p99"}
