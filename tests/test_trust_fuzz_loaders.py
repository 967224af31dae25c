"""The campaign spec and target config loaders on damaged files: a loaded spec or one line.

tests/fuzz/loader_corpus/ holds recipes (tests/fuzz/loader_mutations.py) that damage one of the
committed specs or target configs: what the loader fuzzer (``tests/fuzz/run.py --target specs``)
found and the issue's cases. Each is replayed, a few hand-written hostile files are loaded, and
a short seeded run of the mutator loads a few hundred more. Every case must end in a loaded spec
or config, or in one UserError line naming a file (tests/fuzz/loaders.py), within 10 s and
1 GiB more address space. The runs are in a child process, so that a crash or a blow-up fails
the test naming the case instead of killing pytest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FUZZ_DIR = REPO / "tests" / "fuzz"
CORPUS = FUZZ_DIR / "loader_corpus"
SEEDED_CASES = 250

_RUN = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import loaders
mode, argument = sys.argv[2], sys.argv[3]
if mode == "seeded":
    results = loaders.seeded_run(int(argument), seed=33)
else:  # the corpus's entries, then the hand-written specs
    results = loaders.replay(*json.loads(argument))
for result in results:
    print(json.dumps(result), flush=True)
"""

#: hostile files written by hand, loaded as campaign specs with --smoke: (name, text)
KNOWN = {
    "smoke-workload-name-a-list": """\
name: t
target: ../target-configs/local.yml
iterations: 1
variants: [{name: a}]
workloads:
  - {name: w, kind: fio, options: {rw: randread}}
  - {name: [w], kind: fio, options: {rw: randread}}
smoke: {workloads: {}}
""",
    "complex-key": """\
name: t
target: ../target-configs/local.yml
iterations: 1
variants: [{name: a}]
workloads: [{name: w, kind: fio, options: {rw: randread}}]
smoke:
  workloads: {? [w] : {}}
""",
    "date-key-in-options": """\
name: t
target: ../target-configs/local.yml
iterations: 1
variants: [{name: a}]
workloads: [{name: w, kind: fio, options: {rw: randread, 2024-01-01: 1}}]
smoke: {iterations: 1}
""",
    "smoke-trace-iterations-not-a-list": """\
name: t
target: ../target-configs/local.yml
iterations: 3
trace: {events: [sched], iterations: 7}
variants: [{name: a}]
workloads: [{name: w, kind: fio, options: {rw: randread}}]
smoke: {iterations: 1}
""",
    "smoke-trace-iterations-text": """\
name: t
target: ../target-configs/local.yml
iterations: 3
trace: {events: [sched], iterations: [0, x]}
variants: [{name: a}]
workloads: [{name: w, kind: fio, options: {rw: randread}}]
smoke: {iterations: 1}
""",
}


def _run(mode: str, argument: str, timeout: float) -> list[dict]:
    proc = subprocess.run([sys.executable, "-c", _RUN, str(FUZZ_DIR), mode, argument], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, f"exit {proc.returncode} after {len(results)} cases: {proc.stderr[-3000:]}"
    return results


def _bugs(results: list[dict]) -> list[str]:
    return [f"{r['case']}: {r['bug']}" for r in results if "bug" in r]


@pytest.fixture(scope="module")
def replayed() -> dict[str, dict]:
    """Every corpus entry and hand-written spec, by name, replayed in one child process."""
    entries = sorted(map(str, CORPUS.iterdir()))
    assert entries, f"{CORPUS} is empty"
    results = {r["case"]: r for r in _run("replay", json.dumps([entries, KNOWN]), timeout=300)}
    assert len(results) == len(entries) + len(KNOWN)
    return results


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.iterdir()))
def test_corpus_entry_is_a_spec_or_one_line(replayed, name):
    assert "bug" not in replayed[name], replayed[name]["bug"]


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_known_hostile_spec_is_one_line(replayed, name):
    assert "bug" not in replayed[name], replayed[name]["bug"]
    assert "error" in replayed[name], replayed[name]


def test_seeded_fuzz_run():
    started = time.monotonic()
    results = _run("seeded", str(SEEDED_CASES), timeout=600)
    elapsed = time.monotonic() - started
    assert len(results) == SEEDED_CASES
    assert _bugs(results) == []
    loaded = sum("loaded" in r for r in results)
    # the run must reach past the first check on some cases, and be refused on most
    assert 0 < loaded < SEEDED_CASES, loaded
    print(f"{SEEDED_CASES} cases in {elapsed:.1f} s, {loaded} loaded, slowest "
          f"{max(r['seconds'] for r in results):.2f} s, peak RSS {max(r['peak_rss_mb'] for r in results)} MiB")
