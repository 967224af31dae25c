"""The one writer of a campaign directory, ``data/<campaign>/`` (its layout:
:mod:`lisa_ext.campaign.store.layout`).

A run's files are gathered in a hidden scratch directory next to its final place;
:meth:`CampaignStore.publish` writes its result and provenance, syncs every file and directory
of it and renames it into place, so a directory named by its iteration number is always a
finished run (status "ok" or "failed"), also after a crash of the machine. The spec copy, the
runner's per-campaign state and the journal's file are written here too; the directory is made,
locked, removed (``--fresh``, only when :mod:`lisa_ext.campaign.store.removal` allows it) and
its damaged runs moved aside here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from lisa_ext.campaign.store.files import fsync_dir, fsync_tree, read_json_object, write_bytes, write_json
from lisa_ext.campaign.store.journal import Journal
from lisa_ext.campaign.store.layout import (
    CAMPAIGN_MARKER,
    JOURNAL_NAME,
    QUARANTINE_DIR,
    RUN_META,
    RUN_RESULT,
    RUNS_DIR,
    SPEC_COPY,
    STATE_NAME,
    TMP_PREFIX,
)
from lisa_ext.campaign.store.reader import DamagedRun, StoreScan, board_timings, has_runs, read_results, scan_campaign
from lisa_ext.campaign.store.records import RunKey, RunResult
from lisa_ext.campaign.store.removal import campaign_removal_refusal
from lisa_ext.campaign.store.spec_copy import read_spec_copy
from lisa_ext.errors import UserError

__all__ = ["CampaignStore"]


class CampaignStore:
    """One campaign directory, ``data/<campaign>/``, and the one writer of it.

    A run's files are gathered in a scratch directory (:meth:`scratch`) and become a run only
    through :meth:`publish`; the spec copy, the runner's state and its journal are written here
    too. What the runner and ``campaign status`` read back of the directory they hold
    (:meth:`scan`, :meth:`results`, :meth:`board_timings`, :meth:`read_spec_copy`) is the
    reader's (:mod:`lisa_ext.campaign.store.reader`, :mod:`lisa_ext.campaign.store.spec_copy`).
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.journal = Journal(self.root / JOURNAL_NAME)

    @property
    def spec_copy(self) -> Path:
        return self.root / SPEC_COPY

    @property
    def runs_dir(self) -> Path:
        return self.root / RUNS_DIR

    @property
    def quarantine_dir(self) -> Path:
        return self.root / QUARANTINE_DIR

    def exists(self) -> bool:
        """Whether this directory holds a campaign (the store's marker, a spec copy or collected runs)."""
        return (self.root / CAMPAIGN_MARKER).is_file() or self.spec_copy.is_file() or self.runs_dir.is_dir()

    def check_removable(self) -> bool:
        """Whether there is a campaign directory to remove (``--fresh``): ``False`` when the path
        is missing or an empty directory.

        :raises UserError: naming the directory and why lisa-ext may not remove it
            (:func:`campaign_removal_refusal`).
        """
        if not self.root.is_symlink() and (not self.root.exists() or
                                           (self.root.is_dir() and not any(self.root.iterdir()))):
            return False
        why = campaign_removal_refusal(self.root)
        if why is not None:
            raise UserError(f"{self.root}: not removed: it {why}; lisa-ext removes only a campaign "
                            "directory it made")
        return True

    def remove(self) -> None:
        """Delete the campaign directory (``--fresh``) when :meth:`check_removable` allows it."""
        if self.check_removable():
            shutil.rmtree(self.root)

    def _make_root(self) -> None:
        """Create the directory; when it is new (or empty) mark it as the store's. A directory
        holding something other than a campaign is refused: the spec copy and the runs would
        be written among the user's files."""
        if self.root.is_dir() and any(self.root.iterdir()):
            if not self.exists():
                raise UserError(f"{self.root}: is not empty and holds no campaign; run the campaign "
                                "into a new directory")
            return
        self.root.mkdir(parents=True, exist_ok=True)
        write_bytes(self.root / CAMPAIGN_MARKER,
                     b"lisa-ext made this campaign directory: --fresh may remove it\n")

    def has_runs(self) -> bool:
        """Whether any run was published here (:func:`~lisa_ext.campaign.store.reader.has_runs`)."""
        return has_runs(self.root)

    def board_timings(self) -> set[str]:
        """The board timings its published runs recorded (``meta.json``'s ``board_timing``); runs on
        targets without the emulation modules record none."""
        return board_timings(self.root)

    def last_change(self) -> float:
        """When a run was last published or moved aside here (an mtime; 0 without runs)."""
        return max((d.stat().st_mtime for d in self.runs_dir.glob("*/*") if d.is_dir()), default=0.0)

    def run_dir(self, key: RunKey) -> Path:
        return self.runs_dir / key.variant / key.workload / str(key.iteration)

    def is_published(self, key: RunKey) -> bool:
        return (self.run_dir(key) / RUN_RESULT).is_file()

    # -- the campaign's own files ---------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the directory for one runner (an flock on the directory itself: no lock file
        to clean up, released by the kernel even on SIGKILL)."""
        self._make_root()
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UserError(f"another runner is working on {self.root}") from None
            yield
        finally:
            os.close(fd)

    def read_spec_copy(self) -> Any:
        """The spec copy as plain data (``None`` when there is none)."""
        return read_spec_copy(self.root)

    def write_spec_copy(self, text: str) -> None:
        """Store the spec the campaign runs (synced, renamed into place)."""
        self._make_root()
        write_bytes(self.spec_copy, text.encode("utf-8"))

    def read_state(self) -> dict:
        """Values the runner computed once for the campaign (``campaign-state.json``)."""
        path = self.root / STATE_NAME
        return read_json_object(path) if path.is_file() else {}

    def write_state(self, state: dict) -> None:
        write_json(self.root / STATE_NAME, state)

    # -- runs -------------------------------------------------------------------------------

    def scratch(self, key: RunKey) -> Path:
        """A fresh, empty directory next to where ``key``'s run will live, for its files."""
        parent = self.run_dir(key).parent
        parent.mkdir(parents=True, exist_ok=True)
        tmp = parent / f"{TMP_PREFIX}{key.iteration}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        return tmp

    def publish(self, key: RunKey, meta: Mapping[str, Any], result: RunResult,
                scratch: Path | None = None) -> Path:
        """Make a finished run visible at once: write its ``meta.json`` and ``result.json``
        into ``scratch`` (which holds the run's other files; a fresh one when ``None``), sync
        every file and directory in it, rename it to the run's place, sync the parents, then
        clear the journal (the run has undone its changes to the target by then).

        A kill before the rename leaves a scratch directory the next ``--resume`` removes; a
        kill after it leaves the run published and the journal naming it, and the next
        ``--resume`` keeps the run and says so."""
        if scratch is None:
            scratch = self.scratch(key)
        write_json(scratch / RUN_META, dict(meta))
        write_json(scratch / RUN_RESULT, result.to_json())
        fsync_tree(scratch)
        final = self.run_dir(key)
        os.rename(scratch, final)
        for directory in (final.parent, final.parent.parent, self.runs_dir):
            fsync_dir(directory)
        self.journal.clear()
        return final

    def remove_partial_runs(self, *, ignore_errors: bool = False) -> list[Path]:
        """Delete the scratch directories an interrupted runner left."""
        removed = []
        if self.runs_dir.is_dir():
            for tmp in sorted(self.runs_dir.glob(f"*/*/{TMP_PREFIX}*")):
                shutil.rmtree(tmp, ignore_errors=ignore_errors)
                removed.append(tmp)
        return removed

    def scan(self) -> StoreScan:
        """Every finished run, and apart the directories that are not readable runs."""
        return scan_campaign(self.root)

    def results(self) -> dict[RunKey, RunResult]:
        """The result of every finished run (a damaged run is a SpecError naming it)."""
        return read_results(self.root)

    def quarantine(self, damaged: Iterable[DamagedRun]) -> list[tuple[DamagedRun, Path]]:
        """Move damaged runs aside, to ``quarantine/`` under their path below ``runs/``
        (numbered when that place is taken); every other run stays. Returns (run, new place)."""
        moved = []
        for bad in damaged:
            dest = self.quarantine_dir / bad.path.relative_to(self.runs_dir)
            n = 1
            while dest.exists():
                dest = dest.with_name(f"{bad.path.name}-{n}")
                n += 1
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(bad.path, dest)
            fsync_dir(dest.parent)
            fsync_dir(bad.path.parent)
            moved.append((bad, dest))
        return moved
