"""A BPF scheduler as a campaign variant on the virtual board (kernels/scx/eevdf.yml).

One smoke campaign, interleaved: ``simple`` (scx_simple loaded around each run) and ``eevdf``
(the same kernel scheduling on its own), two iterations of a few seconds of rt-app:

* ``simple/rt/0`` runs under scx_simple: its metadata records the scheduler, its arguments,
  its binary's hash, the kernel's state and ops while it ran and its exit reason;
* during ``simple/rt/1`` the scheduler is killed with SIGKILL: that run fails with the
  kernel's reason and the next run, ``eevdf/rt/1``, is on EEVDF again.

A second campaign compares EEVDF with scx_bpfland from crates.io (:data:`CRATE`): the run's
metadata records the crate, its version and the ops name the kernel ran, and its trace shows the
scheduler's process alive during the workload (and absent from EEVDF's).

Needs the sched-ext kernel build (~1 h on a loaded 2-core host) and clang >= 16, and for the
crate cargo and the crates.io index (a first build of scx_bpfland: ~30 min here): marker manual.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import analysis_reference as ref
from vboard_helpers import REPO, guest, require_board_capabilities

pytestmark = [pytest.mark.vboard, pytest.mark.manual]

LISA_EXT = [sys.executable, "-m", "lisa_ext.cli"]
SCX_KERNEL = REPO / "kernels" / "scx" / "eevdf.yml"
#: a scheduler of the scx project on crates.io, pinned
CRATE = ("scx_bpfland", "1.1.4")


def _spec(tmp_path: Path) -> Path:
    path = tmp_path / "scx.yml"
    path.write_text(f"""\
name: scx-smoke
target: {REPO / 'target-configs' / 'vboard.yml'}
iterations: 2
trace:
  events: [sched:sched_switch]
variants:
  - name: simple
    kernel: {SCX_KERNEL}
    sched-ext: {{scheduler: scx_simple, args: [-v]}}
  - name: eevdf
    kernel: {SCX_KERNEL}
workloads:
  - name: rt
    kind: rtapp
    duration-s: 8
    tasks: {{small: {{duty-cycle-pct: 20, period-ms: 16}}}}
""")
    return path


@pytest.fixture(scope="module")
def scx_campaign(tmp_path_factory):
    require_board_capabilities()
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard.board import VirtualBoard

    tmp_path = tmp_path_factory.mktemp("vboard-scx")
    board = VirtualBoard()
    deploy_variant(BoardTarget(board), SCX_KERNEL)
    out = tmp_path / "campaign"
    proc = subprocess.Popen(LISA_EXT + ["campaign", "run", str(_spec(tmp_path)), "--out", str(out), "--no-progress"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    journal = out / ".runner-journal.json"
    killed = None
    try:
        deadline = time.monotonic() + 3600
        while killed is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "simple/rt/1 never started"
            try:
                state = json.loads(journal.read_text() or "{}")
            except (OSError, ValueError):
                state = {}
            pid = guest(board, "pidof scx_simple || true").strip() if state.get("run") == "simple/rt/1" else ""
            if pid and state.get("processes"):
                time.sleep(2)  # rt-app is running under scx_simple
                guest(board, f"kill -9 {int(pid.split()[0])}")
                killed = pid
            time.sleep(0.5)
        stdout, stderr = proc.communicate(timeout=1800)
    finally:
        if proc.poll() is None:
            proc.kill()
        board.down()
    print(f"\n{stdout}\n{stderr}")
    return out, proc.returncode, stdout, stderr


def _run(out: Path, label: str) -> tuple[dict, dict]:
    run = out / "runs" / label
    return json.loads((run / "result.json").read_text()), json.loads((run / "meta.json").read_text())


def test_scx_simple_ran_during_its_run(scx_campaign):
    out, rc, stdout, stderr = scx_campaign
    assert "Traceback" not in stderr, stderr
    result, meta = _run(out, "simple/rt/0")
    assert result["status"] == "ok", result
    scx = meta["sched_ext"]
    assert (scx["scheduler"], scx["args"], scx["ops"]) == ("scx_simple", ["-v"], "simple")
    assert scx["state"] == "enabled" and scx["state_after"] == "enabled"
    assert len(scx["sha256"]) == 64
    # stopped with SIGINT: the scheduler detached itself
    assert scx["exit_reason"] == "unregistered from user space", scx
    _, eevdf = _run(out, "eevdf/rt/0")
    assert eevdf["sched_ext"] == {"state": "disabled"}


def test_a_killed_scheduler_fails_its_run_and_the_next_is_on_eevdf(scx_campaign):
    out, rc, stdout, stderr = scx_campaign
    assert rc == 1 and "3 runs done, 1 failed" in stdout, stdout + stderr
    result, meta = _run(out, "simple/rt/1")
    assert result["status"] == "failed"
    assert "scx_simple did not run to the end of the workload" in result["error"], result
    assert "the kernel disabled it: unregistered from user space" in result["error"], result
    assert meta["sched_ext"]["exit_status"] not in (None, 0)
    result, meta = _run(out, "eevdf/rt/1")
    assert result["status"] == "ok", result
    assert meta["sched_ext"] == {"state": "disabled"}


@pytest.fixture(scope="module")
def crate_campaign(tmp_path_factory):
    require_board_capabilities()
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard.board import VirtualBoard

    tmp_path = tmp_path_factory.mktemp("vboard-scx-crate")
    spec = tmp_path / "scx-crate.yml"
    spec.write_text(f"""\
name: scx-crate-smoke
target: {REPO / 'target-configs' / 'vboard.yml'}
iterations: 1
trace:
  events: [sched:sched_switch]
variants:
  - name: eevdf
    kernel: {SCX_KERNEL}
  - name: bpfland
    kernel: {SCX_KERNEL}
    sched-ext: {{crate: {CRATE[0]}, version: '{CRATE[1]}'}}
workloads:
  - name: rt
    kind: rtapp
    duration-s: 8
    tasks: {{small: {{duty-cycle-pct: 20, period-ms: 16}}}}
""")
    board = VirtualBoard()
    deploy_variant(BoardTarget(board), SCX_KERNEL)
    out = tmp_path / "campaign"
    try:
        proc = subprocess.run(LISA_EXT + ["campaign", "run", str(spec), "--out", str(out), "--no-progress"],
                              cwd=REPO, capture_output=True, text=True, timeout=7200,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        board.down()
    print(f"\n{proc.stdout}\n{proc.stderr}")
    return out, proc


def _switched_out(run: Path) -> set[str]:
    """The tasks of ``run``'s trace that ran on a CPU (``prev_comm`` of its ``sched_switch``)."""
    # no -F filter: trace-cmd report -F sched_switch crashes (SIGSEGV) on these traces
    return {e.f["prev_comm"] for e in ref.report_events(run / "trace.dat") if e.name == "sched_switch"}


def test_a_crate_scheduler_ran_its_run_and_is_recorded(crate_campaign):
    out, proc = crate_campaign
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    result, meta = _run(out, "bpfland/rt/0")
    assert result["status"] == "ok", result
    scx = meta["sched_ext"]
    assert (scx["scheduler"], scx["crate"], scx["version"]) == (CRATE[0], *CRATE), scx
    assert scx["ops"] == "bpfland" or scx["ops"].startswith("bpfland_"), scx
    assert scx["state"] == "enabled" and scx["state_after"] == "enabled", scx
    assert scx["exit_reason"] == "unregistered from user space", scx
    _, eevdf = _run(out, "eevdf/rt/0")
    assert eevdf["sched_ext"] == {"state": "disabled"}
    # the scheduler's user-space side ran beside rt-app's task (small-0), and not in EEVDF's run
    bpfland = _switched_out(out / "runs" / "bpfland/rt/0")
    plain = _switched_out(out / "runs" / "eevdf/rt/0")
    assert {CRATE[0], "small-0"} <= bpfland, sorted(bpfland)
    assert CRATE[0] not in plain and "small-0" in plain, sorted(plain)
