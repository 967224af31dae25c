"""Calibration of the virtual board's faithful timing: does it pay what the SoC tables say?

On one board boot (kernels/ondemand-bursty/without.yml: RK3399 tables, ``isolcpus=2,3`` so that
CPU 3 only runs what this benchmark puts there), with the emulation modules reloaded for each
other table, prints:

* per OPP of each emulated OPP table (rk3399-little, rk3399-big, hi3660-little), the throughput
  of a CPU-bound loop on CPU 3 relative to the top OPP, against f / f_max (median of REPEAT
  rounds, each round visiting every OPP; target: within +-10 %);
* per idle state of each emulated idle-state table (rk3399, hi3660-little), the extra wake-up
  latency of a periodic task on CPU 3 held in that state (its other states disabled, the top
  OPP): the median lateness of its timer wake-ups with ``timing=faithful`` minus that with
  ``timing=decisions``, and the same for their 10 %-trimmed means, against the state's exit
  latency (target: within +-25 % or +-100 us), and the module's own count of what the holds took
  beyond the exit latency;
* a periodic task's util_avg (``/proc/PID/sched``, read by the task and by a thread on CPU 0
  while it sleeps) at each OPP of rk3399-little, relative to f_max (median of REPEAT // 3 rounds,
  at least 3; target: within +-15 %);
* the per-run overhead on the board: ``campaigns/vboard-energy.yml`` (two traced, metered 2 s
  rt-app runs) with ``--board-timing faithful`` and ``decisions``, median run time and phases.

``--clock host`` (default) and/or ``--clock virtual`` say which board clocks (docs/vboard.md, "The
board's clock") it measures, one after the other, each table under its clock's heading.

Needs root (QEMU, the rootfs) and gcc (the guest helper bench/vboard_calib.c is built static).
Leaves the board down. Quote the figures with ``uptime``'s load: under host load the TCG guest's
timer interrupts arrive late and the latency figures widen.

    .venv/bin/python bench/vboard_calibration.py [--clock host|virtual]... [--repeat N] [--skip-overhead] [--smoke]

``--smoke`` (what ``make test`` runs so that the benchmark cannot rot) boots nothing: it builds
the guest helper and checks that the variants it boots are valid specs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VARIANT = REPO / "kernels" / "ondemand-bursty" / "without.yml"
#: the Hi3660 idle-state table's variant (a cpuidle driver cannot be unloaded: another boot)
HI3660_VARIANT = REPO / "kernels" / "teo-util" / "menu.yml"
OVERHEAD_CAMPAIGN = REPO / "campaigns" / "vboard-energy.yml"
CPU = 3
POLICY = "/sys/devices/system/cpu/cpufreq/policy2"
HELPER = "/tmp/vboard_calib"
OPP_TABLES = ("rk3399-little", "rk3399-big", "hi3660-little")
TIMING = "/sys/module/lisa_emu_{}/parameters/timing"


class Board:
    def __init__(self, board):
        self.board = board

    def sh(self, command: str, timeout: float = 600) -> str:
        return self.board.run(command, timeout=timeout).stdout.decode(errors="replace")

    def push_helper(self, helper: Path) -> None:
        self.board.push(helper, HELPER)
        self.sh(f"chmod +x {HELPER}")

    def timing(self, value: str) -> None:
        self.sh(f"echo {value} > {TIMING.format('cpuidle')}; echo {value} > {TIMING.format('cpufreq')}")

    def reload(self, module: str, params: str) -> None:
        self.sh(f"rmmod {module} && modprobe {module} {params}")

    def opps(self) -> list[int]:
        return sorted(int(f) for f in self.sh(f"cat {POLICY}/scaling_available_frequencies").split())

    def set_khz(self, khz: int) -> None:
        self.sh(f"echo userspace > {POLICY}/scaling_governor; echo {khz} > {POLICY}/scaling_setspeed")

    def spin_rate(self, seconds: float) -> float:
        out = self.sh(f"taskset -c {CPU} {HELPER} spin {seconds}")
        m = re.search(r"iterations (\d+) seconds ([\d.]+)", out)
        return int(m[1]) / float(m[2])


def _median(values) -> float:
    return statistics.median(values)


def throughput(b: Board, repeat: int, seconds: float = 0.25) -> float:
    """Per OPP table and OPP below the top one: ``repeat`` pairs of spins, one at the top OPP then
    one at that OPP, switched by the guest itself (the host's speed drifts: each pair is a
    fraction of a second); the median of the pairs' ratios. Returns the best top-OPP rate of
    rk3399-little (iterations/s), to size the periodic task."""
    print(f"\n## Throughput of a CPU-bound loop per OPP (CPU 3; pairs of {seconds} s at the top OPP then "
          f"{seconds} s at the OPP; median of {repeat} pairs' ratios)\n")
    print("| table | OPP (MHz) | f/f_max | throughput / f_max's | error |")
    print("|---|---|---|---|---|")
    top_rate = 0.0
    for table in OPP_TABLES:
        b.reload("lisa_emu_cpufreq", f"opps={table}")
        b.timing("faithful")
        opps = b.opps()
        b.set_khz(opps[-1])
        for khz in opps[:-1]:
            out = b.sh(f"taskset -c {CPU} {HELPER} pairs {POLICY}/scaling_setspeed {opps[-1]} {khz} "
                       f"{seconds} {repeat}")
            pairs = [(float(m[1]), float(m[2])) for m in re.finditer(r"pair (\S+) (\S+)", out)]
            if table == OPP_TABLES[0]:
                top_rate = max([top_rate, *(top for top, _ in pairs)])
            expected, got = khz / opps[-1], _median([low / top for top, low in pairs])
            print(f"| {table} | {khz // 1000} | {expected:.3f} | {got:.3f} | {100 * (got / expected - 1):+.1f} % |")
    return top_rate


def _lateness(b: Board, period_us: int, count: int) -> list[float]:
    out = b.sh(f"taskset -c {CPU} {HELPER} periodic {period_us} 1000 {count}")
    return [float(x) for x in re.findall(r"lateness_us ([\d.]+)", out)][1:]  # the first has no sleep before it


def _holds(b: Board) -> dict[str, tuple[int, int, int]]:
    out = b.sh("cat /sys/kernel/debug/lisa_emu_cpuidle/holds")
    return {f[0]: (int(f[1]), int(f[2]), int(f[3])) for f in (line.split() for line in out.splitlines()) if len(f) == 4}


IDLE_HEADER = ("| table | state | exit latency (us) | lateness decisions (us) | lateness faithful (us) "
               "| extra (us) | error | extra, trimmed means (us) | error | holds beyond the exit latency, mean (us) |"
               "\n|---|---|---|---|---|---|---|---|---|---|")


def _trimmed_mean(values: list[float], cut: float = 0.1) -> float:
    """The mean without the lowest and highest ``cut`` of the values: what a wake-up costs on
    average (the module pays the exit latency on average, carrying each hold's error to the next),
    without the rare many-millisecond delays a shared host gives a TCG timer."""
    values = sorted(values)
    k = int(len(values) * cut)
    return statistics.fmean(values[k:len(values) - k])


def idle_latency(b: Board, count: int, table: str) -> None:
    """The idle states of ``table``, the one the running kernel's lisa_emu_cpuidle has (a cpuidle
    driver cannot be unloaded: each table is its own boot)."""
    cpuidle = f"/sys/devices/system/cpu/cpu{CPU}/cpuidle"
    b.set_khz(b.opps()[-1])  # no frequency stall in the way
    if True:
        names = b.sh(f"cat {cpuidle}/state*/name").split()
        latencies = [int(x) for x in b.sh(f"cat {cpuidle}/state*/latency").split()]
        for k, (name, latency) in enumerate(zip(names, latencies)):
            b.sh("; ".join(f"echo {int(i != k)} > {cpuidle}/state{i}/disable" for i in range(len(names))))
            medians, means = {}, {}
            before = _holds(b).get(name, (0, 0, 0))
            for timing in ("decisions", "faithful"):
                b.timing(timing)
                lateness = _lateness(b, 20000, count)
                medians[timing], means[timing] = _median(lateness), _trimmed_mean(lateness)
            after = _holds(b).get(name, (0, 0, 0))
            holds = after[0] - before[0]
            late = (after[2] - before[2]) / holds / 1e3 if holds else float("nan")
            extra = medians["faithful"] - medians["decisions"]
            extra_mean = means["faithful"] - means["decisions"]
            errors = [f"{100 * (x / latency - 1):+.0f} %" if latency >= 10 else "(not paid: < 10 us)"
                      for x in (extra, extra_mean)]
            print(f"| {table} | {name} | {latency} | {medians['decisions']:.0f} | {medians['faithful']:.0f} "
                  f"| {extra:+.0f} | {errors[0]} | {extra_mean:+.0f} | {errors[1]} | {late:.0f} |")
        b.sh("; ".join(f"echo 0 > {cpuidle}/state{i}/disable" for i in range(len(names))))


def _top_rate(b: Board) -> float:
    b.reload("lisa_emu_cpufreq", f"opps={OPP_TABLES[0]}")
    b.set_khz(b.opps()[-1])
    return max(b.spin_rate(1.0) for _ in range(3))


def util_avg(b: Board, top_rate: float, repeat: int) -> None:
    """``repeat`` rounds, each visiting every OPP of rk3399-little from the top: a periodic task's
    mean util_avg over 10 s (the helper's ``util`` mode, 2 s of warm-up left out). The error is the
    median over rounds of each round's ratio to its own f_max figure: the host's speed drifts
    between rounds, which moves a round's figures together."""
    # 2 ms of the loop at f_max every 16 ms. A shorter burst leaves the lower OPPs' figures further
    # below f_max's (docs/vboard.md#calibration says why): with 1 ms, -32 % at 408 MHz
    iterations = int(top_rate * 0.002)
    periods, warmup = 750, 125
    print(f"\n## util_avg of a periodic task per OPP (CPU 3, 16 ms period, 2 ms of the loop at f_max; per round "
          f"and OPP the mean of (trough + peak) / 2 over {periods - warmup} periods; {repeat} rounds)\n")
    print("| OPP (MHz) | loop per period (ms) | util_avg, median of rounds | / f_max's, median of rounds | error |")
    print("|---|---|---|---|---|")
    b.reload("lisa_emu_cpufreq", f"opps={OPP_TABLES[0]}")
    b.timing("faithful")
    opps = b.opps()
    rounds: list[dict[int, float]] = []
    for _ in range(repeat):
        means = {}
        for khz in reversed(opps):
            b.set_khz(khz)
            out = b.sh(f"taskset -c {CPU} {HELPER} util 16000 {iterations} {periods}")
            pairs = [(int(m[1]), int(m[2])) for m in re.finditer(r"^util (-?\d+) (-?\d+)$", out, re.M)][warmup:]
            means[khz] = statistics.fmean((trough + peak) / 2 for trough, peak in pairs if trough >= 0 and peak >= 0)
        rounds.append(means)
    for khz in opps:
        ratio = _median([r[khz] / r[opps[-1]] for r in rounds])
        print(f"| {khz // 1000} | {2.0 * opps[-1] / khz:.1f} | {_median([r[khz] for r in rounds]):.0f} | {ratio:.3f} "
              f"| {100 * (ratio - 1):+.1f} % |")


def overhead(repeat: int, clock: str) -> None:
    print(f"\n## Per-run overhead: {OVERHEAD_CAMPAIGN.relative_to(REPO)} (2 traced, metered runs of a 2 s "
          f"rt-app task set), x{repeat}\n")
    print("| timing | runs | median run, kernel deploy excluded (s) | median phases (s) |")
    print("|---|---|---|---|")
    lisa_ext = Path(sys.executable).with_name("lisa-ext")
    for timing in ("decisions", "faithful"):
        durations, phases = [], {}
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run([str(lisa_ext), "campaign", "run", str(OVERHEAD_CAMPAIGN), "--no-progress",
                                "--board-timing", timing, "--board-clock", clock, "--out", f"{tmp}/c"],
                               check=True, capture_output=True)
                for meta in Path(tmp, "c", "runs").glob("*/*/*/meta.json"):
                    data = json.loads(meta.read_text())
                    durations.append(data["duration_s"] - data["phases_s"].get("deploy", 0.0))
                    for k, v in data["phases_s"].items():
                        phases.setdefault(k, []).append(v)
        median_phases = ", ".join(f"{k} {_median(v):.1f}" for k, v in phases.items())
        print(f"| {timing} | {len(durations)} | {_median(durations):.1f} | {median_phases} |")


def _build_helper(out: Path) -> None:
    subprocess.run(["gcc", "-static", "-pthread", "-O2", "-o", str(out), str(REPO / "bench" / "vboard_calib.c")],
                   check=True)


def smoke() -> int:
    """The guest helper builds and the variants load; no board is booted."""
    from lisa_ext.kernel.spec import load_variant_spec

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        _build_helper(Path(tmp) / "vboard_calib")
        print(f"guest helper built (static) in {time.monotonic() - t0:.2f} s")
    for variant in (VARIANT, HI3660_VARIANT):
        print(f"variant {load_variant_spec(variant).name}: ok")
    print("skipped: the measurements, which boot the board (--smoke boots nothing)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="pairs per OPP (default 9)")
    parser.add_argument("--wakeups", type=int, default=100, help="wake-ups per idle state and timing")
    parser.add_argument("--skip-overhead", action="store_true", help="no per-run overhead campaign")
    parser.add_argument("--only", choices=("throughput", "idle", "util"), action="append",
                        help="measure only this (repeatable; default: all)")
    parser.add_argument("--running", action="store_true",
                        help=f"measure the board as it is up (its kernel and modules), leave it up; "
                             f"default: boot {VARIANT.relative_to(REPO)}, bring the board down after")
    parser.add_argument("--smoke", action="store_true", help="build the guest helper only; boot nothing")
    parser.add_argument("--clock", choices=("host", "virtual"), action="append",
                        help="the board clock to measure on (repeatable: one after the other; default host; "
                             "with --running, the running board's)")
    args = parser.parse_args()
    if args.smoke:
        return smoke()

    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard.board import VirtualBoard

    print(f"load before: {os.getloadavg()[0]:.2f} (1 min)")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        helper = Path(tmp) / "vboard_calib"
        _build_helper(helper)
        target = BoardTarget(VirtualBoard())
        clocks = [target.clock] if args.running else list(dict.fromkeys(args.clock or ["host"]))
        try:
            for clock in clocks:
                print(f"\n# On the {clock} clock")
                measure(target, clock, helper, args)
        finally:
            if not args.running:
                target.board.down()
    print(f"\nwall time {time.monotonic() - t0:.0f} s; load after: {os.getloadavg()[0]:.2f} (1 min)")
    return 0


def measure(target, clock: str, helper: Path, args: argparse.Namespace) -> None:
    """Every measurement ``args`` asks for, on the board booted (or running) on ``clock``."""
    from lisa_ext.kernel.deploy import deploy_variant

    only = set(args.only or ("throughput", "idle", "util"))
    if not args.running:
        target.use_clock(clock)
        deploy_variant(target, VARIANT)
    b = Board(target.board)
    b.push_helper(helper)
    top_rate = throughput(b, args.repeat) if "throughput" in only else 0.0
    if "util" in only:
        util_avg(b, top_rate or _top_rate(b), max(3, args.repeat // 3))
    if "idle" in only:
        print(f"\n## Extra wake-up latency per idle state (CPU 3 held in the state, its other states "
              f"disabled, a 20 ms periodic task, {args.wakeups} wake-ups per timing, medians)\n")
        print(IDLE_HEADER)
        b.reload("lisa_emu_cpufreq", f"opps={OPP_TABLES[0]}")
        idle_latency(b, args.wakeups, b.sh("cat /sys/module/lisa_emu_cpuidle/parameters/table").strip())
        if not args.running:
            deploy_variant(target, HI3660_VARIANT)
            b.push_helper(helper)
            idle_latency(b, args.wakeups, "hi3660-little")
    if not args.skip_overhead and not args.running:
        overhead(max(1, args.repeat // 2), clock)


if __name__ == "__main__":
    raise SystemExit(main())
