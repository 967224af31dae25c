"""What the fuzzer and the corpus replay run on each damaged file, and what counts as a bug.

The readers are called as ``lisa-ext trace convert`` calls them: a trace.dat
through :class:`~lisa_ext.trace.tracedat.TraceDatReader` (every event's table;
on uncompressed data that includes the record-count walk of ``trace stats``),
text and systrace through :func:`~lisa_ext.trace.read_trace`. Tables, or one :class:`UserError` line that
names the file, are the two acceptable outcomes; anything else raised is a bug
(:class:`Finding`), and so is a message spanning lines or naming no file.
"""

from __future__ import annotations

from lisa_ext.errors import UserError
from lisa_ext.trace import read_trace
from lisa_ext.trace.tracedat import MAGIC, TraceDatError, TraceDatReader

__all__ = ["Finding", "read_any"]


class Finding(AssertionError):
    """A reader misbehaved on a damaged file."""


def read_any(path: str) -> dict:
    """``{"rows": n, "warnings": n}`` or ``{"error": message}``; raises :class:`Finding` on a bug."""
    with open(path, "rb") as f:
        tracedat = f.read(len(MAGIC)) == MAGIC
    try:
        if tracedat:
            tables = TraceDatReader(path).read()
        else:
            tables = read_trace(path, cache=False)
    except UserError as exc:
        message = str(exc)
        if tracedat and not isinstance(exc, TraceDatError):
            raise Finding(f"trace.dat error is a {type(exc).__name__}, not a TraceDatError: {message}") from exc
        if "\n" in message or path not in message:
            raise Finding(f"error is not one line naming the file: {message!r}") from exc
        return {"error": message}
    rows = sum(t.num_rows for t in tables.tables.values())
    return {"rows": rows, "warnings": len(tables.meta.get("warnings", []))}
