"""cyclictest (rt-tests): timer wake-up latency of periodic threads, from its histogram.

Each measurement thread sleeps until an absolute time every ``interval-us`` and
records how late it woke. With ``-h US`` cyclictest prints, per thread, a
histogram of latencies in 1 us buckets up to US, then ``# Total`` (samples in
the histogram), ``# Min/Avg/Max
Latencies`` and ``# Histogram Overflows`` (samples above US) summary lines.

Metrics cover all threads together: min, sample-weighted average, max, and
percentiles p50/p90/p99/p99.9 read from the summed histogram. A percentile
that falls among the overflows is not known (only that it is above the
histogram range) and is left out; ``overflows`` says how many samples were.
"""

from __future__ import annotations

import re

from lisa_ext.schema import DURATION_S, THREADS, TIMEOUT_S, Field, Number
from lisa_ext.campaign.store.records import Metric
from lisa_ext.campaign.workloads.base import RunContext, Workload, WorkloadError
from lisa_ext.campaign.workloads.command import run_logged

__all__ = ["Cyclictest", "parse_cyclictest_histogram"]

_PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99_9": 99.9}


def _summary(text: str, label: str) -> list[int]:
    m = re.search(rf"^# {label}:((?:\s+\d+)+)\s*$", text, re.M)
    if not m:
        raise WorkloadError(f"cyclictest histogram output has no '# {label}:' line")
    return [int(x) for x in m.group(1).split()]


def parse_cyclictest_histogram(text: str) -> list[Metric]:
    """Metrics from ``cyclictest -q -h US`` output (see the module docstring)."""
    buckets: dict[int, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if fields and not line.startswith("#") and all(f.isdigit() for f in fields):
            buckets[int(fields[0])] = buckets.get(int(fields[0]), 0) + sum(int(f) for f in fields[1:])
    totals = _summary(text, "Total")
    mins, avgs, maxs = _summary(text, "Min Latencies"), _summary(text, "Avg Latencies"), _summary(text, "Max Latencies")
    overflow_per_thread = _summary(text, "Histogram Overflows")
    # "# Total" counts the samples inside the histogram only; overflows come on top
    per_thread = [t + o for t, o in zip(totals, overflow_per_thread)]
    samples, overflows = sum(per_thread), sum(overflow_per_thread)
    if samples == 0:
        raise WorkloadError("cyclictest recorded no sample")
    metrics = [
        Metric("lat_min", float(min(mins)), "us", True),
        Metric("lat_avg", sum(a * n for a, n in zip(avgs, per_thread)) / samples, "us", True),
        Metric("lat_max", float(max(maxs)), "us", True),
    ]
    for name, pct in _PERCENTILES.items():
        rank = pct / 100.0 * samples
        seen = 0
        for latency in sorted(buckets):
            seen += buckets[latency]
            if seen >= rank:
                metrics.append(Metric(f"lat_{name}", float(latency), "us", True))
                break
    metrics.append(Metric("samples", float(samples), "count", False))
    metrics.append(Metric("overflows", float(overflows), "count", True))
    return metrics



class Cyclictest(Workload):
    KIND = "cyclictest"
    TOOLS = ("cyclictest",)
    SCHEMA = {
        "duration-s": Field((int,), "seconds to run (-D)", True, bounds=DURATION_S),
        "threads": Field((int,), "measurement threads (-t, default 1)", bounds=THREADS),
        "interval-us": Field((int,), "wake-up period of the first thread (-i, default 1000)",
                             bounds=(1, 10_000_000)),
        "priority": Field((int,), "SCHED_FIFO priority (-p; default: SCHED_OTHER)", bounds=(1, 99)),
        "histogram-us": Field((int,), "histogram range in us (-h, default 1000)", bounds=(1, 1_000_000)),
        "affinity": Field((bool,), "pin thread N to CPU N (-a)"),
        "idle-states": Field((bool,), "let the CPUs enter idle states between wake-ups (--laptop; default "
                             "false: cyclictest holds /dev/cpu_dma_latency at 0, so no deep state is entered)"),
        "timeout-s": Field(Number, "kill cyclictest after this many seconds (default: 2 x duration + 60)",
                           bounds=TIMEOUT_S),
    }

    def command(self) -> str:
        o = self.options
        args = ["cyclictest", "-q", "-m", f"-D {int(o['duration-s'])}", f"-t {int(o.get('threads', 1))}",
                f"-i {int(o.get('interval-us', 1000))}", f"-h {int(o.get('histogram-us', 1000))}"]
        if "priority" in o:
            args.append(f"-p {int(o['priority'])}")
        if o.get("affinity"):
            args.append("-a")
        if o.get("idle-states"):
            args.append("--laptop")
        return " ".join(args)

    def run(self, ctx: RunContext) -> list[Metric]:
        timeout = float(self.options.get("timeout-s", 2 * self.options["duration-s"] + 60))
        stdout, _ = run_logged(ctx, self.command(), "cyclictest", timeout, "cyclictest")
        return parse_cyclictest_histogram(stdout)
