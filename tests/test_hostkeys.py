"""Host keys are checked: trusted on first use or pinned, and a changed key is refused.

The peer is a real SSH server on 127.0.0.1 (paramiko's server side, run in a
thread) whose host key the test swaps, so both the OpenSSH client's own check and
the paramiko check devlib connections go through are exercised on the wire.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace

import paramiko
import pytest

from lisa_ext import hostkeys


class _AcceptAll(paramiko.ServerInterface):
    def get_allowed_auths(self, username):
        return "password"

    def check_auth_password(self, username, password):
        return paramiko.AUTH_SUCCESSFUL


class _Server:
    """SSH server on a loopback port presenting ``key``; accepts any password."""

    def __init__(self, key: paramiko.PKey, port: int = 0):
        self.key = key
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._transports: list[paramiko.Transport] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            t = paramiko.Transport(conn)
            t.add_server_key(self.key)
            self._transports.append(t)
            try:
                t.start_server(server=_AcceptAll())
            except (paramiko.SSHException, EOFError, OSError):
                pass

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        for t in self._transports:
            t.close()
        self.sock.close()


@pytest.fixture
def known_hosts(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "config" / "known_hosts"
    monkeypatch.setenv("LISA_EXT_KNOWN_HOSTS", str(path))
    return path


def _keypair() -> tuple[paramiko.PKey, paramiko.PKey]:
    # paramiko cannot generate ed25519 keys; RSA keys are as good a stand-in for a board's key
    return paramiko.RSAKey.generate(2048), paramiko.RSAKey.generate(2048)


def test_first_use_records_then_a_changed_key_is_refused(known_hosts):
    first, second = _keypair()
    server = _Server(first)
    try:
        fp = hostkeys.check_host_key("127.0.0.1", server.port)
        assert fp == hostkeys.fingerprint(first)
        entry = hostkeys.known_hosts_entry("127.0.0.1", server.port)
        assert known_hosts.read_text().startswith(entry + " ssh-rsa ")
        assert hostkeys.check_host_key("127.0.0.1", server.port) == fp  # same key: accepted, not re-added
        assert len(known_hosts.read_text().splitlines()) == 1
    finally:
        server.close()
    impostor = _Server(second, port=server.port)  # same address and port as the trusted board, another key
    try:
        with pytest.raises(hostkeys.HostKeyError) as exc:
            hostkeys.check_host_key("127.0.0.1", impostor.port)
        message = str(exc.value)
        assert str(known_hosts) in message and "ssh-keygen -R" in message
        assert hostkeys.fingerprint(second) in message and hostkeys.fingerprint(first) in message
    finally:
        impostor.close()
    assert len(known_hosts.read_text().splitlines()) == 1, "a changed key must not be recorded"


def test_pinned_key_accepts_only_that_key(tmp_path, known_hosts):
    good, bad = _keypair()
    pin = tmp_path / "vboard_known_hosts"
    pin.write_text(f"{hostkeys.VBOARD_ALIAS} {good.get_name()} {good.get_base64()}\n")
    for key, ok in ((good, True), (bad, False)):
        server = _Server(key)
        try:
            if ok:
                assert hostkeys.check_host_key("127.0.0.1", server.port, pinned=pin,
                                               alias=hostkeys.VBOARD_ALIAS) == hostkeys.fingerprint(good)
            else:
                with pytest.raises(hostkeys.HostKeyError):
                    hostkeys.check_host_key("127.0.0.1", server.port, pinned=pin, alias=hostkeys.VBOARD_ALIAS)
        finally:
            server.close()
    assert not known_hosts.exists(), "a pinned check must not touch the trust-on-first-use file"
    with pytest.raises(hostkeys.HostKeyError, match="no host key is pinned"):
        server = _Server(good)
        try:
            hostkeys.check_host_key("127.0.0.1", server.port, pinned=pin, alias="another-board")
        finally:
            server.close()


def _ssh(port: int, options: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ssh", "-p", str(port), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
         "-o", "PreferredAuthentications=publickey", *options, "root@127.0.0.1", "true"],
        capture_output=True, text=True, timeout=60)


def test_openssh_client_trusts_on_first_use_and_refuses_a_change(known_hosts):
    first, second = _keypair()
    server = _Server(first)
    try:
        proc = _ssh(server.port, hostkeys.openssh_options())
        # the key exchange passed (the host key was accepted and recorded); authentication is not the point
        assert "IDENTIFICATION HAS CHANGED" not in proc.stderr
        assert hostkeys.known_hosts_entry("127.0.0.1", server.port) in known_hosts.read_text()
    finally:
        server.close()
    impostor = _Server(second, port=server.port)
    try:
        proc = _ssh(impostor.port, hostkeys.openssh_options())
        assert proc.returncode == 255
        assert "IDENTIFICATION HAS CHANGED" in proc.stderr
    finally:
        impostor.close()


def test_openssh_client_with_a_pinned_alias(tmp_path):
    good, bad = _keypair()
    pin = tmp_path / "pin"
    pin.write_text(f"{hostkeys.VBOARD_ALIAS} {good.get_name()} {good.get_base64()}\n")
    opts = hostkeys.openssh_options(pinned=pin, alias=hostkeys.VBOARD_ALIAS)
    for key, changed in ((good, False), (bad, True)):
        server = _Server(key)
        try:
            proc = _ssh(server.port, opts)
            assert ("IDENTIFICATION HAS CHANGED" in proc.stderr) is changed, proc.stderr
        finally:
            server.close()


def test_check_connection_compares_the_live_connection(known_hosts):
    first, second = _keypair()
    server = _Server(first)
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    try:
        hostkeys.check_host_key("127.0.0.1", server.port)
        client.connect("127.0.0.1", port=server.port, username="root", password="x",
                       look_for_keys=False, allow_agent=False, timeout=10)
        target = SimpleNamespace(conn=SimpleNamespace(client=client, host="127.0.0.1", port=server.port))
        assert hostkeys.check_connection(target) == hostkeys.fingerprint(first)
        # the same connection judged against a record of another key is refused
        entry = hostkeys.known_hosts_entry("127.0.0.1", server.port)
        known_hosts.write_text(f"{entry} {second.get_name()} {second.get_base64()}\n")
        with pytest.raises(hostkeys.HostKeyError):
            hostkeys.check_connection(target)
    finally:
        client.close()
        server.close()
    assert hostkeys.check_connection(SimpleNamespace(conn=SimpleNamespace())) is None
