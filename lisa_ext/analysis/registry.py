"""The one list of lisa-ext analyses, and what the CLI, the report and the notebooks look up in it.

Importing this module defines every :class:`~lisa_ext.analysis.base.StudyAnalysis`
subclass, which is what registers them with LISA (``trace.ana.<name>``); it imports
LISA. :mod:`lisa_ext.lisa_hook` imports it when LISA builds its first ``trace.ana``.
"""

from __future__ import annotations


from lisa_ext.analysis.base import StudyAnalysis
from lisa_ext.analysis.capacity_placement import CapacityPlacementAnalysis
from lisa_ext.analysis.energy import EnergyAnalysis
from lisa_ext.analysis.idle_gating import IdleGatingAnalysis
from lisa_ext.analysis.idle_miss import IdleMissAnalysis
from lisa_ext.analysis.iowait_boost import IowaitBoostAnalysis
from lisa_ext.analysis.wakeup_frequency import WakeupFrequencyAnalysis
from lisa_ext.analysis.wakeup_latency import WakeupLatencyAnalysis
from lisa_ext.analysis.wq_placement import WqPlacementAnalysis
from lisa_ext.errors import UserError

__all__ = ["ANALYSES", "ANALYSIS_CLASSES", "all_events", "by_cli_name"]

#: Every lisa-ext analysis, in the order the CLI lists them and the report runs
#: them (the report's metrics table keeps this order).
ANALYSIS_CLASSES: tuple[type[StudyAnalysis], ...] = (
    WakeupLatencyAnalysis,
    IdleMissAnalysis,
    WqPlacementAnalysis,
    IowaitBoostAnalysis,
    WakeupFrequencyAnalysis,
    EnergyAnalysis,
    IdleGatingAnalysis,
    CapacityPlacementAnalysis,
)

#: CLI name -> analysis class (derived from :data:`ANALYSIS_CLASSES`).
ANALYSES: dict[str, type[StudyAnalysis]] = {cls.cli_name: cls for cls in ANALYSIS_CLASSES}


def by_cli_name(cli_name: str) -> type[StudyAnalysis]:
    """The analysis ``lisa-ext analyse CLI_NAME`` runs."""
    try:
        return ANALYSES[cli_name]
    except KeyError:
        raise UserError(f"unknown analysis {cli_name!r}, expected one of {', '.join(ANALYSES)}") from None


def all_events() -> list[str]:
    """Every event any lisa-ext analysis may use (LISA's ``@requires_events``), sorted."""
    return sorted(set().union(*(cls.get_all_events() for cls in ANALYSIS_CLASSES)))
