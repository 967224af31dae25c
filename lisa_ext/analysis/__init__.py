"""Trace analyses for the lisa-ext studies, registered as LISA analyses.

One module per analysis defines a :class:`~lisa_ext.analysis.base.StudyAnalysis`
subclass (LISA registers a ``TraceAnalysisBase`` subclass by defining it), so
every ``Trace`` built afterwards has ``trace.ana.idle_miss``,
``trace.ana.wakeup_latency``, ``trace.ana.wq_placement``, ``trace.ana.iowait_boost``,
``trace.ana.wakeup_frequency``, ``trace.ana.energy``, ``trace.ana.idle_gating`` and
``trace.ana.capacity_placement``.
The import hook :mod:`lisa_ext.lisa_hook` imports :mod:`lisa_ext.analysis.registry`
when LISA builds its first ``trace.ana``, so nobody has to.

:data:`lisa_ext.analysis.registry.ANALYSIS_CLASSES` is the one list of analyses:
``lisa-ext analyse`` (:mod:`lisa_ext.analysis.cli`), the campaign report and the
notebooks loop over it. Adding an analysis = one module defining the class (see
:mod:`lisa_ext.analysis.base` for what it declares), one line in the registry, its
test and its doc.

This package imports nothing itself: the LISA-free modules beside the analyses -
:mod:`~lisa_ext.analysis.platform` (idle-state tables, CPU topology) and
:mod:`~lisa_ext.analysis.idle_wakeups` (wake-ups from idle on plain frames) - stay
importable without LISA's seconds of start-up, which a notebook re-rendering from
cached tables never needs.
"""
