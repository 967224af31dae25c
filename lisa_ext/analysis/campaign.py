"""``lisa-ext analyse NAME --data DIR``: one analysis on every run of a campaign.

:func:`analyse_campaign` runs an analysis's ``summary()`` and
``summary_tables()`` on every successful traced run, one task per run through
:func:`lisa_ext.trace.cluster.map_traces`: serially, or as Dask tasks on a
local or remote cluster (``--scheduler``, ``$LISA_EXT_DASK_SCHEDULER``; see
docs/dask.md). Tasks carry the trace's path; results are small.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from lisa_ext.analysis.registry import by_cli_name
from lisa_ext.analysis import platform as plat
from lisa_ext.campaign.store.reader import traced_runs
from lisa_ext.compat import import_lisa
from lisa_ext.errors import UserError
from lisa_ext.trace import load_trace
from lisa_ext.trace.cluster import map_traces

__all__ = ["RunAnalysis", "analyse_campaign", "analyse_run"]


@dataclass
class RunAnalysis:
    """One run's result of :func:`analyse_campaign`."""

    label: str
    trace: str
    #: :meth:`~lisa_ext.analysis.base.StudyAnalysis.summary`
    summary: dict[str, Any]
    #: :meth:`~lisa_ext.analysis.base.StudyAnalysis.summary_tables`
    tables: list[tuple[str, pd.DataFrame]]


def analyse_run(path: str, cli_name: str, options: dict[str, Any],
                platform: plat.Platform | None = None) -> tuple[dict, list]:
    """``(summary, summary_tables)`` of analysis ``cli_name`` on one trace: the
    task of :func:`analyse_campaign`. ``platform`` (the user's, from
    ``--platform`` / ``--sysfs``) is completed by the trace's own, as
    ``lisa-ext analyse NAME TRACE`` does."""
    cls = by_cli_name(cli_name)
    trace = load_trace(path)
    options = dict(options)
    if "platform" in inspect.signature(cls.summary).parameters:
        options["platform"] = plat.merge(platform or plat.Platform(),
                                         plat.platform_from_plat_info(trace.plat_info))
    ana = getattr(trace.ana, cls.name)
    try:
        return ana.summary(**options), ana.summary_tables(**options)
    except import_lisa("lisa.trace").MissingTraceEventError as exc:
        raise UserError(f"{path}: {cli_name}: {exc}") from None


def analyse_campaign(cli_name: str, campaign_dir: str | os.PathLike,
                     options: dict[str, Any] | None = None, *,
                     platform: plat.Platform | None = None,
                     scheduler: str | None = None) -> list[RunAnalysis]:
    """Analysis ``cli_name`` on every successful traced run of a campaign, in
    the store's run order (runs without a trace are left out)."""
    by_cli_name(cli_name)  # a bad name fails here, not on every worker
    campaign, runs = traced_runs(campaign_dir)
    task = partial(analyse_run, cli_name=cli_name, options=dict(options or {}),
                   platform=platform)
    results = map_traces(task, [str(r.trace) for r in runs], scheduler=scheduler)
    return [RunAnalysis(r.label, str(Path(r.trace).relative_to(campaign.root)), summary, tables)
            for r, (summary, tables) in zip(runs, results)]
