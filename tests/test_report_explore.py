"""The trace explorer on small real traces: tracks, markers, plot elements, export.

Expected tracks come from ``trace-cmd report`` text (tests/tracedat_report.py),
not from the reader under test: every ``sched_switch`` to a non-idle task is a
running-task slice on its CPU, every ``cpu_idle`` entry (state != -1) a band,
every ``cpu_frequency`` a step.
"""

from __future__ import annotations

import re
from pathlib import Path

import holoviews as hv
import numpy as np
import pytest
from bokeh.models import Plot

from lisa_ext.report import explore as ex
from shared_traces import shared_trace
from tracedat_report import run_report

SAMPLE_RUN = (Path(__file__).resolve().parents[1] / "data" / "samples" / "wq-affinity" / "runs"
              / "cache" / "fio-randread" / "0")


@pytest.fixture(scope="module")
def juno():
    path = shared_trace("public/lisa/sched_load_trace.dat")
    return path, ex.explorer_tables(path, analyses=False)


def _field(text: str, name: str) -> str:
    return text.split(f"{name}=")[1].split()[0]


def test_tracks_match_trace_cmd_report(juno):
    path, t = juno
    raw = run_report(str(path), raw=True)
    origin = min(min(v) for v in raw.ts.values() if v)
    switches = [(ts, cpu) for ts, cpu, text in zip(raw.ts["sched_switch"],
                                                  raw.cpu["sched_switch"],
                                                  raw.text["sched_switch"])
                if int(_field(text, "next_pid")) != 0]
    assert len(t.tasks) == len(switches)
    assert sorted(zip(np.round(t.tasks["start"] * 1e9).astype(np.int64), t.tasks["cpu"])) == \
        sorted((ts - origin, cpu) for ts, cpu in switches)
    idle = [text for text in raw.text["cpu_idle"] if int(_field(text, "state")) != 4294967295]
    assert len(t.idle) == len(idle) > 0
    assert len(t.frequency) == len(raw.ts["cpu_frequency"]) > 0
    assert set(t.frequency["frequency"]) == {int(_field(x, "state"))
                                             for x in raw.text["cpu_frequency"]}
    # each slice ends where its CPU's next one starts, the last at the end of the trace
    for _, g in t.tasks.groupby("cpu"):
        assert (g["end"] >= g["start"]).all() and g["end"].max() <= t.duration + 1e-9


def test_layout_has_linked_panels_with_the_trace_ranges(juno):
    path, t = juno
    layout = ex.explore(t)
    kinds = [type(p).__name__ for p in layout]
    assert kinds == ["Overlay", "Segments", "Segments"]  # no wakeup event in this trace
    freq, idle, tasks = layout
    assert len(freq) == t.frequency["cpu"].nunique()
    assert all(c.kdims[0].name == "time" for c in freq)
    lo, hi = tasks.range("time")
    assert 0 <= lo and hi <= t.duration
    assert set(tasks.dimension_values("cpu")) <= set(range(t.cpus))
    assert {d.name for d in tasks.vdims} >= {"pid", "comm"}
    assert idle.range("time")[0] >= 0
    # rendered as one bokeh grid whose panels share the x range
    model = hv.render(layout, backend="bokeh")
    figures = list(model.select({"type": Plot}))
    assert len(figures) == 3 and len({id(f.x_range) for f in figures}) == 1


def test_analysis_markers_on_a_real_run():
    from lisa_ext.report.traces import load_trace

    t = ex.explorer_tables(SAMPLE_RUN)
    items = load_trace(SAMPLE_RUN / "trace.dat").ana.wq_placement.df_work_items()
    work = t.findings[t.findings["finding"] == "work item"]
    assert len(work) == len(items) > 0
    assert (work["cpu"].to_numpy() == items["exec_cpu"].to_numpy()).all()
    assert (t.findings["time"] >= 0).all() and (t.findings["time"] <= t.duration).all()
    assert len(t.wakeups) > 0 and set(t.wakeups["cpu"]) <= set(range(t.cpus))
    layout = ex.explore(t)
    assert [p.label for p in layout][-2:] == ["wake-ups (target CPU)", "analysis findings"]


def test_busy_fraction_is_exact():
    start, end = np.array([0.0, 2.5, 1.0]), np.array([1.5, 4.0, 3.0])
    lane = np.array([0, 0, 1])
    out = ex.busy_fraction(start, end, lane, 2, 0.0, 4.0, 4)
    assert out[0] == pytest.approx([1.0, 0.5, 0.5, 1.0])
    assert out[1] == pytest.approx([0.0, 1.0, 1.0, 0.0])
    counts = ex.point_counts(np.array([0.1, 0.2, 3.9]), np.array([1, 1, 0]), 2, 0.0, 4.0, 2)
    assert counts.tolist() == [[0, 1], [2, 0]]


def test_large_tracks_are_rasterised_and_re_aggregated_on_zoom(juno, monkeypatch, tmp_path):
    path, t = juno
    monkeypatch.setattr(ex, "RASTER_ABOVE", 10)
    layout = ex.explore(t, width=300)
    tasks = layout[2]
    assert isinstance(tasks, hv.DynamicMap)
    whole = tasks[()]
    assert isinstance(whole, hv.Image)
    busy = whole.dimension_values("busy")
    assert busy.min() >= 0 and busy.max() <= 1 and busy.max() > 0
    # the busy time the image holds is the slices' total (pixel width x fraction)
    total = (t.tasks["end"] - t.tasks["start"]).sum()
    assert busy.sum() * t.duration / 300 == pytest.approx(total, rel=1e-6)
    # a zoom (the x-range stream a live plot feeds) re-aggregates over the new range
    tasks.event(x_range=(0.0, t.duration / 10))
    zoomed = tasks[()]
    assert zoomed.range("time")[1] <= t.duration / 10 + 1e-9
    inside = (t.tasks["end"].clip(upper=t.duration / 10)
              - t.tasks["start"].clip(upper=t.duration / 10)).sum()
    assert zoomed.dimension_values("busy").sum() * t.duration / 3000 == pytest.approx(inside)
    html = ex.export_explorer(layout, tmp_path / "explorer.html").read_text()
    # inline resources: bokeh's JS is in the page, no script or style is fetched
    assert "Bokeh" in html and len(html) > 500_000
    assert not re.search(r"<script[^>]*\ssrc=|<link[^>]*\shref=", html)


@pytest.mark.parametrize("lanes", [1, 3])
def test_a_raster_puts_each_lane_at_its_own_row_even_when_there_is_one(lanes, tmp_path):
    """A full-size wq-affinity trace had a rasterised track with a single lane, which
    holoviews could not size from pixel centres (its page failed with a NaN conversion)."""
    def aggregate(lo, hi, width):  # lane n holds n + 1 everywhere
        return np.repeat(np.arange(1.0, lanes + 1)[:, None], width, axis=1)

    track = ex._raster(ex._hv(), aggregate, (0.0, 2.0), lanes, "events", "numpy", None, width=40, height=80)
    image = track[()]
    assert image.bounds.lbrt() == (0.0, -0.5, 2.0, lanes - 0.5)
    for lane in range(lanes):
        assert set(image.select(lane=lane).dimension_values("events")) == {lane + 1.0}
    hv.render(track, backend="bokeh")
