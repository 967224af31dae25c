"""Running commands on a LISA/devlib target in the background, with a deadline.

Every long-running process the runner starts (trace-cmd, the workloads) goes
through :func:`start` so that its pid is handed to the runner's journal before
anything else happens: if the runner itself is killed, the next invocation can
stop what it left behind (:func:`kill_leftover`).
"""

from __future__ import annotations

import shlex
import signal
import time
from typing import Callable

__all__ = ["start", "wait", "stop", "signal_group", "kill_leftover", "process_starttime", "CommandFailed",
           "CommandTimeout"]


class CommandFailed(RuntimeError):
    """A target command exited with a non-zero status."""


class CommandTimeout(RuntimeError):
    """A target command did not finish before its deadline."""


def start(target, command: str, *, as_root: bool = False,
          on_pid: Callable[[int], None] | None = None):
    """Start ``command`` on ``target`` in the background; returns devlib's BackgroundCommand."""
    bg = target.background(command, as_root=as_root)
    if on_pid is not None:
        on_pid(int(bg.pid))
    return bg


def signal_group(target, pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by ``pid`` (or to ``pid`` alone) on the target.

    devlib's own ``BackgroundCommand.send_signal`` runs ``busybox kill -SIG -- -PGID`` over SSH,
    which busybox rejects ("invalid number '--'"), and dash's ``kill`` has no ``--`` either:
    ``kill -SIG -PGID`` works with both.
    """
    target.execute(f"kill -{int(sig)} -{int(pid)} 2>/dev/null || kill -{int(sig)} {int(pid)} 2>/dev/null || true",
                   as_root=True, check_exit_code=False)


def wait(target, bg, timeout_s: float | None, what: str) -> int:
    """Wait for a background command; kill it and raise CommandTimeout past the deadline."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        rc = bg.poll()
        if rc is not None:
            return rc
        if deadline is not None and time.monotonic() > deadline:
            signal_group(target, bg.pid, signal.SIGKILL)
            raise CommandTimeout(f"{what} did not finish within {timeout_s:.0f} s and was killed")
        time.sleep(0.05)


def stop(target, bg, sig: int = signal.SIGINT, grace_s: float = 30) -> int:
    """Ask a background command to stop with ``sig``; kill it if it ignores the request."""
    if bg.poll() is None:
        signal_group(target, bg.pid, sig)
    try:
        return wait(target, bg, grace_s, "stopping")
    except CommandTimeout:
        return -signal.SIGKILL


def kill_leftover(target, pid: int) -> None:
    """SIGKILL a process group (or lone process) the runner started before it died."""
    signal_group(target, pid, signal.SIGKILL)


def process_starttime(target, pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (None when there is no such process): tells a
    process the runner started from a later one that reuses its pid."""
    out = target.execute(f"cut -d' ' -f22 /proc/{int(pid)}/stat 2>/dev/null || true",
                         check_exit_code=False).strip()
    return out or None


def quote(s: str) -> str:
    return shlex.quote(s)
