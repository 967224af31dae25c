"""Read ftrace text: tracefs ``trace`` / ``trace_pipe`` and ``trace-cmd report``.

Mirrors the line layout the kernel prints in ``kernel/trace/trace_output.c``
(``trace_print_context()``: ``comm-pid [cpu] flags timestamp: event: ...``,
with the optional ``(tgid)`` column of ``options/record-tgid``) and the one
``trace-cmd report`` prints (``tracecmd/trace-read.c``), with or without
``-N`` (no plugins) and ``-R`` (raw ``field=value`` for every event).

Text carries no event format, so types are inferred per column, and the
result has the same shape as :func:`lisa_ext.trace.tracedat.read_tracedat`:

* a field whose every value is a decimal integer becomes ``int64`` (``uint64``
  if one does not fit), anything else ``string`` (bitmasks such as
  ``cpus=000000f0`` stay text: nothing tells them from decimal numbers);
* ``field=value`` pairs give the fields, in order of first appearance; a value
  runs until the next `` name=`` or the end of the line, so values may hold
  spaces (``type=thermal-cpufreq-0``, ``load={24 19}``);
* a field whose every value is hex with ``0x`` becomes ``uint64`` (``trace-cmd
  report -R`` prints ``long`` fields so);
* text before the first ``name=`` (e.g. ``sugov_set_iowait_boost: skipping
  iow boost``) goes to a ``__positional`` string column;
* ``print`` / ``bprint`` / ``bputs`` are split as ``trace-cmd`` prints them,
  ``ip: text`` -> ``ip`` (string: a symbol or hex) and ``buf`` (``str`` for
  ``bputs``); ``bprint`` also has ``fmt``, null since text does not record it
  (``-R`` output, ``ip=... fmt=... buf=...``, is split too, but raw ``bprint``
  text holds no message: read ``print``/``bprint`` from non-raw text). Lines that follow such an event without an event header are
  continuation lines of its text (``trace_printk("a\\n b")``) and are joined
  with ``\\n``. ``tracing_mark_write: text`` (how tracefs and atrace show
  ``print`` events) gives one ``buf`` column, and so does ``0: text``, the
  same on old kernels;
* ``sched_switch`` / ``sched_wakeup*`` in the human format of the kernel
  (``prev_state=S ==> next_comm=...``) and of trace-cmd's sched plugin
  (``comm:pid [prio] S ==> comm:pid [prio]``) give the kernel's field names.

A text dump of an old systrace page's JavaScript string (``var linuxPerfData``
body saved as is, e.g. catapult's ``android_systrace.txt``) ends every line
with a literal ``\\n\\`` (newline escape, then line continuation): when the
first non-blank line ends so, that suffix is removed from every line and the
other JavaScript escapes (``\\\\``, ``\\"``, ``\\t``) are undone.

Timestamps are converted to integer nanoseconds exactly (``12.345678`` ->
``12345678000``). Tables are sorted by timestamp, ties kept in file order.
:attr:`TraceTables.meta` has, besides the common keys, ``"warnings"`` (lines
skipped, naming their number) and ``"record_lines"``: for each event the
1-based line number of each row, which fixes the order of events with the same
timestamp across tables (LISA's time deduplication depends on it).
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from lisa_ext.errors import UserError
from lisa_ext.trace.tables import TraceTables

__all__ = ["read_text", "parse_text_lines", "looks_like_text_trace"]

# Deferred imports in this module: pyarrow/numpy (~0.5 s) load only when tables are built; `lisa-ext
# trace stats` never needs them.

# comm may hold '-', ' ' and ':'; the greedy group keeps the last "-pid" that
# is followed by the rest of a header. No pattern around comm and rest may overlap them
# (leading or trailing whitespace): on a line that does not match, every split would be tried.
_HEADER = re.compile(
    r"^(?P<comm>.*)-(?P<pid>\d+)\s+"
    r"(?:\(\s*(?P<tgid>[\d-]+)\)\s+)?"
    r"\[(?P<cpu>\d+)\]\s+"
    r"(?:(?P<flags>[^\s\[\]:]{1,8})\s+)?"
    r"(?P<sec>\d+)\.(?P<frac>\d{1,9}):\s+"
    r"(?P<event>[\w@.]+):\s*(?P<rest>.*)$",
    re.ASCII,
)
_FIELD_NAME = re.compile(r"(?:^|(?<=\s))([A-Za-z_]\w*)=")
_INT = re.compile(r"^-?\d{1,20}$", re.ASCII)
_HEX = re.compile(r"^0x[0-9a-fA-F]{1,16}$")
_CPUS_LINE = re.compile(r"^cpus=(\d{1,6})\s*$", re.ASCII)
_TRACEFS_CPUS = re.compile(r"#P:(\d{1,6})", re.ASCII)
#: Longest line read: the kernel prints a trace line into one page (trace_seq); a longer line
#: is damage, and the patterns above are not linear on it.
MAX_LINE = 16384
#: Field names one event may have (real ones have a few dozen); more are damage.
MAX_FIELDS = 256
_INT32_MAX = 2**31 - 1
_PREAMBLE = re.compile(r"^(version = \d+|CPU \d+ is empty|cpus=\d+|#.*|\s*)$")
_PRINT_LIKE = {"print": "buf", "bprint": "buf", "bputs": "str"}
# tracefs prints ``print`` events under the name of their caller, and systrace
# (atrace) traces hold them as ``tracing_mark_write: <text>``.
# Old kernels print a trace_marker write whose caller is unknown as ``0: text``.
_TEXT_EVENTS = {**_PRINT_LIKE, "tracing_mark_write": "buf", "0": "buf"}
_PRINT_SPLIT = re.compile(r"^(?P<ip>.*?):\s*(?P<text>.*)$", re.S)
# ``trace-cmd report -R``: the text is the last field and may hold "x=y" itself
_PRINT_RAW = re.compile(r"^ip=(?P<ip>\S*) (?:fmt=(?P<fmt>\S*) )?(?:buf|str)=(?P<text>.*)$", re.S)
_PLUGIN_SWITCH = re.compile(
    r"^(?P<prev_comm>.*):(?P<prev_pid>\d+) \[(?P<prev_prio>-?\d+)\] (?P<prev_state>\S+)"
    r" ==> (?P<next_comm>.*):(?P<next_pid>\d+) \[(?P<next_prio>-?\d+)\]$"
)
_PLUGIN_WAKEUP = re.compile(
    r"^(?P<comm>.*):(?P<pid>\d+) \[(?P<prio>-?\d+)\](?: success=(?P<success>\d+))?"
    r" CPU:(?P<target_cpu>\d+)$"
)
# old systrace: the ftrace text as a JavaScript string, one "...\n\" per line
_JS_LINE_END = "\\n\\"
_JS_ESCAPE = re.compile(r"\\(.)")
_JS_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1


@dataclass
class _EventRows:
    """Rows of one event while the file is scanned."""

    ts: list[int] = field(default_factory=list)
    cpu: list[int] = field(default_factory=list)
    pid: list[int] = field(default_factory=list)
    comm: list[str] = field(default_factory=list)
    line: list[int] = field(default_factory=list)
    fields: list[dict[str, str]] = field(default_factory=list)
    names: dict[str, None] = field(default_factory=dict)  # ordered set
    too_many_fields: bool = False


def looks_like_text_trace(head: bytes) -> bool:
    """True if the first bytes of a file look like ftrace text."""
    text = head.decode("utf-8", "replace")
    return any(len(line) <= MAX_LINE and _HEADER.match(line) for line in text.splitlines()[:200]) or text.startswith(
        ("# tracer:", "version = ", "cpus=")
    )


def _header_values(match: re.Match) -> tuple[int, int, int] | str:
    """(timestamp ns, cpu, pid) of an event line, or what is wrong with them (damaged digits)."""
    sec, cpu, pid = match["sec"], match["cpu"], match["pid"]
    if len(sec) <= 10 and len(cpu) <= 10 and len(pid) <= 10:
        ts = int(sec) * 1_000_000_000 + int(match["frac"].ljust(9, "0"))
        if ts <= _INT64_MAX and int(cpu) <= _INT32_MAX and int(pid) <= _INT32_MAX:
            return ts, int(cpu), int(pid)
    return ("expected a timestamp below 2^63 ns and a cpu and pid below 2^31 "
            f"(found {sec[:24]}.{match['frac']} s, cpu {cpu[:24]}, pid {pid[:24]})")


def _split_fields(event: str, rest: str) -> dict[str, str]:
    if event in ("tracing_mark_write", "0"):
        return {"buf": rest}
    content = _PRINT_LIKE.get(event)
    if content is not None:
        match = _PRINT_RAW.match(rest) or _PRINT_SPLIT.match(rest)
        if match is None:
            return {"ip": None, content: rest}
        if event == "bprint":
            return {"ip": match["ip"], "fmt": None, "buf": match["text"]}
        return {"ip": match["ip"], content: match["text"]}
    if event == "sched_switch":
        match = _PLUGIN_SWITCH.match(rest)
        if match:
            return match.groupdict()
        rest = rest.replace(" ==> ", " ")
    elif event.startswith("sched_wakeup"):
        match = _PLUGIN_WAKEUP.match(rest)
        if match:
            return {k: v for k, v in match.groupdict().items() if v is not None}
    names = list(_FIELD_NAME.finditer(rest))
    values: dict[str, str] = {}
    if not names:
        if rest:
            values["__positional"] = rest
        return values
    positional = rest[: names[0].start()].strip().rstrip(":").strip()
    if positional:
        values["__positional"] = positional
    for match, following in zip(names, names[1:] + [None]):
        end = following.start() if following is not None else len(rest)
        values[match.group(1)] = rest[match.end() : end].rstrip()
    return values


def _column(values: list):
    """Arrow array for one text column: int64/uint64 if every value is an integer."""
    # deferred: see the note under __all__
    import pyarrow as pa

    present = [v for v in values if v is not None]
    if present and all(_HEX.match(v) for v in present):
        # trace-cmd -R prints every ``long`` field in hex
        return pa.array([int(v, 16) if v is not None else None for v in values], type=pa.uint64())
    if present and all(_INT.match(v) for v in present):
        ints = [int(v) if v is not None else None for v in values]
        low = min(i for i in ints if i is not None)
        high = max(i for i in ints if i is not None)
        if low >= -_INT64_MAX - 1 and high <= _INT64_MAX:
            return pa.array(ints, type=pa.int64())
        if low >= 0 and high <= _UINT64_MAX:
            return pa.array(ints, type=pa.uint64())
    return pa.array(values, type=pa.string())


def _table(event: str, rows: _EventRows):
    # deferred: see the note under __all__
    import pyarrow as pa

    order = sorted(range(len(rows.ts)), key=rows.ts.__getitem__)  # stable: ties keep file order
    if order != list(range(len(order))):
        for name in ("ts", "cpu", "pid", "comm", "line", "fields"):
            setattr(rows, name, [getattr(rows, name)[i] for i in order])
    columns = {
        "__timestamp": pa.array(rows.ts, type=pa.int64()),
        "__cpu": pa.array(rows.cpu, type=pa.int32()),
        "__pid": pa.array(rows.pid, type=pa.int32()),
        "__comm": pa.array(rows.comm, type=pa.string()),
    }
    for name in rows.names:
        values = [f.get(name) for f in rows.fields]
        # the text of a print is text, even when it reads "0"
        columns[name] = pa.array(values, pa.string()) if event in _TEXT_EVENTS else _column(values)
    return pa.table(columns), rows.line


def _drop_last(lines: Iterable[str], warnings: list[str], source: str, first_line: int) -> Iterator[str]:
    previous = None
    count = first_line - 1
    for count, line in enumerate(lines, start=first_line):
        if previous is not None:
            yield previous
        previous = line
    if previous is not None:
        warnings.append(
            f"{source}: line {count}: file ends inside this line (no final newline): "
            f"truncated trace, line skipped: {previous[:80]!r}"
        )


def _undo_js_continuations(lines: Iterable[str]) -> Iterator[str]:
    """Lines of a systrace JavaScript string dump as plain text; other text unchanged."""
    lines = iter(lines)
    head: list[str] = []
    for line in lines:
        head.append(line)
        if line.strip():
            break
    if not head or not head[-1].rstrip("\r\n").endswith(_JS_LINE_END):
        yield from head
        yield from lines
        return
    for line in itertools.chain(head, lines):
        body = line.rstrip("\r\n")
        if body.endswith(_JS_LINE_END):
            body = body[: -len(_JS_LINE_END)]
        yield _JS_ESCAPE.sub(lambda m: _JS_ESCAPES.get(m.group(1), m.group(1)), body)


def _lines(source: str | os.PathLike | Iterable[str]) -> Iterator[str]:
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            for raw in f:
                yield raw.decode("utf-8", "replace")
    else:
        yield from source


def parse_text_lines(
    lines: Iterable[str],
    *,
    source: str = "<text>",
    events: Iterable[str] | None = None,
    fmt: str = "text",
    first_line: int = 1,
    incomplete_last_line: bool = False,
) -> TraceTables:
    """Parse ftrace text lines (see the module docstring) into :class:`TraceTables`.

    :param lines: text lines, with or without their newline.
    :param source: file name used in errors, warnings and ``meta["source"]``.
    :param events: events to keep; all when ``None``. A requested event with
        no line in the text raises :class:`~lisa_ext.errors.UserError`.
    :param fmt: value of ``meta["format"]`` (``"text"`` or ``"systrace"``).
    :param first_line: number of the first line, for messages about files
        whose text starts inside a container (systrace HTML).
    :param incomplete_last_line: the input ends without a newline, as a
        truncated file does: its last line is skipped with a warning.
    """
    wanted = None if events is None else set(events)
    per_event: dict[str, _EventRows] = {}
    counts: dict[str, int] = {}
    warnings: list[str] = []
    cpus_declared = None
    last: tuple[str, _EventRows] | None = None
    seen_event = False
    first_other: tuple[int, str] | None = None
    lineno = first_line - 1
    first_ts = last_ts = None
    max_cpu = -1

    continued: list[str] = []  # continuation lines of the last print event, joined once

    def join_continued() -> None:
        if continued:
            event, rows = last
            key = _TEXT_EVENTS[event]
            rows.fields[-1][key] = "\n".join([rows.fields[-1][key], *continued])
            continued.clear()

    def skipped(lineno: int, why: str) -> None:
        if len(warnings) < 20:
            warnings.append(f"{source}: line {lineno}: {why}, skipped")
        elif len(warnings) == 20:
            warnings.append(f"{source}: more lines skipped after line {lineno}")

    if incomplete_last_line:
        lines = _drop_last(lines, warnings, source, first_line)
    lines = _undo_js_continuations(lines)
    for lineno, line in enumerate(lines, start=first_line):
        line = line.rstrip("\r\n")
        match = _HEADER.match(line) if len(line) <= MAX_LINE else None
        header = _header_values(match) if match is not None else None
        if isinstance(header, str):  # an event line whose numbers no kernel prints
            raise UserError(f"{source}: line {lineno}: {header}: {line[:80]!r}")
        if header is None:
            if first_other is None and line.strip() and not _PREAMBLE.match(line[:MAX_LINE]):
                first_other = (lineno, line)
            if not seen_event:
                found = _CPUS_LINE.match(line) or _TRACEFS_CPUS.search(line[:MAX_LINE])
                if found:
                    cpus_declared = int(found.group(1))
                continue
            if last is not None and line and not line.startswith("#") and len(line) <= MAX_LINE:
                event, rows = last
                key = _TEXT_EVENTS.get(event)
                if key is not None and rows.fields and rows.fields[-1].get(key) is not None:
                    continued.append(line)
                    continue
            join_continued()
            if len(line) > MAX_LINE:
                skipped(lineno, f"longer than {MAX_LINE} characters (a trace line fits in a page)")
            elif line.strip() and not _PREAMBLE.match(line):
                skipped(lineno, f"not an event line: {line[:80]!r}")
            last = None
            continue
        join_continued()
        seen_event = True
        event = match["event"]
        ts, cpu, pid = header
        counts[event] = counts.get(event, 0) + 1
        first_ts = ts if first_ts is None or ts < first_ts else first_ts
        last_ts = ts if last_ts is None or ts > last_ts else last_ts
        max_cpu = max(max_cpu, cpu)
        if wanted is not None and event not in wanted:
            last = None
            continue
        rows = per_event.get(event)
        if rows is None:
            rows = per_event[event] = _EventRows()
        values = _split_fields(event, match["rest"].rstrip())
        new = [name for name in values if name not in rows.names]
        if len(rows.names) + len(new) > MAX_FIELDS:  # damage: keep the fields seen so far
            for name in new[max(0, MAX_FIELDS - len(rows.names)) :]:
                del values[name]
            if not rows.too_many_fields:
                rows.too_many_fields = True
                warnings.append(f"{source}: line {lineno}: event {event} has more than {MAX_FIELDS} field "
                                "names; the others are dropped (damaged text)")
        rows.names.update(dict.fromkeys(values))
        rows.ts.append(ts)
        rows.cpu.append(cpu)
        rows.pid.append(pid)
        rows.comm.append(match["comm"].strip())
        rows.line.append(lineno)
        rows.fields.append(values)
        last = (event, rows)
    join_continued()

    if not seen_event:
        shown = f"; line {first_other[0]} reads {first_other[1][:100]!r}" if first_other else ""
        raise UserError(
            f"{source}: no ftrace event line found in {lineno - first_line + 1} lines "
            f"(expected lines like '  comm-1234  [001]  12.345678: sched_switch: ...'){shown}"
        )
    if wanted is not None:
        missing = sorted(wanted - counts.keys())
        if missing:
            raise UserError(
                f"{source}: requested event(s) {', '.join(missing)} not in the trace; "
                f"it has: {', '.join(sorted(counts))}"
            )
    tables = {}
    record_lines = {}
    for event, rows in per_event.items():
        tables[event], record_lines[event] = _table(event, rows)
    meta = {
        "source": source,
        "format": fmt,
        "cpus": cpus_declared if cpus_declared is not None else max_cpu + 1,
        "clock": "unknown",
        "file_version": None,
        "event_counts": counts,
        "first_timestamp_ns": first_ts,
        "last_timestamp_ns": last_ts,
        "warnings": warnings,
        "record_lines": record_lines,
    }
    return TraceTables(tables=tables, meta=meta)


def read_text(path: str | os.PathLike, events: Iterable[str] | None = None) -> TraceTables:
    """Read a tracefs / ``trace-cmd report`` text file (see the module docstring)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            truncated = size > 0 and f.seek(size - 1) >= 0 and f.read(1) != b"\n"
        return parse_text_lines(_lines(path), source=path, events=events, incomplete_last_line=truncated)
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from exc

