"""A watchdog that notices a target lost in the middle of a run, within a bounded time.

A board that hangs keeps its TCP connection open: the runner's blocking
``execute`` (the workload) would wait for the workload's whole duration, or
forever. The watchdog probes the target from its own thread every
``interval_s`` (:meth:`lisa_ext.target.Target.probe`: its own connection; the
virtual board's also checks that its QEMU process lives). After ``misses``
failed probes in a row (or at once when the probe says the failure is final)
it marks the target lost and calls ``on_lost``, which unblocks the runner
(:meth:`lisa_ext.campaign.session.TargetSession.interrupt` closes the
connections it is blocked on), so the run fails now with the reason instead of
later with a timeout.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Callable, Iterator

from lisa_ext.target.protocol import BusyTarget

__all__ = ["BUSY_GUEST_MISS", "Probe", "TargetWatchdog"]

log = logging.getLogger(__name__)

#: returns None when the target answered, else why not; ``fatal`` means no need to retry the probe
Probe = Callable[[float], tuple[str | None, bool]]

#: a board whose QEMU answers but whose guest is too busy to answer SSH (pgbench or fio on all
#: vCPUs under TCG, on a loaded host) counts as this fraction of a miss: lost only after
#: ``misses / BUSY_GUEST_MISS`` such probes (a minute or more), while a hung QEMU counts in full
BUSY_GUEST_MISS = 0.25


class TargetWatchdog:
    """Probe a target every ``interval_s`` while a run is in progress (a context manager)."""

    def __init__(self, probe: Probe, *, interval_s: float = 5.0, misses: int = 3,
                 on_lost: Callable[[str], None] | None = None):
        self.probe = probe
        self.interval_s = interval_s
        self.misses = misses
        self.on_lost = on_lost
        self.lost: str | None = None
        self.lost_at: float | None = None
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No probing while the target is down on purpose (a kernel deploy reboots it)."""
        self._paused.set()
        try:
            yield
        finally:
            self._paused.clear()

    def __enter__(self) -> "TargetWatchdog":
        self.lost = self.lost_at = None
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="lisa-ext-watchdog", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s * 3)

    def _loop(self) -> None:
        missed = 0
        while not self._stop.wait(self.interval_s):
            if self._paused.is_set():
                missed = 0
                continue
            reason, fatal = self.probe(self.interval_s * 2)
            if self._paused.is_set():
                continue
            if reason is None:
                missed = 0
                continue
            missed += BUSY_GUEST_MISS if isinstance(reason, BusyTarget) else 1
            log.warning("target probe failed (%g/%d): %s", missed, self.misses, reason)
            if fatal or missed >= self.misses:
                self.lost, self.lost_at = f"target lost: {reason}", time.monotonic()
                if self.on_lost is not None:
                    self.on_lost(self.lost)
                return
