"""Faults injected into a campaign on the virtual board: QEMU killed mid-run, a kernel that panics.

One campaign, two kernel variants, two runs each (group-by-variant):

* ``good`` (the study's baseline kernel): while its first run's fio is running,
  QEMU is killed with SIGKILL; during the second, QEMU is stopped with SIGSTOP
  (a hung board: its connections stay open and silent, so only the watchdog
  can tell). Each time the attempt is recorded with the console tail, the board
  is booted again on ``good``'s kernel and the run retried: both runs of
  ``good`` end done.
* ``panics``: the same build with ``init=/nonexistent`` on its command line, so
  the kernel panics at boot ("Requested init /nonexistent failed") and QEMU,
  run with ``-no-reboot``, exits. Its deploy fails with the console tail, the
  board comes back on ``good``'s kernel, and both of its runs are failed with
  the panic in the reason.

No finished run may be lost, and ``campaign status`` must show why each failed.
The figures (faults, recovery times) are printed for the report.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vboard_helpers import BASELINE, REPO, require_board_capabilities

pytestmark = pytest.mark.vboard

LISA_EXT = [sys.executable, "-m", "lisa_ext.cli"]


def _panicking_variant(tmp_path: Path) -> Path:
    """The baseline's build (same patches and configs: a cache hit) booted with no usable init."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe")
    spec = yaml.load(BASELINE.read_text())
    spec["name"] = "panics"
    spec["cmdline"] = f"{spec.get('cmdline', '')} init=/nonexistent".strip()
    for key in ("patches", "configs"):
        spec[key] = [str((BASELINE.parent / p).resolve()) for p in spec.get(key, [])]
    path = tmp_path / "panics.yml"
    with open(path, "w") as f:
        yaml.dump(spec, f)
    return path


def _spec(tmp_path: Path, panics: Path) -> Path:
    path = tmp_path / "faults.yml"
    path.write_text(f"""\
name: vboard-faults
target: {REPO / 'target-configs' / 'vboard.yml'}
iterations: 2
order: group-by-variant
retries: 1
variants:
  - name: good
    kernel: {BASELINE}
  - name: panics
    kernel: {panics}
workloads:
  - name: io
    kind: fio
    options: {{filename: /dev/vdc, rw: randread, bs: 4k, ioengine: psync, direct: 1, runtime: 3,
               time_based: 1}}
""")
    return path


@pytest.fixture(scope="module")
def faulty_campaign(tmp_path_factory):
    require_board_capabilities()
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard.board import VirtualBoard

    tmp_path = tmp_path_factory.mktemp("vboard-faults")
    board = VirtualBoard()
    deploy_variant(BoardTarget(board), BASELINE)
    out = tmp_path / "campaign"
    spec = _spec(tmp_path, _panicking_variant(tmp_path))
    t0 = time.monotonic()
    proc = subprocess.Popen(LISA_EXT + ["campaign", "run", str(spec), "--out", str(out), "--no-progress"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    journal = out / ".runner-journal.json"
    killed_at = hung_at = None
    try:
        deadline = time.monotonic() + 1200
        while hung_at is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the runs never started their workload"
            try:
                state = json.loads(journal.read_text() or "{}")
            except (OSError, ValueError):
                state = {}
            if state.get("processes") and (killed_at is None and state.get("run") == "good/io/0"
                                           or killed_at is not None and state.get("run") == "good/io/1"):
                time.sleep(2)  # fio is running
                pid = board.status()["pid"]
                if killed_at is None:
                    os.kill(pid, signal.SIGKILL)  # QEMU dies: its SSH connections close
                    killed_at = time.time()
                else:
                    os.kill(pid, signal.SIGSTOP)  # the board hangs: connections stay open, silent
                    hung_at = time.time()
            time.sleep(0.5)
        stdout, stderr = proc.communicate(timeout=1800)
    finally:
        if proc.poll() is None:
            proc.kill()
        serial = board.serial_tail(40)
        board.down()
    print(f"\nvboard faults: campaign took {time.monotonic() - t0:.0f} s\n{stderr}")
    (out / "killed_at_unix").write_text(f"{killed_at:.1f}")
    (out / "hung_at_unix").write_text(f"{hung_at:.1f}")
    return out, proc.returncode, stdout, stderr, serial


def _result(out: Path, label: str) -> dict:
    return json.loads((out / "runs" / label / "result.json").read_text())


def _meta(out: Path, label: str) -> dict:
    return json.loads((out / "runs" / label / "meta.json").read_text())


def test_killed_qemu_run_is_retried_and_done(faulty_campaign):
    out, rc, stdout, stderr, serial = faulty_campaign
    assert "Traceback" not in stderr, stderr
    assert rc == 1, f"{stdout}\n{stderr}\n{serial}"  # the panicking variant's runs failed
    for label in ("good/io/0", "good/io/1"):
        result = _result(out, label)
        assert result["status"] == "ok", result
        assert {m["name"] for m in result["metrics"]} >= {"read_iops"}
    lost = _meta(out, "good/io/0")["target_lost"]
    assert len(lost) == 1
    assert "QEMU process is gone" in lost[0]["reason"]
    assert lost[0]["console_tail"]
    assert 0 < lost[0]["recovery_s"] < 600
    noticed = lost[0]["lost_at_unix"] - float((out / "killed_at_unix").read_text())
    # the watchdog's bound: 3 probes 5 s apart (+ their timeouts); QEMU's death is seen at the first
    assert 0 <= noticed < 45
    print(f"QEMU killed: noticed in {noticed:.1f} s, recovered in {lost[0]['recovery_s']} s")
    hung = _meta(out, "good/io/1")["target_lost"]
    assert len(hung) == 1 and "did not answer its monitor" in hung[0]["reason"], hung
    noticed = hung[0]["lost_at_unix"] - float((out / "hung_at_unix").read_text())
    # 3 missed probes, each 5 s apart: QEMU's monitor asked for 5 s in host time (a stopped QEMU does
    # not answer; a busy guest's monitor does) before any SSH wait the guest's pace stretches: 30 s,
    # plus what is left of an SSH probe in flight when QEMU stopped (on the virtual clock 10 s
    # stretched by the guest's pace; asking SSH first, 180 s passed)
    assert 0 <= noticed < 120
    print(f"QEMU stopped (hang): noticed in {noticed:.1f} s, recovered in {hung[0]['recovery_s']} s")


def test_panicking_variant_fails_with_the_panic_and_the_others_finish(faulty_campaign):
    out, rc, stdout, stderr, serial = faulty_campaign
    assert "1 runs done" not in stdout and "2 runs done, 2 failed" in stdout, stdout + stderr
    for label in ("panics/io/0", "panics/io/1"):
        result = _result(out, label)
        assert result["status"] == "failed"
        assert "kernel variant panics did not boot" in result["error"]
        assert "Kernel panic" in result["error"] and "/nonexistent" in result["error"]
    status = subprocess.run(LISA_EXT + ["campaign", "status", str(out)], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    assert "campaign vboard-faults: 2 done, 2 failed, 0 missing (of 4)" in status.stdout
    assert "failed   panics/io/0  VariantDidNotBoot: kernel variant panics did not boot" in status.stdout
    assert "Kernel panic" in status.stdout
