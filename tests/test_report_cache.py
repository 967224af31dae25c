"""The report cache: keys follow the data, and cached reports are byte-identical.

On the committed sample campaign (data/samples/wq-affinity): a report drawn
without the cache, one process (what every report cost before), a report into
an empty cache with figures drawn in two processes, and a report from the warm
cache that must neither draw a figure nor analyse a trace: all three give the
same bytes, file by file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lisa_ext.campaign.store.reader import read_campaign
from lisa_ext.report import build, figures
from lisa_ext.report.build import ReportOptions, build_report
from lisa_ext.report.cache import digest

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wq-affinity"


def test_digest_follows_values_names_and_types():
    df = pd.DataFrame({"variant": ["a", "b"], "value": [1.0, 2.0]})
    assert digest(df, "title") == digest(df.copy(), "title")
    assert digest(df, "title") != digest(df, "other title")
    assert digest(df) != digest(df.assign(value=[1.0, 2.5]))
    assert digest(df) != digest(df.rename(columns={"value": "mean"}))
    assert digest(df) != digest(df.astype({"value": np.float32}))
    assert digest(("ab",)) != digest(("a", "b"))
    with pytest.raises(TypeError):
        digest(object())


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_cached_and_parallel_reports_are_byte_identical(tmp_path, monkeypatch):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "cache"))
    plain = _files(build_report(SAMPLE, ReportOptions(baseline="system", out=tmp_path / "plain",
                                                      cache=False, jobs=1)))
    assert not (tmp_path / "cache" / "report").exists()  # (the trace cache is there)
    cold = _files(build_report(SAMPLE, ReportOptions(baseline="system", out=tmp_path / "cold",
                                                     jobs=2)))

    def forbidden(*args, **kwargs):
        raise AssertionError("a warm report drew a figure or analysed a trace")

    monkeypatch.setattr(figures, "_draw_files", forbidden)
    monkeypatch.setattr(build, "map_traces", forbidden)  # the one way to trace work
    warm = _files(build_report(SAMPLE, ReportOptions(baseline="system", out=tmp_path / "warm",
                                                     jobs=1)))
    assert sorted(plain) == sorted(cold) == sorted(warm)
    assert len([n for n in plain if n.endswith(".png")]) > 20 and "figures.html" in plain
    for name, data in plain.items():
        assert cold[name] == data, f"{name}: the cold-cache, parallel report differs"
        assert warm[name] == data, f"{name}: the warm-cache report differs"


def test_a_report_without_test_options_draws_its_trace_free_figures_early(tmp_path, monkeypatch):
    # the statistics options a user leaves unset are settled (spec, then defaults) before the
    # early figures are compared too: unsettled, comparing raised and nothing was drawn early
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build.os, "cpu_count", lambda: 2)
    early = build._prefetch(read_campaign(SAMPLE), ReportOptions(), tmp_path)
    try:
        assert early.pid is not None, "no figure was drawn beside the trace analyses"
    finally:
        early.wait()
    assert len(list((tmp_path / "cache" / "report" / "figures").glob("*.png"))) > 20


def test_fast_figures_draw_the_holoviews_figures_numbers(tmp_path):
    """The report draws its own figures with matplotlib/bokeh directly (lisa_ext.report.drawing)
    instead of exporting the holoviews objects notebooks use: same bars, whiskers and dots."""
    import holoviews as hv

    from lisa_ext.report import drawing
    from lisa_ext.report.build import _figures
    from lisa_ext.report.campaign import metrics_frame
    from lisa_ext.stats.compare import compare

    campaign = read_campaign(SAMPLE)
    metrics = metrics_frame(campaign)
    specs = [s for s in _figures(campaign, metrics, compare(metrics, "system"), build._TraceData([], {}, {}))
             if s.builder is figures.metric_bars_figure]
    assert len(specs) > 10
    for spec in specs[:5]:
        fig = drawing.MPL[spec.builder.__name__](*spec.args)
        ax = fig.axes[0]
        heights = [p.get_height() for p in ax.patches]
        bars = spec.build().Bars.I.data if hasattr(spec.build(), "Bars") else None
        expected = drawing.bars_frame(spec.args[0])["mean"].tolist()
        assert heights == pytest.approx(expected)
        if bars is not None:
            assert bars["mean"].tolist() == pytest.approx(expected)
        dots = ax.collections[-1].get_offsets()[:, 1]
        assert sorted(dots) == pytest.approx(sorted(spec.args[3]["value"]))
        model = drawing.BOKEH[spec.builder.__name__](*spec.args)
        assert model.title.text == spec.args[1]
    assert isinstance(hv.Store.current_backend, str)


def test_the_reports_own_bokeh_figures_pass_bokehs_document_checks():
    """The report serialises its own figures without bokeh's per-document checks
    (figures._bokeh_item): each kind it draws must pass them, here, once."""
    from bokeh.core.validation.check import check_integrity
    from bokeh.model.util import collect_models

    from lisa_ext.report import drawing

    campaign = read_campaign(SAMPLE)
    trace = build._collect_traces(campaign, use_cache=False)
    metrics = build.metrics_frame(campaign, pd.DataFrame(trace.rows))
    specs = build._figures(campaign, metrics, build.compare(metrics, "system"), trace)
    kinds = {}
    for spec in specs:
        kinds.setdefault(spec.builder.__name__, spec)
    # the sample's traces have no idle or frequency events: a residency figure of its own
    residency = pd.DataFrame({"variant": ["system", "system", "pinned"], "state": ["WFI", "running", "WFI"],
                              "pct": [60.0, 40.0, 100.0]})
    kinds["residency_figure"] = figures.FigureSpec("residency", figures.residency_figure,
                                                   (residency, "idle state residency", "idle state"))
    assert set(kinds) == set(drawing.BOKEH)
    for name, spec in kinds.items():
        issues = check_integrity(collect_models(drawing.BOKEH[name](*spec.args, **spec.kwargs)))
        assert (issues.error, issues.warning) == ([], []), name
