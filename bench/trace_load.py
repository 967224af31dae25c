"""Trace loading: first (convert + store in the cache) vs. second (cache hit) load.

Prints, for ../shared/bench/mixed_6M_v7.dat and a text trace, the median over
a few fresh processes of:

* ``read_trace``: Arrow tables, cold cache vs. warm cache;
* ``load_trace(...).df_event("sched_switch")``: the LISA frame, cold vs. warm,
  with LISA's import time measured on its own (it is paid by every process).

Wall time and CPU time of the process are both printed: on a shared machine
the CPU time is the steadier figure. Each measurement runs in a new interpreter so no in-process memo helps, and
each cold run gets an empty cache directory. Run: ``.venv/bin/python bench/trace_load.py [TRACE ...]
[--smoke]``; ``--smoke`` (what ``make test`` runs so that the benchmark cannot rot): LISA's small
sched_load_trace.dat, Arrow tables only (no LISA import), one run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
TRACES = [SHARED / "bench" / "mixed_6M_v7.dat", SHARED / "traces" / "public" / "catapult" / "android_systrace.html"]
SMOKE_TRACE = SHARED / "traces" / "public" / "lisa" / "sched_load_trace.dat"
RUNS = 3

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
c0 = time.process_time()
what, path = sys.argv[1], sys.argv[2]
if what == "read":
    import pyarrow, pyarrow.parquet  # imported lazily by read_trace: not part of what is measured
    from lisa_ext.trace import read_trace
    t1 = time.perf_counter()
    c1 = time.process_time()
    tables = read_trace(path)
    rows = sum(t.num_rows for t in tables.tables.values())
    hit = tables.meta["cache"]["hit"]
    import_s = t1 - t0
else:
    from lisa_ext.compat import import_lisa
    import_lisa("lisa.trace"); import_lisa("lisa.analysis._proxy")
    from lisa_ext.trace import load_trace
    t1 = time.perf_counter()
    c1 = time.process_time()
    trace = load_trace(path)
    event = "sched_switch"
    rows = len(trace.df_event(event))
    from lisa_ext.trace import lisa_parser
    hit = next(iter(lisa_parser._PREPARED.values())).meta["cache"]["hit"]
    import_s = t1 - t0
print(json.dumps({"seconds": time.perf_counter() - t1, "cpu": time.process_time() - c1,
                  "import": import_s, "rows": rows, "hit": hit}))
"""


def _run(what: str, path: Path, cache: str) -> dict:
    env = dict(os.environ, LISA_EXT_CACHE=cache)
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", _CHILD, what, str(path)],
                         env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    global RUNS
    args = sys.argv[1:]
    smoke = "--smoke" in args
    paths = [Path(p) for p in args if p != "--smoke"] or ([SMOKE_TRACE] if smoke else TRACES)
    whats = ("read",) if smoke else ("read", "lisa")
    if smoke:
        RUNS = 1
    for path in paths:
        if not path.is_file():
            print(f"{path}: missing, skipped")
            continue
        print(f"{path.name} ({path.stat().st_size / 1e6:.1f} MB)")
        for what in whats:
            cold, warm, imports, cold_cpu, warm_cpu = [], [], [], [], []
            for _ in range(RUNS):
                with tempfile.TemporaryDirectory(prefix="lisa-ext-bench-") as cache:
                    first = _run(what, path, cache)
                    second = _run(what, path, cache)
                assert not first["hit"] and second["hit"], (first, second)
                cold.append(first["seconds"])
                warm.append(second["seconds"])
                cold_cpu.append(first["cpu"])
                warm_cpu.append(second["cpu"])
                imports.append(second["import"])
            c, w = statistics.median(cold), statistics.median(warm)
            label = "read_trace (all events)" if what == "read" else "load_trace + df_event(sched_switch)"
            cc, wc = statistics.median(cold_cpu), statistics.median(warm_cpu)
            print(f"  {label:38s} wall: cold {c:6.2f} s warm {w:6.2f} s ({w / c:4.0%})   "
                  f"cpu: cold {cc:6.2f} s warm {wc:6.2f} s ({wc / cc:4.0%})   rows {second['rows']:,}   "
                  f"(imports {statistics.median(imports):.1f} s, not included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
