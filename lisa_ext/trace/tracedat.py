"""Read trace-cmd's trace.dat (file versions 6 and 7) into typed Arrow tables.

The file headers and event formats are parsed by
:mod:`lisa_ext.trace.tracedat_format`; the ring-buffer pages (the kernel's
kernel/trace/ring_buffer.c layout, as read by libtraceevent's kbuffer-parse.c)
by the native decoder :mod:`lisa_ext.trace._tracedat`. This module plans one
column per event field, runs the decoder and wraps its buffers as Arrow
tables following the column contract of :mod:`lisa_ext.trace.tables`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Iterable

from lisa_ext.errors import UserError
from lisa_ext.trace.bprint import BprintBudgetError, BprintFormatter
from lisa_ext.trace.tables import TraceTables
from lisa_ext.trace.tracedat_format import (
    COMPRESSION_IDS,
    MAGIC,
    EventFormat,
    FormatField,
    TraceDatError,
    TraceDatFile,
    header_page_layout,
    native,
    open_tracedat,
)

__all__ = [
    "MAGIC",
    "TraceDatError",
    "TraceDatFile",
    "EventFormat",
    "FormatField",
    "TraceDatReader",
    "read_tracedat",
    "count_events",
    "event_layout_problem",
    "open_tracedat",
]

# Deferred imports in this module: pyarrow/numpy (~0.5 s) load only when tables are built; `lisa-ext
# trace stats` never needs them.

# Column kinds understood by the native decoder (see _tracedat.c).
K_INT, K_STR_FIXED, K_STR_DYN, K_STR_REST, K_LIST_FIXED, K_LIST_DYN, K_LIST_REST = range(7)
FLAG_REL_LOC, FLAG_STRIP_NL = 1, 2


# --------------------------------------------------------------------------
# Column planning


def _int_type(size: int, signed: bool):
    # deferred: see the note under __all__
    import pyarrow as pa

    return {
        (1, True): pa.int8(), (2, True): pa.int16(), (4, True): pa.int32(), (8, True): pa.int64(),
        (1, False): pa.uint8(), (2, False): pa.uint16(), (4, False): pa.uint32(), (8, False): pa.uint64(),
    }[(size, signed)]


_TYPE_SIZES = {
    "char": 1, "signed char": 1, "unsigned char": 1, "u8": 1, "s8": 1, "__u8": 1, "__s8": 1, "bool": 1, "_Bool": 1,
    "short": 2, "unsigned short": 2, "u16": 2, "s16": 2, "__u16": 2, "__s16": 2, "__le16": 2, "__be16": 2,
    "int": 4, "unsigned int": 4, "unsigned": 4, "u32": 4, "s32": 4, "__u32": 4, "__s32": 4, "pid_t": 4,
    "__le32": 4, "__be32": 4, "gfp_t": 4, "dev_t": 4,
    "long long": 8, "unsigned long long": 8, "u64": 8, "s64": 8, "__u64": 8, "__s64": 8, "__le64": 8,
    "__be64": 8, "loff_t": 8, "sector_t": 8,
}


def _elem_size(f: FormatField, long_size: int) -> int | None:
    base = f.base_type
    if base.endswith("*"):
        return long_size
    if base in ("long", "unsigned long", "size_t", "ssize_t", "long int", "unsigned long int"):
        return long_size
    if base in _TYPE_SIZES:
        return _TYPE_SIZES[base]
    if f.array_len and f.array_len > 0 and f.size % f.array_len == 0:
        return f.size // f.array_len
    return None


@dataclass
class _Column:
    name: str
    kind: int
    flags: int
    offset: int
    size: int
    elem: int
    arrow_type: object
    signed: bool = False


def _plan_columns(fmt: EventFormat, long_size: int, warnings: list[str], path: str) -> list[_Column]:
    # deferred: see the note under __all__
    import pyarrow as pa

    cols = []
    for f in fmt.fields:
        if f.name.startswith("common_"):
            continue
        if f.dynamic:
            flags = FLAG_REL_LOC if f.relative else 0
            if f.is_char:
                cols.append(_Column(f.name, K_STR_DYN, flags, f.offset, f.size, 1, pa.string()))
                continue
            elem = _elem_size(f, long_size)
            if elem not in (1, 2, 4, 8):
                warnings.append(
                    f"{path}: event {fmt.name}: field {f.name}: unknown element type {f.type!r}; kept as bytes"
                )
                elem = 1
            cols.append(_Column(f.name, K_LIST_DYN, flags, f.offset, f.size, elem,
                                pa.list_(_int_type(elem, f.signed)), f.signed))
        elif f.array_len is not None:
            if f.is_char:
                kind = K_STR_REST if f.array_len == 0 or f.size == 0 else K_STR_FIXED
                flags = FLAG_STRIP_NL if (fmt.system == "ftrace" and fmt.name == "print") else 0
                cols.append(_Column(f.name, kind, flags, f.offset, f.size, 1, pa.string()))
                continue
            elem = _elem_size(f, long_size)
            if elem not in (1, 2, 4, 8) or (f.size and f.size % elem):
                warnings.append(
                    f"{path}: event {fmt.name}: field {f.name}: unknown element type {f.type!r}; kept as bytes"
                )
                elem = 1
            kind = K_LIST_REST if f.array_len == 0 or f.size == 0 else K_LIST_FIXED
            cols.append(_Column(f.name, kind, 0, f.offset, f.size, elem,
                                pa.list_(_int_type(elem, f.signed)), f.signed))
        elif f.size in (1, 2, 4, 8):
            cols.append(_Column(f.name, K_INT, 0, f.offset, f.size, f.size, _int_type(f.size, f.signed), f.signed))
        else:
            warnings.append(
                f"{path}: event {fmt.name}: field {f.name}: type {f.type!r} of size {f.size} "
                "is not an integer; kept as a list of bytes"
            )
            cols.append(_Column(f.name, K_LIST_FIXED, 0, f.offset, f.size, 1, pa.list_(pa.uint8())))
    return cols


#: Zero-size (flexible array) fields an event may have: real formats have at most one.
MAX_FLEXIBLE_FIELDS = 4
_TABLE_COLUMNS = {"__timestamp", "__cpu", "__pid", "__comm"}


def event_layout_problem(fmt: EventFormat, max_record: int) -> str | None:
    """Why the records of ``fmt`` cannot be decoded as it describes them, or None.

    A record sits in one ring-buffer page, so every field lies within the largest record a page
    holds (``max_record``); fields do not overlap (none do in the 3,400 formats of the shared
    traces) and there are few flexible arrays. Together with the decoder skipping records
    shorter than their fixed fields, this bounds what one record adds to the tables by the
    record's own length: a damaged format with thousands of overlapping fields is refused here.
    """
    if fmt.field_problems:
        return fmt.field_problems[0]
    pid = fmt.field("common_pid")
    if pid is None or pid.size not in (1, 2, 4):
        return "expected a common_pid field of 1, 2 or 4 bytes"
    names: set[str] = set()
    spans = []
    flexible = 0
    for f in fmt.fields:
        if f.offset + f.size > max_record:
            return (f"field {f.name} at offset {f.offset} ({f.size} bytes) ends beyond the largest record a "
                    f"page holds ({max_record} bytes)")
        if f.name in names:
            return f"field {f.name} is declared twice"
        if f.name in _TABLE_COLUMNS:
            return f"field {f.name} has the name of a column every table has"
        names.add(f.name)
        if f.size:
            spans.append((f.offset, f.size, f.name))
        else:
            flexible += 1
    if flexible > MAX_FLEXIBLE_FIELDS:
        return f"{flexible} flexible (size 0) fields, expected at most {MAX_FLEXIBLE_FIELDS}"
    spans.sort()
    for (offset, size, name), (next_offset, next_size, next_name) in zip(spans, spans[1:]):
        if next_offset < offset + size:
            return (f"fields {name} (offset {offset}, {size} bytes) and {next_name} (offset {next_offset}) "
                    "overlap")
    if _is_marker(fmt) and fmt.field("ip").size not in (4, 8):
        return "expected an ip field of 4 or 8 bytes"
    if _is_bprint(fmt):
        fmt_field, buf_field = fmt.field("fmt"), fmt.field("buf")
        if fmt_field is None or buf_field is None or fmt_field.size not in (4, 8):
            return "expected a fmt field of 4 or 8 bytes and a buf field"
    return None


def _is_bprint(fmt: EventFormat) -> bool:
    return fmt.system == "ftrace" and fmt.name == "bprint"


def _is_marker(fmt: EventFormat) -> bool:
    """ftrace print / bprint: their ``ip`` column is uint64 whatever the kernel's long size."""
    return fmt.system == "ftrace" and fmt.name in ("print", "bprint") and fmt.field("ip") is not None


# --------------------------------------------------------------------------
# Decoding


#: Longest task name kept (the kernel's is 16 bytes): each row of an event carries a copy.
MAX_COMM = 64


def _comm_tables(cmdlines: dict[int, str]):
    # deferred: see the note under __all__
    import numpy as np

    pids = [p for p in cmdlines if 0 < p < (1 << 23)]
    size = (max(pids) + 1) if pids else 1
    index = np.full(size, -1, dtype=np.int32)
    blobs = []
    offsets = [0]
    for k, pid in enumerate(pids):
        b = cmdlines[pid][:MAX_COMM].encode("utf-8", "replace")
        blobs.append(b)
        offsets.append(offsets[-1] + len(b))
        index[pid] = k
    blobs.append(b"\0" * 16)  # slack: the decoder copies comms 16 bytes at a time
    return index.tobytes(), np.asarray(offsets, dtype=np.int32).tobytes(), b"".join(blobs)


def _arrow_column(col: _Column, rows: int, bufs: tuple):
    # deferred: see the note under __all__
    import pyarrow as pa

    if col.kind == K_INT:
        return pa.Array.from_buffers(col.arrow_type, rows, [None, pa.py_buffer(bufs[0])])
    offsets, data = (pa.py_buffer(b) for b in bufs)
    if pa.types.is_string(col.arrow_type):
        return pa.Array.from_buffers(pa.string(), rows, [None, offsets, data])
    value_type = col.arrow_type.value_type
    values = pa.Array.from_buffers(value_type, len(bufs[1]) // col.elem, [None, data])
    return pa.ListArray.from_buffers(col.arrow_type, rows, [None, offsets], children=[values])


def _string_array(rows: int, offsets, data):
    # deferred: see the note under __all__
    import pyarrow as pa

    return pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _select(info: TraceDatFile, events: Iterable[str] | None) -> dict[str, EventFormat]:
    """Event name -> format for the events to decode."""
    by_name: dict[str, EventFormat] = {}
    for fmt in sorted(info.events.values(), key=lambda e: e.id):
        key = fmt.name if fmt.name not in by_name else f"{fmt.system}:{fmt.name}"
        by_name[key] = fmt
    if events is None:
        return by_name
    if isinstance(events, str):
        events = [events]
    chosen = {}
    for name in events:
        fmt = by_name.get(name)
        if fmt is None and ":" in name:
            system, _, short = name.partition(":")
            fmt = next((f for f in info.events.values() if f.system == system and f.name == short), None)
            name = short if fmt is not None and by_name.get(short) is fmt else name
        if fmt is None:
            raise UserError(f"{info.path}: event {name!r} is not in this trace (no format recorded for it)")
        chosen[name] = fmt
    return chosen


def _page_layout(info: TraceDatFile) -> tuple[int, int, int]:
    """(commit offset, commit size, data offset) of the ring-buffer pages, checked."""
    return header_page_layout(info.path, info.header_page, info.long_size, info.page_size, info.header_page_offset)


def _type_field(info: TraceDatFile) -> tuple[int, int]:
    """(offset, size) of common_type, which tells every record's event: the first format giving a
    readable one (a damaged format elsewhere does not make the whole file unreadable)."""
    for fmt in info.events.values():
        field = fmt.field("common_type")
        if field is not None and field.size in (1, 2, 4) and field.offset + field.size <= 16:
            return field.offset, field.size
    return 0, 2


def _run_decoder(info: TraceDatFile, slots: list[tuple], warnings: list[str]) -> dict:
    _tracedat = native()

    commit_off, commit_size, data_off = _page_layout(info)
    type_off, type_size = _type_field(info)
    comm_index, comm_offsets, comm_data = _comm_tables(info.cmdlines)
    with open(info.path, "rb") as f:
        try:
            out = _tracedat.decode(
                info.path, f.fileno(), info.streams, COMPRESSION_IDS[info.compression], info.page_size,
                commit_off, commit_size, data_off, type_off, type_size, slots,
                comm_index, comm_offsets, comm_data,
            )
        except (ValueError, OverflowError) as exc:  # the checks above make these unreachable: a last guard
            raise TraceDatError(info.path, None, str(exc), section="trace data") from None
    if out["fatal"] is not None:
        offset, problem = out["fatal"]
        raise TraceDatError(info.path, offset, problem)
    warnings.extend(out["warnings"])
    return out


#: Uncompressed data above this size is decoded by two threads.
PARALLEL_MIN_BYTES = 32 << 20


def _assign_threads(info: TraceDatFile, slots: list, plans: list[list[_Column]], counts: dict | None) -> None:
    """Split the events between two decoding threads, balancing the bytes each writes.

    Each thread walks every record (cheap on uncompressed data) but appends only
    its own events, so the two halves need no merging. The split needs the
    record count of each event: one extra walk without appending.
    """
    if (info.compression != "none" or len(slots) < 2 or (os.cpu_count() or 1) < 2
            or sum(size for _, _, size in info.streams) < PARALLEL_MIN_BYTES):
        return
    if counts is None:
        counts = _run_decoder(info, [], [])["counts"]
    weights = []
    for k, ((event_id, *_), cols) in enumerate(zip(slots, plans)):
        row = 32 + sum(c.size if c.kind == K_INT else 4 + min(c.size or 16, 64) for c in cols)
        weights.append((counts.get(event_id, 0) * row, k))
    load = [0, 0]
    for weight, k in sorted(weights, reverse=True):
        thread = 0 if load[0] <= load[1] else 1
        load[thread] += weight
        slots[k] = (*slots[k][:4], thread)


def _event_counts(info: TraceDatFile, counts: dict[int, int], warnings: list[str]) -> dict[str, int]:
    names = {}
    for fid, n in sorted(counts.items()):
        fmt = info.events.get(fid)
        if fmt is None:
            warnings.append(f"{info.path}: {n} records of unknown event id {fid} (no format in the file) skipped")
            continue
        key = fmt.name if fmt.name not in names else f"{fmt.system}:{fmt.name}"
        names[key] = names.get(key, 0) + n
    return dict(sorted(names.items()))


def lost_events(cpustats: list[dict], flagged: list[tuple]) -> dict:
    """How many events the kernel lost while this trace was recorded, and where.

    Two sources, both written by the kernel (``kernel/trace/ring_buffer.c``):
    the ring-buffer statistics trace-cmd saves at the end of recording
    (``overrun``: events overwritten before a reader took them; ``dropped_events``:
    events refused because the buffer was full), which give the totals, and the
    pages flagged as following a loss (``RB_MISSED_EVENTS``), which say when.
    Without saved statistics the flagged pages' stored counts are a lower bound
    (``exact`` is then false when some flagged page carries no count).

    Returns ``{"total": n, "per_cpu": {"<cpu>": n}, "exact": bool, "source": str,
    "flagged_pages": n, "first_lost_ns": ns|None, "last_lost_ns": ns|None}``.
    """
    per_cpu: dict[str, int] = {}
    if cpustats:
        source, exact = "ring-buffer statistics", True
        for st in cpustats:
            n = st.get("overrun", 0) + st.get("dropped_events", 0)
            per_cpu[str(st["cpu"])] = per_cpu.get(str(st["cpu"]), 0) + n
    else:
        source, exact = "flagged pages", not any(f[3] for f in flagged)
        for cpu, _pages, events, _unknown, _first, _last in flagged:
            per_cpu[str(cpu)] = per_cpu.get(str(cpu), 0) + events
    return {
        "total": sum(per_cpu.values()),
        "per_cpu": dict(sorted(per_cpu.items(), key=lambda kv: int(kv[0]))),
        "exact": exact,
        "source": source,
        "flagged_pages": sum(f[1] for f in flagged),
        "first_lost_ns": min((f[4] for f in flagged), default=None),
        "last_lost_ns": max((f[5] for f in flagged), default=None),
    }


def _meta(info: TraceDatFile, out: dict, counts: dict[str, int], warnings: list[str]) -> dict:
    return {
        "source": info.path,
        "format": "tracedat",
        "cpus": info.cpus,
        "clock": info.clock,
        "file_version": info.version,
        "compression": info.compression,
        "event_counts": counts,
        "first_timestamp_ns": out["first_ts"],
        "last_timestamp_ns": out["last_ts"],
        "buffers": info.buffers,
        "lost_events": lost_events(info.cpustats, out.get("lost", [])),
        "warnings": warnings,
    }


class TraceDatReader:
    """A trace.dat file whose headers are parsed once, to decode its events in one or more passes.

    :func:`read_tracedat` is the one-shot form. Several passes over a subset of
    events each (see ``lisa-ext trace convert``) let one pass's tables be
    written out while the next is decoded.
    """

    def __init__(self, path: str | os.PathLike):
        self.header_warnings: list[str] = []
        self.info = open_tracedat(path, self.header_warnings)
        self._walk: dict | None = None

    @property
    def path(self) -> str:
        return self.info.path

    def walk(self) -> dict:
        """Record count per event id and the timestamp range, from a walk that decodes no field."""
        if self._walk is None:
            warnings: list[str] = []
            out = _run_decoder(self.info, [], warnings)
            self._walk = {**out, "warnings": warnings}
        return self._walk

    def event_names(self, events: Iterable[str] | None = None) -> list[str]:
        """Names that :meth:`read` returns tables for (all events with records when None)."""
        chosen = _select(self.info, events)
        if events is None:
            counts = self.walk()["counts"]
            chosen = {name: fmt for name, fmt in chosen.items() if counts.get(fmt.id)}
        return list(chosen)

    def record_counts(self) -> dict[str, int]:
        """Records per event name, for every event in the file."""
        return _event_counts(self.info, self.walk()["counts"], [])

    def read(self, events: Iterable[str] | None = None, threads: int | None = None) -> TraceTables:
        """Decode events into tables (see :func:`read_tracedat`).

        :param threads: 1 to decode on the calling thread only; by default two
            threads share large uncompressed files.
        """
        # deferred: see the note under __all__
        import pyarrow as pa

        info = self.info
        warnings = list(self.header_warnings)
        chosen = _select(info, events)
        counts_first = None
        if events is None and info.compression == "none":
            # A walk without appending is cheap on uncompressed data: it spares
            # planning a column layout for the many events without any record.
            counts_first = self.walk()["counts"]
            chosen = {name: fmt for name, fmt in chosen.items() if counts_first.get(fmt.id)}
        plans = {}
        slots = []
        plan_warnings: dict[str, list[str]] = {}
        _, _, data_off = _page_layout(info)
        unreadable: dict[str, tuple[EventFormat, str]] = {}
        for name, fmt in chosen.items():
            problem = event_layout_problem(fmt, info.page_size - data_off)
            if problem is not None:
                if events is not None:  # asked for by name
                    raise TraceDatError(info.path, fmt.offset, f"event {name}: {problem}", section="event formats")
                unreadable[name] = (fmt, problem)  # an error only if the event has records
                continue
            plan_warnings[name] = []
            cols = _plan_columns(fmt, info.long_size, plan_warnings[name], info.path)
            if _is_marker(fmt):  # an address, whatever signedness a (damaged) format gives it
                cols = [replace(c, arrow_type=_int_type(c.size, False), signed=False) if c.name == "ip" else c
                        for c in cols]
            if _is_bprint(fmt):
                fmt_field = fmt.field("fmt")
                buf_field = fmt.field("buf")
                cols = [c for c in cols if c.name not in ("fmt", "buf")]
                cols.append(_Column("fmt", K_INT, 0, fmt_field.offset, fmt_field.size, fmt_field.size,
                                    _int_type(fmt_field.size, False)))
                cols.append(_Column("buf", K_LIST_REST, 0, buf_field.offset, 0, 1, pa.list_(pa.uint8())))
            pid = fmt.field("common_pid")
            pid_off, pid_size = (pid.offset, pid.size) if pid else (4, 4)
            plans[name] = (fmt, cols)
            slots.append((fmt.id, pid_off, pid_size,
                          [(c.kind, c.flags, c.offset, c.size, c.elem) for c in cols]))
        if threads != 1:
            if counts_first is None and info.compression == "none" and self._walk is not None:
                counts_first = self._walk["counts"]
            _assign_threads(info, slots, [cols for _, cols in plans.values()], counts_first)
        out = _run_decoder(info, slots, warnings)
        if self._walk is None:
            self._walk = {**out, "slots": [], "warnings": []}
        for name, (fmt, problem) in unreadable.items():
            if out["counts"].get(fmt.id):
                raise TraceDatError(info.path, fmt.offset, f"event {name} ({out['counts'][fmt.id]} records): "
                                    f"{problem}", section="event formats")
        counts = _event_counts(info, out["counts"], warnings)

        tables = {}
        formatter = None
        for (name, (fmt, cols)), res in zip(plans.items(), out["slots"]):
            rows = res["rows"]
            if res.get("short_records"):
                warnings.append(f"{info.path}: event {name}: {res['short_records']} record(s) shorter than the "
                                "fields of its format skipped (damaged data)")
            if events is None and not rows:
                continue
            warnings.extend(plan_warnings[name])  # only for events actually returned
            if not rows:
                schema = pa.schema(
                    [("__timestamp", pa.int64()), ("__cpu", pa.int32()), ("__pid", pa.int32()),
                     ("__comm", pa.string())]
                    + [(c.name, c.arrow_type) for c in cols]
                )
                table = schema.empty_table()
                if _is_marker(fmt) and table.schema.field("ip").type != pa.uint64():
                    table = table.set_column(table.schema.get_field_index("ip"), "ip", pa.array([], pa.uint64()))
                if _is_bprint(fmt):
                    table = table.set_column(table.schema.get_field_index("fmt"), "fmt", pa.array([], pa.string()))
                    table = table.set_column(table.schema.get_field_index("buf"), "buf", pa.array([], pa.string()))
                tables[name] = table
                continue
            arrays = [
                pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(res["ts"])]),
                pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(res["cpu"])]),
                pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(res["pid"])]),
                _string_array(rows, res["comm_offsets"], res["comm_data"]),
            ]
            names = ["__timestamp", "__cpu", "__pid", "__comm"]
            for col, bufs in zip(cols, res["columns"]):
                arrays.append(_arrow_column(col, rows, bufs))
                names.append(col.name)
            table = pa.Table.from_arrays(arrays, names=names)
            if _is_marker(fmt) and table.schema.field("ip").type != pa.uint64():
                # the contract fixes ip as uint64, also for 32-bit kernels
                table = table.set_column(table.schema.get_field_index("ip"), "ip",
                                         table.column("ip").cast(pa.uint64()))
            if _is_bprint(fmt):
                formatter = formatter or BprintFormatter(info.printk, lambda: info.kallsyms, info.long_size)
                try:
                    table = formatter.format_table(table)
                except BprintBudgetError as exc:
                    raise TraceDatError(info.path, None, f"event {name}: {exc}", section="printk formats") from None
            tables[name] = table
        return TraceTables(tables=tables, meta=_meta(info, out, counts, warnings))


def read_tracedat(path: str | os.PathLike, events: Iterable[str] | None = None) -> TraceTables:
    """Decode a trace.dat file into one Arrow table per event.

    :param events: event names (``"sched_switch"`` or ``"sched:sched_switch"``)
        to decode; ``None`` decodes every event that has at least one record.
    :raises UserError: the file is unreadable, or a requested event has no
        format in the file. Damage inside the event data (truncation,
        corrupted page) is reported in ``meta["warnings"]``; everything before
        it is decoded.
    """
    return TraceDatReader(path).read(events)


def count_events(path: str | os.PathLike) -> dict:
    """Event counts without building tables: ``{"events": {name: n}, "cpus": n, ...}``."""
    reader = TraceDatReader(path)
    walk = reader.walk()
    warnings = reader.header_warnings + walk["warnings"]
    counts = _event_counts(reader.info, walk["counts"], warnings)
    meta = _meta(reader.info, walk, counts, warnings)
    return {"events": counts, "cpus": reader.info.cpus, **{k: v for k, v in meta.items() if k != "event_counts"}}
