"""Format ftrace ``bprint`` records (trace_printk) as ``trace-cmd report`` prints them.

A bprint record holds the address of its format string (resolved through the
file's printk formats section, i.e. tracefs ``printk_formats``) and the
arguments packed by the kernel's ``vbin_printf()`` (lib/vsprintf.c): each
number 4-byte aligned and sized by its length modifier, each ``%s`` string
inline and NUL-terminated. The unpacking and the printing follow
libtraceevent's ``make_bprint_args()`` and ``pretty_print()`` in event-parse.c,
including its quirks (``long`` read at the traced machine's long size, the
trailing ``\\n`` of the format dropped, C escapes applied while printing).
"""

from __future__ import annotations

import bisect
import re
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Callable

    import pyarrow

__all__ = ["BprintBudgetError", "BprintFormatter", "unescape_format"]

#: Longest text of one record: the kernel prints a trace_seq of one page.
MAX_TEXT = 4096
#: Largest field width or precision printed (a damaged record may ask for 2^31).
MAX_WIDTH = 4096
#: Formatted text (format strings and messages of all rows) may exceed the records' argument
#: bytes by this factor, plus BUDGET_FREE_BYTES: real traces stay near 10x.
BUDGET_RATIO = 64
BUDGET_FREE_BYTES = 64 << 20


class BprintBudgetError(ValueError):
    """The formatted text of the bprint records would exceed its budget (damaged printk formats)."""

_SPEC_RE = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d*))?(?P<len>hh|h|ll|l|L|z|Z|j|t)?(?P<conv>.)?", re.S | re.ASCII)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def unescape_format(fmt: str) -> str:
    """Apply the C escapes libtraceevent interprets when printing a format."""
    out = []
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c == "\\" and i + 1 < len(fmt):
            out.append(_ESCAPES.get(fmt[i + 1], fmt[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _clamp(value: str | None) -> str | None:
    """A width or precision printed at most MAX_WIDTH wide (the format may hold 5000 digits)."""
    if not value:
        return value
    digits = value.lstrip("-")
    if len(digits) > 5 or int(digits) > MAX_WIDTH:
        return ("-" if value.startswith("-") else "") + str(MAX_WIDTH)
    return value


def _clean_printk(raw: str) -> str:
    """printk_formats text -> the format as libtraceevent keeps it (quotes and final "\\n" removed)."""
    s = raw.strip()
    if s.startswith('"'):
        s = s[1:]
    if s.endswith('"'):
        s = s[:-1]
    if s.endswith("\\n"):
        s = s[:-2]
    return s


class _Compiled:
    """A format split into literal text and conversion specs."""

    def __init__(self, fmt: str):
        self.parts: list = []
        i = 0
        lit = []
        while i < len(fmt):
            c = fmt[i]
            if c == "\\" and i + 1 < len(fmt):
                lit.append(_ESCAPES.get(fmt[i + 1], fmt[i + 1]))
                i += 2
                continue
            if c != "%":
                lit.append(c)
                i += 1
                continue
            m = _SPEC_RE.match(fmt, i)
            conv = m["conv"]
            if conv == "%":
                lit.append("%")
                i = m.end()
                continue
            if lit:
                self.parts.append("".join(lit))
                lit = []
            ext = ""
            end = m.end()
            if conv == "p" and end < len(fmt) and fmt[end].isalnum():
                ext = fmt[end]
                end += 1
            self.parts.append((m["flags"] or "", m["width"], m["prec"], m["len"] or "", conv or "", ext))
            i = end
        if lit:
            self.parts.append("".join(lit))


class BprintFormatter:
    """Turns bprint ``fmt`` addresses and ``buf`` bytes into text."""

    def __init__(self, printk: dict[int, str], kallsyms: "Callable[[], list[tuple[int, str]]]", long_size: int):
        """:param kallsyms: returns (address, name) pairs sorted by address; called
        only if a format prints a symbol (%pS and friends)."""
        self.printk = printk
        self.long_size = long_size
        self._kallsyms = kallsyms
        self._syms: tuple[list[int], list[str]] | None = None
        self._compiled: dict[int, tuple[str, _Compiled | None]] = {}

    @property
    def _sym_addrs(self) -> list[int]:
        return self._symbols()[0]

    @property
    def _sym_names(self) -> list[str]:
        return self._symbols()[1]

    def _symbols(self) -> tuple[list[int], list[str]]:
        if self._syms is None:
            pairs = self._kallsyms()
            self._syms = ([a for a, _ in pairs], [n for _, n in pairs])
        return self._syms

    def _lookup(self, addr: int) -> tuple[str, _Compiled | None]:
        hit = self._compiled.get(addr)
        if hit is None:
            raw = self.printk.get(addr)
            if raw is None:
                hit = (f"(NO FORMAT FOUND at {addr:x})", None)
            else:
                fmt = _clean_printk(raw)
                hit = (unescape_format(fmt), _Compiled(fmt))
            self._compiled[addr] = hit
        return hit

    def symbol(self, addr: int) -> str | None:
        i = bisect.bisect_right(self._sym_addrs, addr) - 1
        return self._sym_names[i] if i >= 0 else None

    def format(self, addr: int, buf: bytes) -> tuple[str, str]:
        """(format string, formatted text) of one record."""
        fmt, compiled = self._lookup(addr)
        if compiled is None:
            return fmt, fmt
        return fmt, self._render(compiled, buf)

    def _read(self, buf: bytes, pos: int, size: int) -> tuple[int, int]:
        pos = (pos + 3) & ~3
        chunk = buf[pos : pos + size]
        if len(chunk) < size:
            chunk = chunk.ljust(size, b"\0")
        return int.from_bytes(chunk, "little"), pos + size

    def _string(self, buf: bytes, pos: int) -> tuple[str, int]:
        end = buf.find(b"\0", pos)
        if end < 0:
            end = len(buf)
        return buf[pos:end].decode("utf-8", "replace"), end + 1

    def _render(self, compiled: _Compiled, buf: bytes) -> str:
        out = []
        pos = 0
        written = 0
        # every argument takes at least a byte of the record: a format with more conversions
        # than that is damaged, and rendering stops there (the work stays bounded by the record)
        conversions_left = len(buf) + 8
        for part in compiled.parts:
            if written > MAX_TEXT:
                break
            if isinstance(part, str):
                out.append(part)
                written += len(part)
                continue
            conversions_left -= 1
            if conversions_left < 0:
                break
            flags, width, prec, length, conv, ext = part
            if width == "*":
                w, pos = self._read(buf, pos, 4)
                width = str(struct.unpack("<i", w.to_bytes(4, "little"))[0])
            if prec == "*":
                p, pos = self._read(buf, pos, 4)
                prec = str(struct.unpack("<i", p.to_bytes(4, "little"))[0])
            width, prec = _clamp(width), _clamp(prec)
            if prec is not None and prec.startswith("-"):  # C: a negative precision is taken as omitted
                prec = None
            spec = "%" + flags + (width or "") + (("." + prec) if prec is not None else "")
            if conv == "s":
                s, pos = self._string(buf, pos)
                out.append((spec + "s") % s)
                continue
            if conv == "p" and ext and ext not in "sSxfF" and pos < len(buf) and 32 <= buf[pos] < 127:
                s, pos = self._string(buf, pos)
                out.append(s)
                continue
            if conv not in ("d", "i", "u", "x", "X", "o", "p"):
                out.append(spec + length + conv)
                continue
            ls = {"": 0, "l": 1, "z": 1, "Z": 1, "t": 1, "j": 2, "ll": 2, "L": 2}.get(length, 0)
            if conv == "p":
                ls = 1
            vsize = {0: 4, 1: self.long_size, 2: 8}[ls]
            val, pos = self._read(buf, pos, vsize)
            if conv == "p":
                out.append(self._pointer(val, ext))
                continue
            bits = 32 if ls == 0 else 64
            uval = val & ((1 << bits) - 1)
            if conv in ("d", "i"):
                v = uval - (1 << bits) if uval >> (bits - 1) else uval
                out.append((spec + "d") % v)
            elif conv == "u":
                out.append((spec + "d") % uval)
            elif conv == "o":
                text = (spec.replace("#", "") + "o") % uval
                if "#" in flags and not text.lstrip(" -").startswith("0"):
                    text = "0" + text if not text.startswith(" ") else text
                out.append(text)
            else:
                if uval == 0:
                    spec = spec.replace("#", "")
                out.append((spec + conv) % uval)
            written += len(out[-1])
        return "".join(out)[:MAX_TEXT]

    def _pointer(self, val: int, ext: str) -> str:
        if ext in ("s", "S", "f", "F"):
            sym = self.symbol(val)
            if sym is not None:
                if ext in ("S", "F"):
                    base = self._sym_addrs[bisect.bisect_right(self._sym_addrs, val) - 1]
                    return f"{sym}+0x{val - base:x}" if val != base else sym
                return sym
            return f"0x{val:x}"
        return f"0x{val:x}" if val else "(nil)"

    def format_table(self, table: "pyarrow.Table") -> "pyarrow.Table":
        """Replace the raw ``fmt`` (address) and ``buf`` (bytes) columns by text."""
        # deferred: pyarrow/numpy (~0.5 s) load only when tables are built; `lisa-ext trace stats` never needs them
        import pyarrow as pa

        addrs = table.column("fmt").to_pylist()
        bufs = table.column("buf").combine_chunks()
        offsets = bufs.offsets.to_pylist()
        values = bufs.values
        data = values.buffers()[1].to_pybytes()[values.offset:] if len(values) else b""
        fmts, texts = [], []
        budget = BUDGET_FREE_BYTES + BUDGET_RATIO * len(data)
        for k, addr in enumerate(addrs):
            fmt, text = self.format(addr, data[offsets[k] : offsets[k + 1]])
            fmts.append(fmt)
            texts.append(text)
            budget -= len(fmt) + len(text)
            if budget < 0:
                raise BprintBudgetError(
                    f"the text of {len(addrs)} bprint records would exceed {BUDGET_RATIO} times their "
                    f"{len(data)} bytes of arguments (row {k}: a {len(fmt)}-character format): damaged printk formats")
        idx_fmt = table.schema.get_field_index("fmt")
        table = table.set_column(idx_fmt, "fmt", pa.array(fmts, pa.string()))
        idx_buf = table.schema.get_field_index("buf")
        return table.set_column(idx_buf, "buf", pa.array(texts, pa.string()))
