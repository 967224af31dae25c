"""Runtime knobs: sysfs/procfs files written for a variant and always reverted.

Mirrors how the kernel exposes selectable values: a file either holds a plain
value (``/sys/module/workqueue/parameters/default_affinity_scope`` reads
``cache``) or lists the choices with the active one in brackets
(``/sys/block/vda/queue/scheduler`` reads ``none [mq-deadline] kyber bfq``, see
``block/elevator.c:elv_iosched_show``). :func:`read_knob` returns the active
value in both cases, which is what gets written back on revert.

A third kind lists flags, each as ``NAME`` or ``NO_NAME``, and takes one flag
per write (``/sys/kernel/debug/sched/features``, see
``kernel/sched/debug.c:sched_feat_show``): a knob on it names one flag and its
state (``NO_UTIL_EST``), and reads back as that flag's current token.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from typing import Callable, Iterator, Mapping

__all__ = ["read_knob", "write_knob", "applied_knobs", "revert_knobs", "check_knobs",
           "KnobError", "KnobRevertError"]

_BRACKETED = re.compile(r"\[([^\]]+)\]")
_FLAG = re.compile(r"[A-Z][A-Z0-9_]*")


class KnobError(RuntimeError):
    """A knob could not be written or did not read back as requested."""


class KnobRevertError(KnobError):
    """A knob could not be restored: the target is left in a modified state."""


def _flag_token(text: str, value: str) -> str | None:
    """In a flag-list file's ``text``, the token (NAME or NO_NAME) of ``value``'s flag."""
    if not _FLAG.fullmatch(value):
        return None
    name = value.removeprefix("NO_")
    for token in text.split():
        if token in (name, "NO_" + name):
            return token
    return None


def _is_flag_list(text: str) -> bool:
    tokens = text.split()
    return len(tokens) > 1 and all(_FLAG.fullmatch(t) for t in tokens)


def read_knob(target, path: str, value: str | None = None) -> str:
    """The active value of ``path``; for a flag-list file, the state of ``value``'s flag."""
    text = target.read_value(path).strip()
    if value is not None and _is_flag_list(text):
        token = _flag_token(text, value)
        if token is not None:
            return token
    m = _BRACKETED.search(text)
    return m.group(1) if m else text


def _offered(text: str) -> list[str] | None:
    if not _BRACKETED.search(text):
        return None
    return [c.strip("[]") for c in text.split()]


def choices(target, path: str) -> list[str] | None:
    """The values a bracket-style knob offers, or None for plain-value knobs."""
    return _offered(target.read_value(path).strip())


def write_knob(target, path: str, value: str) -> str:
    """Write ``value`` and return what the file reads back afterwards."""
    try:
        target.execute(f"printf '%s' {shlex.quote(value)} > {shlex.quote(path)}", as_root=True)
    except Exception as exc:
        raise KnobError(f"could not write {value!r} to {path}: {exc}".strip()) from exc
    return read_knob(target, path, value)


def check_knobs(target, knobs: Mapping[str, str]) -> list[str]:
    """Problems that would stop ``knobs`` from being applied, found without writing."""
    problems = []
    for path, value in knobs.items():
        if not target.file_exists(path):
            problems.append(f"{path} does not exist on the target")
            continue
        text = target.read_value(path).strip()  # one read: on a board, each is an SSH round trip
        offered = _offered(text)
        if offered is not None and value not in offered:
            problems.append(f"{path}: {value!r} is not offered (choices: {', '.join(offered)})")
        elif _is_flag_list(text) and _flag_token(text, value) is None:
            problems.append(f"{path}: no flag {value.removeprefix('NO_')!r} "
                            f"(expected NAME or NO_NAME of one of: {text})")
    return problems


def revert_knobs(target, originals: Mapping[str, str]) -> list[str]:
    """Write every original value back, in reverse order; return the failures (never raises)."""
    failures = []
    for path, value in reversed(list(originals.items())):
        try:
            got = write_knob(target, path, value)
            if got != value:
                failures.append(f"{path} reads {got!r} after reverting to {value!r}")
        except Exception as exc:
            failures.append(f"{path}: {exc}")
    return failures


@contextlib.contextmanager
def applied_knobs(target, knobs: Mapping[str, str],
                  on_originals: Callable[[dict[str, str]], None] | None = None
                  ) -> Iterator[dict[str, dict[str, str]]]:
    """Apply ``knobs`` for the duration of the block, reverting them on any exit.

    ``on_originals`` receives the original values before the first write, so the
    caller can journal them and revert after a crash of this very process.
    Yields ``{path: {"original", "requested", "read_back"}}``.
    """
    originals = {path: read_knob(target, path, value) for path, value in knobs.items()}
    if on_originals is not None:
        on_originals(dict(originals))
    state = {p: {"original": originals[p], "requested": v} for p, v in knobs.items()}
    written: dict[str, str] = {}
    try:
        for path, value in knobs.items():
            written[path] = originals[path]
            state[path]["read_back"] = write_knob(target, path, value)
            if state[path]["read_back"] != value:
                raise KnobError(f"{path} reads {state[path]['read_back']!r} after writing {value!r}")
        yield state
    finally:
        failures = revert_knobs(target, written)
        if failures:
            raise KnobRevertError("could not revert knobs: " + "; ".join(failures))
