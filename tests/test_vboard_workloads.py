"""The RFCs' own benchmarks on the virtual board: schbench, pgbench, and fio on dm-crypt over a loop device.

schbench is built from ../shared/src and pushed to the board (``lisa-ext campaign
tool install``'s code); PostgreSQL, dmsetup and losetup come with the board's
rootfs. The runner is SIGKILLed while fio runs on the dm-crypt device: the
device and its loop are left on the board, and ``--resume`` removes them before
running the campaign to the end. Kept short: the guest runs ~30x slower (TCG).
"""

import json
import signal
import subprocess
import sys
import time

import pytest

from vboard_helpers import BASELINE, guest, require_board_capabilities
from workload_tools import install_built_tools, require_sources

pytestmark = pytest.mark.vboard

LISA_EXT = [sys.executable, "-m", "lisa_ext.cli"]


@pytest.fixture(scope="module")
def board_conf(tmp_path_factory):
    require_board_capabilities()
    require_sources()
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target import connect
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard.board import BoardSettings, VirtualBoard
    from lisa_ext.vboard.rootfs import ssh_key_path

    board = VirtualBoard(BoardSettings(ssh_port=0))
    deploy_variant(BoardTarget(board), BASELINE)
    conf = tmp_path_factory.mktemp("vboard-workloads") / "board.yml"
    conf.write_text(f"""\
target-conf:
    kind: linux
    name: vboard
    host: 127.0.0.1
    port: {board.status()["ssh_port"]}
    username: root
    keyfile: {ssh_key_path()}
    workdir: /root/lisa
""")
    install_built_tools(connect(conf))
    yield board, conf
    board.down()


def test_schbench_pgbench_and_fio_on_dm_crypt(tmp_path, board_conf):
    board, conf = board_conf
    spec = tmp_path / "board-workloads.yml"
    spec.write_text(f"""\
name: board-workloads
target: {conf}
iterations: 1
variants:
  - name: base
workloads:
  - name: crypt
    kind: fio
    options: {{rw: randrw, bs: 32k, ioengine: libaio, iodepth: 8, numjobs: 2, verify: sha512, direct: 1,
              size: 4M, runtime: 8, time_based: 1}}
    dm-crypt: {{backing: loop, size-mb: 16}}
  - name: sch
    kind: schbench
    runtime-s: 2
    message-threads: 1
    threads: 2
  - name: pg
    kind: pgbench
    duration-s: 3
    clients: 2
    select-only: true
    server-settings: {{shared_buffers: 16MB}}
""")
    out = tmp_path / "out"
    runner = subprocess.Popen(LISA_EXT + ["campaign", "run", str(spec), "--out", str(out), "--no-progress"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # watched from inside the guest every 0.2 s: fio runs 8 s, and on a busy host two SSH
    # handshakes per look from here (one to each check) were slow enough to miss all of it
    probe = ("for i in $(seq 150); do dmsetup ls 2>/dev/null | grep -q lisa-ext-crypt && "
             "pgrep -x fio >/dev/null && { echo running; exit 0; }; sleep 0.2; done; true")
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and runner.poll() is None:
        if "running" in guest(board, probe):
            break
    else:
        runner.kill()
        pytest.fail(f"fio never ran on the dm-crypt device: {runner.communicate()[1][-2000:]}")
    runner.send_signal(signal.SIGKILL)
    runner.communicate(timeout=30)
    assert "lisa-ext-crypt" in guest(board, "dmsetup ls")  # left behind by the killed runner
    resumed = subprocess.run(LISA_EXT + ["campaign", "run", str(spec), "--out", str(out), "--no-progress",
                                         "--resume"], capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resume: ran cleanup: dmsetup remove" in resumed.stderr
    metrics = {}
    for workload in ("crypt", "sch", "pg"):
        result = json.loads((out / "runs/base" / workload / "0/result.json").read_text())
        assert result["status"] == "ok", (workload, result["error"])
        metrics[workload] = {m["name"]: m["value"] for m in result["metrics"]}
        assert 0 < metrics[workload]["cpu_util_total"] <= 100
    assert metrics["crypt"]["read_bw"] > 0 and metrics["crypt"]["write_bw"] > 0
    assert metrics["sch"]["wakeup_lat_p99"] >= metrics["sch"]["wakeup_lat_p50"] > 0
    assert metrics["pg"]["tps"] > 0 and metrics["pg"]["transactions"] > 0
    # nothing is left on the board: no dm device, no loop, no PostgreSQL
    assert guest(board, "dmsetup ls").strip() in ("", "No devices found")
    assert guest(board, "ls /dev/mapper").split() == ["control"]
    assert guest(board, "losetup -a").strip() == ""
    assert guest(board, "ls -d /tmp/lisa-ext-pg.* 2>/dev/null; ps -u postgres -o pid= ; true").strip() == ""
