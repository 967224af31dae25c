"""Holoviews figures for a cover letter, exported byte-stably.

Every ``*_figure`` function is a thin holoviews layer over a tidy frame (as
LISA's ``plot_*`` methods are) and works with both the matplotlib and bokeh
backends. :func:`export` writes PNG and SVG through matplotlib (no browser
involved) and :func:`export_html` one interactive HTML page through bokeh.

Byte stability: matplotlib's SVG ids come from ``svg.hashsalt`` and its
``Date`` metadata is dropped; PNGs carry no timestamp. Bokeh names documents
and elements with random UUIDs and a process-wide counter, so the HTML is
renumbered in order of first appearance after rendering.
"""

from __future__ import annotations

import importlib
import importlib.util
import multiprocessing
import os
import re
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from lisa_ext.report.cache import cache_root, code_digest, digest, library_versions

__all__ = [
    "FigureSpec",
    "export",
    "export_html",
    "figure_name",
    "grouped_bars_figure",
    "iteration_dots_figure",
    "latency_cdf_figure",
    "load_holoviews",
    "metric_bars_figure",
    "offline_resources",
    "render_figures",
    "residency_figure",
    "stable_html",
    "svg_text",
    "timeline_figure",
]

# Deferred imports in this module: holoviews/bokeh/panel take seconds; tables-only reports never
# need them.

_HASHSALT = "lisa-ext"
_ELEMENTS = ("Bars", "Scatter", "Curve", "ErrorBars", "Labels", "Overlay")


def load_holoviews():
    """holoviews with its bokeh and matplotlib renderers registered (options for either backend
    can then be set), the current backend left as it was."""
    # deferred: see the note under __all__
    import holoviews as hv

    # register both renderers without hv.extension(), which would switch the
    # current backend of a notebook that calls these functions
    current = hv.Store.current_backend
    import holoviews.plotting.bokeh  # noqa: F401
    import holoviews.plotting.mpl  # noqa: F401

    hv.Store.set_current_backend(current)
    return hv


def _both(obj, **options):
    """Apply options to both backends: holoviews keeps them per backend."""
    for backend in ("matplotlib", "bokeh"):
        obj = obj.opts(backend=backend, **options)
    return obj


def _status(row: dict) -> str:
    if row["is_baseline"]:
        return "baseline"
    if row["significant"]:
        return "significant"
    if row["too_few"]:
        return "too few runs"
    return "not significant"


def metric_bars_figure(cmp_block: pd.DataFrame, title: str, ylabel: str,
                       runs: pd.DataFrame | None = None):
    """Bars of one metric's mean per variant with t-CI whiskers and a ``*`` above
    each significant change (the test and alpha are those of the comparison);
    with ``runs`` (``variant``, ``iteration``, ``value``) every iteration is
    overlaid as a dot."""
    hv = load_holoviews()
    df = cmp_block[["variant", "mean", "ci_low", "ci_high", "is_baseline", "significant",
                    "too_few"]].copy()
    df["status"] = [_status(r) for r in df.to_dict("records")]
    df["neg"] = (df["mean"] - df["ci_low"]).clip(lower=0).fillna(0.0)
    high = df["ci_high"].where(np.isfinite(df["ci_high"]), df["mean"])
    df["pos"] = (high - df["mean"]).clip(lower=0).fillna(0.0)
    # a variant without a mean (the gmean of zeros, say) gets no bar: NaN heights made numpy
    # and holoviews warn on every figure and drew nothing anyway; its runs still show as dots
    df = df[df["mean"].notna()]
    if df.empty:
        dots = iteration_dots_figure(runs, title, ylabel) if runs is not None and not runs.empty else \
            _both(hv.Scatter([], kdims=["variant"], vdims=["value"]), title=title, ylabel=ylabel)
        return _both(_both(dots, color="black"), show_legend=False)
    bars = _both(hv.Bars(df, kdims=["variant"], vdims=["mean", "status"]),
                 title=title, ylabel=ylabel, xlabel="", xrotation=15)
    whiskers = hv.ErrorBars(df, kdims=["variant"], vdims=["mean", "neg", "pos"])
    top = float((df["mean"] + df["pos"]).max())
    stars = df[df["significant"]]
    marks = hv.Labels((list(stars["variant"]), [top * 1.04] * len(stars),
                       ["*"] * len(stars)), kdims=["variant", "mean"], vdims=["text"]).opts(
        color="black", backend="matplotlib").opts(text_color="black", backend="bokeh")
    overlay = bars * whiskers * marks
    if runs is not None and not runs.empty:
        overlay = overlay * _both(iteration_dots_figure(runs, title, ylabel), color="black")
    return _both(overlay, show_legend=False)


def iteration_dots_figure(runs: pd.DataFrame, title: str, ylabel: str):
    """Every iteration's value per variant: ``runs`` has ``variant``, ``iteration``, ``value``."""
    hv = load_holoviews()
    dots = _both(hv.Scatter(runs, kdims=["variant"], vdims=["value", "iteration"]),
                 title=title, ylabel=ylabel, xlabel="", xrotation=15)
    return dots.opts(size=7, tools=["hover"], backend="bokeh")


def latency_cdf_figure(latencies: pd.DataFrame, title: str = "wakeup latency CDF",
                       unit: str = "us"):
    """Empirical CDF per variant; ``latencies`` has ``variant`` and ``latency``."""
    hv = load_holoviews()
    curves = {}
    for variant in dict.fromkeys(latencies["variant"]):
        values = np.sort(latencies.loc[latencies["variant"] == variant, "latency"].to_numpy(float))
        if values.size == 0:
            continue
        frac = np.arange(1, values.size + 1) / values.size
        curves[variant] = hv.Curve((values, frac), kdims=[f"latency ({unit})"],
                                   vdims=["fraction of wakeups"], label=variant)
    overlay = hv.Overlay(list(curves.values())) if curves else hv.Curve([])
    return _both(overlay, title=title, logx=True)


def residency_figure(residency: pd.DataFrame, title: str, state_label: str):
    """Stacked bars of % time per state and variant; columns ``variant``, ``state``, ``pct``."""
    hv = load_holoviews()
    df = residency.copy()
    df["state"] = df["state"].astype(str)
    state = hv.Dimension("state", label=state_label)
    return _both(hv.Bars(df, kdims=["variant", state], vdims=["pct"]), stacked=True,
                 title=title, ylabel="% of time", xlabel="", legend_position="right")


def _fit_grouped_bars(plot, element) -> None:
    """matplotlib hook: holoviews draws the groups of a two-key Bars off their ticks and clips
    the outer bars; centre each group's tick under its bars and fit the axis to them."""
    ax = plot.handles["axis"]
    bars = sorted((p for p in ax.patches if p.get_width() > 0), key=lambda p: p.get_x())
    groups = [str(v) for v in element.dimension_values(0, expanded=False)]
    if not bars or len(bars) % len(groups):
        return
    per = len(bars) // len(groups)
    centres = [sum(b.get_x() + b.get_width() / 2 for b in bars[i * per:(i + 1) * per]) / per
               for i in range(len(groups))]
    ax.set_xticks(centres, groups)
    pad = bars[0].get_width() / 2
    ax.set_xlim(bars[0].get_x() - pad, bars[-1].get_x() + bars[-1].get_width() + pad)


def grouped_bars_figure(df: pd.DataFrame, group, bar, value, title: str):
    """Bars of ``value`` per ``group`` (x axis) and ``bar`` (colour, in the legend): the groups'
    names only under the axis, never a second row of labels over the first (holoviews' default
    two-level labels overlap). ``group``, ``bar`` and ``value`` are column names or holoviews
    Dimensions."""
    hv = load_holoviews()
    bars = hv.Bars(df, kdims=[group, bar], vdims=[value]).opts(title=title)
    bars = bars.opts(multi_level=False, show_legend=True, legend_position="right", hooks=[_fit_grouped_bars],
                     backend="matplotlib")
    return bars.opts(multi_level=False, legend_position="right", backend="bokeh")


def timeline_figure(panels: dict[str, tuple[pd.DataFrame, str]], wakeups: pd.DataFrame,
                    title: str):
    """Per-CPU step curves around chosen wakeups, as the ondemand RFC's trace
    excerpt shows them: ``panels`` maps a y label to (frame, column), each frame
    with ``time`` (ms), ``cpu`` and that column (e.g. frequency in kHz, idle
    state, running task); ``wakeups`` has ``time`` (ms), drawn as dashed lines."""
    hv = load_holoviews()
    layout = []
    for ylabel, (frame, column) in panels.items():
        if frame is None or frame.empty:
            continue
        curves = [_both(hv.Curve(g.sort_values("time", kind="stable"), kdims=["time"],
                                 vdims=[column], label=f"CPU{cpu}"), interpolation="steps-post")
                  for cpu, g in frame.groupby("cpu", sort=True)]
        overlay = hv.Overlay(curves)
        for t in wakeups["time"]:
            line = hv.VLine(float(t)).opts(color="black", linestyle="dashed", backend="matplotlib")
            overlay = overlay * line.opts(color="black", line_dash="dashed", backend="bokeh")
        layout.append(_both(overlay, ylabel=ylabel, xlabel="time from wakeup (ms)", title=title,
                            legend_position="right"))
        title = ""
    if not layout:
        return None
    return hv.Layout(layout).cols(1).opts(sublabel_format="", vspace=0.4, fig_size=160,
                                          backend="matplotlib")


# --- export ----------------------------------------------------------------

def export(obj, stem: Path, formats: Sequence[str] = ("png", "svg"), dpi: int = 100) -> list[Path]:
    """Render ``obj`` with matplotlib and write ``stem.png`` / ``stem.svg``."""
    hv = load_holoviews()
    # deferred: matplotlib (~1 s) only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    with matplotlib.rc_context({"svg.hashsalt": _HASHSALT, "svg.fonttype": "path"}):
        sized = obj.opts(*[getattr(hv.opts, e)(aspect=2.2, fig_size=200) for e in _ELEMENTS],
                         backend="matplotlib", clone=True)
        fig = hv.render(sized, backend="matplotlib")
        try:
            for fmt in formats:
                path = stem.with_suffix(f".{fmt}")
                metadata = {"Date": None} if fmt == "svg" else {"Software": None}
                fig.savefig(path, format=fmt, dpi=dpi, metadata=metadata, bbox_inches="tight")
                written.append(path)
        finally:
            plt.close(fig)
    return written


def svg_text(fig) -> str:
    """A matplotlib figure as SVG text, byte-stable as :func:`export` writes it; the figure is
    closed (a notebook's inline backend would show it a second time, as PNG)."""
    # deferred: matplotlib (~1 s) only when a figure is drawn
    import io

    import matplotlib
    import matplotlib.pyplot as plt

    out = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": _HASHSALT, "svg.fonttype": "path"}):
        fig.savefig(out, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    return out.getvalue()


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_SIMPLE_ID = re.compile(r'(?<=")p\d{4,}(?=")')


def stable_html(html: str) -> str:
    """Replace bokeh's random UUIDs and counter-based ids by ids numbered in order
    of first appearance, so the same figures give the same bytes in any process."""
    uuids: dict[str, str] = {}
    html = _UUID.sub(lambda m: uuids.setdefault(m.group(0), f"00000000-0000-4000-8000-{len(uuids):012d}"),
                     html)
    simple: dict[str, str] = {}
    return _SIMPLE_ID.sub(lambda m: simple.setdefault(m.group(0), f"p{1000 + len(simple)}"), html)


def offline_resources():
    """Bokeh's INLINE resources without the scripts and styles that imported
    extensions declare: holoviews imports panel, whose models ask for
    ``static/extensions/panel/...`` files that only a panel server serves, so a
    standalone page would try (and fail) to load them. Our pages use bokeh's
    own models only, and must not fetch anything."""
    # deferred: see the note under __all__
    from bokeh.resources import Resources

    class OfflineResources(Resources):
        def _collect_external_resources(self, resource_attr):
            return []

        def clone(self, *, components=None):  # file_html clones: keep the override
            copy = super().clone(components=components)
            copy.__class__ = OfflineResources
            return copy

    return OfflineResources(mode="inline")


def export_html(objs: Iterable, path: Path, title: str) -> Path:
    """All figures in one self-contained interactive HTML page (bokeh, inline JS)."""
    hv = load_holoviews()
    # deferred: see the note under __all__
    from bokeh.embed import file_html
    from bokeh.layouts import column

    sized = [obj.opts(*[getattr(hv.opts, e)(width=760, height=340) for e in _ELEMENTS],
                      backend="bokeh", clone=True) for obj in objs]
    models = [hv.render(obj, backend="bokeh") for obj in sized]
    html = file_html(column(*models), offline_resources(), title)
    path.write_text(stable_html(html), encoding="utf-8")
    return path


def figure_name(*parts: str) -> str:
    """A file-name-safe stem: ``fio-randread`` + ``IOPS (k)`` -> ``fio-randread_IOPS_k``."""
    text = "_".join(parts)
    text = re.sub(r"[^A-Za-z0-9.+-]+", "_", text).strip("_")
    return text or "figure"


# --- cached, parallel rendering ----------------------------------------------

@dataclass(frozen=True)
class FigureSpec:
    """A figure still to draw: ``builder`` names a ``*_figure`` function of this
    module, or ``"package.module:function"`` (a study's own figure), called with
    ``args`` / ``kwargs`` (frames, strings, numbers). Keeping the recipe instead of
    the holoviews object lets a report find its figures in the cache without
    importing holoviews at all."""

    name: str
    builder: str
    args: tuple
    kwargs: dict[str, Any] = field(default_factory=dict)

    def _function(self):
        module, _, function = self.builder.rpartition(":")
        return getattr(importlib.import_module(module), function) if module else globals()[function]

    def build(self):
        return self._function()(*self.args, **self.kwargs)

    def key(self, *options: Any) -> str:
        """Hash of the data, the options, the code drawing it and the plotting libraries."""
        module = self.builder.rpartition(":")[0]
        # a study's builder module is hashed from its spec's origin: no import needed to find it
        origin = importlib.util.find_spec(module).origin if module else None
        code = code_digest([Path(origin)]) if origin else ""
        return digest(_code_version(), code, self.builder, self.args, self.kwargs, *options)


_CODE_VERSION: list[str] = []


def _code_version() -> str:
    if not _CODE_VERSION:
        _CODE_VERSION.append(digest(code_digest([Path(__file__)]), library_versions(
            "holoviews", "bokeh", "matplotlib", "pillow", "numpy", "pandas")))
    return _CODE_VERSION[0]


def _draw_files(spec: FigureSpec, cache: Path, key: str, formats: Sequence[str],
                dpi: int) -> None:
    with tempfile.TemporaryDirectory(dir=cache, prefix=".draw-") as tmp:
        for path in export(spec.build(), Path(tmp) / key, formats, dpi):
            os.replace(path, cache / path.name)


def _draw_html(specs: Sequence[FigureSpec], target: Path, title: str) -> None:
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".draw-") as tmp:
        path = export_html([s.build() for s in specs], Path(tmp) / target.name, title)
        os.replace(path, target)


def _run_all(tasks: list[tuple], jobs: int) -> None:
    """Run ``(function, *args)`` tasks, in ``jobs`` forked processes when worth it
    (each figure costs ~0.5 s of pure-Python holoviews/matplotlib work)."""
    if jobs <= 1 or len(tasks) <= 1:
        for func, *args in tasks:
            func(*args)
        return
    # fork: workers inherit the imported modules instead of re-importing them
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=context) as pool:
        for future in [pool.submit(func, *args) for func, *args in tasks]:
            future.result()


def render_figures(specs: Sequence[FigureSpec], out_dir: Path, *, html: Path | None = None,
                   title: str = "", formats: Sequence[str] = ("png", "svg"), dpi: int = 100,
                   jobs: int | None = None, use_cache: bool = True) -> list[Path]:
    """Write every spec as ``out_dir/<name>.<format>`` and, with ``html``, all of them
    as one interactive page there. Figures come from the cache
    (:mod:`lisa_ext.report.cache`) and only the missing ones are drawn, the
    slowest (the HTML page) first, spread over ``jobs`` processes (default: one
    per CPU)."""
    jobs = jobs or os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="lisa-ext-figures-") as scratch:
        root = cache_root() if use_cache else Path(scratch)
        fig_cache, html_cache = root / "figures", root / "html"
        fig_cache.mkdir(parents=True, exist_ok=True)
        keys = [spec.key(tuple(formats), dpi) for spec in specs]
        tasks: list[tuple] = []
        html_entry = None
        if html is not None and specs:
            html_cache.mkdir(parents=True, exist_ok=True)
            html_entry = html_cache / f"{digest(_code_version(), title, keys)}.html"
            if not html_entry.exists():
                tasks.append((_draw_html, list(specs), html_entry, title))
        queued = set()
        for spec, key in zip(specs, keys):
            if key not in queued and not all((fig_cache / f"{key}.{fmt}").exists()
                                             for fmt in formats):
                queued.add(key)
                tasks.append((_draw_files, spec, fig_cache, key, tuple(formats), dpi))
        _run_all(tasks, jobs)
        written = []
        for spec, key in zip(specs, keys):
            for fmt in formats:
                target = out_dir / f"{spec.name}.{fmt}"
                shutil.copyfile(fig_cache / f"{key}.{fmt}", target)
                written.append(target)
        if html_entry is not None:
            shutil.copyfile(html_entry, html)
            written.append(html)
    return written
