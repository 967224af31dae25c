"""Trace explorer on the 6.2 M-event benchmark trace: first render and HTML size.

In a fresh process (as a notebook kernel would be) with the trace already in
the parquet cache (the first ``explorer_tables`` of the run converts it, not
timed): the seconds to read the explorer's tables, to build the panels and to
render them to bokeh (datashader aggregates the large ones), and the size of
the exported static HTML. ``--analyses`` adds the analyses' findings (loads
the trace into LISA; minutes on this trace). Medians of ``--repeat`` fresh
processes. Run: ``.venv/bin/python bench/explore.py [TRACE] [--smoke]``; ``--smoke`` (what
``make test`` runs so that the benchmark cannot rot): the committed sample's small trace, one
process, no target checked.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "bench" / "mixed_6M_v7.dat"
SMOKE_TRACE = REPO / "data" / "samples" / "wq-affinity" / "runs" / "cache" / "fio-randread" / "0" / "trace.dat"

_CHILD = """
import json, sys, time
start = time.perf_counter()
from lisa_ext.report.explore import explore, explorer_tables, export_explorer
import holoviews as hv, holoviews.plotting.bokeh
t0 = time.perf_counter()
tables = explorer_tables(sys.argv[1], analyses=sys.argv[3] == "1")
t1 = time.perf_counter()
layout = explore(tables)
hv.render(layout, backend="bokeh")
t2 = time.perf_counter()
path = export_explorer(layout, sys.argv[2])
t3 = time.perf_counter()
rows = {k: len(getattr(tables, k)) for k in ("frequency", "idle", "tasks", "wakeups", "findings")}
print(json.dumps({"import": t0 - start, "tables": t1 - t0, "render": t2 - t1,
                  "first": t2 - start, "export": t3 - t2, "size": path.stat().st_size,
                  "rows": rows}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--analyses", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="small trace, one process")
    args = parser.parse_args()
    if args.smoke:
        args.repeat = 1
    args.trace = args.trace or str(SMOKE_TRACE if args.smoke else TRACE)
    if not Path(args.trace).is_file():
        print(f"no trace at {args.trace}", file=sys.stderr)
        return 1
    from lisa_ext.report.explore import explorer_tables

    explorer_tables(args.trace, analyses=False)  # fills the parquet cache once, untimed
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-explore-") as tmp:
        for _ in range(args.repeat):
            out = subprocess.run(
                [sys.executable, "-c", _CHILD, args.trace, str(Path(tmp) / "explorer.html"),
                 "1" if args.analyses else "0"], check=True, capture_output=True, text=True)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    med = {k: statistics.median(r[k] for r in runs)
           for k in ("import", "tables", "render", "first", "export", "size")}
    print(f"explorer of {args.trace} (median of {args.repeat} fresh processes, cached tables)")
    print(f"  rows: {runs[0]['rows']}")
    print(f"  import holoviews/bokeh/lisa_ext:  {med['import']:6.2f} s")
    print(f"  tables from the parquet cache:    {med['tables']:6.2f} s")
    print(f"  panels + bokeh render (rasterised): {med['render']:6.2f} s")
    target = "" if args.smoke else "  (target <= 3 s)"
    print(f"  first render, total:              {med['first']:6.2f} s{target}")
    print(f"  static HTML export:               {med['export']:6.2f} s, "
          f"{med['size'] / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
