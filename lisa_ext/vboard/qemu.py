"""Launch and stop the board's QEMU process (``qemu-system-x86_64`` or ``qemu-system-aarch64``).

The x86_64 guest is a q35 machine under TCG (no KVM needed) with 4 vCPUs laid
out as 2 sockets x 2 cores: each socket has its own emulated L3, so the guest
kernel builds two LLC scheduling domains and workqueue affinity scopes (``cpu``,
``smt``, ``cache``, ``numa``, ``system``) really differ. The arm64 guest is a
``virt`` machine (GICv3, TCG) booted with a device tree describing a real SoC's
clusters (:mod:`lisa_ext.devicetree`); its CPUs all run as the vCPU model
``cpu`` (QEMU gives every CPU of a machine the same model). Networking is QEMU's
user-mode stack with ``restrict=on`` (the guest cannot reach anything beyond
QEMU) and one forward: guest port 22 to a loopback port on the host.

Disks: ``/dev/vda`` the rootfs overlay, ``/dev/vdb`` the variant's modules,
``/dev/vdc`` a scratch disk for I/O workloads, throttled to ``scratch_iops``
I/Os per second. Unthrottled, TCG completes a virtio read so fast that a
synchronous reader rarely sleeps; throttled, every I/O is a real wait in
``io_schedule()`` (iowait), as on a phone's eMMC.

Clock (``clock``): ``virtual``, the default, is QEMU's icount
(:func:`clock_args`, run by the QEMU :mod:`lisa_ext.vboard.qemu_build` patches so that each vCPU
has its own instruction clock): guest time advances with the instructions the vCPUs run, 1 ns per
instruction, and an idle machine waits in real time for its next timer and lands on it, so timers
fire exactly and host load cannot move them; the guest's date follows that clock too (``-rtc
clock=vm``). ``host``, TCG's own, kept for comparison: the guest's time is the host's (its timer
interrupts come as late as the host lets the QEMU thread run).

QEMU daemonises itself, writes a pidfile and keeps a QMP socket, so any later
``lisa-ext`` process can query or stop it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lisa_ext.errors import UserError
from lisa_ext.vboard import qemu_build

__all__ = [
    "CLOCKS",
    "CLOCKS_HELP",
    "DEFAULT_CLOCK",
    "QEMU_BINARIES",
    "QemuMachine",
    "dump_dtb",
    "qemu_command",
    "launch",
    "running_pid",
    "qmp_execute",
    "terminate",
    "free_loopback_port",
    "clock_args",
    "vcpu_program_counters",
]

#: the clocks the board's time can run on (the module docstring)
CLOCKS = ("host", "virtual")
DEFAULT_CLOCK = "virtual"
#: what each clock means, for the spec schema and the command lines that choose one
CLOCKS_HELP = ("virtual (the board's default): an instruction clock, each wake-up's latency the guest's "
               "whatever the host's load, 3-25x slower than the host when busy, as fast as it when idle; "
               "host: the board's time is the host's, its latencies move with host load (every other "
               "target runs on its own clock)")

#: the QEMU system emulator of each board architecture
QEMU_BINARIES = {"x86_64": "qemu-system-x86_64", "arm64": "qemu-system-aarch64"}


@dataclass(frozen=True)
class QemuMachine:
    """Everything QEMU needs for one boot of the board."""

    kernel: Path
    cmdline: str
    rootfs: Path  # qcow2 overlay of the cached image
    modules_disk: Path | None
    ssh_port: int
    serial_log: Path
    pidfile: Path
    qmp_socket: Path
    scratch_disk: Path | None = None
    # The guest's shape and CPU: lisa_ext.vboard.board.BoardSettings says why.
    sockets: int = 2
    cores_per_socket: int = 2
    memory_mb: int = 1024
    accel: str = "tcg,thread=single"
    cpu: str = "max,vendor=GenuineIntel"
    #: IOPS limit of the scratch disk: each I/O on it is a real wait (an eMMC-like device)
    scratch_iops: int = 500
    arch: str = "x86_64"
    #: arm64: the board's device tree (its CPUs are ``sockets`` x ``cores_per_socket`` only in number)
    dtb: Path | None = None
    #: ``host`` or ``virtual`` (the module docstring)
    clock: str = DEFAULT_CLOCK

    @property
    def vcpus(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def binary(self) -> str:
        # the virtual clock runs on our QEMU, whose icount gives each vCPU its own clock (built once)
        return str(qemu_build.virtual_clock_qemu(self.arch)) if self.clock == "virtual" else QEMU_BINARIES[self.arch]


def clock_args(clock: str) -> list[str]:
    """QEMU's arguments for the board's ``clock``: none for the host's, the icount of
    :func:`lisa_ext.vboard.qemu_build.icount_args` for the virtual one."""
    return qemu_build.icount_args() if clock == "virtual" else []


def _machine_args(machine: QemuMachine) -> list[str]:
    """What decides the hardware QEMU emulates (and so the device tree it generates) and its clock."""
    clock = clock_args(machine.clock)
    if machine.arch == "arm64":
        return ["-machine", "virt,gic-version=3", "-accel", machine.accel, *clock, "-cpu", machine.cpu,
                "-smp", str(machine.vcpus), "-m", str(machine.memory_mb)]
    return ["-machine", "q35", "-accel", machine.accel, *clock, "-cpu", machine.cpu,
            "-smp", f"{machine.vcpus},sockets={machine.sockets},cores={machine.cores_per_socket},threads=1",
            "-m", str(machine.memory_mb)]


def dump_dtb(machine: QemuMachine, dest: Path) -> Path:
    """The device tree QEMU generates for the arm64 ``machine`` (``-machine dumpdtb``)."""
    args = _machine_args(machine)
    args[1] += f",dumpdtb={dest}"
    cmd = [machine.binary, *args, "-nodefaults", "-no-user-config", "-display", "none"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise UserError(f"{machine.binary} not found (run: bash scripts/install-system-packages.sh)") from None
    if proc.returncode != 0 or not dest.is_file():
        raise UserError(f"{machine.binary} could not dump its device tree: {proc.stderr.strip()}")
    return dest


def qemu_command(machine: QemuMachine) -> list[str]:
    arm64 = machine.arch == "arm64"
    cmd = [
        machine.binary,
        *_machine_args(machine),
        "-nodefaults", "-no-user-config", "-display", "none", "-vga", "none",
        # A guest reboot or panic ends QEMU instead of looping (kexec does not reset).
        "-no-reboot",
        "-kernel", str(machine.kernel),
        "-append", machine.cmdline,
        "-drive", f"file={machine.rootfs},if=virtio,format=qcow2,cache=unsafe",
        "-netdev", f"user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:{machine.ssh_port}-:22",
        "-device", "virtio-net-pci,netdev=net0",
        # the arm64 vCPU models have no RNDR: sshd's entropy comes from the host
        *(["-device", "virtio-rng-pci"] if arm64 else []),
        "-chardev", f"file,id=serial0,path={machine.serial_log}",
        "-serial", "chardev:serial0",
        "-qmp", f"unix:{machine.qmp_socket},server=on,wait=off",
        "-pidfile", str(machine.pidfile),
        "-daemonize",
    ]
    disks = []
    if machine.modules_disk is not None:  # /dev/vdb
        disks += ["-drive", f"file={machine.modules_disk},if=virtio,format=raw,readonly=on"]
    if machine.scratch_disk is not None:  # /dev/vdc
        disks += ["-drive", f"file={machine.scratch_disk},if=virtio,format=raw,cache=unsafe,"
                            f"throttling.iops-total={machine.scratch_iops}"]
    at = cmd.index("-netdev")
    cmd[at:at] = disks
    if arm64:
        if machine.dtb is None:
            raise UserError("the arm64 board boots with a device tree (lisa_ext.devicetree)")
        at = cmd.index("-append") + 2
        cmd[at:at] = ["-dtb", str(machine.dtb)]
    return cmd


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now (QEMU binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def running_pid(pidfile: Path) -> int | None:
    """PID of the QEMU named in ``pidfile`` if that process still is QEMU, else None."""
    try:
        pid = int(Path(pidfile).read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    argv0 = cmdline.split(b"\0")[0]
    return pid if any(binary.encode() in argv0 for binary in QEMU_BINARIES.values()) else None


def launch(machine: QemuMachine) -> int:
    """Start QEMU in the background; return its PID once it has daemonised."""
    machine.pidfile.unlink(missing_ok=True)
    machine.qmp_socket.unlink(missing_ok=True)
    machine.serial_log.write_text("")
    try:
        proc = subprocess.run(qemu_command(machine), capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise UserError(f"{machine.binary} not found (run: bash scripts/install-system-packages.sh)") from None
    if proc.returncode != 0:
        raise UserError(f"{machine.binary} failed to start: {proc.stderr.strip() or proc.stdout.strip()}")
    pid = running_pid(machine.pidfile)
    if pid is None:
        raise UserError(f"{machine.binary} exited right after starting; serial log: {machine.serial_log}")
    return pid


def qmp_execute(qmp_socket: Path, command: str, timeout: float = 10.0, arguments: dict | None = None) -> dict:
    """Run one QMP command and return its reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(qmp_socket))
        stream = s.makefile("rw")
        json.loads(stream.readline())  # greeting
        for request in ({"execute": "qmp_capabilities"}, {"execute": command, "arguments": arguments or {}}):
            stream.write(json.dumps(request) + "\n")
            stream.flush()
            while True:
                line = stream.readline()
                if not line:
                    return {}
                reply = json.loads(line)
                if "event" not in reply:
                    break
        return reply


def vcpu_program_counters(qmp_socket: Path, timeout: float = 10.0) -> list[str]:
    """Where each vCPU is (``info registers -a``: x86 RIP, arm64 PC), for a guest that hangs."""
    reply = qmp_execute(qmp_socket, "human-monitor-command", timeout,
                        {"command-line": "info registers -a"}).get("return", "")
    return re.findall(r"\b(?:RIP|PC)=([0-9a-f]+)", reply if isinstance(reply, str) else "")


def _wait_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def terminate(pidfile: Path, qmp_socket: Path, *, grace: float = 0.0) -> bool:
    """Stop the QEMU of ``pidfile``: wait ``grace`` seconds for the guest to power
    off by itself, then QMP ``quit``, then SIGTERM, then SIGKILL.

    Returns whether a QEMU was running.
    """
    pid = running_pid(pidfile)
    if pid is None:
        return False
    if grace and _wait_exit(pid, grace):
        return True
    try:
        qmp_execute(qmp_socket, "quit")
    except OSError:
        pass
    if _wait_exit(pid, 10):
        return True
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        if _wait_exit(pid, 5):
            return True
    raise UserError(f"QEMU (pid {pid}) did not stop")
