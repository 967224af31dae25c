"""A LISA 3.1 trace parser fed by :func:`lisa_ext.trace.read_trace`.

Mirrors the contract of ``lisa/trace.py``'s ``TraceParserBase`` (LISA 3.1.0):
``Trace(path, parser=LisaExtTraceParser)`` calls
``LisaExtTraceParser(path=..., events=..., needed_metadata=...)`` and then
``parse_event(event)`` for each raw event it needs; meta events
(``userspace@rtapp_loop`` from ``print``, ``trace_printk@...`` from
``bprint``) are then derived by LISA itself from our ``print``/``bprint``
frames, exactly as with its own parsers.

The frames are built to equal what LISA's own parser gives for the same file
(``TxtTraceParser.from_dat`` for trace.dat, which reads ``trace-cmd report``;
``HRTxtTraceParser`` for text; ``SysTraceParser`` for systrace HTML):

* index: timestamps in seconds (float64), made strictly increasing over the
  whole trace in record order like ``TxtTraceParserBase._eagerly_parse_lines``
  does (a timestamp not above the previous one becomes the next float up), so
  frames of different events join the same way;
* ``__comm`` string, ``__pid`` and ``__cpu`` uint32;
* events LISA describes (its parser's ``EVENT_DESCS``): only the described
  fields, with LISA's dtypes (``sched_switch.prev_pid`` uint32, ...);
* other events: every field, integers as int64 (uint64 if too large), text as
  the ``string`` dtype, arrays as lists;
* ``print``/``bprint``/``bputs``: ``ip`` as text (the kernel symbol containing
  the address, as ``trace-cmd report`` resolves it, or ``0x...``) and
  ``buf``/``str`` as bytes, which is what LISA's meta-event parsing reads;
* trace.dat fields the event's print fmt formats as kernel symbols
  (``%ps``/``%pf``: ``name``; ``%pS``/``%pF``: ``name+0xoff``; ``0x...`` when
  no symbol holds the address), e.g. ``workqueue_execute_start.function``:
  the symbol text, as ``trace-cmd report`` prints it and LISA's own parser
  returns it, resolved through the kallsyms stored in the file. The Arrow
  tables of :func:`lisa_ext.trace.read_trace` keep the raw address.

Text and systrace traces that show ``print`` events as ``tracing_mark_write:
text`` (tracefs, atrace) also get them as a ``print`` frame, so LISA's
``userspace@`` meta events (rt-app markers) work on them.

Metadata: ``time-range``, ``cpus-count``, ``available-events`` (events with at
least one record) and, when asked, ``symbols-address``.
"""

from __future__ import annotations

import bisect
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from lisa_ext.compat import import_lisa
from lisa_ext.trace.read import detect_format, read_trace, read_uncached
from lisa_ext.trace.cache import TraceCacheEntry
from lisa_ext.trace.tracedat import open_tracedat
from lisa_ext.workbench import cache_root

_lisa_trace = import_lisa("lisa.trace")
_datautils = import_lisa("lisa.datautils")

__all__ = ["LisaExtTraceParser", "TraceDamageWarning", "lisa_times", "prepare_trace"]


class TraceDamageWarning(UserWarning):
    """The trace was read up to damage (see ``TraceTables.meta["warnings"]``)."""

_TEXT_EVENTS = {"print": "buf", "bprint": "buf", "bputs": "str"}
_EXACT_FLOAT_NS = 2**53  # below this, ns / 1e9 is the correctly rounded decimal


def _seconds(ns: np.ndarray) -> np.ndarray:
    """Nanoseconds -> float seconds, equal to ``float("<sec>.<ns 9 digits>")``."""
    out = ns.astype(np.float64) / 1e9
    big = ns >= _EXACT_FLOAT_NS
    if big.any():
        out[big] = [float(f"{v // 10**9}.{v % 10**9:09d}") for v in ns[big].tolist()]
    return out


def _strictly_increasing(seconds: np.ndarray) -> np.ndarray:
    """LISA's deduplication: each time becomes max(t, nextafter(previous fixed time)).

    On non-negative floats the IEEE bit pattern is ordered like the value and
    nextafter is +1 on it, so the sequential rule is a running maximum.
    """
    bits = np.concatenate(([0], np.maximum(seconds, 0.0).view(np.int64)))
    steps = np.arange(bits.size, dtype=np.int64)
    fixed = np.maximum.accumulate(bits - steps) + steps
    return fixed[1:].view(np.float64)


def lisa_times(tables, meta) -> dict[str, np.ndarray]:
    """Per event, the float index LISA's text parsers would give each row.

    Records are put in the order ``trace-cmd report`` (or the text file) has
    them: by line number when the reader recorded it (text), else by
    timestamp, then CPU (``trace-cmd report`` takes the lowest CPU on a tie).
    """
    events = [e for e, t in tables.items() if t.num_rows]
    if not events:
        return {}
    ts = np.concatenate([tables[e].column("__timestamp").to_numpy() for e in events])
    owner = np.repeat(np.arange(len(events)), [tables[e].num_rows for e in events])
    lines = meta.get("record_lines") or {}
    if all(e in lines for e in events):
        order = np.argsort(np.concatenate([np.asarray(lines[e]) for e in events]), kind="stable")
    else:
        cpu = np.concatenate([tables[e].column("__cpu").to_numpy() for e in events])
        order = np.lexsort((cpu, ts))
    fixed_sorted = _strictly_increasing(_seconds(ts[order]))
    fixed = np.empty_like(fixed_sorted)
    fixed[order] = fixed_sorted
    return {e: fixed[owner == i] for i, e in enumerate(events)}


def _lisa_field_dtypes(fmt: str) -> dict[str, dict[str, Any]]:
    parser_cls = _lisa_trace.TxtTraceParser if fmt == "tracedat" else _lisa_trace.HRTxtTraceParser
    dtypes = {}
    for event, desc in parser_cls.EVENT_DESCS.items():
        fields = desc.fields if isinstance(desc, _lisa_trace.EventParserBase) else desc["fields"]
        dtypes[event] = dict(fields)
    return dtypes


@dataclass
class _Prepared:
    """One loaded trace, shared by the parser instances LISA creates for it.

    Tables come either all in memory (just converted) or one by one from the
    cache entry, when LISA first asks for the event.
    """

    path: str
    meta: dict
    rows: dict[str, int]  # rows per event held
    field_dtypes: dict[str, dict[str, Any]]
    loaded: dict = field(default_factory=dict)  # event -> pyarrow.Table
    entry: Any = None  # TraceCacheEntry the tables not loaded yet come from
    index: dict | None = None
    cache_dir: str | None = None  # directory of the cache entry, if cached
    times: dict[str, np.ndarray] | None = None
    symbols: tuple[list[int], list[str]] | None = None
    symbol_fields: dict[str, dict[str, str]] | None = None  # event -> {field: %p letter}
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)  # event shown -> event read

    def table(self, event: str):
        table = self.loaded.get(event)
        if table is None and event in self.rows:
            if event in self.aliases:
                table = _print_from_trace_marker(self.table(self.aliases[event]))
            else:
                table, _ = self.entry.read_event(self.index, event)
            self.loaded[event] = table
        return table

    def lisa_times(self) -> dict[str, np.ndarray]:
        if self.times is None:
            real = [e for e, n in self.rows.items() if n and e not in self.aliases]
            if self.entry is None:
                times = lisa_times({e: self.loaded[e] for e in real}, self.meta)
            else:  # only the columns that order the records
                tables, lines = {}, {}
                for event in real:
                    tables[event], event_lines = self.entry.read_event(self.index, event, ["__timestamp", "__cpu"])
                    if event_lines is not None:
                        lines[event] = event_lines
                times = lisa_times(tables, {"record_lines": lines})
            for alias, event in self.aliases.items():
                if event in times:
                    times[alias] = times[event]
            self.times = times
        return self.times


def _print_from_trace_marker(marks):
    """tracefs and atrace text show ``print`` events as ``tracing_mark_write: text``.

    LISA's ``userspace@`` meta events (rt-app markers, ...) are read from
    ``print``, so text traces get a ``print`` table with ``ip`` set to the
    function name the text shows.
    """
    ip = pa.array(["tracing_mark_write"] * marks.num_rows, pa.string())
    return marks.add_column(marks.column_names.index("buf"), "ip", ip)


_PREPARED: dict[tuple, _Prepared] = {}
_KEEP_PREPARED = 2


def _load(path: str, cache: bool) -> _Prepared:
    if not cache:
        tt = read_trace(path, cache=False)
    else:
        entry = TraceCacheEntry.for_file(path)
        index = entry.index()
        if index is not None:
            meta = index["meta"]
            return _Prepared(path, meta, dict(index["rows"]), _lisa_field_dtypes(meta.get("format")),
                             entry=entry, index=index, cache_dir=str(entry.directory))
        tt = read_uncached(path, detect_format(path), None)
        entry.store(tt)
    rows = {event: table.num_rows for event, table in tt.tables.items()}
    return _Prepared(path, tt.meta, rows, _lisa_field_dtypes(tt.meta.get("format")), loaded=dict(tt.tables),
                     cache_dir=(tt.meta.get("cache") or {}).get("directory"))


def prepare_trace(path: str, cache: bool) -> _Prepared:
    """The tables of ``path`` as the parser serves them, read once per file version."""
    st = os.stat(path)
    # the cache's place too: a prepared trace points into one cache (LISA's swap is there)
    key = (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
           os.fspath(cache_root()) if cache else None)
    prepared = _PREPARED.get(key)
    if prepared is None:
        prepared = _load(path, cache)
        problems = prepared.meta.get("warnings") or []
        if problems:
            # the frames hold everything before the damage; say so on each load
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            first = problems[0] if path in problems[0] else f"{path}: {problems[0]}"
            warnings.warn(f"trace partly unreadable: {first}{more}", TraceDamageWarning, stacklevel=3)
        if prepared.meta.get("format") != "tracedat" and "tracing_mark_write" in prepared.rows \
                and "print" not in prepared.rows:
            prepared.aliases["print"] = "tracing_mark_write"
            prepared.rows["print"] = prepared.rows["tracing_mark_write"]
        # keep the two most recent traces (e.g. baseline and patched kernel):
        # tables and frames of big traces are large
        while len(_PREPARED) >= _KEEP_PREPARED:
            del _PREPARED[next(iter(_PREPARED))]
    else:
        del _PREPARED[key]  # re-inserted below as the most recent
    _PREPARED[key] = prepared
    return prepared


def _kallsyms(prepared: _Prepared) -> tuple[list[int], list[str]]:
    """Sorted kernel symbol addresses and names recorded in the trace (trace.dat only)."""
    if prepared.symbols is None:
        pairs = []
        if prepared.meta.get("format") == "tracedat":
            pairs = open_tracedat(prepared.path).kallsyms
        pairs = sorted((int(a), str(n)) for a, n in pairs if int(a))
        prepared.symbols = ([a for a, _ in pairs], [n for _, n in pairs])
    return prepared.symbols


def _resolve_ip(prepared: _Prepared, ips: pd.Series, with_offset: bool = False) -> pd.Series:
    """An address as trace-cmd prints it for ``%ps``: the symbol containing it, else hex.

    With ``with_offset`` (``%pS``/``%pF``), the offset into the symbol
    follows: ``name+0x1c``, as libtraceevent's ``print_function()`` does.
    """
    if not pd.api.types.is_integer_dtype(ips.dtype):
        return ips.astype("string")
    addrs, names = _kallsyms(prepared)
    resolved = {}
    for ip in pd.unique(ips):
        if pd.isna(ip):
            continue
        i = bisect.bisect_right(addrs, int(ip)) - 1
        # libtraceevent's function map ends with a sentinel: past the last
        # symbol only an exact match resolves
        inside = 0 <= i < len(addrs) - 1 or (0 <= i and addrs[i] == ip)
        if not inside:
            resolved[ip] = f"0x{int(ip):x}"
        else:
            resolved[ip] = f"{names[i]}+0x{int(ip) - addrs[i]:x}" if with_offset else names[i]
    return ips.map(resolved).astype("string")


def _symbol_fields(prepared: _Prepared, event: str) -> dict[str, str]:
    """Fields of ``event`` its print fmt shows as symbols (``%ps``...), trace.dat only.

    ``trace-cmd report`` prints them as symbol names, which is what LISA's own
    parser returns; the Arrow tables keep the raw address.
    """
    if prepared.meta.get("format") != "tracedat":
        return {}
    if prepared.symbol_fields is None:
        prepared.symbol_fields = {fmt.name: fmt.symbol_fields
                                  for fmt in open_tracedat(prepared.path).events.values()}
    return prepared.symbol_fields.get(event, {})


def _convert_inferred(series: pd.Series) -> pd.Series:
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_float_dtype(dtype):
        return series
    if pd.api.types.is_integer_dtype(dtype):
        if dtype == np.uint64 and series.size and series.max() > np.iinfo(np.int64).max:
            return series
        return series.astype("int64") if not series.isna().any() else series.astype("Int64")
    if dtype == object and series.map(lambda v: isinstance(v, str) or v is None).all():
        return series.astype("string")
    return series


def _as_bytes(series: pd.Series) -> pd.Series:
    return series.map(lambda v: v.encode("utf-8", "surrogateescape") if isinstance(v, str) else v).astype(object)


def _frame(prepared: _Prepared, event: str) -> pd.DataFrame:
    table = prepared.table(event)
    df = table.to_pandas(types_mapper={}.get)
    df.index = pd.Index(prepared.lisa_times()[event], name="__timestamp")
    df = df.drop(columns="__timestamp")
    header = {"__comm": df["__comm"].astype("string"), "__pid": df["__pid"].astype("uint32"),
              "__cpu": df["__cpu"].astype("uint32")}
    fields = [c for c in df.columns if c not in header]
    described = prepared.field_dtypes.get(event)
    if event not in _TEXT_EVENTS:  # their ip is resolved below
        for name, letter in _symbol_fields(prepared, event).items():
            # LISA reads some such fields as numbers (funcgraph_entry.func: uint64)
            if name in df.columns and (described is None or described.get(name) in (None, "string")):
                df[name] = _resolve_ip(prepared, df[name], with_offset=letter in "SF")
    columns = dict(header)
    if event in _TEXT_EVENTS:
        content = _TEXT_EVENTS[event]
        for name in fields:
            if name == "ip":
                columns["ip"] = _resolve_ip(prepared, df["ip"])
            elif name == content:
                columns[name] = _as_bytes(df[name])
            elif name != "fmt":
                columns[name] = _convert_inferred(df[name])
    elif described is not None:
        for name, dtype in described.items():
            if name not in df.columns:
                continue
            if dtype == "bytes":  # LISA's text parsers hand over the matched bytes
                columns[name] = _as_bytes(df[name])
            else:
                columns[name] = _datautils.series_convert(df[name], dtype) if dtype else df[name]
    else:
        for name in fields:
            columns[name] = _convert_inferred(df[name])
    out = pd.DataFrame(columns, index=df.index)
    # time fix-up can reorder rows only if the reader's order was not the record order
    if not out.index.is_monotonic_increasing:
        out = out.sort_index(kind="stable")
    return out


class LisaExtTraceParser(_lisa_trace.TraceParserBase):
    """LISA trace parser reading any format :func:`lisa_ext.trace.read_trace` knows.

    Use through :func:`lisa_ext.trace.load_trace`, or directly::

        Trace("trace.dat", parser=LisaExtTraceParser)

    :param path: trace.dat, text or systrace HTML file.
    :param events: events LISA intends to parse (all are converted anyway:
        the converted tables are cached as a whole).
    :param needed_metadata: metadata keys LISA will ask for.
    :param cache: use the content-keyed parquet cache of
        :mod:`lisa_ext.trace.cache`.
    """

    METADATA_KEYS = list(_lisa_trace.TraceParserBase.METADATA_KEYS)

    def __init__(self, path, events=None, needed_metadata=None, cache=True):
        super().__init__(events, needed_metadata=needed_metadata)
        if path is None:
            raise ValueError("LisaExtTraceParser needs the path of a trace file")
        self._prepared = prepare_trace(os.fspath(path), cache)

    @property
    def _available(self) -> set[str]:
        return {e for e, n in self._prepared.rows.items() if n}

    def get_metadata(self, key):
        prepared = self._prepared
        if key == "time-range":
            times = prepared.lisa_times()
            if not times:
                return (0.0, 0.0)
            # fixed times increase in record order: min is the first record, max the last
            return (float(min(t.min() for t in times.values())), float(max(t.max() for t in times.values())))
        if key == "cpus-count":
            return int(prepared.meta["cpus"])
        if key == "available-events":
            return sorted(self._available)
        if key == "symbols-address":
            addrs, names = _kallsyms(prepared)
            if addrs:
                return dict(zip(addrs, names))
        return super().get_metadata(key)

    def parse_event(self, event):
        prepared = self._prepared
        if not prepared.rows.get(event):
            raise _lisa_trace.MissingTraceEventError([event], available_events=self._available)
        frame = prepared.frames.get(event)
        if frame is None:
            frame = prepared.frames[event] = _frame(prepared, event)
        # LISA may modify what we return (index normalisation, categories)
        return frame.copy(deep=True)
