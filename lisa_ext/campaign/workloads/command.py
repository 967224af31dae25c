"""Running one workload command on the target with its output kept in the run directory."""

from __future__ import annotations

from pathlib import Path

from lisa_ext.campaign import remote
from lisa_ext.campaign.workloads.base import RunContext, WorkloadError

__all__ = ["run_logged", "tail"]


def tail(text: str, lines: int = 3) -> str:
    """The last non-empty lines of ``text`` joined on one line, for error messages."""
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "(no output)"


def run_logged(ctx: RunContext, command: str, stem: str, timeout_s: float, what: str,
               extra_files: tuple[str, ...] = ()) -> tuple[str, str]:
    """Run ``command`` in the run's remote directory; return its (stdout, stderr).

    stdout and stderr go to ``<stem>.stdout`` / ``<stem>.stderr``, which are pulled into
    the run directory together with ``extra_files`` (written by the command itself) even
    when the command fails. A non-zero exit status is a :class:`WorkloadError` quoting the
    end of stderr (or stdout).
    """
    target = ctx.target
    d = remote.quote(ctx.remote_dir)
    bg = remote.start(target, f"cd {d} && {command} >{stem}.stdout 2>{stem}.stderr", on_pid=ctx.on_pid)
    try:
        rc = remote.wait(target, bg, timeout_s, what)
    except remote.CommandTimeout as exc:
        _pull(ctx, (f"{stem}.stdout", f"{stem}.stderr") + extra_files)
        raise WorkloadError(str(exc)) from None
    _pull(ctx, (f"{stem}.stdout", f"{stem}.stderr") + extra_files)
    stdout = _read(ctx.local_dir / f"{stem}.stdout")
    stderr = _read(ctx.local_dir / f"{stem}.stderr")
    if rc != 0:
        raise WorkloadError(f"{what} exited with status {rc}: {tail(stderr or stdout)}")
    return stdout, stderr


def _pull(ctx: RunContext, names: tuple[str, ...]) -> None:
    for name in names:
        src = ctx.target.path.join(ctx.remote_dir, name)
        if ctx.target.file_exists(src):
            ctx.target.pull(src, str(ctx.local_dir / name))


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""
