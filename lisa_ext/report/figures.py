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

import inspect
import json
import multiprocessing
import os
import re
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import pandas as pd

from lisa_ext.report import drawing
from lisa_ext.report import escape
from lisa_ext.report import readable
from lisa_ext.report.cache import cache_root, code_digest, digest, library_versions
from lisa_ext.report.drawing import bars_frame

__all__ = [
    "FigureSpec",
    "ITEM",
    "Prefetch",
    "curves_figure",
    "export",
    "export_html",
    "figure_name",
    "figures_page",
    "grouped_bars_figure",
    "iteration_dots_figure",
    "latency_cdf_figure",
    "load_holoviews",
    "metric_bars_figure",
    "offline_resources",
    "prefetch_figures",
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
    """Apply options to both backends: holoviews keeps them per backend. A ``title`` and a
    ``ylabel`` are text (:mod:`lisa_ext.report.escape`): holoviews formats titles, and
    matplotlib would parse a ``$`` as math."""
    for backend in ("matplotlib", "bokeh"):
        shown = dict(options)
        for key in ("title", "ylabel"):
            if key in shown:
                text = escape.mathtext(shown[key]) if backend == "matplotlib" else str(shown[key])
                shown[key] = escape.hv_title(text) if key == "title" else text
        obj = obj.opts(backend=backend, **shown)
    return obj


def metric_bars_figure(cmp_block: pd.DataFrame, title: str, ylabel: str,
                       runs: pd.DataFrame | None = None):
    """Bars of one metric's mean per variant with t-CI whiskers and a ``*`` above
    each significant change (the test and alpha are those of the comparison);
    with ``runs`` (``variant``, ``iteration``, ``value``) every iteration is
    overlaid as a dot."""
    hv = load_holoviews()
    df = bars_frame(cmp_block)
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
    """Empirical CDF per variant; ``latencies`` has ``variant`` and ``latency`` (in ``unit``, drawn
    in the unit its range reads in: :func:`lisa_ext.report.readable.time_scale`)."""
    hv = load_holoviews()
    xlabel, curves = drawing.cdf_curves(latencies, unit)
    overlay = hv.Overlay([hv.Curve((values, frac), kdims=[xlabel], vdims=["fraction of wakeups"], label=variant)
                          for variant, values, frac in curves]) if curves else hv.Curve([])
    return _both(overlay, title=title, logx=True)


def curves_figure(df: pd.DataFrame, x: str, y: str, by: str, title: str):
    """One curve of ``y`` against ``x`` per value of ``by`` (in order of appearance, named in the
    legend)."""
    hv = load_holoviews()
    curves = [hv.Curve(group, kdims=[x], vdims=[y], label=str(key)) for key, group in df.groupby(by, sort=False)]
    return _both(hv.Overlay(curves) if curves else hv.Curve([]), title=title, ylabel=y)


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
    bars = _both(hv.Bars(df, kdims=[group, bar], vdims=[value]), title=title)
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

    sized = obj.opts(*[getattr(hv.opts, e)(aspect=2.2, fig_size=200) for e in _ELEMENTS],
                     backend="matplotlib", clone=True)
    fig = hv.render(sized, backend="matplotlib")
    try:
        return _save(fig, stem, formats, dpi)
    finally:
        plt.close(fig)


def _save(fig, stem: Path, formats: Sequence[str], dpi: int, crop: bool = True) -> list[Path]:
    """Write a matplotlib figure as ``stem.<format>``, byte-stably (no dates, fixed SVG ids);
    ``crop``: to the tight bounding box of what is drawn (one more drawing per format),
    else the figure as laid out."""
    # deferred: matplotlib (~1 s) only when a figure is drawn
    import matplotlib

    written = []
    with matplotlib.rc_context({"svg.hashsalt": _HASHSALT, "svg.fonttype": "path"}):
        for fmt in formats:
            path = stem.with_suffix(f".{fmt}")
            metadata = {"Date": None} if fmt == "svg" else {"Software": None}
            fig.savefig(path, format=fmt, dpi=dpi, metadata=metadata,
                        bbox_inches="tight" if crop else None)
            written.append(path)
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
    """A figure still to draw: ``builder`` is a function returning a holoviews object (a
    ``*_figure`` function of this module, or a study's own, passed by the study itself),
    called with ``args`` / ``kwargs`` (frames, strings, numbers). Keeping the recipe instead
    of the holoviews object lets a report find its figures in the cache without importing
    holoviews at all; the builder is a module-level function, so it reaches the processes
    drawing figures by reference."""

    name: str
    builder: Callable[..., Any]
    args: tuple
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # builders were once 'module:function' strings: one left over failed far from here
        if not callable(self.builder):
            raise TypeError(f"figure {self.name!r}: builder must be a function, not {self.builder!r}")

    def build(self):
        return self.builder(*self.args, **self.kwargs)

    def key(self, *options: Any) -> str:
        """Hash of the data, the options, the code drawing it and the plotting libraries."""
        module = self.builder.__module__
        # a study's builder is hashed from its module's source; this module's is in _code_version
        code = "" if module == __name__ else code_digest([Path(inspect.getsourcefile(self.builder))])
        return digest(_code_version(), code, f"{module}.{self.builder.__qualname__}", self.args,
                      self.kwargs, *options)


_CODE_VERSION: list[str] = []


def _code_version() -> str:
    if not _CODE_VERSION:
        # readable: the unit a figure's times are drawn in (time_scale) is part of the drawing
        _CODE_VERSION.append(digest(code_digest([Path(__file__), Path(drawing.__file__), Path(readable.__file__)]),
                                    library_versions(
                                        "holoviews", "bokeh", "matplotlib", "pillow", "numpy", "pandas")))
    return _CODE_VERSION[0]


#: the figure's bokeh JSON (``bokeh.embed.json_item``), kept beside its PNG/SVG for figures.html
ITEM = "item.json"


def _own_builder(spec: FigureSpec) -> str | None:
    """The name of ``spec``'s builder when it is one of this module's ``*_figure`` functions,
    whose files lisa_ext.report.drawing draws directly."""
    return spec.builder.__name__ if spec.builder.__module__ == __name__ else None


def _draw_files(spec: FigureSpec, cache: Path, key: str, formats: Sequence[str],
                dpi: int) -> None:
    """Draw what the cache lacks of ``spec``: ``<key>.<format>`` and, when ``ITEM`` is in
    ``formats``, ``<key>.item.json`` for figures.html."""
    files = [fmt for fmt in formats if fmt != ITEM and not (cache / f"{key}.{fmt}").exists()]
    with tempfile.TemporaryDirectory(dir=cache, prefix=".draw-") as tmp:
        stem = Path(tmp) / key
        written = []
        mpl = drawing.MPL.get(_own_builder(spec))
        if files and mpl is not None:
            # the report's own figures: matplotlib straight from the frames (lisa_ext.report.drawing)
            fig = mpl(*spec.args, **spec.kwargs)
            # laid out tight once, instead of a cropping pass per file format (a third less)
            fig.tight_layout()
            # and no engine left behind: any engine, even tight_layout's placeholder, makes
            # savefig lay the figure out again before each file (a fifth of the drawing)
            fig.set_layout_engine(None)
            written = _save(fig, stem, files, dpi, crop=False)
        elif files:
            written = export(spec.build(), stem, files, dpi)
        if ITEM in formats and not (cache / f"{key}.{ITEM}").exists():
            path = stem.with_suffix(f".{ITEM}")
            # key order kept: a model is defined where it first appears, referred to after
            path.write_text(json.dumps(_bokeh_item(spec)), encoding="utf-8")
            written.append(path)
        for path in written:
            os.replace(path, cache / path.name)


def _bokeh_item(spec: FigureSpec) -> dict:
    """bokeh's ``json_item`` of the figure of ``spec`` in figures.html."""
    # deferred: see the note under __all__
    from bokeh.embed import json_item
    from bokeh.settings import settings

    if _own_builder(spec) not in drawing.BOKEH:
        return json_item(_bokeh_model(spec))
    # without bokeh's document checks (a sixth of an item's cost): the report's own figures
    # have a fixed structure, checked once by tests/test_report_cache.py, not at each drawing
    settings.perform_document_validation.set_value(False)
    try:
        item = json_item(_bokeh_model(spec))
    finally:
        settings.perform_document_validation.unset_value()
    # definitions of the custom models of whatever extensions this process imported
    # (panel's, holoviews'): our figures use bokeh's own models only, and the page must
    # not depend on what else was imported
    item["doc"].pop("defs", None)
    return item


def _bokeh_model(spec: FigureSpec):
    """The figure of ``spec`` in figures.html: drawn by bokeh straight from the frames for
    the report's own figures, through holoviews for the others."""
    own = drawing.BOKEH.get(_own_builder(spec))
    if own is not None:
        return own(*spec.args, **spec.kwargs)
    hv = load_holoviews()
    sized = spec.build().opts(*[getattr(hv.opts, e)(width=760, height=340) for e in _ELEMENTS],
                              backend="bokeh", clone=True)
    return hv.render(sized, backend="bokeh")


def figures_page(items: Sequence[str], title: str) -> str:
    """One self-contained HTML page (bokeh's JavaScript inline, nothing fetched) showing
    each figure of ``items`` (``bokeh.embed.json_item`` JSON texts), one under the other,
    their ids renumbered (:func:`_numbered`) so the page is the same from any process."""
    resources = offline_resources()
    divs = "\n".join(f'<div id="figure-{k}" style="margin-bottom:12px"></div>'
                     for k in range(len(items)))
    # a title holding "</script>" must not end the script element early
    escaped = [escape.script(item) for item in _numbered(items)]
    calls = "\n".join(f'Bokeh.embed.embed_item({item}, "figure-{k}");'
                      for k, item in enumerate(escaped))
    page = (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{escape.html(title)}</title>\n{resources.render_js()}\n{resources.render_css()}\n"
            f"</head>\n<body>\n{divs}\n<script type=\"text/javascript\">\n{calls}\n</script>\n"
            f"</body>\n</html>\n")
    return page


def _numbered(items: Sequence[str]) -> list[str]:
    """Each item's bokeh ids renumbered in order of appearance, item after item: items
    drawn in different processes reuse bokeh's counter-based ids, which must not meet."""
    out, uuids, simple = [], 0, 0
    for item in items:
        own_uuids: dict[str, str] = {}
        own_simple: dict[str, str] = {}
        item = _UUID.sub(lambda m: own_uuids.setdefault(
            m.group(0), f"00000000-0000-4000-8000-{uuids + len(own_uuids):012d}"), item)
        item = _SIMPLE_ID.sub(lambda m: own_simple.setdefault(
            m.group(0), f"p{1000 + simple + len(own_simple)}"), item)
        uuids, simple = uuids + len(own_uuids), simple + len(own_simple)
        out.append(item)
    return out


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
                   jobs: int | None = None, use_cache: bool = True,
                   scratch: Path | None = None, beside: "Prefetch | None" = None) -> list[Path]:
    """Write every spec as ``out_dir/<name>.<format>`` and, with ``html``, all of them
    as one interactive page there (:func:`figures_page`). Figures come from the cache
    (:mod:`lisa_ext.report.cache`) and only the missing ones are drawn, spread over
    ``jobs`` processes (default: one per CPU); each task draws one figure's files and
    its bokeh JSON for the page. Without the cache they are drawn in ``scratch`` (a
    temporary directory by default), which :func:`prefetch_figures` may have filled; while
    that prefetch (``beside``) still draws, this process draws from the other end of the
    list, so that both cores work until they meet."""
    jobs = jobs or os.cpu_count() or 1
    wanted = tuple(formats) + ((ITEM,) if html is not None else ())
    with tempfile.TemporaryDirectory(prefix="lisa-ext-figures-") as tmp:
        fig_cache = _figure_cache(use_cache, scratch or Path(tmp))
        keys = [spec.key(tuple(formats), dpi) for spec in specs]
        tasks: list[tuple] = []
        queued = set()
        for spec, key in zip(specs, keys):
            if key not in queued and _lacks(fig_cache, key, wanted):
                queued.add(key)
                tasks.append((_draw_files, spec, fig_cache, key, wanted, dpi))
        if beside is not None:
            _draw_until_done(tasks, beside)
            tasks = [task for task in tasks if _lacks(fig_cache, task[3], wanted)]
        _run_all(tasks, jobs)
        written = []
        for spec, key in zip(specs, keys):
            for fmt in formats:
                target = out_dir / f"{spec.name}.{fmt}"
                shutil.copyfile(fig_cache / f"{key}.{fmt}", target)
                written.append(target)
        if html is not None and specs:
            items = [(fig_cache / f"{key}.{ITEM}").read_text(encoding="utf-8") for key in keys]
            html.write_text(figures_page(items, title), encoding="utf-8")
            written.append(html)
    return written


def _lacks(fig_cache: Path, key: str, wanted: Sequence[str]) -> bool:
    """Whether the cache lacks one of the files ``wanted`` of the figure ``key``."""
    return not all((fig_cache / f"{key}.{fmt}").exists() for fmt in wanted)


def _draw_until_done(tasks: list[tuple], prefetch: "Prefetch") -> None:
    """Draw ``tasks`` last to first, each one the prefetching process has not drawn yet,
    while it runs; then wait for it. It draws first to last: the two meet in the middle,
    where at most the figure both were drawing is drawn twice (to the same bytes, each
    file moved into place whole)."""
    for func, spec, fig_cache, key, wanted, dpi in reversed(tasks):
        if not prefetch.running():
            break
        if _lacks(fig_cache, key, wanted):
            func(spec, fig_cache, key, wanted, dpi)
    prefetch.wait()


def _figure_cache(use_cache: bool, scratch: Path) -> Path:
    root = cache_root() / "figures" if use_cache else scratch / "figures"
    root.mkdir(parents=True, exist_ok=True)
    return root


@dataclass
class Prefetch:
    """Figures being drawn in a forked process while the caller does other work
    (:func:`prefetch_figures`); give it to :func:`render_figures` as ``beside``, which
    draws beside it and waits for it, or :meth:`wait` first."""

    pid: int | None

    def running(self) -> bool:
        """Whether it still draws (it is reaped once it has ended)."""
        if self.pid is not None and os.waitpid(self.pid, os.WNOHANG)[0]:
            self.pid = None
        return self.pid is not None

    def wait(self) -> None:
        if self.pid is not None:
            os.waitpid(self.pid, 0)  # its figures are in the cache whatever its exit status
            self.pid = None


def prefetch_figures(specs: Sequence[FigureSpec], *, html: bool = True,
                     formats: Sequence[str] = ("png", "svg"), dpi: int = 100,
                     use_cache: bool = True, scratch: Path | None = None) -> Prefetch:
    """Start drawing ``specs`` into the cache (or ``scratch``) in one forked process and
    return at once: a report draws the figures that need no trace while it analyses
    the traces, on the other core. What the child draws is only a head start:
    :func:`render_figures` draws whatever is still missing (also if the child failed),
    and its keys make a figure drawn from other data never count."""
    if not specs or (os.cpu_count() or 1) < 2 or not hasattr(os, "fork"):
        return Prefetch(None)
    wanted = tuple(formats) + ((ITEM,) if html else ())
    fig_cache = _figure_cache(use_cache, scratch) if scratch or use_cache else None
    if fig_cache is None:
        return Prefetch(None)
    pid = os.fork()
    if pid:
        return Prefetch(pid)
    code = 0
    try:
        for spec in specs:
            key = spec.key(tuple(formats), dpi)
            if _lacks(fig_cache, key, wanted):
                _draw_files(spec, fig_cache, key, wanted, dpi)
    except BaseException:  # the parent draws what is missing; nothing to report from here
        code = 1
    finally:
        os._exit(code)
