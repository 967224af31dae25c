"""Reading a trace file of any supported format into Arrow tables, through the parquet cache.

:func:`read_trace` picks the reader from the file's content (:func:`detect_format`):
trace.dat (:mod:`lisa_ext.trace.tracedat`), systrace HTML
(:mod:`lisa_ext.trace.systrace`) or text (:mod:`lisa_ext.trace.text`), and serves
or fills the content-keyed cache (:mod:`lisa_ext.trace.cache`). The LISA parser
(:mod:`lisa_ext.trace.lisa_parser`) reads through it too.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterable

from lisa_ext.errors import UserError

if TYPE_CHECKING:
    from lisa_ext.trace.tables import TraceTables

__all__ = ["detect_format", "read_trace", "read_uncached"]

# Deferred imports in this module: `import lisa_ext.trace` imports it, so whatever it imports
# at the top every `lisa-ext trace ...` command pays (the readers and the cache ~0.1 s
# together); each function imports the one reader it picks.

_TRACEDAT_MAGIC = b"\x17\x08\x44tracing"


def detect_format(path: str | os.PathLike) -> str:
    """``"tracedat"``, ``"systrace"`` or ``"text"``, from the first bytes of the file."""
    from lisa_ext.trace.systrace import looks_like_systrace  # deferred: see the note above
    from lisa_ext.trace.text import looks_like_text_trace

    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from exc
    if head.startswith(_TRACEDAT_MAGIC):
        return "tracedat"
    if looks_like_systrace(head):
        return "systrace"
    if looks_like_text_trace(head):
        return "text"
    raise UserError(
        f"{path}: not a trace: expected a trace-cmd trace.dat (magic \\x17\\x08Dtracing), "
        "ftrace text or systrace HTML at offset 0"
    )


def read_uncached(path: str, fmt: str, events: Iterable[str] | None) -> "TraceTables":
    """The tables of ``path`` in format ``fmt`` (:func:`detect_format`), read without the cache."""
    if fmt == "tracedat":
        from lisa_ext.trace.tracedat import read_tracedat  # deferred: see the note above

        return read_tracedat(path, events=events)
    if fmt == "systrace":
        from lisa_ext.trace.systrace import read_systrace  # deferred: see the note above

        return read_systrace(path, events=events)
    from lisa_ext.trace.text import read_text  # deferred: see the note above

    return read_text(path, events=events)


def read_trace(
    path: str | os.PathLike, events: Iterable[str] | None = None, *, cache: bool = True
) -> "TraceTables":
    """Read a trace file into one typed Arrow table per event.

    :param path: trace.dat (versions 6 and 7), tracefs / ``trace-cmd report``
        text, or systrace/atrace HTML.
    :param events: event names to return; all when ``None``. A requested event
        absent from the file raises :class:`~lisa_ext.errors.UserError`.
    :param cache: serve from / store in the content-keyed parquet cache
        (:mod:`lisa_ext.trace.cache`). The cache always holds every event of
        the file, so a later call asking for other events is served too.
    """
    from lisa_ext.trace.cache import TraceCacheEntry  # deferred: see the note above

    path = os.fspath(path)
    fmt = detect_format(path)
    if not cache:
        return read_uncached(path, fmt, events)
    entry = TraceCacheEntry.for_file(path)
    tables = entry.load(events)
    if tables is None:
        tables = read_uncached(path, fmt, None)
        entry.store(tables)
        tables = entry.select(tables, events)
    return tables
