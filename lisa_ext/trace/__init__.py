"""Trace ingestion: trace.dat, ftrace text and systrace HTML -> Arrow tables -> LISA.

* :func:`read_trace` (:mod:`lisa_ext.trace.read`) reads any supported file into a
  :class:`~lisa_ext.trace.tables.TraceTables` (one typed Arrow table per
  event), choosing the reader from the file's content: trace.dat
  (:mod:`lisa_ext.trace.tracedat`), systrace HTML
  (:mod:`lisa_ext.trace.systrace`) or text (:mod:`lisa_ext.trace.text`).
* :func:`load_trace` returns a real :class:`lisa.trace.Trace` on top of it,
  through :class:`lisa_ext.trace.lisa_parser.LisaExtTraceParser`, so every
  LISA analysis runs on it unchanged.

Both use the parquet cache of :mod:`lisa_ext.trace.cache` (keyed by the
file's content), so loading a trace a second time costs a small fraction of
the first. Importing this package is cheap: pyarrow, pandas and LISA are
imported by the functions that need them.
"""

from __future__ import annotations

import functools
import hashlib
import os
from typing import TYPE_CHECKING, Any

from lisa_ext.errors import UserError
from lisa_ext.trace.read import detect_format, read_trace

if TYPE_CHECKING:
    from lisa.trace import Trace


__all__ = ["PLATFORM_FILE", "detect_format", "load_trace", "read_trace"]

#: LISA platform info of the target a trace was recorded on, beside the trace (LISA's own
#: convention: its test bundles save ``platform.yml`` with their traces)
PLATFORM_FILE = "platform.yml"

# Deferred imports in this module: it is the parent of every lisa_ext.trace module, so
# whatever it imports at the top, every `lisa-ext trace ...` command pays (the LISA parser
# costs seconds). Nothing below it imports it back: :mod:`~lisa_ext.trace.lisa_parser`
# reads through :mod:`~lisa_ext.trace.read`.

def load_trace(
    path: str | os.PathLike, *, cache: bool = True, loader: str = "fast", **kwargs: Any
) -> "Trace":
    """Load a trace as a :class:`lisa.trace.Trace`, the fast, cached way.

    The one trace loader of lisa-ext: ``lisa-ext analyse``, ``lisa-ext trace``,
    the report and the studies all call it. Its ``trace.ana`` has lisa-ext's
    analyses (:mod:`lisa_ext.lisa_hook` registers them when LISA builds it).

    :param path: any file :func:`read_trace` reads.
    :param cache: use the parquet cache (see :func:`read_trace`).
    :param loader: ``"fast"`` (our parser) or ``"lisa"`` (LISA's own parsers,
        for cross-checking; no cache, no swap next to the trace).
    :param kwargs: forwarded to :class:`lisa.trace.Trace` (``events``,
        ``normalize_time``, ``plat_info``, ...). With the cache, LISA's own
        on-disk swap of the frames it builds lives in the cache entry
        (``lisa-swap``), so later loads read those frames back; without the
        cache LISA's swap is off unless ``enable_swap``/``swap_dir`` are passed
        (LISA would write a hidden directory next to the trace). Without a
        ``plat_info``, a ``platform.yml`` beside the trace (LISA's PlatformInfo
        format, which the campaign runner writes into each run) is the trace's.
    :raises UserError: if the file does not exist or cannot be read as a trace
        at all; damage that leaves part of it readable gives a
        :class:`~lisa_ext.trace.lisa_parser.TraceDamageWarning` instead.
    """
    # deferred: pandas, pyarrow and LISA load only when a trace does (see above)
    from lisa_ext.compat import import_lisa
    from lisa_ext.trace.lisa_parser import LisaExtTraceParser, prepare_trace

    path = os.fspath(path)
    if not os.path.exists(path):
        raise UserError(f"{path}: no such trace file")
    if loader == "lisa":
        return _load_with_lisa_parsers(path, **kwargs)
    if loader != "fast":
        raise UserError(f"trace loader must be fast or lisa, not {loader!r}")
    lisa_trace = import_lisa("lisa.trace")
    # read (or fetch from the cache) now, so that errors and damage warnings
    # come from this call rather than from a later df_event() inside LISA
    prepared = prepare_trace(path, cache)
    if prepared.cache_dir and not {"enable_swap", "swap_dir"} & kwargs.keys():
        # LISA's swap, inside the content-keyed entry: frames built once
        # (ours, sanitized, windowed) are read back by the next load_trace
        kwargs["swap_dir"] = os.path.join(prepared.cache_dir, f"lisa-swap-{_analysis_code_digest()}")
        os.makedirs(kwargs["swap_dir"], exist_ok=True)
        kwargs.setdefault("max_swap_size", max(1 << 30, 20 * os.stat(path).st_size))
    else:
        kwargs.setdefault("enable_swap", False)
    parser = LisaExtTraceParser if cache else functools.partial(LisaExtTraceParser, cache=False)
    platform_yml = os.path.join(os.path.dirname(path), PLATFORM_FILE)
    if "plat_info" not in kwargs and os.path.isfile(platform_yml):
        kwargs["plat_info"] = import_lisa("lisa.platforms.platinfo").PlatformInfo.from_yaml_map(platform_yml)
    return lisa_trace.Trace(path, parser=parser, **kwargs)


@functools.cache
def _analysis_code_digest() -> str:
    """Digest of lisa_ext's analysis code: LISA keys the results it swaps out by method name and
    arguments only, so results of an older version of our analyses must not be read back."""
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "analysis")
    h = hashlib.sha256()
    for dirpath, _dirs, files in sorted(os.walk(root)):
        for name in sorted(f for f in files if f.endswith(".py")):
            with open(os.path.join(dirpath, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:12]


def _load_with_lisa_parsers(path: str, **kwargs: Any) -> "Trace":
    from lisa_ext.compat import import_lisa  # deferred: see load_trace

    lisa_trace = import_lisa("lisa.trace")
    # LISA's swap would be written next to the trace (often a read-only input).
    kwargs.setdefault("enable_swap", False)
    if path.endswith(".html"):
        kwargs.setdefault("parser", lisa_trace.SysTraceParser.from_html)
    return lisa_trace.Trace(path, **kwargs)
