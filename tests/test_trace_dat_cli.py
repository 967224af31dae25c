"""`lisa-ext trace convert` and `lisa-ext trace stats` on real traces."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import tracedat_report as oracle
from lisa_ext.trace import cli as trace_cli
from lisa_ext.trace import tracedat
from lisa_ext.trace.tracedat import read_tracedat

REPO = Path(__file__).resolve().parents[1]
LISA_EXT = REPO / ".venv" / "bin" / "lisa-ext"
RTAPP = REPO.parent / "shared" / "traces" / "public" / "lisa" / "example_rtapp_trace.dat"
FIO_V7 = REPO.parent / "shared" / "traces" / "local" / "fio_randread_2cpu_v7.dat"


@pytest.fixture(autouse=True)
def _need_inputs():
    missing = [p for p in (RTAPP, FIO_V7) if not p.exists()]
    if not shutil.which("trace-cmd"):
        missing.append("trace-cmd")
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"required in CI: {missing}")
        pytest.skip(f"missing: {missing}")


def _lisa_ext(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(LISA_EXT), *map(str, args)], capture_output=True, text=True, timeout=600)


def test_stats_json_counts_match_trace_cmd_report():
    proc = _lisa_ext("trace", "stats", "--json", RTAPP)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) == {"events", "cpus"}
    assert result["cpus"] == 6
    assert result["events"] == oracle.run_report(str(RTAPP), raw=True).counts()


def test_stats_text_lists_every_event():
    proc = _lisa_ext("trace", "stats", FIO_V7)
    assert proc.returncode == 0, proc.stderr
    assert "sched_switch" in proc.stdout and "410,823" in proc.stdout
    assert "file_version=7" in proc.stdout and "compression=zstd" in proc.stdout


def test_convert_writes_parquet_per_event_and_meta(tmp_path):
    out = tmp_path / "out"
    proc = _lisa_ext("trace", "convert", RTAPP, "-o", out)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((out / "meta.json").read_text())
    expected = oracle.run_report(str(RTAPP), raw=True).counts()
    assert meta["event_counts"] == expected
    assert (meta["cpus"], meta["clock"], meta["file_version"]) == (6, "local", 6)
    assert sorted(p.name for p in out.glob("*.parquet")) == sorted(f"{e}.parquet" for e in expected)
    tables = read_tracedat(RTAPP)
    for event, name in meta["files"].items():
        assert pq.read_table(out / name).equals(tables[event]), event
    # converting again into the same directory replaces the earlier conversion
    proc = _lisa_ext("trace", "convert", RTAPP, "-o", out, "-e", "sched_switch,cpu_frequency")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.glob("*.parquet")) == ["cpu_frequency.parquet", "sched_switch.parquet"]


def test_convert_refuses_a_foreign_directory_and_absent_events(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    proc = _lisa_ext("trace", "convert", RTAPP, "-o", tmp_path)
    assert proc.returncode == 2 and "not empty" in proc.stderr
    proc = _lisa_ext("trace", "convert", RTAPP, "-o", tmp_path / "new", "-e", "sched_wakeup_nope")
    assert proc.returncode == 2 and "sched_wakeup_nope" in proc.stderr and "example_rtapp_trace.dat" in proc.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_convert_in_two_passes_gives_the_same_files(tmp_path, monkeypatch):
    # large uncompressed traces are decoded in two passes overlapping the writes
    monkeypatch.setattr(tracedat, "PARALLEL_MIN_BYTES", 0)
    reader = tracedat.TraceDatReader(RTAPP)
    passes = trace_cli._tracedat_passes(reader, None)
    if (os.cpu_count() or 1) >= 2:
        assert len(passes) == 2 and "bprint" in passes[0]
    meta = trace_cli.convert(RTAPP, tmp_path / "out")
    tables = read_tracedat(RTAPP)
    assert meta["rows"] == {e: t.num_rows for e, t in tables.tables.items()}
    for event, name in meta["files"].items():
        assert pq.read_table(tmp_path / "out" / name).equals(tables[event]), event
