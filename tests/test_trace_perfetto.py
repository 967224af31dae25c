"""``lisa-ext trace export --perfetto``: the file decodes with Perfetto's published protos.

Perfetto's UI and trace_processor cannot run here (trace_processor downloads its
binary at run time, and only package registries are reachable), so the file is
checked with the protos of the ``perfetto`` package, decoded by
tests/perfetto_check.py and not by the writer: events per ftrace event equal
``lisa-ext trace stats`` on held traces of every format (trace.dat v6 and v7,
ftrace text, systrace), timestamps run forward on every CPU, the CPU count and
clock are the trace's, and the findings are the analyses' own numbers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lisa_ext.report.perfetto import export_perfetto
from lisa_ext.trace import load_trace
from lisa_ext.trace.cli import stats
from perfetto_check import decode
from shared_traces import shared_trace

REPO = Path(__file__).resolve().parents[1]
LISA_EXT = Path(sys.executable).with_name("lisa-ext")
V7_RUN = REPO / "data" / "samples" / "wq-affinity-board" / "runs" / "cache" / "low" / "0"


def _traces():
    return [("v6", "public/lisa/sched_load_trace.dat"), ("text", "public/lisa/lisa_tests_trace.txt"),
            ("systrace", "public/trappy/trace_surfaceflinger.html")]


def _check_events(trace: Path, decoded) -> dict:
    expected = stats(trace)
    assert dict(decoded.events) == {k: v for k, v in expected["events"].items() if v}
    assert decoded.monotonic_per_cpu()
    assert decoded.num_cpus == expected["cpus"] == decoded.cpu_info
    return expected


@pytest.mark.parametrize("kind,rel", _traces())
def test_held_traces_export_every_event(kind, rel, tmp_path):
    trace = shared_trace(rel)
    out = tmp_path / "t.pftrace"
    summary = export_perfetto(trace, out, findings=False)
    decoded = decode(out)
    expected = _check_events(trace, decoded)
    assert summary["generic"] == sorted(set(decoded.events) - set(summary["typed"]))
    # the events Perfetto models are its own messages, not generic ones
    assert {"sched_switch"} <= set(summary["typed"])
    assert "bprint" not in summary["typed"]
    if expected.get("clock") == "local":
        assert decoded.clocks == {"FTRACE_CLOCK_LOCAL"}
    # every thread has its name
    assert decoded.threads and all(decoded.threads.values())


def test_v7_run_through_the_command(tmp_path):
    """A run directory, through the command a user types; its findings are the analyses'."""
    out = tmp_path / "run.pftrace"
    proc = subprocess.run([str(LISA_EXT), "trace", "export", "--perfetto", str(V7_RUN), "-o", str(out)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "ui.perfetto.dev" in proc.stdout
    decoded = decode(out)
    expected = _check_events(V7_RUN / "trace.dat", decoded)
    assert expected["file_version"] == 7 and decoded.num_cpus == 4
    trace = load_trace(V7_RUN / "trace.dat")
    latencies = trace.ana.wakeup_latency.df_all_wakeup_latencies()
    tasks = decoded.track_names("wake-up latency")
    assert len(tasks) == latencies["pid"].nunique()
    slices = [s for name, found in decoded.slices.items() if name.startswith("wake-up latency/")
              for s in found]
    assert len(slices) == len(latencies)
    # each slice spans its wake-up's latency (to the ns)
    durations = sorted(end - begin for begin, end in slices)
    assert durations == sorted(np.rint(latencies["latency"].to_numpy() * 1e9).astype(int).tolist())
    # work items: one slice per executed item, on the CPU that ran it
    items = trace.ana.wq_placement.df_work_items().dropna(subset=["duration"])
    assert decoded.track_names("work items") == sorted(f"CPU{c}" for c in items["exec_cpu"].unique())
    assert sum(len(v) for k, v in decoded.slices.items() if k.startswith("work items/")) == len(items)


def test_findings_on_a_juno_trace(tmp_path):
    """Gated idle periods and per-CPU power/energy counters, against the analyses' figures."""
    trace_path = shared_trace("public/lisa/sched_load_trace.dat")
    trace = load_trace(trace_path)
    freq, idle = trace.df_event("cpu_frequency"), trace.df_event("cpu_idle")
    states = sorted({int(s) for s in idle["state"] if int(s) >= 0})
    model = {"clusters": {"all": {"cpus": sorted({int(c) for c in idle["cpu_id"]} | {int(c) for c in freq["cpu_id"]}),
                                  "opp_mw": {str(int(f)): int(f) / 1000 for f in set(freq["state"])},
                                  "idle_mw": {str(s): 5.0 * (s + 1) for s in states}}}}
    (tmp_path / "model.json").write_text(json.dumps(model))
    comm = trace.df_event("sched_switch")["prev_comm"].astype(str).value_counts().index[0]
    out = tmp_path / "juno.pftrace"
    summary = export_perfetto(trace_path, out, model=tmp_path / "model.json", marked=comm)
    decoded = decode(out)
    _check_events(trace_path, decoded)
    # power: the last cumulative energy of each CPU is the analysis's energy of that CPU
    energy = trace.ana.energy.df_energy(str(tmp_path / "model.json"), by="cpu")["energy_mj"]
    for cpu, mj in energy.items():
        values = decoded.counter_values[f"power (estimate)/CPU{cpu} energy"]
        assert values[-1][1] == pytest.approx(mj, rel=1e-9)
        assert decoded.counter_values[f"power (estimate)/CPU{cpu} power"]
    # gated idle: one slice per marked idle period
    periods = trace.ana.idle_gating.df_idle_periods(comm)
    marked = periods[periods["marked"] & periods["duration"].notna()]
    gated = sum(len(v) for k, v in decoded.slices.items() if k.startswith("gated idle/"))
    assert gated == len(marked) > 0
    assert "gated idle" in {name for name, _, _ in decoded.tracks.values()}
    assert not any(note.startswith(("power", "gated idle")) for note in summary["notes"])


def test_iowait_boost_counters_from_systrace(tmp_path):
    trace_path = shared_trace("public/trappy/trace_surfaceflinger.html")
    out = tmp_path / "sf.pftrace"
    export_perfetto(trace_path, out)
    decoded = decode(out)
    boosts = load_trace(trace_path).ana.iowait_boost.df_iowait_boost_events()
    # this kernel's event is text ("doing iow boost"): one instant per event and CPU
    instants = sum(n for (track, kind), n in decoded.track_events.items()
                   if track.startswith("iowait boost/") and kind == "TYPE_INSTANT")
    assert instants == len(boosts) == 366
    assert len(decoded.track_names("iowait boost")) == boosts["cpu"].nunique()


def test_bad_source_is_one_line(tmp_path):
    proc = subprocess.run([str(LISA_EXT), "trace", "export", "--perfetto", str(tmp_path), "-o",
                           str(tmp_path / "x.pftrace")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "trace.dat" in proc.stderr


def test_perfetto_link_carries_the_file(tmp_path, monkeypatch):
    """The link study pages show: the file itself (a data: URI) under its name, and how to open it."""
    import base64
    import re

    from lisa_ext.report.perfetto import perfetto_link

    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "cache"))
    html = perfetto_link(V7_RUN, tmp_path / "out", "board_run", findings=False)
    assert 'download="board_run.pftrace"' in html and "ui.perfetto.dev" in html
    data = base64.b64decode(re.search(r'href="data:application/octet-stream;base64,([^"]+)"', html)[1])
    assert data == (tmp_path / "out" / "board_run.pftrace").read_bytes()
    again = perfetto_link(V7_RUN, tmp_path / "again", "board_run", findings=False)
    assert again == html  # from the report cache, same bytes
