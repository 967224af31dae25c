"""trace.dat versions 6 and 7 taken apart and written back, for building test inputs.

An independent reading of ``man 5 trace-cmd.dat.v6`` / ``trace-cmd.dat.v7``
(not lisa_ext's reader, which is what these files test): the parts of a file
(header_page, event formats, kallsyms, printk formats, cmdlines, options, the
per-CPU ring-buffer pages) are parsed into plain Python objects that a test or
the fuzzer edits, and written back with every length, offset and table made
consistent again. That is how a damaged input reaches deep code: a format with
a field at offset 2^32 - 4 is still found where the file says it is.

Writers also return the positions of the binary integers they wrote (the CPU
table, section and chunk headers, stream table), for mutations that damage
exactly those.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

__all__ = ["MAGIC", "V6", "V7", "Buffer", "Layout", "Packed", "Stream", "zstd_zeros", "compress", "decompress", "parse_v6", "parse_v7", "set_v7_meta",
           "v7_meta", "write_v6", "write_v7"]

MAGIC = b"\x17\x08\x44tracing"


@dataclass
class Layout:
    """Where a writer put things: (position, width in bytes, what) of binary integers, and page data."""

    ints: list[tuple[int, int, str]] = field(default_factory=list)
    pages: list[tuple[int, int]] = field(default_factory=list)  # (offset, size) of uncompressed page data

    def int(self, pos: int, width: int, what: str) -> None:
        self.ints.append((pos, width, what))


class _Cursor:
    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"truncated at {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def u(self, fmt: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def cstr(self) -> bytes:
        end = self.data.index(b"\0", self.pos)
        out = self.data[self.pos : end]
        self.pos = end + 1
        return out


def decompress(kind: bytes, data: bytes, size: int) -> bytes:
    if kind == b"zlib":
        return zlib.decompress(data)
    if kind == b"zstd":
        import pyarrow as pa

        return pa.decompress(data, size, codec="zstd", asbytes=True)
    return data


def zstd_zeros(size: int) -> bytes:
    """A zstd frame of ``size`` zero bytes made of RLE blocks (4 bytes per 128 KiB): what a
    decompression bomb looks like, built without allocating ``size`` bytes."""
    block = 128 << 10
    out = bytearray(struct.pack("<I", 0xFD2FB528) + bytes([0x00, (17 - 10) << 3]))  # no content size, 128 KiB window
    left = size
    while True:
        n = min(block, left)
        left -= n
        out += ((n << 3) | (1 << 1) | (left == 0)).to_bytes(3, "little") + b"\0"  # RLE block of n zeros
        if not left:
            return bytes(out)


def compress(kind: bytes, data: bytes) -> bytes:
    if kind == b"zlib":
        return zlib.compress(data, 6)
    if kind == b"zstd":
        import pyarrow as pa

        return pa.compress(data, codec="zstd", asbytes=True)
    return data


# --------------------------------------------------------------------------
# version 6


@dataclass
class V6:
    """The sections of a version 6 file, in file order."""

    long_size: int
    page_size: int
    header_page: bytes
    header_event: bytes
    ftrace: list[bytes]
    systems: list[tuple[bytes, list[bytes]]]
    kallsyms: bytes
    printk: bytes
    cmdlines: bytes
    cpus: int
    options: list[tuple[int, bytes]]
    clock: bytes | None
    data: list[bytes] = field(default_factory=list)  # per CPU, whole pages


def parse_v6(blob: bytes) -> V6:
    c = _Cursor(blob)
    if c.take(10) != MAGIC or c.cstr() != b"6" or c.take(1) != b"\0":
        raise ValueError("not a little-endian trace.dat version 6")
    long_size, page_size = c.take(1)[0], c.u("I")
    if c.take(12) != b"header_page\0":
        raise ValueError("no header_page")
    header_page = c.take(c.u("Q"))
    if c.take(13) != b"header_event\0":
        raise ValueError("no header_event")
    header_event = c.take(c.u("Q"))
    ftrace = [c.take(c.u("Q")) for _ in range(c.u("I"))]
    systems = []
    for _ in range(c.u("I")):
        name = c.cstr()
        systems.append((name, [c.take(c.u("Q")) for _ in range(c.u("I"))]))
    kallsyms, printk, cmdlines = c.take(c.u("I")), c.take(c.u("I")), c.take(c.u("Q"))
    cpus = c.u("I")
    options = []
    tag = c.take(10)
    if tag == b"options  \0":
        while (opt := c.u("H")) != 0:
            options.append((opt, c.take(c.u("I"))))
        tag = c.take(10)
    if tag != b"flyrecord\0":
        raise ValueError(f"expected flyrecord, found {tag!r}")
    table = [(c.u("Q"), c.u("Q")) for _ in range(cpus)]
    clock = c.take(c.u("Q")) if any(opt == 4 for opt, _ in options) else None
    return V6(long_size, page_size, header_page, header_event, ftrace, systems, kallsyms, printk, cmdlines,
              cpus, options, clock, [blob[off : off + size] for off, size in table])


def write_v6(v6: V6, layout: Layout | None = None) -> bytes:
    """The file; instances (BUFFER options) are left out. ``layout`` collects positions."""
    layout = layout if layout is not None else Layout()
    out = bytearray(MAGIC + b"6\0\0" + bytes([v6.long_size]))
    layout.int(len(out), 4, "page size")
    out += struct.pack("<I", v6.page_size)

    def sized(fmt: str, body: bytes, what: str) -> None:
        layout.int(len(out), struct.calcsize(fmt), what)
        out.extend(struct.pack("<" + fmt, len(body)) + body)

    out += b"header_page\0"
    sized("Q", v6.header_page, "header_page size")
    out += b"header_event\0"
    sized("Q", v6.header_event, "header_event size")
    layout.int(len(out), 4, "ftrace format count")
    out += struct.pack("<I", len(v6.ftrace))
    for text in v6.ftrace:
        sized("Q", text, "format size")
    layout.int(len(out), 4, "system count")
    out += struct.pack("<I", len(v6.systems))
    for name, formats in v6.systems:
        out += name + b"\0"
        layout.int(len(out), 4, "format count")
        out += struct.pack("<I", len(formats))
        for text in formats:
            sized("Q", text, "format size")
    sized("I", v6.kallsyms, "kallsyms size")
    sized("I", v6.printk, "printk size")
    sized("Q", v6.cmdlines, "cmdlines size")
    layout.int(len(out), 4, "cpu count")
    out += struct.pack("<I", v6.cpus)
    out += b"options  \0"
    for opt, body in v6.options:
        if opt != 3:  # no instances
            out += struct.pack("<H", opt)
            sized("I", body, "option size")
    out += struct.pack("<H", 0) + b"flyrecord\0"
    table_at = len(out)
    out += b"\0" * 16 * v6.cpus
    if v6.clock is not None:
        sized("Q", v6.clock, "clock size")
    for cpu in range(v6.cpus):
        pages = v6.data[cpu] if cpu < len(v6.data) else b""
        out += b"\0" * (-len(out) % v6.page_size)
        layout.int(table_at + 16 * cpu, 8, "cpu data offset")
        layout.int(table_at + 16 * cpu + 8, 8, "cpu data size")
        struct.pack_into("<QQ", out, table_at + 16 * cpu, len(out), len(pages))
        if pages:
            layout.pages.append((len(out), len(pages)))
        out += pages
    return bytes(out)


# --------------------------------------------------------------------------
# version 7

_OPT_DONE, _OPT_BUFFER = 0, 3


@dataclass
class Packed:
    """A chunk written as given: compressed bytes and the size its header declares."""

    data: bytes
    size: int


@dataclass
class Stream:
    cpu: int
    chunks: list  # decompressed chunks of whole pages (bytes; one of raw pages when uncompressed), or Packed


@dataclass
class Buffer:
    name: bytes
    clock: bytes
    page_size: int
    flyrecord: tuple[int, int, int]  # (section id, flags, description id) of its data section
    streams: list[Stream]


@dataclass
class V7:
    """A version 7 file: header fields, the metadata sections and the CPU streams, decompressed."""

    long_size: int
    page_size: int
    compression: bytes
    compressor_version: bytes
    sections: dict[int, tuple[int, int, bytes]]  # id -> (flags, description id, body or Packed body)
    options: list[tuple[int, int, list[tuple[int, bytes]]]]  # option sections: (flags, desc, items)
    buffers: list[Buffer]


def _options_items(body: bytes) -> list[tuple[int, bytes]]:
    items, pos = [], 0
    while pos + 6 <= len(body):
        opt, size = struct.unpack_from("<HI", body, pos)
        items.append((opt, body[pos + 6 : pos + 6 + size]))
        pos += 6 + size
        if opt == _OPT_DONE:
            break
    return items


def parse_v7(blob: bytes) -> V7:
    c = _Cursor(blob)
    if c.take(10) != MAGIC or c.cstr() != b"7" or c.take(1) != b"\0":
        raise ValueError("not a little-endian trace.dat version 7")
    long_size, page_size = c.take(1)[0], c.u("I")
    kind, version = c.cstr(), c.cstr()
    at = c.u("Q")

    def section(off: int) -> tuple[int, int, int, bytes]:
        sid, flags, desc, size = struct.unpack_from("<HHIQ", blob, off)
        if flags & 1:
            csize, usize = struct.unpack_from("<II", blob, off + 16)
            return sid, flags, desc, decompress(kind, blob[off + 24 : off + 24 + csize], usize)
        return sid, flags, desc, blob[off + 16 : off + 16 + size]

    sections, options, buffers = {}, [], []
    while at:
        _, flags, desc, body = section(at)
        items = _options_items(body)
        kept, at = [], 0
        for opt, b in items:
            if 16 <= opt <= 21 and len(b) >= 8:
                sid, sflags, sdesc, sbody = section(struct.unpack_from("<Q", b)[0])
                sections[opt] = (sflags, sdesc, sbody)
            elif opt == _OPT_BUFFER:
                cb = _Cursor(b)
                sid, sflags, sdesc, _ = struct.unpack_from("<HHIQ", blob, cb.u("Q"))
                name, clock, psize = cb.cstr(), cb.cstr(), cb.u("I")
                streams = []
                for _ in range(cb.u("I")):
                    cpu, off, size = cb.u("I"), cb.u("Q"), cb.u("Q")
                    if kind == b"none":
                        streams.append(Stream(cpu, [blob[off : off + size]] if size else []))
                        continue
                    sc = _Cursor(blob, off)
                    chunks = []
                    for _ in range(sc.u("I") if size else 0):
                        csize, usize = sc.u("I"), sc.u("I")
                        chunks.append(decompress(kind, sc.take(csize), usize))
                    streams.append(Stream(cpu, chunks))
                buffers.append(Buffer(name, clock, psize, (sid, sflags, sdesc), streams))
                continue
            elif opt == _OPT_DONE:
                at = struct.unpack_from("<Q", b)[0] if len(b) >= 8 else 0
                continue
            kept.append((opt, b))
        options.append((flags, desc, kept))
    return V7(long_size, page_size, kind, version, sections, options, buffers)


def write_v7(v7: V7, layout: Layout | None = None) -> bytes:
    """The file, laid out as trace-cmd does: header, metadata sections, option sections, each
    buffer's data section with its page-aligned streams, then the option section listing the
    buffers (and the sections) that ends the chain."""
    layout = layout if layout is not None else Layout()
    kind = v7.compression
    out = bytearray(MAGIC + b"7\0\0" + bytes([v7.long_size]))
    layout.int(len(out), 4, "page size")
    out += struct.pack("<I", v7.page_size) + kind + b"\0" + v7.compressor_version + b"\0"
    options_field = len(out)
    layout.int(options_field, 8, "options offset")
    out += b"\0" * 8

    def put_section(sid: int, flags: int, desc: int, body) -> int:
        at = len(out)
        if flags & 1 and kind != b"none":
            z, size = (body.data, body.size) if isinstance(body, Packed) else (compress(kind, body), len(body))
            layout.int(at + 8, 8, f"section {sid} size")
            layout.int(at + 16, 4, f"section {sid} compressed size")
            layout.int(at + 20, 4, f"section {sid} size")
            out.extend(struct.pack("<HHIQII", sid, flags, desc, 8 + len(z), len(z), size) + z)
        else:
            layout.int(at + 8, 8, f"section {sid} size")
            out.extend(struct.pack("<HHIQ", sid, flags & ~1, desc, len(body)) + body)
        return at

    section_at = {sid: put_section(sid, *v7.sections[sid]) for sid in sorted(v7.sections)}
    # every option section but the last, which lists the buffers and needs their offsets
    option_at = []
    for _, desc, items in v7.options[:-1]:
        option_at.append(len(out))
        out.extend(_options_section(items, section_at, desc))
    buffer_items = []
    for buf in v7.buffers:
        fly = len(out)
        sid, flags, desc = buf.flyrecord
        out += struct.pack("<HHIQ", sid, flags, desc, 0) + b"\0" * 8
        table = []
        for stream in buf.streams:
            out += b"\0" * (-len(out) % v7.page_size)
            at = len(out)
            if kind == b"none":
                pages = b"".join(stream.chunks)
                if pages:
                    layout.pages.append((at, len(pages)))
                out += pages
                table.append((stream.cpu, at, len(pages)))
                continue
            layout.int(at, 4, "chunk count")
            out += struct.pack("<I", len(stream.chunks))
            for chunk in stream.chunks:
                z, size = (chunk.data, chunk.size) if isinstance(chunk, Packed) else (compress(kind, chunk), len(chunk))
                layout.int(len(out), 4, "chunk compressed size")
                layout.int(len(out) + 4, 4, "chunk size")
                out += struct.pack("<II", len(z), size) + z
            table.append((stream.cpu, at, len(out) - at - 4))
        struct.pack_into("<Q", out, fly + 8, len(out) - fly - 16)
        body = struct.pack("<Q", fly) + buf.name + b"\0" + buf.clock + b"\0" + struct.pack("<II", buf.page_size,
                                                                                            len(table))
        for cpu, off, size in table:
            body += struct.pack("<IQQ", cpu, off, size)
        buffer_items.append((_OPT_BUFFER, body))
    _, last_desc, last_items = v7.options[-1] if v7.options else (0, 0, [])
    option_at.append(len(out))
    items = list(last_items) + buffer_items
    out.extend(_options_section(items, section_at, last_desc))
    # link the chain: each option section's DONE points at the next
    for k, at in enumerate(option_at[:-1]):
        done = _done_position(out, at)
        layout.int(done, 8, "next options offset")
        struct.pack_into("<Q", out, done, option_at[k + 1])
    struct.pack_into("<Q", out, options_field, option_at[0])
    return bytes(out)


def _options_section(items: list[tuple[int, bytes]], section_at: dict[int, int], desc: int) -> bytes:
    body = b""
    for opt, b in items:
        if 16 <= opt <= 21 and opt in section_at:
            b = struct.pack("<Q", section_at[opt])
        body += struct.pack("<HI", opt, len(b)) + b
    body += struct.pack("<HI", _OPT_DONE, 8) + b"\0" * 8
    # option sections are written uncompressed (as trace-cmd does)
    return struct.pack("<HHIQ", 0, 0, desc, len(body)) + body


def _done_position(out: bytearray, at: int) -> int:
    size = struct.unpack_from("<Q", out, at + 8)[0]
    return at + 16 + size - 8


# --------------------------------------------------------------------------
# version 7 metadata sections as the fields of version 6

_SEC_HEADER, _SEC_FTRACE, _SEC_EVENTS, _SEC_KALLSYMS, _SEC_PRINTK, _SEC_CMDLINES = range(16, 22)


def _format_list(c: _Cursor) -> list[bytes]:
    return [c.take(c.u("Q")) for _ in range(c.u("I"))]


def _pack_format_list(formats: list[bytes]) -> bytes:
    return struct.pack("<I", len(formats)) + b"".join(struct.pack("<Q", len(f)) + f for f in formats)


def v7_meta(v7: V7) -> dict:
    """The metadata sections as V6 field values (header_page, ftrace, systems, kallsyms, ...)."""
    out: dict = {}
    body = {sid: v7.sections[sid][2] for sid in v7.sections}
    if _SEC_HEADER in body:
        c = _Cursor(body[_SEC_HEADER])
        c.take(12)
        out["header_page"] = c.take(c.u("Q"))
        c.take(13)
        out["header_event"] = c.take(c.u("Q"))
    if _SEC_FTRACE in body:
        out["ftrace"] = _format_list(_Cursor(body[_SEC_FTRACE]))
    if _SEC_EVENTS in body:
        c = _Cursor(body[_SEC_EVENTS])
        out["systems"] = []
        for _ in range(c.u("I")):
            name = c.cstr()
            out["systems"].append((name, _format_list(c)))
    for sid, key, fmt in ((_SEC_KALLSYMS, "kallsyms", "I"), (_SEC_PRINTK, "printk", "I"),
                          (_SEC_CMDLINES, "cmdlines", "Q")):
        if sid in body:
            c = _Cursor(body[sid])
            out[key] = c.take(c.u(fmt))
    return out


def set_v7_meta(v7: V7, meta: dict) -> None:
    """Write V6-style field values back into the metadata sections of ``v7``."""
    bodies = {}
    if "header_page" in meta:
        bodies[_SEC_HEADER] = (b"header_page\0" + struct.pack("<Q", len(meta["header_page"])) + meta["header_page"]
                               + b"header_event\0" + struct.pack("<Q", len(meta["header_event"]))
                               + meta["header_event"])
    if "ftrace" in meta:
        bodies[_SEC_FTRACE] = _pack_format_list(meta["ftrace"])
    if "systems" in meta:
        bodies[_SEC_EVENTS] = struct.pack("<I", len(meta["systems"])) + b"".join(
            name + b"\0" + _pack_format_list(formats) for name, formats in meta["systems"])
    for sid, key, fmt in ((_SEC_KALLSYMS, "kallsyms", "I"), (_SEC_PRINTK, "printk", "I"),
                          (_SEC_CMDLINES, "cmdlines", "Q")):
        if key in meta:
            bodies[sid] = struct.pack("<" + fmt, len(meta[key])) + meta[key]
    for sid, body in bodies.items():
        if sid not in v7.sections:
            continue
        flags, desc, _ = v7.sections[sid]
        v7.sections[sid] = (flags, desc, body)
