"""The lisa-ext command line.

Each top-level command lives next to the code it drives, in a module exposing
``register(subparsers)`` that adds its parser and sets ``func`` on it. Modules
are imported only when their command is used (importlib, by name), so
``lisa-ext --help`` and quick commands stay fast.

One convention for every command (``tests/test_cli.py`` walks each ``--help``):
``-o/--out`` is where a command writes its result (a directory, file or HTML
page), ``--data DIR`` a campaign directory a command reads or fills; values are
shown as upper-case placeholders (``DIR``, ``FILE``, ``N``); every command and
action has a description; help text is plain (no reST markup).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import NoReturn, Sequence

from lisa_ext.errors import UserError

__all__ = ["COMMANDS", "EXIT_INTERRUPTED", "build_parser", "main", "run"]

#: command name -> (module implementing it, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "campaign": ("lisa_ext.campaign.cli", "run campaigns and inspect their state"),
    "trace": ("lisa_ext.trace.cli", "convert trace.dat / text traces to Arrow tables"),
    "analyse": ("lisa_ext.analysis.cli", "run a trace analysis (idle-miss, wakeup-latency, ...)"),
    "compare": ("lisa_ext.stats.cli", "compare variants in a metrics table"),
    "report": ("lisa_ext.report.cli", "write tables and figures for a campaign"),
    "quickstart": ("lisa_ext.quickstart", "run the quickstart study on this machine"),
    "study": ("lisa_ext.study", "run a study (campaign + report + notebook)"),
    "kernel": ("lisa_ext.kernel.cli", "check and build kernel variants"),
    "vboard": ("lisa_ext.vboard.cli", "manage the QEMU virtual board"),
    "target": ("lisa_ext.target.cli", "check target configs and pin SSH host keys"),
    "bisect": ("lisa_ext.bisect.cli", "find the patch of a series that changed a metric"),
}


def build_parser(argv: Sequence[str] = (), *, every_command: bool = False) -> argparse.ArgumentParser:
    """The ``lisa-ext`` parser. Only the command named in ``argv`` (or, with
    ``every_command``, each one) is imported and registers its options; the others
    appear by name and one-line help."""
    parser = argparse.ArgumentParser(prog="lisa-ext", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in COMMANDS.items():
        if every_command or name == wanted:
            try:
                importlib.import_module(module).register(sub)
                continue
            except ModuleNotFoundError as exc:
                if exc.name != module:
                    raise
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.error(f"command {args.command!r} is not available in this installation")
    try:
        return int(func(args) or 0)
    except UserError as exc:
        print(f"lisa-ext {args.command}: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_status", 2)  # 2 unless the error says otherwise
    except KeyboardInterrupt as exc:
        # a command that can be resumed says how (lisa_ext.campaign.runner.CampaignInterrupted)
        print(f"lisa-ext {args.command}: {str(exc) or 'interrupted'}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0


#: collect young objects every this many allocations (Python's default: 700)
GC_YOUNG_THRESHOLD = 50_000
#: the exit status of a command stopped by SIGINT (Ctrl-C), as a shell reports it: 128 + 2
EXIT_INTERRUPTED = 130
#: seconds by which a SIGINT arriving inside :mod:`logging` is put off
_INTERRUPT_DELAY_S = 0.05


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT raises KeyboardInterrupt, as Python's own handler does, except inside :mod:`logging`:
    there it is sent again a moment later. Python 3.11 runs logging's fork handler (releasing its
    lock) after every fork with a ``preexec_fn`` (devlib's local commands): a KeyboardInterrupt
    raised in it is printed and dropped with the lock still held, and the next log line hangs the
    command for good instead of stopping it."""
    if frame is not None and frame.f_globals.get("__name__") == "logging":
        threading.Timer(_INTERRUPT_DELAY_S, os.kill, (os.getpid(), signum)).start()
        return
    raise KeyboardInterrupt


def run() -> NoReturn:
    """The ``lisa-ext`` executable: :func:`main` in a process that runs one command.

    - The cyclic collector runs every :data:`GC_YOUNG_THRESHOLD` allocations instead of
      700: a command's imports and frames stay alive until it ends, and collecting them
      over and over was ~12 % of an uncached report's CPU.
    - When :func:`main` returns and no other thread runs, the process leaves without
      tearing the interpreter down (~0.7 s of freeing thousands of modules after a
      report): exit handlers run and the standard streams are flushed first.
    - SIGINT (Ctrl-C) stops the command with one line and exit status :data:`EXIT_INTERRUPTED`,
      never a lost interrupt (:func:`_interrupt`); a campaign restores its target first.
    """
    gc.set_threshold(GC_YOUNG_THRESHOLD)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when started ignoring it
        signal.signal(signal.SIGINT, _interrupt)
    code = main()
    if threading.active_count() > 1:
        sys.exit(code)  # the interpreter waits for those threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be written
            pass
    os._exit(code)


if __name__ == "__main__":
    run()
