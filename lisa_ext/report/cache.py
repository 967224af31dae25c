"""Content-addressed cache of the report's expensive products.

A report re-render must cost seconds, but drawing 24 figures through
holoviews/matplotlib and running LISA's analyses over every trace costs half a
minute. Both are pure functions of their inputs, so their products are stored
under ``$LISA_EXT_CACHE/report`` (default ``~/.cache/lisa-ext/report``), keyed
by a SHA-256 of everything they depend on: the data (frames hashed by content),
the options, the source of the code that draws or analyses them and the
versions of the libraries it uses. A hit is the very bytes a miss would write,
so byte-stable outputs stay byte-stable; entries are written aside and renamed
into place, so concurrent reports never read half a file.

Layout::

    report/
      figures/<key>.png|.svg      one exported figure
      html/<key>.html             one figures.html page
      trace-findings/<key>/       one trace's TraceFindings (JSON + parquet)
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
from importlib import metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from lisa_ext import workbench
from lisa_ext.trace import PLATFORM_FILE
from lisa_ext.trace.cache import file_digest

__all__ = ["TraceFindings", "cache_root", "cached_frame", "code_digest", "digest", "file_digest", "has_findings",
           "library_versions", "load_findings", "store_bytes", "store_findings", "store_json", "trace_key"]

#: bumped when the layout or the key recipe changes
CACHE_FORMAT = "lisa-ext-report-1"


def cache_root() -> Path:
    """``$LISA_EXT_CACHE/report``, else ``~/.cache/lisa-ext/report``."""
    return workbench.cache_root() / "report"


def _feed(h, value: Any) -> None:
    """Hash ``value`` unambiguously: type tags and lengths keep ``("ab",)`` and
    ``("a", "b")`` apart; frames hash by columns, dtypes, index and values."""
    if isinstance(value, pd.DataFrame):
        h.update(b"F")
        _feed(h, [str(c) for c in value.columns])
        _feed(h, [str(t) for t in value.dtypes])
        h.update(pd.util.hash_pandas_object(value, index=True).to_numpy().tobytes())
    elif isinstance(value, pd.Series):
        _feed(h, value.to_frame())
    elif isinstance(value, np.ndarray):
        h.update(b"A" + str(value.dtype).encode() + repr(value.shape).encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        h.update(b"D%d:" % len(value))
        for k, v in value.items():
            _feed(h, k)
            _feed(h, v)
    elif isinstance(value, (list, tuple)):
        h.update(b"L%d:" % len(value))
        for v in value:
            _feed(h, v)
    elif value is None or isinstance(value, (str, int, float, bool, np.generic)):
        text = repr(value).encode()
        h.update(b"S%d:" % len(text) + text)
    else:
        raise TypeError(f"cannot hash a {type(value).__name__} for the report cache")


def digest(*parts: Any) -> str:
    """SHA-256 (hex) of ``parts`` (frames, arrays, containers and scalars)."""
    h = hashlib.sha256(CACHE_FORMAT.encode())
    for part in parts:
        _feed(h, part)
    return h.hexdigest()


def code_digest(paths: Iterable[Path]) -> str:
    """SHA-256 of source files (sorted by path): a code change invalidates its products."""
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def library_versions(*dists: str) -> dict[str, str]:
    """Installed version of each distribution (``"-"`` when absent)."""
    out = {}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "-"
    return out


def store_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (aside, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def store_json(path: Path, value: Any) -> None:
    store_bytes(path, json.dumps(value, sort_keys=True).encode())


def trace_key(trace: Path) -> str:
    """Key of what the analyses derive from ``trace``: its content and its platform's (the
    ``platform.yml`` beside it, which load_trace gives the trace), the analysis and
    trace-loading code, the library versions."""
    return _findings_key(trace)


def _findings_key(trace: Path) -> str:
    package = Path(__file__).resolve().parents[1]
    code = [package / "report" / "traces.py", package / "compat.py",
            *(package / "analysis").rglob("*.py"), *(package / "trace").rglob("*.py"),
            *(package / "trace").glob("*.c")]
    platform = Path(trace).with_name(PLATFORM_FILE)
    content = [file_digest(trace), *([file_digest(platform)] if platform.is_file() else [])]
    return digest(*content, code_digest(code), library_versions("lisa-linux", "pandas", "numpy", "pyarrow"))


@dataclass
class TraceFindings:
    """What the report takes from one trace (:mod:`lisa_ext.report.traces` computes it).

    Defined here, beside its cache, so that a report whose traces are all cached
    never imports the analyses, hence LISA (seconds of imports).
    """

    #: (name, value, unit, lower_is_better)
    metrics: list[tuple[str, float, str, bool]] = field(default_factory=list)
    #: frame name -> data for figures
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)


def has_findings(trace: Path) -> bool:
    """Whether ``trace``'s findings are cached (without reading them)."""
    return (cache_root() / "trace-findings" / _findings_key(trace) / "findings.json").is_file()


def load_findings(trace: Path) -> tuple[TraceFindings, list[str]] | None:
    """The cached ``(TraceFindings, notes)`` of ``trace.dat``, or None."""
    entry = cache_root() / "trace-findings" / _findings_key(trace)
    try:
        index = json.loads((entry / "findings.json").read_text())
        frames = {name: pd.read_parquet(entry / f"{name}.parquet") for name in index["frames"]}
    except (OSError, ValueError, KeyError):
        return None
    metrics = [(name, value, unit, lib) for name, value, unit, lib in index["metrics"]]
    return TraceFindings(metrics=metrics, frames=frames), list(index["notes"])


def store_findings(trace: Path, findings, notes: list[str]) -> None:
    """Keep one trace's findings (metrics, notes, frames) for the next report."""
    root = cache_root() / "trace-findings"
    entry = root / _findings_key(trace)
    if entry.exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".store-"))
    try:
        for name, frame in findings.frames.items():
            frame.to_parquet(tmp / f"{name}.parquet")
        store_json(tmp / "findings.json", {"metrics": [list(m) for m in findings.metrics],
                                           "notes": notes, "frames": list(findings.frames)})
        os.rename(tmp, entry)
    except OSError:
        if not entry.exists():
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def cached_frame(trace: Path, parts: tuple, compute, use_cache: bool = True) -> pd.DataFrame:
    """``compute()``, a frame derived from ``trace`` by the analyses, kept under
    ``trace-frames/`` keyed like the trace findings plus ``parts`` (analysis,
    method, options): a notebook re-render reads it back without loading LISA.
    Frames parquet cannot hold (mixed object columns) are simply not kept."""
    try:
        key = digest(_findings_key(trace), list(parts)) if use_cache else None
    except TypeError:  # an option we cannot hash (e.g. a Platform object): not cached
        key = None
    if key is None:
        return compute()
    entry = cache_root() / "trace-frames" / f"{key}.parquet"
    try:
        return pd.read_parquet(entry)
    except (OSError, ValueError):
        pass
    frame = compute()
    buffer = io.BytesIO()
    try:
        frame.to_parquet(buffer)
    except (ValueError, TypeError, NotImplementedError):  # pyarrow's ArrowInvalid/TypeError
        return frame
    store_bytes(entry, buffer.getvalue())
    return frame
