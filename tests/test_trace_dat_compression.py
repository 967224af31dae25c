"""Compressed trace data: zlib as well as zstd chunks decode to the same tables.

trace-cmd on Debian bookworm writes only zstd, so the zlib case is built here:
the CPU pages of a real (uncompressed) trace are re-packed in the version 7
chunk layout (<u32 count>, then <u32 compressed size><u32 size><data> per
chunk) with Python's zlib module, and decoded with the file's
own formats. Expected tables come from decoding the original pages.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zlib
from pathlib import Path

import pytest

from lisa_ext.trace import _tracedat
from lisa_ext.trace.tracedat import TraceDatReader

REPO = Path(__file__).resolve().parents[1]
RTAPP = REPO.parent / "shared" / "traces" / "public" / "lisa" / "example_rtapp_trace.dat"


@pytest.fixture(autouse=True)
def _need_trace():
    if not RTAPP.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"required in CI: {RTAPP}")
        pytest.skip(f"{RTAPP} not found")


def _repack(reader: TraceDatReader, out: Path, pages_per_chunk: int) -> list[tuple[int, int, int]]:
    info = reader.info
    data = RTAPP.read_bytes()
    streams = []
    with open(out, "wb") as f:
        f.write(b"\0" * 64)  # nothing reads the head of this file: offsets come from the streams
        for cpu, off, size in info.streams:
            pages = data[off : off + size]
            step = info.page_size * pages_per_chunk
            chunks = [pages[k : k + step] for k in range(0, len(pages), step)]
            start = f.tell()
            f.write(struct.pack("<I", len(chunks)))
            for chunk in chunks:
                packed = zlib.compress(chunk)
                f.write(struct.pack("<II", len(packed), len(chunk)) + packed)
            streams.append((cpu, start, f.tell() - start))
    return streams


@pytest.mark.parametrize("pages_per_chunk", [1, 7])
def test_zlib_chunks_decode_like_the_uncompressed_pages(tmp_path, pages_per_chunk):
    plain = TraceDatReader(RTAPP)
    expected = plain.read()
    packed = TraceDatReader(RTAPP)
    path = tmp_path / "zlib_chunks.dat"
    streams = _repack(packed, path, pages_per_chunk)
    packed.info = dataclasses.replace(packed.info, path=str(path), streams=streams, compression="zlib")
    got = packed.read()
    assert got.meta["warnings"] == [] and got.meta["compression"] == "zlib"
    assert got.meta["event_counts"] == expected.meta["event_counts"]
    for name, table in expected.tables.items():
        assert got[name].equals(table), name


def test_damaged_zlib_chunk_is_a_warning(tmp_path):
    reader = TraceDatReader(RTAPP)
    path = tmp_path / "zlib_chunks.dat"
    streams = _repack(reader, path, 4)
    cpu, start, size = max(streams, key=lambda s: s[2])
    blob = bytearray(path.read_bytes())
    first_len = struct.unpack_from("<I", blob, start + 4)[0]
    second = start + 4 + 8 + first_len
    blob[second + 8 : second + 24] = b"\xff" * 16  # inside the second chunk's deflate data
    path.write_bytes(bytes(blob))
    reader.info = dataclasses.replace(reader.info, path=str(path), streams=streams, compression="zlib")
    tables = reader.read()
    assert any(f"cpu {cpu}: zlib chunk at offset {second} does not decompress" in w
               for w in tables.meta["warnings"]), tables.meta["warnings"]


def test_section_decompression_helper():
    payload = b"header_page\0" + bytes(range(256)) * 40
    assert _tracedat.decompress(1, zlib.compress(payload), len(payload)) == payload
    with pytest.raises(ValueError, match="cannot decompress"):
        _tracedat.decompress(1, b"not zlib at all", 100)
    with pytest.raises(ValueError, match="cannot decompress"):
        _tracedat.decompress(2, b"not zstd either", 100)
