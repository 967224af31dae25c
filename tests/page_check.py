"""The page check: what a reader of a rendered study page trips over, found in headless Chromium.

:func:`check_page` opens an exported notebook page (``lisa-ext study run`` output) with
``page_check.js`` added, lets its scripts and its iframes' bokeh plots draw, and returns the
findings, each a ``check``, ``where`` (cell, element) and ``detail``:

``clipped``
    an iframe whose document is larger than the frame, an output element scrolling or
    hiding its content, a figure wider than the page column;
``overlapping text``
    two text items of a matplotlib SVG figure whose glyphs overlap (boxes from the SVG the
    browser rendered);
``axis without unit``, ``idle states by number``, ``legend by number``
    a numeric axis (SVG or bokeh) whose label has no unit, idle states shown as 0/1/2, a
    legend of bare numbers;
``unreadable number``
    scientific notation (``1.4e+6``) in a figure or a table, tick values over five digits
    (kHz where MHz reads);
``raw identifier``, ``bare index``, ``unit twice``
    snake_case names in table headers (outside a page's allowed words), rows numbered 0..n-1,
    two units in one header;
``missing figure``
    a code cell tagged ``figure`` or calling ``show_figure`` that rendered no image, SVG or
    frame (a figure built but never displayed);
``log box``, ``duplicated parameters``, ``smoke banner``
    a warning, traceback or log line in an output, both papermill parameter cells shown, a
    smoke page not saying first that its numbers check the pipeline;
``code shown``
    a code cell's source on a page exported without ``--show-code`` (``show_code`` false);
``unit twice`` (in cells), ``broken word``, ``unbounded without reason``, ``mixed means``, ``duplicated rows``
    "(x) (y)" in a table cell, a name in a header cell broken across lines other than at a
    separator (``word-break: break-all``, ``overflow-wrap: anywhere``), an interval cell saying
    only "unbounded", one table quoting two kinds of mean (hmean beside amean), a row or an item
    twice in a table of knobs (a name broken in an output's text too);
``conclusion placeholder``
    a ``study new`` study's conclusion cell still the template's ``TODO conclusion`` (or empty).

It also returns where the page's tables and figures are (``regions``), which
``docs_screenshots`` crops.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pytest

import browser

__all__ = ["PageCheck", "check_page", "screenshot"]

_SCRIPT = Path(__file__).with_name("page_check.js")
_RESULT = re.compile(r'<pre id="lisa-page-check">(.*?)</pre>', re.S)


@dataclass
class PageCheck:
    findings: list[dict]
    #: how many iframes, SVG figures and their texts, bokeh plots and axes, tables and figure
    #: cells it checked
    seen: dict = field(default_factory=dict)
    regions: dict = field(default_factory=dict)
    height: int = 0

    def report(self) -> str:
        return "\n".join(f"- {f['check']}: {f['where']}: {f['detail']}" for f in self.findings)


def _with_check(page: Path, tmp: Path, options: dict) -> Path:
    text = page.read_text(encoding="utf-8")
    script = (f"<script>window.LISA_PAGE_CHECK_OPTIONS = {json.dumps(options)};</script>"
              f"<script>{_SCRIPT.read_text(encoding='utf-8')}</script>")
    at = text.rfind("</body>")
    text = text[:at] + script + text[at:] if at >= 0 else text + script
    checked = tmp / page.name
    checked.write_text(text, encoding="utf-8")
    return checked


def _chromium(args: Sequence[str], tmp: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    base = [browser.chromium(), "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", f"--user-data-dir={tmp}/profile", "--hide-scrollbars"]
    return subprocess.run([*base, *args], capture_output=True, text=True, errors="replace", timeout=timeout)


def _need_chromium() -> None:
    if browser.chromium() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium missing in CI (scripts/install-system-packages.sh installs it)")
        pytest.skip("chromium is not installed (scripts/install-system-packages.sh)")


def check_page(page: Path, *, smoke: bool = False, allowed_header_words: Sequence[str] = (),
               show_code: bool = False, width: int = 1280, budget_ms: int = 30000) -> PageCheck:
    """The findings of ``page_check.js`` on ``page`` (see the module docstring); ``show_code``:
    the page was exported with its code (``--show-code``). Skips the test where Chromium is not
    installed (fails in CI)."""
    _need_chromium()
    options = {"smoke": smoke, "allowed_header_words": list(allowed_header_words), "show_code": show_code,
               "settle_ms": 3000}
    with tempfile.TemporaryDirectory(prefix="page-check-") as tmp:
        checked = _with_check(Path(page), Path(tmp), options)
        proc = _chromium([f"--window-size={width},1200", f"--virtual-time-budget={budget_ms}",
                          "--dump-dom", checked.resolve().as_uri()], Path(tmp))
    match = None
    for match in _RESULT.finditer(proc.stdout):  # the last one: the page may quote the tag
        pass
    if match is None:
        raise RuntimeError(f"{page}: the page check did not finish in {budget_ms} ms of page time: "
                           f"{proc.stderr[-2000:]}")
    result = json.loads(html.unescape(match.group(1)))
    return PageCheck(result["findings"], result["seen"], result["regions"], result["height"])


def screenshot(page: Path, out: Path, *, width: int = 1280, height: int | None = None,
               budget_ms: int = 30000) -> Path:
    """A PNG of the whole page (``height``: the page's, from a :func:`check_page` run)."""
    if height is None:
        height = check_page(page, width=width, budget_ms=budget_ms).height
    with tempfile.TemporaryDirectory(prefix="page-shot-") as tmp:
        proc = _chromium([f"--window-size={width},{height}", f"--virtual-time-budget={budget_ms}",
                          f"--screenshot={out.resolve()}", Path(page).resolve().as_uri()], Path(tmp))
    if not out.is_file():
        raise RuntimeError(f"{page}: chromium wrote no screenshot: {proc.stderr[-2000:]}")
    return out
