"""The eas study (``notebooks/eas.{yml,ipynb}``): energy-aware scheduling on vs off on the arm64 board.

No RFC of ours to reproduce: the comparison is EAS itself (kernel/sched/fair.c
``find_energy_efficient_cpu()``, merged in v5.0), switched at runtime with
``/proc/sys/kernel/sched_energy_aware`` on one kernel. :func:`eas_table` is laid out as the
RFCs' tables are (a column per variant, the change against the baseline in %, EAS off being the
kernel before the feature): the board's metered energy (per cluster too), where the tasks ran
and woke up (:mod:`lisa_ext.analysis.capacity_placement`), and the wake-up latency.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from lisa_ext.campaign.store import read_campaign
from lisa_ext.report.build import campaign_metrics
from lisa_ext.studies.rfc import rows_from_metrics

__all__ = ["BASELINE", "CHANGE_COLUMN", "STUDY", "TABLE_ROWS", "VARIANTS", "eas_table", "rtapp_tasks"]

STUDY = "eas"
#: variant -> its column in the table; the first is the baseline
VARIANTS = {"eas-off": "EAS off", "eas-on": "EAS on"}
BASELINE = "eas-off"
CHANGE_COLUMN = "EAS on vs off (%)"
#: row label -> metric (the meter's, the trace analyses' ``trace ...``)
TABLE_ROWS = {
    "energy [J]": "energy_j",
    "average power [mW]": "power_mw",
    "runtime on little CPUs [%]": "trace runtime on little %",
    "wake-ups on little CPUs [%]": "trace wakeups on little %",
    "wake-ups on little CPUs, not overutilized [%]": "trace wakeups on little when not overutilized %",
    "time overutilized [%]": "trace time overutilized %",
    "class migrations [1/s]": "trace class migrations per s",
    "wake-up latency mean [us]": "trace wakeup latency mean",
    "wake-up latency p99 [us]": "trace wakeup latency p99",
}


def _cluster_rows(metrics: pd.DataFrame) -> dict[str, str]:
    """``energy_pd<N>_j`` of the meter, one row per cluster (pd<first CPU>, little first)."""
    names = sorted({m for m in metrics["metric"] if m.startswith("energy_pd") and m.endswith("_j")},
                   key=lambda m: int(m[len("energy_pd"):-2]) if m[len("energy_pd"):-2].isdigit() else 0)
    return {f"energy of cluster {m[len('energy_'):-2]} [J]": m for m in names}


def eas_table(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """Mean over iterations per variant of :data:`TABLE_ROWS` (and each cluster's energy), with
    EAS on's change against EAS off in %. Rows no run measured are left out."""
    metrics = campaign_metrics(Path(campaign_dir))
    rows = dict(TABLE_ROWS)
    rows.update(_cluster_rows(metrics))
    values = rows_from_metrics(metrics, rows)
    table = pd.DataFrame(index=values.index)
    for variant, column in VARIANTS.items():
        table[column] = values[variant] if variant in values.columns else float("nan")
    base, new = table[VARIANTS[BASELINE]], table[VARIANTS["eas-on"]]
    table[CHANGE_COLUMN] = 100 * (new - base) / base.abs().where(base != 0)
    return table


def rtapp_tasks(campaign_dir: str | os.PathLike) -> list[str]:
    """The rt-app task names of the campaign's runs (the comm prefixes of its threads)."""
    names = set()
    for run in read_campaign(Path(campaign_dir)).ok_runs:
        options = run.meta.get("workload_options") or {}
        names.update(options.get("tasks") or {})
    return sorted(names)
