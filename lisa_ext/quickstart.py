"""``lisa-ext quickstart``: a short real campaign on this machine, reported as one HTML page.

What it does, in order:

1. preflight: root, tracefs (mounted here when missing), trace-cmd / fio / rt-app
   installed; anything missing is reported as one sentence saying how to fix it;
2. runs ``notebooks/quickstart.yml`` into ``data/quickstart/`` (finished runs
   from an earlier invocation are kept, as with ``campaign run --resume``);
3. executes ``notebooks/quickstart.ipynb`` with papermill and exports it with
   nbconvert to ``out/quickstart.html``, the figure inline as SVG so the page
   works offline.

The notebook only holds narrative and parameters: the tables and the figure come
from the functions below (:func:`campaign_overview`, :func:`per_run_table`, :func:`workloads`,
:func:`variant_summary`, :func:`plot_key_metrics`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd

from lisa_ext.campaign.runner import SpecChanged, run_campaign
from lisa_ext.campaign.spec import load_spec
from lisa_ext.campaign.store.reader import metrics_table, read_campaign
from lisa_ext.campaign.store.writer import CampaignStore
from lisa_ext.errors import UserError
from lisa_ext.report.readable import metric_label, time_scale
from lisa_ext.stats import compare
from lisa_ext.study import check_page_outputs, execute_notebook
from lisa_ext.workbench import campaign_dir, output_dir, workbench_path

__all__ = ["KEY_METRICS", "campaign_overview", "per_run_table", "plot_key_metrics", "preflight", "register",
           "run_quickstart", "significance", "variant_summary", "workloads"]

TRACEFS = "/sys/kernel/tracing"

#: metrics of the quickstart workloads shown in the summary and the figure (those a campaign has):
#: fio's, the latency-sensitive rt-app task's of the quickstart ("tick") and of older campaigns
KEY_METRICS = ("read_iops", "read_clat_mean", "read_clat_p99", "tick_wu_lat_mean", "tick_wu_lat_p99",
               "tick_slack_p5", "medium_perf_index_mean", "small_perf_index_mean", "medium_wu_lat_mean")


# -- preflight ------------------------------------------------------------------

def preflight(echo=print) -> None:
    """Check what a local campaign needs; raise UserError with one sentence if something is missing."""
    if os.geteuid() != 0:
        raise UserError("the quickstart needs root, because it writes sysfs knobs and records "
                        "kernel traces: run it again as root (e.g. `sudo make run`)")
    missing = [tool for tool in ("trace-cmd", "fio", "rt-app") if shutil.which(tool) is None]
    if missing:
        raise UserError(f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: "
                        "run `bash scripts/install-system-packages.sh` as root")
    if not os.path.isdir(f"{TRACEFS}/instances"):
        proc = subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS],
                              capture_output=True, text=True)
        if proc.returncode != 0 or not os.path.isdir(f"{TRACEFS}/instances"):
            raise UserError(f"tracefs is not mounted at {TRACEFS} and mounting it failed "
                            f"({proc.stderr.strip() or 'no instances directory'}): this kernel needs "
                            "CONFIG_FTRACE; mount it with `mount -t tracefs nodev /sys/kernel/tracing`")
        echo(f"tracefs was not mounted: mounted it at {TRACEFS}")


# -- the notebook's computations ------------------------------------------------------

def campaign_overview(campaign_dir: str | os.PathLike):
    """One row per (variant, workload): runs ok/failed, knobs read back, kernel, trace size."""
    rows = []
    for run in read_campaign(campaign_dir, allow_empty=True).runs:
        trace = run.trace
        # whole paths: two policies' or modules' knobs of one name are two knobs
        knobs = ", ".join(f"{p}={k.get('read_back')}" for p, k in run.meta.knobs.items())
        rows.append({
            "variant": run.variant, "workload": run.workload,
            "ok": run.ok, "knobs read back": knobs,
            "kernel": run.meta.kernel_release,
            "run s": run.meta.duration_s,
            "trace MB": trace.stat().st_size / 1e6 if trace is not None else 0.0,
        })
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    return (df.groupby(["variant", "workload"], sort=False)
              .agg(runs=("ok", "size"), ok=("ok", "sum"), knobs=("knobs read back", "first"),
                   kernel=("kernel", "first"), mean_run_s=("run s", "mean"),
                   trace_MB=("trace MB", "sum"))
              .reset_index())


def per_run_table(campaign_dir: str | os.PathLike, workload: str, metrics=None):
    """The per-run metrics of one workload: one row per run, one column per metric (with unit).

    Failed runs are left out, as in the report (:func:`lisa_ext.campaign.store.reader.metrics_table`).
    ``metrics`` restricts the columns (default: every metric the workload reports).
    """
    df = metrics_table(campaign_dir)
    df = df[df["workload"] == workload]
    if metrics is not None:
        df = df[df["metric"].isin(metrics)]
    order = list(dict.fromkeys(df["metric"] + " [" + df["unit"] + "]"))
    df = df.assign(column=df["metric"] + " [" + df["unit"] + "]")
    table = df.pivot_table(index=["variant", "iteration"], columns="column",
                           values="value", aggfunc="first")
    table = table[[c for c in order if c in table.columns]]
    table.columns.name = None
    return table.round(3)


def workloads(campaign_dir: str | os.PathLike) -> list[str]:
    """The workloads of a campaign directory, in spec order."""
    spec = load_spec(CampaignStore(campaign_dir).spec_copy, check_files=False)
    return [w.name for w in spec.workloads]


def variant_summary(campaign_dir: str | os.PathLike, metrics=KEY_METRICS):
    """Median and min-max over iterations, per workload, metric and variant."""
    df = metrics_table(campaign_dir)
    df = df[df["metric"].isin(metrics)]
    g = df.groupby(["workload", "metric", "unit", "lower_is_better", "variant"], sort=False)["value"]
    out = g.agg(["count", "median", "min", "max"]).reset_index()
    return out.round(3)


def significance(campaign_dir: str | os.PathLike, metrics=KEY_METRICS):
    """The key metrics of each variant against the first, with Welch's t test (``lisa-ext
    compare``'s statistics): mean, % change, p-value and whether it is significant at 5 %."""
    df = metrics_table(campaign_dir)
    cmp = compare(df[df["metric"].isin(metrics)], baseline=list(dict.fromkeys(df["variant"]))[0])
    cmp = cmp[~cmp["is_baseline"]]
    return cmp[["workload", "metric", "unit", "variant", "n", "mean", "baseline_mean", "pct_change",
                "p_value", "significant"]].round(4).reset_index(drop=True)


def plot_key_metrics(campaign_dir: str | os.PathLike, metrics=KEY_METRICS):
    """One panel per key metric: each iteration as a dot, the median as a bar, per variant."""
    # deferred: matplotlib (~1 s) only when a figure is drawn
    import matplotlib
    import matplotlib.pyplot as plt

    df = metrics_table(campaign_dir)
    df = df[df["metric"].isin(metrics)]
    panels = [m for m in metrics if m in set(df["metric"])]
    if not panels:
        raise UserError(f"{campaign_dir} has no run with any of the metrics {', '.join(metrics)}")
    variants = list(dict.fromkeys(df["variant"]))
    colors = matplotlib.colormaps["tab10"].colors
    ncols = min(3, len(panels))
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax, metric in zip(axes.flat, panels):
        sub = df[df["metric"] == metric]
        # 200000 us reads as 200 ms: the panel's unit follows its values
        factor, unit = time_scale(sub["value"], sub["unit"].iloc[0])
        sub = sub.assign(value=sub["value"] * factor)
        for i, variant in enumerate(variants):
            values = sub[sub["variant"] == variant]["value"]
            if values.empty:
                continue
            ax.bar(i, values.median(), color=colors[i % 10], alpha=0.35, width=0.6)
            ax.scatter([i] * len(values), values, color=colors[i % 10], zorder=3, s=18)
        better = "lower" if sub["lower_is_better"].iloc[0] else "higher"
        ax.set_title(f"{sub['workload'].iloc[0]}: {metric_label(metric)}", fontsize=9)
        ax.set_ylabel(f"{unit} ({better} is better)", fontsize=8)
        ax.set_xticks(range(len(variants)), variants)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


# -- the command ----------------------------------------------------------------

def run_quickstart(campaign_dir: Path, out_html: Path, *, fresh: bool = False,
                   progress: bool = True, echo=print) -> Path:
    check_page_outputs(out_html)  # before anything runs, not after the campaign
    if fresh:
        CampaignStore(campaign_dir).check_removable()
    preflight(echo)
    spec = load_spec(workbench_path("notebooks", "quickstart.yml"))
    if not fresh and CampaignStore(campaign_dir).has_runs():
        echo(f"keeping finished runs in {campaign_dir} (--fresh starts over)")
    try:
        summary = run_campaign(spec, campaign_dir, resume=True, fresh=fresh, progress=progress)
    except SpecChanged:
        raise UserError(f"{campaign_dir} holds runs of an older quickstart spec: "
                        "run `lisa-ext quickstart --fresh` to start over") from None
    echo(summary.line())
    echo("executing notebooks/quickstart.ipynb ...")

    return execute_notebook(workbench_path("notebooks", "quickstart.ipynb"), out_html, {"campaign_dir": str(campaign_dir.resolve())})


def _handler(args: argparse.Namespace) -> int:
    campaign_dir = Path(args.data)
    out = Path(args.out)
    html = run_quickstart(campaign_dir, out, fresh=args.fresh, progress=not args.no_progress)
    print(f"quickstart report: {html.resolve()}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("quickstart", help="run the quickstart study on this machine",
                              description="Run the quickstart campaign on this machine (resuming "
                                          "finished runs), then execute notebooks/quickstart.ipynb "
                                          "into an HTML report.")
    p.add_argument("--data", metavar="DIR", default=str(campaign_dir("quickstart")),
                   help="campaign directory (default: data/quickstart)")
    p.add_argument("-o", "--out", metavar="HTML", default=str(output_dir() / "out" / "quickstart.html"),
                   help="HTML report (default: out/quickstart.html)")
    p.add_argument("--fresh", action="store_true", help="discard earlier runs and start over")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_handler)

