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

_TRACE_DATA = re.compile(
    r"<script[^>]*class=\"trace-data\"[^>]*>(?P<body>.*?)</script>", re.S | re.I
)
_JS_STRING = re.compile(r"var\s+linuxPerfData\s*=\s*\"(?P<body>[^\"\\]*(?:\\.[^\"\\]*)*)\"", re.S)
_JS_ESCAPE = re.compile(r"\\(.)", re.S)
_JS_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\n": "", "0": "\0"}


def looks_like_systrace(head: bytes) -> bool:
    """True if the first bytes of a file look like an HTML page."""
    start = head.lstrip()[:512].lower()
    return start.startswith((b"<!doctype html", b"<html")) or b"<head" in start


def _inflate(body: str) -> str | None:
    try:
        raw = base64.b64decode("".join(body.split()), validate=True)
        return zlib.decompress(raw, zlib.MAX_WBITS | 32).decode("utf-8", "replace")
    except (binascii.Error, ValueError, zlib.error):
        return None


def extract_ftrace_text(html: str, source: str = "<html>") -> tuple[str, int]:
    """Return the ftrace text of a systrace page and the HTML line it starts on.

    :raises UserError: naming the file if the page holds no ftrace text.
    """
    for match in _TRACE_DATA.finditer(html):
        body = match["body"]
        stripped = body.lstrip()
        if stripped.startswith(("{", "[")):
            continue
        first_line = html.count("\n", 0, match.start("body")) + 1
        if looks_like_text_trace(stripped[:65536].encode()):
            return body, first_line
        inflated = _inflate(stripped)
        if inflated is not None and looks_like_text_trace(inflated[:65536].encode()):
            # line numbers inside compressed data cannot point into the HTML
            return inflated, 1
    match = _JS_STRING.search(html)
    if match is not None:
        text = _JS_ESCAPE.sub(lambda m: _JS_ESCAPES.get(m.group(1), m.group(1)), match["body"])
        return text, html.count("\n", 0, match.start("body")) + 1
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
