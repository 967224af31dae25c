"""The in-memory result of reading a trace: one typed Arrow table per event.

Every reader of :mod:`lisa_ext.trace` (the native trace.dat decoder in
:mod:`lisa_ext.trace.tracedat`, and the text / systrace parsers) returns a
:class:`TraceTables`. This module only defines the container and its column
conventions, so that readers and consumers agree without importing each other.

Column conventions, identical for every table, in this order:

``__timestamp``  int64, nanoseconds in the raw trace clock (not rebased)
``__cpu``        int32, CPU whose ring buffer recorded the event
``__pid``        int32, ``common_pid`` of the event
``__comm``       string, the command of task ``__pid`` as ``trace-cmd report``
                 prints it (saved cmdlines / task info), ``"<...>"`` if unknown

then each event field, ``common_*`` fields excluded, in the order of the
event's format, named as in the format:

* signed / unsigned integers: ``int8`` .. ``int64`` / ``uint8`` .. ``uint64``
  of the field's size and sign; pointers the print fmt shows as symbols
  (``%ps``, ``%pS``, e.g. ``workqueue_execute_start.function``) stay raw
  addresses here: :mod:`lisa_ext.trace.lisa_parser` resolves them for LISA;
* fixed ``char[N]``: string, cut at the first NUL;
* ``__data_loc char[]``: string;
* other ``__data_loc`` arrays and fixed non-char arrays: ``list<int..>``.

Rows are sorted by timestamp; ties keep the order ``trace-cmd report`` prints.

Two events have a fixed shape:

* ``print`` (ftrace ``print``, e.g. ``tracing_mark_write``, rt-app markers):
  ``ip`` uint64, ``buf`` string with its trailing newline removed;
* ``bprint``: ``ip`` uint64, ``fmt`` string, ``buf`` string holding the text
  formatted exactly as ``trace-cmd report`` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pyarrow is imported lazily by the readers
    import pyarrow

__all__ = ["TraceTables", "COMMON_COLUMNS", "META_KEYS"]

#: Columns every event table starts with, in this order.
COMMON_COLUMNS: tuple[str, ...] = ("__timestamp", "__cpu", "__pid", "__comm")

#: Keys always present in :attr:`TraceTables.meta`.
META_KEYS: tuple[str, ...] = (
    "source",  # str: path of the trace file that was read
    "format",  # str: "tracedat" | "text" | "systrace"
    "cpus",  # int: number of CPUs in the trace
    "clock",  # str: trace clock ("local", "global", "mono", ... ; "unknown" if not recorded)
    "file_version",  # int: trace.dat file version (6 or 7); None for text formats
    "event_counts",  # dict[str, int]: rows per event *in the file*, not only the ones read
    "first_timestamp_ns",  # int | None: smallest __timestamp over all events in the file
    "last_timestamp_ns",  # int | None: largest __timestamp over all events in the file
)


@dataclass
class TraceTables:
    """Events of one trace, as typed Arrow tables.

    :param tables: event name (``sched_switch``, ``print``, ``bprint``,
        ``cpu_idle``, ...) -> table following the module's column conventions.
        Holds the events that were requested (or all events of the file when
        none were requested). An event requested but absent from the file is
        an error (:class:`lisa_ext.errors.UserError`), never an empty table;
        an event present in the file's formats but with no recorded row gives
        an empty, correctly typed table.
    :param meta: facts about the whole trace, with at least :data:`META_KEYS`.
        Readers may add keys (e.g. ``"warnings"``: list of str describing
        damage that was skipped, everything before it being kept).
    """

    tables: dict[str, "pyarrow.Table"] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, event: str) -> "pyarrow.Table":
        return self.tables[event]

    def __contains__(self, event: object) -> bool:
        return event in self.tables

    @property
    def events(self) -> list[str]:
        """Names of the events held, sorted."""
        return sorted(self.tables)

    def to_pandas(self, event: str) -> "Any":
        """One event as a pandas DataFrame (columns as in the Arrow table)."""
        return self.tables[event].to_pandas()
