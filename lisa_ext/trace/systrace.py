"""Read Android systrace / atrace HTML: the ftrace text embedded in the page.

Mirrors how catapult's trace viewer finds its data
(``systrace/systrace/output_generator.py`` writes it,
``tracing/tracing/extras/importer/linux_perf/ftrace_importer.html`` reads it):

* current systrace: one ``<script class="trace-data" type="application/text">``
  block per data source; the ftrace one is plain text (``# tracer: nop`` then
  tracefs lines, possibly with the ``(tgid)`` column and ``d..3`` flags),
  others are JSON (``{"traceEvents": ...``) and are ignored. atrace may store
  the text zlib-compressed and base64-encoded: it is inflated first;
* old systrace: ``var linuxPerfData = "\\`` followed by the text as a
  JavaScript string literal, one ``...\\n\\`` per line.

The text is then parsed by :func:`lisa_ext.trace.text.parse_text_lines`, so
tables have the same shape as for text traces (``tracing_mark_write`` has a
``buf`` column holding the atrace markers such as ``B|123|doFrame``).
Errors and warnings name the line of the HTML file.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import zlib
from typing import Iterable

from lisa_ext.errors import UserError
from lisa_ext.trace.tables import TraceTables
from lisa_ext.trace.text import looks_like_text_trace, parse_text_lines

__all__ = ["read_systrace", "extract_ftrace_text", "looks_like_systrace"]

# Bounded attribute runs, and the closing tag found with str.find: every search stays linear
# in the page (a damaged page may hold thousands of unclosed "<script" tags).
_TRACE_DATA_OPEN = re.compile(r"<script[^>]{0,1000}class=\"trace-data\"[^>]{0,1000}>", re.I)
_JS_START = re.compile(r"var\s{1,100}linuxPerfData\s{0,100}=\s{0,100}\"")
_JS_BODY = re.compile(r"[^\"\\]*(?:\\.[^\"\\]*)*\"", re.S)
_JS_ESCAPE = re.compile(r"\\(.)", re.S)
_JS_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\n": "", "0": "\0"}
#: Compressed trace data may inflate to this many times its size, plus INFLATE_FREE_BYTES:
#: ftrace text deflates 5-10x; a page claiming more is a decompression bomb.
INFLATE_MAX_RATIO = 32
INFLATE_FREE_BYTES = 1 << 20


def looks_like_systrace(head: bytes) -> bool:
    """True if the first bytes of a file look like an HTML page."""
    start = head.lstrip()[:512].lower()
    return start.startswith((b"<!doctype html", b"<html")) or b"<head" in start


def _inflate(body: str, source: str, line: int) -> str | None:
    """The text of a zlib+base64 body, None if it is not one; a bomb raises UserError."""
    try:
        raw = base64.b64decode("".join(body.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    limit = INFLATE_MAX_RATIO * len(raw) + INFLATE_FREE_BYTES
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)
    try:
        text = inflater.decompress(raw, limit)
    except zlib.error:
        return None
    if inflater.unconsumed_tail or len(text) >= limit:
        raise UserError(
            f"{source}: line {line}: compressed trace data of {len(raw)} bytes inflates to more than {limit} "
            f"({INFLATE_MAX_RATIO} times its size plus 1 MiB): a decompression bomb, not read")
    return text.decode("utf-8", "replace")


def _trace_data_blocks(html: str):
    """(start of the body, body) of each <script class="trace-data"> block."""
    pos = 0
    while (match := _TRACE_DATA_OPEN.search(html, pos)) is not None:
        end = html.find("</script>", match.end())
        if end < 0:
            return
        yield match.end(), html[match.end() : end]
        pos = end


def extract_ftrace_text(html: str, source: str = "<html>") -> tuple[str, int]:
    """Return the ftrace text of a systrace page and the HTML line it starts on.

    :raises UserError: naming the file if the page holds no ftrace text, or a
        compressed one that would inflate past INFLATE_MAX_RATIO times its size.
    """
    for start, body in _trace_data_blocks(html):
        stripped = body.lstrip()
        if stripped.startswith(("{", "[")):
            continue
        first_line = html.count("\n", 0, start) + 1
        if looks_like_text_trace(stripped[:65536].encode()):
            return body, first_line
        inflated = _inflate(stripped, source, first_line)
        if inflated is not None and looks_like_text_trace(inflated[:65536].encode()):
            # line numbers inside compressed data cannot point into the HTML
            return inflated, 1
    start = _JS_START.search(html)
    body = _JS_BODY.match(html, start.end()) if start is not None else None
    if body is not None:
        text = _JS_ESCAPE.sub(lambda m: _JS_ESCAPES.get(m.group(1), m.group(1)), body[0][:-1])
        return text, html.count("\n", 0, start.end()) + 1
    raise UserError(
        f"{source}: no ftrace text found in this HTML page (looked for "
        "<script class=\"trace-data\"> blocks and a 'var linuxPerfData' string)"
    )


def read_systrace(path: str | os.PathLike, events: Iterable[str] | None = None) -> TraceTables:
    """Read a systrace/atrace HTML file (see the module docstring)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            html = f.read().decode("utf-8", "replace")
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from exc
    text, first_line = extract_ftrace_text(html, source=path)
    return parse_text_lines(
        text.splitlines(), source=path, events=events, fmt="systrace", first_line=first_line
    )
