"""A Linux board over SSH (LISA kind ``linux``): commands through the OpenSSH client, kernels by kexec.

Commands go through :class:`lisa_ext.ssh.SshClient` (pinned host key, one
shared connection); LISA's own connection (:meth:`SshTarget.lisa`, for
workloads) is opened on first use with the same pin. A kernel is put on the
board with ``kexec``: copy the image and its modules, ``kexec -s -l``
(``kexec_file_load``, falling back to ``kexec -l``) and ``kexec -e``, wait for
a new boot id, reopen LISA's connection. No bootloader or flashing involved.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from lisa_ext.errors import UserError
from lisa_ext.running_kernel import probe_running_kernel
from lisa_ext.ssh import SSH_FAILED, Endpoint, HostKeyError, SshClient
from lisa_ext.staged_modules import modules_tarball
from lisa_ext.target.config import TargetConfig
from lisa_ext.target.devlib_target import close_connection, connect_lisa, reconnect_lisa
from lisa_ext.target.protocol import (BootImage, FirstBoot, TargetCommandError, TargetTimeout, machine_arch,
                                      refuse_clock)

__all__ = ["SshTarget", "merge_cmdline"]

log = logging.getLogger(__name__)

_REMOTE_DIR = "/tmp/lisa-ext-kexec"


def merge_cmdline(base: str, extra: str) -> str:
    """``base`` with ``extra`` appended, dropping the ``base`` parameters ``extra`` sets again
    (a board kexec'd into one variant does not carry its parameters into the next)."""
    names = {token.split("=", 1)[0] for token in extra.split()}
    kept = [token for token in base.split() if token.split("=", 1)[0] not in names]
    return " ".join(kept + extra.split())


class _Background:
    """A command started over SSH: the remote shell prints its pid (a process group leader, sshd
    gives each session its own) before it ``exec``s the command."""

    def __init__(self, proc: subprocess.Popen, where: str):
        self._proc = proc
        first = proc.stdout.readline().decode(errors="replace").strip()
        if not first.isdigit():
            proc.wait()
            raise TargetCommandError(f"on {where}, a background command did not start: {first!r}")
        self.pid = int(first)
        self.output = bytearray()
        threading.Thread(target=self._drain, args=(proc.stdout,), daemon=True).start()

    def _drain(self, stream: IO[bytes]) -> None:
        # keeps the pipe flowing (a full pipe would stall the command); the last 64 KiB are kept
        for chunk in iter(lambda: stream.read1(65536), b""):
            self.output += chunk
            del self.output[:-65536]

    def poll(self) -> int | None:
        return self._proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._proc.wait(timeout)


class SshTarget:
    """A Linux board over SSH: the :class:`~lisa_ext.target.protocol.Target` of a ``linux`` config."""

    kind = "linux"
    boot_methods: tuple[str, ...] = ("kexec",)
    clock = "host"
    time_scale = 1.0
    this_machine = False
    host_share = None

    def __init__(self, config: TargetConfig | None, endpoint: Endpoint | None):
        self._config = config
        self._endpoint = endpoint
        self._lisa: Any = None
        self._main_conn: Any = None

    @classmethod
    def serves(cls, config: TargetConfig) -> bool:
        return config.kind == "linux"

    @classmethod
    def first_boot_needs(cls, config: TargetConfig) -> FirstBoot | None:
        """Nothing: a Linux board runs the kernel it has until a campaign deploys one."""
        return None

    @classmethod
    def open(cls, config: TargetConfig) -> "SshTarget":
        return cls(config, config.ssh_endpoint())

    # -- what it is -------------------------------------------------------------

    @property
    def config(self) -> TargetConfig:
        return self._config

    def use_clock(self, clock: str | None) -> None:
        refuse_clock(self, clock)

    @property
    def endpoint(self) -> Endpoint:
        return self._endpoint

    @property
    def ssh(self) -> SshClient:
        return SshClient(self.endpoint)

    @property
    def description(self) -> str:
        return str(self.endpoint)

    def _reset_timeout(self) -> float:
        return float(self.config.extras.get("reset-timeout-s", 600.0))

    # -- commands -----------------------------------------------------------------

    def _as(self, command: str, as_root: bool) -> str:
        if as_root and self.endpoint.username != "root":
            return f"sudo -n sh -c {shlex.quote(command)}"
        return command

    def execute(self, command: str, *, as_root: bool = False, timeout: float | None = None,
                check_exit_code: bool = True) -> str:
        try:
            proc = self.ssh.run(self._as(command, as_root), timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TargetTimeout(f"on {self.description}, {command!r} did not finish within {timeout} s") from None
        if proc.returncode == SSH_FAILED or check_exit_code and proc.returncode != 0:
            raise TargetCommandError(f"on {self.description}, {command!r} exited with {proc.returncode}: "
                                     f"{proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout.decode(errors="replace")

    def background(self, command: str, *, as_root: bool = False) -> _Background:
        proc = self.ssh.popen(f"echo $$; exec sh -c {shlex.quote(self._as(command, as_root))}",
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return _Background(proc, self.description)

    def push(self, local: str | Path, remote: str) -> None:
        proc = self.ssh.push(Path(local), remote)
        if proc.returncode != 0:
            raise TargetCommandError(f"copying {local} to {self.description}:{remote} failed: "
                                     f"{proc.stderr.decode(errors='replace').strip()}")

    def pull(self, remote: str, local: str | Path) -> None:
        proc = self.ssh.pull(remote, Path(local))
        if proc.returncode != 0:
            raise TargetCommandError(f"copying {self.description}:{remote} to {local} failed: "
                                     f"{proc.stderr.decode(errors='replace').strip()}")

    # -- kernels ------------------------------------------------------------------

    def kernel_arch(self) -> str:
        return machine_arch(self)

    def kernel_cmdline(self, extra: str) -> str:
        return merge_cmdline(self.execute("cat /proc/cmdline", timeout=60).strip(), extra)

    def boot(self, image: BootImage, method: str) -> None:
        if method not in self.boot_methods:
            raise UserError(f"{self.description} boots a kernel by {', '.join(self.boot_methods)}, not {method}")
        self._kexec(image, self.kernel_cmdline(image.cmdline))
        self._reconnect(setup=False)

    def _boot_id(self) -> str:
        return probe_running_kernel(lambda c: self.execute(c, as_root=True, timeout=60)).boot_id or ""

    def _kexec(self, image: BootImage, cmdline: str) -> None:
        old_boot_id = self._boot_id()
        run = lambda command, timeout: self.execute(command, as_root=True, timeout=timeout)  # noqa: E731
        with tempfile.TemporaryDirectory(prefix="lisa-ext-kexec-") as tmp:
            run(f"rm -rf {_REMOTE_DIR} && mkdir -p {_REMOTE_DIR}", 60)
            self.push(image.kernel, f"{_REMOTE_DIR}/bzImage")
            if image.modules_dir:
                tarball = modules_tarball(image.modules_dir, image.release, image.load,
                                          Path(tmp) / "modules.tar.gz")
                self.push(tarball, f"{_REMOTE_DIR}/modules.tar.gz")
                target_dir = shlex.quote(f"/lib/modules/{image.release}")
                # A real directory replaces any link to the previous variant's modules disk.
                run(f"rm -rf {target_dir} && mkdir -p {target_dir} && "
                    f"tar -xzf {_REMOTE_DIR}/modules.tar.gz -C {target_dir}", 900)
        kernel, quoted_cmdline = f"{_REMOTE_DIR}/bzImage", shlex.quote(cmdline)
        run(f"kexec -s -l {kernel} --command-line={quoted_cmdline} "
            f"|| kexec -l {kernel} --command-line={quoted_cmdline}", 300)
        # Detach kexec -e so this SSH command returns before the kernel is replaced.
        run("sync; nohup sh -c 'sleep 1; kexec -e' >/dev/null 2>&1 &", 60)
        log.info("%s: kexec into %s", self.description, image.release)
        self._wait_back(old_boot_id)

    def _wait_back(self, old_boot_id: str, timeout: float = 600) -> None:
        """Wait until the board answers with a boot id other than ``old_boot_id``."""
        self.ssh.close()  # the shared connection died with the old kernel
        deadline = time.monotonic() + timeout
        time.sleep(3)
        while time.monotonic() < deadline:
            try:
                if self.execute("cat /proc/sys/kernel/random/boot_id", timeout=30).strip() != old_boot_id:
                    return
            except HostKeyError:
                raise
            except Exception as exc:  # noqa: BLE001 -- the board refuses connections while it reboots
                log.debug("%s not back yet: %s", self.description, exc)
            time.sleep(3)
        raise TargetCommandError(f"{self.description} did not come back within {timeout:.0f} s after kexec")

    # -- faults -------------------------------------------------------------------

    def reset(self) -> bool:
        command = self.config.extras.get("reset-command")
        self.ssh.close()
        if command:
            proc = subprocess.run(command, shell=True, capture_output=True, text=True,
                                  timeout=self._reset_timeout())
            if proc.returncode != 0:
                raise UserError(f"{self.config.path}: lisa-ext.reset-command exited with "
                                f"{proc.returncode}: {(proc.stderr or proc.stdout).strip()}")
        else:
            log.info("no lisa-ext: reset-command in %s: waiting for the target to come back by itself",
                     self.config.path)
        self._wait_back("", timeout=self._reset_timeout())
        self._reconnect(setup=True)
        return True

    def probe(self, timeout: float) -> tuple[str | None, bool]:
        try:
            proc = self.ssh.run("true", timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"{self.description} did not answer over SSH within {timeout:.0f} s", False
        if proc.returncode != 0:
            return f"ssh to {self.description} failed: {proc.stderr.decode(errors='replace').strip()}", False
        return None, False

    def console_tail(self, lines: int = 40) -> str | None:
        return None

    # -- LISA ---------------------------------------------------------------------

    def lisa(self) -> Any:
        if self._lisa is None:
            self._lisa = self._connect_lisa()
            self._main_conn = self._lisa.conn
        return self._lisa

    def _connect_lisa(self) -> Any:
        """LISA's connection; a board that cannot be reached or logged in to is one line naming
        the target config and the login (devlib's errors are tracebacks of its own)."""
        # deferred: devlib takes a second to import, and only a connection needs its errors
        from devlib.exception import DevlibError, TargetCalledProcessError
        from paramiko import SSHException

        where = f"{self.config.path}: {self.endpoint}" if self.config is not None else str(self.endpoint)
        keyfile = self.endpoint.keyfile
        if keyfile is not None and not keyfile.is_file():
            raise UserError(f"{where}: the key file {keyfile} (keyfile) does not exist")
        try:
            return connect_lisa(self.config, self.endpoint)
        except TargetCalledProcessError:
            raise  # connected: a command of LISA's setup failed, which its own error says
        except (DevlibError, SSHException, OSError) as exc:
            reason = " ".join(str(exc).removeprefix("Connection lost: ").split()) or type(exc).__name__
            raise UserError(f"{where}: cannot connect over SSH: {reason}") from None

    def _reconnect(self, *, setup: bool) -> None:
        if self._lisa is not None:
            reconnect_lisa(self._lisa, timeout=self._reset_timeout(), setup=setup)
            self._main_conn = self._lisa.conn

    def prepare_boot(self) -> None:
        """Nothing to prepare: a real machine's boot needs only the kernel."""

    def interrupt(self) -> None:
        if self._main_conn is not None:
            close_connection(self._main_conn)
        try:
            self.ssh.close()
        except (UserError, TargetCommandError):
            pass  # nothing left to reach (the board's QEMU is gone): no shared connection either
