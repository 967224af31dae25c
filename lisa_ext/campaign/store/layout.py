"""The names a campaign directory is made of: the one spelling of each (every other module takes
them from here or asks the store's reader).

Layout (the contract every later stage reads)::

    data/<campaign>/.lisa-ext-campaign                says the store made this directory
    data/<campaign>/campaign.yml                      the spec as run (smoke: overrides applied)
    data/<campaign>/campaign-state.json               values the runner computed once
    data/<campaign>/.runner-journal.json              while a run changes the target: how to undo it
    data/<campaign>/runs/<variant>/<workload>/<i>/    one run, i = 0, 1, ...
        result.json   {campaign, variant, workload, iteration, status, error, metrics}
        meta.json     provenance: kernel, knobs read back, tool versions, timestamps
        trace.dat     when traced
        ...           the workload's raw output
    data/<campaign>/quarantine/<variant>/<workload>/<i>/   a damaged run moved aside
    data/<campaign>/report/                           the report (lisa_ext.report)
"""

from __future__ import annotations

__all__ = [
    "CAMPAIGN_MARKER", "JOURNAL_NAME", "QUARANTINE_DIR", "REPORT_DIR", "RUNS_DIR", "RUN_META", "RUN_RESULT",
    "RUN_TRACE", "RUN_TRACE_LOG", "SPEC_COPY", "STATE_NAME", "STORE_ENTRIES", "TMP_PREFIX", "TRACE_FILES",
]

#: a run's scratch directory, next to its final place, until it is published
TMP_PREFIX = ".tmp-"
#: the spec the campaign runs, as applied (smoke overrides, another target)
SPEC_COPY = "campaign.yml"
#: per-campaign values the runner computes once (rt-app calibration, ...)
STATE_NAME = "campaign-state.json"
#: what the run in progress changed on the target, written before each change
#: (see :class:`lisa_ext.campaign.store.journal.Journal`)
JOURNAL_NAME = ".runner-journal.json"
#: the published runs, ``runs/<variant>/<workload>/<iteration>/``
RUNS_DIR = "runs"
#: where ``campaign status --repair`` moves damaged runs
QUARANTINE_DIR = "quarantine"
#: the campaign's report (lisa_ext.report)
REPORT_DIR = "report"
#: written when the store makes a campaign directory: what ``--fresh`` may remove
CAMPAIGN_MARKER = ".lisa-ext-campaign"
#: the names the store (and the report, in ``report/``) writes at the top of a campaign directory
STORE_ENTRIES = frozenset({CAMPAIGN_MARKER, SPEC_COPY, STATE_NAME, JOURNAL_NAME, RUNS_DIR, QUARANTINE_DIR,
                           REPORT_DIR})
#: a run directory's result, its provenance, and its trace-cmd trace and log
RUN_RESULT = "result.json"
RUN_META = "meta.json"
RUN_TRACE = "trace.dat"
RUN_TRACE_LOG = "trace-cmd.log"
#: trace file names a run directory may hold, in order of preference
#: (Android targets record systrace HTML or text)
TRACE_FILES = (RUN_TRACE, "trace.html", "trace.txt")
