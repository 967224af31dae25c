"""Trace explorer: one trace as linked, zoomable bokeh plots.

``explore("data/<campaign>/runs/<variant>/<workload>/<i>")`` (or any trace file)
in a notebook shows, on one shared time axis (seconds from the first event):

* per-CPU frequency as steps in MHz (``power:cpu_frequency``, ``cpufreq_cpu_frequency``
  in ``drivers/cpufreq/cpufreq.c``),
* idle state as bands (``power:cpu_idle``, ``drivers/cpuidle/cpuidle.c``; the
  exit value ``PWR_EVENT_EXIT`` = -1 ends a band),
* the running task as slices between ``sched_switch`` events
  (``kernel/sched/core.c``: ``__schedule``), comm and pid on hover,
* wake-ups (``sched_waking``, else ``sched_wakeup``: ``try_to_wake_up``) at
  their target CPU,
* what the analyses found: idle misses (``trace.ana.idle_miss``), IO-wait
  wake-ups (``trace.ana.iowait_boost``) and work items
  (``trace.ana.wq_placement``), from their ``df_*`` frames; ``analyses=`` names the
  ones a study is about (a fio run of a workqueue study has iowait wake-ups too, which
  say nothing there).

The tracks come straight from the trace's cached Arrow tables
(:mod:`lisa_ext.trace.cache`), only the columns they need, so a 6 M-event
trace opens in seconds. Any element with more than :data:`RASTER_ABOVE` items
is rasterised: by default with numpy (the exact busy fraction of each pixel
column; datashader, ``engine="datashader"``, spent ~20 s compiling with numba
on its first render of the 6 M-event trace); in a live kernel it is
re-aggregated at each zoom;
:func:`export_explorer` writes a static HTML page (bokeh, inline resources,
no network) holding the rasterised view.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from lisa_ext.campaign.store.layout import TRACE_FILES
from lisa_ext.campaign.store.reader import run_trace
from lisa_ext.compat import import_lisa
from lisa_ext.errors import UserError
from lisa_ext.report import cache
from lisa_ext.report.cache import cached_frame
from lisa_ext.report.escape import hv_title
from lisa_ext.report.figures import offline_resources, stable_html
from lisa_ext.trace import read_trace
from lisa_ext.trace.cache import TraceCacheEntry

__all__ = ["ExplorerTables", "RASTER_ABOVE", "busy_fraction", "explore", "explorer_page",
           "explorer_tables", "export_explorer", "point_counts", "trace_file", "use_bokeh"]

# Deferred imports in this module: holoviews/bokeh/panel take seconds; tables-only reports never
# need them.

#: elements with more items than this are rasterised (datashader)
RASTER_ABOVE = 20_000
#: the ``cpu_idle`` state meaning "exit", as the u32 the trace stores
_IDLE_EXIT = 4294967295
#: analysis -> (df_* method, finding label, column naming the CPU or None)
_FINDINGS = {
    "idle_miss": ("df_idle_miss_events", "idle miss", "cpu"),
    "iowait_boost": ("df_iowait_sleeps", "iowait wake-up", None),
    "wq_placement": ("df_work_items", "work item", "exec_cpu"),
}


@dataclass
class ExplorerTables:
    """The explorer's tidy tables, times in seconds from the trace's first event.

    * ``frequency``: ``time``, ``cpu``, ``frequency`` (kHz)
    * ``idle``: ``start``, ``end``, ``cpu``, ``state`` (idle state entered)
    * ``tasks``: ``start``, ``end``, ``cpu``, ``pid``, ``comm`` (idle task excluded)
    * ``wakeups``: ``time``, ``cpu`` (target), ``pid``, ``comm``
    * ``findings``: ``time``, ``finding``, ``cpu`` (-1 if unknown), ``detail``
    """

    source: str
    cpus: int
    duration: float
    frequency: pd.DataFrame
    idle: pd.DataFrame
    tasks: pd.DataFrame
    wakeups: pd.DataFrame
    findings: pd.DataFrame


def trace_file(source: str | os.PathLike) -> Path:
    """The trace of ``source``: a trace file, or a run directory holding one."""
    path = Path(source)
    trace = run_trace(path) if path.is_dir() else path
    if trace is None or not trace.is_file():
        raise UserError(f"{path}: no trace here: expected a trace file or a run directory "
                        f"holding {' or '.join(TRACE_FILES)}")
    return trace


def _cached_index(path: Path):
    """The trace's cache entry and index, converting the trace on a first visit."""
    entry = TraceCacheEntry.for_file(path)
    index = entry.index()
    if index is None:
        read_trace(path, events=[])  # converts and stores every event
        index = entry.index()
    return entry, index


def _slices(time: np.ndarray, cpu: np.ndarray, end: float) -> tuple[np.ndarray, np.ndarray]:
    """Row order by CPU (time order kept) and each row's end: the CPU's next event."""
    # stable sort on the CPU as one byte: numpy's radix sort, linear time
    keys = cpu.astype(np.uint8) if len(cpu) and 0 <= cpu.min() and cpu.max() < 256 else cpu
    order = np.argsort(keys, kind="stable")
    t = time[order]
    nxt = np.empty_like(t)
    nxt[:-1] = t[1:]
    last = np.r_[cpu[order][1:] != cpu[order][:-1], True] if len(t) else np.zeros(0, bool)
    nxt[last] = end
    return order, nxt


def _chosen_findings(analyses: "bool | Sequence[str]") -> tuple[str, ...]:
    if analyses is True:
        return tuple(_FINDINGS)
    if analyses is False:
        return ()
    unknown = [a for a in analyses if a not in _FINDINGS]
    if unknown:
        raise UserError(f"no explorer findings from {', '.join(unknown)}: choose among {', '.join(_FINDINGS)}")
    return tuple(a for a in _FINDINGS if a in analyses)


def explorer_tables(source: str | os.PathLike, *, analyses: "bool | Sequence[str]" = True) -> ExplorerTables:
    """Read what the explorer shows from ``source`` (trace file or run directory).

    :param analyses: add the analyses' findings (loads the trace into LISA, which
        costs seconds on a large trace); ``False`` shows the raw tracks only, a list of
        analysis names (``idle_miss``, ``iowait_boost``, ``wq_placement``) only theirs.
    """
    chosen = _chosen_findings(analyses)
    path = trace_file(source)
    entry, index = _cached_index(path)
    meta, rows = index["meta"], index["rows"]
    origin = int(meta.get("first_timestamp_ns") or 0)
    duration = (int(meta.get("last_timestamp_ns") or origin) - origin) / 1e9

    def read(event: str, columns: list[str]) -> pd.DataFrame | None:
        if not rows.get(event):
            return None
        table, _ = entry.read_event(index, event, ["__timestamp", *columns])
        df = table.to_pandas(strings_to_categorical=True)
        df["time"] = (df.pop("__timestamp").to_numpy(np.int64) - origin) / 1e9
        return df

    freq = read("cpu_frequency", ["cpu_id", "state"])
    frequency = (pd.DataFrame(columns=["time", "cpu", "frequency"]) if freq is None else
                 pd.DataFrame({"time": freq["time"], "cpu": freq["cpu_id"].astype(np.int64),
                               "frequency": freq["state"].astype(np.int64)}))

    idle = pd.DataFrame(columns=["start", "end", "cpu", "state"])
    df = read("cpu_idle", ["cpu_id", "state"])
    if df is not None and len(df):
        cpu = df["cpu_id"].to_numpy(np.int64)
        order, end = _slices(df["time"].to_numpy(), cpu, duration)
        state = df["state"].to_numpy(np.int64)[order]
        keep = state != _IDLE_EXIT
        idle = pd.DataFrame({"start": df["time"].to_numpy()[order][keep], "end": end[keep],
                             "cpu": cpu[order][keep], "state": state[keep]})

    tasks = pd.DataFrame(columns=["start", "end", "cpu", "pid", "comm"])
    df = read("sched_switch", ["__cpu", "next_pid", "next_comm"])
    if df is not None and len(df):
        cpu = df["__cpu"].to_numpy(np.int64)
        order, end = _slices(df["time"].to_numpy(), cpu, duration)
        pid = df["next_pid"].to_numpy(np.int64)[order]
        keep = pid != 0
        tasks = pd.DataFrame({"start": df["time"].to_numpy()[order][keep], "end": end[keep],
                              "cpu": cpu[order][keep], "pid": pid[keep],
                              "comm": df["next_comm"].take(order[keep]).reset_index(drop=True)})

    wakeups = pd.DataFrame(columns=["time", "cpu", "pid", "comm"])
    for event in ("sched_waking", "sched_wakeup"):
        df = read(event, ["target_cpu", "pid", "comm"])
        if df is not None:
            wakeups = pd.DataFrame({"time": df["time"], "cpu": df["target_cpu"].astype(np.int64),
                                    "pid": df["pid"].astype(np.int64), "comm": df["comm"]})
            break

    findings = (cached_frame(path, ("explorer-findings",), lambda: _findings(path, origin))
                if chosen else _no_findings())
    if chosen and len(chosen) < len(_FINDINGS):
        labels = {_FINDINGS[a][1] for a in chosen}
        findings = findings[findings["finding"].isin(labels)].reset_index(drop=True)
    return ExplorerTables(str(path), int(meta.get("cpus") or 1), duration, frequency, idle,
                          tasks, wakeups, findings)


def _no_findings() -> pd.DataFrame:
    return pd.DataFrame({"time": pd.Series(dtype=float), "finding": pd.Series(dtype=str),
                         "cpu": pd.Series(dtype=np.int64), "detail": pd.Series(dtype=str)})


def _findings(path: Path, origin_ns: int) -> pd.DataFrame:
    """Markers from the analyses' ``df_*`` frames; an analysis whose events the
    trace lacks is left out."""
    # deferred: report.traces imports the analyses and so LISA (seconds); only trace work needs it
    from lisa_ext.report.traces import load_trace

    trace = load_trace(path)
    # LISA keeps absolute seconds unless asked to normalise; ours start at 0
    shift = 0.0 if getattr(trace, "normalize_time", False) else origin_ns / 1e9
    parts = []
    for name, (method, label, cpu_column) in _FINDINGS.items():
        func = getattr(getattr(trace.ana, name, None), method, None)
        if func is None:
            continue
        try:
            df = func()
        except Exception:  # LISA's MissingTraceEventError and friends: nothing to mark
            continue
        if df.empty:
            continue
        detail = pd.Series("", index=df.index)
        for n, column in enumerate(c for c in df.columns if c != cpu_column):
            detail = detail + ("" if n == 0 else ", ") + f"{column}=" + df[column].astype(str)
        parts.append(pd.DataFrame({
            "time": np.asarray(df.index, float) - shift, "finding": label,
            "cpu": df[cpu_column].to_numpy(np.int64) if cpu_column else -1,
            "detail": detail.to_numpy()}))
    return pd.concat(parts, ignore_index=True) if parts else _no_findings()


# --- plots -------------------------------------------------------------------

def _hv():
    # deferred: see the note under __all__
    import holoviews as hv
    import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh renderer)

    return hv


def use_bokeh() -> None:
    """Draw holoviews objects with bokeh in this notebook kernel: the analyses'
    ``plot_*`` methods and :func:`explore` become zoomable, hoverable plots.

    LISA's notebook module activates the matplotlib backend last when it is
    first imported (``lisa/notebook.py``), so plots show as PNGs unless bokeh is
    activated after it; this imports it first, then activates bokeh with its
    JavaScript inline (no CDN: the kernel may have no network)."""
    # deferred: see the note under __all__
    import panel as pn

    import_lisa("lisa.notebook")
    pn.config.inline = True
    hv = _hv()
    hv.extension("bokeh", inline=True)


def _time_dim(hv):
    return hv.Dimension("time", label="time (s)", unit=None)


def busy_fraction(start: np.ndarray, end: np.ndarray, lane: np.ndarray, lanes: int,
                  x0: float, x1: float, width: int) -> np.ndarray:
    """Fraction of each of ``width`` pixels of [x0, x1] that slices cover, per lane:
    shape ``(lanes, width)``. Exact, O(n log n): the covered length up to x is
    sum((x - start)+) - sum((x - end)+), from sorted bounds and prefix sums."""
    edges = np.linspace(0.0, x1 - x0, width + 1)
    out = np.zeros((lanes, width))
    for n in range(lanes):
        on = (lane == n) & (end > x0) & (start < x1)
        # local origin: keeps the prefix sums exact at deep zoom
        s = np.sort(np.clip(start[on], x0, x1) - x0)
        e = np.sort(np.clip(end[on], x0, x1) - x0)
        cs, ce = np.r_[0.0, np.cumsum(s)], np.r_[0.0, np.cumsum(e)]
        ks, ke = np.searchsorted(s, edges, "right"), np.searchsorted(e, edges, "right")
        covered = (ks * edges - cs[ks]) - (ke * edges - ce[ke])
        out[n] = np.diff(covered) / np.diff(edges)
    return np.clip(out, 0.0, 1.0)


def point_counts(time: np.ndarray, lane: np.ndarray, lanes: int, x0: float, x1: float,
                 width: int) -> np.ndarray:
    """Events per pixel of [x0, x1] and lane: shape ``(lanes, width)``."""
    counts, _, _ = np.histogram2d(lane, time, bins=[np.arange(lanes + 1) - 0.5,
                                                    np.linspace(x0, x1, width + 1)])
    return counts


def _raster(hv, aggregate, full: tuple[float, float], lanes: int, vdim: str, engine: str,
            element, **opts):
    # element: builds the vector element, which only datashader needs (building
    # it copies and validates millions of rows)
    """A large element as an image re-aggregated at each zoom (a DynamicMap on
    the x range: live in a kernel, its first frame in a static page).

    ``engine="numpy"`` aggregates with :func:`busy_fraction` / :func:`point_counts`
    (no JIT: the first frame of a 6 M-event trace costs well under a second);
    ``"datashader"`` hands ``element`` to datashader's ``rasterize``, whose numba
    kernels compile for seconds on first use in each process."""
    if engine == "datashader":
        # deferred: datashader imports numba and compiles on first use
        from holoviews.operation.datashader import rasterize

        return rasterize(element(), width=opts["width"], height=opts["height"],
                         dynamic=True).opts(cmap="fire", cnorm="eq_hist", tools=["hover"],
                                            **opts)
    if engine != "numpy":
        raise UserError(f"explorer engine {engine!r}: choose numpy or datashader")
    kdims = [_time_dim(hv), hv.Dimension("lane", label=opts.pop("ylabel", "CPU"))]
    width = opts["width"]

    def frame(x_range=None):
        lo, hi = x_range if x_range and x_range[1] > x_range[0] else full
        # bounds, not pixel centres: holoviews infers no height from a single lane's centre;
        # an array's first row is the image's top, the last lane
        return hv.Image(np.flipud(aggregate(lo, hi, width)), bounds=(lo, -0.5, hi, lanes - 0.5),
                        kdims=kdims, vdims=[vdim]).opts(cmap="fire_r" if vdim == "busy" else "kbc_r",
                                           tools=["hover"], colorbar=True, **opts)

    return hv.DynamicMap(frame, streams=[hv.streams.RangeX(x_range=full)])


def _lanes(hv, df: pd.DataFrame, vdims: list[str], label: str, width: int, height: int,
           color: str, cpus: int, duration: float, engine: str):
    """Slices ``start``..``end`` on each CPU's lane: idle bands or running tasks."""
    time, cpu = _time_dim(hv), hv.Dimension("cpu", label="CPU", range=(-0.5, cpus - 0.5))
    common = dict(width=width, height=height, title=label, yticks=list(range(cpus)))

    def element():
        # datashader wants both y columns of one type
        data = df.assign(cpu=df["cpu"].astype(float), y1=df["cpu"].astype(float)).rename(
            columns={"start": "time"})
        return hv.Segments(data, kdims=[time, cpu, "end", "y1"], vdims=vdims, label=label)

    if len(df) > RASTER_ABOVE:
        start, end = df["start"].to_numpy(float), df["end"].to_numpy(float)
        lane = df["cpu"].to_numpy(np.int64)
        return _raster(hv, lambda lo, hi, w: busy_fraction(start, end, lane, cpus, lo, hi, w),
                       (0.0, duration), cpus, "busy", engine, element, **common)
    return element().opts(color=color, line_width=max(4, height // (3 * cpus)),
                    tools=["hover", "xwheel_zoom"], **common)


def _points(hv, df: pd.DataFrame, y: str, vdims: list[str], label: str, width: int,
            height: int, duration: float, engine: str, **extra):
    """Events as dots at (time, ``y``): wake-ups on their CPU, findings by kind."""
    def element():
        return hv.Scatter(df, kdims=[_time_dim(hv)], vdims=[y, *vdims], label=label)

    common = dict(width=width, height=height, title=label)
    if len(df) > RASTER_ABOVE:
        codes, names = pd.factorize(df[y], sort=True)
        time = df["time"].to_numpy(float)
        yticks = list(enumerate(str(n) for n in names))
        return _raster(hv, lambda lo, hi, w: point_counts(time, codes, len(names), lo, hi, w),
                       (0.0, duration), len(names), "events", engine, element, yticks=yticks,
                       ylabel=y, **common)
    return element().opts(size=5, tools=["hover", "xwheel_zoom"], **common, **extra)


def explore(source: "str | os.PathLike | ExplorerTables", *, analyses: "bool | Sequence[str]" = True,
            width: int = 900, engine: str = "numpy"):
    """The explorer of one trace (file, run directory or :class:`ExplorerTables`):
    a holoviews layout of linked panels sharing the time axis. In a notebook,
    leave it as the cell's last expression; :func:`export_explorer` saves it."""
    hv = _hv()
    if hv.Store.current_backend != "bokeh":
        hv.Store.set_current_backend("bokeh")
    t = source if isinstance(source, ExplorerTables) else explorer_tables(source,
                                                                          analyses=analyses)
    panels = []
    if len(t.frequency):
        curves = []
        mhz = hv.Dimension("mhz", label="frequency", unit="MHz")
        for cpu, g in t.frequency.groupby("cpu", sort=True):
            # hold the last value to the end of the trace, as the CPU did
            g = pd.concat([g, g.tail(1).assign(time=t.duration)])
            g = g.assign(mhz=g["frequency"] / 1000.0)
            curves.append(hv.Curve(g, kdims=[_time_dim(hv)], vdims=[mhz, "cpu"],
                                   label=f"CPU{cpu}").opts(interpolation="steps-post",
                                                           tools=["hover"]))
        panels.append(hv.Overlay(curves).opts(title="frequency", width=width, height=180,
                                              legend_position="right"))
    if len(t.idle):
        panels.append(_lanes(hv, t.idle, ["end", "state"], "idle state", width,
                             40 + 30 * t.cpus, "steelblue", t.cpus, t.duration, engine))
    if len(t.tasks):
        panels.append(_lanes(hv, t.tasks, ["end", "pid", "comm"], "running task", width,
                             40 + 40 * t.cpus, "darkorange", t.cpus, t.duration, engine))
    if len(t.wakeups):
        panels.append(_points(hv, t.wakeups, "cpu", ["pid", "comm"], "wake-ups (target CPU)",
                              width, 80 + 30 * t.cpus, t.duration, engine, color="green",
                              yticks=list(range(t.cpus))))
    if len(t.findings):
        panels.append(_points(hv, t.findings, "finding", ["cpu", "detail"], "analysis findings",
                              width, 60 + 30 * t.findings["finding"].nunique(), t.duration,
                              engine, color="crimson"))
    if not panels:
        raise UserError(f"{t.source}: nothing to explore: no cpu_frequency, cpu_idle, "
                        f"sched_switch or sched_waking/sched_wakeup events")
    # the run directory names the trace better than "trace.dat"; holoviews shows a layout's
    # title as HTML, and the path is any file's
    name = Path(t.source)
    return hv.Layout(panels).cols(1).opts(shared_axes=True, title=hv_title(
        name.relative_to(name.parents[3]) if len(name.parents) > 3 else name, layout=True))


def export_explorer(explorer, path: str | os.PathLike, title: str = "trace explorer") -> Path:
    """A static, self-contained HTML page of ``explorer`` (what :func:`explore`
    returned): bokeh with inline resources, no network; rasterised panels keep
    their image at the initial zoom."""
    # deferred: see the note under __all__
    from bokeh.embed import file_html

    hv = _hv()
    path = Path(path)
    model = hv.render(explorer, backend="bokeh")
    # the zoom callbacks of rasterised panels need a live kernel: the page keeps
    # their first image, which is what it is for; bokeh warns about it at length
    embed_log = logging.getLogger("bokeh.embed.util")
    level = embed_log.level
    embed_log.setLevel(logging.ERROR)
    try:
        html = file_html(model, offline_resources(), title)
    finally:
        embed_log.setLevel(level)
    path.write_text(stable_html(html), encoding="utf-8")
    return path


def explorer_page(source: str | os.PathLike, path: str | os.PathLike, title: str = "trace explorer",
                  *, analyses: "bool | Sequence[str]" = True, use_cache: bool = True) -> Path:
    """:func:`export_explorer` of :func:`explore` for a trace file or run
    directory, the page kept in the report cache (keyed by the trace's content,
    this code and the plotting libraries): a notebook re-render copies it
    instead of importing holoviews and drawing again."""
    trace, path = trace_file(source), Path(path)
    analyses = _chosen_findings(analyses)
    key = cache.digest(cache.trace_key(trace), title, analyses, RASTER_ABOVE,
                       cache.code_digest([Path(__file__), Path(cache.__file__).with_name(
                           "figures.py")]), cache.library_versions("holoviews", "bokeh"))
    entry = cache.cache_root() / "explorer" / f"{key}.html"
    if not (use_cache and entry.is_file()):
        with tempfile.TemporaryDirectory(prefix="lisa-ext-explorer-") as tmp:
            page = export_explorer(explore(trace, analyses=analyses), Path(tmp) / "page.html",
                                   title)
            if not use_cache:
                shutil.copyfile(page, path)
                return path
            cache.store_bytes(entry, page.read_bytes())
    shutil.copyfile(entry, path)
    return path
