"""The campaign a report is about: the store's runs plus trace-derived rows.

Runs are read by :func:`lisa_ext.campaign.store.reader.read_campaign`: failed
runs are kept aside (they are listed in the report, their partial metrics are
not used); hidden directories are runs still being written.
"""

from __future__ import annotations

import pandas as pd

from lisa_ext.campaign.store.metrics import METRICS_COLUMNS, validate_metrics
from lisa_ext.campaign.store.reader import Campaign

__all__ = ["metrics_frame"]


def metrics_frame(campaign: Campaign, extra: pd.DataFrame | None = None) -> pd.DataFrame:
    """The tidy metrics table of the campaign's successful runs
    (:meth:`Campaign.metrics_table`), plus ``extra`` rows (e.g. trace-derived
    metrics) in the same columns."""
    frame = campaign.metrics_table()
    if extra is not None and not extra.empty:
        frame = pd.concat([frame, extra[METRICS_COLUMNS]], ignore_index=True)
    return validate_metrics(frame, campaign.root)
