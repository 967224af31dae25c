"""RFC 001, workqueue affinity scopes: fio on dm-crypt, our numbers in the RFC's three tables.

The RFC ("workqueue: Improve unbound workqueue execution locality", kernel/workqueue.c since 6.5)
runs fio on dm-crypt, whose ``kcryptd`` workqueue (drivers/md/dm-crypt.c, ``crypt_ctr()``) is
unbound, at three loads (HIGH / MED / LOW = campaign workloads ``high`` / ``med`` / ``low``) under
the affinity scopes SYSTEM, CACHE and CACHE+STRICT (variants ``system``, ``cache``,
``cache-strict``). Per table: bandwidth (fio read + write, MiB/s) and CPU utilisation
(``/proc/stat`` busy share over the fio window, :mod:`lisa_ext.campaign.cpu_util`) as mean and
sample standard deviation over the iterations, and bandwidth % vs SYSTEM. SYSTEM+LOCAL and
CACHE+LOCAL stay NaN: localization was dropped before merge, no kernel has it.

The mechanism: for every kcryptd work item of a traced run, was it executed inside the last-level
cache of the CPU that queued it (``trace.ana.wq_placement``: ``workqueue_queue_work`` CPU vs
``workqueue_execute_start`` CPU; LLC domains recorded with the run, ``meta.json`` ``platform.llc``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from lisa_ext.analysis.platform import Platform, parse_cpu_list
from lisa_ext.campaign.store.reader import Run, read_campaign
from lisa_ext.errors import UserError
from lisa_ext.report.cache import cached_frame
from lisa_ext.report.figures import export, grouped_bars_figure, load_holoviews
from lisa_ext.rfc_numbers import load_rfc_numbers
from lisa_ext.stats.summary import sample_sd
from lisa_ext.studies.rfc import SAMPLES, direction_sentence
from lisa_ext.trace import load_trace

__all__ = ["KCRYPTD_PREFIX", "LOADS", "SCOPES", "df_kcryptd_locality", "df_kcryptd_placement",
           "df_runs", "direction", "kcryptd_locality_figure", "plot_kcryptd_locality", "rfc_tables"]

STUDY = "wq-affinity"
#: RFC row label -> our variant (the RFC's +LOCAL rows have none)
SCOPES = {"SYSTEM": "system", "CACHE": "cache", "CACHE+STRICT": "cache-strict"}
#: RFC table id -> our workload
LOADS = {"high": "high", "med": "med", "low": "low"}
#: sysfs/trace name of dm-crypt's crypt workqueue: kcryptd-<major>:<minor>-<id> (not kcryptd_io-)
KCRYPTD_PREFIX = "kcryptd-"
_BW, _BW_SD, _UTIL, _UTIL_SD, _VS = ("Bandwidth (MiBps)", "Bandwidth sd", "CPU util (%)", "CPU util sd",
                                     "vs. SYSTEM BW (%)")


def df_runs(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """One row per finished run: ``variant``, ``workload``, ``iteration``, ``bandwidth_mibps``
    (fio ``read_bw`` + ``write_bw``, KiB/s / 1024) and ``cpu_util_pct`` (``cpu_util_total``)."""
    metrics = read_campaign(campaign_dir).metrics_table()
    wide = metrics.pivot_table(index=["variant", "workload", "iteration"], columns="metric",
                               values="value", aggfunc="first")
    missing = [m for m in ("read_bw", "write_bw", "cpu_util_total") if m not in wide.columns]
    if missing:
        raise UserError(f"{campaign_dir}: no {', '.join(missing)} metric: not a fio campaign "
                        "with CPU utilisation (lisa-ext study run wq-affinity)")
    out = pd.DataFrame({"bandwidth_mibps": (wide["read_bw"] + wide["write_bw"]) / 1024,
                        "cpu_util_pct": wide["cpu_util_total"]})
    return out.reset_index()


def rfc_tables(campaign_dir: str | os.PathLike) -> dict[str, pd.DataFrame]:
    """``{"high", "med", "low"}``: the RFC's table shape with our numbers (NaN for +LOCAL rows
    and for a scope or load this campaign did not run)."""
    runs = df_runs(campaign_dir)
    numbers = load_rfc_numbers(STUDY)
    tables = {}
    for table_id, workload in LOADS.items():
        shape = numbers.table(table_id).frame()
        ours = pd.DataFrame(np.nan, index=shape.index, columns=shape.columns)
        mine = runs[runs["workload"] == workload].groupby("variant")
        samples = {}
        for label, variant in SCOPES.items():
            if variant not in mine.groups:
                continue
            group = mine.get_group(variant)
            ours.loc[label, [_BW, _BW_SD, _UTIL, _UTIL_SD]] = [
                group["bandwidth_mibps"].mean(), sample_sd(group["bandwidth_mibps"]),
                group["cpu_util_pct"].mean(), sample_sd(group["cpu_util_pct"])]
            samples[(label, _BW)] = [float(v) for v in group["bandwidth_mibps"]]
        ours[_VS] = 100.0 * (ours[_BW] / ours.loc["SYSTEM", _BW] - 1.0)
        ours.attrs[SAMPLES] = samples
        tables[table_id] = ours
    return tables


def direction(table_id: str, ours: pd.DataFrame, row: str, *, tolerance_pct: float = 1.0) -> str:
    """One sentence: does ``row``'s bandwidth move against SYSTEM the way the RFC's does, judged on
    the confidence interval of our change (:func:`lisa_ext.studies.rfc.direction_sentence`, from
    the runs in ``ours.attrs["samples"]``)? The RFC's tables compare rows, not columns, hence not
    :func:`lisa_ext.studies.rfc.direction`."""
    theirs = float(load_rfc_numbers(STUDY).table(table_id).frame().loc[row, _VS])
    change = float(ours.loc[row, _VS])
    what = f"{table_id.upper()}, {row} vs SYSTEM bandwidth"
    if np.isnan(change):
        return f"{what}: no comparison (we have no {row} runs)."
    samples = ours.attrs.get(SAMPLES, {})
    return direction_sentence(what, theirs, change, samples.get(("SYSTEM", _BW), ()),
                              samples.get((row, _BW), ()), tolerance_pct=tolerance_pct)


def _platform(run: Run) -> Platform:
    llc = (run.meta.get("platform") or {}).get("llc") or []
    return Platform(llc=tuple(parse_cpu_list(cpus) for cpus in llc), source=str(run.meta.path))


def _placement(run: Run, trace: Path) -> pd.DataFrame:
    platform = _platform(run)
    if len(platform.llc) < 2:
        raise UserError(f"{run.meta.path}: the run records {len(platform.llc)} LLC domain(s) "
                        "(platform.llc); the study needs a target with at least two")

    def compute() -> pd.DataFrame:
        return load_trace(trace).ana.wq_placement.df_placement_stats(by="workqueue", platform=platform)

    return cached_frame(trace, ("wq_placement", "df_placement_stats", "workqueue",
                                [list(cpus) for cpus in platform.llc]), compute)


def df_kcryptd_placement(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """Per traced run, its kcryptd work items: ``variant``, ``workload``, ``iteration``,
    ``items``, ``same_llc_pct`` (executed in the queueing CPU's LLC domain), ``same_cpu_pct``
    and ``latency_p50_us`` (queue to start of execution)."""
    rows = []
    for run in read_campaign(campaign_dir).traced_runs():
        stats = _placement(run, run.trace)
        kcryptd = stats[stats.index.astype(str).str.startswith(KCRYPTD_PREFIX)]
        if kcryptd.empty:
            continue
        count = kcryptd["count"]
        rows.append({"variant": run.variant, "workload": run.workload, "iteration": run.iteration,
                     "items": int(count.sum()),
                     "same_llc_pct": 100.0 * np.average(kcryptd["same_llc_frac"], weights=count),
                     "same_cpu_pct": 100.0 * np.average(kcryptd["same_cpu_frac"], weights=count),
                     "latency_p50_us": 1e6 * float(kcryptd["lat_p50"].median())})
    if not rows:
        raise UserError(f"{campaign_dir}: no traced run has kcryptd work items "
                        "(trace workqueue:workqueue_queue_work and workqueue_execute_start)")
    return pd.DataFrame(rows)


def df_kcryptd_locality(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """% of kcryptd work items executed in the queueing CPU's LLC: index = the RFC's scope rows
    we ran, columns = the RFC's loads (HIGH / MED / LOW), all traced iterations pooled."""
    placement = df_kcryptd_placement(campaign_dir)
    placement["llc_items"] = placement["same_llc_pct"] * placement["items"] / 100.0
    sums = placement.groupby(["variant", "workload"])[["llc_items", "items"]].sum()
    pct = (100.0 * sums["llc_items"] / sums["items"]).unstack("workload")
    table = pd.DataFrame({table_id.upper(): pct.get(workload, pd.Series(dtype=float))
                          for table_id, workload in LOADS.items()})
    table = table.reindex([v for v in SCOPES.values() if v in table.index])
    table.index = pd.Index([label for label, v in SCOPES.items() if v in table.index], name="scope")
    return table


def plot_kcryptd_locality(campaign_dir: str | os.PathLike):
    """Bars of :func:`df_kcryptd_locality`: per scope, one bar per load."""
    hv = load_holoviews()
    table = df_kcryptd_locality(campaign_dir)
    tidy = table.rename_axis(columns="load").stack().rename("pct").reset_index()
    scope = hv.Dimension("scope", values=list(table.index))
    load = hv.Dimension("load", values=list(table.columns))
    return grouped_bars_figure(tidy, scope, load, hv.Dimension("pct", label="% of work items"),
                               "kcryptd work items executed in the queueing CPU's LLC").opts(ylim=(0, 100))


def kcryptd_locality_figure(campaign_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """:func:`plot_kcryptd_locality` written as ``out_dir/kcryptd-locality.png`` (and .svg)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return export(plot_kcryptd_locality(campaign_dir), out / "kcryptd-locality")[0]
