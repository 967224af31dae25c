"""Event tracing with trace-cmd into a private ftrace instance on the target.

Each run records into its own instance (``trace-cmd record -B <name>``, see
``Documentation/trace/ftrace.rst``, "Instances") so the top-level buffer and
other users of tracefs are left alone. Only events are recorded: some hosts
refuse writes to ``set_ftrace_filter``/``set_ftrace_pid``, hence ``--no-filter``
and ``-d``. trace-cmd may exit non-zero during its final cleanup even though
the file is complete, so success is judged on the file, not the exit code.

trace-cmd clears the filter of every event subsystem of its instance when it starts and again
when it stops (about 60 writes of "0" on the boards' kernels), and the kernel waits for a
grace period on each (``apply_subsystem_event_filter()`` calls
``tracepoint_synchronize_unregister()``, kernel/trace/trace_events_filter.c): 24 ms each on
the virtual board, whose idle waits take real time, 3.4 s of every traced run. While trace-cmd
sets up and while it stops, the target's grace periods are expedited (``/sys/kernel/rcu_expedited``,
kernel/ksysfs.c), which takes that to 0.3 s; the switch is back to its value before the
workload starts and after trace-cmd has exited, and the runner's recovery puts it back after a
crash (``on_cleanup``).
"""

from __future__ import annotations

import contextlib
import signal
import time
from typing import Callable, Iterator

from lisa_ext.campaign import remote
from lisa_ext.target.protocol import MAX_TIME_SCALE

__all__ = ["INSTANCE_PREFIX", "RCU_EXPEDITED", "TraceError", "check_events", "recording", "remove_instance"]

INSTANCE_PREFIX = "lisa_ext_"
RCU_EXPEDITED = "/sys/kernel/rcu_expedited"
_EXPEDITE = f"[ -w {RCU_EXPEDITED} ] && echo 1 >{RCU_EXPEDITED}"
# trace.dat files start with these bytes whatever their version (trace-cmd.dat(5))
_TRACE_DAT_MAGIC = b"\x17\x08\x44tracing"


class TraceError(RuntimeError):
    """Tracing could not start or produced no usable trace.dat."""


def remove_instance(target, tracefs: str, instance: str, timeout_s: float = 10, *, first: str = "") -> None:
    """Remove an ftrace instance; it stays busy for a moment after trace-cmd exits, so retry.
    ``first``, a shell command of the caller's own, runs before in the same shell."""
    path = remote.quote(f"{tracefs}/instances/{instance}")
    before = f"{first}; " if first else ""
    deadline = remote.TargetDeadline(target, timeout_s)
    while True:
        out = target.execute(f"{before}[ -d {path} ] && rmdir {path} 2>&1; [ -d {path} ] && echo busy || true",
                             as_root=True, check_exit_code=False)
        if "busy" not in out:
            return
        if deadline.passed():
            raise TraceError(f"could not remove the ftrace instance {tracefs}/instances/{instance}: {out.strip()}")
        time.sleep(0.2)


def check_events(target, tracefs: str, events: tuple[str, ...]) -> list[str]:
    """Events (or subsystems) of ``events`` that this target's kernel does not have."""
    available = target.execute(f"cat {tracefs}/available_events", as_root=True).split()
    systems = {e.split(":", 1)[0] for e in available}
    missing = []
    for event in events:
        system, _, name = event.partition(":")
        if name in ("", "*"):
            ok = system in systems
        else:
            ok = f"{system}:{name}" in available
        if not ok:
            missing.append(event)
    return missing


def _expedite_grace_periods(target) -> str:
    """Expedite the target's RCU grace periods; the shell command that puts the switch back
    ("" when there is none to put back: no switch, not root, or already expedited)."""
    was = target.execute(f"read v <{RCU_EXPEDITED} 2>/dev/null && [ -w {RCU_EXPEDITED} ] && echo $v && "
                         f"{_EXPEDITE}", as_root=True, check_exit_code=False).strip()
    return f"echo 0 >{RCU_EXPEDITED}" if was == "0" else ""


def _wait_until_on(target, tracefs: str, instance: str, bg, timeout_s: int = 20, *, last: str = "") -> None:
    """Wait until trace-cmd has turned the instance on, then give its per-CPU readers 0.3 s.

    The wait is one shell loop on the target, counted on the target's uptime: polling over SSH
    from here kept the virtual board's guest busy with SSH sessions, so the guest time trace-cmd
    spends waiting ran at the busy guest's pace instead of the idle one's (11.5 s of host time per
    run on an otherwise idle board, against 4.4 s with this loop). trace-cmd counts as exited once
    it is a zombie (a local target's process is reaped only when polled). ``last``, a shell
    command of the caller's own, runs when the loop ends, whichever way."""
    path = remote.quote(f"{tracefs}/instances/{instance}/tracing_on")
    status = f"/proc/{int(bg.pid)}/status"
    script = (
        (f"trap {remote.quote(last)} EXIT; " if last else "") +
        f"read up _ </proc/uptime; end=$(( ${{up%.*}} + {int(timeout_s)} )); "
        f"while :; do v=0; [ -r {path} ] && read v <{path}; "
        'if [ "$v" = 1 ]; then sleep 0.3; echo on; exit 0; fi; '
        'alive=0; while read -r k state _; do [ "$k" = State: ] && { [ "$state" != Z ] && alive=1; break; }; '
        f"done 2>/dev/null <{status}; [ $alive = 1 ] || {{ echo exited; exit 0; }}; "
        f"read up _ </proc/uptime; [ ${{up%.*}} -ge $end ] && {{ echo timeout; exit 0; }}; "
        "sleep 0.05; done")
    out = target.execute(script, as_root=True, check_exit_code=False,
                         timeout=int(timeout_s * MAX_TIME_SCALE) + 30).strip()
    if out == "on":
        return
    if out == "exited":
        rc = remote.wait(target, bg, 10, "trace-cmd's exit")
        raise TraceError(f"trace-cmd exited with status {rc} before recording started")
    raise TraceError(f"trace-cmd did not start recording within {timeout_s} s of the target's time")


@contextlib.contextmanager
def recording(target, *, tracefs: str, instance: str, events: tuple[str, ...],
              output: str, buffer_size_kb: int | None = None, trace_cmd: str = "trace-cmd",
              on_pid: Callable[[int], None] | None = None,
              on_cleanup: Callable[[str], None] | None = None) -> Iterator[None]:
    """Record ``events`` into ``output`` (a path on the target) while the block runs.

    ``on_pid`` is told trace-cmd's pid, ``on_cleanup`` the command that undoes what recording
    changed on the target (the grace-period switch; see the module's docstring)."""
    cmd = [trace_cmd, "record", "--no-filter", "-d", "-B", instance]
    if buffer_size_kb:
        cmd += ["-b", str(buffer_size_kb)]
    for event in events:
        cmd += ["-e", event]
    cmd += ["-o", output]
    log = output + ".log"
    command = " ".join(remote.quote(c) for c in cmd) + f" >{remote.quote(log)} 2>&1"
    remove_instance(target, tracefs, instance)
    restore = _expedite_grace_periods(target)
    if restore and on_cleanup is not None:
        on_cleanup(restore)
    try:
        bg = remote.start(target, command, as_root=True, on_pid=on_pid)
    except BaseException:
        if restore:
            target.execute(restore, as_root=True, check_exit_code=False)
        raise
    try:
        _wait_until_on(target, tracefs, instance, bg, last=restore)
        yield
    finally:
        try:
            rc = remote.stop(target, bg, signal.SIGINT, first=_EXPEDITE if restore else "")
        finally:
            remove_instance(target, tracefs, instance, first=restore)
    head = target.execute(f"head -c 10 {remote.quote(output)} 2>/dev/null | od -An -c | tr -d ' \\n'",
                          as_root=True, check_exit_code=False)
    if "tracing" not in head:
        tail = target.execute(f"tail -n 5 {remote.quote(log)} 2>/dev/null", as_root=True,
                              check_exit_code=False).strip()
        raise TraceError(f"trace-cmd (exit status {rc}) left no valid trace file: {tail}")
