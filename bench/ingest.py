"""Trace ingestion speed and memory: lisa-ext's native trace.dat decoder vs LISA 3.1.

Prints, for the benchmark trace ../shared/bench/mixed_6M_v7.dat (6.2 M events):

* into memory (Arrow tables, ``read_tracedat``): events/s on file version 6
  (uncompressed, made once with ``trace-cmd convert --file-version 6
  --compression none``) and on version 7 (zstd), peak RSS, Arrow size;
* ``lisa-ext trace convert`` to parquet on disk: events/s on version 6;
* LISA 3.1's own parser (``lisa.trace.Trace`` -> ``trace-cmd report`` text ->
  DataFrames) on a 1 M-event slice (``trace-cmd split -e``), and the decoder on
  the same slice, with the ratio.

Each measurement runs in a fresh Python process (so peak RSS is its own) and is
repeated; medians are printed. Wall-clock events/s and CPU events/s (user+sys
of the measuring process) are both shown: the machine is shared, and CPU time
is the less noisy of the two. Goals: >= 10 M events/s into Arrow on v6, >= 3 M
events/s on v7, >= 10 M events/s to parquet on v6, peak RSS <= 2x the Arrow size.

Usage: .venv/bin/python bench/ingest.py [--trace FILE] [--repeat N] [--lisa-events N] [--no-lisa] [--smoke]

``--smoke``: a small shared trace (LISA's sched_load_trace.dat), one repeat, no LISA, its
v6 copy in a temporary directory, no goal checked (``make test`` runs it so that the
benchmark cannot rot).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "bench" / "mixed_6M_v7.dat"
SMOKE_TRACE = REPO.parent / "shared" / "traces" / "public" / "lisa" / "sched_load_trace.dat"
WORK = Path(os.environ.get("LISA_EXT_BENCH_DIR", Path.home() / ".cache" / "lisa-ext" / "bench"))

# Runs in a child process: prints one JSON line with wall/cpu seconds, events, peak RSS.
_CHILD = r"""
import json, os, resource, sys, time
mode, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
imports_t = time.perf_counter()
if mode == "lisa":
    from lisa_ext.compat import import_lisa
    from lisa_ext.trace.tracedat import count_events
    lisa_trace = import_lisa("lisa.trace")
    names = sorted(count_events(path)["events"])
else:
    import pyarrow
    from lisa_ext.trace.tracedat import read_tracedat, count_events
    from lisa_ext.trace import cli
base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0, c0 = time.perf_counter(), os.times()
arrow_bytes = None
if mode == "arrow":
    tables = read_tracedat(path)
    events = sum(t.num_rows for t in tables.tables.values())
    arrow_bytes = sum(t.nbytes for t in tables.tables.values())
elif mode == "parquet":
    meta = cli.convert(path, out)
    events = sum(meta["rows"].values())
elif mode == "lisa":
    trace = lisa_trace.Trace(path, events=names, normalize_time=False, enable_swap=False)
    events = sum(len(trace.df_event(name)) for name in names)
t1, c1 = time.perf_counter(), os.times()
# children: LISA 3.1 runs trace-cmd report in a subprocess
cpu = sum(getattr(c1, k) - getattr(c0, k) for k in ("user", "system", "children_user", "children_system"))
print(json.dumps({"wall": t1 - t0, "cpu": cpu, "events": events,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "base_rss": base_rss * 1024, "arrow_bytes": arrow_bytes}))
"""


def _run(mode: str, path: Path, out: Path | None = None) -> dict:
    if out is not None and out.exists():
        shutil.rmtree(out)
    proc = subprocess.run([sys.executable, "-c", _CHILD, mode, str(path), str(out or "")],
                          capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"bench child {mode} {path} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _median(runs: list[dict]) -> dict:
    keys = ("wall", "cpu", "peak_rss")
    med = {k: statistics.median(r[k] for r in runs) for k in keys}
    med["events"] = runs[0]["events"]
    med["arrow_bytes"] = runs[0]["arrow_bytes"]
    med["base_rss"] = statistics.median(r["base_rss"] for r in runs)
    return med


def _prepare_inputs(trace: Path, lisa_events: int, work: Path) -> tuple[Path, Path]:
    """(v6 conversion of the trace, v7 slice of lisa_events events), made once and kept in ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    stamp = f"{trace.stem}-{trace.stat().st_size}"
    v6 = work / f"{stamp}.v6.dat"
    if not v6.exists():
        tmp = v6.with_suffix(".tmp")
        subprocess.run(["trace-cmd", "convert", "--file-version", "6", "--compression", "none",
                        "-i", str(trace), "-o", str(tmp)], check=True, capture_output=True)
        tmp.rename(v6)
    sliced = work / f"{stamp}.slice{lisa_events}.dat"
    if not sliced.exists():
        with tempfile.TemporaryDirectory(dir=work) as tmpdir:
            base = Path(tmpdir) / "slice.dat"
            subprocess.run(["trace-cmd", "split", "-i", str(trace), "-e", str(lisa_events), "-o", str(base)],
                           check=True, capture_output=True)
            Path(f"{base}.1").rename(sliced)
    return v6, sliced


def _rate(events: float, seconds: float) -> str:
    if seconds <= 0:  # under the CPU clock's resolution: a smoke run's small trace can take none
        return f"{'n/a':>9}"
    r = events / seconds
    return f"{r / 1e6:7.2f} M" if r >= 1e5 else f"{r / 1e3:7.1f} k"


def _line(label: str, m: dict, extra: str = "") -> str:
    return (f"{label:<40} {_rate(m['events'], m['wall'])} ev/s wall  "
            f"{_rate(m['events'], m['cpu'])} ev/s cpu  "
            f"peak RSS {m['peak_rss'] / 2**20:6.0f} MiB{extra}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lisa-events", type=int, default=1_000_000,
                    help="size of the slice LISA 3.1 parses (it runs at ~15 k events/s)")
    ap.add_argument("--no-lisa", action="store_true", help="skip LISA 3.1 (slow)")
    ap.add_argument("--smoke", action="store_true",
                    help="small trace, one repeat, no LISA, no goal checked")
    args = ap.parse_args(argv)
    if args.smoke:
        args.repeat, args.no_lisa = 1, True
        if args.trace == DEFAULT_TRACE:
            args.trace = SMOKE_TRACE
    if not args.trace.exists():
        print(f"benchmark trace not found: {args.trace}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as scratch:
        return _measure(args, Path(scratch) if args.smoke else WORK)


def _measure(args, work: Path) -> int:
    v6, sliced = _prepare_inputs(args.trace, args.lisa_events, work)
    print(f"trace: {args.trace} (v7, {args.trace.stat().st_size / 2**20:.0f} MiB); "
          f"v6 copy {v6.stat().st_size / 2**20:.0f} MiB; median of {args.repeat} runs; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "parquet"
        for label, mode, path in (("arrow v6", "arrow", v6), ("arrow v7", "arrow", args.trace),
                                  ("parquet v6", "parquet", v6)):
            results[label] = _median([_run(mode, path, out if mode == "parquet" else None)
                                      for _ in range(args.repeat)])
    arrow = results["arrow v6"]["arrow_bytes"]
    print(f"events: {results['arrow v6']['events']:,}; Arrow size {arrow / 2**20:.0f} MiB; "
          f"interpreter+imports RSS {results['arrow v6']['base_rss'] / 2**20:.0f} MiB")
    for label, goal in (("arrow v6", 10), ("arrow v7", 3), ("parquet v6", 10)):
        m = results[label]
        name = {"arrow v6": "read_tracedat, v6 -> Arrow",
                "arrow v7": "read_tracedat, v7 zstd -> Arrow",
                "parquet v6": "lisa-ext trace convert, v6 -> parquet"}[label]
        extra = "" if args.smoke else f"  (goal >= {goal} M ev/s)"
        extra = f"  RSS/Arrow {m['peak_rss'] / arrow:.2f}" + extra
        print(_line(name, m, extra))

    if not args.no_lisa:
        ours = _median([_run("arrow", sliced) for _ in range(args.repeat)])
        lisa = _run("lisa", sliced)  # once: it takes about a minute per million events
        print(f"slice: {sliced.name}, {ours['events']:,} events")
        print(_line("LISA 3.1 Trace + df_event, slice", lisa))
        print(_line("read_tracedat, same slice", ours))
        print(f"ratio (ours / LISA 3.1), wall: {lisa['wall'] / ours['wall']:.0f}x, "
              f"cpu: {lisa['cpu'] / ours['cpu']:.0f}x; peak RSS LISA {lisa['peak_rss'] / 2**20:.0f} MiB "
              f"vs {ours['peak_rss'] / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
