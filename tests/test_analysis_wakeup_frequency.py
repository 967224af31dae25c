"""trace.ana.wakeup_frequency on real virtual-board traces of the ondemand-bursty study.

The two fixtures in tests/fixtures/traces/ are `trace-cmd report -N` text (xz) of two 3 s traces
recorded on the board booted with kernels/ondemand-bursty/without.yml (ondemand, 10 ms sampling,
isolcpus=2,3): `trace-cmd record --no-filter -d -B probe -e sched:sched_switch -e power:cpu_frequency
-- taskset -c 3 ebizzy -t 1 -S 3 -s 65536 -a 60 -i 100000` (about 40 % of CPU 3, 100 ms sleeps),
with cpufreq_governor.copy_prev_load N (without) and Y (with). Every figure is checked against a
separate line-by-line computation over the same text.
"""

from __future__ import annotations

import json
import lzma
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from lisa_ext.errors import UserError
from lisa_ext.trace import load_trace

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "traces"
VARIANTS = ("without", "with")
LINE = re.compile(r"^(?:\S+: )?\s*.+?-\d+\s+\[(?P<cpu>\d+)\]\s+(?P<ts>\d+\.\d+): (?P<event>\w+):\s+(?P<body>.*)$")


def reference_wakeups(text: str, comm: str = "ebizzy") -> list[dict]:
    """Wake-ups from idle of ``comm``, one text line at a time: the first switch-in after a switch-out
    asleep (prev_state S or D), when the CPU left its idle task during the sleep; its burst ends at the
    task's next switch-out asleep."""
    freq: dict[int, list[tuple[float, int]]] = {}
    switches = []
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        ts, fields = float(m["ts"]), dict(re.findall(r"(\w+)=(\S+)", m["body"]))
        if "prev_state" in fields:  # as the kernel prints it: S, D, R, R+, I ...
            fields["prev_state"] = {"S": 1, "D": 2}.get(fields["prev_state"], 0)
        if m["event"] == "cpu_frequency":
            freq.setdefault(int(fields["cpu_id"]), []).append((ts, int(fields["state"])))
        elif m["event"] == "sched_switch":
            switches.append((ts, int(m["cpu"]), fields))

    def freq_at(cpu: int, t: float) -> float:
        known = [f for ts, f in freq.get(cpu, []) if ts <= t]
        return known[-1] if known else float("nan")

    def sleeps(f: dict, pid: int) -> bool:
        return f["prev_comm"] == comm and int(f["prev_pid"]) == pid and int(f["prev_state"]) & 3 != 0

    rows, slept, ran = [], {}, set()
    for i, (ts, cpu, f) in enumerate(switches):
        if f["prev_comm"] == comm and int(f["prev_state"]) & 3:
            slept[int(f["prev_pid"])] = ts
            ran.discard(int(f["prev_pid"]))
        pid = int(f["next_pid"])
        if f["next_comm"] != comm or pid not in slept or pid in ran:
            continue
        ran.add(pid)
        if not any(c == cpu and slept[pid] < t <= ts and g["prev_pid"] == "0" for t, c, g in switches):
            continue  # the CPU never went idle during the sleep
        end = next((t for t, _, g in switches[i + 1:] if sleeps(g, pid)), None)
        if end is None:
            continue
        level = freq_at(cpu, slept[pid])
        points = [ts] + [t for t, _ in freq.get(cpu, []) if ts < t < end] + [end]
        below = sum(b - a for a, b in zip(points, points[1:]) if freq_at(cpu, a) < level)
        rows.append({"time": ts, "sleep_s": ts - slept[pid], "freq_at_sleep_khz": level, "time_below_s": below})
    return sorted(rows, key=lambda r: r["time"])


@pytest.fixture(scope="module", params=VARIANTS)
def traced(request, tmp_path_factory):
    text = lzma.decompress((FIXTURES / f"ondemand-bursty-{request.param}.txt.xz").read_bytes()).decode()
    path = tmp_path_factory.mktemp("wakeup-frequency") / f"{request.param}.txt"
    path.write_text(text)
    trace = load_trace(path)
    return request.param, trace, trace.ana.wakeup_frequency.df_wakeups(), reference_wakeups(text)


def test_every_wakeup_matches_the_text_reference(traced):
    _, _, df, ref = traced
    assert len(df) == len(ref) >= 10
    for (time, row), expected in zip(df.iterrows(), ref):
        assert time == pytest.approx(expected["time"], abs=2e-6)
        assert row["sleep_s"] == pytest.approx(expected["sleep_s"], abs=2e-6)
        assert row["freq_at_sleep_khz"] == expected["freq_at_sleep_khz"]
        assert row["time_below_s"] == pytest.approx(expected["time_below_s"], abs=5e-6)
    assert (df["cpu"] == 3).all() and (df["sleep_s"] > 0.09).all() and (df["burst_s"] > 0).all()


def test_the_copy_of_the_previous_load_keeps_the_frequency(traced):
    variant, _, df, _ = traced
    below = statistics.median(df["time_below_s"])
    restarted_lower = (df["restart_freq_khz"] < df["freq_at_sleep_khz"]).mean()
    if variant == "without":
        # a near-zero load at the first sample after the sleep: down until the next sample (~10 ms)
        assert below >= 0.005 and restarted_lower >= 0.5
    else:
        assert below <= 0.001 and restarted_lower <= 0.2


def test_summary_is_json_ready(traced):
    _, trace, df, _ = traced
    summary = trace.ana.wakeup_frequency.summary()
    json.dumps(summary)
    assert summary["wakeups"] == len(df)
    assert summary["median_time_below_s"] == pytest.approx(df["time_below_s"].median())


def test_a_task_selector_picks_what_the_name_picks(traced):
    _, trace, df, _ = traced
    ana = trace.ana.wakeup_frequency
    pd.testing.assert_frame_equal(ana.df_wakeups(tasks="comm:^ebiz"), df)
    pid = int(df["pid"].iloc[0])
    pd.testing.assert_frame_equal(ana.df_wakeups(tasks=f"pid:{pid}"), df[df["pid"] == pid])
    assert ana.df_wakeups(tasks="comm:^no-such-task$").empty


def test_the_command_line_takes_the_selector(traced, tmp_path):
    variant, _, df, _ = traced
    text = lzma.decompress((FIXTURES / f"ondemand-bursty-{variant}.txt.xz").read_bytes()).decode()
    (tmp_path / "trace.txt").write_text(text)
    out = subprocess.run([sys.executable, "-m", "lisa_ext.cli", "analyse", "wakeup-frequency", str(tmp_path / "trace.txt"),
                          "--tasks", "comm:^ebiz", "--json"], capture_output=True, text=True, timeout=300, check=True)
    summary = json.loads(out.stdout)
    assert summary["tasks"] == "comm:^ebiz" and summary["wakeups"] == len(df)


def reference_frequencies(text: str) -> dict[int, list[tuple[float, int]]]:
    """Each CPU's ``cpu_frequency`` events (time, kHz), one text line at a time."""
    out: dict[int, list[tuple[float, int]]] = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m and m["event"] == "cpu_frequency":
            fields = dict(re.findall(r"(\w+)=(\S+)", m["body"]))
            out.setdefault(int(fields["cpu_id"]), []).append((float(m["ts"]), int(fields["state"])))
    return out


def test_the_frequency_after_each_wakeup_matches_the_text(traced):
    variant, trace, df, _ = traced
    after = trace.ana.wakeup_frequency.df_frequency_after_wakeup(horizon_ms=20, step_ms=2.5)
    assert list(after.columns) == ["wakeup_s", "cpu", "pid", "offset_s", "freq_khz"]
    assert len(after) == 9 * len(df) and sorted(set(after["offset_s"].round(6))) == [i * 0.0025 for i in range(9)]
    text = lzma.decompress((FIXTURES / f"ondemand-bursty-{variant}.txt.xz").read_bytes()).decode()
    events = reference_frequencies(text)
    for row in after.itertuples():
        known = [f for ts, f in events.get(row.cpu, []) if ts <= row.wakeup_s + row.offset_s + 1e-9]
        assert row.freq_khz == (known[-1] if known else pytest.approx(float("nan"), nan_ok=True))
    # the mechanism, seen from the wake-up: without the copied load the CPU is below the frequency of the
    # sleep 5 ms into most bursts, with it at that frequency
    at_5ms = after[after["offset_s"].round(6) == 0.005].set_index("wakeup_s")["freq_khz"]
    below = (at_5ms.to_numpy() < df["freq_at_sleep_khz"].to_numpy()).mean()
    assert below >= 0.5 if variant == "without" else below <= 0.2


def test_the_frequency_after_wakeup_refuses_a_step_too_fine(traced):
    _, trace, _, _ = traced
    with pytest.raises(UserError, match="more than 10000 points"):
        trace.ana.wakeup_frequency.df_frequency_after_wakeup(horizon_ms=100, step_ms=0.001)
    with pytest.raises(UserError, match="step"):
        trace.ana.wakeup_frequency.df_frequency_after_wakeup(step_ms=0)
