"""The runtime switches of the ondemand-bursty and idle-gating kernel, on a real boot (QEMU TCG).

One kernel carries both patches (kernels/patches/0003-*, 0004-*). A static /init
(tests/kernel_switches_init.c) prints the switches as booted, runs a traced bursty
task under ondemand with cpufreq_governor.copy_prev_load=N then Y, and a traced
periodic task with idle_gating.comm unset then naming it; the trace comes back on
the console and is analysed here:

- ondemand: after each wake-up from a 60 ms sleep, how long CPU 1's policy runs
  below the frequency it had when the task went to sleep (the RFC's "frequency
  drops for ~one sampling period after each wake-up"), per setting, computed by
  the study's own analysis (lisa_ext.analysis.wakeup_frequency) from the console trace;
- gating: the cpuidle states CPU 2 enters while the marked task belongs to it.

The board pays for the decisions (timing=faithful): with the task unmarked, the idle governor
must still see the 5 ms sleep the task asked for and pick deep states, not the next slice of
the timer that slows a CPU below f_max down (docs/vboard.md#calibration).

One boot, ~1 minute with the kernel built.
"""

from __future__ import annotations

import re
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from test_kernel_emulation import _require, boot

from lisa_ext.analysis.idle_wakeups import wakeups_from_idle
from lisa_ext.kernel.build import build_variant

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "kernels"
PARAM_COPY = "/sys/module/cpufreq_governor/parameters/copy_prev_load"
PARAM_COMM = "/sys/module/idle_gating/parameters/comm"
EXIT = 4294967295  # cpu_idle state of an idle exit (PWR_EVENT_EXIT)

pytestmark = pytest.mark.vboard

LINE = re.compile(r"^T\s+(?P<task>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>\d+\.\d+): "
                  r"(?P<event>\w+): (?P<body>.*)$", re.M)


@dataclass(frozen=True)
class Event:
    ts: float
    cpu: int
    event: str
    fields: dict[str, str]
    body: str


def parse_trace(console: str) -> list[Event]:
    events = []
    for m in LINE.finditer(console):
        body = m.group("body")
        fields = dict(re.findall(r"(\w+)=(\S+)", body))
        events.append(Event(float(m.group("ts")), int(m.group("cpu")), m.group("event"), fields, body.strip()))
    return events


def marker_time(events: list[Event], text: str) -> float:
    return next(e.ts for e in events if e.event == "tracing_mark_write" and e.body == text)


#: sched_switch's printed prev_state as its integer (include/trace/events/sched.h)
STATE_BITS = {"R": 0, "S": 1, "D": 2, "R+": 0x100}


def time_below_after_wakeups(events: list[Event], phase: str, window: float = 0.030) -> list[float]:
    """For each wake-up from idle of "bursty" after a sleep of 40 ms or more in ``phase``:
    the time within ``window`` after it (and before it sleeps again) during which its CPU
    ran below the frequency it had when the task went to sleep
    (:func:`lisa_ext.analysis.idle_wakeups.wakeups_from_idle`, as ``trace.ana.wakeup_frequency``)."""
    start, end = marker_time(events, f"PHASE {phase}"), marker_time(events, f"END {phase}")
    switches = [e for e in events if e.event == "sched_switch" and start <= e.ts <= end]
    freq = [e for e in events if e.event == "cpu_frequency"]
    switch_df = pd.DataFrame({
        "__cpu": [e.cpu for e in switches],
        "prev_comm": [e.fields["prev_comm"] for e in switches],
        "prev_pid": [int(e.fields["prev_pid"]) for e in switches],
        "prev_state": [STATE_BITS.get(e.fields["prev_state"], 0x80) for e in switches],
        "next_comm": [e.fields["next_comm"] for e in switches],
        "next_pid": [int(e.fields["next_pid"]) for e in switches],
    }, index=pd.Index([e.ts for e in switches], name="Time"))
    freq_df = pd.DataFrame({"cpu_id": [int(e.fields["cpu_id"]) for e in freq],
                            "state": [int(e.fields["state"]) for e in freq]},
                           index=pd.Index([e.ts for e in freq], name="Time"))
    wakeups = wakeups_from_idle(switch_df, freq_df, "bursty", window_s=window, min_sleep_s=0.040)
    return wakeups["time_below_s"].tolist()


def idle_entries(events: list[Event], start: float, end: float) -> dict[int, int]:
    """cpuidle state -> entries on CPU 2 between two timestamps (state 0 also counts polling)."""
    counts: dict[int, int] = {}
    for e in events:
        if e.event == "cpu_idle" and start <= e.ts <= end and int(e.fields["cpu_id"]) == 2:
            state = int(e.fields["state"])
            if state != EXIT:
                counts[state] = counts.get(state, 0) + 1
    return counts


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    _require(["gcc", "cpio", "qemu-system-x86_64"])
    tmp = tmp_path_factory.mktemp("switches")
    init = tmp / "init"
    subprocess.run(["gcc", "-static", "-O2", "-o", str(init), str(REPO / "tests/kernel_switches_init.c")],
                   check=True, capture_output=True)
    # the five variants of the two studies share this build
    art = build_variant(KERNELS / "ondemand-bursty/without.yml", log=print)
    assert art.hash == build_variant(KERNELS / "idle-gating/gating.yml", log=print).hash
    sysfs = boot(art, init, tmp, ("table=rk3399 timing=faithful", "opps=rk3399-little timing=faithful"),
                 art.cmdline, [])
    return sysfs, parse_trace(sysfs["CONSOLE"])


def first_read(console: str, path: str) -> str:
    """What the init read from ``path`` the first time (before writing it)."""
    return re.search(rf"^FILE {re.escape(path)}: (.*)$", console, re.M).group(1).strip()


def test_switches_boot_at_upstream_behaviour(run):
    sysfs, _ = run
    console = sysfs["CONSOLE"]
    assert "QUIET_FAIL" not in console  # the init's lines are whole only with the kernel's quiet
    assert first_read(console, PARAM_COPY) == "Y"  # 6.12 as shipped copies the previous load
    assert first_read(console, PARAM_COMM) == ""  # no task marked: no gating
    assert "timing=faithful" in console.split("LOADED /lisa_emu_cpuidle")[0]
    assert "timing=faithful energy meter" in console  # lisa_emu_cpufreq's line, as loaded
    assert f"KNOB {PARAM_COMM} a,b,c,d,e: Invalid argument" in console
    assert f"KNOB {PARAM_COMM} a-name-longer-than-15: Invalid argument" in console


def test_copy_prev_load_keeps_the_frequency_after_a_wakeup(run):
    _, events = run
    without = time_below_after_wakeups(events, "ondemand-copy-N")
    with_ = time_below_after_wakeups(events, "ondemand-copy-Y")
    print(f"ms below the pre-sleep frequency after each wake-up: without {[round(x * 1e3, 1) for x in without]}, "
          f"with {[round(x * 1e3, 1) for x in with_]}")
    assert len(without) >= 8 and len(with_) >= 8
    # without: the first sample after the sleep sees a near-idle window and lowers the
    # frequency until the next sample, one sampling period (10 ms) later
    assert statistics.median(without) >= 0.005
    # with: the previous load is reused once, the frequency stays
    assert statistics.median(with_) <= 0.001


def latsens_on_cpu2(events: list[Event], phase: str) -> tuple[float, float]:
    """From the first switch to "latsens" on CPU 2 in ``phase`` to its last switch away
    (its exit): the time the task belongs to CPU 2."""
    start, end = marker_time(events, f"PHASE {phase}"), marker_time(events, f"AFTER {phase}")
    switches = [e for e in events if e.event == "sched_switch" and start <= e.ts <= end and e.cpu == 2]
    first = next(e.ts for e in switches if e.fields.get("next_comm") == "latsens")
    last = [e.ts for e in switches if e.fields.get("prev_comm") == "latsens"][-1]
    return first, last


def test_gating_keeps_the_marked_tasks_cpu_out_of_idle_states(run):
    sysfs, events = run
    off = idle_entries(events, *latsens_on_cpu2(events, "gating-off"))
    first, exited = latsens_on_cpu2(events, "gating-on")
    on = idle_entries(events, first, exited)
    after = idle_entries(events, exited, marker_time(events, "END gating-on"))
    print(f"CPU 2 idle-state entries (state: count): gating off {off}, gating on {on}, after the task exited {after}")
    # unmarked: the governor picks deep states for (nearly) every one of the 150 sleeps
    assert sum(count for state, count in off.items() if state >= 1) >= 100, off
    assert not any(state >= 1 for state in on), on  # marked: polling only
    assert on.get(0, 0) >= 100  # one poll per 5 ms sleep (150 periods), at least
    assert any(state >= 1 for state in after), after  # the task is gone: gating stops
