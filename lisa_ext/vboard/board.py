"""The virtual board as one object: boot a kernel, reach it over SSH, stop it.

State lives in ``$LISA_EXT_CACHE/vboard/run/`` (pidfile, QMP socket, serial log,
``state.json``), so ``lisa-ext vboard up`` in one process and ``vboard ssh`` or
a LISA target in another find the same board. ``target-configs/vboard.yml``
names the default SSH port (10022) and the default cache's key.

One board per cache, of either architecture: ``x86_64`` (a q35 machine whose
sockets are LLC domains) or ``arm64`` (a ``virt`` machine whose device tree
describes a real SoC's clusters, :mod:`lisa_ext.devicetree`). A board
object made without settings takes the running board's from its state, so
every process sees the board that runs.

The board's clock (``BoardSettings.clock``, :mod:`lisa_ext.vboard.qemu`) is QEMU's, chosen when
QEMU starts: the state records it, and :meth:`VirtualBoard.use_clock` restarts a board running
on the other clock on the same kernel, its disks kept.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from lisa_ext import devicetree
from lisa_ext.errors import UserError
from lisa_ext.running_kernel import RunningKernel, probe_running_kernel
from lisa_ext.ssh import Endpoint, HostKeyError, SshClient, Trust
from lisa_ext.workbench import workbench_path
from lisa_ext.vboard import qemu, rootfs

__all__ = [
    "BoardSettings",
    "DEFAULT_VARIANTS",
    "TARGET_CONF_NAMES",
    "VirtualBoard",
    "RunningKernel",
    "board_for_target_conf",
    "default_target_conf_path",
]

log = logging.getLogger(__name__)

#: what ``vboard up`` boots without --variant or --kernel: each board's baseline
DEFAULT_VARIANTS = {"x86_64": ("kernels", "iowait-boost", "baseline.yml"),
                    "arm64": ("kernels", "eas", "baseline.yml")}

#: Kernel command line every boot starts with; a variant's cmdline is appended.
#: ``tsc=reliable``: TCG's TSC follows the host clock, so it is synchronised,
#: but the guest's check found "TSCs unsynchronized" and fell back to the slow
#: (MMIO) HPET clocksource; this skips that check. See also BoardSettings.cpu.
BASE_CMDLINE = (
    "console=ttyS0,115200 root=/dev/vda rw rootfstype=ext4 init=/sbin/lisa-ext-init "
    "panic=-1 loglevel=5 tsc=reliable"
)
#: The arm64 board's: the virt machine's PL011 console; its arch timer needs no help.
#: ``initcall_blacklist=psci_idle_init``: under QEMU 7.2's TCG, a guest whose CPUs idle in PSCI
#: CPU_SUSPEND (cpuidle-psci's deep states) stops taking timer interrupts (every CPU halted in the
#: HVC, jiffies frozen, measured: the boot hangs when the driver registers), so cpuidle-psci is
#: kept from initialising and lisa_emu_cpuidle (table=dt) registers the same device-tree states,
#: entered with WFI.
#: ``irqchip.gicv3_nolpi=1``: no kernel of the board enables the GICv3's LPIs (so no ITS, and
#: virtio-pci takes legacy INTx interrupts). LPI tables, once enabled, cannot be handed over across
#: a kexec without EFI (the board has none to reserve them): the kernel kexec'd in found the old
#: GICR_PROPBASER pointing into its own image (which kexec had loaded over the old property table),
#: took it for a preallocated table and filled 64 KiB of its own text with 0xc2 (the LPIs' default
#: priority | group 1), then died silently in time_init() on an undefined instruction.
ARM64_BASE_CMDLINE = (
    "console=ttyAMA0 root=/dev/vda rw rootfstype=ext4 init=/sbin/lisa-ext-init panic=-1 loglevel=5 "
    "initcall_blacklist=psci_idle_init irqchip.gicv3_nolpi=1"
)


#: The boards' target configs by their ``target-conf`` name, and the architecture each reaches
#: (``vboard``: the board of this cache, whichever runs; ``vboard-arm64``: the arm64 board).
TARGET_CONF_NAMES: dict[str, str | None] = {"vboard": None, "vboard-arm64": "arm64"}


def default_target_conf_path() -> Path:
    """``target-configs/vboard.yml`` of the workbench."""
    return workbench_path("target-configs", "vboard.yml")


def _port_from_env() -> int:
    text = os.environ.get("LISA_EXT_VBOARD_PORT", "10022")
    if not text.isdigit() or not 0 <= int(text) < 65536:
        raise UserError(f"LISA_EXT_VBOARD_PORT={text!r}: expected a TCP port number (0: a free port)")
    return int(text)


@dataclass(frozen=True)
class BoardSettings:
    """Shape of the QEMU guest; ``lisa-ext vboard up`` flags override the defaults.

    (They are not in ``target-configs/vboard.yml``: that file is a plain LISA
    target_conf, which admits no keys of ours.)
    """

    arch: str = "x86_64"
    #: arm64: the SoC whose clusters the device tree describes (devicetree.SOCS) and how many
    #: CPUs of each cluster the board has (default: the SoC's own, e.g. RK3399's 4 + 2)
    soc: str = "rk3399"
    cpus_per_cluster: tuple[int, ...] | None = None
    sockets: int = qemu.QemuMachine.sockets
    cores_per_socket: int = qemu.QemuMachine.cores_per_socket
    memory_mb: int = qemu.QemuMachine.memory_mb
    # One host thread for all vCPUs: with multi-threaded TCG, enabling tracepoints
    # (text_poke_bp's int3 dance) oopsed a guest with "int3" in __schedule.
    accel: str = qemu.QemuMachine.accel
    # TCG cannot expose an invariant TSC (invtsc); with an Intel vendor string the
    # guest infers constant_tsc from the CPU family. Without it, the guest
    # registers the TSC's cpufreq transition notifier, which disables
    # schedutil's fast frequency switching ("Fast frequency switching not
    # enabled") and marks the TSC unstable at the first OPP change.
    cpu: str | None = None
    # target-configs/vboard.yml says 10022; $LISA_EXT_VBOARD_PORT moves a second board (with its
    # own $LISA_EXT_CACHE and a copy of that file naming the port) out of the first one's way
    ssh_port: int = field(default_factory=lambda: _port_from_env())
    boot_timeout_s: int = 600
    # A kexec comes back in 14-47 s (65 in a row on the arm64 board, partly under load) and a cold
    # boot of the same kernel in about as long; a kernel that has not answered after this is
    # restarted cold (BoardTarget).
    kexec_timeout_s: int = 240
    #: ``host`` or ``virtual``: the clock the guest's time runs on (lisa_ext.vboard.qemu)
    clock: str = qemu.DEFAULT_CLOCK

    def __post_init__(self):
        if self.clock not in qemu.CLOCKS:
            raise UserError(f"no board clock {self.clock!r}: choose one of {', '.join(qemu.CLOCKS)}")
        if self.arch not in qemu.QEMU_BINARIES:
            raise UserError(f"no virtual board for architecture {self.arch!r}: choose one of "
                            f"{', '.join(qemu.QEMU_BINARIES)}")
        if self.memory_mb < 256:
            raise UserError("the board needs at least 256 MiB of memory")
        if self.arch == "arm64":
            if self.soc not in devicetree.SOCS:
                raise UserError(f"no SoC {self.soc!r} for the arm64 board: choose one of {', '.join(devicetree.SOCS)}")
            if self.cpus_per_cluster is not None and (not self.cpus_per_cluster or min(self.cpus_per_cluster) < 1
                                                      or sum(self.cpus_per_cluster) > 8):
                raise UserError(f"CPUs per cluster {list(self.cpus_per_cluster)}: each cluster needs at least "
                                "1 CPU, the board at most 8")
        elif self.sockets < 2:
            raise UserError("the board needs at least 2 sockets (two LLC domains)")
        elif self.cores_per_socket < 1:
            raise UserError("the board needs at least 1 core per socket")

    @property
    def qemu_cpu(self) -> str:
        """QEMU's ``-cpu``: x86 see above; arm64 a Cortex-A72 model for every CPU (v8.0, no
        pointer authentication, whose emulation makes TCG several times slower)."""
        return self.cpu or ("cortex-a72" if self.arch == "arm64" else qemu.QemuMachine.cpu)

    @classmethod
    def from_state(cls, state: dict) -> "BoardSettings":
        """The settings a running board was booted with (its ``state.json``)."""
        saved = state.get("settings") or {}
        fields = {k: v for k, v in saved.items() if k in cls.__dataclass_fields__}
        if fields.get("cpus_per_cluster") is not None:
            fields["cpus_per_cluster"] = tuple(fields["cpus_per_cluster"])
        fields["ssh_port"] = state["ssh_port"]
        return cls(**fields)


@dataclass
class _State:
    pid: int
    ssh_port: int
    kernel: str
    cmdline: str
    started_at: float
    label: str = ""
    deployed_by: str = "boot"
    history: list = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    #: the QemuMachine it was launched as (paths as strings): what a clock switch relaunches
    machine: dict = field(default_factory=dict)


class VirtualBoard:
    """The QEMU board of one cache (``$LISA_EXT_CACHE/vboard``).

    Without ``settings``, a running board's own (its architecture, SoC, shape) or the defaults.
    """

    def __init__(self, settings: BoardSettings | None = None, run_dir: Path | None = None):
        self.run_dir = Path(run_dir) if run_dir else rootfs.vboard_cache_dir() / "run"
        self.pidfile = self.run_dir / "qemu.pid"
        self.qmp_socket = self.run_dir / "qmp.sock"
        self.serial_log = self.run_dir / "serial.log"
        self.state_file = self.run_dir / "state.json"
        if settings is None:
            state = self._load_state()
            settings = BoardSettings.from_state(asdict(state)) if state and state.settings else BoardSettings()
        self.settings = settings

    @property
    def arch(self) -> str:
        return self.settings.arch

    # -- state --------------------------------------------------------------

    def _load_state(self) -> _State | None:
        if qemu.running_pid(self.pidfile) is None:
            return None
        try:
            return _State(**json.loads(self.state_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _save_state(self, state: _State) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2))
        os.replace(tmp, self.state_file)

    def is_up(self) -> bool:
        return self._load_state() is not None

    def status(self) -> dict | None:
        """The running board's state (pid, port, kernel, label, ...), or None when down."""
        state = self._load_state()
        if state is None:
            return None
        info = asdict(state)
        info["clock"] = state.settings.get("clock", "host")
        info["serial_log"] = str(self.serial_log)
        info["ssh_key"] = str(rootfs.ssh_key_path())
        return info

    def _require_state(self) -> _State:
        state = self._load_state()
        if state is None:
            raise UserError("the virtual board is not running (start it with: lisa-ext vboard up)")
        return state

    @property
    def port(self) -> int:
        return self._require_state().ssh_port

    # -- boot and stop ------------------------------------------------------

    def kernel_cmdline(self, extra: str = "") -> str:
        base = ARM64_BASE_CMDLINE if self.arch == "arm64" else BASE_CMDLINE
        return f"{base} {extra}".strip()

    def _board_dtb(self, machine: qemu.QemuMachine, soc_dtb: Path | None) -> Path:
        """The arm64 board's device tree: QEMU's for ``machine`` with the SoC's CPUs (see devicetree)."""
        if soc_dtb is None or not Path(soc_dtb).is_file():
            raise UserError(f"the arm64 board needs the {self.settings.soc} device tree compiled from the "
                            f"kernel's tree (a variant build writes dtbs/{self.settings.soc}.dtb): {soc_dtb}")
        soc = devicetree.read_soc(Path(soc_dtb).read_bytes(), self.settings.soc, str(soc_dtb))
        shape = self.settings.cpus_per_cluster or soc.shape()
        generated = qemu.dump_dtb(machine, self.run_dir / "qemu.dtb")
        return devicetree.write_board_dtb(generated, soc, shape, self.run_dir / "board.dtb",
                                          devicetree.SOC_IDLE_POWER_UW.get(self.settings.soc))

    def _shape(self, soc_dtb: Path | None) -> tuple[int, int]:
        """(sockets, cores per socket) QEMU is given: x86 as set; arm64 one socket of all CPUs."""
        if self.arch != "arm64":
            return self.settings.sockets, self.settings.cores_per_socket
        shape = self.settings.cpus_per_cluster
        if shape is None and soc_dtb is not None and Path(soc_dtb).is_file():
            shape = devicetree.read_soc(Path(soc_dtb).read_bytes(), self.settings.soc, str(soc_dtb)).shape()
        return 1, sum(shape or (1,))

    def up(
        self,
        kernel: Path,
        *,
        modules_dir: Path | None = None,
        release: str | None = None,
        load: Sequence[str] = (),
        cmdline: str = "",
        label: str = "",
        fresh_rootfs: bool = True,
        soc_dtb: Path | None = None,
    ) -> RunningKernel:
        """Boot ``kernel`` (stopping a running board first) and wait for SSH.

        ``modules_dir``/``release`` give the variant's staged modules; ``load``
        the modules init loads at boot; ``cmdline`` is appended to the board's.
        ``soc_dtb`` (arm64) is the SoC's compiled device tree the board's is made
        from. With ``fresh_rootfs=False`` a running board's disk is kept, as a real
        board's is across a kernel switch (LISA's tools stay installed); its
        SSH port is always kept, so open target configurations stay valid.
        """
        kernel = Path(kernel)
        if not kernel.is_file():
            raise UserError(f"{kernel}: no such kernel image")
        previous = self._load_state()
        if previous is not None and (previous.settings or {}).get("arch", "x86_64") != self.arch:
            fresh_rootfs = True  # the other architecture's disk
        self.down(keep_disk=not fresh_rootfs)
        image = rootfs.ensure_rootfs(arch=self.arch)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        overlay = self.run_dir / "rootfs.qcow2"
        if fresh_rootfs or previous is None or not overlay.exists():
            rootfs.make_overlay(image.image, overlay)
        modules_disk = self.run_dir / "modules.ext4"
        if modules_dir is not None:
            if not release:
                raise UserError("a modules directory needs the kernel release it belongs to")
            rootfs.make_modules_disk(Path(modules_dir), release, modules_disk, load)
        else:
            rootfs.make_empty_disk(modules_disk)  # keeps the scratch disk at /dev/vdc
        scratch = rootfs.make_scratch_disk(self.run_dir / "scratch.img")
        port = self.settings.ssh_port or (previous.ssh_port if previous else qemu.free_loopback_port())
        sockets, cores = self._shape(soc_dtb)
        machine = qemu.QemuMachine(
            kernel=kernel.resolve(),
            cmdline=self.kernel_cmdline(cmdline),
            rootfs=overlay,
            modules_disk=modules_disk,
            scratch_disk=scratch,
            ssh_port=port,
            serial_log=self.serial_log,
            pidfile=self.pidfile,
            qmp_socket=self.qmp_socket,
            sockets=sockets,
            cores_per_socket=cores,
            memory_mb=self.settings.memory_mb,
            accel=self.settings.accel,
            cpu=self.settings.qemu_cpu,
            arch=self.arch,
            clock=self.settings.clock,
        )
        if self.arch == "arm64":
            machine = dataclasses.replace(machine, dtb=self._board_dtb(machine, soc_dtb))
        return self._launch(machine, label=label)

    def _launch(self, machine: qemu.QemuMachine, *, label: str, history: list | None = None,
                deployed_by: str = "boot") -> RunningKernel:
        """Start QEMU as ``machine``, record it in the state and wait for SSH."""
        started = time.time()
        pid = qemu.launch(machine)
        settings = {**asdict(self.settings), "ssh_port": machine.ssh_port}
        self._save_state(_State(pid=pid, ssh_port=machine.ssh_port, kernel=str(machine.kernel),
                                cmdline=machine.cmdline, started_at=started, label=label,
                                deployed_by=deployed_by, history=history or [], settings=settings,
                                machine=json.loads(json.dumps(asdict(machine), default=str))))
        log.info("QEMU pid %d booting %s on the %s clock; SSH on 127.0.0.1:%d; serial log %s", pid,
                 machine.kernel, machine.clock, machine.ssh_port, self.serial_log)
        running = self.wait_for_ssh()
        log.info("board up in %.1f s: %s %s", time.time() - started, running.release, running.version)
        return running

    def use_clock(self, clock: str) -> bool:
        """Run on ``clock`` from now on: the next boot's, and a board running on the other clock is
        restarted on the same kernel and disks (QEMU's clock is fixed when it starts). Returns
        whether it restarted QEMU."""
        self.settings = dataclasses.replace(self.settings, clock=clock)
        state = self._load_state()
        if state is None or state.settings.get("clock", "host") == clock:
            return False
        if not state.machine:
            raise UserError(f"the board (pid {state.pid}) was started by an older lisa-ext: boot it again "
                            f"(lisa-ext vboard up --clock {clock})")
        saved = {**state.machine, "clock": clock}
        paths = {f.name for f in dataclasses.fields(qemu.QemuMachine) if "Path" in str(f.type)}
        machine = qemu.QemuMachine(**{k: Path(v) if k in paths and v is not None else v for k, v in saved.items()})
        history = [*state.history, {"kernel": state.kernel, "label": state.label, "deployed_by": state.deployed_by}]
        log.info("restarting the board (pid %d) on the %s clock", state.pid, clock)
        self._stop_guest(state)
        self._launch(machine, label=state.label, history=history, deployed_by=f"restart on the {clock} clock")
        return True

    def _stop_guest(self, state: _State | None) -> bool:
        """Power the guest off (sysrq), then make sure QEMU is gone. Returns whether it was up."""
        if state is None:
            if qemu.running_pid(self.pidfile) is None:
                return False
            return qemu.terminate(self.pidfile, self.qmp_socket)
        try:
            # The guest has no init system to shut down: sync, remount read-only, power off.
            self.run("sync; echo s > /proc/sysrq-trigger; echo u > /proc/sysrq-trigger; "
                     "echo o > /proc/sysrq-trigger", check=False, timeout=20)
        except (UserError, subprocess.TimeoutExpired):
            pass
        return qemu.terminate(self.pidfile, self.qmp_socket, grace=15)

    def down(self, *, keep_disk: bool = False) -> bool:
        """Power the guest off (sysrq), then make sure QEMU is gone. Returns whether it was up."""
        stopped = self._stop_guest(self._load_state())
        if not keep_disk:
            (self.run_dir / "rootfs.qcow2").unlink(missing_ok=True)
        (self.run_dir / "modules.ext4").unlink(missing_ok=True)
        (self.run_dir / "scratch.img").unlink(missing_ok=True)
        return stopped

    def record_deploy(self, *, kernel: Path, cmdline: str, label: str, method: str) -> None:
        """Note in the state that another kernel now runs (after a kexec)."""
        state = self._require_state()
        state.history.append({"kernel": state.kernel, "label": state.label, "deployed_by": state.deployed_by})
        state.kernel, state.cmdline, state.label, state.deployed_by = str(kernel), cmdline, label, method
        self._save_state(state)

    # -- SSH ----------------------------------------------------------------

    def endpoint(self) -> Endpoint:
        """The running board's SSH login: root with the cache's key, its pinned host key."""
        state = self._require_state()
        trust = Trust(rootfs.known_hosts_pin_path(), rootfs.VBOARD_ALIAS, alias=True,
                      pin_hint="rebuild the board's rootfs (its key is pinned when the rootfs is made)")
        return Endpoint("127.0.0.1", state.ssh_port, "root", trust, keyfile=rootfs.ssh_key_path())

    def ssh(self) -> SshClient:
        """The board's SSH client (:mod:`lisa_ext.ssh`: pinned key, one shared connection)."""
        return SshClient(self.endpoint())

    def ssh_base(self, *, tty: bool = False) -> list[str]:
        """``ssh ...`` up to the host: append a command line to run it on the board."""
        return self.ssh().argv(tty=tty)

    def run(self, command: str, *, check: bool = True, timeout: float | None = 600,
            input: bytes | None = None) -> subprocess.CompletedProcess:
        """Run a shell command on the guest; returns the completed process (bytes output)."""
        proc = self.ssh().run(command, input=input, timeout=timeout)
        if check and proc.returncode != 0:
            raise UserError(
                f"on the virtual board, {command!r} exited with {proc.returncode}: "
                f"{proc.stderr.decode(errors='replace').strip()}"
            )
        return proc

    def push(self, local: Path, remote: str) -> None:
        """Copy one host file to the guest (streamed over SSH: no scp/sftp needed)."""
        proc = self.ssh().push(local, remote)
        if proc.returncode != 0:
            raise UserError(f"copying {local} to the board failed: {proc.stderr.decode(errors='replace')}")

    def pull(self, remote: str, local: Path) -> None:
        proc = self.ssh().pull(remote, local)
        if proc.returncode != 0:
            raise UserError(f"copying {remote} from the board failed: {proc.stderr.decode(errors='replace')}")

    def running_kernel(self) -> RunningKernel:
        return probe_running_kernel(
            lambda command: self.run(command, timeout=60).stdout.decode(errors="replace"))

    def wait_for_ssh(self, *, timeout: float | None = None, not_boot_id: str | None = None) -> RunningKernel:
        """Wait until the guest answers over SSH (with a boot id other than
        ``not_boot_id``, to tell a rebooted kernel from the one before)."""
        timeout = timeout or self.settings.boot_timeout_s
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            if qemu.running_pid(self.pidfile) is None:
                raise UserError(f"QEMU stopped while the board was booting:\n{self.serial_tail()}")
            try:
                running = self.running_kernel()
                if running.boot_id and running.boot_id != not_boot_id:
                    return running
            except HostKeyError:
                raise  # another machine, or another key: waiting cannot help
            except (UserError, subprocess.TimeoutExpired, IndexError, ValueError) as exc:
                last_error = str(exc)
            time.sleep(2)
        raise UserError(
            f"the board did not answer over SSH within {timeout:.0f} s ({last_error}); "
            f"serial log {self.serial_log}:\n{self.serial_tail()}"
        )

    def serial_tail(self, lines: int = 25) -> str:
        try:
            text = self.serial_log.read_text(errors="replace")
        except OSError:
            return "(no serial log)"
        return "\n".join(text.splitlines()[-lines:])


def board_for_target_conf(name: str | None) -> "VirtualBoard | None":
    """The board a target config of ``name`` reaches (its architecture's, booted or not), or None
    when the name is no board's."""
    if name not in TARGET_CONF_NAMES:
        return None
    board = VirtualBoard()
    arch = TARGET_CONF_NAMES[name]
    return board if arch is None or board.arch == arch else VirtualBoard(BoardSettings(arch=arch))
