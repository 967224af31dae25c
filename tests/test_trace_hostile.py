"""Hostile traces: each class of input that crashed, exhausted or tracebacked the readers
(issue 20) now ends in one line naming the file and the offset or line, exit status 2, with
the process's memory bounded.

Inputs are small real seed traces (tests/fuzz/seeds.py) damaged with the fuzzer's file
writers (tests/fuzz/tracedat_files.py): the damage lands exactly where the issue's inputs put
it. Each runs the real CLI in a child process; os.wait4 gives that child's own peak RSS.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fuzz"))

import tracedat_files as tf  # noqa: E402
from shared_traces import shared_trace  # noqa: E402

LISA_EXT = str(Path(sys.executable).with_name("lisa-ext"))


@pytest.fixture(scope="module")
def seeds():
    shared_trace("public/lisa/trace_idle.dat")
    if subprocess.run(["which", "trace-cmd"], capture_output=True).returncode:
        pytest.skip("trace-cmd is not installed")
    import seeds as seed_module

    return {name: path.read_bytes() for name, path in seed_module.seed_paths().items()}


# Linux carries the peak RSS of a forking process over execve (exec_mmap): a CLI started straight
# from pytest would report pytest's peak. A small interpreter starts it and reports its peak.
_MEASURED = r"""
import os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _cli(*args: str, tmp_path: Path) -> tuple[int, list[str], float]:
    """(exit status, stderr lines, peak RSS in MiB) of ``lisa-ext ARGS`` in a fresh process."""
    env = {**os.environ, "LISA_EXT_CACHE": str(tmp_path / "cache")}
    rss = tmp_path / "peak_rss_kib"
    proc = subprocess.run([sys.executable, "-c", _MEASURED, str(rss), LISA_EXT, *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    return proc.returncode, proc.stderr.splitlines(), int(rss.read_text()) / 1024


def _one_error(lines: list[str], path: Path, pattern: str) -> re.Match:
    assert len(lines) == 1, lines
    match = re.search(pattern, lines[0])
    assert match and str(path) in lines[0] and "Traceback" not in lines[0], lines[0]
    return match


def _stats_and_convert(path: Path, tmp_path: Path) -> list[list[str]]:
    return [["trace", "stats", str(path)], ["trace", "convert", str(path), "-o", str(tmp_path / "out")]]


def _refused(path: Path, pattern: str, *args: str, tmp_path: Path, max_rss_mb: float = 400) -> None:
    """``lisa-ext ARGS`` exits 2 with one line naming ``path`` and matching ``pattern``, within
    ``max_rss_mb`` of peak RSS."""
    code, lines, rss = _cli(*args, tmp_path=tmp_path)
    assert code == 2, lines
    _one_error(lines, path, pattern)
    assert rss < max_rss_mb, rss


def _edit_format(v6: tf.V6, event: str, edit) -> int:
    """Apply ``edit`` to the text of ``event``'s format; returns its index among all formats."""
    for s, (name, formats) in enumerate(v6.systems):
        for i, text in enumerate(formats):
            if re.search(rb"^name: %s$" % event.encode(), text, re.M):
                formats[i] = edit(text)
                return i
    raise LookupError(event)


def test_header_page_commit_offset_past_the_page(seeds, tmp_path):
    """commit_off + commit_size wrapped around the 32-bit check: SIGSEGV in rd64/next_page."""
    v6 = tf.parse_v6(seeds["idle_v6"])
    v6.header_page = v6.header_page.replace(b"local_t commit;\toffset:8;", b"local_t commit;\toffset:4294967292;")
    path = tmp_path / "commit.dat"
    path.write_bytes(tf.write_v6(v6))
    for args in _stats_and_convert(path, tmp_path):
        _refused(path, r"at offset \d+: header_page: commit field at offset 4294967292 \(8 bytes\)", *args,
                 tmp_path=tmp_path)


@pytest.mark.parametrize("field", ["common_type", "common_pid"])
def test_common_field_offset_beyond_the_record(seeds, tmp_path, field):
    """type_off / pid_offset were never checked (parsed with "I"; offset + size wrapped)."""
    v6 = tf.parse_v6(seeds["idle_v6"])
    _edit_format(v6, "sched_switch", lambda t: re.sub(rb"(%s;\toffset:)\d+" % field.encode(), rb"\g<1>4294967294", t))
    path = tmp_path / f"{field}.dat"
    path.write_bytes(tf.write_v6(v6))
    code, lines, _ = _cli("trace", "stats", str(path), tmp_path=tmp_path)
    assert code == 0, lines  # counting needs no field of the damaged format
    _refused(path, rf"at offset \d+: event formats: event sched_switch \(23 records\): field {field} at offset "
                   r"4294967294 .* ends beyond the largest record a page holds \(4080 bytes\)",
             *_stats_and_convert(path, tmp_path)[1], tmp_path=tmp_path)


@pytest.mark.parametrize("count, problem", [
    (1000, r"fields \w+ \(offset 8, \d+ bytes\) and \w+ \(offset 8\) overlap"),
    (5000, r"more than 1024 fields"),
])
def test_thousands_of_overlapping_list_fields(seeds, tmp_path, count, problem):
    """A 23 KB trace whose sched_switch declares thousands of overlapping list fields took the
    decoder past 4.5 GiB: each column cost a mapping, each record a copy per column."""
    lines = b"".join(b"\tfield:unsigned char pad%d[64];\toffset:8;\tsize:64;\tsigned:0;\n" % k for k in range(count))
    v6 = tf.parse_v6(seeds["idle_v6"])
    _edit_format(v6, "sched_switch", lambda t: t.replace(b"\n\n\tfield:", b"\n\n" + lines + b"\tfield:", 1))
    path = tmp_path / "overlap.dat"
    path.write_bytes(tf.write_v6(v6))
    _refused(path, r"at offset \d+: event formats: event sched_switch \(23 records\): " + problem,
             *_stats_and_convert(path, tmp_path)[1], tmp_path=tmp_path)


def _v7_with_chunks(seed: bytes, chunks: list) -> bytes:
    v7 = tf.parse_v7(seed)
    for buffer in v7.buffers:
        for stream in buffer.streams:
            stream.chunks = list(chunks)
    return tf.write_v7(v7)


def test_zstd_chunks_claiming_1000_mib(seeds, tmp_path):
    """A 389 KB v7 file whose zstd chunks each inflate to 1000 MiB passed 4.5 GiB: a chunk may
    now declare at most 64 times its compressed size (plus 16 pages), 256 MiB in any case."""
    bomb = tf.Packed(tf.zstd_zeros(1000 << 20), 1000 << 20)
    path = tmp_path / "bomb_v7.dat"
    path.write_bytes(_v7_with_chunks(seeds["fio_v7_zstd"], [bomb] * 3))
    assert path.stat().st_size < 600_000
    for args in _stats_and_convert(path, tmp_path):
        _refused(path, r"at offset \d+: cpu \d data: compressed chunk declares 1048576000 bytes from \d+: "
                       r"expected at most 256 MiB \(a decompression bomb\)", *args, tmp_path=tmp_path)


def test_many_small_zstd_chunks_beyond_the_file_budget(seeds, tmp_path):
    """Chunks each within the ratio cap (64 KiB of zeros from 9 bytes is below the 16 free pages)
    but together far beyond 32 times the file: refused once the file's budget is spent."""
    chunk = tf.Packed(tf.zstd_zeros(64 << 10), 64 << 10)
    path = tmp_path / "many_v7.dat"
    path.write_bytes(_v7_with_chunks(seeds["fio_v7_zstd"], [chunk] * 20_000))
    _refused(path, r"at offset \d+: cpu \d data: the file's compressed chunks declare more than 32 times the "
                   r"file's size plus 16 MiB \(a decompression bomb\)", *_stats_and_convert(path, tmp_path)[1],
             tmp_path=tmp_path)


def test_compressed_section_bomb(seeds, tmp_path):
    """A metadata section (kallsyms) declaring 200 MiB from a few KiB of zstd."""
    v7 = tf.parse_v7(seeds["fio_v7_zstd"])
    flags, desc, _ = v7.sections[19]
    v7.sections[19] = (flags, desc, tf.Packed(tf.zstd_zeros(200 << 20), 200 << 20))
    layout = tf.Layout()
    path = tmp_path / "section_v7.dat"
    path.write_bytes(tf.write_v7(v7, layout))
    at = next(pos for pos, _, what in layout.ints if what == "section 19 size") - 8
    _refused(path, rf"at offset {at}: kallsyms: compressed section does not decompress: declares 209715200 bytes "
                   r"from \d+: more than 64 times its compressed size plus 1 MiB", "trace", "stats", str(path),
             tmp_path=tmp_path, max_rss_mb=300)


@pytest.mark.parametrize("damage", [
    (b"ID: 68", b"ID: " + b"9" * 5000),        # 4300-digit int conversion (ValueError)
    (b"ID: 68", b"ID: 4294967296"),             # event ids are 16-bit
    (b"offset:24;", b"offset:" + b"7" * 5000 + b";"),
    (b"char next_comm[16]", b"char next_comm[" + b"9" * 40 + b"*" + b"9" * 40 + b"]"),
    (b"char next_comm[16]", b"char next_comm[\xd9\xa3]"),  # a non-ASCII digit
    (b"size:16;", b"size:18446744073709551616;"),
])
def test_damaged_numbers_in_a_format(seeds, tmp_path, damage):
    """Numbers of any length in a format: one line (or a clean decode), never a traceback."""
    old, new = damage
    v6 = tf.parse_v6(seeds["idle_v6"])
    _edit_format(v6, "sched_switch", lambda t: t.replace(old, new, 1))
    path = tmp_path / "numbers.dat"
    path.write_bytes(tf.write_v6(v6))
    for args in _stats_and_convert(path, tmp_path):
        code, lines, _ = _cli(*args, tmp_path=tmp_path)
        assert code in (0, 2) and not any("Traceback" in line for line in lines), lines
        if code == 2:
            _one_error(lines, path, r"at offset \d+: event formats: event sched_switch")


def test_damaged_numbers_in_cmdlines_and_cpustats(seeds, tmp_path):
    v6 = tf.parse_v6(seeds["idle_v6"])
    v6.cmdlines = b"\xc2\xb2 superscript\n" + b"9" * 5000 + b" long\n" + v6.cmdlines
    v6.options.append((2, b"CPU: 0\nentries: " + b"9" * 5000 + b"\noverrun: 18446744073709551616\n"))
    path = tmp_path / "cmdlines.dat"
    path.write_bytes(tf.write_v6(v6))
    code, lines, _ = _cli("trace", "convert", str(path), "-o", str(tmp_path / "out"), tmp_path=tmp_path)
    assert code == 0, lines


@pytest.mark.parametrize("old, new, found", [
    (r"\[001\]", "[281474976710656]", r"cpu 281474976710656"),  # ArrowInvalid: cpu does not fit int32
    (r" 76\.", " 1" + "0" * 30 + ".", r"10{23}\.211718 s"),  # OverflowError: int64 ns
    (r"-0 ", "-" + "7" * 5000 + " ", r"pid 777777777777777777777777\)"),  # ValueError: 4300-digit conversion
])
def test_text_event_line_with_impossible_numbers(tmp_path, old, new, found):
    src = shared_trace("public/lisa/lisa_tests_trace.txt").read_text().splitlines(keepends=True)[:50]
    assert "76.211718: sched_switch" in src[9]
    src[9] = re.sub(old, new, src[9], count=1)
    path = tmp_path / "damaged.txt"
    path.write_text("".join(src))
    _refused(path, rf": line 10: expected a timestamp below 2\^63 ns and a cpu and pid below 2\^31 \(found .*{found}",
             *_stats_and_convert(path, tmp_path)[1], tmp_path=tmp_path)


def test_text_pathological_lines_stay_linear(tmp_path):
    """Lines the header pattern backtracks on (leading blanks, '-1 [' runs, trailing blanks)."""
    src = shared_trace("public/lisa/lisa_tests_trace.txt").read_text().splitlines(keepends=True)[:30]
    hostile = [" " * 200_000 + "x\n", "a-1 [" * 40_000 + "\n", src[5].rstrip("\n") + " " * 15_000 + "!\n",
               ":1 [1] S ==> " * 1_200 + "\n"]
    path = tmp_path / "slow.txt"
    path.write_text("".join(src[:20] + hostile + src[20:]))
    import time

    started = time.perf_counter()
    code, lines, _ = _cli("trace", "stats", str(path), tmp_path=tmp_path)
    assert code == 0 and time.perf_counter() - started < 20, lines
    assert any("line 21: longer than 16384 characters" in line for line in lines), lines


def test_systrace_zlib_bomb(tmp_path):
    """A 1.3 MB systrace page whose zlib body inflated to 3.2 GB."""
    packer = zlib.compressobj(9)
    line = b"  <idle>-0 [000] d..2  1.000000: cpu_idle: state=1 cpu_id=0\n"
    body = b"".join(packer.compress(line * 100_000) for _ in range(20)) + packer.flush()  # 120 MB of text
    path = tmp_path / "bomb.html"
    path.write_bytes(b'<!DOCTYPE html>\n<html>\n<body>\n<script class="trace-data" type="application/text">\n'
                     + base64.b64encode(body) + b"\n</script>\n</body>\n</html>\n")
    assert path.stat().st_size < 600_000
    _refused(path, r": line 4: compressed trace data of \d+ bytes inflates to more than \d+ \(32 times its size "
                   r"plus 1 MiB\): a decompression bomb", "trace", "stats", str(path), tmp_path=tmp_path)


def test_analyse_reports_a_damaged_trace_in_one_line(seeds, tmp_path):
    v6 = tf.parse_v6(seeds["idle_v6"])
    v6.header_page = v6.header_page.replace(b"local_t commit;\toffset:8;\tsize:8;",
                                            b"local_t commit;\toffset:8;\tsize:3;")
    path = tmp_path / "analyse.dat"
    path.write_bytes(tf.write_v6(v6))
    _refused(path, r"at offset \d+: header_page: commit field at offset 8 \(3 bytes\)", "analyse", "wakeup-latency",
             str(path), tmp_path=tmp_path, max_rss_mb=1024)


def test_seed_traces_decode_cleanly(seeds, tmp_path):
    """The undamaged seeds read without a warning: the limits above leave real traces alone
    (tests/test_trace_dat_equivalence.py checks every shared trace against trace-cmd)."""
    import readers

    for name, data in seeds.items():
        path = tmp_path / f"{name}.trace"
        path.write_bytes(data)
        outcome = readers.read_any(str(path))
        assert outcome.get("rows") and outcome["warnings"] == 0, (name, outcome)
