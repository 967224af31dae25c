"""Per-CPU capacity of the x86 virtual board on QEMU's instruction clock: one counter vs one per vCPU.

Boots the board's baseline kernel twice on an instruction clock (``-icount shift=0``: 1 ns per
instruction): on Debian's stock QEMU, whose one instruction counter the busy vCPUs share, and on
the patched QEMU of :mod:`lisa_ext.vboard.qemu_build` (``percpu=on``: one clock per vCPU). On each:

- a busy loop (a fixed bash loop, pinned) on 1, 2 and 4 CPUs at once: the guest time each copy
  takes (median over the copies and repeats) and its ratio to the loop alone; per-vCPU clocks
  keep it at 1.0, a shared counter makes it about the number of busy CPUs;
- schbench ``-m 1 -t 1`` and ``-m 2 -t 1`` (one run each, ``--runtime`` guest seconds): median
  request latency and average RPS; per-vCPU clocks keep the request latency of two message
  threads at that of one.

The cpufreq governor is set to ``performance`` so that OPPs play no part. The board runs from a
run directory and SSH port of its own, so a board already up is left alone. Host wall time of
each step is printed too (what the instruction clock costs).

    .venv/bin/python bench/vboard_clock.py [--clock stock|percpu|both] [--repeat N] [--runtime S] [--patched QEMU]

``--smoke`` (what ``make test`` runs so that the benchmark cannot rot) builds and boots nothing: it
times the cache's lookup of the patched QEMU and asks that binary its version, when this cache
already holds it.
"""

from __future__ import annotations

import argparse
import re
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = REPO / "kernels" / "iowait-boost" / "baseline.yml"
SCHBENCH_SRC = REPO.parent / "shared" / "src" / "schbench"
#: iterations of the guest's busy loop (about 0.2-0.4 s of guest time alone)
LOOP_ITERATIONS = 100_000
STOCK_ICOUNT = ["-icount", "shift=0,sleep=off,align=off", "-rtc", "clock=vm"]


def clock_qemu(clock: str, patched: str | None) -> tuple[str, list[str]]:
    """The QEMU binary and clock arguments of ``clock`` ("stock" or "percpu"); ``patched``: a
    patched qemu-system-x86_64 built elsewhere, instead of the cache's."""
    from lisa_ext.vboard import qemu_build

    if clock == "stock":
        return "qemu-system-x86_64", STOCK_ICOUNT
    return patched or str(qemu_build.virtual_clock_qemu("x86_64")), qemu_build.icount_args()


def use_clock(binary: str, clock_args: list[str]) -> None:
    """Make every later board launch run ``binary`` with ``clock_args`` (replacing any clock
    arguments the board itself adds), whatever clock the board's settings name."""
    from lisa_ext.vboard import qemu

    original = getattr(qemu.qemu_command, "__wrapped__", qemu.qemu_command)

    def command(machine):
        cmd = original(machine)
        for option in ("-icount", "-rtc"):
            while option in cmd:
                at = cmd.index(option)
                del cmd[at:at + 2]
        at = cmd.index("-accel") + 2
        cmd[at:at] = clock_args
        cmd[0] = binary
        return cmd

    command.__wrapped__ = original
    qemu.qemu_command = command


def boot(run_dir: Path):
    """The board, booted on the baseline kernel, from ``run_dir`` on a free port."""
    from lisa_ext.kernel.build import build_variant
    from lisa_ext.kernel.deploy import modules_to_load
    from lisa_ext.vboard import qemu
    from lisa_ext.vboard.board import BoardSettings, VirtualBoard

    artefacts = build_variant(BASELINE)
    board = VirtualBoard(BoardSettings(ssh_port=qemu.free_loopback_port()), run_dir=run_dir)
    board.up(artefacts.image, modules_dir=artefacts.modules_dir, release=artefacts.release,
             load=modules_to_load(artefacts), cmdline=artefacts.cmdline, label="vboard_clock bench")
    board.run("for g in /sys/devices/system/cpu/cpufreq/policy*/scaling_governor; do "
              "[ -e \"$g\" ] && echo performance > \"$g\"; done; true")
    return board


def busy_loop_us(board, cpus: int) -> list[float]:
    """Guest microseconds each of ``cpus`` pinned copies of the busy loop took, run at once."""
    loop = (f"s=$(date +%s%N); i=0; while [ $i -lt {LOOP_ITERATIONS} ]; do i=$((i+1)); done; "
            "e=$(date +%s%N); echo $(( (e - s) / 1000 ))")
    command = " ".join(f"taskset -c {cpu} bash -c {shlex.quote(loop)} &" for cpu in range(cpus)) + " wait"
    out = board.run(command).stdout.decode()
    values = [float(v) for v in out.split()]
    if len(values) != cpus:
        raise RuntimeError(f"busy loop on {cpus} CPUs printed {out!r}")
    return values


def install_schbench(board) -> None:
    from lisa_ext.campaign.tools import build_tool

    board.push(build_tool("schbench", SCHBENCH_SRC), "/usr/local/bin/schbench")
    board.run("chmod 755 /usr/local/bin/schbench")


def schbench(board, message_threads: int, runtime: int) -> tuple[float, float]:
    """Median request latency (us) and average RPS of ``schbench -m N -t 1``."""
    out = board.run(f"schbench -m {message_threads} -t 1 -r {runtime} -i {runtime} 2>&1",
                    timeout=runtime * 60 + 600).stdout.decode()
    block = out.rsplit("Request Latencies percentiles", 1)[-1]
    median = re.search(r"50\.0th:\s+(\d+)", block)
    rps = re.search(r"average rps:\s+([\d.]+)", out)
    if not median or not rps:
        raise RuntimeError(f"schbench -m {message_threads} -t 1 printed {out!r}")
    return float(median[1]), float(rps[1])


def measure(clock: str, repeat: int, runtime: int, patched: str | None) -> None:
    binary, clock_args = clock_qemu(clock, patched)
    use_clock(binary, clock_args)
    print(f"\n== {clock}: {binary} {' '.join(clock_args)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="vboard-clock-") as run_dir:
        started = time.monotonic()
        board = boot(Path(run_dir))
        print(f"boot: {time.monotonic() - started:.0f} s host", flush=True)
        try:
            alone = None
            for cpus in (1, 2, 4):
                started = time.monotonic()
                runs = [us for _ in range(repeat) for us in busy_loop_us(board, cpus)]
                median = statistics.median(runs)
                alone = alone or median
                print(f"busy loop on {cpus} CPU(s): median {median / 1000:8.1f} ms guest per copy, "
                      f"x{median / alone:.2f} of alone  (min {min(runs) / 1000:.1f}, max {max(runs) / 1000:.1f}; "
                      f"{time.monotonic() - started:.0f} s host)", flush=True)
            install_schbench(board)
            base = None
            for threads in (1, 2):
                started = time.monotonic()
                latency, rps = schbench(board, threads, runtime)  # its p50: a median over every request
                base = base or latency
                print(f"schbench -m {threads} -t 1 -r {runtime}: request p50 {latency:8.0f} us "
                      f"(x{latency / base:.2f} of -m 1), average rps {rps:8.1f}  "
                      f"({time.monotonic() - started:.0f} s host)", flush=True)
        finally:
            board.down()


def smoke() -> int:
    """The cached patched QEMU's lookup and version, only when this cache already holds it."""
    import subprocess

    from lisa_ext.vboard import qemu_build
    from lisa_ext.workbench import cache_root

    root = cache_root() / "qemu" / qemu_build.build_key(qemu_build.debian_source_version())
    if not (root / "bin").is_dir():
        print(f"skipped: no virtual-clock QEMU built in {root} yet, and --smoke builds nothing")
        return 0
    started = time.monotonic()
    binary = qemu_build.virtual_clock_qemu("x86_64")
    looked_up = time.monotonic() - started
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                             check=True).stdout.splitlines()[0]
    print(f"virtual-clock QEMU lookup (cached): {looked_up * 1e3:.1f} ms; {version}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clock", choices=("stock", "percpu", "both"), default="both")
    parser.add_argument("--repeat", type=int, default=3, help="busy-loop runs per CPU count")
    parser.add_argument("--runtime", type=int, default=3, help="schbench guest seconds per run")
    parser.add_argument("--patched", metavar="QEMU", help="a patched qemu-system-x86_64 to use instead of "
                        "building one (lisa_ext.vboard.qemu_build)")
    parser.add_argument("--smoke", action="store_true",
                        help="build and boot nothing: the cached patched QEMU's lookup, if it is built")
    args = parser.parse_args()
    if args.smoke:
        return smoke()
    for clock in (("percpu", "stock") if args.clock == "both" else (args.clock,)):
        measure(clock, args.repeat, args.runtime, args.patched)
    return 0


if __name__ == "__main__":
    sys.exit(main())
