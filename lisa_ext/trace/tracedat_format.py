"""trace.dat file headers: versions 6 and 7, event formats, printk formats, cmdlines.

Mirrors the layout documented in ``man 5 trace-cmd.dat.v6`` / ``trace-cmd.dat.v7``
(trace-cmd's lib/trace-cmd/trace-input.c: initial format, options, v7 sections
and their compression, the flyrecord CPU tables) and the tracefs event
``format`` files as parsed by libtraceevent's event-parse.c. The event data
itself is decoded by :mod:`lisa_ext.trace.tracedat`.
"""

from __future__ import annotations

import functools
import mmap
import os
import re
import struct
from dataclasses import dataclass, field

from lisa_ext.errors import UserError

__all__ = [
    "MAGIC",
    "TraceDatError",
    "TraceDatFile",
    "EventFormat",
    "FormatField",
    "open_tracedat",
    "parse_format",
    "header_page_layout",
    "parse_cpustats",
    "native",
]

MAGIC = b"\x17\x08\x44tracing"

COMPRESSION_IDS = {"none": 0, "zlib": 1, "zstd": 2}

# trace.dat v7 section ids and option ids (trace-cmd.dat.v7(5)).
_SEC_OPTIONS = 0
_SEC_HEADER_INFO, _SEC_FTRACE, _SEC_EVENTS, _SEC_KALLSYMS, _SEC_PRINTK, _SEC_CMDLINES = range(16, 22)
_OPT_DONE, _OPT_CPUSTAT, _OPT_BUFFER, _OPT_TRACECLOCK, _OPT_CPUCOUNT = 0, 2, 3, 4, 8

#: The native decoder interface these modules speak (``_tracedat.ABI_VERSION``).
NATIVE_ABI = 2


def native():
    """The compiled decoder, or a clear error telling how to build it."""
    try:
        # deferred: a missing compiled decoder becomes the clear error below, not an ImportError at import
        from lisa_ext.trace import _tracedat
    except ImportError as exc:
        raise UserError(
            f"the native trace.dat decoder is not built ({exc}); run `make setup` "
            "or `.venv/bin/pip install -e .` (needs libzstd-dev, zlib1g-dev and a C compiler)"
        ) from None
    if getattr(_tracedat, "ABI_VERSION", None) != NATIVE_ABI:
        raise UserError(
            f"the native trace.dat decoder ({_tracedat.__file__}) is out of date; "
            "rebuild it with `.venv/bin/pip install -e .`"
        )
    return _tracedat



class TraceDatError(UserError):
    """A trace.dat file that cannot be read: names the file, the offset and the problem."""

    def __init__(self, path: str | os.PathLike, offset: int | None, problem: str):
        self.path = os.fspath(path)
        self.offset = offset
        self.problem = problem
        where = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"{self.path}{where}: {problem}")


@dataclass
class FormatField:
    """One ``field:`` line of an event format file."""

    name: str
    type: str  # declared type without the name, e.g. "unsigned long", "char[16]", "__data_loc char[]"
    offset: int
    size: int
    signed: bool
    array_len: int | None = None  # N of a fixed "[N]", 0 for a flexible "[]", None if not an array
    dynamic: bool = False  # __data_loc / __rel_loc
    relative: bool = False  # __rel_loc

    @property
    def base_type(self) -> str:
        t = re.sub(r"\[.*?\]", "", self.type)
        t = t.replace("__data_loc", "").replace("__rel_loc", "")
        return " ".join(w for w in t.split() if w not in ("const", "volatile", "struct"))

    @property
    def is_char(self) -> bool:
        return self.base_type in ("char", "signed char")


@dataclass
class EventFormat:
    """An event's format: id, system, name and fields (common ones included).

    Files carry the formats of every event the kernel had (a thousand or more);
    the fields are parsed from ``text`` only for events that are decoded.
    """

    id: int
    system: str
    name: str
    text: str = field(default="", repr=False)

    @functools.cached_property
    def fields(self) -> list[FormatField]:
        return _parse_fields(self.text)

    @property
    def print_fmt(self) -> str:
        pm = re.search(r"^print fmt:\s*(.*)$", self.text, re.M)
        return pm[1] if pm else ""

    def field(self, name: str) -> FormatField | None:
        return next((f for f in self.fields if f.name == name), None)

    @functools.cached_property
    def symbol_fields(self) -> dict[str, str]:
        """Fields the print fmt shows as kernel symbols: name -> ``"s"``, ``"S"``, ``"f"`` or ``"F"``.

        Only plain ``REC->field`` arguments (casts allowed) of a ``%ps``,
        ``%pS``, ``%pf`` or ``%pF`` conversion count, e.g. ``function`` of
        ``"work struct %p: function %ps", REC->work, REC->function``.
        """
        return symbol_conversions(self.print_fmt)


@dataclass
class TraceDatFile:
    """What the headers of a trace.dat file say; the event data is decoded lazily."""

    path: str
    version: int
    long_size: int
    page_size: int
    compression: str
    header_page: str
    events: dict[int, EventFormat]
    printk: dict[int, str]
    kallsyms_text: str
    cmdlines: dict[int, str]
    clock: str
    cpus: int
    streams: list[tuple[int, int, int]] = field(default_factory=list)  # (cpu, offset, size)
    buffers: list[str] = field(default_factory=list)
    cpustats: list[dict] = field(default_factory=list)
    """The kernel's ring-buffer statistics trace-cmd saved at the end of recording, one
    dict per buffer and CPU: ``buffer`` ("" for the top level), ``cpu`` and the integer
    counters of ``per_cpu/cpuN/stats`` (``overrun``, ``dropped_events``, ``entries``, ...)."""

    @functools.cached_property
    def kallsyms(self) -> list[tuple[int, str]]:
        """(address, name) sorted by address; parsed on first use (it is large)."""
        return _parse_kallsyms(self.kallsyms_text)


# libtraceevent's conversions: flags, width, precision, length, then the type;
# ``%p`` takes the kernel's extension letter (``%ps``, ``%pS``, ``%pK``, ...)
_CONVERSION = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\*|\d*)(?:\.(?P<prec>\*|\d*))?"
                         r"(?:hh|h|ll|l|z|j|t|L)?(?P<type>p[a-zA-Z]?|[a-zA-Z%])")
_REC_FIELD = re.compile(r"^(?:\([^()]*\)\s*)*REC->(\w+)$")


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated arguments of a print fmt (after the format string)."""
    args, depth, start, quoted = [], 0, 0, False
    for i, ch in enumerate(text):
        if ch == '"' and (i == 0 or text[i - 1] != "\\"):
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    args.append(text[start:].strip())
    return args


def symbol_conversions(print_fmt: str) -> dict[str, str]:
    """``{field: letter}`` for the ``REC->field`` arguments printed by ``%p[sSfF]``."""
    m = re.match(r'^\s*((?:"(?:[^"\\]|\\.)*"\s*)+)(.*)$', print_fmt, re.S)
    if m is None:
        return {}
    fmt = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m[1]))
    rest = m[2].strip()
    args = _split_args(rest[1:]) if rest.startswith(",") else []
    out: dict[str, str] = {}
    index = 0
    for conv in _CONVERSION.finditer(fmt):
        kind = conv["type"]
        if kind == "%":
            continue
        index += (conv["width"] == "*") + (conv["prec"] == "*")  # '*' consumes an argument
        if index >= len(args):
            break
        if kind in ("ps", "pS", "pf", "pF"):
            rec = _REC_FIELD.match(args[index])
            if rec:
                out[rec[1]] = kind[1]
        index += 1
    return out


# --------------------------------------------------------------------------
# Header parsing


class _Reader:
    """Bounds-checked little-endian reads over a byte buffer, with file offsets in errors."""

    def __init__(self, path: str, data, pos: int = 0, base: int = 0, what: str = "header"):
        self.path, self.data, self.pos, self.base, self.what = path, data, pos, base, what

    def fail(self, problem: str, at: int | None = None):
        off = self.base + (self.pos if at is None else at)
        raise TraceDatError(self.path, off, f"{self.what}: {problem}")

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            self.fail(f"truncated: needs {n} bytes, only {max(0, len(self.data) - self.pos)} left")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(b)

    def u16(self) -> int:
        return struct.unpack("<H", self.take(2))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def cstr(self) -> str:
        end = self.data.find(b"\0", self.pos) if hasattr(self.data, "find") else -1
        if end < 0:
            self.fail("unterminated string")
        s = bytes(self.data[self.pos : end]).decode("utf-8", "replace")
        self.pos = end + 1
        return s

    def expect(self, tag: bytes):
        got = self.take(len(tag))
        if got != tag:
            self.fail(f"expected {tag!r}, found {got!r}", self.pos - len(tag))


_FIELD_RE = re.compile(
    r"field:\s*(?P<decl>[^;]*);\s*offset:\s*(?P<offset>\d+);\s*size:\s*(?P<size>\d+);(?:\s*signed:\s*(?P<signed>-?\d+);)?"
)


_DECL_RE = re.compile(r"(?P<name>[A-Za-z_]\w*)\s*(?P<arr>\[[^\]]*\])?\s*$")


def _array_length(expr: str) -> int:
    """N of "[N]": 0 for "[]", -1 when it is not a plain (sum of) numbers."""
    expr = expr.strip()
    if not expr:
        return 0
    if not re.fullmatch(r"\d+(\s*[+*]\s*\d+)*", expr):
        return -1
    total = 0
    for term in expr.split("+"):
        product = 1
        for factor in term.split("*"):
            product *= int(factor)
        total += product
    return total


def parse_format(text: str, system: str | None = None) -> EventFormat:
    """Parse one tracefs event ``format`` file (fields on first use)."""
    name = re.search(r"^name:\s*(\S+)", text, re.M)
    ident = re.search(r"^ID:\s*(\d+)", text, re.M)
    if not name or not ident:
        raise ValueError("no name/ID line")
    if system is None:
        sysm = re.search(r"^system:\s*(\S+)", text, re.M)
        system = sysm[1] if sysm else ""
    return EventFormat(id=int(ident[1]), system=system, name=name[1], text=text)


def _parse_fields(text: str) -> list[FormatField]:
    fields = []
    for m in _FIELD_RE.finditer(text):
        decl = " ".join(m["decl"].split())
        dynamic = decl.startswith(("__data_loc", "__rel_loc"))
        relative = decl.startswith("__rel_loc")
        dm = _DECL_RE.search(decl)
        if not dm:
            continue
        ftype = decl[: dm.start()].strip()
        array_len = None
        if dm["arr"] is not None:
            array_len = _array_length(dm["arr"][1:-1])
            ftype += dm["arr"]
        elif ftype.endswith("]"):  # "__data_loc char[] name"
            array_len = 0
        size = int(m["size"])
        if size == 0 and array_len is None:  # old kernels: "char buf; size:0" is a flexible array
            array_len = 0
        fields.append(
            FormatField(
                name=dm["name"],
                type=ftype,
                offset=int(m["offset"]),
                size=size,
                signed=bool(int(m["signed"])) if m["signed"] is not None else False,
                array_len=array_len,
                dynamic=dynamic,
                relative=relative,
            )
        )
    return fields


def _parse_format_list(r: _Reader, system: str, out: dict[int, EventFormat], warnings: list[str]):
    count = r.u32()
    for _ in range(count):
        size = r.u64()
        at = r.pos
        text = r.take(size).decode("utf-8", "replace")
        try:
            fmt = parse_format(text, system)
        except ValueError as exc:
            warnings.append(f"{r.path}: offset {r.base + at}: unreadable event format skipped ({exc})")
            continue
        out[fmt.id] = fmt


def _parse_event_systems(r: _Reader, out: dict[int, EventFormat], warnings: list[str]):
    nsys = r.u32()
    for _ in range(nsys):
        system = r.cstr()
        _parse_format_list(r, system, out, warnings)


def _parse_printk(text: str) -> dict[int, str]:
    formats = {}
    for line in text.splitlines():
        addr, sep, fmt = line.partition(" : ")
        if not sep:
            continue
        try:
            formats[int(addr, 16)] = fmt
        except ValueError:
            continue
    return formats


def _parse_kallsyms(text: str) -> list[tuple[int, str]]:
    syms = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            try:
                syms.append((int(parts[0], 16), parts[2]))
            except ValueError:
                continue
    syms.sort()
    return syms


def _parse_cmdlines(text: str) -> dict[int, str]:
    comms: dict[int, str] = {}
    for line in text.splitlines():
        pid, _, comm = line.strip().partition(" ")
        if pid.isdigit() and comm:
            comms.setdefault(int(pid), comm)
    return comms


_CPUSTAT_BUFFER = re.compile(r"^\s*Buffer:\s*(\S*)\s*$")
_CPUSTAT_LINE = re.compile(r"^([a-z][a-z ]*[a-z]):\s*(\d+)\s*$", re.IGNORECASE)


def parse_cpustats(bodies: list[bytes]) -> list[dict]:
    """The CPUSTAT options in file order: a ``Buffer: NAME`` body starts an instance's block.

    Each per-CPU body is the text of tracefs ``per_cpu/cpuN/stats`` headed by ``CPU: N``
    (trace-cmd's record.c); counters become ints with spaces turned into underscores.
    """
    stats, buffer = [], ""
    for body in bodies:
        text = body.split(b"\0", 1)[0].decode("utf-8", "replace")
        m = _CPUSTAT_BUFFER.match(text.strip())
        if m:
            buffer = m[1]
            continue
        entry: dict = {"buffer": buffer}
        for line in text.splitlines():
            c = _CPUSTAT_LINE.match(line.strip())
            if c:
                entry[c[1].lower().replace(" ", "_")] = int(c[2])
        if "cpu" in entry:
            stats.append(entry)
    return stats


def header_page_layout(path: str, text: str, long_size: int) -> tuple[int, int, int]:
    """(commit offset, commit size, data offset) from the header_page format."""
    commit = re.search(r"field:\s*local_t commit;\s*offset:(\d+);\s*size:(\d+);", text)
    data = re.search(r"field:\s*char data;\s*offset:(\d+);", text)
    if commit and data:
        return int(commit[1]), int(commit[2]), int(data[1])
    if text.strip():
        raise TraceDatError(path, None, "header_page format lacks the commit/data fields")
    return 8, long_size, 8 + long_size


def _read_v6(path: str, mm, r: _Reader, long_size: int, page_size: int, warnings: list[str]) -> dict:
    r.expect(b"header_page\0")
    header_page = r.take(r.u64()).decode("utf-8", "replace")
    r.expect(b"header_event\0")
    r.take(r.u64())
    events: dict[int, EventFormat] = {}
    r.what = "ftrace event formats"
    _parse_format_list(r, "ftrace", events, warnings)
    r.what = "event formats"
    _parse_event_systems(r, events, warnings)
    r.what = "kallsyms"
    kallsyms = r.take(r.u32()).decode("utf-8", "replace")
    r.what = "printk formats"
    printk = r.take(r.u32()).decode("utf-8", "replace")
    r.what = "saved cmdlines"
    cmdlines = r.take(r.u64()).decode("utf-8", "replace")
    r.what = "cpu data header"
    cpus = r.u32()
    if cpus > 4096:
        r.fail(f"implausible CPU count {cpus}", r.pos - 4)
    tag = r.take(10)
    has_clock = False
    instance_offsets: list[tuple[str, int]] = []
    cpustat_bodies: list[bytes] = []
    if tag == b"options  \0":
        r.what = "options"
        while True:
            opt = r.u16()
            if opt == _OPT_DONE:
                break
            data = r.take(r.u32())
            if opt == _OPT_TRACECLOCK:
                has_clock = True
            elif opt == _OPT_CPUSTAT:
                cpustat_bodies.append(data)
            elif opt == _OPT_BUFFER and len(data) >= 8:
                off = struct.unpack_from("<Q", data)[0]
                name = data[8:].split(b"\0", 1)[0].decode("utf-8", "replace")
                instance_offsets.append((name, off))
        tag = r.take(10)
    if tag == b"latency  \0":
        r.fail("latency-format trace (text, no binary events) is not supported; record with `trace-cmd record`")
    if tag != b"flyrecord\0":
        r.fail(f"expected 'flyrecord', found {tag!r}", r.pos - 10)
    r.what = "flyrecord cpu table"
    streams = []
    for cpu in range(cpus):
        off, size = r.u64(), r.u64()
        if size:
            streams.append((cpu, off, size))
    clock = "unknown"  # not recorded (trace-cmd then assumes "local")
    if has_clock:
        try:
            text = r.take(r.u64()).decode("utf-8", "replace")
            m = re.search(r"\[(\S+)\]", text)
            clock = m[1] if m else clock
        except TraceDatError:
            warnings.append(f"{path}: unreadable trace clock section; clock reported as 'unknown'")
    buffers = [""]
    for name, off in instance_offsets:
        ir = _Reader(path, mm, off, what=f"instance {name!r} cpu table")
        ir.expect(b"flyrecord\0")
        for cpu in range(cpus):
            o, size = ir.u64(), ir.u64()
            if size:
                streams.append((cpu, o, size))
        buffers.append(name)
    return dict(
        header_page=header_page,
        events=events,
        kallsyms=kallsyms,
        printk=printk,
        cmdlines=cmdlines,
        cpus=cpus,
        streams=streams,
        clock=clock,
        compression="none",
        buffers=buffers,
        cpustats=parse_cpustats(cpustat_bodies),
    )


def _read_section(path: str, mm, offset: int, compression: str, want: int | None = None) -> tuple[int, bytes]:
    r = _Reader(path, mm, offset, what="section header")
    sid = r.u16()
    flags = r.u16()
    r.u32()  # description string id
    size = r.u64()
    if want is not None and sid != want:
        r.fail(f"expected section {want}, found section {sid}", offset)
    r.what = f"section {sid}"
    if flags & 1:
        if compression == "none":
            r.fail("section is marked compressed but the file has no compression")
        csize, usize = r.u32(), r.u32()
        data = r.take(csize)
        try:
            return sid, native().decompress(COMPRESSION_IDS[compression], data, usize)
        except ValueError as exc:
            r.fail(f"compressed section does not decompress ({exc})", offset)
    return sid, r.take(size)


def _read_v7(path: str, mm, r: _Reader, long_size: int, page_size: int, warnings: list[str]) -> dict:
    r.what = "compression header"
    compression = r.cstr()
    r.cstr()  # compressor version
    if compression not in COMPRESSION_IDS:
        r.fail(f"unsupported compression {compression!r} (supported: zstd, zlib, none)")
    options_at = r.u64()
    sections: dict[int, int] = {}
    buffers: list[tuple[str, str, list[tuple[int, int, int]]]] = []
    clock_text = ""
    cpustat_bodies: list[bytes] = []
    cpucount = None
    seen = set()
    while options_at:
        if options_at in seen:
            raise TraceDatError(path, options_at, "options sections form a loop")
        if options_at >= len(mm):
            raise TraceDatError(
                path, options_at,
                f"options section lies beyond the end of the file ({len(mm)} bytes): the file is truncated, "
                "and version 7 keeps the index of the CPU data there, so no event can be located",
            )
        seen.add(options_at)
        _, data = _read_section(path, mm, options_at, compression, _SEC_OPTIONS)
        o = _Reader(path, data, 0, base=options_at, what="options section")
        next_at = 0
        while o.pos < len(data):
            opt = o.u16()
            body = o.take(o.u32())
            if opt == _OPT_DONE:
                next_at = struct.unpack_from("<Q", body)[0] if len(body) >= 8 else 0
                break
            if 16 <= opt <= 21 and len(body) >= 8:
                sections[opt] = struct.unpack_from("<Q", body)[0]
            elif opt == _OPT_TRACECLOCK:
                clock_text = body.decode("utf-8", "replace")
            elif opt == _OPT_CPUSTAT:
                cpustat_bodies.append(body)
            elif opt == _OPT_CPUCOUNT and len(body) >= 4:
                cpucount = struct.unpack_from("<I", body)[0]
            elif opt == _OPT_BUFFER:
                b = _Reader(path, body, 0, base=options_at, what="BUFFER option")
                b.u64()  # the section offset; per-CPU offsets below are absolute
                name, clock = b.cstr(), b.cstr()
                b.u32()  # page size
                ncpu = b.u32()
                streams = []
                for _ in range(ncpu):
                    cpu, off, size = b.u32(), b.u64(), b.u64()
                    if size:
                        # compressed data: the size leaves out the leading u32 chunk count
                        streams.append((cpu, off, size + 4 if compression != "none" else size))
                buffers.append((name, clock, streams))
        options_at = next_at

    def section(sid: int, what: str) -> _Reader | None:
        if sid not in sections:
            return None
        _, data = _read_section(path, mm, sections[sid], compression, sid)
        return _Reader(path, data, 0, base=sections[sid], what=what)

    header_page = ""
    hr = section(_SEC_HEADER_INFO, "header info")
    if hr:
        hr.expect(b"header_page\0")
        header_page = hr.take(hr.u64()).decode("utf-8", "replace")
    events: dict[int, EventFormat] = {}
    fr = section(_SEC_FTRACE, "ftrace event formats")
    if fr:
        _parse_format_list(fr, "ftrace", events, warnings)
    er = section(_SEC_EVENTS, "event formats")
    if er:
        _parse_event_systems(er, events, warnings)
    kr = section(_SEC_KALLSYMS, "kallsyms")
    kallsyms = kr.take(kr.u32()).decode("utf-8", "replace") if kr else ""
    pr = section(_SEC_PRINTK, "printk formats")
    printk = pr.take(pr.u32()).decode("utf-8", "replace") if pr else ""
    cr = section(_SEC_CMDLINES, "saved cmdlines")
    cmdlines = cr.take(cr.u64()).decode("utf-8", "replace") if cr else ""

    streams = [s for _, _, st in buffers for s in st]
    clock = next((c for _, c, st in buffers if st and c), "")
    if not clock:
        m = re.search(r"\[(\S+)\]", clock_text)
        clock = m[1] if m else "unknown"
    cpus = cpucount or (max((s[0] for s in streams), default=-1) + 1)
    return dict(
        header_page=header_page,
        events=events,
        kallsyms=kallsyms,
        printk=printk,
        cmdlines=cmdlines,
        cpus=cpus,
        streams=streams,
        clock=clock,
        compression=compression,
        buffers=[name for name, _, _ in buffers],
        cpustats=parse_cpustats(cpustat_bodies),
    )


def open_tracedat(path: str | os.PathLike, warnings: list[str] | None = None) -> TraceDatFile:
    """Parse the headers of a trace.dat file (formats, cmdlines, CPU data locations)."""
    path = os.fspath(path)
    warnings = [] if warnings is None else warnings
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise TraceDatError(path, None, f"cannot open: {exc.strerror}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < 16:
            raise TraceDatError(path, 0, f"not a trace.dat file: only {size} bytes")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            r = _Reader(path, mm, 0, what="file header")
            if mm[:10] != MAGIC:
                raise TraceDatError(path, 0, f"not a trace.dat file: bad magic {bytes(mm[:10])!r}")
            r.pos = 10
            version_s = r.cstr()
            if not version_s.isdigit():
                r.fail(f"bad file version {version_s!r}")
            version = int(version_s)
            if version not in (6, 7):
                raise TraceDatError(path, 10, f"unsupported trace.dat file version {version} (supported: 6, 7)")
            endian = r.take(1)[0]
            if endian != 0:
                raise TraceDatError(path, r.pos - 1, "big-endian trace.dat files are not supported")
            long_size = r.take(1)[0]
            if long_size not in (4, 8):
                r.fail(f"bad long size {long_size}", r.pos - 1)
            page_size = r.u32()
            if page_size < 64 or page_size > 1 << 24 or page_size & (page_size - 1):
                r.fail(f"implausible page size {page_size}", r.pos - 4)
            reader = _read_v6 if version == 6 else _read_v7
            info = reader(path, mm, r, long_size, page_size, warnings)
    return TraceDatFile(
        path=path,
        version=version,
        long_size=long_size,
        page_size=page_size,
        compression=info["compression"],
        header_page=info["header_page"],
        events=info["events"],
        printk=_parse_printk(info["printk"]),
        kallsyms_text=info["kallsyms"],
        cmdlines=_parse_cmdlines(info["cmdlines"]),
        clock=info["clock"],
        cpus=info["cpus"],
        streams=info["streams"],
        buffers=info["buffers"],
        cpustats=info["cpustats"],
    )
