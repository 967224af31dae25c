"""Where the tests find ../shared/traces, and how they react when it is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

__all__ = ["TRACES", "shared_trace"]

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def shared_trace(rel: str) -> Path:
    """``TRACES / rel``; skipped when absent on a developer's machine, a failure in CI."""
    path = TRACES / rel
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"shared trace {path} missing in CI")
        pytest.skip(f"shared trace {path} not available")
    return path
