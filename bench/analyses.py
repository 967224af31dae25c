"""Speed of the four study analyses on the 6.2 M-event benchmark trace.

Ingest is ``lisa_ext.trace.load_trace`` plus ``df_event`` of every event the
analyses read (the loader converts lazily, on first use); it is printed on its
own: the first time (decoding the trace.dat or reading its parquet cache) and
again on a fresh Trace. Then each analysis runs on that Trace, computing
exactly what ``lisa-ext analyse NAME TRACE --json`` does, REPEAT times on fresh
Traces; medians are printed. An analysis whose events the trace lacks (on the
default trace, wakeup-frequency: no ``cpu_frequency``) is listed as skipped, with
the events it needs. Goal: the four study analyses together <= 2 s after ingest.

    .venv/bin/python bench/analyses.py [TRACE] [--repeat N] [--smoke]

``--smoke``: the committed sample's small trace, one repeat, no goal checked
(``make test`` runs it so that the benchmark cannot rot).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared/bench/mixed_6M_v7.dat"
SMOKE_TRACE = REPO / "data/samples/wq-affinity/runs/cache/fio-randread/0/trace.dat"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true",
                        help="small trace, one repeat, no goal checked")
    args = parser.parse_args()
    if args.smoke:
        args.repeat = 1
    args.trace = args.trace or str(SMOKE_TRACE if args.smoke else DEFAULT_TRACE)
    if not Path(args.trace).is_file():
        print(f"{args.trace}: no such trace", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")

    import lisa_ext.analysis  # noqa: F401  registers the analyses
    from lisa_ext.analysis.cli import NAMES, run_analysis, register
    from lisa_ext.trace import load_trace

    # The benchmark host has no cpuidle driver, so its trace has no cpu_idle_miss:
    # idle-miss runs in derived mode with a table shaped like acpi_idle's
    # POLL/C1 (only its cost matters here, not its figures).
    table = Path(tempfile.mkdtemp()) / "bench_idle_states.yaml"
    table.write_text(
        "idle-states:\n"
        "  - {name: POLL, exit-latency-us: 0, target-residency-us: 0}\n"
        "  - {name: C1, exit-latency-us: 1, target-residency-us: 1}\n"
    )
    extra = {"idle-miss": ["--platform", str(table)]}
    sub = argparse.ArgumentParser().add_subparsers()
    register(sub)
    from lisa_ext.analysis.registry import ANALYSES
    from lisa_ext.analysis._frames import has_event

    def ingest():
        trace = load_trace(args.trace)
        for event in sorted(set().union(*(cls.get_all_events() for cls in ANALYSES.values()))):
            if has_event(trace, event):
                trace.df_event(event)
        return trace

    t0 = time.perf_counter()
    trace = ingest()
    first_ingest = time.perf_counter() - t0
    print(f"trace: {args.trace}: {sum(len(trace.df_event(e)) for e in trace.available_events)} events read")
    print(f"ingest, first time: {first_ingest:.2f} s")

    # energy prices cpu_frequency/cpu_idle with a platform power model, and capacity-placement
    # needs the CPUs' capacities: the benchmark trace comes from a host with neither cpufreq nor
    # cpuidle states, and CPUs of one capacity
    names = [n for n in NAMES if n not in ("energy", "capacity-placement")]
    per_name: dict[str, list[float]] = {n: [] for n in names}
    skipped: dict[str, str] = {}
    cpu_totals: list[float] = []
    totals, reloads = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        trace = ingest()
        reloads.append(time.perf_counter() - t0)
        total = 0.0
        cpu0 = time.process_time()
        for name in names:
            if name in skipped:
                continue
            ns = sub.choices["analyse"].parse_args([name, args.trace, *extra.get(name, [])])
            t0 = time.perf_counter()
            try:
                run_analysis(name, trace, ns)
            except Exception as exc:  # LISA's MissingTraceEventError: the trace cannot feed it
                if type(exc).__name__ != "MissingTraceEventError":
                    raise
                skipped[name] = str(exc).split(". Available")[0]
                continue
            took = time.perf_counter() - t0
            per_name[name].append(took)
            total += took
        totals.append(total)
        cpu_totals.append(time.process_time() - cpu0)
    print(f"ingest on a fresh Trace: median {statistics.median(reloads):.2f} s")
    for name in names:
        if name in skipped:
            print(f"{name:16s} skipped: {skipped[name]}")
            continue
        print(f"{name:16s} median {statistics.median(per_name[name]):.3f} s  (runs: {', '.join(f'{x:.3f}' for x in per_name[name])})")
    ran = len(names) - len(skipped)
    print(f"{ran} analyses, CPU time of this process: median {statistics.median(cpu_totals):.2f} s "
          "(less sensitive than wall time to other jobs on the machine)")
    if hasattr(os, "getloadavg"):
        print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    total = statistics.median(totals)
    verdict = "" if args.smoke else f" (goal <= 2 s: {'met' if total <= 2 else 'NOT met'})"
    print(f"{ran} analyses after ingest: median {total:.2f} s{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
