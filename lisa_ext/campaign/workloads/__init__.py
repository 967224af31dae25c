"""Workload kinds a campaign can run: each module is one tool.

A kind declares the spec keys it accepts (``SCHEMA``), the target binaries it
needs (``TOOLS``), and runs one iteration with :meth:`Workload.run`, leaving
its raw output in the run directory and returning its metrics.
"""

from __future__ import annotations

from lisa_ext.campaign.workloads.base import RunContext, Workload, WorkloadError
from lisa_ext.campaign.workloads.cyclictest import Cyclictest
from lisa_ext.campaign.workloads.ebizzy import Ebizzy
from lisa_ext.campaign.workloads.fio import Fio
from lisa_ext.campaign.workloads.hackbench import Hackbench
from lisa_ext.campaign.workloads.pgbench import Pgbench
from lisa_ext.campaign.workloads.rtapp import RtApp
from lisa_ext.campaign.workloads.schbench import Schbench
from lisa_ext.campaign.workloads.wa import Wa

__all__ = ["RunContext", "WORKLOAD_KINDS", "Workload", "WorkloadError", "make_workload"]

#: spec ``kind`` -> implementation
WORKLOAD_KINDS: dict[str, type[Workload]] = {
    cls.KIND: cls for cls in (Cyclictest, Ebizzy, Fio, Hackbench, Pgbench, RtApp, Schbench, Wa)}


def make_workload(spec) -> Workload:
    """The workload object for a validated :class:`~lisa_ext.campaign.spec.WorkloadSpec`."""
    return WORKLOAD_KINDS[spec.kind](spec.name, spec.options)
