"""The target protocol: what lisa-ext needs from any machine it runs experiments on.

Commands speak devlib's calls (``execute``, ``background``, ``push``, ``pull``),
so code written for a LISA target (knobs, tracing, provenance, requirements)
runs unchanged on every implementation. On top of them a target says how a
kernel gets onto it (:attr:`Target.boot_methods`, :meth:`Target.boot`), how it
is brought back when lost (:meth:`Target.reset`), how to tell whether it still
answers (:meth:`Target.probe`) and hands out its LISA connection
(:meth:`Target.lisa`) for what only LISA does (workload generators, platform
info, tool installation). Three implementations, each deciding alone what it
serves (:func:`lisa_ext.target.open_target`):

- :class:`lisa_ext.target.board.BoardTarget` -- the virtual board;
- :class:`lisa_ext.target.ssh_target.SshTarget` -- a Linux board over SSH;
- :class:`lisa_ext.target.devlib_target.DevlibTarget` -- what LISA/devlib
  reaches alone: this machine, an Android device.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lisa_ext.errors import UserError
from lisa_ext.ssh import Endpoint

__all__ = ["Background", "BootFallback", "BootImage", "BusyTarget", "FirstBoot", "MAX_TIME_SCALE", "Target",
           "TargetCommandError",
           "TargetTimeout", "machine_arch", "refuse_clock"]

#: the most a target may stretch host-side waits (:attr:`Target.time_scale`): a busy guest on the
#: virtual clock was measured 3-25x slower than the host; past this a guest counts as hung
MAX_TIME_SCALE = 50.0


def refuse_clock(target: "Target", clock: str | None) -> None:
    """:meth:`Target.use_clock` of a target whose time is its own: only ``host`` (or None) is possible."""
    if clock not in (None, "host"):
        raise UserError(f"{target.description} runs on its own clock: board-clock {clock} is the "
                        "virtual board's (target-configs/vboard.yml)")


#: ``uname -m`` -> kernel architecture
_MACHINES = {"x86_64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}


def machine_arch(target: "Target") -> str:
    """:meth:`Target.kernel_arch` of a Linux machine that says what it is: its ``uname -m``."""
    try:
        machine = target.execute("uname -m", timeout=60).strip()
    except TargetCommandError as exc:
        raise UserError(f"{target.description}: cannot read its architecture (uname -m): {exc}") from None
    if machine not in _MACHINES:
        raise UserError(f"{target.description} is a {machine!r} machine: lisa-ext builds kernels for "
                        f"{', '.join(sorted(set(_MACHINES.values())))}")
    return _MACHINES[machine]


class TargetCommandError(RuntimeError):
    """A command on the target failed (like devlib's ``TargetStableError``): not the user's doing."""


class TargetTimeout(TargetCommandError):
    """A command on the target did not finish in time."""


class BusyTarget(str):
    """A probe failure of a target whose machine still answers (a busy guest): a partial miss."""


@dataclass(frozen=True)
class BootImage:
    """A kernel to boot, as a target needs it: image, modules, command line."""

    kernel: Path
    """The kernel for ``arch``: x86's ``bzImage``, arm64's ``Image`` (boot, kexec)."""
    release: str
    cmdline: str = ""
    """The variant's part of the command line; the target adds its own (:meth:`Target.kernel_cmdline`)."""
    modules_dir: Path | None = None
    """The staged modules (``<dir>/lib/modules/<release>``)."""
    load: tuple[str, ...] = ()
    """``modprobe`` lines run at boot, e.g. ``"lisa_emu_cpuidle table=rk3399"``."""
    label: str = ""
    arm64_image: Path | None = None
    """The arm64 ``Image`` (fastboot)."""
    ramdisk: Path | None = None
    dtb: Path | None = None
    arch: str = "x86_64"
    """The architecture the kernel was built for (kernel ARCH names)."""
    soc_dtbs: Path | None = None
    """arm64: the directory of ``<soc>.dtb`` compiled from the kernel's tree, which the virtual
    board grafts onto QEMU's machine."""


@dataclass(frozen=True)
class BootFallback:
    """A kernel put on a target by another method than the one asked for, and why."""

    method: str
    reason: str


class Background(Protocol):
    """A command started in the background: its pid (a process group leader) and exit status."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


@dataclass(frozen=True)
class FirstBoot:
    """What a target needs built on this machine before its first run (:func:`lisa_ext.target.first_boot_needs`)."""

    #: the kernel variant spec it boots when a campaign names none
    kernel_variant: Path
    #: the architecture that kernel is built for
    arch: str
    #: what else must be built first and is not in the cache yet, by name
    unbuilt: tuple[str, ...] = ()
    #: what building the kernel and the rest from an empty cache costs, said before it starts
    cost: str = ""


class Target(Protocol):
    """A machine lisa-ext runs commands on, boots kernels on and watches."""

    kind: str
    """``host``, ``linux``, ``android`` or ``vboard``: for messages and provenance, never for branching."""
    description: str
    """How messages name it: "the virtual board", "root@192.168.0.42:22"."""
    boot_methods: tuple[str, ...]
    """How a kernel gets onto it, preferred first: ``boot``, ``kexec``, ``fastboot``; none for this machine."""
    endpoint: Endpoint | None
    """Its SSH login, when it is reached over SSH."""
    clock: str
    """The clock its time runs on: ``host`` (the host's, or a real machine's own) or ``virtual`` (the
    virtual board's instruction clock, :mod:`lisa_ext.vboard.qemu`): recorded with each run."""
    time_scale: float
    """Host seconds a host-side wait on it allows per second of its own time (1 on the host's
    clock; at most :data:`MAX_TIME_SCALE`): what stretches the waits that cannot read its time,
    such as how long a probe waits for an answer."""
    this_machine: bool
    """Whether it is the machine lisa-ext runs on: its knobs and load are this host's, so two
    campaigns on it would rewrite each other's knobs (the runner serialises them)."""
    host_share: float | None
    """Host cores its machine takes from this host (the virtual board's QEMU), None when its time is
    not this host's to disturb (another machine) or its load is the runs' own (this machine)."""

    def use_clock(self, clock: str | None) -> None:
        """Run on ``clock`` from now on, None for the target's default (the virtual board's is
        ``virtual``; it reboots its QEMU if it runs on the other); a target that cannot raises
        :class:`~lisa_ext.errors.UserError` (:func:`refuse_clock`)."""

    def execute(self, command: str, *, as_root: bool = False, timeout: float | None = None,
                check_exit_code: bool = True) -> str:
        """Run a shell command line; its output. A non-zero exit raises :class:`TargetCommandError`
        unless ``check_exit_code`` is false."""

    def background(self, command: str, *, as_root: bool = False) -> Background:
        """Start a shell command line and return at once."""

    def push(self, local: str | Path, remote: str) -> None: ...

    def pull(self, remote: str, local: str | Path) -> None: ...

    def kernel_arch(self) -> str:
        """The architecture a kernel must be built for to run here (kernel ARCH names: ``x86_64``,
        ``arm64``); :class:`~lisa_ext.errors.UserError` when it is one lisa-ext does not build for."""

    def kernel_cmdline(self, extra: str) -> str:
        """The command line a kernel boots with here, given a variant's ``extra`` part."""

    def prepare_boot(self) -> None:
        """Start, in the background, what booting a kernel here needs besides the kernel (the
        virtual board's patched QEMU, when not built yet), so that it overlaps the kernel's build."""

    def boot(self, image: BootImage, method: str) -> BootFallback | None:
        """Reboot into ``image`` by ``method`` (one of :attr:`boot_methods`); returns once it answers
        again, its LISA connection (if any) reopened: None, or how the kernel got there instead
        when ``method`` did not bring the target back and another did."""

    def reset(self) -> bool:
        """Bring a lost target back (kill and restart, power-cycle, reboot); True when it runs
        again, False when it waits for a kernel to be booted (:meth:`boot`)."""

    def probe(self, timeout: float) -> tuple[str | None, bool]:
        """None when the target answers, else why not (a :class:`BusyTarget` counts as a partial
        miss) and whether that is final (no point probing again)."""

    def console_tail(self, lines: int = 40) -> str | None:
        """The last lines of its console, when there is one to read."""

    def lisa(self) -> Any:
        """Its LISA :class:`lisa.target.Target`, connected on first use."""

    def interrupt(self) -> None:
        """Make calls blocked on the target fail now (it was found lost)."""

    def close(self) -> None: ...
