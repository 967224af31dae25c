"""Live campaigns of the workload kinds on this machine: real binaries, a real PostgreSQL, real SIGKILL.

schbench and ebizzy are built from ../shared/src and installed with the same
code as ``lisa-ext campaign tool install``; the rest come from Debian
(scripts/install-system-packages.sh).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from campaign_helpers import LISA_EXT, LOCAL_TARGET, require_live, write_spec
from workload_tools import SOURCES, install_built_tools

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def installed():
    require_live()
    for tool in ("pgbench", "hackbench", "cyclictest", "runuser"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} missing (bash scripts/install-system-packages.sh)")
    from lisa_ext.target import connect

    return install_built_tools(connect(LOCAL_TARGET))


def _spec(tmp_path: Path, name: str, workloads: str) -> Path:
    return write_spec(tmp_path / f"{name}.yml", f"""\
name: {name}
target: @TARGET@
iterations: 1
variants:
  - name: base
workloads:
{workloads}""")


def _run(spec: Path, out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(LISA_EXT + ["campaign", "run", str(spec), "--out", str(out), "--no-progress", *extra],
                          capture_output=True, text=True, timeout=900, cwd=spec.parent,
                          env=None if env is None else {**os.environ, **env})


def _result(out: Path, workload: str) -> tuple[dict, dict]:
    run = out / "runs" / "base" / workload / "0"
    result = json.loads((run / "result.json").read_text())
    return result, {m["name"]: m["value"] for m in result["metrics"]}


def _pg_leftovers() -> list[str]:
    dirs = [str(p) for p in Path("/tmp").glob("lisa-ext-pg.*")]
    procs = subprocess.run(["ps", "-u", "postgres", "-o", "pid=,args="], capture_output=True, text=True).stdout
    return dirs + [line for line in procs.splitlines() if "postgres" in line]


def test_every_kind_runs(tmp_path, installed):
    spec = _spec(tmp_path, "wl-live", """\
  - name: sch
    kind: schbench
    runtime-s: 2
    message-threads: 1
    threads: 1
  - name: eb
    kind: ebizzy
    duration-s: 2
    cpu: 0
    target-util-pct: 20
  - name: pg
    kind: pgbench
    duration-s: 2
    clients: 2
    select-only: true
    no-vacuum: true
    rate: 50
  - name: hb
    kind: hackbench
    groups: 1
    loops: 50
  - name: ct
    kind: cyclictest
    duration-s: 2
    histogram-us: 2000
  - name: io
    kind: fio
    options: {rw: randrw, bs: 32k, ioengine: libaio, iodepth: 16, numjobs: 2, verify: sha512,
              size: 8M, direct: 1}
""")
    out = tmp_path / "out"
    proc = _run(spec, out)
    assert proc.returncode == 0, proc.stderr
    expected = {
        "sch": ("schbench.json", {"wakeup_lat_p50", "wakeup_lat_p99", "wakeup_lat_p99_9", "wakeup_lat_max",
                                  "request_lat_p99", "rps_p50", "rps_avg"}),
        "eb": ("ebizzy.stdout", {"records_per_s", "real_time", "user_time", "sys_time", "achieved_util_pct"}),
        "pg": ("pgbench.stdout", {"tps", "latency_avg", "latency_stddev", "transactions", "failed", "lag_avg"}),
        "hb": ("hackbench.stdout", {"time"}),
        "ct": ("cyclictest.stdout", {"lat_min", "lat_avg", "lat_max", "samples"}),
        "io": ("fio.json", {"read_bw", "write_bw", "read_iops"}),
    }
    ncpu = os.cpu_count()
    for workload, (raw, names) in expected.items():
        result, metrics = _result(out, workload)
        assert result["status"] == "ok", (workload, result["error"])
        assert names <= set(metrics), (workload, sorted(metrics))
        assert (out / "runs/base" / workload / "0" / raw).stat().st_size > 0
        # CPU utilisation of the workload window, total and per CPU, in metrics and meta.json
        assert 0 <= metrics["cpu_util_total"] <= 100
        assert {f"cpu_util_cpu{i}" for i in range(ncpu)} <= set(metrics)
        meta = json.loads((out / "runs/base" / workload / "0" / "meta.json").read_text())
        assert set(meta["cpu_util"]) == {"cpu"} | {f"cpu{i}" for i in range(ncpu)}
    assert _result(out, "pg")[1]["transactions"] > 0
    assert _result(out, "sch")[1]["wakeup_lat_min"] <= _result(out, "sch")[1]["wakeup_lat_p50"]
    state = json.loads((out / "campaign-state.json").read_text())
    calibration = state["ebizzy_calibration:20:cpu0"]
    assert calibration["sleep_after"] >= 1 and 0 < calibration["util_pct"] < 100
    # the measured utilisation is a metric of each run, next to the requested one
    assert _result(out, "eb")[1]["target_util_pct"] == 20
    assert 0 < _result(out, "eb")[1]["achieved_util_pct"] <= 100
    assert (out / "runs/base/pg/0/postgres-server.log").exists()
    assert not _pg_leftovers()
    assert not list(tmp_path.glob("*verify.state"))  # fio's verify state stays in the run directory


def test_missing_binary_stops_before_the_first_run(tmp_path, installed):
    schbench = Path(installed["schbench"])
    aside = schbench.with_name("schbench.aside")
    spec = _spec(tmp_path, "wl-missing", "  - name: sch\n    kind: schbench\n    runtime-s: 1\n")
    os.replace(schbench, aside)
    try:
        # nothing built in this cache: nothing to install from it
        proc = _run(spec, tmp_path / "out", env={"LISA_EXT_CACHE": str(tmp_path / "empty-cache")})
        # the user's cache has the build the fixture made: installed again, and the campaign runs
        again = _run(spec, tmp_path / "out-cached")
    finally:
        os.replace(aside, schbench)
    assert again.returncode == 0, again.stderr
    assert "installed schbench on the target from the tool cache" in again.stderr
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "schbench (workload sch) is not installed on the target" in lines[0]
    # the command to paste, from where the user is: the shipped sources, the spec's target
    command = re.search(r"lisa-ext campaign tool install schbench --src (\S+) --target (\S+)$", lines[0])
    assert command, lines[0]
    assert (tmp_path / command[1]).resolve() == SOURCES["schbench"].resolve()
    assert (tmp_path / command[2]).resolve() == LOCAL_TARGET.resolve()
    assert not (tmp_path / "out" / "runs").exists()


def test_pgbench_server_that_cannot_start(tmp_path, installed):
    # a live postmaster's lock on the socket: what a second server on the same socket finds
    sock = tmp_path / "sock"
    sock.mkdir()
    (sock / ".s.PGSQL.5432.lock").write_text("1\n")
    os.chmod(tmp_path, 0o755)
    spec = _spec(tmp_path, "wl-pg-taken", f"""\
  - name: pg
    kind: pgbench
    duration-s: 2
    socket-dir: {sock}
  - name: hb
    kind: hackbench
    groups: 1
    loops: 20
""")
    out = tmp_path / "out"
    proc = _run(spec, out)
    assert proc.returncode == 1
    result, _ = _result(out, "pg")
    assert result["status"] == "failed"
    assert "the PostgreSQL server did not start" in result["error"]
    assert "lock file" in result["error"]
    assert _result(out, "hb")[0]["status"] == "ok"  # the campaign went on
    assert not _pg_leftovers()


def test_pgbench_server_left_by_a_killed_runner_is_cleaned_on_resume(tmp_path, installed):
    spec = _spec(tmp_path, "wl-pg-kill", "  - name: pg\n    kind: pgbench\n    duration-s: 6\n    clients: 1\n")
    out = tmp_path / "out"
    runner = subprocess.Popen(LISA_EXT + ["campaign", "run", str(spec), "--out", str(out), "--no-progress"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    journal = out / ".runner-journal.json"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        # kill once the benchmark itself runs: server up, pgbench connected
        procs = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
        if journal.exists() and "pgbench -h" in procs and " -T 6 " in procs:
            break
        time.sleep(0.2)
    else:
        runner.kill()
        pytest.fail("the runner never started pgbench")
    runner.send_signal(signal.SIGKILL)
    runner.communicate(timeout=30)
    left = _pg_leftovers()
    assert any("lisa-ext-pg." in entry for entry in left), left  # the killed runner left its server
    cleanups = json.loads(journal.read_text())["cleanups"]
    assert any("postmaster.pid" in c for c in cleanups)
    resumed = _run(spec, out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resume: ran cleanup" in resumed.stderr
    assert _result(out, "pg")[0]["status"] == "ok"
    time.sleep(1)  # the postmaster's children exit on their own once it is gone
    assert not _pg_leftovers()


def test_fio_dm_crypt_on_this_machine(tmp_path, installed):
    """The host kernel may lack device-mapper: then the run fails with a clear error and leaves no loop."""
    spec = _spec(tmp_path, "wl-crypt", """\
  - name: io
    kind: fio
    options: {rw: randrw, bs: 32k, ioengine: libaio, iodepth: 8, numjobs: 2, size: 16M, direct: 1}
    dm-crypt: {backing: loop, size-mb: 64}
""")
    out = tmp_path / "out"
    proc = _run(spec, out)
    has_dm_crypt = subprocess.run("dmsetup targets 2>/dev/null | grep -qw crypt || "
                                  "(modprobe dm-crypt 2>/dev/null && dmsetup targets | grep -qw crypt)",
                                  shell=True).returncode == 0
    result, metrics = _result(out, "io")
    if has_dm_crypt:
        assert proc.returncode == 0 and result["status"] == "ok", result["error"]
        assert metrics["read_bw"] > 0 and metrics["write_bw"] > 0
    else:
        assert result["status"] == "failed"
        assert "dm-crypt setup: finding the dm-crypt target" in result["error"]
    leftover_loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert "lisa-ext-io.img" not in leftover_loops
    assert not Path("/tmp/lisa-ext-target/lisa-ext-fio/lisa-ext-io.img").exists()  # local.yml workdir
    assert not Path("/dev/mapper/lisa-ext-io").exists()
