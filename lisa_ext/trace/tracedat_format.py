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
NATIVE_ABI = 3

#: CPU numbers and counts above this are damage (the kernel's NR_CPUS is at most 8192).
MAX_CPUS = 8192
#: Largest event id the decoder indexes (ids are 16-bit in every kernel's ring buffer).
MAX_EVENT_ID = 65535
#: Longest printk format kept: longer ones cannot print within a trace_seq page.
MAX_PRINTK_FORMAT = 4096
#: Longest field declaration parsed ("__data_loc unsigned long[] name" is ~30 characters).
_MAX_DECL = 256
#: Fields a format may have: real ones have at most a few dozen (40 in the shared traces).
MAX_FIELDS = 1024


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
    """A trace.dat file that cannot be read: names the file, the offset, the section and the problem."""

    def __init__(self, path: str | os.PathLike, offset: int | None, problem: str, section: str | None = None):
        self.path = os.fspath(path)
        self.offset = offset
        self.section = section
        self.problem = problem
        where = f" at offset {offset}" if offset is not None else ""
        what = f"{section}: " if section else ""
        super().__init__(f"{self.path}{where}: {what}{problem}")


def decimal(text: str, limit: int = 2**64 - 1) -> int | None:
    """The value of a run of ASCII digits, or None when it has more than 20 digits or exceeds ``limit``.

    Numbers in a damaged file may be thousands of digits long: Python refuses to convert
    those (ValueError) and the readers never need more than 64 bits.
    """
    if not (0 < len(text) <= 20 and text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= limit else None


@dataclass
class FormatField:
    """One ``field:`` line of an event format file."""

    name: str
    type: str  # declared type without the name, e.g. "unsigned long", "char[16]", "__data_loc char[]"
    offset: int  # may be beyond any record in a damaged format: see tracedat.event_layout_problem()
    size: int
    signed: bool
    array_len: int | None = None  # N of a fixed "[N]", 0 for a flexible "[]", -1 if not a number, None if not an array
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
    offset: int | None = None  # where the format is: its file offset (version 6) or its section's (version 7)

    @functools.cached_property
    def _parsed(self) -> tuple[list[FormatField], list[str]]:
        return _parse_fields(self.text)

    @property
    def fields(self) -> list[FormatField]:
        return self._parsed[0]

    @property
    def field_problems(self) -> list[str]:
        """Why some ``field:`` lines could not be read (a damaged format), at most 5."""
        return self._parsed[1]

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
    header_page_offset: int | None
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
    """Bounds-checked little-endian reads over a byte buffer, with file offsets in errors.

    ``inflated``: the buffer is a decompressed section found at file offset ``base``;
    errors then give that offset and the position inside the decompressed data.
    """

    def __init__(self, path: str, data, pos: int = 0, base: int = 0, what: str = "header", inflated: bool = False):
        self.path, self.data, self.pos, self.base, self.what = path, data, pos, base, what
        self.inflated = inflated

    def offset(self, at: int | None = None) -> int:
        """The file offset of position ``at`` (the section's offset for decompressed data)."""
        return self.base if self.inflated else self.base + (self.pos if at is None else at)

    def fail(self, problem: str, at: int | None = None):
        if self.inflated:
            problem += f" (byte {self.pos if at is None else at} of the decompressed section)"
        raise TraceDatError(self.path, self.offset(at), problem, section=self.what)

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


# Bounded repetitions keep every match linear in the text (a damaged format may be a megabyte).
_FIELD_RE = re.compile(
    r"field:[ \t]*(?P<decl>[^;\n]{0,%d});[ \t]*offset:[ \t]*(?P<offset>\d{1,32});[ \t]*size:[ \t]*(?P<size>\d{1,32});"
    r"(?:[ \t]*signed:[ \t]*(?P<signed>-?\d{1,32});)?" % _MAX_DECL,
    re.ASCII,
)
_FIELD_LINE = re.compile(r"^[ \t]*field:[^\n]*", re.M)
# a declaration read backwards: "]N[" then the name, so the match is anchored and linear
_DECL_REVERSED = re.compile(r"\s*(?P<arr>\][^\[\]]*\[)?\s*(?P<name>\w*[A-Za-z_])(?!\w)", re.ASCII)


def _split_decl(decl: str) -> tuple[str, str, str | None] | None:
    """(type, name, "[N]" or None) of a declaration such as "unsigned long addr[4]"; None if unreadable."""
    m = _DECL_REVERSED.match(decl[::-1])
    if m is None:
        return None
    arr = m["arr"][::-1] if m["arr"] else None
    return decl[: len(decl) - m.end()].strip(), m["name"][::-1], arr


def _array_length(expr: str) -> int:
    """N of "[N]": 0 for "[]", -1 when it is not a plain (sum of products of) numbers below 2^32."""
    expr = expr.strip()
    if not expr:
        return 0
    if len(expr) > 64 or not re.fullmatch(r"\d+(\s*[+*]\s*\d+)*", expr, re.ASCII):
        return -1
    total = 0
    for term in expr.split("+"):
        product = 1
        for factor in term.split("*"):
            value = decimal(factor.strip(), 2**32)
            if value is None:
                return -1
            product *= value
        total += product
    return total if total < 2**32 else -1


def parse_format(text: str, system: str | None = None, offset: int | None = None) -> EventFormat:
    """Parse one tracefs event ``format`` file (fields on first use)."""
    name = re.search(r"^name:\s*(\S+)", text, re.M)
    ident = re.search(r"^ID:\s*(\d+)", text, re.M | re.ASCII)
    if not name or not ident:
        raise ValueError("no name/ID line")
    event_id = decimal(ident[1], MAX_EVENT_ID)
    if event_id is None:
        raise ValueError(f"ID {ident[1][:24]} is not below {MAX_EVENT_ID + 1}")
    if system is None:
        sysm = re.search(r"^system:\s*(\S+)", text, re.M)
        system = sysm[1] if sysm else ""
    return EventFormat(id=event_id, system=system, name=name[1], text=text, offset=offset)


#: stands for numbers too large for any record: the layout check rejects the event
_HUGE = 2**64


def _parse_fields(text: str) -> tuple[list[FormatField], list[str]]:
    """The fields of a format, and why ``field:`` lines could not be read (at most 5)."""
    fields = []
    parsed = set()
    for m in _FIELD_RE.finditer(text):
        if len(fields) == MAX_FIELDS:
            return fields, [f"more than {MAX_FIELDS} fields (real formats have a few dozen)"]
        decl = " ".join(m["decl"].split())
        dynamic = decl.startswith(("__data_loc", "__rel_loc"))
        relative = decl.startswith("__rel_loc")
        split = _split_decl(decl)
        if split is None:
            continue
        parsed.add(m.start())
        ftype, name, arr = split
        array_len = None
        if arr is not None:
            array_len = _array_length(arr[1:-1])
            ftype += arr
        elif ftype.endswith("]"):  # "__data_loc char[] name"
            array_len = 0
        size = decimal(m["size"])
        size = _HUGE if size is None else size
        if size == 0 and array_len is None:  # old kernels: "char buf; size:0" is a flexible array
            array_len = 0
        offset = decimal(m["offset"])
        fields.append(
            FormatField(
                name=name,
                type=ftype,
                offset=_HUGE if offset is None else offset,
                size=size,
                signed=m["signed"] is not None and m["signed"].lstrip("-").strip("0") != "",
                array_len=array_len,
                dynamic=dynamic,
                relative=relative,
            )
        )
    unparsed = []
    for line in _FIELD_LINE.finditer(text):
        if line.start() + len(line[0]) - len(line[0].lstrip()) not in parsed:
            unparsed.append(f"unreadable field line {line[0].strip()[:80]!r}")
            if len(unparsed) == 5:
                break
    return fields, unparsed


def _parse_format_list(r: _Reader, system: str, out: dict[int, EventFormat], warnings: list[str]):
    count = r.u32()
    skipped: list[str] = []
    for _ in range(count):
        size = r.u64()
        at = r.pos
        text = r.take(size).decode("utf-8", "replace")
        try:
            fmt = parse_format(text, system, r.offset(at))
        except ValueError as exc:
            skipped.append(f"offset {r.offset(at)} ({exc})")
            continue
        out[fmt.id] = fmt
    if skipped:
        more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        warnings.append(f"{r.path}: {r.what}: {len(skipped)} unreadable event format(s) skipped: "
                        f"{', '.join(skipped[:3])}{more}")


def _parse_event_systems(r: _Reader, out: dict[int, EventFormat], warnings: list[str]):
    nsys = r.u32()
    for _ in range(nsys):
        system = r.cstr()
        _parse_format_list(r, system, out, warnings)


def _parse_printk(text: str, path: str = "", warnings: list[str] | None = None) -> dict[int, str]:
    formats = {}
    too_long = 0
    for line in text.splitlines():
        addr, sep, fmt = line.partition(" : ")
        if not sep:
            continue
        if len(fmt) > MAX_PRINTK_FORMAT:  # damage: each bprint row would carry a copy of it
            too_long += 1
            continue
        try:
            formats[int(addr, 16)] = fmt
        except ValueError:
            continue
    if too_long and warnings is not None:
        warnings.append(f"{path}: printk formats: {too_long} format(s) longer than {MAX_PRINTK_FORMAT} characters "
                        "skipped (damaged)")
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
        number = decimal(pid, 2**31 - 1)
        if number is not None and comm:
            comms.setdefault(number, comm)
    return comms


_CPUSTAT_BUFFER = re.compile(r"^\s*Buffer:\s*(\S*)\s*$")
_CPUSTAT_LINE = re.compile(r"^([a-z][a-z ]*[a-z]):\s*(\d{1,20})\s*$", re.IGNORECASE | re.ASCII)


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


def header_page_layout(path: str, text: str, long_size: int, page_size: int,
                       offset: int | None = None) -> tuple[int, int, int]:
    """(commit offset, commit size, data offset) from the header_page format, checked against the page size."""
    commit = re.search(r"field:\s*local_t commit;\s*offset:(\d+);\s*size:(\d+);", text)
    data = re.search(r"field:\s*char data;\s*offset:(\d+);", text)
    if commit and data:
        commit_off, commit_size, data_off = decimal(commit[1]), decimal(commit[2]), decimal(data[1])
        if (commit_off is None or data_off is None or commit_size not in (4, 8)
                or commit_off + commit_size > data_off or data_off >= page_size):
            raise TraceDatError(
                path, offset, f"commit field at offset {commit[1][:24]} ({commit[2][:24]} bytes), data at offset "
                f"{data[1][:24]}: expected a 4- or 8-byte commit field inside a page header smaller than the "
                f"{page_size}-byte page", section="header_page")
        return commit_off, commit_size, data_off
    if text.strip():
        raise TraceDatError(path, offset, "lacks the commit/data fields", section="header_page")
    return 8, long_size, 8 + long_size


def _read_v6(path: str, mm, r: _Reader, long_size: int, page_size: int, warnings: list[str]) -> dict:
    r.expect(b"header_page\0")
    size = r.u64()
    header_page_offset = r.offset()
    header_page = r.take(size).decode("utf-8", "replace")
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
    if cpus > MAX_CPUS:
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
    table_size = 10 + 16 * cpus
    for (name, off), (_, following) in zip(sorted(instance_offsets, key=lambda i: i[1]),
                                           sorted(instance_offsets, key=lambda i: i[1])[1:] + [("", 2**64)]):
        if following < off + table_size:  # each table read once: bounded by the file's size
            raise TraceDatError(path, following, f"the cpu tables of two instances overlap (offsets {off} and "
                                f"{following}, {table_size} bytes each)", section="options")
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
        header_page_offset=header_page_offset,
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


def _read_section(path: str, mm, offset: int, compression: str, want: int | None = None,
                  what: str = "section") -> _Reader:
    """A reader over the body of the section at ``offset`` (decompressed if need be), named ``what``."""
    r = _Reader(path, mm, offset, what=f"{what} header")
    sid = r.u16()
    flags = r.u16()
    r.u32()  # description string id
    size = r.u64()
    if want is not None and sid != want:
        r.fail(f"expected section {want}, found section {sid}", offset)
    r.what = what
    if flags & 1:
        if compression == "none":
            r.fail("section is marked compressed but the file has no compression", offset)
        csize, usize = r.u32(), r.u32()
        data = r.take(csize)
        try:
            inflated = native().decompress(COMPRESSION_IDS[compression], data, usize)
        except ValueError as exc:
            r.fail(f"compressed section does not decompress: {exc}", offset)
        return _Reader(path, inflated, 0, base=offset, what=what, inflated=True)
    start = r.pos
    return _Reader(path, r.take(size), 0, base=start, what=what)


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
            raise TraceDatError(path, options_at, "options sections form a loop", section="options")
        if options_at >= len(mm):
            raise TraceDatError(
                path, options_at,
                f"options section lies beyond the end of the file ({len(mm)} bytes): the file is truncated, "
                "and version 7 keeps the index of the CPU data there, so no event can be located",
            )
        seen.add(options_at)
        o = _read_section(path, mm, options_at, compression, _SEC_OPTIONS, "options section")
        next_at = 0
        while o.pos < len(o.data):
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
                b = _Reader(path, body, 0, base=o.offset(o.pos - len(body)), what="BUFFER option",
                            inflated=o.inflated)
                b.u64()  # the section offset; per-CPU offsets below are absolute
                name, clock = b.cstr(), b.cstr()
                b.u32()  # page size
                ncpu = b.u32()
                streams = []
                for _ in range(ncpu):
                    cpu, off, size = b.u32(), b.u64(), b.u64()
                    if cpu >= MAX_CPUS:
                        b.fail(f"cpu number {cpu} (expected below {MAX_CPUS})", b.pos - 20)
                    if size:
                        # compressed data: the size leaves out the leading u32 chunk count
                        streams.append((cpu, off, size + 4 if compression != "none" else size))
                buffers.append((name, clock, streams))
        options_at = next_at

    def section(sid: int, what: str) -> _Reader | None:
        if sid not in sections:
            return None
        return _read_section(path, mm, sections[sid], compression, sid, what)

    header_page, header_page_offset = "", None
    hr = section(_SEC_HEADER_INFO, "header info")
    if hr:
        hr.expect(b"header_page\0")
        size = hr.u64()
        header_page_offset = hr.offset()
        header_page = hr.take(size).decode("utf-8", "replace")
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
        header_page_offset=header_page_offset,
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


def _check_streams(path: str, streams: list[tuple[int, int, int]], file_size: int) -> None:
    """Each CPU's data is its own region of the file: regions that overlap would be decoded twice
    (or a thousand times), so the work and the tables stay bounded by the file's size."""
    inside = sorted((min(off, file_size), min(off + size, file_size), cpu) for cpu, off, size in streams)
    for (start, end, cpu), (next_start, next_end, next_cpu) in zip(inside, inside[1:]):
        if next_start < end and next_end > next_start:
            raise TraceDatError(path, next_start, f"the data of cpu {next_cpu} (offset {next_start}) overlaps the data "
                                f"of cpu {cpu} (offsets {start} to {end})", section="cpu data table")


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
            version = decimal(version_s, 10**6)
            if version is None:
                r.fail(f"bad file version {version_s[:40]!r}")
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
    _check_streams(path, info["streams"], size)
    return TraceDatFile(
        path=path,
        version=version,
        long_size=long_size,
        page_size=page_size,
        compression=info["compression"],
        header_page=info["header_page"],
        header_page_offset=info["header_page_offset"],
        events=info["events"],
        printk=_parse_printk(info["printk"], path, warnings),
        kallsyms_text=info["kallsyms"],
        cmdlines=_parse_cmdlines(info["cmdlines"]),
        clock=info["clock"],
        cpus=info["cpus"],
        streams=info["streams"],
        buffers=info["buffers"],
        cpustats=info["cpustats"],
    )
