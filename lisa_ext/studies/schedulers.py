"""Which scheduler ran each run of a campaign: a page's proof that a BPF scheduler (sched_ext)
variant was scheduled by its scheduler, and a baseline by the kernel's own.

The runner records in each run's ``meta.json``, under ``sched_ext``, the scheduler it loaded (name,
crate version, arguments), the ops name the kernel reported while it ran, the state after the
workload and the kernel's reason for disabling it, or ``{state: disabled}`` for a run without one
(:mod:`lisa_ext.campaign.sched_ext`). :func:`df_schedulers` gathers those records per variant and
workload; :func:`schedulers_table` is the same for a page.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import pandas as pd

from lisa_ext.campaign.store.reader import read_campaign
from lisa_ext.report.readable import readable_table

__all__ = ["KERNEL_SCHEDULER", "SCHEDULER_COLUMNS", "df_schedulers", "scheduler_name", "schedulers_table"]

#: what a run without a BPF scheduler was scheduled by
KERNEL_SCHEDULER = "the kernel's own (no BPF scheduler)"
#: Columns of :func:`df_schedulers`.
SCHEDULER_COLUMNS = ("variant", "workload", "scheduler", "ops", "runs", "to_the_end", "exit_reason")


def scheduler_name(record: Mapping[str, Any] | None) -> str:
    """A run's scheduler as a reader names it: ``scx_simple``, ``scx_bpfland 1.1.4 -s 5000``, or
    :data:`KERNEL_SCHEDULER` when the run recorded none."""
    if not record or not record.get("scheduler"):
        return KERNEL_SCHEDULER
    words = [str(record["scheduler"])]
    if record.get("version"):
        words.append(str(record["version"]))
    words += [str(arg) for arg in record.get("args") or ()]
    return " ".join(words)


def _ran_to_the_end(record: Mapping[str, Any] | None, ok: bool) -> bool:
    """Whether the run's scheduler was the one scheduling from before to after its workload."""
    if not record or not record.get("scheduler"):
        return ok and (record or {}).get("state", "disabled") == "disabled"
    return ok and record.get("state") == "enabled" and record.get("state_after") == "enabled"


def _joined(values: pd.Series) -> str | None:
    """The distinct non-empty values of a column, in order, as one cell (``None``: none, which a
    page shows as empty)."""
    return "; ".join(dict.fromkeys(str(v) for v in values if v not in (None, "") and not pd.isna(v))) or None


def df_schedulers(campaign_dir: str | os.PathLike) -> pd.DataFrame:
    """Per variant and workload (the campaign's order): the ``scheduler``, the ``ops`` names the
    kernel ran, the ``runs``, those whose scheduler ran ``to_the_end`` of the workload (a baseline
    run: with no BPF scheduler loaded), and the kernel's ``exit_reason`` for disabling it."""
    rows = []
    for run in read_campaign(campaign_dir).runs:
        record = run.meta.get("sched_ext")
        record = record if isinstance(record, Mapping) else None
        rows.append({"variant": run.variant, "workload": run.workload, "scheduler": scheduler_name(record),
                     "ops": (record or {}).get("ops"), "runs": 1, "to_the_end": _ran_to_the_end(record, run.ok),
                     "exit_reason": (record or {}).get("exit_reason")})
    if not rows:
        return pd.DataFrame(columns=list(SCHEDULER_COLUMNS))
    df = pd.DataFrame(rows)
    return df.groupby(["variant", "workload"], sort=False).agg(
        scheduler=("scheduler", _joined), ops=("ops", _joined), runs=("runs", "sum"),
        to_the_end=("to_the_end", "sum"), exit_reason=("exit_reason", _joined)).reset_index()[list(SCHEDULER_COLUMNS)]


def schedulers_table(campaign_dir: str | os.PathLike):
    """:func:`df_schedulers` for a page (:func:`lisa_ext.report.readable.readable_table` escapes
    what the target reported)."""
    labels = {"variant": "Variant", "workload": "Workload", "scheduler": "Scheduler",
              "ops": "Ops name the kernel ran", "runs": "Runs", "to_the_end": "Scheduled by it to the end",
              "exit_reason": "Kernel's reason at its exit"}
    return readable_table(df_schedulers(campaign_dir), labels=labels, index=["variant", "workload"])
