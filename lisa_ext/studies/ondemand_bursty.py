"""RFC 003, "cpufreq: governor: Be friendly towards latency-sensitive bursty workloads".

The RFC makes drivers/cpufreq/cpufreq_governor.c ``dbs_update()`` reuse the
previous window's load once after a wake-up from idle, so that ondemand does not
drop a bursty task's CPU to its lowest OPP for one sampling period after every
sleep. It compares without / with the patch on sleeping ebizzy (records/s at
10/20/40/60 % utilisation) and shows ``cpu_frequency`` + ``sched_switch``
excerpts around a sleep. Here (``notebooks/ondemand-bursty.yml``) the two
variants are our switch ``cpufreq_governor.copy_prev_load`` N / Y on 6.12.

* :func:`rfc_tables`: the RFC's records/s table from our runs;
* :func:`df_wakeups` / :func:`df_mechanism`: per wake-up from idle of the ebizzy
  CPU, the frequency the governor restarts it at and the time spent below the
  frequency of the sleep (:mod:`lisa_ext.analysis.wakeup_frequency`), and their
  medians / means per variant and utilisation;
* :func:`timeline_figure`: the RFC's excerpt as a timeline, both variants.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from lisa_ext.analysis.idle_wakeups import wakeups_from_idle
from lisa_ext.campaign.store.reader import Run, read_campaign
from lisa_ext.report.cache import cached_frame, code_digest
from lisa_ext.report.figures import FigureSpec, load_holoviews, render_figures
from lisa_ext.rfc_numbers import load_rfc_numbers
from lisa_ext.studies.rfc import concat_rows, rows_from_metrics, timing_text, variant_table
from lisa_ext.studies.runs import per_run_analysis
from lisa_ext.trace import load_trace

__all__ = ["CALIBRATION_TOLERANCE_PCT", "MECHANISM_COLUMNS", "MECHANISM_LABELS", "STUDY", "TABLE_ID",
           "df_calibration", "df_mechanism", "df_records", "df_wakeups", "direction_note", "mechanism_sentences",
           "rfc_tables", "timeline_figure", "timeline_frames", "timeline_page", "util_label", "what_is_real"]

STUDY = "ondemand-bursty"
TABLE_ID = "sleeping-ebizzy"
COMM = "ebizzy"
#: statistics of :func:`df_mechanism`, per variant and utilisation
MECHANISM_COLUMNS = ("wakeups", "sleep_ms_median", "restart_mhz_median", "restart_below_pct",
                     "below_ms_median", "below_ms_mean", "at_min_ms_median", "at_min_ms_mean")
#: what a page calls the columns of :func:`df_mechanism`
MECHANISM_LABELS = {"wakeups": "wake-ups from idle", "sleep_ms_median": "median sleep (ms)",
                    "restart_mhz_median": "median restart frequency (MHz)",
                    "restart_below_pct": "restarted below the pre-sleep frequency (%)",
                    "below_ms_median": "median time below it (ms)", "below_ms_mean": "mean time below it (ms)",
                    "at_min_ms_median": "median time at the lowest OPP (ms)",
                    "at_min_ms_mean": "mean time at the lowest OPP (ms)"}
#: a cell's utilisation more than this far (relative %) from its target is flagged
CALIBRATION_TOLERANCE_PCT = 10.0
_PCT = re.compile(r"(\d+)pct$")


def util_label(workload: str) -> str:
    """``ebizzy-40pct`` -> ``40%``, the RFC's row label."""
    m = _PCT.search(workload)
    if not m:
        raise ValueError(f"workload {workload!r} does not name a utilisation (expected NAME-<N>pct)")
    return f"{int(m.group(1))}%"


def df_records(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """Mean ``records_per_s`` and ``achieved_util_pct`` per variant and RFC row (``util``), with ``runs``."""
    metrics = read_campaign(campaign_dir).metrics_table()
    metrics = metrics[metrics["metric"].isin(["records_per_s", "achieved_util_pct"])].copy()
    metrics["util"] = metrics["workload"].map(util_label)
    wide = metrics.pivot_table(index=["variant", "util", "iteration"], columns="metric", values="value",
                               observed=True)
    out = wide.groupby(level=["variant", "util"]).agg(["mean", "count"])
    return pd.DataFrame({"records_per_s": out[("records_per_s", "mean")],
                         "achieved_util_pct": out[("achieved_util_pct", "mean")],
                         "runs": out[("records_per_s", "count")].astype(int)})


def df_calibration(campaign_dir: str | os.PathLike,
                   tolerance_pct: float = CALIBRATION_TOLERANCE_PCT) -> pd.DataFrame:
    """Per RFC row (``util``) and variant: the ``target`` utilisation (%), the one ebizzy
    ``achieved`` (mean over the runs, %), ``runs`` and ``calibration``: "on target", or how far
    short of (or above) the target it is when more than ``tolerance_pct`` % of the target away.
    A cell short of its target compares the governors at a lighter load than the RFC's row says."""
    records = df_records(campaign_dir)
    rows = []
    for (variant, util), row in records.iterrows():
        target = float(util.rstrip("%"))
        achieved = float(row["achieved_util_pct"])
        off = achieved - target
        verdict = ("on target" if abs(off) <= tolerance_pct * target / 100.0 else
                   f"{'short of' if off < 0 else 'above'} the target by {abs(off):.1f} points")
        rows.append({"util": util, "variant": variant, "target": target, "achieved": achieved,
                     "runs": int(row["runs"]), "calibration": verdict})
    order = [label for label, _, _ in load_rfc_numbers(STUDY).table(TABLE_ID).rows]
    out = pd.DataFrame(rows)
    out["_order"] = out["util"].map({u: i for i, u in enumerate(order)})
    return out.sort_values(["_order", "variant"], kind="stable").drop(columns="_order").set_index(["util", "variant"])


def rfc_tables(campaign_dir: str | os.PathLike) -> dict[str, pd.DataFrame]:
    """``{"sleeping-ebizzy": frame}``: the RFC's rows (10%..60%) and columns (Without patch, With
    patch, Difference (absolute), Difference (%)) from our mean records/s, with each cell's per-run
    values for the direction verdicts (:func:`lisa_ext.studies.rfc.direction`); NaN where we lack a
    cell."""
    metrics = read_campaign(campaign_dir).metrics_table()
    records = metrics[metrics["metric"] == "records_per_s"]
    values = concat_rows([rows_from_metrics(records, {util_label(w): "records_per_s"}, workload=w)
                          for w in dict.fromkeys(records["workload"])])
    table = variant_table(STUDY, TABLE_ID, values)
    without, with_, absolute = (c.name for c in load_rfc_numbers(STUDY).table(TABLE_ID).columns[:3])
    table[absolute] = table[with_] - table[without]
    return {TABLE_ID: table}


def _traced_runs(campaign_dir: str | os.PathLike) -> list[Run]:
    return read_campaign(campaign_dir).traced_runs()


def df_wakeups(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """Every ebizzy wake-up from idle of every traced run (``trace.ana.wakeup_frequency.df_wakeups``),
    with ``variant``, ``workload``, ``util`` and ``iteration``."""
    df = per_run_analysis(campaign_dir, "wakeup_frequency", "df_wakeups", comm=COMM)
    df.insert(2, "util", df["workload"].map(util_label))
    return df


def df_mechanism(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """Per variant and utilisation (:data:`MECHANISM_COLUMNS`): wake-ups from idle, median sleep
    (ms), median restart frequency (MHz), % of wake-ups restarted below the frequency of the sleep,
    median and mean ms below it and at the lowest OPP during the burst."""
    w = df_wakeups(campaign_dir)
    w = w.assign(sleep_ms=w["sleep_s"] * 1e3, restart_mhz=w["restart_freq_khz"] / 1e3,
                 below=100.0 * (w["restart_freq_khz"] < w["freq_at_sleep_khz"]),
                 below_ms=w["time_below_s"] * 1e3, at_min_ms=w["time_at_min_s"] * 1e3)
    g = w.groupby(["variant", "util"], sort=False)
    out = pd.DataFrame({
        "wakeups": g.size(),
        "sleep_ms_median": g["sleep_ms"].median(),
        "restart_mhz_median": g["restart_mhz"].median(),
        "restart_below_pct": g["below"].mean(),
        "below_ms_median": g["below_ms"].median(),
        "below_ms_mean": g["below_ms"].mean(),
        "at_min_ms_median": g["at_min_ms"].median(),
        "at_min_ms_mean": g["at_min_ms"].mean(),
    })
    order = [label for label, _, _ in load_rfc_numbers(STUDY).table(TABLE_ID).rows]
    variants = list(dict.fromkeys(w["variant"]))
    return out.reindex(pd.MultiIndex.from_product([variants, order], names=["variant", "util"])).dropna(how="all")


_UTILISATION_NOTE = (
    "The utilisation each cell reached (calibrated on the board, measured per run) is below, flagged where it "
    "is more than 10 % away from the row's target: such a cell compares the governors at another load than "
    "the RFC's row. What the board does show in any timing is the kernel decision the RFC's gain comes from: "
    "the next section.")


def direction_note(campaign_dir: str | os.PathLike) -> str:
    """What the records/s directions can say on the platform the campaign ran on (markdown)."""
    return timing_text(
        campaign_dir,
        decisions=(
            "**Why the direction cannot be read here:** on the virtual board with `decisions` timing an OPP is "
            "only a number the governor picks: the vCPU runs at the host's speed whatever it is, so records/s "
            "does not follow the frequency and the RFC's +1-2 % cannot appear; our differences are the "
            "run-to-run noise of a TCG guest on a shared host (`--board-timing faithful` pays each OPP's speed)."),
        faithful=(
            "**How to read the direction here:** on the virtual board with `faithful` timing a CPU at an OPP "
            "gets *f / f_max* of the work it gets at the top OPP (within 10 % at every OPP of this table, "
            "docs/vboard.md#calibration), so records/s follows the frequency the governor picks, as on the "
            "RFC's machine. The size is not the RFC's: this table's lowest OPP is 29 % of its highest (the "
            "RFC's, 50 %), and a TCG guest on a shared host is noisy, so the verdict is the confidence "
            "interval's, not the sign's."),
        board="**How to read the direction here:** on a real board records/s follows the frequency the governor "
              "picks.",
    ) + " " + _UTILISATION_NOTE


def what_is_real(campaign_dir: str | os.PathLike) -> str:
    """The page's "what is real" section for the platform the campaign ran on (markdown)."""
    speed = timing_text(
        campaign_dir,
        decisions=(
            "- **Not real:** the effect of a frequency on speed. With `decisions` timing an emulated OPP does not "
            "change the vCPU's speed, so records/s (the RFC's metric) does not follow the frequency; the RFC's "
            "+1-2 % cannot appear here, and the differences in our table are run-to-run noise of a TCG guest on "
            "a shared host. With `--board-timing faithful`, or on a Linux board whose cpufreq driver changes "
            "the clock (`--target` your board's config), the same campaign measures it."),
        faithful=(
            "- **Emulated:** the effect of a frequency on speed. With `faithful` timing a CPU below its top OPP "
            "is halted for (1 - f/f_max) of its busy time, in 1 ms slices, so records/s follows the frequency "
            "(within 10 % of f/f_max at every OPP, docs/vboard.md#calibration).\n"
            "- **Not real:** the size of the effect. The OPP table is RK3399's, not the RFC's machine's, and the "
            "clock underneath is QEMU's: run-to-run noise of a TCG guest on a shared host is larger than the "
            "RFC's +1-2 %."),
        board="- **Real:** the effect of a frequency on speed (the board's cpufreq driver changes the clock).",
    )
    return ("## What is real on the board and what is not\n\n"
            "- **Real:** the kernel's decisions. ondemand, its sampling, `dbs_update()` with and without copying "
            "the previous load, the OPP it requests, the idle states CPU 3 enters (emulated RK3399 states, real "
            "cpuidle governor decisions), the scheduler's switches; the utilisation ebizzy reaches (measured per "
            "run).\n" + speed)


def mechanism_sentences(mechanism: pd.DataFrame, without: str = "without", with_: str = "with") -> list[str]:
    """One sentence per utilisation of :func:`df_mechanism`: the restart frequency and the share
    of wake-ups restarted below the frequency of the sleep, without vs with, and whether that is
    the RFC's effect there (restarts lower for about a sampling period without the copy, none
    with it); a median over the utilisations would hide a cell where "with" restarts low too."""
    sentences = []
    for util in dict.fromkeys(mechanism.index.get_level_values("util")):
        try:
            n, y = mechanism.loc[(without, util)], mechanism.loc[(with_, util)]
        except KeyError:
            continue
        rfc_like = (n["restart_below_pct"] > y["restart_below_pct"] and n["below_ms_median"] > y["below_ms_median"]
                    and y["restart_below_pct"] < 50)
        verdict = ("the RFC's effect" if rfc_like else
                   "not the RFC's effect: with the copy, most wake-ups still restart lower")
        sentences.append(
            f"{util}: without the copy, wake-ups restarted at a median {n['restart_mhz_median']:.0f} MHz, "
            f"{n['restart_below_pct']:.0f} % of them below the frequency of the sleep, for a median "
            f"{n['below_ms_median']:.1f} ms; with it, at {y['restart_mhz_median']:.0f} MHz, "
            f"{y['restart_below_pct']:.0f} % below, {y['below_ms_median']:.1f} ms: {verdict}.")
    return sentences


def timeline_frames(campaign_dir: str | os.PathLike, variant: str, workload: str,
                    before_ms: float = 30.0, after_ms: float = 40.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Around the wake-up from idle in the middle of the first traced run of ``variant`` /
    ``workload``: the ebizzy CPU's frequency steps (``time`` ms from the wake-up, ``mhz``) and
    its ``sched_switch`` rows (``time``, ``prev_comm``, ``next_comm``, ``ebizzy`` 1 = running).
    Both are kept in the report's trace-frame cache: a re-render does not load the trace."""
    run = next((r for r in _traced_runs(campaign_dir) if (r.variant, r.workload) == (variant, workload)), None)
    if run is None:
        raise ValueError(f"{campaign_dir}: no traced run of {variant} / {workload}")
    computed: list[tuple[pd.DataFrame, pd.DataFrame]] = []

    def part(i: int) -> pd.DataFrame:  # one trace load for both frames
        if not computed:
            computed.append(_timeline_frames_of(Path(run.trace), before_ms, after_ms))
        return computed[0][i]

    parts = ("ondemand-bursty-timeline", code_digest([Path(__file__)]), before_ms, after_ms)
    return (cached_frame(Path(run.trace), (*parts, "steps"), lambda: part(0)),
            cached_frame(Path(run.trace), (*parts, "switches"), lambda: part(1)))


def _timeline_frames_of(trace_path: Path, before_ms: float,
                        after_ms: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    trace = load_trace(trace_path)
    switches, freq = trace.df_event("sched_switch"), trace.df_event("cpu_frequency")
    wakeups = wakeups_from_idle(switches, freq, COMM)
    # a wake-up in the middle of the run, past the ramp-up of the first bursts
    pick = wakeups.iloc[len(wakeups) // 2]
    woke, cpu = float(pick.name), int(pick["cpu"])
    lo, hi = woke - before_ms / 1e3, woke + after_ms / 1e3
    f = freq[freq["cpu_id"] == cpu]
    start = f[f.index <= lo].tail(1)
    f = pd.concat([start, f[(f.index > lo) & (f.index <= hi)]])
    steps = pd.DataFrame({"time": (np.r_[f.index.to_numpy(float)[:1].clip(lo), f.index.to_numpy(float)[1:], hi]
                                   - woke) * 1e3 if len(f) else [],
                          "mhz": np.r_[f["state"].to_numpy(float), f["state"].to_numpy(float)[-1:]] / 1e3
                          if len(f) else []})
    s = switches[(switches["__cpu"] == cpu) & (switches.index >= lo) & (switches.index <= hi)]
    sw = pd.DataFrame({"time": (s.index.to_numpy(float) - woke) * 1e3,
                       "prev_comm": s["prev_comm"].astype(str).to_numpy(),
                       "next_comm": s["next_comm"].astype(str).to_numpy(),
                       COMM: (s["next_comm"] == COMM).astype(int).to_numpy()})
    return steps, sw


def timeline_figure(frames: tuple[tuple[str, pd.DataFrame, pd.DataFrame], ...], workload: str):
    """The RFC's excerpt as a timeline (its sample is from the 40 % runs): per
    ``(variant, steps, switches)`` of :func:`timeline_frames`, the ebizzy CPU's frequency (MHz,
    steps) and when ebizzy runs (``sched_switch``), from 30 ms before to 40 ms after one wake-up
    from idle (time 0, dashed)."""
    hv = load_holoviews()
    panels = []
    for variant, steps, sw in frames:
        top = float(steps["mhz"].max()) if len(steps) else 1.0
        time = hv.Dimension("time", label="time from the wake-up", unit="ms")
        mhz = hv.Dimension("mhz", label="frequency", unit="MHz")
        freq = hv.Curve(steps, time, mhz, label="frequency (MHz)")
        running = hv.Curve(sw.assign(level=sw[COMM] * top * 0.25), time, hv.Dimension("level", label="frequency",
                                                                                       unit="MHz"),
                           label=f"{COMM} running (sched_switch)")
        wake = hv.VLine(0.0).opts(color="black", line_dash="dashed", backend="bokeh")
        overlay = (freq.opts(interpolation="steps-post", backend="bokeh")
                   * running.opts(interpolation="steps-post", backend="bokeh") * wake)
        panels.append(overlay.opts(title=f"{variant}: {workload}", xlabel="time from the wake-up (ms)",
                                   ylabel="frequency (MHz)", width=700, height=220, legend_position="right",
                                   backend="bokeh"))
    return hv.Layout(panels).cols(1)


def timeline_page(campaign_dir: str | os.PathLike, out_dir: str | os.PathLike,
                  workload: str = "ebizzy-40pct", variants: tuple[str, ...] = ("without", "with")) -> Path:
    """:func:`timeline_figure` as a self-contained interactive page ``out_dir/timeline.html``;
    frames and page come from the report's caches when the traces and this code are unchanged."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frames = tuple((variant, *timeline_frames(campaign_dir, variant, workload)) for variant in variants)
    spec = FigureSpec("timeline", timeline_figure, (frames, workload))
    page = out / "timeline.html"
    render_figures([spec], out, html=page, title=f"{STUDY}: frequency around a wake-up, {workload}", formats=())
    return page
