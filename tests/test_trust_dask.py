"""The local Dask cluster runs code for this process only.

:func:`lisa_ext.trace.cluster.local_cluster` is started here, as root; a child
process that has dropped to the user ``nobody`` then tries what another local
user can: ``distributed.Client(address).run(os.getpid)`` over the address as
given, over plain TCP and over TLS with a certificate of its own, and a raw TCP
connection that sends bytes and listens for Dask's plain-text handshake. All
must fail. The same child against a cluster started here the way Dask starts
one by default (plain TCP) runs its code, so the attempt is a real one. While
the project's cluster runs, none of its processes listens on another address
than 127.0.0.1 or on the dashboard's port 8787. A remote scheduler made as
docs/dask.md says (a CA, a certificate, ``--protocol tls``) is used over
``tls://`` with the variables the docs name, and a plain ``tcp://`` one with
a warning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import dask
import psutil
import pytest
from distributed import LocalCluster

from lisa_ext.errors import UserError
from lisa_ext.trace.cluster import LOOPBACK, local_cluster, map_traces

NOBODY = 65534
DASHBOARD_PORT = 8787

# The child imports as root, then drops to nobody before touching the cluster: the venv's
# interpreter lives under /root (mode 0700), which nobody cannot execute. What it can do from
# there is what the kernel grants uid 65534; the credentials it would need stay in our memory.
_ATTACKER = r"""
import json, os, signal, socket, sys
import distributed
from distributed.security import Security


# a plain-TCP client waits for a TLS server's first bytes as the server waits for its: no answer
class NoAnswer(Exception):
    pass


def no_answer(signum, frame):
    raise NoAnswer("no answer within 20 s")


signal.signal(signal.SIGALRM, no_answer)

address = sys.argv[1]
own_credentials = Security.temporary()
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
results = {"uid": os.getuid(), "reads_root": os.access("/root", os.R_OK)}
host, port = address.split("://", 1)[1].rsplit(":", 1)
attempts = {"as-given": (address, None), "tcp": (f"tcp://{host}:{port}", None),
            "tls-own-cert": (f"tls://{host}:{port}", own_credentials)}
for name, (target, security) in attempts.items():
    signal.alarm(20)
    try:
        with distributed.Client(target, timeout=5, security=security) as client:
            results[name] = {"ran": sorted(client.run(os.getpid).values())}
    except Exception as exc:
        results[name] = {"refused": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        signal.alarm(0)
received = b""
with socket.create_connection((host, int(port)), timeout=5) as raw:
    raw.sendall(b"\x00" * 64)
    try:
        while len(received) < 65536:
            chunk = raw.recv(4096)
            if not chunk:
                break
            received += chunk
            if b"pickle-protocol" in received:
                break
    except OSError:
        pass
results["raw"] = {"dask-handshake": b"pickle-protocol" in received, "bytes": len(received)}
print(json.dumps(results), flush=True)
os._exit(0)  # a client that never connected may leave its event loop's thread behind
"""


def _attack(address: str, tmp_path: Path) -> dict:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "DASK_CONFIG": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", _ATTACKER, address], cwd="/", env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["uid"] == NOBODY and not results["reads_root"], results
    return results


def _listeners(root_pid: int) -> list[tuple[int, str, int]]:
    """``(pid, address, port)`` of every TCP listener of ``root_pid`` and its descendants."""
    tree = [psutil.Process(root_pid), *psutil.Process(root_pid).children(recursive=True)]
    found = []
    for proc in tree:
        try:
            connections = proc.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        found += [(proc.pid, c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN]
    return found


@pytest.fixture
def as_root():
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the other user's attempt as nobody")


def test_unauthenticated_cluster_runs_another_users_code(as_root, tmp_path, capsys):
    """The attempt works: Dask's default cluster runs code for whoever connects. Using
    such a cluster (a plain tcp:// address) works, with one line of warning."""
    with LocalCluster(n_workers=1, processes=True, threads_per_worker=1, host=LOOPBACK,
                      dashboard_address=None) as cluster:
        results = _attack(cluster.scheduler_address, tmp_path)
        capsys.readouterr()
        assert map_traces(os.path.basename, [__file__], scheduler=cluster.scheduler_address) \
            == [Path(__file__).name]
        warning = capsys.readouterr().err
    assert "ran" in results["as-given"], results
    assert results["raw"]["dask-handshake"], results
    assert warning.count("\n") == 1 and warning.startswith("lisa-ext: warning: ") \
        and cluster.scheduler_address in warning and "tls://" in warning, warning


def test_local_cluster_refuses_another_local_user(as_root, tmp_path):
    with local_cluster(1) as cluster:
        address = cluster.scheduler_address
        listeners = _listeners(os.getpid())
        results = _attack(address, tmp_path)
        # the cluster still works for this process after the attempts
        assert map_traces(os.path.basename, [__file__], cluster=cluster) == [Path(__file__).name]
    for attempt in ("as-given", "tcp", "tls-own-cert"):
        assert "refused" in results[attempt], (attempt, results)
    assert not results["raw"]["dask-handshake"], results
    assert listeners, "no listener found: the check below would pass on nothing"
    assert [entry for entry in listeners if entry[1] != LOOPBACK] == []
    assert [entry for entry in listeners if entry[2] == DASHBOARD_PORT] == []
    assert address.startswith(f"tls://{LOOPBACK}:")


DOCS = Path(__file__).resolve().parents[1] / "docs" / "dask.md"


def _documented(prefix: str) -> list[str]:
    """The lines of docs/dask.md's shell examples starting with ``prefix``, as written."""
    lines = [line.strip() for line in DOCS.read_text().splitlines() if line.strip().startswith(prefix)]
    assert lines, f"docs/dask.md has no {prefix!r} line"
    return lines


_TLS_ENV = {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": "ca.pem",
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": "dask.pem",
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": "dask.key",
            "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}


def _wait_for_file(path: Path, procs: list[subprocess.Popen], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert all(p.poll() is None for p in procs), f"a dask process exited: see {path.parent}/*.log"
        assert time.monotonic() < deadline, f"{path} not written within {timeout} s"
        time.sleep(0.2)


def test_remote_tls_scheduler_as_documented(tmp_path, monkeypatch):
    """The docs' credentials and commands give a cluster that map_traces uses over tls://
    once the docs' variables are set, and refuses in one line before."""
    # the docs' openssl commands: a lab CA and one key and certificate it signs
    for command in _documented("openssl "):
        subprocess.run(command, shell=True, cwd=tmp_path, check=True, capture_output=True)
    tls = ["--tls-ca-file", "ca.pem", "--tls-cert", "dask.pem", "--tls-key", "dask.key"]
    dask_cli = str(Path(sys.executable).with_name("dask"))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    procs = [subprocess.Popen([dask_cli, "scheduler", "--host", LOOPBACK, "--port", "0", "--protocol", "tls",
                               *tls, "--no-dashboard", "--dashboard-address", f"{LOOPBACK}:0",
                               "--scheduler-file", "scheduler.json"],
                              cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                              stderr=open(tmp_path / "scheduler.log", "w"))]
    try:
        _wait_for_file(tmp_path / "scheduler.json", procs, 120)
        address = json.loads((tmp_path / "scheduler.json").read_text())["address"]
        procs.append(subprocess.Popen([dask_cli, "worker", address, "--nworkers", "1", "--nthreads", "1", *tls,
                                       "--no-dashboard", "--dashboard-address", f"{LOOPBACK}:0"],
                                      cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(tmp_path / "worker.log", "w")))
        with pytest.raises(UserError, match=r"no TLS ca-file or client.cert configured"):
            map_traces(os.path.basename, [__file__], scheduler=address)
        exports = dict(line.removeprefix("export ").split("=", 1) for line in _documented("export DASK_"))
        assert sorted(exports) == sorted(_TLS_ENV)
        for name, value in exports.items():
            monkeypatch.setenv(name, value.replace("$PWD", str(tmp_path)))
        dask.config.refresh()
        assert map_traces(os.path.basename, [__file__], scheduler=address) == [Path(__file__).name]
    finally:
        for proc in reversed(procs):
            proc.kill()
            proc.wait(timeout=30)
        monkeypatch.undo()
        dask.config.refresh()
