"""Fuzzing the trace.dat decoder: replay the regression corpus, then fuzz briefly.

tests/fuzz_corpus/ holds inputs of tests/fuzz/fuzz_tracedat.py (coverage-increasing
ones and any crasher found): each damages a real trace.dat. Replaying one must
give tables or a UserError -- never another exception, a hang or a crash. The
replay runs in a child process so that a segfault fails the test (naming the
input) instead of killing pytest.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "fuzz_corpus"
FUZZ_DIR = REPO / "tests" / "fuzz"
SHARED = REPO.parent / "shared" / "traces" / "public" / "lisa"
IN_CI = os.environ.get("CI") == "true"

_REPLAY = r"""
import json, os, sys, tempfile
sys.path.insert(0, sys.argv[1])
import tracedat_mutations
from lisa_ext.errors import UserError
from lisa_ext.trace.tracedat import read_tracedat
bases = tracedat_mutations.bases()
scratch = tempfile.mkdtemp(prefix="fuzz-replay-")
for entry in sys.argv[2:]:
    print(json.dumps({"start": entry}), flush=True)
    base, blob = tracedat_mutations.mutate(open(entry, "rb").read(), bases)
    path = os.path.join(scratch, os.path.basename(entry) + "." + base + ".dat")
    with open(path, "wb") as f:
        f.write(blob)
    try:
        tables = read_tracedat(path)
        outcome = {"ok": sum(t.num_rows for t in tables.tables.values()), "warnings": len(tables.meta["warnings"])}
    except UserError as exc:
        outcome = {"user_error": str(exc)}
    except Exception as exc:  # a bug: report it, keep going
        outcome = {"bug": f"{type(exc).__name__}: {exc}"}
    os.unlink(path)
    print(json.dumps({"entry": entry, "base": base, **outcome}), flush=True)
"""


def _need(condition: bool, reason: str):
    if not condition:
        if IN_CI:
            pytest.fail(f"required in CI: {reason}")
        pytest.skip(reason)


def test_replay_regression_corpus():
    _need((SHARED / "trace_idle.dat").exists(), f"shared traces not found at {SHARED}")
    entries = sorted(str(p) for p in CORPUS.iterdir() if p.is_file() and not p.name.startswith("."))
    assert len(entries) >= 20, "the regression corpus is missing"
    proc = subprocess.run([sys.executable, "-c", _REPLAY, str(FUZZ_DIR), *entries],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    started = [r["start"] for r in records if "start" in r]
    done = [r for r in records if "entry" in r]
    assert proc.returncode == 0, (
        f"decoder died (exit {proc.returncode}) on {started[-1] if started else '?'}:\n{proc.stderr[-3000:]}"
    )
    assert len(done) == len(entries)
    bugs = [r for r in done if "bug" in r]
    assert not bugs, "\n".join(f"{Path(r['entry']).name} ({r['base']}): {r['bug']}" for r in bugs)
    for r in done:
        if "user_error" in r:  # errors name the damaged file
            assert ".dat" in r["user_error"], r
    # the corpus exercises both outcomes
    assert any("ok" in r for r in done) and any("user_error" in r for r in done)


def test_short_fuzz_run(tmp_path):
    _need(importlib.util.find_spec("atheris") is not None, "atheris is not installed (pip install atheris)")
    _need((SHARED / "trace_idle.dat").exists(), f"shared traces not found at {SHARED}")
    work = tmp_path / "corpus"
    work.mkdir()
    for entry in CORPUS.iterdir():  # start from the corpus, write new finds elsewhere
        (work / entry.name).write_bytes(entry.read_bytes())
    # Linux carries the peak RSS of the forking process over execve (exec_mmap), and
    # libFuzzer's RSS limit reads that peak: allow 2 GiB on top of what pytest itself
    # peaked at, or a long test session makes a healthy fuzzer report "out-of-memory".
    inherited_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    # a fixed seed and run count: the same inputs in every CI run, no flaky verdicts
    proc = subprocess.run(
        [sys.executable, str(FUZZ_DIR / "fuzz_tracedat.py"), str(work), "-seed=1", "-runs=600",
         f"-rss_limit_mb={inherited_mb + 2048}", "-timeout=30", "-max_len=200", "-len_control=0",
         f"-artifact_prefix={tmp_path}/crash-"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )
    crashes = list(tmp_path.glob("crash-*"))
    assert proc.returncode == 0 and not crashes, (
        f"fuzzer found a crash {crashes} (copy it into tests/fuzz_corpus/):\n{proc.stderr[-3000:]}"
    )
