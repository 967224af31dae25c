"""Write a campaign's report: metrics, comparison tables and figures.

``build_report(CAMPAIGN_DIR)`` reads the store (:mod:`~lisa_ext.report.campaign`),
adds trace-derived metrics (:mod:`~lisa_ext.report.traces`), compares every
variant with the baseline (:func:`lisa_ext.stats.compare`, with the settings of
the spec's ``report:`` section unless given) and writes ``CAMPAIGN_DIR/report/``
(the one place a campaign's report lives; ``lisa-ext study run`` writes it there
too, and the study's notebook reads it):

* ``metrics.csv``: the tidy metrics table the comparison used
* ``comparison.csv`` / ``.mmtests.txt`` / ``.md`` / ``.lkp.txt`` / ``.sd.txt``
* ``cover-letter.md`` / ``.html`` / ``.txt``: the cover-letter table (:mod:`lisa_ext.report.cover`)
* ``figures/*.png`` and ``*.svg`` (matplotlib), ``figures.html`` (bokeh)
* ``README.md``: what was compared how, failed runs, skipped analyses, tables
* ``.lisa-ext-report``: says lisa-ext wrote the directory, so a later report may replace it

The directory is built aside and swapped in whole, and nothing in it depends
on the time or the process, so the same campaign always gives the same bytes.
It replaces only a report (:func:`report_replace_refusal`, the one place that
decides): never a campaign directory, ``/``, the home or current directory,
nor anything else that is not empty.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from lisa_ext.campaign import host_load, trace_loss
from lisa_ext.campaign.store.layout import REPORT_DIR
from lisa_ext.campaign.store.reader import Campaign, read_campaign
from lisa_ext.campaign.store.removal import never_removed
from lisa_ext.campaign.store.writer import CampaignStore
from lisa_ext.errors import UserError
from lisa_ext.report import cache as report_cache
from lisa_ext.report import figures as figs
from lisa_ext.report import tables
from lisa_ext.report.campaign import metrics_frame
from lisa_ext.report.escape import code_span, markdown
from lisa_ext.report.readable import metric_label, time_scale
from lisa_ext.stats.compare import compare
from lisa_ext.trace.cluster import map_traces

__all__ = ["REPORT_MARKER", "ReportOptions", "TABLE_FILES", "build_report", "campaign_metrics",
           "report_replace_refusal"]

#: format -> file name under report/
TABLE_FILES = {"csv": "comparison.csv", "mmtests": "comparison.mmtests.txt",
               "markdown": "comparison.md", "lkp": "comparison.lkp.txt", "sd": "comparison.sd.txt",
               "cover": "cover-letter.md", "cover-html": "cover-letter.html",
               "cover-text": "cover-letter.txt"}
#: written into every report directory: a later report may replace a directory holding it
REPORT_MARKER = ".lisa-ext-report"
#: files every report wrote before :data:`REPORT_MARKER` existed: how an older report is known
_REPORT_FILES = ("README.md", "metrics.csv", TABLE_FILES["csv"])
#: wakeup latency CDFs are drawn through this many quantiles per variant
CDF_POINTS = 500
#: the timeline shows this much before and after the chosen wakeup (ms)
TIMELINE_MARGIN_MS = 1.0
#: ... around the wakeup whose latency is closest to this quantile
TIMELINE_QUANTILE = 0.99


#: the statistics settings when neither the caller nor the spec's ``report:`` gives them
DEFAULT_SETTINGS = {"test": "welch", "mean": "auto", "alpha": 0.05}


@dataclass
class ReportOptions:
    #: ``None``: the spec's ``report:`` setting, else the first variant
    baseline: str | None = None
    #: ``None``: the spec's ``report:`` setting, else :data:`DEFAULT_SETTINGS`
    test: str | None = None
    mean: str | None = None
    alpha: float | None = None
    traces: bool = True
    html: bool = True
    #: where to write; default ``<campaign>/report``
    out: str | os.PathLike | None = None
    #: processes drawing figures that are not cached yet; default one per CPU
    jobs: int | None = None
    #: reuse figures and trace findings from ``$LISA_EXT_CACHE/report``
    cache: bool = True
    #: where the per-run trace work of uncached runs runs (see
    #: :func:`lisa_ext.trace.cluster.choose_scheduler`)
    scheduler: str | None = None


@dataclass
class _TraceData:
    rows: list
    frames: dict  # frame name -> list of (Run, DataFrame)
    notes: dict   # note -> list of run labels


def _collect_traces(campaign: Campaign, use_cache: bool = True,
                    scheduler: str | None = None) -> _TraceData:
    data = _TraceData([], defaultdict(list), defaultdict(list))
    traced = campaign.traced_runs()
    cached = {run: report_cache.load_findings(run.trace) for run in traced} if use_cache else {}
    todo = [run for run in traced if cached.get(run) is None]
    fresh = {}
    if todo:
        # deferred: LISA and the analyses take seconds to import, and a cached
        # report never needs them
        from lisa_ext.report.traces import collect_file

        # only the runs the cache lacks are analysed (serially or as Dask tasks)
        fresh = dict(zip(todo, map_traces(collect_file, [run.trace for run in todo],
                                          scheduler=scheduler)))
    roots = (os.path.abspath(campaign.root), os.fspath(campaign.root))
    for run in traced:
        findings, notes = cached.get(run) or fresh[run]
        if use_cache and run in fresh and findings is not None and not any(
                root in note for root in roots for note in notes):
            report_cache.store_findings(run.trace, findings, notes)
        for note in notes:
            # paths relative to the campaign, so a moved campaign reports the same
            # (Dask workers see absolute paths)
            for root in roots:
                note = note.replace(f"{root}{os.sep}", "")
            data.notes[note].append(run.label)
        if findings is None:
            continue
        for name, value, unit, lib in findings.metrics:
            data.rows.append(dict(campaign=campaign.name, variant=run.variant,
                                  workload=run.workload, metric=f"trace {name}", unit=unit,
                                  lower_is_better=lib, iteration=run.iteration, value=value))
        for name, frame in findings.frames.items():
            data.frames[name].append((run, frame))
    return data


def _residency_pct(entries, state_name) -> pd.DataFrame:
    """Mean over a variant's runs of the % of CPU time in each state."""
    rows = []
    for run, frame in entries:
        total = frame["seconds"].sum()
        if total <= 0:
            continue
        for state, seconds in frame.groupby("state", sort=True)["seconds"].sum().items():
            rows.append({"variant": run.variant, "workload": run.workload,
                         "iteration": run.iteration, "state": state_name(state),
                         "pct": 100.0 * seconds / total})
    if not rows:
        return pd.DataFrame(columns=["variant", "workload", "state", "pct"])
    df = pd.DataFrame(rows)
    return df.groupby(["workload", "variant", "state"], sort=False, as_index=False)["pct"].mean()


def _idle_state_namer(campaign: Campaign):
    """state -> its name as the kernel gives it (``WFI``), as the runs recorded them, else ``state N``."""
    names = next((run.meta.idle_states for run in campaign.ok_runs if run.meta.idle_states), {})

    def name(state) -> str:
        return "running" if int(state) < 0 else names.get(int(state), f"state {int(state)}")
    return name


def _freq_name(khz) -> str:
    return f"{int(khz) / 1000:g} MHz"


def _window(frame: pd.DataFrame | None, column: str, start: float, end: float,
            origin: float) -> pd.DataFrame | None:
    """Events of ``frame`` inside [start, end], plus each CPU's state on entry."""
    if frame is None or frame.empty:
        return None
    parts = []
    for cpu, g in frame.groupby("cpu", sort=True):
        g = g.sort_values("time", kind="stable")
        before = g[g["time"] < start].tail(1).assign(time=start)
        inside = g[(g["time"] >= start) & (g["time"] <= end)]
        last = pd.concat([before, inside]).tail(1).assign(time=end)
        parts.append(pd.concat([before, inside, last]))
    out = pd.concat(parts, ignore_index=True)
    out["time"] = (out["time"] - origin) * 1e3
    return out[["time", "cpu", column]]


def _timelines(campaign: Campaign, trace: _TraceData) -> list[figs.FigureSpec]:
    """Per workload and variant: the first traced run, around its p99 wakeup (a
    representative slow one; the very slowest is usually an outlier)."""
    found = []
    by_run = defaultdict(dict)
    for name, entries in trace.frames.items():
        for run, frame in entries:
            by_run[run][name] = frame
    chosen = {}
    for run in by_run:
        key = (run.workload, run.variant)
        if "wakeup_latency" in by_run[run] and key not in chosen:
            chosen[key] = run
    for (workload, variant), run in chosen.items():
        frames = by_run[run]
        lat = frames["wakeup_latency"]
        if lat.empty:
            continue
        target = float(lat["latency"].quantile(TIMELINE_QUANTILE))
        worst = lat.loc[(lat["latency"] - target).abs().idxmin()]
        t0 = float(worst["time"])
        start = t0 - TIMELINE_MARGIN_MS / 1e3
        end = t0 + float(worst["latency"]) + TIMELINE_MARGIN_MS / 1e3
        frequencies = frames.get("frequencies")
        if frequencies is not None:
            frequencies = frequencies.assign(frequency=frequencies["frequency"] / 1000.0)
        panels = {
            "frequency (MHz)": (_window(frequencies, "frequency", start, end, t0), "frequency"),
            "idle state (-1 = running)": (_window(frames.get("idle_states"), "state", start, end,
                                                  t0), "state"),
        }
        switches = frames.get("switches")
        if switches is not None and not switches.empty:
            # one lane per CPU: its number, +0.4 while another task runs, +0.8 for the wakee
            lane = switches.assign(lane=switches["cpu"] + np.select(
                [switches["next_pid"] == int(worst["pid"]), switches["next_pid"] != 0],
                [0.8, 0.4], 0.0))
            panels["CPU: idle / other / wakee"] = (_window(lane, "lane", start, end, t0), "lane")
        wakeups = pd.DataFrame({"time": [0.0, float(worst["latency"]) * 1e3]})
        title = (f"{workload} / {variant} run {run.iteration}: p99 wakeup, pid "
                 f"{int(worst['pid'])}, {float(worst['latency']) * 1e6:.0f} us")
        if any(frame is not None and not frame.empty for frame, _ in panels.values()):
            found.append(figs.FigureSpec(figs.figure_name(workload, variant, "timeline"),
                                         figs.timeline_figure, (panels, wakeups, title)))
    return found


def _figures(campaign: Campaign, metrics: pd.DataFrame, cmp: pd.DataFrame,
             trace: _TraceData) -> list[figs.FigureSpec]:
    found = []
    for (workload, metric), block in cmp.groupby(["workload", "metric"], sort=False):
        first = block.iloc[0]
        runs = metrics[(metrics["workload"] == workload) & (metrics["metric"] == metric)]
        if runs["value"].isna().all():
            continue  # e.g. rt-app's perf index of a 100 % duty-cycle task: no budget, nothing to draw
        # the axis's unit follows the values drawn (200000 us reads as 200 ms)
        factor, unit = time_scale(pd.concat([block[["mean", "ci_low", "ci_high"]].stack(), runs["value"]]),
                                  first["unit"])
        bars = block.assign(**{c: block[c] * factor for c in ("mean", "ci_low", "ci_high")})
        label = metric_label(metric, unit)
        found.append(figs.FigureSpec(
            figs.figure_name(workload, metric), figs.metric_bars_figure,
            (bars, f"{workload}: {first['mean_kind']} {label}", label,
             runs[["variant", "iteration"]].assign(value=runs["value"] * factor))))
    latencies = defaultdict(list)
    for run, frame in trace.frames.get("wakeup_latency", []):
        latencies[(run.workload, run.variant)].append(frame["latency"].to_numpy(float) * 1e6)
    for workload in campaign.workloads:
        parts = []
        for variant in campaign.variants:
            values = latencies.get((workload, variant))
            if values:
                pooled = np.concatenate(values)
                q = np.quantile(pooled, np.linspace(0.0, 1.0, CDF_POINTS + 1))
                parts.append(pd.DataFrame({"variant": variant, "latency": q}))
        if parts:
            found.append(figs.FigureSpec(
                figs.figure_name(workload, "wakeup_latency_cdf"), figs.latency_cdf_figure,
                (pd.concat(parts, ignore_index=True), f"{workload}: wakeup latency CDF")))
    for frame_name, label, namer, title in (
            ("idle_residency", "idle state", _idle_state_namer(campaign), "idle state residency"),
            ("frequency_residency", "frequency", _freq_name, "CPU frequency residency")):
        pct = _residency_pct(trace.frames.get(frame_name, []), namer)
        for workload, block in pct.groupby("workload", sort=False):
            found.append(figs.FigureSpec(figs.figure_name(workload, frame_name),
                                         figs.residency_figure,
                                         (block, f"{workload}: {title}", label)))
    found.extend(_timelines(campaign, trace))
    return found


def _readme(campaign: Campaign, opts: ReportOptions, baseline: str, cmp: pd.DataFrame,
            trace: _TraceData, figure_names: list[str]) -> str:
    out = io.StringIO()
    w = out.write
    # names, labels, error texts and notes come from the spec and the runs: text, never Markdown
    w(f"# Report: {markdown(campaign.name)}\n\n")
    w(f"Baseline {code_span(baseline)}; variants {', '.join(code_span(v) for v in campaign.variants)}.  \n")
    w(f"Significance: {opts.test} test, alpha={opts.alpha:g}; fewer than 3 runs are flagged, "
      f"never starred. Mean: {opts.mean} (auto = hmean when higher is better, else amean).\n\n")
    ok, failed = campaign.ok_runs, campaign.failed_runs
    lost = {run.label: n for run in campaign.runs if (n := trace_loss.read_run_lost(run))}
    w(f"Runs: {len(ok)} ok, {len(failed)} failed"
      + (f", {len(lost)} with lost trace events" if lost else "") + ".\n\n")
    if lost:
        w("## Traces that lost events (trace-derived figures under-count)\n\n")
        w(f"{markdown(trace_loss.warning_line(lost))}\n\n")
        for label, n in sorted(lost.items()):
            w(f"- {code_span(label)}: {n} events lost\n")
        w("\n")
    disturbed = host_load.disturbed_runs(campaign.runs)
    if disturbed:
        w("## Runs disturbed by host load (latencies and durations may be inflated)\n\n")
        w(f"{markdown(host_load.warning_line(disturbed))}\n\n")
        w("".join(f"- {code_span(label)}: {markdown(why)}\n" for label, why in sorted(disturbed.items())) + "\n")
    if failed:
        w("## Failed runs (not used)\n\n")
        for run in failed:
            w(f"- {code_span(run.label)}: {markdown((run.error or 'no error text').splitlines()[0])}\n")
        w("\n")
    if trace.notes:
        w("## Trace notes (analyses not applied, damaged traces)\n\n")
        for note, runs in sorted(trace.notes.items()):
            w(f"- {markdown(note)} ({len(runs)} run{'s' if len(runs) != 1 else ''}: "
              f"{', '.join(code_span(r) for r in runs[:3])}{', ...' if len(runs) > 3 else ''})\n")
        w("\n")
    w("## Comparison\n\n")
    md = tables.render_markdown(cmp)
    w(md.replace("\n### ", "\n#### ").replace("### ", "#### ", 1) + "\n")
    w("Other formats: " + ", ".join(f"[{fmt}]({name})" for fmt, name in TABLE_FILES.items())
      + "; raw data: [metrics.csv](metrics.csv).\n\n")
    if figure_names:
        w("## Figures\n\n")
        if opts.html:
            w("Interactive: [figures.html](figures.html).\n\n")
        for name in figure_names:
            w(f"![{name}](figures/{name}.png)\n")
    return out.getvalue()


def campaign_metrics(campaign_dir: str | os.PathLike, *, traces: bool = True, use_cache: bool = True,
                     scheduler: str | None = None) -> pd.DataFrame:
    """The tidy metrics of a campaign's successful runs as the report tables them: the
    runs' own plus, with ``traces``, the trace-derived ones (``trace <name>``, cached per
    trace like the report's)."""
    campaign = read_campaign(campaign_dir)
    rows = _collect_traces(campaign, use_cache, scheduler).rows if traces else []
    return metrics_frame(campaign, pd.DataFrame(rows) if rows else None)


def _settled(opts: ReportOptions, campaign: Campaign) -> ReportOptions:
    """``opts`` with each unset statistics setting taken from the spec's ``report:`` section,
    else from :data:`DEFAULT_SETTINGS`."""
    stored = campaign.report_settings
    chosen = {key: getattr(opts, key) if getattr(opts, key) is not None else stored.get(key, default)
              for key, default in (("baseline", None), *DEFAULT_SETTINGS.items())}
    return replace(opts, **chosen)


def report_replace_refusal(path: str | os.PathLike) -> str | None:
    """Why a report may not be written at ``path`` (replacing what is there), ``None`` when it
    may: nothing is there, an empty directory, or a report lisa-ext wrote (its
    :data:`REPORT_MARKER`, or, older, its README.md, metrics.csv and comparison.csv)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return None
    why = never_removed(path)
    if why is not None:
        return why
    if path.is_symlink():
        return "is a symbolic link"
    if not path.is_dir():
        return "is a file"
    if CampaignStore(path).exists():
        return "is a campaign directory"
    if (path / REPORT_MARKER).is_file() or all((path / name).is_file() for name in _REPORT_FILES):
        return None
    if not any(path.iterdir()):
        return None
    return "is not empty and holds no report lisa-ext wrote"


def _check_report_place(final: Path) -> None:
    why = report_replace_refusal(final)
    if why is not None:
        raise UserError(f"{final}: the report does not replace it: it {why}; choose another --out "
                        "(a new directory or an earlier report)")


def _report_place(campaign: Campaign, opts: ReportOptions) -> Path:
    return Path(opts.out) if opts.out else campaign.root / REPORT_DIR


def build_report(campaign_dir: str | os.PathLike, opts: ReportOptions | None = None) -> Path:
    """Write ``campaign_dir/report/`` (or ``opts.out``) and return its path.

    :raises UserError: that place holds something other than a report (:func:`report_replace_refusal`).
    """
    opts = opts or ReportOptions()
    campaign = read_campaign(campaign_dir)
    _check_report_place(_report_place(campaign, opts))  # before the traces are analysed
    with tempfile.TemporaryDirectory(prefix="lisa-ext-report-") as scratch:
        return _build(campaign, opts, Path(scratch))


def _prefetch(campaign: Campaign, opts: ReportOptions, scratch: Path) -> figs.Prefetch:
    """Start drawing the figures that need no trace (the runs' own metrics) in another
    process, while this one analyses the traces (LISA's import alone takes seconds); not
    when every trace's findings are cached (nothing to overlap with)."""
    traced = [run.trace for run in campaign.ok_runs if run.trace is not None]
    if not opts.traces or (opts.jobs or os.cpu_count() or 1) < 2 or not traced or (
            opts.cache and all(report_cache.has_findings(t) for t in traced)):
        return figs.Prefetch(None)
    opts = _settled(opts, campaign)
    try:
        metrics = metrics_frame(campaign)
        present = [v for v in campaign.variants if v in set(metrics["variant"])]
        cmp = compare(metrics, opts.baseline or present[0], test=opts.test, mean=opts.mean,
                      alpha=opts.alpha, variants=present)
        specs = _figures(campaign, metrics, cmp, _TraceData([], {}, {}))
    except (UserError, ValueError, KeyError, IndexError):
        return figs.Prefetch(None)  # the report itself will say what is wrong
    return figs.prefetch_figures(specs, html=opts.html, use_cache=opts.cache, scratch=scratch)


def _build(campaign: Campaign, opts: ReportOptions, scratch: Path) -> Path:
    early = _prefetch(campaign, opts, scratch)
    try:
        return _write(campaign, opts, scratch, early)
    finally:
        early.wait()


def _write(campaign: Campaign, opts: ReportOptions, scratch: Path, early: figs.Prefetch) -> Path:
    """The report, while ``early`` may still be drawing the figures that need no trace."""
    trace = (_collect_traces(campaign, opts.cache, opts.scheduler) if opts.traces
             else _TraceData([], {}, {}))
    extra = pd.DataFrame(trace.rows) if trace.rows else None
    metrics = metrics_frame(campaign, extra)
    if metrics.empty:
        raise UserError(f"{campaign.root}: no successful run reported any metric")
    opts = _settled(opts, campaign)
    present = [v for v in campaign.variants if v in set(metrics["variant"])]
    baseline = opts.baseline or present[0]
    cmp = compare(metrics, baseline, test=opts.test, mean=opts.mean, alpha=opts.alpha,
                  variants=present)

    final = _report_place(campaign, opts)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        (tmp / "figures").mkdir(parents=True)
    except OSError as exc:
        raise UserError(f"{final}: cannot write the report there ({exc.strerror}); "
                        f"choose another place with --out") from None
    try:
        metrics.to_csv(tmp / "metrics.csv", index=False, float_format="%.12g",
                       lineterminator="\n")
        for fmt, name in TABLE_FILES.items():
            (tmp / name).write_text(tables.render(cmp, fmt), encoding="utf-8")
        found = _figures(campaign, metrics, cmp, trace)
        figs.render_figures(found, tmp / "figures",
                            html=tmp / "figures.html" if opts.html else None,
                            title=f"{campaign.name} figures", jobs=opts.jobs,
                            use_cache=opts.cache, scratch=scratch, beside=early)
        (tmp / "README.md").write_text(
            _readme(campaign, opts, baseline, cmp, trace, [f.name for f in found]),
            encoding="utf-8")
        (tmp / REPORT_MARKER).write_text("lisa-ext wrote this report: a later report may replace it\n",
                                         encoding="utf-8")
        _check_report_place(final)  # again: the place may have changed while the report was drawn
        if final.exists():
            old = final.parent / f".{final.name}.old-{os.getpid()}"
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old)
        else:
            tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
