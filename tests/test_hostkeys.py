"""Host keys are checked before anything is sent, on every SSH connection lisa-ext opens.

The peer is a real SSH server on 127.0.0.1 (paramiko's server side, run in a
thread) that records every authentication attempt and every command it is
asked to run, so "refused before anything is sent" is checked on the wire: a
server presenting a key other than the pinned one sees no password, no key
and no command. Both clients are exercised: the OpenSSH client
(:class:`lisa_ext.ssh.SshClient`: the board's commands, kernel deploys, SSH
boards) and paramiko as devlib uses it (:func:`lisa_ext.ssh.open_paramiko`,
and devlib's own per-thread connection through the platform hook of
:mod:`lisa_ext.target.devlib_target`). The same refusal on the virtual board
itself (LISA connect, per-thread connection, reconnect, deploy) is in
test_vboard_boot.py.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import paramiko
import pytest

from lisa_ext import ssh
from lisa_ext.errors import SpecError, UserError

REPO = Path(__file__).resolve().parents[1]


class _Recorder(paramiko.ServerInterface):
    """Accepts any password, records what the client sends, answers every command with exit 0."""

    def __init__(self, server: "_Server"):
        self.server = server

    def get_allowed_auths(self, username):
        return "password,publickey"

    def check_auth_password(self, username, password):
        self.server.auth.append(("password", username, password))
        return paramiko.AUTH_SUCCESSFUL

    def check_auth_publickey(self, username, key):
        self.server.auth.append(("publickey", username, key.get_name()))
        self.server.public_keys.append(key.get_base64())
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        self.server.commands.append(command.decode())

        def answer():
            time.sleep(0.2)  # after paramiko has acknowledged the request (sent once this returns)
            channel.send(b"done\n")
            channel.send_exit_status(0)
            channel.close()

        threading.Thread(target=answer, daemon=True).start()
        return True


class _Server:
    """SSH server on a loopback port presenting ``key``."""

    def __init__(self, key: paramiko.PKey, port: int = 0):
        self.key = key
        self.auth: list[tuple] = []
        self.public_keys: list[str] = []
        self.commands: list[str] = []
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
                t.start_server(server=_Recorder(self))
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
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "cache"))
    return path


@pytest.fixture(scope="module")
def keys() -> tuple[paramiko.PKey, paramiko.PKey]:
    # paramiko cannot generate ed25519 keys; RSA keys are as good a stand-in for a board's key
    return paramiko.RSAKey.generate(2048), paramiko.RSAKey.generate(2048)


@pytest.fixture
def servers(keys):
    """The trusted board and an impostor with another key (each on its own port)."""
    good, bad = _Server(keys[0]), _Server(keys[1])
    yield good, bad
    good.close()
    bad.close()


def _endpoint(port: int, password: str | None = "s3cret", **kw) -> ssh.Endpoint:
    trust = ssh.Trust.for_host("127.0.0.1", port, pin_hint="lisa-ext target trust X")
    return ssh.Endpoint("127.0.0.1", port, "root", trust, password=password, **kw)


def _pin(port: int, key: paramiko.PKey) -> None:
    """Pin ``key`` for a port as `lisa-ext target trust` does."""
    assert ssh.Trust.for_host("127.0.0.1", port).pin(key) is True


def test_pin_records_once_and_a_changed_key_is_refused(known_hosts, keys):
    good, bad = keys
    trust = ssh.Trust.for_host("127.0.0.1", 2222)
    with pytest.raises(ssh.HostKeyError, match="no host key is pinned"):
        trust.verify(good)
    assert trust.pin(good) is True
    assert known_hosts.read_text() == f"[127.0.0.1]:2222 ssh-rsa {good.get_base64()}\n"
    assert trust.pin(good) is False and trust.verify(good) == ssh.fingerprint(good)
    with pytest.raises(ssh.HostKeyError) as err:
        trust.pin(bad)
    message = str(err.value)
    assert ssh.fingerprint(bad) in message and ssh.fingerprint(good) in message
    assert f"ssh-keygen -R '[127.0.0.1]:2222' -f {known_hosts}" in message
    assert len(known_hosts.read_text().splitlines()) == 1, "a changed key must not be recorded"


def test_openssh_client_refuses_an_impostor_before_sending_anything(known_hosts, servers, tmp_path):
    good, bad = servers
    _pin(good.port, good.key)
    # the impostor answers on a port whose pin is the trusted board's key
    ssh.Trust.for_host("127.0.0.1", bad.port).pin(good.key)
    marker = tmp_path / "ran"
    for password in ("s3cret", None):
        client = ssh.SshClient(_endpoint(bad.port, password=password))
        with pytest.raises(ssh.HostKeyError, match="not the one pinned") as err:
            client.run(f"touch {marker}", timeout=60)
        assert "ssh-keygen -R" in str(err.value)
        client.close()
    assert bad.auth == [] and bad.commands == [], "the impostor saw a login attempt or a command"
    # an unpinned board is refused the same way, with the command that pins it
    unpinned = _Server(good.key)
    try:
        with pytest.raises(ssh.HostKeyError, match="lisa-ext target trust X"):
            ssh.SshClient(_endpoint(unpinned.port)).run("true", timeout=60)
        assert unpinned.auth == [] and unpinned.commands == []
    finally:
        unpinned.close()
    assert not marker.exists()


def test_openssh_client_logs_in_to_the_pinned_board_with_its_password(known_hosts, servers):
    good, _ = servers
    _pin(good.port, good.key)
    client = ssh.SshClient(_endpoint(good.port))
    try:
        proc = client.run("echo hello", timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == b"done\n"
        assert good.auth == [("password", "root", "s3cret")]  # handed over by SSH_ASKPASS
        assert good.commands == ["echo hello"]
        assert client.run("true", timeout=60).returncode == 0
        assert len(good.auth) == 1, "the second command reuses the shared connection"
    finally:
        client.close()
    sockets = ssh.control_dir()
    assert sockets.stat().st_mode & 0o777 == 0o700


def test_paramiko_refuses_an_impostor_before_authenticating(known_hosts, servers):
    good, bad = servers
    ssh.Trust.for_host("127.0.0.1", bad.port).pin(good.key)
    with pytest.raises(ssh.HostKeyError, match="presented the ssh-rsa host key"):
        ssh.open_paramiko(ssh.Trust.for_host("127.0.0.1", bad.port), "127.0.0.1", bad.port,
                          username="root", password="s3cret", look_for_keys=False, allow_agent=False)
    with pytest.raises(ssh.HostKeyError, match="no host key is pinned"):
        ssh.open_paramiko(ssh.Trust.for_host("127.0.0.1", good.port), "127.0.0.1", good.port,
                          username="root", password="s3cret", look_for_keys=False, allow_agent=False)
    assert bad.auth == [] and good.auth == []


def test_devlib_connections_use_the_key_file_where_it_is(known_hosts, servers, keys, tmp_path, monkeypatch):
    """devlib 1.3's check_keyfile() copies every key file to $TMPDIR/<its name> (its permission
    check masks the mode with 0xFF): two boards' keys, both id_ed25519, overwrote each other there,
    and a link planted at that path would receive the key. The pinned connection reads the key where
    it is, and offers that key."""
    devlib = pytest.importorskip("devlib")
    import tempfile

    from lisa_ext.target.devlib_target import _pinned_classes

    good, _ = servers
    _pin(good.port, good.key)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    (tmp / "id_rsa").symlink_to(tmp_path / "received")
    key_file = tmp_path / "cache" / "id_rsa"
    key_file.parent.mkdir(parents=True, exist_ok=True)
    keys[1].write_private_key_file(str(key_file))
    key_file.chmod(0o600)
    _, platform_cls = _pinned_classes()
    t = devlib.LinuxTarget(connection_settings={"host": "127.0.0.1", "port": good.port, "username": "root",
                                                "password": "s3cret", "keyfile": str(key_file)},
                           platform=platform_cls(ssh.Trust.for_host("127.0.0.1", good.port)),
                           connect=False, load_default_modules=False)
    t.platform.init_target_connection(t)
    conn = t.get_connection()
    conn.close()
    assert good.public_keys == [keys[1].get_base64()]
    assert not (tmp_path / "received").exists() and sorted(p.name for p in tmp.iterdir()) == ["id_rsa"]


def test_every_devlib_connection_is_pinned(known_hosts, servers):
    """devlib opens its connections through ``conn_cls`` (the first, one per thread, every
    reconnect); the platform hook sets it to the pinned connection before the first."""
    devlib = pytest.importorskip("devlib")
    from lisa_ext.target.devlib_target import _pinned_classes

    good, bad = servers
    _pin(good.port, good.key)
    ssh.Trust.for_host("127.0.0.1", bad.port).pin(good.key)
    _, platform_cls = _pinned_classes()

    def target(port: int):
        t = devlib.LinuxTarget(connection_settings={"host": "127.0.0.1", "port": port, "username": "root",
                                                    "password": "s3cret"},
                               platform=platform_cls(ssh.Trust.for_host("127.0.0.1", port)),
                               connect=False, load_default_modules=False)
        t.platform.init_target_connection(t)  # what devlib's connect() does first
        return t

    conn = target(good.port).get_connection()
    assert good.auth == [("password", "root", "s3cret")]
    assert any("sudo -n true" in c for c in good.commands)  # devlib's own first command went through
    conn.close()

    impostor = target(bad.port)
    with pytest.raises(ssh.HostKeyError):
        impostor.get_connection()  # what connect() and every reconnect open
    failures = []

    def per_thread():
        try:
            impostor.conn  # noqa: B018 -- devlib opens this thread's own connection
        except ssh.HostKeyError as exc:
            failures.append(exc)

    thread = threading.Thread(target=per_thread)
    thread.start()
    thread.join(60)
    assert len(failures) == 1
    assert bad.auth == [] and bad.commands == []


def test_a_hostile_user_name_never_reaches_ssh_as_an_option(known_hosts, servers, tmp_path):
    good, _ = servers
    _pin(good.port, good.key)
    marker = tmp_path / "pwned"
    hostile = f"-oProxyCommand=touch {marker}"
    with pytest.raises(UserError, match="does not start with '-'"):
        ssh.Endpoint("127.0.0.1", good.port, hostile, ssh.Trust.for_host("127.0.0.1", good.port))
    config = tmp_path / "board.yml"
    config.write_text(f"target-conf:\n  kind: linux\n  host: 127.0.0.1\n  username: '{hostile}'\n")
    from lisa_ext.target import TargetConfig

    with pytest.raises(SpecError, match=r"target-conf\.username"):
        TargetConfig.load(config)
    # and even past those checks, the argv carries the name as data: -l NAME, the host after --
    endpoint = object.__new__(ssh.Endpoint)
    for name, value in (("host", "127.0.0.1"), ("port", good.port), ("username", hostile), ("keyfile", None),
                        ("password", "x"), ("trust", ssh.Trust.for_host("127.0.0.1", good.port))):
        object.__setattr__(endpoint, name, value)
    client = ssh.SshClient(endpoint)
    argv = client.argv("true")
    assert argv[argv.index("-l") + 1] == hostile and argv[-3:] == ["--", "127.0.0.1", "true"]
    proc = client.run("true", timeout=60)
    client.close()
    assert proc.returncode == ssh.SSH_FAILED and b"invalid characters" in proc.stderr  # ssh's own refusal
    assert not marker.exists()
    assert good.auth == [] and good.commands == []


def test_the_socket_directory_must_be_private(tmp_path, monkeypatch):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path))
    made = ssh.control_dir()
    assert made == tmp_path / "ssh" and made.stat().st_mode & 0o777 == 0o700
    if os.geteuid() == 0:
        os.chown(made, 65534, 65534)  # another user's directory: never used for our sockets
        with pytest.raises(UserError, match="expected a directory of user 0"):
            ssh.control_dir()


def test_no_host_key_check_is_switched_off_anywhere():
    """The checks that turn host-key checking off appear nowhere in the repository (but here)."""
    pattern = "StrictHostKeyChecking=no|UserKnownHostsFile=/dev/null|strict-host-check: false"
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    found = []
    for name in files.split():
        path = REPO / name
        if path.resolve() == Path(__file__).resolve() or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        found += [f"{name}: {m.group(0)}" for m in re.finditer(pattern, text)]
    assert found == []


def test_trust_command_prints_the_fingerprint_and_pins_only_what_was_expected(known_hosts, servers, tmp_path,
                                                                                capsys):
    from lisa_ext.cli import main

    good, _ = servers
    config = tmp_path / "board.yml"
    config.write_text(f"target-conf:\n  kind: linux\n  host: 127.0.0.1\n  port: {good.port}\n  username: root\n")
    fp = ssh.fingerprint(good.key)
    assert main(["target", "trust", str(config), "--fingerprint", "SHA256:another"]) == 2
    out, err = capsys.readouterr()
    assert f"presents the ssh-rsa host key {fp}" in out and "nothing was pinned" in err
    assert not known_hosts.exists()
    assert main(["target", "trust", str(config), "--fingerprint", fp]) == 0
    assert f"pinned in {known_hosts} as [127.0.0.1]:{good.port}" in capsys.readouterr().out
    assert main(["target", "trust", str(config)]) == 0
    assert "already pinned" in capsys.readouterr().out
    assert good.auth == [] and good.commands == [], "trust only exchanges keys"
