"""The virtual board as a target: an SSH Linux board whose machine is a QEMU process of ours.

What it adds to :class:`~lisa_ext.target.ssh_target.SshTarget` is what only a
board we run ourselves has: its login and pinned key come from the board of
the current cache (``$LISA_EXT_CACHE``, ``$LISA_EXT_VBOARD_PORT``), not from
the config file; a kernel is also put on it by restarting QEMU (``boot``,
preferred, its modules on a second disk); a lost board is killed and booted
again; its probe also asks QEMU's monitor, to tell a busy guest from a hung
machine; its serial console is read for the failure reports. This module is
the only place that knows whether a target config is the virtual board's: a
``linux`` config named ``vboard`` or ``vboard-arm64`` (``target-configs/vboard*.yml`` or a copy).

Its clock is the board's (``host`` or ``virtual``, :mod:`lisa_ext.vboard.qemu`): a campaign asks
for one with :meth:`BoardTarget.use_clock` and records :attr:`BoardTarget.clock`. On the virtual
clock a busy guest lives 3-25x slower than the host, so the probes that time its answers also read
its uptime, and :attr:`BoardTarget.time_scale` says how far host-side waits must stretch.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import subprocess
import time
from typing import Any

from lisa_ext.errors import UserError
from lisa_ext.ssh import Endpoint, SshClient
from lisa_ext.target.config import TargetConfig
from lisa_ext.target.protocol import (MAX_TIME_SCALE, BootFallback, BootImage, BusyTarget, FirstBoot,
                                      TargetCommandError)
from lisa_ext.target.ssh_target import SshTarget
from lisa_ext.vboard import qemu, qemu_build, rootfs
from lisa_ext.vboard.qemu import CLOCKS, CLOCKS_HELP, DEFAULT_CLOCK
from lisa_ext.vboard.board import (DEFAULT_VARIANTS, TARGET_CONF_NAMES, VirtualBoard, board_for_target_conf,
                                   default_target_conf_path)
from lisa_ext.workbench import workbench_path

__all__ = ["BoardTarget", "CLOCKS", "CLOCKS_HELP", "DEFAULT_CLOCK", "board_first_boot"]

log = logging.getLogger(__name__)


class _KexecLost(Exception):
    """The kernel kexec'd into never answered."""


#: the time scale of a board on the virtual clock before its probes measured its pace: a busy guest
#: was measured up to 25x slower than the host
_UNMEASURED_TIME_SCALE = 25.0
#: how long QEMU's monitor may take to answer a probe, in host time whatever the guest's clock: the
#: main loop answers between two TCG time slices
_MONITOR_TIMEOUT_S = 5.0


class _GuestPace:
    """How many host seconds a second of the guest's time took lately: the guest's uptime and the
    host's clock at each probe, over the last few intervals between probes."""

    def __init__(self, intervals: int = 12):
        self._last: tuple[float, float] | None = None
        self._ratios: collections.deque[float] = collections.deque(maxlen=intervals)

    def sample(self, host_s: float, guest_s: float) -> None:
        last, self._last = self._last, (host_s, guest_s)
        if last is not None and guest_s > last[1] and host_s - last[0] >= 1.0:
            self._ratios.append((host_s - last[0]) / (guest_s - last[1]))

    def time_scale(self) -> float:
        """Twice the slowest pace seen lately (a margin for a guest getting busier), between 1 and
        :data:`~lisa_ext.target.protocol.MAX_TIME_SCALE`."""
        if not self._ratios:
            return _UNMEASURED_TIME_SCALE
        return min(MAX_TIME_SCALE, max(1.0, 2 * max(self._ratios)))


#: the x86 board's, measured on this project's 2-core machine, otherwise idle, from an empty cache
#: (docs/performance.md); the arm64 board's cross-built kernel is of the same order (docs/vboard.md)
_FIRST_BUILD_COST = "about 9 min on 2 idle cores: the kernel, with QEMU and the rootfs built beside it"


def board_first_boot(board: VirtualBoard) -> FirstBoot:
    """The board's default kernel variant, and its patched QEMU when not built yet."""
    try:
        qemu_built = qemu_build.is_built(board.arch)
    except UserError:  # no Debian QEMU to build from: the first boot will say so
        qemu_built = False
    return FirstBoot(workbench_path(*DEFAULT_VARIANTS[board.arch]), board.arch, () if qemu_built else ("QEMU",),
                     cost=_FIRST_BUILD_COST)


class BoardTarget(SshTarget):
    """The virtual board of the current cache, as a :class:`~lisa_ext.target.protocol.Target`."""

    kind = "vboard"
    description = "the virtual board"

    def __init__(self, board: VirtualBoard | None = None, config: TargetConfig | None = None):
        super().__init__(config, None)
        self.board = board or VirtualBoard()
        self._pace = _GuestPace()

    @classmethod
    def serves(cls, config: TargetConfig) -> bool:
        return config.kind == "linux" and config.conf.get("name") in TARGET_CONF_NAMES

    @classmethod
    def first_boot_needs(cls, config: TargetConfig) -> FirstBoot:
        return board_first_boot(board_for_target_conf(config.conf.get("name")))

    @classmethod
    def open(cls, config: TargetConfig) -> "BoardTarget":
        # vboard-arm64 reaches the arm64 board of this cache, whichever board is the default
        return cls(board=board_for_target_conf(config.conf.get("name")), config=config)

    @property
    def config(self) -> TargetConfig:
        if self._config is None:
            self._config = TargetConfig.load(default_target_conf_path())
        return self._config

    @property
    def endpoint(self) -> Endpoint:
        return self.board.endpoint()

    @property
    def ssh(self) -> SshClient:
        if not self.board.is_up():
            raise TargetCommandError("the virtual board is not running (start it with: lisa-ext vboard up)")
        return self.board.ssh()

    def _reset_timeout(self) -> float:
        return float(self.board.settings.boot_timeout_s)

    # -- clock --------------------------------------------------------------------

    @property
    def clock(self) -> str:  # type: ignore[override]
        """The running QEMU's clock (its state's), else the one the next boot gets."""
        status = self.board.status()
        return status["clock"] if status else self.board.settings.clock

    @property
    def time_scale(self) -> float:  # type: ignore[override]
        """1 on the host's clock; on the virtual clock, from the guest's pace between probes."""
        return 1.0 if self.clock == "host" else self._pace.time_scale()

    @property
    def host_share(self) -> float:  # type: ignore[override]
        """One core: all vCPUs run on one TCG thread (``thread=single``), else one thread each."""
        settings = self.board.settings
        return 1.0 if "thread=single" in settings.accel else float(settings.sockets * settings.cores_per_socket)

    def use_clock(self, clock: str | None) -> None:
        """Boot on ``clock`` (None: :data:`DEFAULT_CLOCK`) from now on; a board running on the other
        is restarted on its kernel."""
        if self.board.use_clock(clock or DEFAULT_CLOCK):
            self._pace = _GuestPace()
            self._reconnect(setup=False)

    # -- kernels ------------------------------------------------------------------

    def kernel_arch(self) -> str:
        """The board's architecture: known without asking the guest, which may not be up yet."""
        return self.board.arch

    def kernel_cmdline(self, extra: str) -> str:
        return self.board.kernel_cmdline(extra)

    @property
    def boot_methods(self) -> tuple[str, ...]:  # type: ignore[override]
        # a running arm64 board gets its kernels as a real one does, by kexec over SSH
        if self.board.arch == "arm64" and self.board.is_up():
            return ("kexec", "boot")
        return ("boot", "kexec")

    def prepare_boot(self) -> None:
        # beside the kernel build that follows: the board's QEMU and its rootfs, where not built
        if self.board.settings.clock == "virtual":
            qemu_build.build_in_background(self.board.arch)
        rootfs.build_in_background(self.board.arch)

    def boot(self, image: BootImage, method: str) -> BootFallback | None:
        if image.arch != self.board.arch:
            raise UserError(f"the kernel was built for {image.arch}, the board is {self.board.arch} "
                            f"(lisa-ext vboard up --arch {image.arch} boots the {image.arch} board)")
        if method == "boot":
            self._restart(image, fresh=not self.board.is_up())
            return None
        if method == "kexec" and not self.board.is_up():
            raise UserError("kexec needs a running board: boot one first (lisa-ext vboard up)")
        try:
            super().boot(image, method)
        except _KexecLost as lost:
            # What a lab does with a board that hangs in a kexec: power-cycle it into the same kernel.
            # The arm64 board hung once in early boot after a kexec (a CI run under load), then in
            # none of 65 kexecs in a row (14-47 s each, alternating four variants, partly under load).
            log.warning("%s; restarting QEMU on the same kernel", lost)
            self._restart(image, fresh=False)
            return BootFallback("boot", str(lost))
        self.board.record_deploy(kernel=image.kernel, cmdline=self.kernel_cmdline(image.cmdline),
                                 label=image.label, method="kexec")
        return None

    def _restart(self, image: BootImage, *, fresh: bool) -> None:
        """Restart QEMU on ``image``. Unless ``fresh``, the board keeps its disk, as a real board does
        across a kernel switch (the tools installed, the modules a kexec unpacked): the running QEMU
        is stopped by its monitor, which writes back the qcow2 metadata ``cache=unsafe`` holds."""
        soc_dtb = image.soc_dtbs / f"{self.board.settings.soc}.dtb" if image.soc_dtbs else None
        self.board.up(image.kernel, modules_dir=image.modules_dir, release=image.release, load=image.load,
                      cmdline=image.cmdline, label=image.label, fresh_rootfs=fresh, soc_dtb=soc_dtb)
        self._reconnect(setup=fresh)

    def _wait_back(self, old_boot_id: str, timeout: float = 600) -> None:
        timeout = min(timeout, self.board.settings.kexec_timeout_s)
        try:
            self.board.wait_for_ssh(not_boot_id=old_boot_id, timeout=timeout)
        except UserError:
            if qemu.running_pid(self.board.pidfile) is None:
                raise  # the kernel ended QEMU (a panic, a reboot): its console says why
            console = self.board.serial_tail(1).strip() or "(nothing)"
            try:
                where = ", ".join(qemu.vcpu_program_counters(self.board.qmp_socket))
            except (OSError, ValueError):
                where = "unknown: QEMU's monitor did not answer"
            raise _KexecLost(f"the kernel kexec'd into did not answer within {timeout} s (console's last "
                             f"line: {console}; vCPUs at {where})") from None

    # -- faults -------------------------------------------------------------------

    def reset(self) -> bool:
        pid = qemu.running_pid(self.board.pidfile)
        if pid is not None:
            # a lost board: no clean shutdown to wait for (a hung QEMU answers neither SSH nor QMP)
            os.kill(pid, signal.SIGKILL)
        self.board.down()
        return False

    def probe(self, timeout: float) -> tuple[str | None, bool]:
        """Its QEMU process, QEMU's monitor (a stopped or hung QEMU does not answer it; a busy
        guest's does), then an ``ssh`` within ``timeout``. The monitor is asked first, in host time:
        ``timeout`` is stretched by the guest's pace on the virtual clock, and an SSH connection
        to a stopped QEMU waits out the whole of it (or ssh's own ConnectTimeout)."""
        if qemu.running_pid(self.board.pidfile) is None:
            return "the virtual board's QEMU process is gone", True
        if not self._qemu_answers(_MONITOR_TIMEOUT_S):
            return (f"the virtual board's QEMU did not answer its monitor within {_MONITOR_TIMEOUT_S:.0f} s "
                    "(stopped or hung)"), False
        try:
            proc = self.board.ssh().run("cat /proc/uptime", timeout=timeout)
        except subprocess.TimeoutExpired:
            reason = f"the virtual board did not answer over SSH within {timeout:.0f} s"
            if self._qemu_answers(_MONITOR_TIMEOUT_S):
                return BusyTarget(reason + " (QEMU runs: a busy guest)"), False
            return reason + " and QEMU's monitor did not answer either", False
        except Exception as exc:  # noqa: BLE001 -- e.g. the board's state vanished with QEMU
            return f"the virtual board cannot be reached: {exc}", False
        if proc.returncode != 0:
            return f"ssh to the virtual board failed: {proc.stderr.decode(errors='replace').strip()}", False
        try:
            self._pace.sample(time.monotonic(), float(proc.stdout.split()[0]))
        except (IndexError, ValueError):
            pass  # answered, with something else than an uptime: alive all the same
        return None, False

    def _qemu_answers(self, timeout: float) -> bool:
        try:
            status = qemu.qmp_execute(self.board.qmp_socket, "query-status", timeout=timeout)
            return status.get("return", {}).get("status") == "running"
        except Exception:  # noqa: BLE001 -- no answer, whatever the reason
            return False

    def console_tail(self, lines: int = 40) -> str | None:
        return self.board.serial_tail(lines)

    def lisa(self) -> Any:
        if self._lisa is None and not self.board.is_up():
            raise UserError("the virtual board is not running (start it with: lisa-ext vboard up)")
        return super().lisa()
