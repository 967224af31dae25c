"""RFC 002, "cpuidle: teo: Introduce optional util-awareness": our numbers in its tables.

The RFC (``../shared/rfcs/002_848c98aeabb03b00.txt``) reports, per governor (menu, teo,
teo + util-awareness) on a Pixel 6, the gmean over iterations of: the benchmark score,
the share of wake-ups whose idle state was too deep / too shallow (the ``cpu_idle_miss``
event, drivers/cpuidle/cpuidle.c ``cpuidle_reflect`` -> governors' ``reflect``), the
power and the task wake-up latency. Ours come from the same events on the platform the
campaign ran on; the score row stays empty (rt-app's bursty task set has none) and so
does the RFC's "shallow" column (every state but the shallowest disabled: not a variant
of this study).
"""

from __future__ import annotations

import os

import pandas as pd

from lisa_ext.report.build import campaign_metrics
from lisa_ext.studies.energy import df_run_power
from lisa_ext.stats import mean_of
from lisa_ext.studies.rfc import rows_from_metrics, variant_table
from lisa_ext.studies.runs import idle_state_names, per_run_analysis

__all__ = ["STUDY", "TABLE_ROWS", "df_idle_misses", "df_power", "rfc_tables"]

STUDY = "teo-util"

#: RFC row -> our metric (gmeans over iterations, as the RFC's)
TABLE_ROWS = {
    "gmean too deep %": "trace too deep",
    "gmean too shallow %": "trace too shallow",
    "gmean power usage [mW]": "power_mw",
    "gmean task wakeup latency": "trace wakeup latency mean",
}


def rfc_tables(campaign_dir: str | os.PathLike) -> dict[str, pd.DataFrame]:
    """``{"pcmark-web": frame}``: the RFC's PCMark table (the one with its power row) filled
    with ours; the rt-app bursty task set stands in for PCMark. A campaign without an
    energy meter leaves the power row empty."""
    values = rows_from_metrics(campaign_metrics(campaign_dir), TABLE_ROWS, mean="gmean")
    return {"pcmark-web": variant_table(STUDY, "pcmark-web", values)}


def df_power(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """gmean power per variant (mW): the meter's (the RFC's row) and the trace estimate beside
    it (:mod:`lisa_ext.studies.energy`), with their difference in %."""
    power = df_run_power(campaign_dir)
    if power.empty:
        return power
    gmean = power.groupby("variant", sort=False)[["meter_power_mw", "trace_power_mw"]].agg(
        lambda values: mean_of(values, "gmean"))
    gmean["estimate_vs_meter_pct"] = 100 * (gmean["trace_power_mw"] / gmean["meter_power_mw"] - 1)
    return gmean


def df_idle_misses(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """Per variant and idle state (by the kernel's name for it): wake-ups from that state, too-deep
    and too-shallow picks (``cpu_idle_miss``) and their share, summed over every traced run
    (``trace.ana.idle_miss.df_idle_miss_counts(by="state")``)."""
    df = per_run_analysis(campaign_dir, "idle_miss", "df_idle_miss_counts", by="state")
    names = idle_state_names(campaign_dir)
    df["idle state"] = [names.get(int(s), f"state {s}") for s in df["state"]]
    out = df.groupby(["variant", "idle state"], sort=False)[["wakeups", "too_deep", "too_shallow"]].sum()
    out["too deep (%)"] = 100.0 * out["too_deep"] / out["wakeups"].where(out["wakeups"] > 0)
    out["too shallow (%)"] = 100.0 * out["too_shallow"] / out["wakeups"].where(out["wakeups"] > 0)
    return out.rename(columns={"wakeups": "wake-ups", "too_deep": "too deep", "too_shallow": "too shallow"})
