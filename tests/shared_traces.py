"""Where the tests find ../shared/traces, and how they react when it is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

__all__ = ["TRACES", "DAT_TRACES", "shared_trace"]

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"

#: the public trace.dat files LISA 3.1's own parser reads (the oracle tests compare against it)
DAT_TRACES = [
    "public/lisa/sched_load_trace.dat",
    "public/lisa/example_rtapp_trace.dat",
    "public/lisa/trace_idle.dat",
    "public/lisa/tests_trace_2014.dat",
    "public/lisa/tests_trace_2019.dat",
    "public/lisa/raw_trace.dat",
]


def shared_trace(rel: str) -> Path:
    """``TRACES / rel``; skipped when absent on a developer's machine, a failure in CI."""
    path = TRACES / rel
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"shared trace {path} missing in CI")
        pytest.skip(f"shared trace {path} not available")
    return path
