"""Turn a fuzzer's input bytes into a damaged copy of a real trace.dat.

The input selects a base trace (the shared traces, plus version 7 conversions
of one of them made with ``trace-cmd convert``) and then a list of patches:
each picks a region (file headers, a CPU's page data, page headers, anywhere),
a position in it and bytes to write there; the input may also truncate the
file. Inputs are small and stable, so crashers found by the fuzzer are kept
in tests/fuzz_corpus/ and replayed by tests/test_trace_dat_fuzz.py.

No fuzzing library is needed here: the harness (fuzz_tracedat.py, atheris) and
the regression test share this module.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Base", "bases", "mutate"]

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "traces" / "public" / "lisa"
CACHE = Path(os.environ.get("LISA_EXT_FUZZ_BASES", Path.home() / ".cache" / "lisa-ext" / "fuzz-bases"))

# (name, shared file, conversion) -- order matters: inputs refer to bases by index.
_BASES = [
    ("idle_v6", "trace_idle.dat", None),
    ("raw_v6", "raw_trace.dat", None),
    ("arm32_v6", "tests_trace_2019.dat", None),
    ("idle_v7_zstd", "trace_idle.dat", ("7", "zstd")),
    ("idle_v7_none", "trace_idle.dat", ("7", "none")),
    ("rtapp_v6", "example_rtapp_trace.dat", None),
]


@dataclass
class Base:
    name: str
    data: bytes
    regions: list[tuple[int, int]]  # [headers, cpu data...] as (start, end)
    page_size: int


def _region_map(path: Path) -> tuple[list[tuple[int, int]], int]:
    from lisa_ext.trace.tracedat import open_tracedat

    info = open_tracedat(path)
    streams = sorted((off, off + size) for _, off, size in info.streams)
    header_end = streams[0][0] if streams else os.path.getsize(path)
    return [(0, header_end)] + streams, info.page_size


def bases() -> list[Base]:
    """The base traces, converting the version 7 ones on first use."""
    out = []
    for name, shared, conversion in _BASES:
        src = SHARED / shared
        path = src
        if conversion is not None:
            version, compression = conversion
            CACHE.mkdir(parents=True, exist_ok=True)
            path = CACHE / f"{name}.dat"
            if not path.exists():
                tmp = path.with_suffix(".tmp")
                subprocess.run(["trace-cmd", "convert", "--file-version", version, "--compression",
                                compression, "-i", str(src), "-o", str(tmp)], check=True, capture_output=True)
                tmp.rename(path)
        regions, page_size = _region_map(path)
        out.append(Base(name, path.read_bytes(), regions, page_size))
    return out


class _Input:
    """Reads integers and bytes from the fuzzer's input, zeros once exhausted."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def left(self) -> int:
        return len(self.data) - self.pos

    def int(self, nbytes: int) -> int:
        chunk = self.data[self.pos : self.pos + nbytes]
        self.pos += nbytes
        return int.from_bytes(chunk.ljust(nbytes, b"\0"), "little")

    def bytes(self, n: int) -> bytes:
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk


def mutate(data: bytes, all_bases: list[Base]) -> tuple[str, bytes]:
    """(base name, damaged file contents) for one fuzzer input."""
    inp = _Input(data)
    base = all_bases[inp.int(1) % len(all_bases)]
    blob = bytearray(base.data)
    flags = inp.int(1)
    npatches = 1 + (flags >> 4)
    for _ in range(npatches):
        if inp.left() <= 0:
            break
        kind = inp.int(1) % 4
        pos = inp.int(4)
        length = 1 + inp.int(1) % 16
        payload = inp.bytes(length)
        if kind == 0:  # file headers, formats, options
            start, end = base.regions[0]
        elif kind == 1 and len(base.regions) > 1:  # a CPU's event data
            start, end = base.regions[1 + pos % (len(base.regions) - 1)]
            pos //= 7
        elif kind == 2 and len(base.regions) > 1:  # a page header: timestamp and commit
            start, end = base.regions[1 + pos % (len(base.regions) - 1)]
            npages = max(1, (end - start) // base.page_size)
            page = start + ((pos // 7) % npages) * base.page_size
            start, end = page, min(page + 24, len(blob))
            pos = pos >> 8
        else:
            start, end = 0, len(blob)
        if end <= start:
            continue
        at = start + pos % (end - start)
        blob[at : at + len(payload)] = payload
    if flags & 1:  # truncate
        blob = blob[: inp.int(4) % (len(blob) + 1)]
    return base.name, bytes(blob)
