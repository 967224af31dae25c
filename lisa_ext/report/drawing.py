"""The report's own figures drawn straight with matplotlib (PNG, SVG) and bokeh (HTML).

:mod:`lisa_ext.report.figures` builds each report figure as holoviews objects (what
notebooks show and study builders return). Exporting those costs ~0.5 s of
holoviews option processing per figure and backend, most of an uncached report:
for the four kinds the report draws itself (``metric_bars_figure``,
``latency_cdf_figure``, ``residency_figure``, ``timeline_figure``) the files are
drawn here instead, from the same frames, with holoviews' look (its colour cycle,
2 px lines, black-edged bars, no top/right spines), in ~0.1 s each. Figures of
other builders (a study's own) still go through holoviews.

:data:`MPL` and :data:`BOKEH` map a builder name to a function taking the builder's
arguments and returning a matplotlib ``Figure`` / a bokeh model.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from lisa_ext.report.escape import mathtext
from lisa_ext.report.readable import time_scale

__all__ = ["BOKEH", "COLORS", "MPL", "bars_frame", "cdf_curves", "residency_table", "timeline_panels"]

# Deferred imports in this module: matplotlib and bokeh load only when a figure is drawn.

#: holoviews' default colour cycle, so these figures look like the notebook's
COLORS = ("#30a2da", "#fc4f30", "#e5ae38", "#6d904f", "#8b8b8b", "#17becf", "#9467bd",
          "#d62728", "#1f77b4", "#e377c2", "#8c564b", "#bcbd22")
#: inches of one panel (holoviews' fig_size=200 at aspect 2.2)
_PANEL = (8.0, 8.0 / 2.2)
#: pixels of one bokeh panel (the report's figures.html)
_BOKEH_SIZE = (760, 340)


def _status(row: dict) -> str:
    if row["is_baseline"]:
        return "baseline"
    if row["significant"]:
        return "significant"
    if row["too_few"]:
        return "too few runs"
    return "not significant"


def bars_frame(cmp_block: pd.DataFrame) -> pd.DataFrame:
    """The bars of one metric: ``variant``, ``mean``, ``neg``/``pos`` (CI whiskers
    below/above), ``status``, ``significant``; variants without a mean left out."""
    df = cmp_block[["variant", "mean", "ci_low", "ci_high", "is_baseline", "significant",
                    "too_few"]].copy()
    df["status"] = [_status(r) for r in df.to_dict("records")]
    df["neg"] = (df["mean"] - df["ci_low"]).clip(lower=0).fillna(0.0)
    high = df["ci_high"].where(np.isfinite(df["ci_high"]), df["mean"])
    df["pos"] = (high - df["mean"]).clip(lower=0).fillna(0.0)
    # a variant without a mean (the gmean of zeros, say) gets no bar: its runs still show as dots
    return df[df["mean"].notna()]


def cdf_curves(latencies: pd.DataFrame, unit: str) -> tuple[str, list[tuple[Any, np.ndarray, np.ndarray]]]:
    """The curves of a latency CDF: its x label (the unit grown with the values, 200000 µs as
    200 ms) and per variant with values, in order of appearance, (variant, sorted latencies,
    fraction of wakeups at or below each)."""
    factor, shown = time_scale(latencies["latency"], unit)
    curves = []
    for variant in dict.fromkeys(latencies["variant"]):
        values = np.sort(latencies.loc[latencies["variant"] == variant, "latency"].to_numpy(float)) * factor
        if values.size:
            curves.append((variant, values, np.arange(1, values.size + 1) / values.size))
    return f"latency ({shown})", curves


def residency_table(residency: pd.DataFrame) -> pd.DataFrame:
    """``pct`` per variant (rows, in order of appearance) and state (columns, in order)."""
    df = residency.assign(state=residency["state"].astype(str))
    table = df.pivot_table(index="variant", columns="state", values="pct", aggfunc="sum",
                           sort=False)
    return table.reindex(index=list(dict.fromkeys(df["variant"])),
                         columns=list(dict.fromkeys(df["state"]))).fillna(0.0)


def timeline_panels(panels: dict) -> list[tuple[str, str, list[tuple[Any, pd.DataFrame]]]]:
    """The drawable panels of a timeline: (y label, column, [(cpu, frame sorted by time)])."""
    out = []
    for ylabel, (frame, column) in panels.items():
        if frame is None or frame.empty:
            continue
        out.append((ylabel, column, [(cpu, g.sort_values("time", kind="stable"))
                                     for cpu, g in frame.groupby("cpu", sort=True)]))
    return out


# --- matplotlib --------------------------------------------------------------

def _mpl_axes(rows: int = 1, height: float | None = None):
    # deferred: see the note under __all__
    from matplotlib.figure import Figure

    fig = Figure(figsize=(_PANEL[0], (height or _PANEL[1]) * rows))
    axes = fig.subplots(rows, 1, squeeze=False)[:, 0]
    for ax in axes:
        ax.spines["top"].set_visible(False)
        ax.spines["right"].set_visible(False)
    return fig, axes


def _categories(*columns) -> list:
    return list(dict.fromkeys(v for column in columns for v in column))


def mpl_metric_bars(cmp_block: pd.DataFrame, title: str, ylabel: str,
                    runs: pd.DataFrame | None = None):
    df = bars_frame(cmp_block)
    has_runs = runs is not None and not runs.empty
    cats = _categories(df["variant"], runs["variant"] if has_runs else [])
    x = {v: k for k, v in enumerate(cats)}
    fig, (ax,) = _mpl_axes()
    if not df.empty:
        pos = [x[v] for v in df["variant"]]
        ax.bar(pos, df["mean"], width=0.8, color=COLORS[0], edgecolor="k")
        # arrays, not Series: matplotlib calls float() on the first element of yerr, a Series
        ax.errorbar(pos, df["mean"], yerr=[df["neg"].to_numpy(), df["pos"].to_numpy()], fmt="none", ecolor="k")
        top = float((df["mean"] + df["pos"]).max())
        for v in df.loc[df["significant"].astype(bool), "variant"]:
            ax.text(x[v], top * 1.04, "*", ha="center", va="center", color="black")
    if has_runs:
        ax.scatter([x[v] for v in runs["variant"]], runs["value"], color="black", s=36,
                   zorder=3)
    ax.set_xticks(range(len(cats)), [str(c) for c in cats], rotation=15, ha="right")
    ax.set_xlim(-0.5, len(cats) - 0.5)
    ax.set_title(mathtext(title))
    ax.set_ylabel(mathtext(ylabel))
    return fig


def mpl_latency_cdf(latencies: pd.DataFrame, title: str = "wakeup latency CDF", unit: str = "us"):
    fig, (ax,) = _mpl_axes()
    xlabel, curves = cdf_curves(latencies, unit)
    for k, (variant, values, frac) in enumerate(curves):
        ax.plot(values, frac, linewidth=2, color=COLORS[k % len(COLORS)], label=str(variant))
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of wakeups")
    ax.set_title(mathtext(title))
    if curves:
        ax.legend(loc="upper left")
    return fig


def mpl_residency(residency: pd.DataFrame, title: str, state_label: str):
    table = residency_table(residency)
    fig, (ax,) = _mpl_axes()
    bottom = np.zeros(len(table))
    x = np.arange(len(table))
    for k, state in enumerate(table.columns):
        values = table[state].to_numpy(float)
        ax.bar(x, values, bottom=bottom, width=0.8, color=COLORS[k % len(COLORS)],
               edgecolor="k", label=mathtext(state))
        bottom += values
    ax.set_xticks(x, [str(v) for v in table.index])
    ax.set_ylabel("% of time")
    ax.set_title(mathtext(title))
    ax.legend(title=state_label, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig


def mpl_timeline(panels: dict, wakeups: pd.DataFrame, title: str):
    drawn = timeline_panels(panels)
    if not drawn:
        return None
    fig, axes = _mpl_axes(len(drawn))
    for n, (ax, (ylabel, column, curves)) in enumerate(zip(axes, drawn)):
        for k, (cpu, g) in enumerate(curves):
            ax.plot(g["time"], g[column], drawstyle="steps-post", linewidth=2,
                    color=COLORS[k % len(COLORS)], label=f"CPU{cpu}")
        for t in wakeups["time"]:
            ax.axvline(float(t), color="black", linestyle="dashed")
        ax.set_ylabel(ylabel)
        ax.set_xlabel("time from wakeup (ms)")
        if n == 0:
            ax.set_title(mathtext(title))
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig


#: builder name -> matplotlib drawing of the same arguments
MPL: dict[str, Callable] = {
    "metric_bars_figure": mpl_metric_bars,
    "latency_cdf_figure": mpl_latency_cdf,
    "residency_figure": mpl_residency,
    "timeline_figure": mpl_timeline,
}


# --- bokeh -------------------------------------------------------------------

def _bokeh(x_range=None, **kwargs):
    # deferred: see the note under __all__
    from bokeh.plotting import figure

    width, height = _BOKEH_SIZE
    if x_range is not None:
        kwargs["x_range"] = x_range
    # holoviews' tools but box zoom (an overlay of its own: each model costs serialising)
    fig = figure(width=width, height=height, tools="pan,wheel_zoom,reset,save,hover", **kwargs)
    fig.toolbar.logo = None
    return fig


def bokeh_metric_bars(cmp_block: pd.DataFrame, title: str, ylabel: str,
                      runs: pd.DataFrame | None = None):
    from bokeh.models import ColumnDataSource  # deferred: see the note under __all__

    df = bars_frame(cmp_block)
    has_runs = runs is not None and not runs.empty
    cats = [str(c) for c in _categories(df["variant"], runs["variant"] if has_runs else [])]
    fig = _bokeh(x_range=cats, title=title)
    if not df.empty:
        bars = ColumnDataSource({"variant": df["variant"].astype(str).tolist(),
                                 "mean": df["mean"].tolist(), "status": df["status"].tolist(),
                                 "low": (df["mean"] - df["neg"]).tolist(),
                                 "high": (df["mean"] + df["pos"]).tolist()})
        fig.vbar(x="variant", top="mean", width=0.8, source=bars, fill_color=COLORS[0],
                 line_color="black")
        fig.segment(x0="variant", x1="variant", y0="low", y1="high", source=bars, color="black")
        top = float((df["mean"] + df["pos"]).max())
        stars = df.loc[df["significant"].astype(bool), "variant"].astype(str).tolist()
        if stars:
            fig.text(x=stars, y=[top * 1.04] * len(stars), text=["*"] * len(stars),
                     text_align="center", text_color="black")
    if has_runs:
        fig.scatter(x="variant", y="value", source=ColumnDataSource({
            "variant": runs["variant"].astype(str).tolist(), "value": runs["value"].tolist(),
            "iteration": runs["iteration"].tolist()}), size=7, color="black")
    fig.xaxis.major_label_orientation = 0.26
    fig.yaxis.axis_label = ylabel
    return fig


def bokeh_latency_cdf(latencies: pd.DataFrame, title: str = "wakeup latency CDF", unit: str = "us"):
    fig = _bokeh(title=title, x_axis_type="log")
    xlabel, curves = cdf_curves(latencies, unit)
    for k, (variant, values, frac) in enumerate(curves):
        fig.line(values, frac, line_width=2, color=COLORS[k % len(COLORS)], legend_label=str(variant))
    fig.xaxis.axis_label = xlabel
    fig.yaxis.axis_label = "fraction of wakeups"
    if fig.legend:
        fig.legend.location = "top_left"
    return fig


def bokeh_residency(residency: pd.DataFrame, title: str, state_label: str):
    from bokeh.models import ColumnDataSource  # deferred: see the note under __all__

    table = residency_table(residency)
    variants = [str(v) for v in table.index]
    states = [str(s) for s in table.columns]
    fig = _bokeh(x_range=variants, title=title)
    source = ColumnDataSource({"variant": variants, **{s: table[s].tolist() for s in table.columns}})
    fig.vbar_stack(states, x="variant", width=0.8, source=source, line_color="black",
                   color=[COLORS[k % len(COLORS)] for k in range(len(states))],
                   legend_label=states)
    fig.yaxis.axis_label = "% of time"
    fig.legend.title = state_label
    return fig


def bokeh_timeline(panels: dict, wakeups: pd.DataFrame, title: str):
    from bokeh.layouts import column  # deferred: see the note under __all__
    from bokeh.models import Span

    drawn = timeline_panels(panels)
    if not drawn:
        return None
    figs = []
    for n, (ylabel, col, curves) in enumerate(drawn):
        fig = _bokeh(title=title if n == 0 else None,
                     x_range=figs[0].x_range if figs else None)
        for k, (cpu, g) in enumerate(curves):
            fig.step(g["time"].to_numpy(float), g[col].to_numpy(float), mode="after",
                     line_width=2, color=COLORS[k % len(COLORS)], legend_label=f"CPU{cpu}")
        for t in wakeups["time"]:
            fig.add_layout(Span(location=float(t), dimension="height", line_color="black",
                                line_dash="dashed"))
        fig.xaxis.axis_label = "time from wakeup (ms)"
        fig.yaxis.axis_label = ylabel
        figs.append(fig)
    return column(*figs)


#: builder name -> bokeh model of the same arguments
BOKEH: dict[str, Callable] = {
    "metric_bars_figure": bokeh_metric_bars,
    "latency_cdf_figure": bokeh_latency_cdf,
    "residency_figure": bokeh_residency,
    "timeline_figure": bokeh_timeline,
}
