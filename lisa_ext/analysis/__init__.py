"""Trace analyses for the lisa-ext studies, registered as LISA analyses.

Importing this package defines four :class:`lisa.analysis.base.TraceAnalysisBase`
subclasses, which is how LISA registers analyses: every ``Trace`` built
afterwards exposes them as ``trace.ana.idle_miss``, ``trace.ana.wakeup_latency``,
``trace.ana.wq_placement`` and ``trace.ana.iowait_boost``, whichever loader made
the trace (LISA's own or :func:`lisa_ext.trace.load_trace`).

One module per analysis; :mod:`lisa_ext.analysis.platform` holds the idle-state
tables and CPU topology some of them need, :mod:`lisa_ext.analysis.cli` the
``lisa-ext analyse`` command.
"""

from lisa_ext.analysis.energy import EnergyAnalysis
from lisa_ext.analysis.idle_miss import IdleMissAnalysis
from lisa_ext.analysis.iowait_boost import IowaitBoostAnalysis
from lisa_ext.analysis.wakeup_latency import WakeupLatencyAnalysis
from lisa_ext.analysis.wq_placement import WqPlacementAnalysis

__all__ = ["ANALYSES", "EnergyAnalysis", "IdleMissAnalysis", "IowaitBoostAnalysis", "WakeupLatencyAnalysis", "WqPlacementAnalysis"]

#: CLI name -> analysis class.
ANALYSES = {
    "idle-miss": IdleMissAnalysis,
    "wakeup-latency": WakeupLatencyAnalysis,
    "wq-placement": WqPlacementAnalysis,
    "iowait-boost": IowaitBoostAnalysis,
    "energy": EnergyAnalysis,
}
