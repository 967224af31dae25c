"""The analysis registry is the one list: LISA, the CLI and the report all follow it."""

from __future__ import annotations

import argparse

from lisa_ext.analysis import cli as analysis_cli
from lisa_ext.analysis.base import StudyAnalysis
from lisa_ext.analysis.registry import ANALYSIS_CLASSES, by_cli_name
from lisa_ext.analysis.wakeup_latency import WakeupLatencyAnalysis
from lisa_ext.compat import import_lisa
from lisa_ext.errors import UserError
from lisa_ext.report import traces


def test_every_analysis_declares_what_the_registry_needs():
    names = [cls.name for cls in ANALYSIS_CLASSES]
    cli_names = [cls.cli_name for cls in ANALYSIS_CLASSES]
    assert len(set(names)) == len(names) and len(set(cli_names)) == len(cli_names)
    for cls in ANALYSIS_CLASSES:
        assert issubclass(cls, StudyAnalysis)
        assert cls.cli_name == cls.name.replace("_", "-")
        assert cls.summary is not StudyAnalysis.summary, cls
        assert cls.summary_tables is not StudyAnalysis.summary_tables, cls
        assert cls.EVENTS, cls  # declared once, used by the report's gating
    lisa_classes = import_lisa("lisa.analysis.base").TraceAnalysisBase.get_analysis_classes()
    assert all(lisa_classes[cls.name] is cls for cls in ANALYSIS_CLASSES)
    assert "StudyAnalysis" not in {c.__name__ for c in lisa_classes.values()}


def test_cli_offers_exactly_the_registry_with_each_class_options():
    sub = argparse.ArgumentParser().add_subparsers()
    analysis_cli.register(sub)
    parser = sub.choices["analyse"]
    name_action = next(a for a in parser._actions if a.dest == "name")
    assert tuple(name_action.choices) == tuple(cls.cli_name for cls in ANALYSIS_CLASSES)
    args = parser.parse_args(["iowait-boost", "t.dat", "--window-ms", "2"])
    options = analysis_cli.analysis_options(by_cli_name("iowait-boost"), None, args)
    assert options == {"window_ms": 2.0}


def test_unknown_cli_name_is_a_clear_error():
    try:
        by_cli_name("no-such")
    except UserError as exc:
        assert "expected one of" in str(exc) and "wq-placement" in str(exc)
    else:
        raise AssertionError("no error")


def test_report_sources_come_from_the_registry():
    gives = [cls.name for cls in ANALYSIS_CLASSES
             if cls.run_metrics is not StudyAnalysis.run_metrics
             or cls.run_frames is not StudyAnalysis.run_frames]
    names = [s.name for s in traces.all_sources()]
    assert names == gives + [s.name for s in traces.SOURCES]
    wakeup = next(s for s in traces.all_sources() if s.name == "wakeup_latency")
    assert wakeup.events == WakeupLatencyAnalysis.EVENTS
    assert wakeup.any_of == WakeupLatencyAnalysis.ANY_OF_EVENTS
