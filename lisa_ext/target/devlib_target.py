"""LISA/devlib targets: the connection every kind opens, and the protocol over it for this
machine and Android devices.

:func:`connect_lisa` is how lisa-ext opens a LISA :class:`lisa.target.Target`.
For an SSH target, devlib's connection class is replaced before it connects
(devlib's own hook: a :class:`devlib.platform.Platform` sets ``conn_cls`` in
``init_target_connection``, called at the start of every ``connect()``): its
first connection, the one devlib opens per thread (the watchdog's) and every
reconnect are :class:`PinnedSshConnection`, which checks the host key against
the target's pin (:mod:`lisa_ext.ssh`) before authenticating. devlib's own
check (``strict-host-check``, ``~/.ssh/known_hosts``) is never used.

:class:`DevlibTarget` is the :class:`~lisa_ext.target.protocol.Target` of what
only LISA/devlib reach: this machine (kind ``host``) and Android devices (kind
``android``, deployed by ``fastboot``: implemented after the mkbootimg/fastboot
documentation but **untested here**, there is no phone).

This machine as a target keeps its files in private directories (:func:`private_directory`):
its working directory (``workdir``) and, inside it, its executables directory, which devlib
would otherwise put at ``/tmp/devlib-target/bin``, first on root's PATH for every command.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from lisa_ext.compat import import_lisa
from lisa_ext.errors import UserError
from lisa_ext.ssh import Endpoint, Trust, open_paramiko
from lisa_ext.target.config import TargetConfig
from lisa_ext.target.protocol import (BootImage, FirstBoot, TargetCommandError, TargetTimeout, machine_arch,
                                      refuse_clock)
from lisa_ext.workbench import cache_root

__all__ = ["DevlibTarget", "close_connection", "connect_lisa", "private_directory", "reconnect_lisa"]

log = logging.getLogger(__name__)


@functools.cache
def _pinned_classes() -> tuple[type, type]:
    """devlib's SSH connection checking the pin, and the platform that installs it (built on first
    use: importing devlib takes ~1.3 s)."""
    import devlib.platform
    from devlib.utils.ssh import SshConnection, _handle_paramiko_exceptions

    class PinnedSshConnection(SshConnection):
        """devlib's SSH connection, opened by :func:`lisa_ext.ssh.open_paramiko` (pinned key, RejectPolicy).

        The key file is used where it is. devlib 1.3's ``check_keyfile()`` masks the mode with 0xFF,
        so it takes every key for one with the wrong permissions and copies it to
        ``$TMPDIR/<its name>``: one path for every process's ``id_ed25519``. Two boards' tests side
        by side overwrote each other's copy and one logged in with the other's key ("Could not
        authenticate"); and a file another user planted at that path would receive the key."""

        def __init__(self, *, trust: Trust, keyfile: str | None = None, **settings: Any):
            self.trust = trust
            self._key_path = keyfile
            super().__init__(keyfile=None, **settings)
            self.keyfile = keyfile

        def _make_client(self):
            keys = self.password is None
            with _handle_paramiko_exceptions():
                return open_paramiko(self.trust, self.host, self.port, connect_timeout=self.timeout,
                                     username=self.username, password=self.password,
                                     key_filename=self._key_path, look_for_keys=keys, allow_agent=keys)

    class PinnedPlatform(devlib.platform.Platform):
        """A plain devlib platform whose targets connect through :class:`PinnedSshConnection`."""

        def __init__(self, trust: Trust):
            super().__init__()
            self.trust = trust

        def init_target_connection(self, target) -> None:
            target.conn_cls = functools.partial(PinnedSshConnection, trust=self.trust)

    return PinnedSshConnection, PinnedPlatform


@functools.cache
def _private_dirs_platform() -> type:
    """The devlib platform of this machine as a target: its executables directory inside the
    working directory (built on first use: importing devlib takes ~1.3 s)."""
    import devlib.platform

    class PrivateDirsPlatform(devlib.platform.Platform):
        """A plain devlib platform that sets the target's executables directory before devlib
        makes it (``connect`` calls ``init_target_connection`` first, then ``_resolve_paths``,
        which keeps a directory already set)."""

        def __init__(self, executables_directory: str):
            super().__init__()
            self.executables_directory = executables_directory

        def init_target_connection(self, target) -> None:
            target.executables_directory = self.executables_directory

    return PrivateDirsPlatform


def _directory_problem(path: Path, st: os.stat_result, own: bool) -> str | None:
    """Why ``path`` (``st``: its lstat) may not hold root's files; ``own``: it must be this user's,
    else root's does too, and a sticky directory (/tmp) may be writable by all."""
    if stat.S_ISLNK(st.st_mode):
        return None if not own and st.st_uid in (0, os.geteuid()) else f"is a link of user {st.st_uid}"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    owners = (os.geteuid(),) if own else (0, os.geteuid())
    if st.st_uid not in owners:
        return f"belongs to user {st.st_uid}, not {os.geteuid()}"
    if st.st_mode & 0o022 and (own or not st.st_mode & stat.S_ISVTX):
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def private_directory(path: Path, what: str) -> Path:
    """``path``, a directory of this user that no other user can write: made (0700, missing
    parents too) when absent, refused in one line when it exists otherwise, or when a directory
    on the way to it could be changed by another user. Nothing in a refused directory is used or
    removed.

    The local target runs its commands as root with the executables directory first on PATH, and
    the runner removes run directories under the working directory: in a directory another user
    made or can write (under /tmp anyone can take a name first) they could plant a program root
    runs or a link root deletes through. The configured ``workdir`` is kept where the user put it
    (``/tmp/lisa-ext-target`` by default, shared with plain LISA) and checked, rather than moved
    to a per-user directory: a config names one place, and that place is what runs use."""
    path = Path(os.path.abspath(path))
    for part in (*reversed(path.parents), path):
        own = part == path
        try:
            if own or not part.exists():
                os.mkdir(part, 0o700)
        except FileExistsError:
            pass
        problem = _directory_problem(part, os.lstat(part), own)
        if problem:
            raise UserError(f"{part}: refusing it as {what}: it {problem} (another user could plant a program "
                            "root runs there); remove it, or set another target-conf.workdir")
    return path


def _local_directories(config: TargetConfig) -> tuple[str, str]:
    """This machine's working and executables directories, private (:func:`private_directory`);
    without a ``workdir``, under the cache (devlib's default is /tmp/devlib-target)."""
    workdir = Path(config.conf.get("workdir") or cache_root() / "local-target")
    private_directory(workdir, f"the working directory of {config.path}")
    bindir = private_directory(workdir / "bin", f"the executables directory of {config.path}")
    return str(workdir), str(bindir)


def connect_lisa(config: TargetConfig, endpoint: Endpoint | None = None):
    """A connected LISA :class:`lisa.target.Target` for ``config``; over SSH as ``endpoint``,
    every connection checked against its pin; this machine with private directories."""
    lisa_target = import_lisa("lisa.target")
    conf = config.lisa_conf(endpoint)
    if endpoint is None and config.kind != "host":
        return lisa_target.Target.from_conf(conf)
    kwargs = lisa_target.Target.conf_to_init_kwargs(conf)
    kwargs.update(res_dir=None, plat_info=None)
    if endpoint is not None:
        _, pinned_platform = _pinned_classes()
        kwargs.update(devlib_platform=pinned_platform(endpoint.trust))
    else:
        workdir, bindir = _local_directories(config)
        kwargs.update(workdir=workdir, devlib_platform=_private_dirs_platform()(bindir))
    lisa_target.Target.check_init_param(**kwargs)
    return lisa_target.Target(**kwargs)


def reconnect_lisa(lisa: Any, *, timeout: float, setup: bool) -> None:
    """Connect ``lisa`` again after its target rebooted, retrying until ``timeout``; ``setup``
    reinstalls LISA's tools (a fresh disk)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            lisa.connect()
            if setup:
                lisa.setup()
            return
        except UserError:
            raise  # a refused host key: retrying cannot help
        except Exception as exc:  # noqa: BLE001 -- devlib raises its own errors while the target boots
            if time.monotonic() > deadline:
                raise UserError(f"the target did not come back within {timeout:.0f} s: {exc}") from None
            log.debug("target not back yet: %s", exc)
            time.sleep(5)


def close_connection(conn: Any) -> None:
    """Make a blocked call on ``conn`` (a devlib connection) fail now.

    The socket is shut down first: that wakes a ``poll()`` another thread is
    blocked in on it, which closing the paramiko client alone does not.
    """
    client = getattr(conn, "client", None)  # devlib's SshConnection: a paramiko SSHClient
    try:
        if client is not None:
            sock = getattr(client.get_transport(), "sock", None)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            client.close()
        elif hasattr(conn, "close"):
            conn.close()
    except Exception as exc:  # noqa: BLE001 -- best effort: the connection is dead anyway
        log.debug("closing the lost connection: %s", exc)


def _devlib_execute(lisa: Any, command: str, *, as_root: bool, timeout: float | None,
                   check_exit_code: bool, where: str) -> str:
    """devlib's ``execute``, its failures as :class:`TargetCommandError`."""
    from devlib.exception import DevlibError, TimeoutError as DevlibTimeout

    try:
        return lisa.execute(command, as_root=as_root, timeout=timeout, check_exit_code=check_exit_code)
    except DevlibTimeout as exc:
        raise TargetTimeout(f"on {where}, {command!r} did not finish within {timeout} s") from exc
    except DevlibError as exc:
        raise TargetCommandError(f"on {where}, {command!r} failed: {exc}".strip()) from exc


class DevlibTarget:
    """This machine or an Android device, through LISA/devlib's own connection."""

    endpoint = None
    clock = "host"
    time_scale = 1.0
    host_share = None

    def __init__(self, config: TargetConfig, lisa: Any):
        self.config = config
        self._lisa = lisa
        self._main_conn = lisa.conn
        self.kind = config.kind
        self.this_machine = config.kind == "host"
        self.serial = config.conf.get("device")
        self.description = ("this machine" if config.kind == "host"
                            else f"Android device {self.serial or '(default)'}")
        self.boot_methods: tuple[str, ...] = ("fastboot",) if config.kind == "android" else ()

    @classmethod
    def serves(cls, config: TargetConfig) -> bool:
        return config.kind in ("host", "android")

    @classmethod
    def first_boot_needs(cls, config: TargetConfig) -> FirstBoot | None:
        """Nothing: this machine and a phone run the kernel they have."""
        return None

    @classmethod
    def open(cls, config: TargetConfig) -> "DevlibTarget":
        return cls(config, connect_lisa(config))

    def use_clock(self, clock: str | None) -> None:
        refuse_clock(self, clock)

    def execute(self, command: str, *, as_root: bool = False, timeout: float | None = None,
                check_exit_code: bool = True) -> str:
        return _devlib_execute(self._lisa, command, as_root=as_root, timeout=timeout,
                              check_exit_code=check_exit_code, where=self.description)

    def background(self, command: str, *, as_root: bool = False):
        return self._lisa.background(command, as_root=as_root)

    def push(self, local: str | Path, remote: str) -> None:
        self._lisa.push(str(local), remote)

    def pull(self, remote: str, local: str | Path) -> None:
        self._lisa.pull(remote, str(local))

    def kernel_arch(self) -> str:
        # an Android device boots the arm64 Image (fastboot); this machine says what it is
        return "arm64" if self.kind == "android" else machine_arch(self)

    def kernel_cmdline(self, extra: str) -> str:
        return extra  # the boot image's own command line comes first (mkbootimg --cmdline)

    def boot(self, image: BootImage, method: str) -> None:
        if method not in self.boot_methods:
            raise UserError(f"{self.description} cannot boot another kernel by {method}"
                            + (f" (it boots by {', '.join(self.boot_methods)})" if self.boot_methods else ""))
        _fastboot(image, self.serial, self.kernel_cmdline(image.cmdline))
        self._reconnect(setup=False)

    def reset(self) -> bool:
        if self.kind == "android":
            adb = ["adb"] + (["-s", self.serial] if self.serial else [])
            for step in (adb + ["wait-for-device"], adb + ["reboot"], adb + ["wait-for-device"]):
                subprocess.run(step, capture_output=True, timeout=self._reset_timeout(), check=False)
        self._reconnect(setup=True)
        return True

    def _reset_timeout(self) -> float:
        return float(self.config.extras.get("reset-timeout-s", 600.0))

    def _reconnect(self, *, setup: bool) -> None:
        reconnect_lisa(self._lisa, timeout=self._reset_timeout(), setup=setup)
        self._main_conn = self._lisa.conn

    def probe(self, timeout: float) -> tuple[str | None, bool]:
        try:
            self._lisa.execute("true", timeout=timeout)  # on this thread's own connection
        except Exception as exc:  # noqa: BLE001 -- every devlib failure means "did not answer"
            return f"the target did not answer ({type(exc).__name__}: {exc})".strip(), False
        return None, False

    def console_tail(self, lines: int = 40) -> str | None:
        return None

    def lisa(self) -> Any:
        return self._lisa

    def prepare_boot(self) -> None:
        """Nothing to prepare: a real machine's boot needs only the kernel."""

    def interrupt(self) -> None:
        close_connection(self._main_conn)


def _fastboot(image: BootImage, serial: str | None, cmdline: str) -> None:
    """``fastboot boot`` an mkbootimg image of the arm64 kernel (RAM only). Untested here (no phone)."""
    if not image.arm64_image or not Path(image.arm64_image).is_file():
        raise UserError("fastboot needs the arm64 Image of the variant (build it with an aarch64 cross compiler)")
    adb = ["adb"] + (["-s", serial] if serial else [])
    fastboot = ["fastboot"] + (["-s", serial] if serial else [])
    with tempfile.TemporaryDirectory(prefix="lisa-ext-fastboot-") as tmp:
        boot_img = Path(tmp) / "boot.img"
        cmd = ["mkbootimg", "--kernel", str(image.arm64_image), "--cmdline", cmdline, "--header_version", "2",
               "--output", str(boot_img)]
        if image.ramdisk:
            cmd += ["--ramdisk", str(image.ramdisk)]
        if image.dtb:
            cmd += ["--dtb", str(image.dtb)]
        for step in (cmd, adb + ["reboot", "bootloader"], fastboot + ["boot", str(boot_img)],
                     adb + ["wait-for-device"]):
            proc = subprocess.run(step, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise UserError(f"{' '.join(step)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
