"""Running commands on a LISA/devlib target in the background, with a deadline.

Every long-running process the runner starts (trace-cmd, the workloads) goes
through :func:`start` so that its pid is handed to the runner's journal before
anything else happens: if the runner itself is killed, the next invocation can
stop what it left behind (:func:`kill_leftover`).

Every wait on the target counts the target's own time (:class:`TargetDeadline`): the virtual
board on its instruction clock lives up to 25x slower than the host when busy, so a timeout
counted on the host's clock would kill a command that has had a fraction of its time.
"""

from __future__ import annotations

import shlex
import signal
import time
from typing import Callable

from lisa_ext.target.protocol import MAX_TIME_SCALE

__all__ = ["start", "wait", "stop", "signal_group", "kill_leftover", "process_starttime", "CommandFailed",
           "CommandTimeout", "TargetDeadline", "target_uptime"]


class CommandFailed(RuntimeError):
    """A target command exited with a non-zero status."""


class CommandTimeout(RuntimeError):
    """A target command did not finish before its deadline."""


def target_uptime(target) -> float | None:
    """The target's seconds since boot (its ``/proc/uptime``), None when they cannot be read: a
    lost target's own error says so, and a deadline then falls back to the host's clock."""
    try:
        return float(target.execute("cat /proc/uptime", check_exit_code=False).split()[0])
    except Exception:  # noqa: BLE001 -- see the docstring
        return None


class TargetDeadline:
    """``seconds`` of the target's own time from now, waited for on the host.

    The host's clock is looked at first (no command on the target while it has not run out);
    then the target's uptime says how much of its time has passed: as much on a target on the
    host's clock or a real machine, so the deadline has passed; less on the virtual board's
    busy guest, so the wait goes on for what is left. Past ``MAX_TIME_SCALE`` times ``seconds`` of
    host time, or when the target's uptime cannot be read, the deadline has passed whatever the
    target says (a guest that slow counts as hung).
    """

    def __init__(self, target, seconds: float):
        self.target, self.seconds = target, seconds
        now = time.monotonic()
        self._host_deadline = now + seconds
        self._host_limit = now + seconds * MAX_TIME_SCALE
        self._target_start = target_uptime(target)

    def passed(self) -> bool:
        now = time.monotonic()
        if now < self._host_deadline:
            return False
        if now >= self._host_limit or self._target_start is None:
            return True
        uptime = target_uptime(self.target)
        left = None if uptime is None else self.seconds - (uptime - self._target_start)
        if left is None or left <= 0:
            return True
        self._host_deadline = now + max(left, 0.1)
        return False


def start(target, command: str, *, as_root: bool = False,
          on_pid: Callable[[int], None] | None = None):
    """Start ``command`` on ``target`` in the background; returns devlib's BackgroundCommand."""
    bg = target.background(command, as_root=as_root)
    if on_pid is not None:
        on_pid(int(bg.pid))
    return bg


def signal_group(target, pid: int, sig: int, *, first: str = "") -> None:
    """Send ``sig`` to the process group led by ``pid`` (or to ``pid`` alone) on the target;
    ``first``, a shell command of the caller's own, runs just before in the same shell.

    devlib's own ``BackgroundCommand.send_signal`` runs ``busybox kill -SIG -- -PGID`` over SSH,
    which busybox rejects ("invalid number '--'"), and dash's ``kill`` has no ``--`` either:
    ``kill -SIG -PGID`` works with both.
    """
    before = f"{first}; " if first else ""
    target.execute(f"{before}kill -{int(sig)} -{int(pid)} 2>/dev/null || kill -{int(sig)} {int(pid)} 2>/dev/null "
                   "|| true", as_root=True, check_exit_code=False)


def wait(target, bg, timeout_s: float | None, what: str) -> int:
    """Wait for a background command; kill it and raise CommandTimeout once ``timeout_s`` of the
    target's time (:class:`TargetDeadline`) have passed."""
    deadline = None if timeout_s is None else TargetDeadline(target, timeout_s)
    while True:
        rc = bg.poll()
        if rc is not None:
            return rc
        if deadline is not None and deadline.passed():
            signal_group(target, bg.pid, signal.SIGKILL)
            raise CommandTimeout(f"{what} did not finish within {timeout_s:.0f} s and was killed")
        time.sleep(0.05)


def stop(target, bg, sig: int = signal.SIGINT, grace_s: float = 30, *, first: str = "") -> int:
    """Ask a background command to stop with ``sig``; kill it if it ignores the request.
    ``first`` is :func:`signal_group`'s."""
    if bg.poll() is None:
        signal_group(target, bg.pid, sig, first=first)
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
