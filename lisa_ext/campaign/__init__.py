"""Campaigns: run workloads under variants of a target, traced, into the store.

* :mod:`~lisa_ext.campaign.spec` -- the YAML spec, validated before anything runs
* :mod:`~lisa_ext.campaign.tracing` -- trace-cmd into a private ftrace instance
* :mod:`~lisa_ext.campaign.workloads` -- fio and rt-app
* :mod:`~lisa_ext.campaign.runner` -- ordering, failures, crash recovery
* :mod:`~lisa_ext.campaign.store` -- the on-disk layout and the tidy metrics table
* :mod:`~lisa_ext.campaign.status` -- done / failed / missing runs

Submodules are imported on use; importing this package is cheap.
"""

__all__ = ["runner", "spec", "status", "store", "tracing", "workloads"]
