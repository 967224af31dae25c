"""What lisa-ext may remove: nothing removes a directory the store did not make.

:func:`campaign_removal_refusal` (what ``--fresh`` asks) accepts only a campaign directory
holding nothing but what the store writes, and :func:`never_removed` names the directories no
command removes or replaces whatever they hold (``/``, the home directory, the current one, the
data root). The one place these decisions are made.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from lisa_ext.campaign.store.layout import CAMPAIGN_MARKER, RUNS_DIR, SPEC_COPY, STATE_NAME, STORE_ENTRIES
from lisa_ext.errors import UserError
from lisa_ext.workbench import output_dir

__all__ = ["campaign_removal_refusal", "never_removed"]


def never_removed(path: str | os.PathLike) -> str | None:
    """Why no command removes or replaces ``path`` whatever it holds (``/``, the home
    directory, the current directory, the data root or a directory holding one of them);
    ``None`` for any other path."""
    resolved = Path(path).expanduser().resolve()
    if resolved == Path(resolved.anchor):
        return "is the root directory"
    places = [("the home directory", Path.home()), ("the current directory", Path.cwd())]
    with contextlib.suppress(UserError):  # a bad $LISA_EXT_WORKBENCH: no data root to keep
        places.append(("the data root", output_dir() / "data"))
    for what, place in places:
        place = place.resolve()
        if resolved == place:
            return f"is {what}"
        if resolved in place.parents:
            return f"holds {what} ({place})"
    return None


def _store_entry(name: str) -> bool:
    """Whether ``name``, at the top of a campaign directory, is one the store or the report wrote."""
    if name in STORE_ENTRIES or (name.endswith(".part") and name[:-len(".part")] in STORE_ENTRIES):
        return True  # write_json's temporaries included
    return name.startswith(".report.")  # the report's build and swap temporaries (lisa_ext.report.build)


def campaign_removal_refusal(path: str | os.PathLike) -> str | None:
    """Why the existing directory ``path`` is not a campaign directory lisa-ext may remove
    (``--fresh``), ``None`` when it is one: made by the store (:data:`CAMPAIGN_MARKER`), or
    older than that marker and holding the spec copy with runs or state, and holding nothing
    the store or the report did not write. The one place that decision is made."""
    path = Path(path)
    if path.is_symlink():
        return "is a symbolic link"
    if not path.is_dir():
        return "is not a directory"
    why = never_removed(path)
    if why is not None:
        return why
    foreign = sorted(entry.name for entry in path.iterdir() if not _store_entry(entry.name))
    if foreign:
        more = f" and {len(foreign) - 1} more entries" if len(foreign) > 1 else ""
        return f"holds {foreign[0]!r}{more}, which lisa-ext did not write"
    if (path / CAMPAIGN_MARKER).is_file():
        return None
    if (path / SPEC_COPY).is_file() and ((path / RUNS_DIR).is_dir() or (path / STATE_NAME).is_file()):
        return None  # a campaign directory written before the marker existed
    return "holds no campaign lisa-ext made"
