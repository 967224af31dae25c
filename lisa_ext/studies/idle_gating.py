"""Study 004, idle gating (``notebooks/idle-gating.{yml,ipynb}``): the RFC's four tables and its mechanism.

The RFC ("IDLE gating in presence of latency-sensitive tasks", Parth Shah, 2020) keeps the CPUs of
latency-sensitive tasks out of every idle state (kernel/sched/idle.c polls instead) and compares
schbench wake-up latency percentiles and pgbench latency / transactions, plus average power, for
the baseline, ``cpupower idle-set -D 10`` and the patch. Our port marks tasks by comm prefix
(kernels/patches/0004-...; :mod:`lisa_ext.analysis.idle_gating`).

* :func:`rfc_tables`: our numbers in the RFC's four table shapes (mean over iterations);
* :func:`df_energy`: the board's meter beside the trace estimate (``trace.ana.energy``), per run;
* :func:`df_idle_residency` / :func:`plot_idle_residency`: the mechanism, the share of idle time
  per state after marked tasks and after the others, per variant.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from lisa_ext.analysis.idle_gating import DEFAULT_PREFIXES
from lisa_ext.campaign.store import Campaign, Run, read_campaign
from lisa_ext.energy_model import model_from_dict
from lisa_ext.errors import UserError
from lisa_ext.report.cache import cached_frame
from lisa_ext.report.figures import export, residency_figure
from lisa_ext.rfc_numbers import RfcTable, load_rfc_numbers
from lisa_ext.trace import load_trace

__all__ = ["ENERGY_ROW", "ROW_METRICS", "STUDY", "df_energy", "df_idle_residency", "plot_idle_residency",
           "rfc_tables", "save_idle_residency_figure"]

STUDY = "idle-gating"
#: The RFC's energy row: average power in watts (its label says energy).
ENERGY_ROW = "Avg. Energy (Watts)"
#: RFC row label -> (our metric, factor to the RFC's unit), per workload kind
ROW_METRICS: dict[str, dict[str, tuple[str, float]]] = {
    "schbench": {"50": ("wakeup_lat_p50", 1.0), "90": ("wakeup_lat_p90", 1.0), "99": ("wakeup_lat_p99", 1.0),
                 "max": ("wakeup_lat_max", 1.0), ENERGY_ROW: ("power_mw", 1e-3)},
    "pgbench": {"latency avg. (ms)": ("latency_avg", 1.0), "latency stddev": ("latency_stddev", 1.0),
                "trans. completed": ("transactions", 1.0), ENERGY_ROW: ("power_mw", 1e-3)},
}


def _campaign(campaign_dir: str | os.PathLike) -> Campaign:
    return read_campaign(Path(campaign_dir))


def _mean_metrics(campaign: Campaign) -> pd.Series:
    """Mean over the iterations, indexed by (variant, workload, metric)."""
    metrics = campaign.metrics_table()
    return metrics.groupby(["variant", "workload", "metric"])["value"].mean()


def _table(table: RfcTable, means: pd.Series) -> pd.DataFrame:
    rows = ROW_METRICS[table.id.split("-")[0]]
    out = pd.DataFrame(np.nan, index=pd.Index([label for label, _, _ in table.rows], name=table.row_header or None),
                       columns=[c.name for c in table.columns])
    base_column = next(c.name for c in table.columns if c.variant == "baseline")
    previous = None
    for column in table.columns:
        if column.variant is not None:
            for label in out.index:
                metric, factor = rows[label]
                key = (column.variant, table.id, metric)
                out.loc[label, column.name] = means[key] * factor if key in means.index else np.nan
            previous = column.name
        elif previous is not None:  # "<previous> vs Baseline (%)"
            out[column.name] = 100.0 * (out[previous] - out[base_column]) / out[base_column]
    return out


def rfc_tables(campaign_dir: str | os.PathLike) -> dict[str, pd.DataFrame]:
    """{table id: our numbers in that RFC table's shape}: the workload of the same name as
    the table id, each variant in the column the RFC file maps to it, mean over iterations;
    the "vs Baseline (%)" columns from our own numbers; NaN where a run is missing."""
    means = _mean_metrics(_campaign(campaign_dir))
    return {table.id: _table(table, means) for table in load_rfc_numbers(STUDY).tables}


def _per_run(campaign: Campaign, parts: tuple, compute: Callable[[Run], pd.DataFrame]) -> pd.DataFrame:
    frames = []
    for run in campaign.ok_runs:
        if run.trace is None:
            continue
        df = cached_frame(run.trace, parts, lambda run=run: compute(run))
        df = df.reset_index(drop=isinstance(df.index, pd.RangeIndex))
        df.insert(0, "iteration", run.iteration)
        df.insert(0, "workload", run.workload)
        df.insert(0, "variant", run.variant)
        frames.append(df)
    if not frames:
        raise UserError(f"{campaign.root}: no traced run to analyse")
    return pd.concat(frames, ignore_index=True)


def _workload_window(trace: Any, comm: str) -> tuple[float, float] | None:
    """First to last ``sched_switch`` in or out of a task named ``comm*``: the benchmark's own
    span, close to the meter's window (its reads bracket the benchmark command)."""
    switch = trace.df_event("sched_switch")
    mask = switch["prev_comm"].astype(str).str.startswith(comm) | switch["next_comm"].astype(str).str.startswith(comm)
    times = switch.index[mask.to_numpy()]
    return (float(times[0]), float(times[-1])) if len(times) > 1 else None


def _trace_power(run: Run) -> pd.DataFrame:
    energy = run.meta.get("energy") or {}
    if "model" not in energy:
        return pd.DataFrame({"trace_mw": [np.nan], "window_s": [np.nan]})
    model = model_from_dict(energy["model"], f"{run.path / 'meta.json'}: energy.model")
    trace = load_trace(run.trace)
    figures = trace.ana.energy.summary(model, window=_workload_window(trace, run.meta.get("workload_kind", "")))
    start, end = figures["window_s"]
    return pd.DataFrame({"trace_mw": [figures["avg_power_mw"]], "window_s": [end - start]})


def df_energy(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """Average power per run, meter beside trace estimate.

    Columns ``variant``, ``workload``, ``iteration``, ``meter_mw`` (the meter's energy over the
    time between its two reads around the workload), ``meter_window_s`` (that time), ``trace_mw`` (``trace.ana.energy`` priced with
    the Energy Model stored in the run's meta.json, over the benchmark's span in the trace: first
    to last switch of a task named after the workload kind; NaN without a model), ``window_s``
    (that span) and ``diff_pct`` (trace vs meter).
    """
    campaign = _campaign(campaign_dir)
    df = _per_run(campaign, ("studies.idle_gating", "trace_power", 2), _trace_power)
    meters = {(r.variant, r.workload, r.iteration): r.meta.get("energy") or {} for r in campaign.ok_runs}
    keys = list(zip(df["variant"], df["workload"], df["iteration"]))
    df.insert(3, "meter_mw", [meters[k].get("avg_power_mw", np.nan) for k in keys])
    df.insert(4, "meter_window_s", [meters[k].get("duration_s", np.nan) for k in keys])
    df["diff_pct"] = 100.0 * (df["trace_mw"] - df["meter_mw"]) / df["meter_mw"]
    return df


def _residency(run: Run, comm: str) -> pd.DataFrame:
    return load_trace(run.trace).ana.idle_gating.df_state_residency(comm)


def df_idle_residency(campaign_dir: str | os.PathLike, comm: str = ",".join(DEFAULT_PREFIXES)) -> pd.DataFrame:
    """Share of idle time per idle state, after marked tasks and after the others.

    One row per (``variant``, ``workload``, ``after`` = "marked" | "other", ``state``) with
    ``periods`` (idle periods, summed over iterations) and ``pct`` (% of that group's idle time,
    over all iterations): from :meth:`IdleGatingAnalysis.df_state_residency` of every run.
    """
    df = _per_run(_campaign(campaign_dir), ("idle_gating", "df_state_residency", comm),
                  lambda run: _residency(run, comm))
    df["after"] = np.where(df["marked"], "marked", "other")
    grouped = df.groupby(["variant", "workload", "after", "state"], sort=False).agg(
        periods=("periods", "sum"), time_s=("time_s", "sum")).reset_index()
    totals = grouped.groupby(["variant", "workload", "after"])["time_s"].transform("sum")
    grouped["pct"] = 100.0 * grouped["time_s"] / totals.where(totals > 0)
    return grouped


def plot_idle_residency(residency: pd.DataFrame, workload: str, state_names: dict[int, str] | None = None) -> Any:
    """Two stacked-bar panels (after marked tasks | after the others): % of idle time per
    state and variant, for one workload of :func:`df_idle_residency`."""
    df = residency[residency["workload"] == workload].copy()
    if df.empty:
        raise UserError(f"no idle periods for workload {workload!r}; workloads: "
                        f"{', '.join(sorted(residency['workload'].unique()))}")
    names = state_names or {}
    df["state"] = [f"{s} {names[s]}" if s in names else str(s) for s in df["state"]]
    panels = [residency_figure(df[df["after"] == after][["variant", "state", "pct"]],
                               f"{workload}: idle after {label}", "idle state")
              for after, label in (("marked", "marked tasks"), ("other", "other tasks"))]
    return panels[0] + panels[1]


def save_idle_residency_figure(residency: pd.DataFrame, workload: str, out_dir: str | os.PathLike,
                               state_names: dict[int, str] | None = None) -> Path:
    """:func:`plot_idle_residency` written as ``out_dir/idle-residency-<workload>.png``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return export(plot_idle_residency(residency, workload, state_names),
                  out / f"idle-residency-{workload}", formats=("png",))[0]
