"""A watchdog that notices a target lost in the middle of a run, within a bounded time.

A board that hangs keeps its TCP connection open: the runner's blocking
``execute`` (the workload) would wait for the workload's whole duration, or
forever. The watchdog probes the target from its own thread on its own
connection (devlib opens one SSH connection per thread; the virtual board is
probed with a plain ``ssh`` call and by checking that its QEMU process lives)
every ``interval_s``. After ``misses`` failed probes in a row (or at once when
QEMU is gone) it marks the target lost and unblocks the runner by closing the
runner's own connection (the paramiko transport), so the run fails now with
the reason instead of later with a timeout.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import threading
import time
from typing import Any, Callable, Iterator

from lisa_ext.vboard import qemu

__all__ = ["TargetWatchdog", "board_probe", "devlib_probe", "close_connection"]

log = logging.getLogger(__name__)

#: returns None when the target answered, else why not; ``fatal`` means no need to retry the probe
Probe = Callable[[float], tuple[str | None, bool]]

#: a board whose QEMU answers but whose guest is too busy to answer SSH (pgbench or fio on all
#: vCPUs under TCG, on a loaded host) counts as this fraction of a miss: lost only after
#: ``misses / BUSY_GUEST_MISS`` such probes (a minute or more), while a hung QEMU counts in full
BUSY_GUEST_MISS = 0.25


class BusyGuest(str):
    """A probe failure of a guest whose emulator still answers: a partial miss."""


def board_probe(board) -> Probe:
    """The virtual board: its QEMU process, an ``ssh true`` of our own and, when SSH does not
    answer, QEMU's monitor (a stopped or hung QEMU does not answer it; a busy guest's does)."""
    def qemu_answers(timeout: float) -> bool:
        try:
            return qemu.qmp_execute(board.qmp_socket, "query-status", timeout=timeout).get("return", {}).get("status") == "running"
        except Exception:  # noqa: BLE001 -- no answer, whatever the reason
            return False

    def probe(timeout: float) -> tuple[str | None, bool]:
        if qemu.running_pid(board.pidfile) is None:
            return "the virtual board's QEMU process is gone", True
        try:
            proc = subprocess.run(board.ssh_base() + ["true"], capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            reason = f"the virtual board did not answer over SSH within {timeout:.0f} s"
            if qemu_answers(min(timeout, 5.0)):
                return BusyGuest(reason + " (QEMU runs: a busy guest)"), False
            return reason + " and QEMU's monitor did not answer either", False
        except Exception as exc:  # noqa: BLE001 -- e.g. the board's state vanished with QEMU
            return f"the virtual board cannot be reached: {exc}", False
        if proc.returncode != 0:
            return f"ssh to the virtual board failed: {proc.stderr.decode(errors='replace').strip()}", False
        return None, False

    return probe


def devlib_probe(target) -> Probe:
    """Any devlib target: ``true`` on the connection devlib opens for the watchdog's thread."""

    def probe(timeout: float) -> tuple[str | None, bool]:
        try:
            target.execute("true", timeout=timeout)
        except Exception as exc:  # noqa: BLE001 -- every devlib failure means "did not answer"
            return f"the target did not answer ({type(exc).__name__}: {exc})".strip(), False
        return None, False

    return probe


def close_connection(conn: Any) -> None:
    """Make a blocked call on ``conn`` (a devlib connection) fail now.

    The socket is shut down first: that wakes a ``poll()`` another thread is
    blocked in on it, which closing the paramiko client alone does not.
    """
    client = getattr(conn, "client", None)  # devlib's SshConnection: a paramiko SSHClient
    try:
        if client is not None:
            sock = getattr(client.get_transport(), "sock", None)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            client.close()
        elif hasattr(conn, "close"):
            conn.close()
    except Exception as exc:  # noqa: BLE001 -- best effort: the connection is dead anyway
        log.debug("closing the lost connection: %s", exc)


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
            missed += BUSY_GUEST_MISS if isinstance(reason, BusyGuest) else 1
            log.warning("target probe failed (%g/%d): %s", missed, self.misses, reason)
            if fatal or missed >= self.misses:
                self.lost, self.lost_at = f"target lost: {reason}", time.monotonic()
                if self.on_lost is not None:
                    self.on_lost(self.lost)
                return
