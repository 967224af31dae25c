"""Trace analyses for the lisa-ext studies, registered as LISA analyses.

Importing this package defines the :class:`~lisa_ext.analysis.base.StudyAnalysis`
subclasses of :data:`ANALYSIS_CLASSES` (LISA registers a
``TraceAnalysisBase`` subclass by defining it), so every ``Trace`` built
afterwards has ``trace.ana.idle_miss``, ``trace.ana.wakeup_latency``,
``trace.ana.wq_placement``, ``trace.ana.iowait_boost``, ``trace.ana.wakeup_frequency``,
``trace.ana.energy`` and ``trace.ana.idle_gating``. The import hook
:mod:`lisa_ext.lisa_hook` imports this package when LISA builds its first
``trace.ana``, so nobody has to.

:data:`ANALYSIS_CLASSES` is the one list of analyses: ``lisa-ext analyse``
(:mod:`lisa_ext.analysis.cli`), the campaign report and the notebooks loop
over it. Adding an analysis = one module defining the class (see
:mod:`lisa_ext.analysis.base` for what it declares), one line here, its test
and its doc. :mod:`lisa_ext.analysis.platform` holds the idle-state tables and
CPU topology some of them need.
"""

from lisa_ext.analysis.base import StudyAnalysis
from lisa_ext.analysis.energy import EnergyAnalysis
from lisa_ext.analysis.idle_gating import IdleGatingAnalysis
from lisa_ext.analysis.idle_miss import IdleMissAnalysis
from lisa_ext.analysis.iowait_boost import IowaitBoostAnalysis
from lisa_ext.analysis.wakeup_frequency import WakeupFrequencyAnalysis
from lisa_ext.analysis.wakeup_latency import WakeupLatencyAnalysis
from lisa_ext.analysis.wq_placement import WqPlacementAnalysis
from lisa_ext.errors import UserError

__all__ = [
    "ANALYSES",
    "ANALYSIS_CLASSES",
    "EnergyAnalysis",
    "IdleGatingAnalysis",
    "IdleMissAnalysis",
    "IowaitBoostAnalysis",
    "StudyAnalysis",
    "WakeupFrequencyAnalysis",
    "WakeupLatencyAnalysis",
    "WqPlacementAnalysis",
    "all_events",
    "by_cli_name",
]

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
