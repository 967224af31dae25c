"""The virtual board driven as a user's own Linux board, through ``ssh-board.example.yml``.

A user reruns a study on their board by copying ``target-configs/ssh-board.example.yml``,
filling in its address and key, pinning its host key (``lisa-ext target trust``) and pointing
a campaign at the copy. Here the running virtual board plays that board: the example file with
the board's loopback port and the cache's key filled in and nothing else changed (kind
``linux``, its own name, so none of the virtual board's own code is on the path), its host key
pinned by ``lisa-ext target trust`` into a known_hosts of the test's own.

One small two-variant campaign (the iowait-boost baseline and patched kernels, a scheduler
feature knob written and reverted around each run, fio traced) runs first on the board's own
config (``target-configs/vboard.yml``), then on the plain config, where both kernels go on by
kexec over SSH. Both must store the same layout; the plain campaign's runs must have run their
variant's kernel and knobs and hold their traces, and the board's own record of deploys must not
have moved (its code was not used). Before the key is pinned the plain campaign is refused
before it runs anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vboard_helpers import BASELINE, PATCHED, REPO, guest, require_board_capabilities

pytestmark = pytest.mark.vboard

LISA_EXT = Path(sys.executable).with_name("lisa-ext")
FEATURES = "/sys/kernel/debug/sched/features"


def _spec(path: Path, target: Path) -> Path:
    path.write_text(f"""\
name: ssh-board
description: the iowait-boost kernels on a board reached as a plain SSH Linux board
target: {target}
iterations: 1
order: group-by-variant
trace:
  events: [power:cpu_frequency, sched:sched_switch, sched:sched_wakeup]
variants:
  - name: baseline
    kernel: {BASELINE}
    knobs: {{{FEATURES}: NO_UTIL_EST}}
  - name: no-iowait-boost
    kernel: {PATCHED}
    knobs: {{{FEATURES}: NO_UTIL_EST}}
workloads:
  - name: fio
    kind: fio
    options: {{filename: /dev/vdc, rw: randread, bs: 4k, ioengine: psync, direct: 1, runtime: 1, time_based: 1}}
""")
    return path


def _campaign(spec: Path, out: Path, env: dict) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run([str(LISA_EXT), "campaign", "run", str(spec), "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=1800)
    return proc, time.monotonic() - started


@pytest.fixture(scope="module")
def board():
    require_board_capabilities()
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard.board import VirtualBoard

    board = VirtualBoard()
    deploy_variant(BoardTarget(board), BASELINE)
    yield board
    board.down()


@pytest.fixture(scope="module")
def my_board(board, tmp_path_factory):
    """The example config filled in for the board, and an environment whose known_hosts is empty."""
    from lisa_ext.vboard.rootfs import ssh_key_path

    tmp = tmp_path_factory.mktemp("ssh-board")
    text = (REPO / "target-configs" / "ssh-board.example.yml").read_text()
    filled = text
    port = board.status()["ssh_port"]
    for old, new in (("host: 192.168.0.42", "host: 127.0.0.1"), ("port: 22", f"port: {port}"),
                     ("keyfile: ~/.ssh/id_ed25519", f"keyfile: {ssh_key_path()}")):
        assert text.count(old) == 1, old
        filled = filled.replace(old, new)
    conf = tmp / "my-board.yml"
    conf.write_text(filled + "lisa-ext: {scratch-devices: [/dev/vdc]}\n")  # the board's scratch disk
    env = {**os.environ, "LISA_EXT_KNOWN_HOSTS": str(tmp / "known_hosts")}
    return conf, env, tmp


@pytest.fixture(scope="module")
def campaigns(board, my_board):
    from lisa_ext.vboard.rootfs import host_key_path

    conf, env, tmp = my_board
    # unpinned: refused before anything runs on the board
    refused, _ = _campaign(_spec(tmp / "refused.yml", conf), tmp / "refused", env)
    # pinned by the user's command, checked against the board's own fingerprint
    board_fp = subprocess.run(["ssh-keygen", "-lf", f"{host_key_path()}.pub"], capture_output=True, text=True,
                              check=True).stdout.split()[1]
    trust = subprocess.run([str(LISA_EXT), "target", "trust", str(conf), "--fingerprint", board_fp],
                           capture_output=True, text=True, env=env, timeout=120)
    on_board, board_s = _campaign(_spec(tmp / "on-board.yml", REPO / "target-configs" / "vboard.yml"),
                                  tmp / "on-board", env)
    deploys = board.status()["history"]
    plain, plain_s = _campaign(_spec(tmp / "plain.yml", conf), tmp / "plain", env)
    print(f"\nssh-board campaigns: board's own config {board_s:.0f} s, plain SSH board {plain_s:.0f} s")
    return {"refused": refused, "trust": trust, "board_fp": board_fp, "on_board": (on_board, tmp / "on-board"),
            "plain": (plain, tmp / "plain"), "deploys_before": deploys, "deploys_after": board.status()["history"],
            "serial": board.serial_tail(30)}


def test_unpinned_board_is_refused_before_anything_runs(campaigns):
    refused = campaigns["refused"]
    assert refused.returncode == 2, refused.stderr
    assert "no host key is pinned for [127.0.0.1]:" in refused.stderr
    assert "lisa-ext target trust" in refused.stderr and "Traceback" not in refused.stderr
    trust = campaigns["trust"]
    assert trust.returncode == 0, trust.stderr
    assert f"presents the ssh-ed25519 host key {campaigns['board_fp']}" in trust.stdout
    assert "pinned in" in trust.stdout


def _layout(out: Path) -> set[str]:
    return {str(p.relative_to(out)) for p in (out / "runs").rglob("*")}


def _metas(out: Path) -> dict[str, dict]:
    return {str(p.parent.relative_to(out)): json.loads(p.read_text()) for p in (out / "runs").rglob("meta.json")}


def test_plain_ssh_board_runs_each_kernel_by_kexec_with_its_knobs_and_traces(campaigns):
    from lisa_ext.kernel.build import build_variant

    proc, out = campaigns["plain"]
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n{campaigns['serial']}"
    assert "2 runs done, 0 failed" in proc.stdout
    for variant, spec in (("baseline", BASELINE), ("no-iowait-boost", PATCHED)):
        built = build_variant(spec)
        meta = json.loads((out / "runs" / variant / "fio" / "0" / "meta.json").read_text())
        assert json.loads((out / "runs" / variant / "fio" / "0" / "result.json").read_text())["status"] == "ok"
        deploy = meta["kernel_variant"]["deploy"]
        assert deploy["method"] == "kexec", deploy
        assert meta["kernel"]["release"] == built.release and meta["kernel"]["version"] == built.version_string
        caps = {k: v for k, v in deploy["knobs"].items() if k.endswith("/iowait_boost_cap")}
        assert set(caps.values()) == ({"0"} if variant == "no-iowait-boost" else set())
        assert meta["knobs"][FEATURES]["read_back"] == "NO_UTIL_EST"
        assert meta["platform"]["name"] == "my-board"
        trace = out / "runs" / variant / "fio" / "0" / "trace.dat"
        assert trace.read_bytes()[:10] == b"\x17\x08\x44tracing" and trace.stat().st_size > 10_000
    # the board's own record of deploys did not move: none of its code deployed anything
    assert campaigns["deploys_after"] == campaigns["deploys_before"]


def test_same_layout_as_on_the_boards_own_config(campaigns, board):
    (on_board, board_out), (plain, plain_out) = campaigns["on_board"], campaigns["plain"]
    assert on_board.returncode == 0, f"{on_board.stdout}\n{on_board.stderr}"
    assert plain.returncode == 0
    assert _layout(plain_out) == _layout(board_out)
    board_metas, plain_metas = _metas(board_out), _metas(plain_out)
    assert {run: sorted(m) for run, m in plain_metas.items()} == {run: sorted(m) for run, m in board_metas.items()}
    # the knob was reverted after each run, on both
    assert "NO_UTIL_EST" not in guest(board, f"cat {FEATURES}").split()
