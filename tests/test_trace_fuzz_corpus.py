"""The trace readers' fuzz regression corpus, replayed on every ``make test``, and a short fuzz run.

tests/fuzz_corpus/ holds fuzzer inputs: recipes (tests/fuzz/mutations.py) that damage one of
the small real seed traces (tests/fuzz/seeds.py): the inputs that gave the fuzzer new coverage,
and every crash, sanitizer report, hang and memory blow-up it or the issue found, minimised.
Replayed against the normal build, each must end in tables or in one UserError line naming
the file (tests/fuzz/readers.py), within 10 s and with the process below 1 GiB. The replay runs
in a child process so that a crash fails the test naming the input instead of killing pytest.
``make fuzz`` runs the fuzzer itself under AddressSanitizer and UBSan (docs/faults.md).
"""

from __future__ import annotations

import hashlib
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
SHARED = REPO.parent / "shared" / "traces"
IN_CI = os.environ.get("CI") == "true"
LIMIT_S = 10
LIMIT_RSS_MB = 1024

_REPLAY = r"""
import json, os, resource, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
import mutations, readers
seeds = mutations.load_seeds()
scratch = tempfile.mkdtemp(prefix="fuzz-replay-")
for entry in sys.argv[2:]:
    print(json.dumps({"start": entry}), flush=True)
    seed, blob = mutations.mutate(open(entry, "rb").read(), seeds)
    path = os.path.join(scratch, os.path.basename(entry) + "." + seed + ".trace")
    with open(path, "wb") as f:
        f.write(blob)
    started = time.perf_counter()
    try:
        outcome = readers.read_any(path)
    except Exception as exc:  # a Finding, or any other exception: a bug; keep going
        outcome = {"bug": f"{type(exc).__name__}: {exc}"}
    seconds = time.perf_counter() - started
    os.unlink(path)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps({"entry": entry, "seed": seed, "size": len(blob), "seconds": seconds, "peak_rss_mb": peak,
                      **outcome}), flush=True)
"""


_SPAWN = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"


def _need(condition: bool, reason: str):
    if not condition:
        if IN_CI:
            pytest.fail(f"required in CI: {reason}")
        pytest.skip(reason)


def _need_seeds():
    _need((SHARED / "public/lisa/trace_idle.dat").exists(), f"shared traces not found at {SHARED}")
    _need(subprocess.run(["which", "trace-cmd"], capture_output=True).returncode == 0, "trace-cmd is not installed")


def test_seeds_are_the_pinned_ones():
    """A recipe means the same file everywhere only if the seeds are the same bytes."""
    _need_seeds()
    sys.path.insert(0, str(FUZZ_DIR))
    import seeds

    built = {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in seeds.seed_paths().items()}
    assert built == seeds.SEEDS_SHA256, "seeds differ from tests/fuzz/seeds.py SEEDS_SHA256 (see its docstring)"


def test_replay_regression_corpus():
    _need_seeds()
    entries = sorted(str(p) for p in CORPUS.iterdir() if p.is_file() and not p.name.startswith("."))
    assert len(entries) >= 20, "the regression corpus is missing"
    # through a small interpreter: Linux carries a forking process's peak RSS over execve
    # (exec_mmap), so a replay started by pytest itself would report pytest's peak
    proc = subprocess.run([sys.executable, "-c", _SPAWN, sys.executable, "-c", _REPLAY, str(FUZZ_DIR), *entries],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    started = [r["start"] for r in records if "start" in r]
    done = [r for r in records if "entry" in r]
    assert proc.returncode == 0, (
        f"a reader died (exit {proc.returncode}) on {started[-1] if started else '?'}:\n{proc.stderr[-3000:]}"
    )
    assert len(done) == len(entries)
    bugs = [r for r in done if "bug" in r]
    assert not bugs, "\n".join(f"{Path(r['entry']).name} ({r['seed']}): {r['bug']}" for r in bugs)
    slow = [r for r in done if r["seconds"] > LIMIT_S]
    assert not slow, [(Path(r["entry"]).name, r["seed"], round(r["seconds"], 1)) for r in slow]
    fat = [r for r in done if r["peak_rss_mb"] > LIMIT_RSS_MB]
    assert not fat, f"the process passed {LIMIT_RSS_MB} MiB first on {Path(fat[0]['entry']).name} ({fat[0]['seed']})"
    assert all(r["size"] < 1 << 20 for r in done)
    # the corpus reaches every seed and both outcomes
    assert any("rows" in r for r in done) and any("error" in r for r in done)
    sys.path.insert(0, str(FUZZ_DIR))
    import seeds

    assert {r["seed"] for r in done} == {s.name for s in seeds.SEEDS}


def test_short_fuzz_run(tmp_path):
    """The harness runs (normal build, Python coverage): a fixed seed and run count, no finding."""
    _need(importlib.util.find_spec("atheris") is not None, "atheris is not installed (pip install atheris)")
    _need_seeds()
    work = tmp_path / "corpus"
    work.mkdir()
    # Linux carries the peak RSS of the forking process over execve (exec_mmap), and
    # libFuzzer's RSS limit reads that peak: allow the limit on top of what pytest itself
    # peaked at, or a long test session makes a healthy fuzzer report "out-of-memory".
    inherited_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    proc = subprocess.run(
        [sys.executable, str(FUZZ_DIR / "fuzz_traces.py"), str(work), "-seed=1", "-runs=300",
         f"-rss_limit_mb={inherited_mb + LIMIT_RSS_MB}", f"-timeout={LIMIT_S}", "-max_len=512",
         f"-artifact_prefix={tmp_path}/"],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )
    findings = [p for p in tmp_path.iterdir() if p.is_file()]
    assert proc.returncode == 0 and not findings, (
        f"the fuzzer found {findings} (minimise it and add it to tests/fuzz_corpus/):\n{proc.stderr[-3000:]}"
    )
