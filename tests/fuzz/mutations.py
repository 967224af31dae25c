"""Turn a fuzzer's input bytes into a damaged copy of a real seed trace (structure-aware).

An input is a recipe read byte by byte (zeros once it is exhausted):

    <seed> <flags: high nibble = operations - 1, bit 0 = truncate at the end>
    then per operation: <op> <u32 a> <u16 b> <payload length> <payload>

Operations on a trace.dat work on the file taken apart (``tracedat_files``) and
written back consistently, so damage lands where the reader will look for it:

* the text of an event format, header_page, printk formats, cmdlines,
  kallsyms: replace the b-th number with an extreme one (2^32 - 4, 10^30, 5000
  digits, "-1", non-ASCII digits...), duplicate a line up to 20,000 times (the
  "thousands of overlapping fields" format), delete a line, swap a token for
  another type, bracket or keyword, overwrite bytes;
* the ring-buffer pages, before compression: overwrite bytes of a page
  header (timestamp, commit and its flags) or of the event data;
* a version 7 stream: drop, split or inflate a chunk (a chunk of zeros declaring
  up to 64 MiB decompresses for real), or drop a section;
* then the bytes written: any integer the writer recorded (CPU table, section
  and chunk sizes, stream table, options chain) set to an extreme value, bytes
  overwritten, inserted or deleted anywhere, the file cut short.

Text seeds get the same text operations on their lines, runs of up to 200,000
repeated characters, and, for zlib-compressed systrace, edits of the inflated
text and bodies that inflate to up to 64 MiB. Outputs stay below 1 MiB.

The harness (fuzz_traces.py) and the replay test (tests/test_trace_fuzz_corpus.py)
share this module: a recipe in tests/fuzz_corpus/ means the same file for both.
"""

from __future__ import annotations

import base64
import re
import sys
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tracedat_files as tf  # noqa: E402  (a sibling, not a package)
from seeds import SEEDS, seed_paths  # noqa: E402

__all__ = ["MAX_OUTPUT", "SeedData", "load_seeds", "mutate", "recipe"]

MAX_OUTPUT = (1 << 20) - 1

INTS = [0, 1, 2, 3, 4, 7, 8, 12, 15, 16, 24, 31, 32, 63, 64, 255, 256, 4080, 4095, 4096, 4097, 65535, 65536,
        1 << 20, 1 << 24, 1 << 27, (1 << 30) + 1, 1000 << 20, 2**31 - 1, 2**31, 2**32 - 16, 2**32 - 4, 2**32 - 1, 2**32,
        2**48, 2**63 - 1, 2**63, 2**64 - 4, 2**64 - 1]
NUMBERS = [str(v).encode() for v in INTS] + [
    b"-1", b"-2147483649", b"1" + b"0" * 30, b"9" * 5000, b"", b"0x10", b"1e9", "\u0663".encode(), "\u00b2".encode(),
    b"+5", b" 8", b"08", b"99999999999999999999",
]
TOKENS = [
    b"char", b"int", b"long", b"unsigned long", b"u64", b"u8", b"bool", b"void *", b"struct foo", b"const char *",
    b"__data_loc char[]", b"__rel_loc char[]", b"__data_loc int[]", b"__data_loc unsigned long[]",
    b"[]", b"[0]", b"[4294967295]", b"[0x10]", b"[8*8]", b"[65536*65536*65536]", b"[1+", b"[16]",
    b";", b":", b"\n", b"\t", b" ", b"\0", b"\xff\xfe", "\u00e9".encode(), b"%ps", b"%pS", b"%s", b"%*.*d", b"%llx",
    b"REC->", b"field:", b"offset:", b"size:", b"signed:", b"name:", b"ID:", b"format:", b"print fmt:", b"\"",
    b"(", b")", b"-", b"=", b"==>", b"[", b"]", b"\\n\\", b"\\", b"0x", b"tracing_mark_write:", b"bprint:",
    b"print:", b"sched_switch:", b"prev_state=", b"B|1|", b"<script class=\"trace-data\">", b"</script>",
]
DUPS = [1, 2, 7, 100, 1000, 5000, 20000]
RUNS = [1, 16, 1000, 10000, 200000]
INFLATE = [1, 2, 64, 4096, 16384]  # pages of zeros in an inflated chunk (up to 64 MiB)


@dataclass
class SeedData:
    name: str
    kind: str  # "tracedat" or "text"
    data: bytes


def load_seeds() -> list[SeedData]:
    """The seeds, in the fixed order recipes index."""
    paths = seed_paths()
    return [SeedData(s.name, s.kind, paths[s.name].read_bytes()) for s in SEEDS]


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


@dataclass
class _Op:
    kind: int
    a: int
    b: int
    payload: bytes

    def pick(self, seq):
        return seq[self.payload[0] % len(seq)] if self.payload else seq[0]


# --------------------------------------------------------------------------
# text edits (formats, cmdlines, ftrace text lines)


def _edit_text(text: bytes, op: _Op, room: int) -> bytes:
    """One edit of a text; ``room`` bounds how much it may grow."""
    kind = op.kind % 6
    if kind == 0:  # a number
        numbers = list(re.finditer(rb"\d+", text))
        if not numbers:
            return text
        m = numbers[op.b % len(numbers)]
        return text[: m.start()] + op.pick(NUMBERS) + text[m.end() :]
    lines = text.split(b"\n")
    k = op.b % len(lines)
    if kind == 1:  # duplicate a line
        times = min(op.pick(DUPS), max(0, room // (len(lines[k]) + 1)))
        return b"\n".join(lines[:k] + [lines[k]] * (times + 1) + lines[k + 1 :])
    if kind == 2:  # delete a line
        return b"\n".join(lines[:k] + lines[k + 1 :])
    if kind == 3:  # swap a token
        tokens = list(re.finditer(rb"[A-Za-z_][\w]*|\[[^\]\n]*\]|\S", text))
        if not tokens:
            return text
        m = tokens[op.b % len(tokens)]
        return text[: m.start()] + op.pick(TOKENS) + text[m.end() :]
    if kind == 4:  # a run of one character
        at = op.a % (len(text) + 1)
        run = min(op.pick(RUNS), room)
        char = op.payload[1:2] or b" "
        return text[:at] + char * run + text[at:]
    at = op.a % (len(text) + 1)  # overwrite bytes
    return text[:at] + op.payload[1:] + text[at + len(op.payload) - 1 :]


# --------------------------------------------------------------------------
# trace.dat


def _texts(meta) -> list[tuple]:
    """Paths of the editable texts of a file's metadata (V6 or a v7_meta dict)."""
    get = (lambda k: getattr(meta, k, None)) if not isinstance(meta, dict) else meta.get
    paths: list[tuple] = [(k,) for k in ("header_page", "kallsyms", "printk", "cmdlines") if get(k) is not None]
    paths += [("ftrace", i) for i in range(len(get("ftrace") or []))]
    for s, (_, formats) in enumerate(get("systems") or []):
        paths += [("systems", s, i) for i in range(len(formats))]
    return paths


def _get(meta, path):
    value = meta[path[0]] if isinstance(meta, dict) else getattr(meta, path[0])
    if path[0] == "ftrace":
        return value[path[1]]
    if path[0] == "systems":
        return value[path[1]][1][path[2]]
    return value


def _set(meta, path, text: bytes) -> None:
    if path[0] == "ftrace":
        (meta["ftrace"] if isinstance(meta, dict) else meta.ftrace)[path[1]] = text
    elif path[0] == "systems":
        systems = meta["systems"] if isinstance(meta, dict) else meta.systems
        systems[path[1]][1][path[2]] = text
    elif isinstance(meta, dict):
        meta[path[0]] = text
    else:
        setattr(meta, path[0], text)


def _copy_v6(v6: tf.V6) -> tf.V6:
    return replace(v6, ftrace=list(v6.ftrace), systems=[(n, list(f)) for n, f in v6.systems], data=list(v6.data),
                   options=list(v6.options))


def _edit_pages(chunks: list[bytes], op: _Op, page_size: int, header: bool) -> list[bytes]:
    """Overwrite bytes of the pages held by ``chunks``: in a page header, or anywhere."""
    total = sum(len(c) for c in chunks)
    if not total or not op.payload:
        return chunks
    at = (op.a % max(1, total // page_size)) * page_size + op.b % 24 if header else op.a % total
    out = []
    for chunk in chunks:
        if 0 <= at < len(chunk):
            chunk = chunk[:at] + op.payload[: len(chunk) - at] + chunk[at + len(op.payload) :]
        at -= len(chunk)
        out.append(chunk)
    return out


def _stream_op(v7: tf.V7, op: _Op, kind: int, header: bool) -> None:
    streams = [s for b in v7.buffers for s in b.streams]
    if not streams:
        return
    stream = streams[op.a % len(streams)]
    if kind == 0:  # pages
        stream.chunks = _edit_pages(stream.chunks, replace(op, a=op.a // 7), v7.page_size, header)
    elif kind == 1 and stream.chunks:  # drop a chunk
        del stream.chunks[op.b % len(stream.chunks)]
    elif kind == 2 and stream.chunks:  # split a chunk into pages
        k = op.b % len(stream.chunks)
        c = stream.chunks[k]
        stream.chunks[k : k + 1] = [c[i : i + v7.page_size] for i in range(0, len(c), v7.page_size)] or [b""]
    elif kind == 3 and v7.compression != b"none":  # a chunk of zeros that really inflates
        k = op.b % (len(stream.chunks) + 1)
        stream.chunks.insert(k, b"\0" * (op.pick(INFLATE) * v7.page_size))


# op.kind % 32: 0-11 edit an event format, 12-17 any header text, 18-21 pages and streams,
# 22-23 file structure, 24-31 the bytes written; bit 5 picks page headers over event data
def _mutate_tracedat(seed: SeedData, ops: list[_Op]) -> bytes:
    version7 = seed.data[10:12] == b"7\0"
    model = tf.parse_v7(seed.data) if version7 else _copy_v6(tf.parse_v6(seed.data))
    meta = tf.v7_meta(model) if version7 else model
    for op in ops:
        k, header = op.kind % 32, bool(op.kind & 32)
        if k < 18:
            texts = _texts(meta)
            formats = [p for p in texts if p[0] in ("ftrace", "systems")]
            choices = formats if k < 12 and formats else texts
            path = choices[op.a % len(choices)]
            _set(meta, path, _edit_text(_get(meta, path), replace(op, kind=k % 6), MAX_OUTPUT // 2))
        elif k < 22:
            if version7:
                _stream_op(model, op, k - 18, header)
            elif model.data:
                cpu = op.a % len(model.data)
                model.data[cpu] = _edit_pages([model.data[cpu]], replace(op, a=op.a // 7), model.page_size,
                                              header)[0]
        elif k < 24:
            if version7 and model.sections and k == 22:  # a metadata section goes missing
                del model.sections[sorted(model.sections)[op.b % len(model.sections)]]
            elif version7:
                _stream_op(model, op, 3, header)
            elif k == 22:
                model.cpus = INTS[op.b % len(INTS)] % 4097
            else:
                model.options.append((op.b % 12, op.payload))
    layout = tf.Layout()
    if version7:
        tf.set_v7_meta(model, meta)
        blob = bytearray(tf.write_v7(model, layout))
    else:
        model.data = model.data[: model.cpus] + [b""] * (model.cpus - len(model.data))
        blob = bytearray(tf.write_v6(model, layout))
    return _raw_ops(blob, [op for op in ops if op.kind % 32 >= 24], layout)


def _raw_ops(blob: bytearray, ops: list[_Op], layout: tf.Layout | None) -> bytes:
    for op in ops:
        kind = op.kind % 4
        if not blob:
            break
        if kind == 0:  # an integer the writer recorded
            if layout is not None and layout.ints:
                pos, width, _ = layout.ints[op.a % len(layout.ints)]
                value = INTS[op.b % len(INTS)] & ((1 << (8 * width)) - 1)
                blob[pos : pos + width] = value.to_bytes(width, "little")
        elif kind == 1:  # overwrite
            at = op.a % len(blob)
            blob[at : at + len(op.payload)] = op.payload
        elif kind == 2:  # insert
            at = op.a % (len(blob) + 1)
            blob[at:at] = op.payload
        else:  # delete
            at = op.a % len(blob)
            del blob[at : at + 1 + op.b % 256]
    return bytes(blob)


# --------------------------------------------------------------------------
# text and systrace

_OPEN = b'<script class="trace-data" type="application/text">'


def _zlib_body(data: bytes) -> tuple[int, int] | None:
    """(start, end) of a zlib+base64 trace-data body (seeds.py writes them on lines of their own)."""
    start = data.find(_OPEN)
    end = data.find(b"</script>", start)
    if start < 0 or end < 0:
        return None
    start += len(_OPEN)
    return (start, end) if re.fullmatch(rb"\s*[A-Za-z0-9+/=]{64,}\s*", data[start:end]) else None


def _mutate_text(seed: SeedData, ops: list[_Op]) -> bytes:
    data = seed.data
    body = _zlib_body(data)
    text = zlib.decompress(base64.b64decode(data[body[0] : body[1]])) if body else data
    inflate = 1
    raw = []
    for op in ops:  # op.kind % 32: 0-19 edit the text, 20-23 inflate a zlib body, 24-31 the bytes
        if op.kind % 32 >= 24:
            raw.append(op)
        elif body is not None and op.kind % 32 >= 20:
            inflate = op.pick(DUPS)
        else:
            text = _edit_text(text, replace(op, kind=op.kind % 6), MAX_OUTPUT - len(text))
    if body is not None:
        times = max(1, min(inflate, (64 << 20) // max(1, len(text))))
        packer = zlib.compressobj(6)
        packed = b"".join(packer.compress(text) for _ in range(times)) + packer.flush()
        text = data[: body[0]] + b"\n" + base64.b64encode(packed) + b"\n  " + data[body[1] :]
    return _raw_ops(bytearray(text), raw, None)


def mutate(data: bytes, seeds: list[SeedData]) -> tuple[str, bytes]:
    """(seed name, damaged file contents) for one fuzzer input."""
    inp = _Input(data)
    seed = seeds[inp.int(1) % len(seeds)]
    flags = inp.int(1)
    ops = []
    for _ in range(1 + (flags >> 4)):
        if inp.left() <= 0:
            break
        kind, a, b = inp.int(1), inp.int(4), inp.int(2)
        ops.append(_Op(kind, a, b, inp.bytes(inp.int(1) % 17)))
    blob = _mutate_tracedat(seed, ops) if seed.kind == "tracedat" else _mutate_text(seed, ops)
    if flags & 1:
        blob = blob[: inp.int(4) % (len(blob) + 1)]
    return seed.name, blob[:MAX_OUTPUT]


def recipe(seed: str, ops: list[tuple[int, int, int, bytes]], truncate: int | None = None) -> bytes:
    """The input that applies ``ops`` ((op, a, b, payload) each, as read by :func:`mutate`) to ``seed``."""
    if not 1 <= len(ops) <= 16 or any(len(payload) > 16 for *_, payload in ops):
        raise ValueError("1 to 16 operations, payloads of at most 16 bytes")
    out = bytes([[s.name for s in SEEDS].index(seed), (len(ops) - 1) << 4 | (truncate is not None)])
    for kind, a, b, payload in ops:
        out += bytes([kind]) + a.to_bytes(4, "little") + b.to_bytes(2, "little") + bytes([len(payload)]) + payload
    if truncate is not None:
        out += truncate.to_bytes(4, "little")
    return out
