"""RFC 000, "cpufreq: cpuidle: Remove iowait behaviour": our numbers in its tables.

The RFC (``../shared/rfcs/000_58751f302850aa96.txt``) compares menu and teo with
schedutil's iowait boost on and off (kernel/sched/cpufreq_schedutil.c
``sugov_iowait_boost``): fio psync 4k random-read IOPS, three runs per variant on an
RK3399 and on an M1 Pro, and mmtests' pgbench (Hmean transactions per client count).
Ours: the same fio job on the board (RK3399 idle states and OPPs emulated) with
iteration *k* as the RFC's "run *k*", and pgbench's read-write script at the client
counts the board's four vCPUs allow (1 and 4; the RFC's 7, 12 and 16 stay empty).
"""

from __future__ import annotations

import os

import pandas as pd

from lisa_ext.report.build import campaign_metrics
from lisa_ext.rfc_numbers import load_rfc_numbers
from lisa_ext.studies.rfc import concat_rows, rows_from_metrics, timing_text, variant_table
from lisa_ext.studies.runs import per_run_analysis

__all__ = ["FIO_WORKLOAD", "PGBENCH_WORKLOADS", "STUDY", "df_wakeup_frequency", "fio_direction_note", "rfc_tables"]

STUDY = "iowait-boost"
FIO_WORKLOAD = "fio-psync-randread"
#: RFC row ("Hmean <clients>") -> our pgbench workload
PGBENCH_WORKLOADS = {"Hmean 1": "pgbench-rw-c1", "Hmean 4": "pgbench-rw-c4"}


def _fio_runs(metrics: pd.DataFrame) -> pd.DataFrame:
    """The RFC's RK3399 table: one row per variant, IOPS of run 1, 2, 3 (our iterations 0, 1, 2)."""
    table = load_rfc_numbers(STUDY).table("fio-rk3399")
    iops = metrics[(metrics["workload"] == FIO_WORKLOAD) & (metrics["metric"] == "read_iops")]
    out = pd.DataFrame(index=table.frame().index, columns=[c.name for c in table.columns], dtype="float64")
    for label, variant in zip(out.index, table.row_variants):
        runs = iops[iops["variant"] == variant].set_index("iteration")["value"]
        for k, column in enumerate(out.columns):
            if k in runs.index:
                out.loc[label, column] = float(runs[k])
    return out


def _pgbench(metrics: pd.DataFrame) -> pd.DataFrame:
    values = concat_rows([rows_from_metrics(metrics, {row: "tps"}, mean="hmean", workload=workload)
                          for row, workload in PGBENCH_WORKLOADS.items()])
    return variant_table(STUDY, "mmtests-pgbench", values)


def rfc_tables(campaign_dir: str | os.PathLike) -> dict[str, pd.DataFrame]:
    """``{"fio-rk3399": ..., "mmtests-pgbench": ...}`` filled with ours."""
    metrics = campaign_metrics(campaign_dir, traces=False)
    return {"fio-rk3399": _fio_runs(metrics), "mmtests-pgbench": _pgbench(metrics)}


def df_wakeup_frequency(campaign_dir: str | os.PathLike, window_ms: float = 4.0) -> pd.DataFrame:
    """The mechanism: per variant (index), the mean frequency (MHz) in the ``window_ms`` after
    wake-ups from an iowait sleep and after the other wake-ups, and how many of each, over
    every traced run (``trace.ana.iowait_boost.df_wakeup_frequency_summary``)."""
    summary = per_run_analysis(campaign_dir, "iowait_boost", "df_wakeup_frequency_summary", window_ms=window_ms)
    summary["kind"] = summary["after_iowait"].map({True: "after iowait", False: "after other wake-ups"})
    g = summary.groupby(["variant", "kind"], sort=False)
    out = pd.DataFrame({"mhz": g["mean_freq_khz"].mean() / 1000.0, "wakeups": g["wakeups"].sum()}).unstack("kind")
    out.columns = [f"{kind}: {'mean frequency (MHz)' if what == 'mhz' else 'wake-ups'}" for what, kind in out.columns]
    return out[sorted(out.columns, key=lambda c: (not c.startswith("after iowait"), "wake-ups" in c))]


def fio_direction_note(campaign_dir: str | os.PathLike) -> str:
    """What the fio table's IOPS can say on the platform the campaign ran on (markdown)."""
    throttle = ("the scratch disk is throttled to 500 IOPS, so every variant reads at the disk's rate (a read's "
                "2 ms slot outlasts its CPU work at the OPPs the governors picked, measured on the faithful board)")
    return timing_text(
        campaign_dir,
        decisions=f"The RFC's direction (IOPS drop without the boost) cannot show here: an emulated OPP does "
                  f"not change the vCPU's speed with `decisions` timing, and {throttle}.",
        faithful=f"The RFC's direction (IOPS drop without the boost) cannot show here: `faithful` timing makes a "
                 f"low OPP slow the vCPU, but {throttle}.",
        board="On a real board the IOPS are the hardware's: a CPU slowed by a low OPP can lower them, as in "
              "the RFC.",
    ) + " The kernel decision the RFC's effect comes from is below: the frequency after iowait wake-ups."
