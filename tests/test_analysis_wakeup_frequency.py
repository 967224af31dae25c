"""trace.ana.wakeup_frequency on real virtual-board traces of the ondemand-bursty study.

The two traces in tests/fixtures/traces/ are 40 % sleeping-ebizzy runs on CPU 3 of the board
(ondemand, 10 ms sampling, CPU 2 offline), recorded by `lisa-ext study run ondemand-bursty --smoke`
with cpufreq_governor.copy_prev_load N (without) and Y (with), converted to trace.dat v7 + zstd.
Every figure is checked against a separate line-by-line computation over `trace-cmd report` text.
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest

from lisa_ext.trace import load_trace

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "traces"
TRACES = {v: FIXTURES / f"ondemand-bursty-{v}-40pct.dat" for v in ("without", "with")}
LINE = re.compile(r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<ts>\d+\.\d+): (?P<event>\w+):\s+(?P<body>.*)$")


def reference_wakeups(path: Path, comm: str = "ebizzy") -> list[dict]:
    """Wake-ups from idle of ``comm`` from ``trace-cmd report`` text, one event at a time."""
    if not shutil.which("trace-cmd"):
        pytest.skip("trace-cmd is not installed")
    text = subprocess.run(["trace-cmd", "report", "-N", "-t", str(path)], capture_output=True, text=True,
                          check=True).stdout
    freq: dict[int, list[tuple[float, int]]] = {}
    switches = []
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        ts, body = float(m["ts"]), m["body"]
        if m["event"] == "cpu_frequency":
            f = dict(re.findall(r"(\w+)=(\d+)", body))
            freq.setdefault(int(f["cpu_id"]), []).append((ts, int(f["state"])))
        elif m["event"] == "sched_switch":
            prev, nxt = body.split(" ==> ")
            switches.append((ts, int(m["cpu"]), prev, nxt))

    def freq_at(cpu: int, t: float) -> float:
        known = [f for ts, f in freq.get(cpu, []) if ts <= t]
        return known[-1] if known else float("nan")

    def task(side: str) -> tuple[str, int, bool]:
        """comm, pid, asleep from ``ebizzy:2019 [120] S`` (the prev side) or ``ebizzy:2019 [120]``."""
        m = re.match(r"(.+):(\d+) \[-?\d+\]\s*(\S*)", side.strip())
        return m[1], int(m[2]), m[3] in ("S", "D")

    rows, slept, ran = [], {}, set()
    for i, (ts, cpu, prev, nxt) in enumerate(switches):
        (prev_comm, prev_pid, asleep), (next_comm, pid, _) = task(prev), task(nxt)
        if prev_comm == comm and asleep:
            slept[prev_pid] = ts
            ran.discard(prev_pid)
        if next_comm != comm or pid not in slept or pid in ran:
            continue
        ran.add(pid)
        if not any(c == cpu and slept[pid] < t <= ts and task(p)[1] == 0 for t, c, p, _ in switches):
            continue  # the CPU never went idle during the sleep
        end = next((t for t, _, p, _ in switches[i + 1:] if task(p)[1] == pid and task(p)[2]), None)
        if end is None:
            continue
        level = freq_at(cpu, slept[pid])
        points = [ts] + [t for t, _ in freq.get(cpu, []) if ts < t < end] + [end]
        below = sum(b - a for a, b in zip(points, points[1:]) if freq_at(cpu, a) < level)
        rows.append({"time": ts, "sleep_s": ts - slept[pid], "freq_at_sleep_khz": level, "time_below_s": below})
    return sorted(rows, key=lambda r: r["time"])


@pytest.fixture(scope="module", params=list(TRACES))
def traced(request):
    trace = load_trace(TRACES[request.param])
    return request.param, trace.ana.wakeup_frequency.df_wakeups(), reference_wakeups(TRACES[request.param])


def test_every_wakeup_matches_the_text_reference(traced):
    _, df, ref = traced
    assert len(df) == len(ref) >= 10
    for (time, row), expected in zip(df.iterrows(), ref):
        assert time == pytest.approx(expected["time"], abs=2e-6)
        assert row["sleep_s"] == pytest.approx(expected["sleep_s"], abs=2e-6)
        assert row["freq_at_sleep_khz"] == expected["freq_at_sleep_khz"]
        assert row["time_below_s"] == pytest.approx(expected["time_below_s"], abs=5e-6)
    assert (df["cpu"] == 3).all() and (df["sleep_s"] > 0.09).all()


def test_the_copy_of_the_previous_load_keeps_the_frequency(traced):
    variant, df, _ = traced
    below = statistics.median(df["time_below_s"])
    restarted_lower = (df["restart_freq_khz"] < df["freq_at_sleep_khz"]).mean()
    if variant == "without":
        # a near-zero load at the first sample after the sleep: down until the next sample (~10 ms)
        assert below >= 0.005 and restarted_lower >= 0.5
    else:
        assert below <= 0.001 and restarted_lower <= 0.2


def test_summary_is_json_ready(traced):
    import json

    variant, df, _ = traced
    trace = load_trace(TRACES[variant])
    summary = trace.ana.wakeup_frequency.summary()
    json.dumps(summary)
    assert summary["wakeups"] == len(df)
    assert summary["median_time_below_s"] == pytest.approx(df["time_below_s"].median())
