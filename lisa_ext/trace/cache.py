"""Parquet cache of converted traces, keyed by the content of the trace file.

A trace is converted once; later loads read one parquet file per event
(memory-mapped) instead of decoding the trace again, and only the events (and
columns) they need: :mod:`lisa_ext.trace.lisa_parser` reads the timestamps of
every event but the fields of the requested ones only. The key is the SHA-256 of
the file's bytes (:func:`file_digest`, computed once per file and process, the
report's caches key on it too) plus :data:`CACHE_FORMAT` (bumped whenever a
reader's output changes), so a file modified in place, or another file at the
same path, is never served stale, and copies of one trace share an entry.

Layout, under ``$LISA_EXT_CACHE/traces`` (``~/.cache/lisa-ext/traces``)::

    <key[:2]>/<key>/meta.json          TraceTables.meta, event -> file and event -> rows
    <key[:2]>/<key>/events/<n>.parquet one table per event (+ ``__line`` for text)

Entries are written to a temporary directory renamed into place, so a crash or
a concurrent writer never leaves a half-written entry behind; an entry found
damaged anyway is removed and the trace converted again. Nothing is
evicted automatically: remove the directory (or call :func:`clear`) to reclaim
space.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from lisa_ext.errors import UserError
from lisa_ext.trace.tables import TraceTables
from lisa_ext.workbench import cache_root

__all__ = ["CACHE_FORMAT", "STATISTICS_COLUMNS", "cache_dir", "content_key", "file_digest", "TraceCacheEntry",
           "CacheEntryDamaged", "clear", "parquet_options"]

# Deferred imports in this module: pyarrow/numpy (~0.5 s) load only when tables are built; `lisa-ext
# trace stats` never needs them.

#: Version of what is stored; part of every key.
CACHE_FORMAT = "lisa-ext-traces-3"  # 3: %ps fields as symbols in LISA frames, systrace text dumps
_LINE_COLUMN = "__line"


def cache_dir() -> Path:
    """Root of the trace cache: ``traces/`` under the cache root (``$LISA_EXT_CACHE``, else
    ``~/.cache/lisa-ext``: :func:`lisa_ext.workbench.cache_root`)."""
    return cache_root() / "traces"


#: (real path, device, inode, size, mtime) -> SHA-256: a file is hashed once per process
_DIGESTS: dict[tuple, str] = {}


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 (hex) of a file's content, computed once per process for a file that has not
    changed since (same device, inode, size and modification time)."""
    real = os.path.realpath(path)
    st = os.stat(real)
    ident = (real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    digest = _DIGESTS.get(ident)
    if digest is None:
        h = hashlib.sha256()
        with open(real, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        digest = _DIGESTS[ident] = h.hexdigest()
    return digest


#: the only columns given parquet statistics (min/max per row group): what readers filter
#: rows on. Statistics of every column cost a quarter of the writing.
STATISTICS_COLUMNS = ("__timestamp", "__cpu")


#: integer columns written as deltas: timestamps only grow, by little
DELTA_COLUMNS = ("__timestamp",)


def parquet_options(table, compression: str = "zstd") -> dict:
    """``pyarrow.parquet.write_table`` options for one event table, fast to write:
    dictionaries for strings only (task names repeat; integers gain little), deltas for
    :data:`DELTA_COLUMNS` (files 8 % smaller than plain values compressed, for less CPU),
    zstd at level 1 (~2x faster than its default level 3 here), statistics
    of :data:`STATISTICS_COLUMNS` only."""
    options = {"compression": compression,
               "use_dictionary": [f.name for f in table.schema if str(f.type) == "string"],
               "write_statistics": [c for c in STATISTICS_COLUMNS if c in table.column_names],
               "column_encoding": {f.name: "DELTA_BINARY_PACKED" for f in table.schema
                                   if f.name in DELTA_COLUMNS and str(f.type) in ("int32", "int64")}}
    if compression == "zstd":
        options["compression_level"] = 1
    return options


def content_key(path: str | os.PathLike) -> str:
    """The cache key of a trace file: SHA-256 of :data:`CACHE_FORMAT` and of the file's digest."""
    return hashlib.sha256(f"{CACHE_FORMAT}:{file_digest(path)}".encode()).hexdigest()


def clear() -> None:
    """Remove every cached trace."""
    shutil.rmtree(cache_dir(), ignore_errors=True)


class CacheEntryDamaged(UserError):
    """A cached table could not be read back (the entry has been removed)."""


@dataclass
class TraceCacheEntry:
    """The cache entry of one trace file (which may not exist yet)."""

    source: str
    key: str

    @classmethod
    def for_file(cls, path: str | os.PathLike) -> "TraceCacheEntry":
        path = os.fspath(path)
        try:
            return cls(path, content_key(path))
        except OSError as exc:
            raise UserError(f"{path}: cannot read: {exc.strerror}") from exc

    @property
    def directory(self) -> Path:
        return cache_dir() / self.key[:2] / self.key

    @property
    def exists(self) -> bool:
        return (self.directory / "meta.json").is_file()

    @staticmethod
    def select(tables: "TraceTables", events: Iterable[str] | None) -> "TraceTables":
        """The requested events of ``tables`` (all if ``None``); UserError if one is absent."""
        if events is None:
            return tables
        events = list(dict.fromkeys(events))
        missing = [e for e in events if e not in tables.tables]
        if missing:
            raise UserError(
                f"{tables.meta.get('source', '<trace>')}: requested event(s) "
                f"{', '.join(missing)} not in the trace; it has: {', '.join(tables.events)}"
            )
        return TraceTables({e: tables.tables[e] for e in events}, dict(tables.meta))

    def index(self) -> dict | None:
        """The entry's ``meta.json`` (``files``, ``rows`` per event, ``meta``), ``None`` on a miss.

        A damaged entry is discarded and counts as a miss.
        """
        try:
            with open(self.directory / "meta.json", encoding="utf-8") as f:
                stored = json.load(f)
            if not all(isinstance(stored[k], dict) for k in ("files", "rows", "meta")):
                raise TypeError("bad meta.json")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            self._discard()
            return None
        stored["meta"]["source"] = self.source
        stored["meta"]["cache"] = {"hit": True, "key": self.key, "directory": str(self.directory)}
        return stored

    def read_event(self, index: dict, event: str, columns: list[str] | None = None):
        """One stored event: ``(table, record line numbers or None)``.

        :param columns: read only these columns (the line numbers come along).
        :raises CacheEntryDamaged: the file is unreadable; the entry is discarded.
        """
        path = self.directory / "events" / index["files"][event]
        try:
            table = _read_parquet(path, columns)
        except (OSError, ValueError) as exc:  # pyarrow's errors on a damaged file are ValueErrors
            self._discard()
            raise CacheEntryDamaged(f"{self.source}: cached copy {path} is damaged ({exc}); load the trace again") from exc
        lines = None
        if _LINE_COLUMN in table.column_names:
            lines = table.column(_LINE_COLUMN).to_numpy()
            table = table.drop_columns([_LINE_COLUMN])
        return table, lines

    def load(self, events: Iterable[str] | None = None) -> "TraceTables | None":
        """The cached tables, or ``None`` on a miss (or a damaged entry)."""
        index = self.index()
        if index is None:
            return None
        files, meta = index["files"], index["meta"]
        wanted = list(files) if events is None else list(dict.fromkeys(events))
        missing = [e for e in wanted if e not in files]
        if missing:
            raise UserError(
                f"{self.source}: requested event(s) {', '.join(missing)} not in the trace; "
                f"it has: {', '.join(sorted(files))}"
            )
        tables = {}
        lines = {}
        try:
            for event in wanted:
                tables[event], event_lines = self.read_event(index, event)
                if event_lines is not None:
                    lines[event] = event_lines
        except CacheEntryDamaged:
            return None
        if lines:
            meta["record_lines"] = lines
        return TraceTables(tables, meta)

    def _discard(self) -> None:
        """Remove a damaged entry so that the trace is converted and stored again."""
        shutil.rmtree(self.directory, ignore_errors=True)

    def store(self, tables: "TraceTables") -> None:
        """Write ``tables`` (every event of the file) as this entry."""
        # deferred: see the note under __all__
        import pyarrow as pa
        import pyarrow.parquet as pq

        final = self.directory
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.key}.", dir=final.parent))
        try:
            (tmp / "events").mkdir()
            lines = tables.meta.get("record_lines") or {}
            files = {}
            jobs = []
            for n, (event, table) in enumerate(sorted(tables.tables.items())):
                if event in lines:
                    table = table.append_column(_LINE_COLUMN, pa.array(lines[event], type=pa.int64()))
                files[event] = f"{n}.parquet"
                jobs.append((table, tmp / "events" / files[event]))
            # parquet encoding releases the GIL: two writers, largest tables first
            with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
                for future in [pool.submit(pq.write_table, table, path, **parquet_options(table))
                               for table, path in sorted(jobs, key=lambda j: -j[0].nbytes)]:
                    future.result()
            meta = {k: v for k, v in tables.meta.items() if k not in ("record_lines", "cache")}
            rows = {event: table.num_rows for event, table in tables.tables.items()}
            with open(tmp / "meta.json", "w", encoding="utf-8") as f:
                json.dump({"files": files, "rows": rows, "meta": meta}, f, default=_json_default)
            try:
                os.rename(tmp, final)
            except OSError:
                if not self.exists:  # another process won the race: keep theirs
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        tables.meta["cache"] = {"hit": False, "key": self.key, "directory": str(final)}


def _read_parquet(path: Path, columns: list[str] | None = None):
    """Read one stored table, with its original schema.

    Strings are read as the dictionaries parquet stores them and then expanded:
    about twice cheaper in CPU than letting parquet expand them page by page.
    """
    # deferred: see the note under __all__
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    if columns is not None:
        keep = set(columns) | {_LINE_COLUMN}
        schema = pa.schema([f for f in schema if f.name in keep])
    strings = [f.name for f in schema if pa.types.is_string(f.type)]
    table = pq.read_table(path, columns=schema.names, memory_map=True, read_dictionary=strings or None)
    return table.cast(schema) if strings else table


def _json_default(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    raise TypeError(f"cannot store {type(value).__name__} in the trace cache metadata")
