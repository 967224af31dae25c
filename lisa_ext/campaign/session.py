"""A campaign's hold on its target: the connection, the kernel it runs, what to undo.

:class:`TargetSession` is the one owner of what a campaign does to its target:

- **the connection** -- the target (:class:`lisa_ext.target.Target`: knobs,
  deploys, provenance, health probes go through it) and its LISA connection
  (:attr:`TargetSession.lisa`: workloads, tracing, tool installs);
- **the kernel** -- the kernel variant deployed last (:meth:`TargetSession.deploy`
  skips a variant that already runs);
- **the undo journal** -- every change a run makes on the target (original
  knob values, its ftrace instance, the processes it starts, cleanup commands,
  its remote directory), written before the change is made
  (:class:`Journal`: the store's file, :class:`lisa_ext.campaign.store.journal.Journal`), so that
  :meth:`TargetSession.undo`
  can restore the target after a crash of this very process (SIGKILL
  included) or a run lost with the target.

Recovery (:mod:`lisa_ext.campaign.recovery`) works on the session alone:
:meth:`~TargetSession.probe`, :meth:`~TargetSession.interrupt`,
:meth:`~TargetSession.recover`, :meth:`~TargetSession.undo`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol

from lisa_ext import knobs as _knobs
from lisa_ext.campaign import remote, tracing
from lisa_ext.errors import UserError
from lisa_ext.kernel.deploy import deploy_variant
from lisa_ext.target import Target, TargetConfig, open_target, tracefs_root

__all__ = ["Journal", "TargetSession"]


class Journal(Protocol):
    """Where the undo journal lives between a change and its undoing (the store's journal file)."""

    def read(self) -> dict | None:
        """The journal, None when there is none; a damaged one is ``{"damaged": why}``."""

    def write(self, data: dict) -> None:
        """Replace the journal, durably, before the change it records is made."""

    def clear(self) -> None: ...


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


class TargetSession:
    """One campaign's target: its connections, its kernel and the journal of a run's changes."""

    def __init__(self, target: Target, journal: Journal):
        self.target = target
        self.journal = journal
        self._record: dict = {}
        self._kernel: tuple[Path, dict] | None = None

    @classmethod
    def open(cls, config: TargetConfig, journal: Journal) -> "TargetSession":
        """Connect to the target of ``config`` (LISA's connection included)."""
        session = cls(open_target(config), journal)
        session.lisa  # noqa: B018 -- connect now: a target that cannot be reached stops here
        return session

    @property
    def lisa(self) -> Any:
        """The LISA :class:`lisa.target.Target` (workload generators, tool installs, platform info)."""
        return self.target.lisa()

    # -- the kernel ---------------------------------------------------------------

    @property
    def kernel(self) -> Path | None:
        """The kernel variant spec deployed last, None before any (or after a reset)."""
        return self._kernel[0] if self._kernel else None

    def deploy(self, kernel: Path) -> dict:
        """Deploy the kernel variant ``kernel`` unless it is the one deployed last; its provenance."""
        if self._kernel is not None and self._kernel[0] == kernel:
            return self._kernel[1]
        self._kernel = None  # whatever happens now, the target no longer runs a known variant
        provenance = deploy_variant(self.target, kernel)
        self._kernel = (kernel, provenance)
        return provenance

    # -- the undo journal -----------------------------------------------------------

    def begin(self, remote_dir: str, **run: Any) -> None:
        """Start the journal of one run (``run``: how the caller names it) before it touches the target."""
        self._record = {**run, "remote_dir": remote_dir, "instance": None, "tracefs": None, "knobs": {},
                        "processes": [], "cleanups": [], "runner_pid": os.getpid(), "started": _now()}
        self._save()

    def note_knobs(self, originals: Mapping[str, str]) -> None:
        """The knobs about to be written, with their original values."""
        self._record["knobs"] = dict(originals)
        self._save()

    def note_instance(self, tracefs: str, instance: str) -> None:
        """The ftrace instance about to be created."""
        self._record.update(tracefs=tracefs, instance=instance)
        self._save()

    def note_pid(self, pid: int) -> None:
        """A process just started (identified with its start time: pids are reused)."""
        starttime = remote.process_starttime(self.target, pid)
        self._record["processes"].append({"pid": int(pid), "starttime": starttime})
        self._save()

    def note_cleanup(self, command: str) -> None:
        """A command that undoes what is about to be set up (a dm-crypt device, a loop, a kernel switch)."""
        self._record["cleanups"].append(command)
        self._save()

    def end(self) -> None:
        """The run is over and stored (publishing clears the journal too): nothing is left to undo."""
        self._record = {}
        self.journal.clear()

    @contextlib.contextmanager
    def applied_knobs(self, knobs: Mapping[str, str]) -> Iterator[dict]:
        """:func:`lisa_ext.knobs.applied_knobs` on the target, originals journaled before the first write."""
        with _knobs.applied_knobs(self.target, knobs, on_originals=self.note_knobs) as state:
            yield state

    def undo(self, *, restore_knobs: bool = True) -> list[str]:
        """Undo what the journal records (a run of a killed runner, or one lost with the target):
        kill its processes, run its cleanups, remove its ftrace instance, restore its knobs
        (not with ``restore_knobs=False``: after a reboot, which took them with it, writing them
        back could fail on a file that reads back otherwise), remove its remote directory; then
        clear the journal. Returns what was done, in words."""
        data = self.journal.read()
        self._record = {}
        if data is None:
            return []
        if "damaged" in data:
            self.journal.clear()
            return [f"the journal of the interrupted run was damaged, nothing undone from it: {data['damaged']}"]
        done: list[str] = []
        for proc in data.get("processes", []):
            pid = int(proc["pid"])
            if proc.get("starttime") and remote.process_starttime(self.target, pid) == proc["starttime"]:
                remote.kill_leftover(self.target, pid)
                done.append(f"killed leftover process group {pid}")
        for command in data.get("cleanups", []):
            self.target.execute(command, as_root=True, check_exit_code=False)
            done.append(f"ran cleanup: {command}")
        if data.get("instance"):
            tracefs = data.get("tracefs") or tracefs_root(self.target)
            if tracefs:
                tracing.remove_instance(self.target, tracefs, data["instance"])
        if restore_knobs:
            failures = _knobs.revert_knobs(self.target, data.get("knobs") or {})
            if failures:
                raise UserError("could not restore knobs left by the interrupted runner: " + "; ".join(failures))
            if data.get("knobs"):
                done.append("restored " + ", ".join(f"{p}={v}" for p, v in data["knobs"].items()))
        if data.get("remote_dir"):
            self.target.execute(f"rm -rf {remote.quote(data['remote_dir'])}", as_root=True,
                                check_exit_code=False)
        self.journal.clear()
        return done

    def _save(self) -> None:
        self.journal.write(self._record)

    # -- faults ---------------------------------------------------------------------

    def probe(self, timeout: float) -> tuple[str | None, bool]:
        """Does the target answer? (:meth:`lisa_ext.target.Target.probe`)"""
        return self.target.probe(timeout)

    def interrupt(self) -> None:
        """The target is lost: make calls blocked on it fail now."""
        self.target.interrupt()

    def console_tail(self, lines: int = 40) -> str | None:
        return self.target.console_tail(lines)

    def recover(self, kernel: Path | None) -> None:
        """Bring a lost target back (reset, then boot ``kernel`` on it when given) and reconnect."""
        back = self.target.reset()
        self._kernel = None
        if kernel is None:
            if not back:
                raise UserError(f"{self.target.description} was lost and the campaign names no kernel "
                                "variant to boot it again; bring it back up and --resume")
            return
        self.deploy(kernel)
