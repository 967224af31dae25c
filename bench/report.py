"""How long ``lisa-ext report`` takes on the sample campaign: before vs after the cache.

Each mode runs the real command (``lisa-ext report data/samples/wq-affinity
--out TMP``) in a fresh process, so imports count as a user sees them, with its
own ``$LISA_EXT_CACHE``; all modes are measured in the same run, interleaved, and
the medians of ``--repeat`` runs printed with their ratios:

* ``uncached``: ``--no-cache`` with an empty trace cache, what a new campaign's
  first report costs: every trace converted and analysed, every figure drawn (the
  ones needing no trace in a second process while the traces are analysed, the
  rest in one process per CPU)
* ``uncached serial``: ``--no-cache --jobs 1``, the same in one process
* ``warm cache``: nothing changed since the last report (a notebook re-render)

Wall time is what a user waits; CPU time (user + sys of the child and its
processes) shows the work when the shared machine is busy. Goal: uncached <= 5 s.
Run: ``.venv/bin/python bench/report.py [--repeat 3] [--smoke]``; ``--smoke`` (what
``make test`` runs so that the benchmark cannot rot): one uncached report of a copy of
the sample holding only its fio runs, without the traces (no LISA import), no goal
checked.
"""

from __future__ import annotations

import argparse
import os
import shutil
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "samples" / "wq-affinity"
LISA_EXT = [sys.executable, "-m", "lisa_ext.cli"]


def _run(args: list[str], cache: Path) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one ``lisa-ext`` command."""
    env = dict(os.environ, LISA_EXT_CACHE=str(cache))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([*LISA_EXT, *args], env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _smoke_sample(tmp: Path) -> Path:
    """A copy of the sample with its fio runs only (a few figures)."""
    copy = tmp / "sample"
    shutil.copytree(SAMPLE, copy, ignore=lambda d, names: [n for n in names if n == "rtapp-periodic"])
    return copy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true",
                        help="one repeat, no traces, no goal checked")
    args = parser.parse_args()
    if not SAMPLE.is_dir():
        print(f"no sample campaign at {SAMPLE}", file=sys.stderr)
        return 1
    jobs = os.cpu_count() or 1
    modes = {f"uncached ({jobs} jobs)": ["--no-cache"],
             "uncached serial": ["--no-cache", "--jobs", "1"],
             "warm cache": []}
    if args.smoke:
        args.repeat = 1
        modes = {m: [*extra, "--no-traces"] for m, extra in modes.items() if m.startswith("uncached (")}
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        sample = _smoke_sample(Path(tmp)) if args.smoke else SAMPLE
        out = Path(tmp) / "report"
        warm = Path(tmp) / "cache-warm"
        if "warm cache" in modes:  # fills the warm cache (report and traces) once, untimed
            _run(["report", str(sample), "--out", str(out), *modes["warm cache"]], warm)
        for i in range(args.repeat):
            for k, (mode, extra) in enumerate(modes.items()):
                # uncached modes: an empty cache of their own, traces converted too
                cache = warm if mode == "warm cache" else Path(tmp) / f"cache-{i}-{k}"
                times[mode].append(_run(["report", str(sample), "--out", str(out), *extra],
                                        cache))
        figures = len(list((out / "figures").glob("*.png")))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"lisa-ext report {SAMPLE.relative_to(REPO)}: {figures} figures, "
          f"median of {args.repeat}, {jobs} CPUs, load {load:.1f}")
    base = next(iter(times))
    base_wall = statistics.median(w for w, _ in times[base])
    for mode, runs in times.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"  {mode:28} {wall:7.2f} s wall  {cpu:7.2f} s CPU  "
              f"{base_wall / wall:5.2f}x the speed of {base}")
    if not args.smoke:
        wall = statistics.median(w for w, _ in times[base])
        print(f"goal: uncached <= 5 s: {'met' if wall <= 5 else 'NOT met'} ({wall:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
