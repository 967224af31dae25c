"""Traces for the analysis tests, loaded once per test process by either loader."""

from __future__ import annotations

import functools
import os

import pytest

import analysis_reference as ref

SHARED_TRACES = ref.SHARED / "traces"
JUNO = SHARED_TRACES / "public/lisa/sched_load_trace.dat"
FIO = SHARED_TRACES / "local/fio_randread_2cpu_v7.dat"
SURFACEFLINGER = SHARED_TRACES / "public/trappy/trace_surfaceflinger.html"
JUNO_YAML = ref.REPO / "lisa_ext/analysis/data/juno_r0.yaml"


def require_shared(path) -> None:
    if not path.exists():
        pytest.skip(f"shared trace {path} is missing")


@functools.lru_cache(maxsize=None)
def lisa_trace(path: str):
    """LISA's own loader, with every event the four analyses may use."""
    from lisa_ext import compat
    from lisa_ext.analysis.registry import ANALYSES

    events = sorted(set().union(*(cls.get_all_events() for cls in ANALYSES.values())))
    # No swap: LISA would write it next to the trace, inside the read-only shared inputs.
    return compat.import_lisa("lisa.trace").Trace(path, events=events, enable_swap=False)


def fast_trace(path: str):
    """The fast loader (lisa_ext.trace.load_trace)."""
    import lisa_ext.analysis.registry  # noqa: F401
    from lisa_ext.trace import load_trace

    return load_trace(path)


@functools.lru_cache(maxsize=None)
def _live() -> str:
    return str(ref.record_fio_trace())


def live_fio_trace() -> str:
    """Path of a fio trace recorded on this machine (once per test process)."""
    reason = ref.live_capability()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot record a trace in CI: {reason}")
        pytest.skip(reason)
    return _live()


def live_fio_ios(path: str) -> int:
    """How many reads fio did for the live trace at ``path`` (fio's own report)."""
    return ref.live_fio_ios(path)


@functools.lru_cache(maxsize=None)
def reference_events(path: str):
    return ref.report_events(path)
