"""The eas study (``notebooks/eas.{yml,ipynb}``): energy-aware scheduling on vs off on the arm64 board.

No RFC of ours to reproduce: the comparison is EAS itself (kernel/sched/fair.c
``find_energy_efficient_cpu()``, merged in v5.0), switched at runtime with
``/proc/sys/kernel/sched_energy_aware`` on one kernel. :func:`eas_table` is laid out as the
RFCs' tables are (a column per variant, the change against the baseline in %, EAS off being the
kernel before the feature): the board's metered energy (per cluster too), where the rt-app tasks
ran and woke up (:mod:`lisa_ext.analysis.capacity_placement`, over the tasks' own window: under
TCG the runner's SSH commands around the workload cost the board seconds of CPU), and rt-app's own
wake-up latency.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from lisa_ext.campaign.store.reader import read_campaign
from lisa_ext.report.build import campaign_metrics
from lisa_ext.studies.rfc import rows_from_metrics
from lisa_ext.studies.runs import per_run_analysis

__all__ = ["BASELINE", "CHANGE_COLUMN", "METER_ROWS", "PLACEMENT_ROWS", "STUDY", "VARIANTS", "df_placement",
           "eas_table", "rtapp_tasks"]

STUDY = "eas"
#: variant -> its column in the table; the first is the baseline
VARIANTS = {"eas-off": "EAS off", "eas-on": "EAS on"}
BASELINE = "eas-off"
CHANGE_COLUMN = "EAS on vs off (%)"
#: row label -> the meter's metric (read around the workload only)
METER_ROWS = {
    "energy [J]": "energy_j",
    "average power [mW]": "power_mw",
}
#: row label -> column of CapacityPlacementAnalysis.df_placement_summary, for the rt-app tasks
PLACEMENT_ROWS = {
    "rt-app runtime on little CPUs [%]": "runtime_little_pct",
    "rt-app wake-ups on little CPUs [%]": "wakeups_little_pct",
    "rt-app wake-ups placed by EAS (not overutilized)": "wakeups_not_overutilized",
    "of which on little CPUs [%]": "wakeups_little_not_overutilized_pct",
    "time overutilized [%]": "overutilized_pct",
    "rt-app class migrations [1/s]": "class_migrations_per_s",
}


def rtapp_tasks(campaign_dir: str | os.PathLike) -> list[str]:
    """The rt-app task names of the campaign's runs (the comm prefixes of its threads)."""
    names = set()
    for run in read_campaign(Path(campaign_dir)).ok_runs:
        options = run.meta.get("workload_options") or {}
        names.update(options.get("tasks") or {})
    return sorted(names)


def df_placement(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """Per run, where the rt-app tasks ran and woke up
    (:meth:`~lisa_ext.analysis.capacity_placement.CapacityPlacementAnalysis.df_placement_summary`
    over their own window: the runner's own commands before and after are left out)."""
    return per_run_analysis(campaign_dir, "capacity_placement", "df_placement_summary",
                            comm=tuple(rtapp_tasks(campaign_dir)))


def _cluster_rows(metrics: pd.DataFrame) -> dict[str, str]:
    """``energy_pd<N>_j`` of the meter, one row per cluster (pd<first CPU>, little first)."""
    names = sorted({m for m in metrics["metric"] if m.startswith("energy_pd") and m.endswith("_j")},
                   key=lambda m: int(m[len("energy_pd"):-2]) if m[len("energy_pd"):-2].isdigit() else 0)
    return {f"energy of cluster {m[len('energy_'):-2]} [J]": m for m in names}


def _latency_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    """rt-app's own wake-up latency (its log's ``wu_lat``), mean over the tasks, per run."""
    lat = metrics[metrics["metric"].str.endswith("_wu_lat_mean") | metrics["metric"].str.endswith("_wu_lat_p99")]
    lat = lat.assign(row=lat["metric"].str.endswith("_mean").map({True: "rt-app wake-up latency mean [us]",
                                                                  False: "rt-app wake-up latency p99 [us]"}))
    return lat.groupby(["row", "variant", "iteration"], sort=False)["value"].mean().reset_index()


def eas_table(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """Means over iterations per variant: the meter's energy and power (total and per cluster),
    the rt-app tasks' placement (:func:`df_placement`) and wake-up latency, with EAS on's change
    against EAS off in %. Rows no run measured are left out."""
    metrics = campaign_metrics(Path(campaign_dir), traces=False)
    rows = {**METER_ROWS, **_cluster_rows(metrics)}
    values = rows_from_metrics(metrics, rows)
    placement = df_placement(campaign_dir).groupby("variant", sort=False).mean(numeric_only=True)
    for label, column in PLACEMENT_ROWS.items():
        values.loc[label] = placement[column].reindex(values.columns if len(values.columns) else placement.index)
    latency = _latency_rows(metrics).groupby(["row", "variant"], sort=False)["value"].mean().unstack("variant")
    values = pd.concat([values, latency]).dropna(how="all")
    table = pd.DataFrame(index=values.index)
    for variant, column in VARIANTS.items():
        table[column] = values[variant] if variant in values.columns else float("nan")
    base, new = table[VARIANTS[BASELINE]], table[VARIANTS["eas-on"]]
    table[CHANGE_COLUMN] = 100 * (new - base) / base.abs().where(base != 0)
    return table
