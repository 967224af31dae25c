"""Every benchmark in bench/ runs, in its smoke mode, so that none can rot unnoticed.

``--smoke``: a small input, one repeat, no goal checked (the figures themselves are
measured by running the scripts in full, see docs/performance.md). The kernel and
board benchmarks build and boot nothing in smoke mode: they time a cache hit of what
this cache already holds, or say they skipped and why.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (REPO / "bench").glob("*.py"))


def test_every_benchmark_has_a_smoke_mode():
    for name in SCRIPTS:
        assert "--smoke" in (REPO / "bench" / name).read_text(), f"bench/{name} has no --smoke"


@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_smoke_run(name):
    proc = subprocess.run([sys.executable, str(REPO / "bench" / name), "--smoke"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, f"bench/{name} --smoke failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip(), f"bench/{name} --smoke printed nothing"
