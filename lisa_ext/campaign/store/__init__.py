"""The campaign store: where runs live on disk and how they are read back.

The bottom of :mod:`lisa_ext.campaign`: the runner writes it; the report, the statistics, the
studies and ``campaign status`` read it. One module per concern, each imported where it is used
(this package re-exports nothing)::

    writer      CampaignStore: the one writer of a campaign directory (publish, scratch, lock, --fresh)
    reader      read_campaign, traced_runs, metrics_table, scan_campaign: Run, RunMeta, Campaign
    journal     Journal: the runner's signed undo journal
    removal     campaign_removal_refusal, never_removed: what lisa-ext may remove
    spec_copy   the spec copy read back (whole, or leniently for its names)
    files       synced writes and bounded JSON reads
    metrics     the tidy metrics table: its columns and its validation (pandas)
    records     Metric, RunKey, RunResult: the records every layer shares
    layout      the names a campaign directory is made of (meta.json, trace.dat, ...)

The layout itself is drawn in :mod:`lisa_ext.campaign.store.layout`.
"""
