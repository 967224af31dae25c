"""Figures name time in the unit their values read in: 200000 µs is drawn as 200 ms.

The page check finds an axis tick of more than five digits ("unreadable number"); every figure
scales its times through :func:`lisa_ext.report.readable.time_scale`. Expected values here are
worked out by hand (200 ms is 200000 µs) or read from the committed sample's result.json files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from lisa_ext import quickstart
from lisa_ext.report import drawing
from lisa_ext.report.figures import latency_cdf_figure
from lisa_ext.report.readable import time_scale

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wq-affinity"

#: wake-up latencies in µs, up to 200 ms: a series the quickstart's 100 ms RR slice gives
LATENCY_200MS = pd.DataFrame({"variant": ["rr-100ms"] * 4 + ["rr-4ms"] * 4,
                              "latency": [50_000.0, 120_000.0, 180_000.0, 200_000.0,
                                          1_000.0, 2_000.0, 3_000.0, 4_000.0]})


@pytest.mark.parametrize(("values", "unit", "expected"), [
    ([200_000, -150_000], "us", (1e-3, "ms")),
    ([9_999], "us", (1.0, "µs")),
    ([10_000], "µs", (1e-3, "ms")),
    ([12_000_000], "us", (1e-6, "s")),
    ([3e9], "ns", (1e-6, "ms")),
    ([float("inf"), float("nan"), 20_000], "us", (1e-3, "ms")),
    ([120_000], "s", (1.0, "s")),
    ([], "us", (1.0, "µs")),
    ([2_400_000], "kHz", (1.0, "kHz")),
])
def test_time_scale_grows_the_unit_until_five_digits_suffice(values, unit, expected):
    factor, shown = time_scale(values, unit)
    assert shown == expected[1]
    assert factor == pytest.approx(expected[0])


def test_a_200_ms_latency_cdf_is_drawn_in_ms():
    fig = drawing.mpl_latency_cdf(LATENCY_200MS, "wake-up latency", unit="us")
    (ax,) = fig.axes
    assert ax.get_xlabel() == "latency (ms)"
    assert max(line.get_xdata().max() for line in ax.lines) == pytest.approx(200.0)
    assert min(line.get_xdata().min() for line in ax.lines) == pytest.approx(1.0)
    bokeh = drawing.bokeh_latency_cdf(LATENCY_200MS, "wake-up latency", unit="us")
    assert bokeh.xaxis[0].axis_label == "latency (ms)"
    assert max(max(r.data_source.data["x"]) for r in bokeh.renderers) == pytest.approx(200.0)
    curves = latency_cdf_figure(LATENCY_200MS, unit="us")
    assert [c.kdims[0].name for c in curves] == ["latency (ms)"] * 2
    assert max(c.dimension_values(0).max() for c in curves) == pytest.approx(200.0)


def test_quickstart_figure_shows_a_p99_over_10_ms_in_ms():
    # the sample's rt-app p99 wake-up latency reaches 11259 µs: five digits in µs, 11.3 in ms
    values = [m["value"] for p in SAMPLE.glob("runs/*/rtapp-periodic/*/result.json")
              for m in json.loads(p.read_text())["metrics"] if m["name"] == "medium_wu_lat_p99"]
    assert max(values) >= 10_000
    fig = quickstart.plot_key_metrics(SAMPLE, metrics=("medium_wu_lat_p99", "medium_wu_lat_mean"))
    p99, mean = fig.axes[:2]
    assert p99.get_ylabel() == "ms (lower is better)"
    drawn = [v for c in p99.collections for v in c.get_offsets()[:, 1]]
    assert sorted(drawn) == pytest.approx(sorted(v / 1000 for v in values))
    # the mean stays below 10 ms: µs, as it was measured
    assert mean.get_ylabel() == "µs (lower is better)"


def test_bars_of_one_variant_draw_without_a_pandas_deprecation():
    """matplotlib calls float() on the first element of yerr: a Series there (one variant, one
    row) was pandas' FutureWarning on every report with a single-variant bar chart."""
    import warnings

    block = pd.DataFrame({"variant": ["base"], "mean": [5.0], "ci_low": [4.0], "ci_high": [6.0],
                          "is_baseline": [True], "significant": [False], "too_few": [False]})
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        fig = drawing.mpl_metric_bars(block, "slack", "us")
    assert fig.axes[0].patches
