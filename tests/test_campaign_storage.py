"""A campaign whose directory fills up: clean stop, nothing finished lost, --resume completes.

The campaign directory is a small tmpfs. Once the first run is published the
tmpfs is shrunk to what it holds plus a little, so the next run's own trace
fills it (as a long campaign fills a disk); after the stop it is grown again
(``mount -o remount,size=``), as a user frees space, and ``--resume`` finishes.
A read-only directory (``mount -o remount,ro``) stops the same way.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from campaign_helpers import LISA_EXT, require_live, write_spec
from lisa_ext.trace.tracedat import count_events

pytestmark = pytest.mark.live


def _lisa_ext(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(LISA_EXT + list(args), capture_output=True, text=True, cwd=cwd, timeout=600)


def _used_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def _finished(out: Path) -> dict[str, dict[str, str]]:
    """run label -> {file: sha256} of every published run directory."""
    runs = {}
    for result in sorted((out / "runs").glob("*/*/*/result.json")):
        run = result.parent
        runs["/".join(run.parts[-3:])] = {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
                                          for f in sorted(run.iterdir())}
    return runs


@pytest.fixture
def tmpfs(tmp_path):
    mnt = tmp_path / "campaign"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "lisa-ext-test", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _remount(mnt: Path, options: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", "-o", f"remount,{options}", str(mnt)], capture_output=True, text=True)


def _spec(tmp_path: Path) -> Path:
    return write_spec(tmp_path / "full.yml", """\
name: full
target: @TARGET@
iterations: 4
trace:
  events: [sched:sched_switch, sched:sched_wakeup, block:block_rq_issue]
variants:
  - name: only
workloads:
  - name: io
    kind: fio
    options: {rw: randread, bs: 4k, ioengine: psync, size: 8M, runtime: 2, time_based: 1}
""")


def _check_intact(out: Path, before: dict) -> None:
    now = _finished(out)
    for label, files in before.items():
        assert now[label] == files, f"finished run {label} changed"
        run = out / "runs" / label
        assert json.loads((run / "result.json").read_text())["status"] == "ok"
        if (run / "trace.dat").exists():
            count_events(run / "trace.dat")  # readable to the end


def test_full_campaign_dir_stops_cleanly_and_resumes(tmp_path, tmpfs):
    require_live()
    spec = _spec(tmp_path)
    run = subprocess.Popen(LISA_EXT + ["campaign", "run", str(spec), "--out", str(tmpfs), "--no-progress"],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (tmpfs / "runs/only/io/0/result.json").exists():
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline, "the first run did not finish"
        time.sleep(0.2)
    # leave 64 KiB: the next run's trace alone is larger
    for _ in range(20):
        if _remount(tmpfs, f"size={_used_bytes(tmpfs) + 64 * 1024}").returncode == 0:
            break
        time.sleep(0.1)
    else:
        pytest.fail("could not shrink the tmpfs")
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 2, stdout + stderr
    assert "Traceback" not in stderr
    assert f"the campaign directory {tmpfs} cannot take more data (no space left" in stderr
    done = len(_finished(tmpfs))
    assert 1 <= done < 4
    assert f"{done} of 4 runs are finished and kept" in stderr
    assert f"--resume --out {tmpfs}" in stderr
    before = _finished(tmpfs)
    # the full run was not stored as failed, and nothing half-written looks finished
    assert all(json.loads((tmpfs / "runs" / k / "result.json").read_text())["status"] == "ok" for k in before)
    assert not list((tmpfs / "runs").glob("*/*/.tmp-*"))
    status = _lisa_ext("campaign", "status", str(tmpfs), cwd=tmp_path)
    assert f"{done} done, 0 failed, {4 - done} missing" in status.stdout

    assert _remount(tmpfs, "size=256m").returncode == 0
    resumed = _lisa_ext("campaign", "run", str(spec), "--out", str(tmpfs), "--resume", "--no-progress",
                        cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{4 - done} runs done, 0 failed, {done} already done" in resumed.stdout
    _check_intact(tmpfs, before)
    assert len(_finished(tmpfs)) == 4


def test_read_only_campaign_dir_stops_cleanly(tmp_path, tmpfs):
    require_live()
    spec = _spec(tmp_path)
    first = _lisa_ext("campaign", "run", str(spec), "--out", str(tmpfs), "--no-progress", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = _finished(tmpfs)
    # a disk the kernel remounted read-only; rerun with one more iteration... the spec must not change,
    # so drop the last run and resume into the read-only directory
    subprocess.run(["rm", "-rf", str(tmpfs / "runs/only/io/3")], check=True)
    del before["only/io/3"]
    assert _remount(tmpfs, "ro").returncode == 0
    try:
        resumed = _lisa_ext("campaign", "run", str(spec), "--out", str(tmpfs), "--resume", "--no-progress",
                            cwd=tmp_path)
    finally:
        assert _remount(tmpfs, "rw").returncode == 0
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert "cannot take more data (read-only file system" in resumed.stderr
    assert "3 of 4 runs are finished and kept" in resumed.stderr
    _check_intact(tmpfs, before)
    again = _lisa_ext("campaign", "run", str(spec), "--out", str(tmpfs), "--resume", "--no-progress",
                      cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    _check_intact(tmpfs, before)
    assert len(_finished(tmpfs)) == 4
