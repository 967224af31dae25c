"""SSH host keys of the targets: pinned or trusted on first use, never ignored.

A campaign sends root commands and kernels to the board it reaches, so the
board must be the one it was last time. Two kinds of trust, both kept in
OpenSSH ``known_hosts`` files (``sshd(8)``, "SSH_KNOWN_HOSTS FILE FORMAT"):

- **pinned**: the virtual board's host key is generated when its rootfs is made
  and written to a known_hosts file of its own under the alias
  :data:`VBOARD_ALIAS`, whatever port QEMU forwards.
- **trust on first use**: any other board's key is recorded in the project's
  known_hosts (:func:`known_hosts_path`) the first time, and a different key
  later is an error that names the file and the command that forgets the old
  key, never a silent re-trust.

The OpenSSH client does the check itself (:func:`openssh_options`). devlib
connects with paramiko and only consults ``~/.ssh/known_hosts``, so
:func:`check_host_key` performs the same check with paramiko before LISA
connects, and :func:`check_connection` compares the key of the connection
devlib actually opened.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
from pathlib import Path
from typing import Any

import paramiko

from lisa_ext.errors import UserError

__all__ = [
    "VBOARD_ALIAS",
    "HostKeyError",
    "check_connection",
    "check_host_key",
    "fingerprint",
    "known_hosts_entry",
    "known_hosts_path",
    "openssh_options",
]

#: Name under which the virtual board's key is pinned (``HostKeyAlias``).
VBOARD_ALIAS = "lisa-ext-vboard"


class HostKeyError(UserError):
    """A target presented a host key other than the one recorded for it."""


def known_hosts_path() -> Path:
    """The project's known_hosts: ``$LISA_EXT_KNOWN_HOSTS``, else ``~/.config/lisa-ext/known_hosts``."""
    env = os.environ.get("LISA_EXT_KNOWN_HOSTS")
    return Path(env) if env else Path.home() / ".config" / "lisa-ext" / "known_hosts"


def known_hosts_entry(host: str, port: int) -> str:
    """The name OpenSSH files a host under: ``host`` on port 22, ``[host]:port`` otherwise."""
    return host if int(port) == 22 else f"[{host}]:{int(port)}"


def fingerprint(key: paramiko.PKey) -> str:
    """``SHA256:...`` as ``ssh-keygen -lf`` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def openssh_options(*, pinned: Path | None = None, alias: str | None = None) -> list[str]:
    """``ssh`` options that check the host key: against ``pinned`` (with ``alias``), else trust on first use."""
    if pinned is not None:
        opts = ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={pinned}"]
        return opts + (["-o", f"HostKeyAlias={alias}"] if alias else [])
    path = known_hosts_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # unhashed, so that the file reads as the list of boards the project trusts
    return ["-o", "StrictHostKeyChecking=accept-new", "-o", f"UserKnownHostsFile={path}", "-o", "HashKnownHosts=no"]


def _server_key(host: str, port: int, timeout: float) -> paramiko.PKey:
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


def _changed(entry: str, file: Path, recorded: paramiko.PKey, seen: paramiko.PKey) -> HostKeyError:
    return HostKeyError(
        f"{entry} presented the {seen.get_name()} host key {fingerprint(seen)}, but {file} records "
        f"{fingerprint(recorded)} for it: this is not the target the campaign trusted (or it was reinstalled). "
        f"If the change is expected, forget the old key with: ssh-keygen -R '{entry}' -f {file}")


def _verify(entry: str, key: paramiko.PKey, file: Path, trust_new: bool) -> str:
    known = paramiko.HostKeys()
    if file.exists():
        known.load(str(file))
    recorded = known.lookup(entry)
    if recorded:
        same_type = recorded.get(key.get_name())
        if same_type is not None:
            if same_type != key:
                raise _changed(entry, file, same_type, key)
            return fingerprint(key)
        other = next(iter(recorded.values()))
        raise _changed(entry, file, other, key)
    if not trust_new:
        raise HostKeyError(f"{entry} is not in {file}: no host key is pinned for it")
    file.parent.mkdir(parents=True, exist_ok=True)
    with open(file, "a") as f:
        f.write(f"{entry} {key.get_name()} {key.get_base64()}\n")
    return fingerprint(key)


def check_host_key(host: str, port: int, *, pinned: Path | None = None, alias: str | None = None,
                   timeout: float = 20) -> str:
    """Check the key ``host:port`` presents; return its fingerprint.

    With ``pinned`` the key must be the one recorded there under ``alias``;
    otherwise the project's known_hosts decides, recording a first-seen key.
    """
    key = _server_key(host, port, timeout)
    if pinned is not None:
        return _verify(alias or known_hosts_entry(host, port), key, pinned, trust_new=False)
    return _verify(known_hosts_entry(host, port), key, known_hosts_path(), trust_new=True)


def check_connection(target: Any, *, pinned: Path | None = None, alias: str | None = None) -> str | None:
    """Check the host key of the SSH connection a devlib/LISA ``target`` opened; None if it has none."""
    conn = getattr(target, "conn", None)
    client = getattr(conn, "client", None)
    transport = client.get_transport() if client is not None else None
    if transport is None:
        return None
    key = transport.get_remote_server_key()
    if pinned is not None:
        return _verify(alias or known_hosts_entry(conn.host, conn.port), key, pinned, trust_new=False)
    return _verify(known_hosts_entry(conn.host, conn.port), key, known_hosts_path(), trust_new=False)
