"""SSH to targets: one trust path for every connection lisa-ext opens.

A campaign sends root commands and kernels to the board it reaches, so every
SSH connection checks the board's host key against a ``known_hosts`` file the
project owns (``sshd(8)``, "SSH_KNOWN_HOSTS FILE FORMAT") right after the key
exchange, before anything is sent: no command, no password, no key offer. Two
clients, one :class:`Trust`:

- the OpenSSH client (:class:`SshClient`: the virtual board's commands, kernel
  deploys, a plain SSH board's commands) with ``StrictHostKeyChecking=yes``
  and only the pinned file (no ``~/.ssh/known_hosts``, no system file, no
  ``~/.ssh/config``); the user goes in ``-l``, the host after ``--``;
- paramiko (LISA/devlib's connections, see :mod:`lisa_ext.target.lisa_link`):
  :func:`open_paramiko` loads the pinned keys into a client whose policy for
  any other key is :class:`paramiko.RejectPolicy`'s, and devlib opens every
  connection (the first, one per thread, every reconnect) through it.

Where keys are pinned:

- the virtual board's key is made with its rootfs and pinned in its cache
  (``vboard/ssh/known_hosts``) under one alias (``HostKeyAlias``), whatever
  port QEMU forwards (:mod:`lisa_ext.vboard.rootfs`);
- any other board's key is pinned in the project's known_hosts
  (:func:`known_hosts_path`) by ``lisa-ext target trust CONF``, which prints the
  key's fingerprint to compare with the board's own
  (``ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`` on its console).
  Nothing is trusted on first use: an unpinned or changed key stops the
  connection with an error naming the file and the command that fixes it.

The OpenSSH client shares one connection per board (``ControlMaster``: a new
handshake costs the TCG guest ~1.3 s, a command over the shared one ~0.15 s).
Its sockets live in :func:`control_dir`, a 0700 directory of the user's own.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
import socket
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import paramiko

from lisa_ext.errors import UserError
from lisa_ext.workbench import cache_root

__all__ = [
    "Endpoint",
    "HostKeyError",
    "SSH_FAILED",
    "SshClient",
    "Trust",
    "control_dir",
    "fingerprint",
    "known_hosts_entry",
    "known_hosts_path",
    "open_paramiko",
    "scan_host_key",
]

#: a unix socket path holds at most 107 bytes; ssh adds ".<16 random chars>" while it binds
_SOCKET_DIR_MAX = 107 - 17 - 1 - 16
#: the OpenSSH client's exit status for its own failures (connection, host key, authentication)
SSH_FAILED = 255


class HostKeyError(UserError):
    """A target presented a host key other than the one pinned for it, or none is pinned."""


def known_hosts_path() -> Path:
    """The project's known_hosts: ``$LISA_EXT_KNOWN_HOSTS``, else ``~/.config/lisa-ext/known_hosts``."""
    env = os.environ.get("LISA_EXT_KNOWN_HOSTS")
    return Path(env).expanduser() if env else Path.home() / ".config" / "lisa-ext" / "known_hosts"


def known_hosts_entry(host: str, port: int) -> str:
    """The name OpenSSH files a host under: ``host`` on port 22, ``[host]:port`` otherwise."""
    return host if int(port) == 22 else f"[{host}]:{int(port)}"


def fingerprint(key: paramiko.PKey) -> str:
    """``SHA256:...`` as ``ssh-keygen -lf`` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


@dataclass(frozen=True)
class Trust:
    """The host keys a target may present: those ``file`` records under ``name``.

    ``name`` is the host's own entry (:func:`known_hosts_entry`) or, with
    ``alias``, a ``HostKeyAlias`` (the virtual board's, whatever its port).
    ``pin_hint`` is the command that pins a key, for the error when none is.
    """

    file: Path
    name: str
    alias: bool = False
    pin_hint: str = ""

    @classmethod
    def for_host(cls, host: str, port: int, *, pin_hint: str = "") -> "Trust":
        """A board pinned in the project's known_hosts."""
        return cls(known_hosts_path(), known_hosts_entry(host, port), pin_hint=pin_hint)

    def keys(self) -> dict[str, paramiko.PKey]:
        """The pinned keys, by key type (empty when none is pinned)."""
        known = paramiko.HostKeys()
        if self.file.exists():
            try:
                known.load(str(self.file))
            except (OSError, UnicodeDecodeError, paramiko.SSHException) as exc:
                raise HostKeyError(f"{self.file}: cannot read it as a known_hosts file: {exc}") from None
        return dict(known.lookup(self.name) or {})

    def _unpinned(self) -> HostKeyError:
        hint = f"; check its fingerprint and pin it with: {self.pin_hint}" if self.pin_hint else ""
        return HostKeyError(f"no host key is pinned for {self.name} in {self.file}{hint}")

    def _changed(self, recorded: paramiko.PKey, seen: paramiko.PKey) -> HostKeyError:
        return HostKeyError(
            f"{self.name} presented the {seen.get_name()} host key {fingerprint(seen)}, but {self.file} pins "
            f"{fingerprint(recorded)} for it: this is not the target that was trusted (or it was reinstalled). "
            f"If the change is expected, forget the old key with: ssh-keygen -R '{self.name}' -f {self.file}")

    def verify(self, key: paramiko.PKey) -> str:
        """The fingerprint of ``key`` if it is the pinned one, else :class:`HostKeyError`."""
        pinned = self.keys()
        if not pinned:
            raise self._unpinned()
        same_type = pinned.get(key.get_name())
        if same_type != key:
            raise self._changed(same_type or next(iter(pinned.values())), key)
        return fingerprint(key)

    def pin(self, key: paramiko.PKey) -> bool:
        """Record ``key``; False when it was pinned already. A different pinned key is an error."""
        if self.keys():
            self.verify(key)
            return False
        self.file.parent.mkdir(parents=True, exist_ok=True)
        # unhashed, so that the file reads as the list of boards the project trusts
        with open(self.file, "a") as f:
            f.write(f"{self.name} {key.get_name()} {key.get_base64()}\n")
        return True

    def openssh_options(self) -> list[str]:
        """``ssh`` options that accept only the pinned key and never write the file."""
        opts = ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={self.file}",
                "-o", "GlobalKnownHostsFile=none", "-o", "UpdateHostKeys=no", "-o", "CheckHostIP=no"]
        return opts + (["-o", f"HostKeyAlias={self.name}"] if self.alias else [])

    def refused(self, stderr: str) -> HostKeyError:
        """The error for an OpenSSH client that refused the host key (its own lines quoted)."""
        lines = [line.strip() for line in stderr.splitlines()
                 if line.strip() and not line.startswith("@") and "Please contact" not in line]
        said = " ".join(lines)[-600:]
        changed = "HAS CHANGED" in stderr
        hint = (f" If the change is expected, forget the old key with: ssh-keygen -R '{self.name}' -f {self.file}"
                if changed else
                f" Check its fingerprint and pin it with: {self.pin_hint}" if self.pin_hint else "")
        # the words that matter first: ssh's own text is cut to its end, and its banner is dropped
        what = "the host key has changed: it" if changed else "the host key"
        return HostKeyError(f"{self.name}: {what} is not the one pinned in {self.file} "
                            f"(ssh: {said}).{hint}")


class _RejectUnpinned(paramiko.RejectPolicy):
    """paramiko's RejectPolicy, saying which file holds no key for the target."""

    def __init__(self, trust: Trust):
        self.trust = trust

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise self.trust._unpinned()


def open_paramiko(trust: Trust, host: str, port: int, *, connect_timeout: float = 20,
                  **auth: Any) -> paramiko.SSHClient:
    """A paramiko client connected to ``host:port`` once its key passed ``trust``.

    Only the pinned keys are loaded (not ``~/.ssh/known_hosts``); paramiko
    compares the server's key with them after the key exchange and before
    authentication, so a wrong key never sees a password. ``auth`` goes to
    :meth:`paramiko.SSHClient.connect` (``username``, ``password``, ``key_filename``, ...).
    """
    client = paramiko.SSHClient()
    lookup = known_hosts_entry(host, port)
    for key in trust.keys().values():
        client.get_host_keys().add(lookup, key.get_name(), key)
    client.set_missing_host_key_policy(_RejectUnpinned(trust))
    try:
        client.connect(hostname=host, port=int(port), timeout=connect_timeout, **auth)
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise trust._changed(exc.expected_key, exc.key) from None
    except BaseException:
        client.close()
        raise
    return client


def scan_host_key(host: str, port: int, timeout: float = 20) -> paramiko.PKey:
    """The host key ``host:port`` presents (a key exchange only: nothing else is sent)."""
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as exc:
        raise UserError(f"cannot reach {host}:{port} over SSH: {exc}") from None
    transport = paramiko.Transport(sock)
    try:
        transport.banner_timeout = transport.handshake_timeout = timeout
        transport.start_client(timeout=timeout)
        return transport.get_remote_server_key()
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise UserError(f"SSH handshake with {host}:{port} failed: {exc}") from None
    finally:
        transport.close()


def _private_dir(path: Path) -> Path:
    """``path`` as a directory only this user can enter, or a UserError saying why not."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise UserError(f"{path}: expected a directory of user {os.geteuid()} for SSH sockets, found "
                        f"{'a link or file' if not stat.S_ISDIR(st.st_mode) else f'one of user {st.st_uid}'}")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def control_dir() -> Path:
    """A 0700 directory of this user for SSH control sockets and the password helper.

    ``$LISA_EXT_CACHE/ssh`` when its path leaves room for a socket name (a unix
    socket path holds ~100 bytes), else ``$XDG_RUNTIME_DIR/lisa-ext``, else
    ``/tmp/lisa-ext-<uid>`` (refused if another user made it).
    """
    candidates = [cache_root() / "ssh"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        candidates.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "lisa-ext")
    candidates.append(Path("/tmp") / f"lisa-ext-{os.geteuid()}")
    for path in candidates:
        if len(os.fsencode(path)) <= _SOCKET_DIR_MAX:
            return _private_dir(path)
    raise UserError(f"no short enough directory for SSH sockets (tried {', '.join(map(str, candidates))})")


_ASKPASS = ("#!/bin/sh\n# lisa-ext: answers the OpenSSH client's password prompt\n"
            "printf '%s\\n' \"$LISA_EXT_SSH_PASSWORD\"\n")


def _askpass() -> Path:
    path = control_dir() / "askpass"
    if not path.exists() or path.read_text() != _ASKPASS:
        tmp = path.with_name(f"askpass.{os.getpid()}")
        tmp.write_text(_ASKPASS)
        tmp.chmod(0o700)
        os.replace(tmp, path)
    return path


def _refuse_option_like(what: str, value: str) -> str:
    if not value or value.startswith("-") or any(c.isspace() for c in value):
        raise UserError(f"SSH {what} {value!r}: expected a name that does not start with '-' and holds no "
                        "spaces")
    return value


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom to log in, and which host key to accept."""

    host: str
    port: int
    username: str
    trust: Trust
    keyfile: Path | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self):
        _refuse_option_like("host", self.host)
        _refuse_option_like("user name", self.username)
        if not 0 < int(self.port) < 65536:
            raise UserError(f"SSH port {self.port!r}: expected 1-65535")

    def __str__(self) -> str:
        return f"{self.username}@{self.host}:{self.port}"

    def paramiko_auth(self) -> dict[str, Any]:
        """Authentication as devlib does it: the key file (or agent and default keys), or the password."""
        keys = self.password is None
        return {"username": self.username, "password": self.password,
                "key_filename": str(self.keyfile) if self.keyfile else None,
                "look_for_keys": keys, "allow_agent": keys}


class SshClient:
    """Commands on one :class:`Endpoint` through the OpenSSH client, over one shared connection."""

    def __init__(self, endpoint: Endpoint, *, connect_timeout: float = 20):
        self.endpoint = endpoint
        self.connect_timeout = connect_timeout

    def _socket(self) -> Path:
        e = self.endpoint
        pins = e.trust.file.read_bytes() if e.trust.file.exists() else b""
        # a master is reused only by the same login checked against the same pins
        key = hashlib.sha256("\0".join(map(str, (e.username, e.host, e.port, e.keyfile, e.trust.file,
                                                   e.trust.name))).encode() + b"\0" + pins)
        return control_dir() / key.hexdigest()[:16]

    def argv(self, command: str | None = None, *, tty: bool = False) -> list[str]:
        """``ssh ...`` running ``command`` (a shell command line) on the target; a login shell without."""
        e = self.endpoint
        argv = ["ssh", "-F", "none", *e.trust.openssh_options(),
                "-o", f"ConnectTimeout={int(self.connect_timeout)}", "-o", "LogLevel=ERROR",
                "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=6",
                "-o", "ControlMaster=auto", "-o", f"ControlPath={self._socket()}", "-o", "ControlPersist=300"]
        if e.password is None:
            argv += ["-o", "BatchMode=yes"]
        else:
            argv += ["-o", "BatchMode=no", "-o", "NumberOfPasswordPrompts=1", "-o", "PubkeyAuthentication=no"]
        if e.keyfile:
            argv += ["-i", str(e.keyfile)]
        argv += ["-p", str(int(e.port)), "-l", e.username, "-t" if tty else "-T", "--", e.host]
        return argv + ([command] if command is not None else [])

    def env(self) -> dict[str, str] | None:
        """The environment the client needs: a password is handed to it by ``SSH_ASKPASS``."""
        if self.endpoint.password is None:
            return None
        return {**os.environ, "SSH_ASKPASS": str(_askpass()), "SSH_ASKPASS_REQUIRE": "force",
                "LISA_EXT_SSH_PASSWORD": self.endpoint.password}

    def _checked(self, proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
        if proc.returncode == SSH_FAILED:
            err = proc.stderr.decode(errors="replace") if isinstance(proc.stderr, bytes) else proc.stderr or ""
            if "Host key verification failed" in err:
                raise self.endpoint.trust.refused(err)
        return proc

    def run(self, command: str, *, timeout: float | None = 600, input: bytes | None = None,
            stdin: IO | None = None, stdout: IO | int = subprocess.PIPE) -> subprocess.CompletedProcess:
        """Run ``command``; the completed process (bytes). A refused host key is a :class:`HostKeyError`."""
        proc = subprocess.run(self.argv(command), input=input, stdin=stdin, stdout=stdout,
                              stderr=subprocess.PIPE, timeout=timeout, env=self.env())
        return self._checked(proc)

    def popen(self, command: str, **kwargs: Any) -> subprocess.Popen:
        """Start ``command`` and return at once (the caller reads, polls and waits)."""
        return subprocess.Popen(self.argv(command), env=self.env(), **kwargs)

    def push(self, local: Path, remote: str, *, timeout: float = 600) -> subprocess.CompletedProcess:
        """Stream one file to ``remote`` (no scp/sftp needed on the target)."""
        with open(local, "rb") as f:
            return self.run(f"cat > {shlex.quote(remote)}", stdin=f, timeout=timeout)

    def pull(self, remote: str, local: Path, *, timeout: float = 600) -> subprocess.CompletedProcess:
        with open(local, "wb") as f:
            return self.run(f"cat {shlex.quote(remote)}", stdout=f, timeout=timeout)

    def close(self) -> None:
        """Stop the shared connection (calls blocked on it fail at once); the next call opens a new one."""
        socket_path = self._socket()
        if socket_path.exists():
            subprocess.run(["ssh", "-F", "none", "-o", f"ControlPath={socket_path}", "-O", "exit", "--",
                            self.endpoint.host], capture_output=True, timeout=30, check=False)
