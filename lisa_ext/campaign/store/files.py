"""How the store puts a file on disk and reads one back: writes synced and renamed into place (a
reader never sees half a file, a crash leaves the old file or the new one), JSON objects read
with a bound on their size."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lisa_ext.errors import SpecError

__all__ = ["MAX_JSON_BYTES", "fsync_dir", "fsync_tree", "read_json_object", "write_bytes", "write_json"]

#: the largest result.json or meta.json read: ours are kilobytes (a campaign directory may come
#: from anyone, and json.loads holds the whole file and more)
MAX_JSON_BYTES = 16 * 1024 * 1024


def read_json_object(path: Path) -> dict:
    """A JSON object from the store (result.json, meta.json): a bad file is a SpecError naming it."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            raise SpecError(path, "<file>", f"larger than {MAX_JSON_BYTES // 2**20} MiB; not one of ours")
        data = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(path, "<file>", f"cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(path, f"line {exc.lineno} column {exc.colno}",
                        f"not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise SpecError(path, "<top>", "nested too deeply to be one of ours") from None
    if not isinstance(data, dict):
        raise SpecError(path, "<top>", "expected a JSON object")
    return data


def write_json(path: Path, data: Any) -> None:
    """Write JSON via a synced temporary file and a rename, so a reader never sees half a file
    and a crash leaves the old file or the new one."""
    write_bytes(path, (json.dumps(data, indent=2, sort_keys=False, default=str) + "\n").encode())


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` as :func:`write_json` writes JSON: synced, then renamed into place."""
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Sync a directory's entries (a rename or removal in it lasts a power cut)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file below ``root`` (subdirectories such as ``wa-output/`` included), then
    every directory from the deepest up to ``root`` itself: what a rename then publishes is on
    disk whatever happens to the machine after it."""
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                continue  # the link is an entry of its directory, synced with it
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))
