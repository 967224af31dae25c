"""A campaign directory that fills up or turns read-only stops the campaign cleanly.

``ENOSPC`` (no space), ``EDQUOT`` (quota) and ``EROFS`` (read-only file system,
e.g. a disk the kernel remounted read-only after an I/O error) are not a
property of the run being written: every following run would fail the same
way. So they are never stored as a failed run. The runner stops with one
message naming the directory, what could not be written, how many runs are
finished (they are kept: a run directory is published by one rename only once
complete, see :mod:`lisa_ext.campaign.store`) and how to continue once space
is freed (``--resume``). The partial run is deleted to give back its space;
``--resume`` runs it again.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from lisa_ext.errors import UserError

__all__ = ["STORAGE_ERRNOS", "CampaignStorageError", "raise_if_storage", "storage_cause"]

STORAGE_ERRNOS = {errno.ENOSPC: "no space left", errno.EDQUOT: "disk quota exceeded",
                  errno.EROFS: "read-only file system"}
# how devlib/scp report a failed local write when the errno itself is lost on the way
_MESSAGES = {os.strerror(e): e for e in STORAGE_ERRNOS}


class CampaignStorageError(UserError):
    """The campaign directory cannot take more data; the campaign stops, nothing finished is lost."""


def storage_cause(exc: BaseException) -> OSError | None:
    """The ENOSPC/EDQUOT/EROFS error behind ``exc`` (itself, its causes or its text), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
            return exc
        for message, code in _MESSAGES.items():
            if message in str(exc):
                return OSError(code, message, getattr(exc, "filename", None))
        exc = exc.__cause__ or exc.__context__
    return None


def raise_if_storage(exc: BaseException, root: Path, *, done: int, total: int, spec_path: Path,
                     out: Path | None = None) -> None:
    """Turn a storage failure into :class:`CampaignStorageError`; other errors pass through."""
    cause = storage_cause(exc)
    if cause is None:
        return
    what = f"writing {cause.filename}" if cause.filename else f"{type(exc).__name__}: {exc}"
    resume = f"lisa-ext campaign run {spec_path} --resume" + (f" --out {out}" if out else "")
    raise CampaignStorageError(
        f"stopping the campaign: the campaign directory {root} cannot take more data "
        f"({STORAGE_ERRNOS[cause.errno]}, {what}). {done} of {total} runs are finished and kept; "
        f"the run in progress was discarded. Free some space (or make {root} writable) and "
        f"continue with: {resume}") from exc
