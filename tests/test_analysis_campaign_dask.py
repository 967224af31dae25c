"""Campaign analysis and the report's per-run work on a real Dask cluster.

A ``dask scheduler`` and two ``dask worker`` processes (the CLI entry points
of the project's environment, on 127.0.0.1 only) analyse the sample campaign
data/samples/wq-affinity; every result must equal the serial path's bit for
bit: per-run summaries and tables, and every file of the report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from lisa_ext.analysis.registry import ANALYSES
from lisa_ext.analysis.campaign import analyse_campaign
from lisa_ext.trace.cluster import (
    LOCAL,
    MIN_LOCAL_TASKS,
    SCHEDULER_ENV,
    SERIAL,
    choose_scheduler,
    map_traces,
)
from lisa_ext.cli import main
from lisa_ext.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "samples" / "wq-affinity"
DASK = Path(sys.executable).with_name("dask")


def _wait_for(path: Path, procs: list[subprocess.Popen], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{p.args[:2]} exited with {p.returncode}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} not written within {timeout} s")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Address of a scheduler with two single-threaded workers."""
    from distributed import Client

    tmp = tmp_path_factory.mktemp("dask")
    sched_file = tmp / "scheduler.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop(SCHEDULER_ENV, None)
    procs: list[subprocess.Popen] = []
    try:
        # --port 0: the OS picks a free port, the scheduler file says which
        procs.append(subprocess.Popen(
            [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(sched_file)],
            env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=open(tmp / "scheduler.log", "w")))
        _wait_for(sched_file, procs, 120)
        address = json.loads(sched_file.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:")
        for i in range(2):
            procs.append(subprocess.Popen(
                [str(DASK), "worker", address, "--host", "127.0.0.1", "--nworkers", "1",
                 "--nthreads", "1", "--no-dashboard", "--name", f"w{i}",
                 "--local-directory", str(tmp / f"w{i}")],
                env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                stderr=open(tmp / f"worker{i}.log", "w")))
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=180)
        yield address
    finally:
        for p in reversed(procs):
            p.kill()
            p.wait(timeout=30)


def _worker_modules(address: str) -> dict[str, bool]:
    from distributed import Client

    with Client(address, timeout="60s") as client:
        return client.run(lambda: "lisa_ext.trace" in sys.modules)


def test_choose_scheduler(monkeypatch):
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    assert choose_scheduler(None, 2) == SERIAL
    assert choose_scheduler(None, MIN_LOCAL_TASKS) == (LOCAL if (os.cpu_count() or 1) > 1 else SERIAL)
    assert choose_scheduler("none", 100) == SERIAL
    assert choose_scheduler("tcp://10.0.0.1:8786", 1) == "tcp://10.0.0.1:8786"
    monkeypatch.setenv(SCHEDULER_ENV, "tcp://10.0.0.2:8786")
    assert choose_scheduler(None, 1) == "tcp://10.0.0.2:8786"
    assert choose_scheduler("serial", 100) == SERIAL
    monkeypatch.setenv(SCHEDULER_ENV, "10.0.0.2")
    with pytest.raises(UserError, match=SCHEDULER_ENV):
        choose_scheduler(None, 1)


def test_unreachable_scheduler_is_a_clear_error():
    with pytest.raises(UserError, match="tcp://127.0.0.1:9: cannot connect"):
        analyse_campaign("wq-placement", SAMPLE, scheduler="tcp://127.0.0.1:9")


def test_campaign_analysis_on_cluster_equals_serial(cluster):
    serial = analyse_campaign("wq-placement", SAMPLE, scheduler=SERIAL)
    assert [r.label for r in serial] == ["cache/fio-randread/0", "system/fio-randread/0"]
    on_cluster = analyse_campaign("wq-placement", SAMPLE, scheduler=cluster)
    assert any(_worker_modules(cluster).values()), "no worker loaded a trace"
    assert [r.label for r in on_cluster] == [r.label for r in serial]
    for mine, ref in zip(on_cluster, serial):
        assert mine.trace == ref.trace
        assert json.dumps(mine.summary, sort_keys=True) == json.dumps(ref.summary, sort_keys=True)
        assert [t for t, _ in mine.tables] == [t for t, _ in ref.tables]
        assert any(len(df) for _, df in ref.tables)
        for (_, got), (_, want) in zip(mine.tables, ref.tables):
            pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_trace_a_worker_cannot_see_is_an_error(cluster, tmp_path):
    # the client does not look: a path only the client had would fail the same way
    missing = tmp_path / "runs" / "a" / "w" / "0" / "trace.dat"
    with pytest.raises(UserError, match="not visible on Dask worker .*shares"):
        map_traces(len, [missing], scheduler=cluster)


def test_analyse_cli_campaign_on_cluster(cluster, capsys):
    assert main(["analyse", "wq-placement", "--data", str(SAMPLE), "--json",
                 "--scheduler", cluster]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert list(printed) == ["cache/fio-randread/0", "system/fio-randread/0"]
    assert printed["cache/fio-randread/0"]["functions"]
    assert "wq-placement" in ANALYSES


def test_report_on_cluster_is_byte_identical(cluster, tmp_path):
    outs = {}
    for how in (SERIAL, cluster):
        outs[how] = tmp_path / ("serial" if how == SERIAL else "cluster")
        # --no-cache: both reports analyse every trace (the serial one would
        # otherwise fill the findings cache the cluster one then reads)
        assert main(["report", str(SAMPLE), "--baseline", "system", "--out", str(outs[how]),
                     "--no-cache", "--scheduler", how]) == 0
    files = sorted(p.relative_to(outs[SERIAL]) for p in outs[SERIAL].rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(outs[cluster]) for p in outs[cluster].rglob("*")
                           if p.is_file())
    # the traces gave figures (wakeup latency CDF, timelines), not just notes
    assert any("timeline" in str(f) for f in files)
    for name in files:
        assert (outs[cluster] / name).read_bytes() == (outs[SERIAL] / name).read_bytes(), name
