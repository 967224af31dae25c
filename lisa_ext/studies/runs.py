"""Per-run trace analyses of a campaign, stacked into one frame: the one loop every study uses."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from lisa_ext.campaign.store.reader import read_campaign, traced_runs
from lisa_ext.errors import UserError
from lisa_ext.report.cache import cached_frame
from lisa_ext.trace import load_trace

__all__ = ["idle_state_names", "per_run_analysis"]


def per_run_analysis(campaign_dir: str | os.PathLike, analysis: str, method: str,
                     **kwargs: Any) -> pd.DataFrame:
    """``trace.ana.<analysis>.<method>(**kwargs)`` on every traced run, stacked.

    The result has the method's own columns (its index reset into columns) plus
    ``variant``, ``workload`` and ``iteration``. Runs whose trace lacks the events
    the analysis needs are skipped with a warning naming the run.
    """
    frames, skipped = [], {}
    for run in traced_runs(Path(campaign_dir))[1]:
        def compute(path=run.trace):
            return getattr(getattr(load_trace(path).ana, analysis), method)(**kwargs)

        try:
            # cached by trace content, code and options: a re-render skips LISA
            df = cached_frame(run.trace, (analysis, method, sorted(kwargs.items())), compute)
        except Exception as exc:  # LISA's MissingTraceEventError and friends
            warnings.warn(f"{run.label}: {analysis}.{method} skipped: {exc}")
            skipped.setdefault(str(exc), run.label)
            continue
        df = df.reset_index()
        df.insert(0, "iteration", run.iteration)
        df.insert(0, "workload", run.workload)
        df.insert(0, "variant", run.variant)
        frames.append(df)
    if not frames:
        # the reason is the useful part (a missing event, a decoder to rebuild): say it, not only
        # the warnings above, which a rendered page shows as noise after the error
        why = "; ".join(f"{label}: {reason}" for reason, label in list(skipped.items())[:2])
        raise UserError(f"{campaign_dir}: no traced run has what {analysis}.{method} needs"
                        + (f" ({why})" if why else " (no traced run)"))
    return pd.concat(frames, ignore_index=True)


def idle_state_names(campaign_dir: str | os.PathLike) -> dict[int, str]:
    """Idle state index -> the kernel's name for it (``WFI``, ``cpu-sleep``...), as the campaign's
    runs recorded them (``meta.json`` ``platform.idle-states``); empty for runs that did not."""
    return next((run.meta.idle_states for run in read_campaign(Path(campaign_dir)).ok_runs
                 if run.meta.idle_states), {})
