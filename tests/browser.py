"""Headless Chromium for tests: a page's screenshot and its console messages.

Chromium runs offline (no background networking, no component updates, its own
profile directory) with its console logged to stderr; :func:`load` returns the
screenshot as an RGB array and the console lines (``CONSOLE`` log records and
uncaught exceptions).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["Page", "chromium", "colored_pixels", "load", "without_scripts"]

_CONSOLE = re.compile(r":(?:INFO|WARNING|ERROR|VERBOSE\d*):CONSOLE[^\]]*\]\s*(.*)")


@dataclass
class Page:
    pixels: np.ndarray  # height x width x 3, uint8
    console: list[str]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def without_scripts(html: str) -> str:
    """``html`` with every script removed (also inside ``srcdoc`` iframes): what
    the page shows when nothing draws through JavaScript."""
    html = re.sub(r"<script\b.*?</script>", "", html, flags=re.S | re.I)
    return re.sub(r"&lt;script\b.*?&lt;/script&gt;", "", html, flags=re.S | re.I)


def load(path: Path, width: int = 1280, height: int = 4000, javascript: bool = True,
         budget_ms: int = 20000) -> Page:
    """Open ``path`` (file://) in headless Chromium, let its scripts run for
    ``budget_ms`` of virtual time, and return the screenshot and console. With
    ``javascript=False`` the page is loaded with its scripts removed."""
    with tempfile.TemporaryDirectory(prefix="chromium-") as tmp:
        shot = Path(tmp) / "shot.png"
        if not javascript:
            stripped = Path(tmp) / path.name
            stripped.write_text(without_scripts(path.read_text(encoding="utf-8")),
                                encoding="utf-8")
            path = stripped
        args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", f"--user-data-dir={tmp}/profile",
                "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
                f"--window-size={width},{height}", f"--virtual-time-budget={budget_ms}",
                f"--screenshot={shot}"]
        proc = subprocess.run([*args, path.resolve().as_uri()], capture_output=True, text=True,
                              errors="replace", timeout=300)
        if not shot.is_file():
            raise RuntimeError(f"chromium wrote no screenshot: {proc.stderr[-2000:]}")
        pixels = np.asarray(Image.open(shot).convert("RGB"))
    console = [m.group(1) for line in proc.stderr.splitlines() if (m := _CONSOLE.search(line))]
    return Page(pixels, console)


def colored_pixels(pixels: np.ndarray) -> np.ndarray:
    """Mask of saturated pixels: plot lines, bands and dots, not text or grid."""
    rgb = pixels.astype(np.int16)
    return (rgb.max(axis=2) - rgb.min(axis=2)) > 60
