"""The virtual-clock QEMU (lisa_ext.vboard.qemu_build): built from Debian's QEMU source with the
project's patch, it reports its per-vCPU clock switch, and busy vCPUs each run at the full
instruction rate in guest time instead of sharing one counter.

The speed check boots a bare-metal probe on the arm64 ``virt`` machine (no kernel, no rootfs):
every vCPU runs the same 20 M-instruction busy loop and times it with the generic timer, which
runs on QEMU_CLOCK_VIRTUAL; like an OS tick, each vCPU keeps a (masked) timer deadline 1 ms
ahead, so the single TCG thread switches between the vCPUs as it does under a kernel. With one
shared instruction counter each vCPU's loop takes N times longer with N vCPUs busy (checked on
Debian's stock binary, so the probe can tell); with per-vCPU clocks it takes 20 ms whatever N.
The first run builds QEMU (tens of minutes); later runs take it from the cache.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lisa_ext.errors import UserError
from lisa_ext.vboard import qemu_build

#: instructions each vCPU's busy loop runs, and so its guest time at 1 ns per instruction
PROBE_NS = 20_000_000

#: the probes' boot: CPU 0 starts the others (PSCI CPU_ON, until it fails) with x20 counting them,
#: then goes on at "started"
_START_OTHER_CPUS = r"""
        mov     x20, #1
start_next:
        cmp     x20, #8
        b.ge    started
        ldr     x0, =0xc4000003
        mov     x1, x20
        adr     x2, _start
        mov     x3, #0
        hvc     #0
        cbnz    x0, started
        add     x20, x20, #1
        b       start_next
"""
#: the probes' PL011 output: "puts" a string at x0, "puthex" x0 as 16 hex digits
_SERIAL_OUTPUT = r"""
puts:   ldr     x2, =UART
1:      ldrb    w1, [x0], #1
        cbz     w1, 2f
        str     w1, [x2]
        b       1b
2:      ret

puthex: ldr     x2, =UART
        mov     x3, #60
1:      lsr     x1, x0, x3
        and     x1, x1, #0xf
        cmp     x1, #10
        add     x4, x1, #'0'
        add     x5, x1, #('a' - 10)
        csel    x1, x4, x5, lt
        str     w1, [x2]
        subs    x3, x3, #4
        b.ge    1b
        ret
"""

PROBE_SOURCE = r"""
// Every vCPU runs the same busy loop and times it with the generic timer; CPU 0 starts
// the others (PSCI CPU_ON until it fails), waits for them, prints "cpus N freq F" and
// "cpu I ticks T" (hex) on the PL011 and powers the machine off (PSCI SYSTEM_OFF).
        .equ UART, 0x09000000
        .equ CHUNKS, 200                    // of 100k instructions
        .equ CHUNK_ITERATIONS, 49996        // 2 instructions each, + 7 per chunk
        .equ TIMER_TICKS, 62500             // 1 ms at 62.5 MHz
        .global _start
_start:
        mrs     x19, mpidr_el1
        and     x19, x19, #0xff
        cbnz    x19, work
""" + _START_OTHER_CPUS + r"""started:
        adr     x0, ncpus
        str     x20, [x0]
work:
        isb
        mrs     x21, cntvct_el0
        mov     x25, #CHUNKS
chunk:  ldr     x0, =TIMER_TICKS            // a timer deadline ahead, as an OS tick
        msr     cntv_tval_el0, x0
        mov     x0, #3                      // enabled, masked: no interrupt
        msr     cntv_ctl_el0, x0
        ldr     x22, =CHUNK_ITERATIONS
loop:   subs    x22, x22, #1
        b.ne    loop
        subs    x25, x25, #1
        b.ne    chunk
        isb
        mrs     x23, cntvct_el0
        sub     x23, x23, x21
        adr     x0, ticks
        str     x23, [x0, x19, lsl #3]
        dmb     sy
        adr     x0, done
        mov     x1, #1
        str     x1, [x0, x19, lsl #3]
        dmb     sy
        cbnz    x19, park
        adr     x0, ncpus
        ldr     x20, [x0]
        mov     x24, #0
wait:   cmp     x24, x20
        b.ge    report
        adr     x0, done
        ldr     x1, [x0, x24, lsl #3]
        cbz     x1, wait
        add     x24, x24, #1
        b       wait
report:
        adr     x0, s_cpus
        bl      puts
        mov     x0, x20
        bl      puthex
        adr     x0, s_freq
        bl      puts
        mrs     x0, cntfrq_el0
        bl      puthex
        mov     x24, #0
each:   cmp     x24, x20
        b.ge    off
        adr     x0, s_cpu
        bl      puts
        mov     x0, x24
        bl      puthex
        adr     x0, s_ticks
        bl      puts
        adr     x0, ticks
        ldr     x0, [x0, x24, lsl #3]
        bl      puthex
        add     x24, x24, #1
        b       each
off:    adr     x0, s_nl
        bl      puts
        ldr     x0, =0x84000008
        hvc     #0
park:   wfi
        b       park

""" + _SERIAL_OUTPUT + r"""
        .align 3
ncpus:  .quad 1
ticks:  .fill 8, 8, 0
done:   .fill 8, 8, 0
s_cpus: .asciz "\ncpus "
s_freq: .asciz " freq "
s_cpu:  .asciz "\ncpu "
s_ticks: .asciz " ticks "
s_nl:   .asciz "\nend\n"
"""


def test_unknown_architecture_is_one_line():
    with pytest.raises(UserError, match=r"^board architecture 'riscv': expected one of x86_64, arm64$"):
        qemu_build.virtual_clock_qemu("riscv")


def test_missing_build_dependency_is_one_line_and_builds_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path))
    monkeypatch.setattr(qemu_build, "BUILD_PACKAGES", (*qemu_build.BUILD_PACKAGES, "lisa-ext-no-such-package"))
    with pytest.raises(UserError) as raised:
        qemu_build.virtual_clock_qemu("x86_64")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("building the virtual-clock QEMU needs: lisa-ext-no-such-package ")
    assert "scripts/install-system-packages.sh" in message
    assert not list((tmp_path / "qemu").glob("*/bin"))


def test_the_build_key_follows_the_patch_and_the_source_version(monkeypatch, tmp_path):
    key = qemu_build.build_key("1:7.2+dfsg-7+deb12u18")
    assert key != qemu_build.build_key("1:7.2+dfsg-7+deb12u19")
    patch = tmp_path / "0001-x.patch"
    patch.write_bytes(qemu_build.patches()[0].read_bytes() + b"\n")
    monkeypatch.setattr(qemu_build, "patches", lambda: [patch])
    assert qemu_build.build_key("1:7.2+dfsg-7+deb12u18") != key


def _step(tmp_path: Path, script: str) -> list[str]:
    path = tmp_path / "step.sh"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return [str(path)]


def test_a_step_that_fails_printing_nothing_runs_once_more(tmp_path):
    # the first run leaves a config.log and a marker, says nothing and fails; the second passes
    step = _step(tmp_path, "if [ -e ran ]; then echo configured; exit 0; fi\n"
                           "touch ran; echo 'checking cc: broken' > config.log; exit 3\n")
    log_path = tmp_path / "build.log"
    with open(log_path, "w") as log:
        qemu_build._run(step, tmp_path, log, log_path, "configure", attempts=2)
    text = log_path.read_text()
    assert text.count("$ " + step[0]) == 2
    assert "checking cc: broken" in text and "configure ended with exit status 3 and printed nothing" in text
    assert text.rstrip().endswith("configured")


def test_a_step_that_says_why_it_failed_is_not_run_again(tmp_path):
    step = _step(tmp_path, "echo run >> runs; echo 'ERROR: no C compiler'; exit 1\n")
    log_path = tmp_path / "build.log"
    with open(log_path, "w") as log, pytest.raises(UserError) as raised:
        qemu_build._run(step, tmp_path, log, log_path, "configure", attempts=2)
    assert str(raised.value) == f"building the virtual-clock QEMU failed at configure (exit status 1); see {log_path}"
    assert (tmp_path / "runs").read_text() == "run\n"
    assert "ERROR: no C compiler" in log_path.read_text()


def test_icount_args_select_the_per_vcpu_clock():
    args = qemu_build.icount_args()
    icount = dict(item.split("=") for item in args[args.index("-icount") + 1].split(","))
    assert icount == {"shift": "0", "sleep": "on", "align": "off", "percpu": "on",
                      "quantum": str(qemu_build.QUANTUM_NS)}
    assert args[args.index("-rtc") + 1] == "clock=vm"
    assert [args[i + 1] for i, arg in enumerate(args) if arg == "-L"] == [
        "/usr/share/qemu", "/usr/share/seabios", "/usr/lib/ipxe/qemu"]


def _require_build() -> None:
    missing = qemu_build.build_dependencies_missing()
    if missing:
        pytest.skip(f"missing build dependencies: {' '.join(missing)}")


@pytest.fixture(scope="module")
def patched() -> dict[str, Path]:
    _require_build()
    return {arch: qemu_build.virtual_clock_qemu(arch) for arch in ("x86_64", "arm64")}


#: the spin-wait probe: the same loop with a YIELD hint in each iteration, 10 x 1000 of them
SPIN_PROBE_SOURCE = (PROBE_SOURCE.replace(".equ CHUNKS, 200 ", ".equ CHUNKS, 10  ")
                     .replace(".equ CHUNK_ITERATIONS, 49996", ".equ CHUNK_ITERATIONS, 1000 ")
                     .replace("loop:   subs", "loop:   yield\n        subs"))
#: what a spin-wait hint costs a vCPU when no other vCPU is busy (0004's spin quantum), in guest ns
SPIN_QUANTUM_NS = 10_000

#: the flag probe: CPU 0 runs BUSY_ITERATIONS of a busy loop (5 ms), then writes the generic timer's
#: count and a flag; the other vCPUs spin on the flag with a YIELD in each iteration and record the
#: count when they see it. Reported: "cpus N freq F", "written W", "cpu I seen S" (hex).
FLAG_PROBE_SOURCE = r"""
        .equ UART, 0x09000000
        .equ BUSY_ITERATIONS, 2500000
        .global _start
_start:
        mrs     x19, mpidr_el1
        and     x19, x19, #0xff
        cbnz    x19, spin
""" + _START_OTHER_CPUS + r"""started:
        ldr     x22, =BUSY_ITERATIONS
busy:   subs    x22, x22, #1
        b.ne    busy
        isb
        mrs     x0, cntvct_el0
        adr     x1, written
        str     x0, [x1]
        dmb     sy
        adr     x1, flag
        mov     x2, #1
        str     x2, [x1]
        dmb     sy
        mov     x24, #1
wait:   cmp     x24, x20
        b.ge    report
        adr     x0, done
        ldr     x1, [x0, x24, lsl #3]
        cbz     x1, wait
        add     x24, x24, #1
        b       wait
report:
        adr     x0, s_cpus
        bl      puts
        mov     x0, x20
        bl      puthex
        adr     x0, s_freq
        bl      puts
        mrs     x0, cntfrq_el0
        bl      puthex
        adr     x0, s_written
        bl      puts
        adr     x0, written
        ldr     x0, [x0]
        bl      puthex
        mov     x24, #1
each:   cmp     x24, x20
        b.ge    off
        adr     x0, s_cpu
        bl      puts
        mov     x0, x24
        bl      puthex
        adr     x0, s_seen
        bl      puts
        adr     x0, seen
        ldr     x0, [x0, x24, lsl #3]
        bl      puthex
        add     x24, x24, #1
        b       each
off:    adr     x0, s_nl
        bl      puts
        ldr     x0, =0x84000008
        hvc     #0
spin:   adr     x1, flag
1:      yield
        ldr     x2, [x1]
        cbz     x2, 1b
        isb
        mrs     x0, cntvct_el0
        adr     x1, seen
        str     x0, [x1, x19, lsl #3]
        dmb     sy
        adr     x1, done
        mov     x2, #1
        str     x2, [x1, x19, lsl #3]
        dmb     sy
park:   wfi
        b       park
""" + _SERIAL_OUTPUT + r"""        .align 3
flag:   .quad 0
written: .quad 0
seen:   .fill 8, 8, 0
done:   .fill 8, 8, 0
s_cpus: .asciz "\ncpus "
s_freq: .asciz " freq "
s_written: .asciz "\nwritten "
s_cpu:  .asciz "\ncpu "
s_seen: .asciz " seen "
s_nl:   .asciz "\nend\n"
"""


def _assemble(work: Path, source: str) -> Path:
    if shutil.which("aarch64-linux-gnu-as") is None or shutil.which("aarch64-linux-gnu-ld") is None:
        pytest.skip("needs binutils-aarch64-linux-gnu (gcc-aarch64-linux-gnu)")
    (work / "probe.S").write_text(source)
    subprocess.run(["aarch64-linux-gnu-as", "-o", "probe.o", "probe.S"], cwd=work, check=True)
    subprocess.run(["aarch64-linux-gnu-ld", "-Ttext=0x40200000", "-o", "probe.elf", "probe.o"], cwd=work,
                   check=True)
    return work / "probe.elf"


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    return _assemble(tmp_path_factory.mktemp("probe"), PROBE_SOURCE)


def _icount_parameters(binary: Path | str) -> set[str]:
    """The -icount suboptions the binary declares (QMP query-command-line-options)."""
    requests = [{"execute": "qmp_capabilities"},
                {"execute": "query-command-line-options", "arguments": {"option": "icount"}},
                {"execute": "quit"}]
    proc = subprocess.run([str(binary), "-machine", "none", "-nodefaults", "-no-user-config", "-display", "none",
                           "-qmp", "stdio"], input="".join(json.dumps(r) + "\n" for r in requests),
                          capture_output=True, text=True, timeout=60)
    for line in proc.stdout.splitlines():
        reply = json.loads(line)
        if isinstance(reply.get("return"), list) and reply["return"]:
            return {parameter["name"] for parameter in reply["return"][0]["parameters"]}
    raise AssertionError(f"{binary}: no icount options in {proc.stdout!r} {proc.stderr!r}")


def _run_probe(binary: Path | str, probe: Path, cpus: int, icount: list[str]) -> tuple[str, float]:
    """The probe's report on the serial port, and the generic timer's frequency it printed."""
    proc = subprocess.run([str(binary), "-machine", "virt,gic-version=3", "-cpu", "cortex-a53", "-smp", str(cpus),
                           "-m", "128", "-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio",
                           "-accel", "tcg,thread=single", *icount, "-kernel", str(probe)],
                          capture_output=True, text=True, timeout=300)
    header = re.search(r"cpus ([0-9a-f]{16}) freq ([0-9a-f]{16})", proc.stdout)
    assert header and "end" in proc.stdout, f"probe output: {proc.stdout!r} {proc.stderr!r}"
    assert int(header[1], 16) == cpus
    return proc.stdout, int(header[2], 16)


def _busy_ns(binary: Path | str, probe: Path, cpus: int, icount: list[str]) -> list[float]:
    """Guest ns each vCPU took for the probe's busy loop."""
    out, freq = _run_probe(binary, probe, cpus, icount)
    return [int(ticks, 16) * 1e9 / freq for ticks in re.findall(r"ticks ([0-9a-f]{16})", out)]


def _machine_tree(binary: Path | str, arch: str) -> str:
    """``info qtree`` and ``info pci`` of the board's machine (its CPUs, memory, disks, NIC and, on
    arm64, RNG), paused before its first instruction."""
    from lisa_ext.vboard.qemu import QemuMachine, _machine_args

    board = QemuMachine(kernel=Path("/dev/null"), cmdline="", rootfs=Path("/dev/null"), modules_disk=None,
                        ssh_port=0, serial_log=Path("/dev/null"), pidfile=Path("/dev/null"),
                        qmp_socket=Path("/dev/null"), arch=arch, clock="host",
                        cpu="cortex-a53" if arch == "arm64" else QemuMachine.cpu)
    devices = ["-drive", "file=/dev/null,if=virtio,format=raw,readonly=on",
               "-netdev", "user,id=net0,restrict=on", "-device", "virtio-net-pci,netdev=net0"]
    if arch == "arm64":
        devices += ["-device", "virtio-rng-pci"]
    requests = [{"execute": "qmp_capabilities"},
                *({"execute": "human-monitor-command", "arguments": {"command-line": f"info {what}"}}
                  for what in ("qtree", "pci")),
                {"execute": "quit"}]
    proc = subprocess.run([str(binary), *_machine_args(board), "-S", "-nodefaults", "-no-user-config",
                           "-display", "none", "-vga", "none", *devices, "-qmp", "stdio"],
                          input="".join(json.dumps(r) + "\n" for r in requests),
                          capture_output=True, text=True, timeout=60)
    texts = [reply["return"] for reply in map(json.loads, proc.stdout.splitlines())
             if isinstance(reply.get("return"), str)]
    assert len(texts) == 2 and all(texts), f"{binary}: {proc.stdout!r} {proc.stderr!r}"
    return "".join(texts)


@pytest.mark.vboard
@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_patched_binaries_build_the_boards_machine_as_stock_qemu_does(patched, arch):
    # patch 0005 leaves the other machines out of the build: the board's must lose nothing
    from lisa_ext.vboard.qemu import QEMU_BINARIES

    tree = _machine_tree(patched[arch], arch)
    assert "virtio-net-pci" in tree and "virtio-blk-pci" in tree
    assert tree == _machine_tree(QEMU_BINARIES[arch], arch)


@pytest.mark.vboard
def test_patched_binaries_report_the_per_vcpu_clock(patched):
    for binary in patched.values():
        assert {"shift", "sleep", "percpu", "quantum"} <= _icount_parameters(binary)


@pytest.mark.vboard
def test_busy_vcpus_each_run_at_full_speed(patched, probe):
    alone = _busy_ns(patched["arm64"], probe, 1, qemu_build.icount_args())
    assert alone[0] == pytest.approx(PROBE_NS, rel=0.01)
    for cpus in (2, 4):
        each = _busy_ns(patched["arm64"], probe, cpus, qemu_build.icount_args())
        assert len(each) == cpus
        assert each == pytest.approx([alone[0]] * cpus, rel=0.01), f"{cpus} busy vCPUs: {each}"


@pytest.mark.vboard
def test_stock_icount_shares_one_counter_between_busy_vcpus(probe):
    """What the patch changes: Debian's binary, same clock but no percpu, 4 busy vCPUs."""
    if shutil.which("qemu-system-aarch64") is None:
        pytest.skip("needs qemu-system-aarch64 (qemu-system-arm)")
    stock = ["-icount", "shift=0,sleep=off,align=off", "-rtc", "clock=vm"]
    assert "percpu" not in _icount_parameters("qemu-system-aarch64")
    alone = _busy_ns("qemu-system-aarch64", probe, 1, stock)
    each = _busy_ns("qemu-system-aarch64", probe, 4, stock)
    assert min(each) > 3 * alone[0], each


@pytest.mark.vboard
def test_a_lone_spinning_vcpu_waits_a_spin_quantum_per_hint(patched, tmp_path):
    """0002/0004: a YIELD (x86: PAUSE) ends its TB and goes round the TCG loop, ~1.5 us of host time.
    With no other vCPU busy only time (or an interrupt) can end a spin, and a hint costs the spin
    quantum: a udelay()-style wait for time takes ~1/100 of the iterations it took at 100 ns a hint
    (the x86 guest's boot: 50-70 s of host time at one instruction per hint, docs/vboard.md) and
    overshoots by at most 10 us. The stock clock is unchanged."""
    spin = _assemble(tmp_path, SPIN_PROBE_SOURCE)
    iterations = 10 * 1000
    charged = _busy_ns(patched["arm64"], spin, 1, qemu_build.icount_args())[0]
    assert charged == pytest.approx(iterations * (SPIN_QUANTUM_NS + 3), rel=0.02)
    stock = _busy_ns(patched["arm64"], spin, 1, ["-icount", "shift=0,sleep=off,align=off", "-rtc", "clock=vm"])[0]
    assert stock < iterations * 10, stock


@pytest.mark.vboard
@pytest.mark.parametrize("spinners", [1, 3])
def test_a_spinning_vcpu_sees_a_busy_ones_write_at_most_a_spin_quantum_late(patched, tmp_path, spinners):
    """0004: a vCPU polling a flag (poll_idle, a lock) with a spin-wait hint in its loop sees the busy
    vCPU's write never before it was written in the writer's time, and at most a spin quantum
    after. With 0002 alone the poller's clock crawled 100 ns a hint behind the busy vCPU, which ran a
    quantum (100 us) ahead of it: the write was seen in the poller's past, or up to 100 us late."""
    probe = _assemble(tmp_path, FLAG_PROBE_SOURCE)
    out, freq = _run_probe(patched["arm64"], probe, 1 + spinners, qemu_build.icount_args())
    written = int(re.search(r"written ([0-9a-f]{16})", out)[1], 16)
    seen = [int(ticks, 16) for ticks in re.findall(r"seen ([0-9a-f]{16})", out)]
    assert len(seen) == spinners
    late_ns = [(ticks - written) * 1e9 / freq for ticks in seen]
    assert all(0 <= late <= SPIN_QUANTUM_NS + 1_000 for late in late_ns), late_ns