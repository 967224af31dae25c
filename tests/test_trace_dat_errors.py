"""Damaged or unexpected trace.dat input: one clear error naming file and offset,
or a warning with everything before the damage still decoded."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from lisa_ext.errors import UserError
from lisa_ext.trace import tracedat
from lisa_ext.trace.tracedat import TraceDatError, count_events, open_tracedat, read_tracedat

REPO = Path(__file__).resolve().parents[1]
LISA_TRACES = REPO.parent / "shared" / "traces" / "public" / "lisa"
IDLE = LISA_TRACES / "trace_idle.dat"
RTAPP = LISA_TRACES / "example_rtapp_trace.dat"
FIO_V7 = REPO.parent / "shared" / "traces" / "local" / "fio_randread_2cpu_v7.dat"


@pytest.fixture(autouse=True)
def _need_traces():
    if not IDLE.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"required in CI: {IDLE}")
        pytest.skip(f"shared traces not found at {LISA_TRACES}")


def _copy(tmp_path, src: Path, name: str | None = None) -> Path:
    dst = tmp_path / (name or src.name)
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)
    return dst


def _rows_by_cpu(table) -> dict[int, list]:
    rows: dict[int, list] = {}
    for row in table.to_pylist():
        rows.setdefault(row["__cpu"], []).append(row)
    return rows


def _assert_prefix_per_cpu(damaged, full):
    """Every CPU's rows in the damaged read are the first rows of that CPU in the full read."""
    for event, table in damaged.tables.items():
        full_rows = _rows_by_cpu(full[event])
        for cpu, rows in _rows_by_cpu(table).items():
            assert rows == full_rows[cpu][: len(rows)], (event, cpu)


def test_wrong_magic(tmp_path):
    bad = tmp_path / "bad.dat"
    bad.write_bytes(b"\x17\x08\x44tracinX" + IDLE.read_bytes()[10:4096])
    with pytest.raises(TraceDatError, match=r"bad\.dat at offset 0: not a trace\.dat file: bad magic"):
        read_tracedat(bad)


def test_not_a_file_at_all(tmp_path):
    with pytest.raises(UserError, match="cannot open"):
        read_tracedat(tmp_path / "missing.dat")
    empty = tmp_path / "empty.dat"
    empty.write_bytes(b"")
    with pytest.raises(TraceDatError, match="only 0 bytes"):
        count_events(empty)


def test_unsupported_version_and_endianness(tmp_path):
    data = bytearray(IDLE.read_bytes()[:8192])
    assert data[10:12] == b"6\0"
    data[10] = ord("5")
    (tmp_path / "v5.dat").write_bytes(bytes(data))
    with pytest.raises(TraceDatError, match=r"at offset 10: unsupported trace.dat file version 5"):
        read_tracedat(tmp_path / "v5.dat")
    data[10] = ord("6")
    data[12] = 1
    (tmp_path / "be.dat").write_bytes(bytes(data))
    with pytest.raises(TraceDatError, match="at offset 12: big-endian"):
        read_tracedat(tmp_path / "be.dat")


def test_truncated_in_headers_names_the_section(tmp_path):
    cut = tmp_path / "cut.dat"
    cut.write_bytes(IDLE.read_bytes()[:20000])  # inside the event formats
    with pytest.raises(TraceDatError, match=r"cut\.dat at offset \d+: (ftrace )?event formats: truncated"):
        read_tracedat(cut)


def test_truncated_event_data_keeps_what_precedes(tmp_path):
    full = read_tracedat(RTAPP)
    info = open_tracedat(RTAPP)
    last_off, last_size = max((off, size) for _, off, size in info.streams)
    cut = tmp_path / "cut.dat"
    cut.write_bytes(RTAPP.read_bytes()[: last_off + last_size // 2 + 100])
    damaged = read_tracedat(cut)
    assert any("file truncated" in w and "cut.dat" in w for w in damaged.meta["warnings"]), damaged.meta["warnings"]
    lost = sum(full.meta["event_counts"].values()) - sum(damaged.meta["event_counts"].values())
    assert lost > 0
    _assert_prefix_per_cpu(damaged, full)


def test_truncated_v7_names_the_missing_options_section(tmp_path):
    if not FIO_V7.exists():
        pytest.skip(f"{FIO_V7} not found")
    info = open_tracedat(FIO_V7)
    off, size = info.streams[-1][1:]
    cut = tmp_path / "cut_v7.dat"
    cut.write_bytes(FIO_V7.read_bytes()[: off + size // 3])
    with pytest.raises(TraceDatError, match=r"cut_v7\.dat at offset \d+: options section lies beyond the end"):
        read_tracedat(cut)


def test_corrupted_compressed_chunk_keeps_what_precedes(tmp_path):
    if not FIO_V7.exists():
        pytest.skip(f"{FIO_V7} not found")
    info = open_tracedat(FIO_V7)
    assert info.compression == "zstd"
    _, off, size = info.streams[-1]
    data = bytearray(FIO_V7.read_bytes())
    # <u32 count> then chunks <u32 compressed size><u32 size><data>: break the third chunk's size
    pos = off + 4
    for _ in range(2):
        pos += 8 + struct.unpack_from("<I", data, pos)[0]
    data[pos : pos + 4] = struct.pack("<I", 0xFFFFFFF0)
    bad = tmp_path / "badchunk_v7.dat"
    bad.write_bytes(bytes(data))
    damaged = read_tracedat(bad, ["sched_switch"])
    full = read_tracedat(FIO_V7, ["sched_switch"])
    assert any("badchunk_v7.dat" in w and f"chunk at offset {pos} claims" in w for w in damaged.meta["warnings"]), \
        damaged.meta["warnings"]
    assert 0 < damaged["sched_switch"].num_rows < full["sched_switch"].num_rows
    _assert_prefix_per_cpu(damaged, full)


def test_corrupted_page_header_is_reported_with_its_offset(tmp_path):
    full = read_tracedat(RTAPP)
    info = open_tracedat(RTAPP)
    cpu, off, size = max(info.streams, key=lambda s: s[2])
    page = off + (size // info.page_size // 2) * info.page_size
    data = bytearray(RTAPP.read_bytes())
    data[page + 8 : page + 16] = struct.pack("<Q", 0x7FFFFFF)  # commit far beyond the page
    bad = _copy(tmp_path, RTAPP, "badpage.dat")
    bad.write_bytes(bytes(data))
    damaged = read_tracedat(bad)
    assert any(f"page at file offset {page}" in w and "corrupted page" in w for w in damaged.meta["warnings"]), \
        damaged.meta["warnings"]
    _assert_prefix_per_cpu(damaged, full)


def test_garbage_event_data_never_crashes(tmp_path):
    info = open_tracedat(IDLE)
    data = bytearray(IDLE.read_bytes())
    for _, off, size in info.streams:
        for k in range(off + 16, off + size, 97):  # keep page headers, scramble events
            data[k] = (data[k] * 31 + 7) & 0xFF
    bad = tmp_path / "garbage.dat"
    bad.write_bytes(bytes(data))
    tables = read_tracedat(bad)  # decodes something or warns; must not raise or crash
    assert tables.meta["format"] == "tracedat"


def test_absent_event_is_a_user_error():
    with pytest.raises(UserError, match=r"trace_idle\.dat: event 'sched_wakeup_nope' is not in this trace"):
        read_tracedat(IDLE, ["sched_switch", "sched_wakeup_nope"])


def test_event_with_format_but_no_record_gives_an_empty_typed_table():
    tables = read_tracedat(IDLE, ["sched:sched_wakeup", "cpu_idle"])
    assert tables["sched_wakeup"].num_rows == 0
    assert tables["sched_wakeup"].column_names[:4] == ["__timestamp", "__cpu", "__pid", "__comm"]
    assert str(tables["sched_wakeup"].schema.field("pid").type) == "int32"
    assert tables["cpu_idle"].num_rows == 17


def test_unknown_field_type_is_kept_as_bytes_with_a_warning():
    # svc_handle_xprt has "struct __kernel_sockaddr_storage ss" (128 bytes): no integer type
    tables = read_tracedat(RTAPP, ["svc_handle_xprt"])
    assert str(tables["svc_handle_xprt"].schema.field("ss").type) == "list<item: uint8>"
    assert any("svc_handle_xprt: field ss" in w and "list of bytes" in w for w in tables.meta["warnings"])


def test_cli_reports_errors_as_one_line(tmp_path):
    bad = tmp_path / "bad.dat"
    bad.write_bytes(b"not a trace at all, but long enough")
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "lisa-ext"), "trace", "stats", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "bad.dat" in proc.stderr and "not a trace" in proc.stderr


def test_parallel_decoding_gives_the_same_tables(monkeypatch):
    serial = read_tracedat(RTAPP)
    monkeypatch.setattr(tracedat, "PARALLEL_MIN_BYTES", 0)
    parallel = read_tracedat(RTAPP)
    assert serial.meta == parallel.meta
    assert serial.tables.keys() == parallel.tables.keys()
    for name, table in serial.tables.items():
        assert parallel[name].equals(table), name
