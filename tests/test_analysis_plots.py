"""The plot_* methods: holoviews elements carrying the df_* figures, renderable to HTML."""

import holoviews as hv
import numpy as np

from analysis_loaders import FIO, JUNO, JUNO_YAML, SURFACEFLINGER, fast_trace, require_shared
from lisa_ext.analysis.platform import load_platform_yaml


def test_plots(tmp_path):
    for path in (JUNO, FIO, SURFACEFLINGER):
        require_shared(path)
    juno, fio, sf = fast_trace(str(JUNO)), fast_trace(str(FIO)), fast_trace(str(SURFACEFLINGER))
    platform = load_platform_yaml(JUNO_YAML)

    bars = juno.ana.idle_miss.plot_idle_miss_rates(mode="derived", by="state", platform=platform)
    counts = juno.ana.idle_miss.df_idle_miss_counts(mode="derived", by="state", platform=platform)
    assert np.isclose(np.nansum(bars.dimension_values("pct")),
                      np.nansum(counts[["too_deep_pct", "too_shallow_pct"]].to_numpy()))

    lat = fio.ana.wakeup_latency.df_wakeup_latencies()
    hist = fio.ana.wakeup_latency.plot_wakeup_latency_histogram(bins=20)
    assert hist.dimension_values("wakeups").sum() == len(lat)
    cdf = fio.ana.wakeup_latency.plot_wakeup_latency_cdf(comm="^fio$")
    assert cdf.dimension_values(1)[-1] == 1.0

    heat = fio.ana.wq_placement.plot_placement_heatmap()
    assert heat.dimension_values("items").sum() == len(fio.ana.wq_placement.df_work_items())

    svc = fio.ana.iowait_boost.plot_service_time_cdf()
    assert len(svc) == len(fio.ana.iowait_boost.df_block_requests())
    res = sf.ana.iowait_boost.plot_frequency_residency(cpu=0)
    assert res.dimension_values("seconds").sum() > 0

    out = tmp_path / "heat.html"
    hv.save(heat, out, backend="bokeh")
    assert out.stat().st_size > 1000
