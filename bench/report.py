"""How long ``lisa-ext report`` takes on the sample campaign: before vs after the cache.

Each mode runs the real command (``lisa-ext report data/samples/wq-affinity
--out TMP``) in a fresh process, so imports count as a user sees them, with its
own ``$LISA_EXT_CACHE``; all modes are measured in the same run, interleaved, and
the medians of ``--repeat`` runs printed with their ratios:

* ``uncached serial``: ``--no-cache --jobs 1``, what every report cost before
  the cache (every trace analysed, every figure drawn one after another)
* ``cold cache, parallel``: empty cache, missing figures drawn in one process per CPU
* ``warm cache``: nothing changed since the last report (a notebook re-render)

Wall time is what a user waits; CPU time (user + sys of the child) shows the
work when the shared machine is busy. Run: ``.venv/bin/python bench/report.py``.
"""

from __future__ import annotations

import argparse
import os
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not SAMPLE.is_dir():
        print(f"no sample campaign at {SAMPLE}", file=sys.stderr)
        return 1
    jobs = os.cpu_count() or 1
    modes = {"uncached serial": ["--no-cache", "--jobs", "1"],
             f"cold cache, parallel ({jobs} jobs)": ["--jobs", str(jobs)],
             "warm cache": []}
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        out = Path(tmp) / "report"
        for i in range(args.repeat):
            for mode, extra in modes.items():
                cache = Path(tmp) / f"cache-{i}"  # cold for the first use, warm after
                times[mode].append(_run(["report", str(SAMPLE), "--out", str(out), *extra],
                                        cache))
        figures = len(list((out / "figures").glob("*.png")))
    print(f"lisa-ext report {SAMPLE.relative_to(REPO)}: {figures} figures, "
          f"median of {args.repeat}, {jobs} CPUs")
    base_wall = statistics.median(w for w, _ in times["uncached serial"])
    for mode, runs in times.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"  {mode:28} {wall:7.2f} s wall  {cpu:7.2f} s CPU  "
              f"x{base_wall / wall:5.1f} faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
