"""The native trace.dat decoder agrees with `trace-cmd report -N`, row by row and field by field.

Expected values come from trace-cmd's own text output, parsed by the small
independent oracle in tests/tracedat_report.py. Covered: every trace.dat under
../shared/traces (file versions 6 and 7, 32- and 64-bit, 2 to 8 CPUs, print and
bprint markers), plus a trace recorded here in an ftrace instance (version 7,
zstd) and its conversion to version 6.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

import tracedat_report as oracle
from lisa_ext.trace.tracedat import read_tracedat

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
IN_CI = os.environ.get("CI") == "true"


def _shared_dat_files() -> list[Path]:
    return sorted(SHARED_TRACES.rglob("*.dat")) if SHARED_TRACES.is_dir() else []


def _need(condition: bool, reason: str):
    if not condition:
        if IN_CI:
            pytest.fail(f"required in CI: {reason}")
        pytest.skip(reason)


def _check(path: Path, instances: list[str] = ()):
    tables = read_tracedat(path)
    raw = oracle.run_report(str(path), raw=True, instances=list(instances))
    printed = oracle.run_report(str(path), raw=False, instances=list(instances), events=set(raw.counts())) \
        if {"print", "bprint"} & set(tables.tables) else None
    assert not raw.unparsed, f"oracle could not parse: {raw.unparsed[:3]}"
    assert raw.counts(), "trace-cmd report printed no event"
    errors = oracle.compare(tables.tables, raw, printed, oracle.kallsyms(str(path)))
    assert not errors, "\n".join(errors)
    # meta agrees with the tables and with the report
    assert tables.meta["event_counts"] == raw.counts()
    assert tables.meta["clock"] == oracle.saved_clock(str(path))
    all_ts = [t for ts in raw.ts.values() for t in ts]
    assert tables.meta["first_timestamp_ns"] == min(all_ts)
    assert tables.meta["last_timestamp_ns"] == max(all_ts)
    for name, table in tables.tables.items():
        assert [str(f.type) for f in table.schema][:4] == ["int64", "int32", "int32", "string"], name
        assert table.column_names[:4] == ["__timestamp", "__cpu", "__pid", "__comm"], name
    expected_markers = {"print": [("ip", "uint64"), ("buf", "string")],
                        "bprint": [("ip", "uint64"), ("fmt", "string"), ("buf", "string")]}
    for name, fields in expected_markers.items():
        if name in tables:
            assert [(f.name, str(f.type)) for f in tables[name].schema][4:] == fields, name
    return tables


def test_shared_traces_present():
    _need(bool(_shared_dat_files()), f"no trace.dat under {SHARED_TRACES}")


@pytest.mark.parametrize("path", _shared_dat_files(), ids=lambda p: p.name)
def test_shared_trace_matches_trace_cmd_report(path):
    _need(shutil.which("trace-cmd") is not None, "trace-cmd is not installed")
    _check(path)


TRACEFS = Path("/sys/kernel/tracing")


@pytest.fixture(scope="module")
def recorded_trace(tmp_path_factory):
    """A v7 (zstd) trace recorded here in a private instance, with rt-app-style markers."""
    _need(shutil.which("trace-cmd") is not None, "trace-cmd is not installed")
    _need(os.geteuid() == 0, "recording needs root")
    _need((TRACEFS / "instances").is_dir(), f"no tracefs at {TRACEFS}")
    out = tmp_path_factory.mktemp("rec")
    instance = f"lxtest_{uuid.uuid4().hex[:8]}"
    marker = TRACEFS / "instances" / instance / "trace_marker"
    script = (
        f"for i in 1 2 3 4 5; do echo \"rtapp_main: event=start phase=$i\" > {marker}; "
        "ls /usr/bin > /dev/null; sleep 0.02; done; printf 'no-newline marker' > " + str(marker)
    )
    dat = out / "rec_v7.dat"
    try:
        subprocess.run(
            ["trace-cmd", "record", "--no-filter", "-d", "-B", instance,
             "-e", "sched:sched_switch", "-e", "sched:sched_wakeup", "-e", "sched:sched_waking",
             "-e", "sched:sched_process_exec", "-e", "irq",
             "-o", str(dat), "--", "sh", "-c", script],
            capture_output=True, timeout=120, check=False,
        )
    finally:
        if (TRACEFS / "instances" / instance).exists():
            os.rmdir(TRACEFS / "instances" / instance)
    # trace-cmd may exit 1 on cleanup with complete data: judge the file
    assert dat.exists() and dat.stat().st_size > 0, "trace-cmd record wrote no file"
    v6 = out / "rec_v6.dat"
    subprocess.run(["trace-cmd", "convert", "--file-version", "6", "--compression", "none",
                    "-i", str(dat), "-o", str(v6)], capture_output=True, check=True, timeout=120)
    return dat, v6, instance


def test_recorded_v7_matches_trace_cmd_report(recorded_trace):
    dat, _, instance = recorded_trace
    tables = _check(dat, [instance])
    assert tables.meta["file_version"] == 7
    assert tables.meta["compression"] == "zstd"
    assert instance in tables.meta["buffers"]
    texts = tables["print"].column("buf").to_pylist()
    assert [t for t in texts if t.startswith("rtapp_main")] == [
        f"rtapp_main: event=start phase={i}" for i in range(1, 6)
    ]
    assert "no-newline marker" in texts


def test_recorded_v6_conversion_matches_v7(recorded_trace):
    dat, v6, instance = recorded_trace
    tables6 = _check(v6, [instance])
    assert tables6.meta["file_version"] == 6
    tables7 = read_tracedat(dat)
    assert tables6.meta["event_counts"] == tables7.meta["event_counts"]
    for name, table in tables7.tables.items():
        assert tables6[name].equals(table), name
