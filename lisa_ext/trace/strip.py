"""Shrink a trace.dat for committing as sample data: drop the kallsyms it carries.

``trace-cmd record`` stores the target's whole ``/proc/kallsyms`` in every trace.dat
(trace-cmd's lib/trace-cmd/trace-output.c, ``tracecmd_write_kallsyms``): 2.4 MB of text,
~580 KB zstd-compressed, for the virtual board's kernel, against ~100 KB of events for a short run.
Only ``%ps``-style fields (a work item's ``function``) need it, and each resolves to the nearest
symbol at or below its address: keeping exactly the symbols the trace's fields resolve to
(:func:`used_symbols`) resolves every field as before. :func:`strip_kallsyms` rewrites a
version 6 (uncompressed) file with only those symbols; every event is kept byte for byte. Version 6 places sections one after the other and refers to the per-CPU
ring-buffer pages by absolute, page-aligned offsets (the flyrecord tables, the BUFFER options of
instances), so the pages move back by a whole number of pages and those offsets are patched.
:func:`shrink_trace` does it all (``trace-cmd convert`` to version 6, strip, back to version 7 with
zstd): ``lisa-ext trace shrink TRACE -o OUT``.
"""

from __future__ import annotations

import bisect
import os
import struct
import subprocess
import tempfile
from pathlib import Path

from lisa_ext.errors import UserError
from lisa_ext.trace.tracedat import read_tracedat
from lisa_ext.trace.tracedat_format import (MAGIC, _OPT_BUFFER, _OPT_DONE, TraceDatError, _parse_event_systems,
                                            _parse_format_list, _Reader, open_tracedat)

__all__ = ["shrink_trace", "strip_kallsyms", "used_symbols"]


def used_symbols(path: str | os.PathLike) -> set[str]:
    """Names of the kallsyms entries the trace's symbol fields resolve to (the nearest symbol at
    or below each address, as trace-cmd resolves them)."""
    info, tables = open_tracedat(path), read_tracedat(path)
    symbols = info.kallsyms
    starts = [address for address, _ in symbols]
    names: set[str] = set()
    for fmt in info.events.values():
        if fmt.name in tables:
            for field in fmt.symbol_fields:
                for value in set(tables[fmt.name].column(field).to_pylist()):
                    i = bisect.bisect_right(starts, int(value)) - 1 if str(value).isdigit() else -1
                    if i >= 0:
                        names.add(symbols[i][1])
    return names


def _kept(text: str, keep: set[str]) -> bytes:
    lines = [line for line in text.splitlines() if len(line.split()) >= 3 and line.split()[2] in keep]
    return ("\n".join(lines) + "\n").encode() if lines else b""


def strip_kallsyms(src: str | os.PathLike, dst: str | os.PathLike, keep: set[str] | None = None) -> int:
    """Write ``src`` (trace.dat version 6) to ``dst`` with only the kallsyms lines of the symbols
    named in ``keep`` (default: :func:`used_symbols` of ``src``). Returns the bytes saved."""
    keep = used_symbols(src) if keep is None else keep
    data = open(src, "rb").read()
    path = os.fspath(src)
    r = _Reader(path, data, 0, what="file header")
    if data[:10] != MAGIC:
        r.fail("not a trace.dat file")
    r.pos = 10
    if r.cstr() != "6":
        r.fail("only version 6 files can be stripped (trace-cmd convert --file-version 6 --compression none)")
    r.take(2)
    page_size = r.u32()
    r.expect(b"header_page\0")
    r.take(r.u64())
    r.expect(b"header_event\0")
    r.take(r.u64())
    _parse_format_list(r, "ftrace", {}, [])
    _parse_event_systems(r, {}, [])
    k_start = r.pos
    kallsyms = r.take(r.u32()).decode("utf-8", "replace")
    k_end = r.pos
    new_kallsyms = _kept(kallsyms, keep)
    shift = ((k_end - k_start - 4 - len(new_kallsyms)) // page_size) * page_size  # the pages move back
    r.take(r.u32())  # printk formats
    r.take(r.u64())  # saved cmdlines
    cpus = r.u32()
    buffers: list[tuple[int, int]] = []  # (file position, value) of BUFFER options' table offsets
    tag = r.take(10)
    if tag == b"options  \0":
        while (opt := r.u16()) != _OPT_DONE:
            size = r.u32()
            if opt == _OPT_BUFFER:
                buffers.append((r.pos, struct.unpack_from("<Q", data, r.pos)[0]))
            r.take(size)
        tag = r.take(10)
    if tag != b"flyrecord\0":
        r.fail(f"expected 'flyrecord', found {tag!r}", r.pos - 10)
    # per-CPU (offset, size) of the top buffer and of each instance: the page data
    cpu_offsets = [table + 10 + 16 * cpu for table in [r.pos - 10] + [v for _, v in buffers] for cpu in range(cpus)]
    used = [p for p in cpu_offsets if struct.unpack_from("<QQ", data, p)[1]]
    pages = min([struct.unpack_from("<Q", data, p)[0] for p in used] or [len(data)])
    if pages % page_size or any(v >= pages for _, v in buffers) or any(
            struct.unpack_from("<Q", data, p)[0] < pages for p in used):
        raise TraceDatError(path, pages, "sections are not where version 6 puts them; not stripped")
    cut = (k_end - k_start) - (4 + len(new_kallsyms))  # bytes the header loses
    out = bytearray(data)
    for pos in used:
        struct.pack_into("<Q", out, pos, struct.unpack_from("<Q", data, pos)[0] - shift)
    for pos, value in buffers:  # instance tables sit in the header, before the pages
        struct.pack_into("<Q", out, pos, value - cut)
    header = bytes(out[:k_start]) + struct.pack("<I", len(new_kallsyms)) + new_kallsyms + bytes(out[k_end:pages])
    body = header.ljust(pages - shift, b"\0") + bytes(out[pages:])
    with open(dst, "wb") as f:
        f.write(body)
    return len(data) - len(body)


def shrink_trace(src: str | os.PathLike, dst: str | os.PathLike) -> tuple[int, int]:
    """``src`` (any version) as a version 7, zstd-compressed trace.dat at ``dst`` without the
    kallsyms its fields do not use; returns (bytes before, bytes after). Needs ``trace-cmd``."""
    with tempfile.TemporaryDirectory() as tmp:
        plain, stripped = Path(tmp, "v6.dat"), Path(tmp, "stripped.dat")
        for args in (["-i", os.fspath(src), "-o", str(plain), "--file-version", "6", "--compression", "none"],
                     None,
                     ["-i", str(stripped), "-o", os.fspath(dst), "--file-version", "7", "--compression", "zstd"]):
            if args is None:
                strip_kallsyms(plain, stripped)
                continue
            done = subprocess.run(["trace-cmd", "convert", *args], capture_output=True, text=True)
            if done.returncode != 0 or not Path(args[3]).is_file():
                raise UserError(f"{src}: trace-cmd convert {' '.join(args[4:])} failed: "
                                f"{(done.stderr or done.stdout).strip()[-300:]}")
    return os.path.getsize(src), os.path.getsize(dst)
