"""How long ``lisa-ext report`` takes on the sample campaign, by stage.

Prints seconds (median of --repeat runs, one process) for: the comparison
(stats only), the report without traces or HTML, and the full report. Run:
``.venv/bin/python bench/report.py [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "samples" / "wq-affinity"


def _time(func, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not SAMPLE.is_dir():
        print(f"no sample campaign at {SAMPLE}", file=sys.stderr)
        return 1
    from lisa_ext.report.build import ReportOptions, build_report
    from lisa_ext.report.campaign import metrics_frame, read_campaign
    from lisa_ext.stats import compare

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / SAMPLE.name
        shutil.copytree(SAMPLE, root, ignore=shutil.ignore_patterns("report"))
        metrics = metrics_frame(read_campaign(root))
        rows = len(metrics)
        t_stats = _time(lambda: compare(metrics, "system", test="welch"), args.repeat)
        t_plain = _time(lambda: build_report(root, ReportOptions(traces=False, html=False)),
                        args.repeat)
        t_full = _time(lambda: build_report(root, ReportOptions()), args.repeat)
        figures = len(list((root / "report" / "figures").glob("*.png")))
    print(f"sample campaign: {rows} metric rows, {figures} figures")
    print(f"compare (stats only):          {t_stats:8.3f} s")
    print(f"report --no-traces --no-html:  {t_plain:8.3f} s")
    print(f"report (traces, HTML):         {t_full:8.3f} s")
    print(f"  per figure, full report:     {t_full / max(figures, 1):8.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
