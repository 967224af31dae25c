"""Campaigns: run workloads under variants of a target, traced, into the store.

From the top of its layers (``.importlinter``) to the bottom:

* :mod:`~lisa_ext.campaign.cli` -- ``lisa-ext campaign``
* :mod:`~lisa_ext.campaign.status` -- done / failed / missing / damaged runs, ``--repair``
* :mod:`~lisa_ext.campaign.runner` -- ``run_campaign``: ordering, failures, crash recovery
* :mod:`~lisa_ext.campaign.recovery` -- a lost target: reconnect, reset, retry the run
* :mod:`~lisa_ext.campaign.session` -- the campaign's target: connection, kernel, undo journal
* :mod:`~lisa_ext.campaign.spec` -- the YAML spec, validated before anything runs
* :mod:`~lisa_ext.campaign.sched_ext` -- BPF schedulers as variants: loaded, checked, stopped around a run
* :mod:`~lisa_ext.campaign.cpu_util`, :mod:`~lisa_ext.campaign.meters`,
  :mod:`~lisa_ext.campaign.tools`, :mod:`~lisa_ext.campaign.tracing`,
  :mod:`~lisa_ext.campaign.workloads` -- CPU utilisation and energy around a
  run, tool builds, trace-cmd into a private ftrace instance, the workload kinds
* :mod:`~lisa_ext.campaign.health`, :mod:`~lisa_ext.campaign.remote`,
  :mod:`~lisa_ext.campaign.requirements`, :mod:`~lisa_ext.campaign.storage`,
  :mod:`~lisa_ext.campaign.trace_loss` -- the target's watchdog, commands on the
  target, what a study needs from its platform, room in data/, lost trace events
* :mod:`~lisa_ext.campaign.store` -- the on-disk layout, one module per concern: the one
  writer of a campaign directory (``store.writer``: runs published whole and synced, the spec
  copy, the journal's file) and the one reader every other layer uses (``store.reader``: typed
  runs, traced runs, the tidy metrics table), the records workloads report (``store.records``)

Submodules are imported on use; importing this package is cheap.
"""

__all__ = ["runner", "spec", "status", "store", "tracing", "workloads"]
