"""Shared by the campaign tests: live-test gating and small campaign specs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LOCAL_TARGET = REPO / "target-configs" / "local.yml"
WQ_KNOB = "/sys/module/workqueue/parameters/default_affinity_scope"
LISA_EXT = [sys.executable, "-m", "lisa_ext.cli"]


def require_live() -> None:
    """Skip (outside CI) or fail (in CI) when this machine cannot run real campaigns."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not root")
    for tool in ("trace-cmd", "fio", "rt-app"):
        if shutil.which(tool) is None:
            problems.append(f"{tool} missing")
    if os.geteuid() == 0 and not os.path.isdir("/sys/kernel/tracing/instances"):
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], check=False)
    if not os.path.isdir("/sys/kernel/tracing/instances"):
        problems.append("tracefs not available at /sys/kernel/tracing")
    if not os.path.exists(WQ_KNOB):
        problems.append(f"{WQ_KNOB} missing (kernel older than 6.5)")
    if problems:
        reason = "live campaign tests need " + ", ".join(problems)
        pytest.skip(reason)


def read_knob(path: str = WQ_KNOB) -> str:
    return Path(path).read_text().strip()


def other_scope(current: str) -> str:
    return "system" if current != "system" else "cache"


def write_spec(path: Path, body: str) -> Path:
    path.write_text(body.replace("@TARGET@", str(LOCAL_TARGET)))
    return path


def trace_event_counts(trace_dat: Path) -> dict[str, int]:
    """Event counts from `trace-cmd report -N` text, independent of lisa_ext."""
    out = subprocess.run(["trace-cmd", "report", "-N", str(trace_dat)], capture_output=True,
                         text=True, check=True).stdout
    counts: dict[str, int] = {}
    for m in re.finditer(r"\[\d+\]\s+\d+\.\d+:\s+(\w+):", out):
        counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts
