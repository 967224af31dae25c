"""Event tracing with trace-cmd into a private ftrace instance on the target.

Each run records into its own instance (``trace-cmd record -B <name>``, see
``Documentation/trace/ftrace.rst``, "Instances") so the top-level buffer and
other users of tracefs are left alone. Only events are recorded: some hosts
refuse writes to ``set_ftrace_filter``/``set_ftrace_pid``, hence ``--no-filter``
and ``-d``. trace-cmd may exit non-zero during its final cleanup even though
the file is complete, so success is judged on the file, not the exit code.
"""

from __future__ import annotations

import contextlib
import signal
import time
from typing import Callable, Iterator

from lisa_ext.campaign import remote

__all__ = ["TraceError", "recording", "remove_instance", "check_events", "INSTANCE_PREFIX"]

INSTANCE_PREFIX = "lisa_ext_"
# trace.dat files start with these bytes whatever their version (trace-cmd.dat(5))
_TRACE_DAT_MAGIC = b"\x17\x08\x44tracing"


class TraceError(RuntimeError):
    """Tracing could not start or produced no usable trace.dat."""


def remove_instance(target, tracefs: str, instance: str, timeout_s: float = 10) -> None:
    """Remove an ftrace instance; it stays busy for a moment after trace-cmd exits, so retry."""
    path = remote.quote(f"{tracefs}/instances/{instance}")
    deadline = remote.TargetDeadline(target, timeout_s)
    while True:
        out = target.execute(f"[ -d {path} ] && rmdir {path} 2>&1; [ -d {path} ] && echo busy || true",
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


def _wait_until_on(target, tracefs: str, instance: str, bg, timeout_s: float = 20) -> None:
    path = f"{tracefs}/instances/{instance}/tracing_on"
    deadline = remote.TargetDeadline(target, timeout_s)
    while not deadline.passed():
        if bg.poll() is not None:
            raise TraceError(f"trace-cmd exited with status {bg.poll()} before recording started")
        out = target.execute(f"cat {path} 2>/dev/null || echo 0", as_root=True,
                             check_exit_code=False).strip()
        if out == "1":
            # the per-CPU readers start right after tracing_on: give them a moment of the target's time
            remote.sleep_target(target, 0.3)
            return
        time.sleep(0.1)
    raise TraceError(f"trace-cmd did not start recording within {timeout_s:.0f} s of the target's time")


@contextlib.contextmanager
def recording(target, *, tracefs: str, instance: str, events: tuple[str, ...],
              output: str, buffer_size_kb: int | None = None, trace_cmd: str = "trace-cmd",
              on_pid: Callable[[int], None] | None = None) -> Iterator[None]:
    """Record ``events`` into ``output`` (a path on the target) while the block runs."""
    cmd = [trace_cmd, "record", "--no-filter", "-d", "-B", instance]
    if buffer_size_kb:
        cmd += ["-b", str(buffer_size_kb)]
    for event in events:
        cmd += ["-e", event]
    cmd += ["-o", output]
    log = output + ".log"
    command = " ".join(remote.quote(c) for c in cmd) + f" >{remote.quote(log)} 2>&1"
    remove_instance(target, tracefs, instance)
    bg = remote.start(target, command, as_root=True, on_pid=on_pid)
    try:
        _wait_until_on(target, tracefs, instance, bg)
        yield
    finally:
        try:
            rc = remote.stop(target, bg, signal.SIGINT)
        finally:
            remove_instance(target, tracefs, instance)
    head = target.execute(f"head -c 10 {remote.quote(output)} 2>/dev/null | od -An -c | tr -d ' \\n'",
                          as_root=True, check_exit_code=False)
    if "tracing" not in head:
        tail = target.execute(f"tail -n 5 {remote.quote(log)} 2>/dev/null", as_root=True,
                              check_exit_code=False).strip()
        raise TraceError(f"trace-cmd (exit status {rc}) left no valid trace file: {tail}")
