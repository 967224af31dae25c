"""Runtime knobs: the sysfs/procfs files a variant writes, for campaigns and kernel deploys.

The one implementation of knobs (spec check, glob expansion, write, read-back,
revert), at the target layer: the campaign runner applies a variant's knobs
around each run and reverts them (:func:`applied_knobs`); a kernel deploy
applies its variant's knobs for the whole boot (:func:`apply_knobs`). Both
need only devlib's ``execute`` of the target (:class:`lisa_ext.target.Target`
or a LISA target): every read and write is one shell command run as root.

A knob path may be a shell glob (``/sys/devices/system/cpu/cpufreq/policy*/scaling_governor``):
every match gets the value, and a glob matching nothing is an error.

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
import fnmatch
import math
import re
import shlex
from typing import Any, Callable, Iterable, Iterator, Mapping

__all__ = ["KnobError", "KnobRevertError", "active_value", "applied_knobs", "apply_knobs", "check_knobs",
           "choices", "executing_file", "expand_knobs", "knob_problem", "read_knob", "read_knobs",
           "revert_knobs", "write_knob"]

_GLOB_CHARS = "*?["
#: what a knob path may hold: a glob is expanded by the target's shell, unquoted, so no
#: character that shell would read as anything but a file name or a glob
_PATH_RE = re.compile(r"^[A-Za-z0-9_./:,+@*?\[\]-]+\Z")

#: a sysfs attribute's store() gets at most one page
_VALUE_MAX = 4096
#: files whose value the kernel runs as a program, or that register one: a knob there would run
#: a command as root on the target (Documentation/admin-guide/sysctl/kernel.rst: core_pattern
#: "|program", modprobe, hotplug, poweroff_cmd, usermodehelper; admin-guide/binfmt-misc.rst;
#: uevent_helper; the usermode helpers drbd and nfsd take as module parameters)
_EXECUTING_FILES = ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/kernel/hotplug",
                    "/proc/sys/kernel/poweroff_cmd", "/proc/sys/kernel/usermodehelper/bset",
                    "/proc/sys/kernel/usermodehelper/inheritable", "/proc/sys/fs/binfmt_misc/register",
                    "/sys/kernel/uevent_helper", "/sys/module/drbd/parameters/usermode_helper",
                    "/sys/module/nfsd/parameters/cltrack_prog")
#: the same, by file name wherever the file lives: a cgroup v1 hierarchy's ``release_agent``
#: (Documentation/admin-guide/cgroup-v1/cgroups.rst) is in its root, whatever the mount point
_EXECUTING_NAMES = ("release_agent",)
#: under /proc, only sysctls and IRQ settings are knobs: /proc/<pid>/mem is another process's
#: memory, /proc/sysrq-trigger crashes or reboots
_PROC_KNOB = re.compile(r"/proc/(sys|irq)/")

_BRACKETED = re.compile(r"\[([^\]]+)\]")
_FLAG = re.compile(r"[A-Z][A-Z0-9_]*")


class KnobError(RuntimeError):
    """A knob could not be written or did not read back as requested."""


class KnobRevertError(KnobError):
    """A knob could not be restored: the target is left in a modified state."""


def executing_file(path: str) -> bool:
    """Whether writing ``path``, or a file the glob ``path`` may match, makes the kernel run a
    program or reach another process (see :data:`_EXECUTING_FILES`, :data:`_EXECUTING_NAMES`,
    :data:`_PROC_KNOB`)."""
    if path.startswith("/proc/") and not _PROC_KNOB.match(path):
        return True
    if path.startswith("/proc/sys/fs/binfmt_misc"):
        return True
    # fnmatch's * also matches '/': a glob is refused when it could reach such a file at all
    if any(fnmatch.fnmatchcase(f, path) for f in _EXECUTING_FILES):
        return True
    return any(fnmatch.fnmatchcase(name, path.rsplit("/", 1)[-1]) for name in _EXECUTING_NAMES)


def knob_problem(path: Any, value: Any) -> str | None:
    """What is wrong with one knob of a spec (campaign or kernel variant), or None.

    A knob is an absolute path under ``/sys/`` or ``/proc/sys/``, ``/proc/irq/`` (globs
    allowed, ``..`` not; never a file the kernel runs a program from) and a string or
    number value.
    """
    if not isinstance(path, str) or not re.match(r"^/(sys|proc)/", path):
        return (f"knob {path!r} must be an absolute path under /sys or /proc, "
                "e.g. /sys/module/workqueue/parameters/default_affinity_scope")
    if ".." in path.split("/"):
        return f"knob {path}: '..' is not allowed in a knob path"
    if not _PATH_RE.match(path):
        return (f"knob {path!r}: a knob path may hold letters, digits, _ . / - : , + @ and the glob "
                "characters * ? [ ] only")
    if executing_file(path):
        return (f"knob {path}: the kernel runs the program such a file names, or it reaches other "
                "processes; a spec may not write it (under /proc, knobs are in /proc/sys/ and /proc/irq/)")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return f"knob {path}: value must be a string or a number, got {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"knob {path}: value must be a finite number, got {value!r}"
    if len(str(value)) > _VALUE_MAX:
        return f"knob {path}: value longer than {_VALUE_MAX} characters (a sysfs file takes one page)"
    return None


def _read_value(target, path: str) -> str:
    return target.execute(f"cat {shlex.quote(path)}", as_root=True)


def _file_exists(target, path: str) -> bool:
    return target.execute(f"[ -e {shlex.quote(path)} ] && echo 1 || echo 0", as_root=True).strip() == "1"


def _matches(target, pattern: str) -> list[str]:
    # the glob is expanded by the target's shell; each match is quoted from then on
    if not _PATH_RE.match(pattern):
        raise KnobError(f"knob {pattern!r}: not a plain sysfs/procfs path or glob; refusing to hand "
                        "it to the target's shell")
    listing = target.execute(f"for f in {pattern}; do [ -e \"$f\" ] && echo \"$f\"; done; true",
                             as_root=True)
    return [line for line in listing.splitlines() if line]


def expand_knobs(target, knobs: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> dict[str, str]:
    """``{path: value}`` with every glob replaced by the files it matches on the target.

    :raises KnobError: a glob matches nothing.
    """
    items = knobs.items() if isinstance(knobs, Mapping) else knobs
    out: dict[str, str] = {}
    for pattern, value in items:
        pattern, value = str(pattern), str(value)
        paths = _matches(target, pattern) if any(c in pattern for c in _GLOB_CHARS) else [pattern]
        if not paths:
            raise KnobError(f"knob {pattern}: no file matches on the target")
        refused = [p for p in paths if executing_file(p)]
        if refused:  # the spec check refuses these first; this holds for any caller
            raise KnobError(f"knob {pattern}: refusing to write {refused[0]}, which makes the kernel run a "
                            "program or reaches other processes")
        out.update(dict.fromkeys(paths, value))
    return out


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


def active_value(text: str, value: str | None = None) -> str:
    """The active value in a knob file's ``text``; for a flag list, the state of ``value``'s flag."""
    text = text.strip()
    if value is not None and _is_flag_list(text):
        token = _flag_token(text, value)
        if token is not None:
            return token
    m = _BRACKETED.search(text)
    return m.group(1) if m else text


def read_knob(target, path: str, value: str | None = None) -> str:
    """The active value of ``path``; for a flag-list file, the state of ``value``'s flag."""
    return active_value(_read_value(target, path), value)


#: between two files' contents in :func:`read_knobs`' output (no sysfs value holds it)
_SEPARATOR = "--lisa-ext-knob-end--"


def read_knobs(target, knobs: Mapping[str, str]) -> dict[str, str]:
    """:func:`read_knob` of every path of ``{path: value}`` in one target command: on a
    board each command is an SSH round trip, and a variant sets a dozen files."""
    if not knobs:
        return {}
    paths = " ".join(shlex.quote(p) for p in knobs)
    out = target.execute(f"for f in {paths}; do cat \"$f\" || exit 1; echo {_SEPARATOR}; done",
                         as_root=True)
    texts = out.split(_SEPARATOR + "\n")
    if len(texts) < len(knobs):
        raise KnobError(f"could not read {', '.join(list(knobs)[len(texts) - 1:])}: {out.strip()[-200:]}")
    return {path: active_value(text, value) for (path, value), text in zip(knobs.items(), texts)}


def _offered(text: str) -> list[str] | None:
    if not _BRACKETED.search(text):
        return None
    return [c.strip("[]") for c in text.split()]


def choices(target, path: str) -> list[str] | None:
    """The values a bracket-style knob offers, or None for plain-value knobs."""
    return _offered(_read_value(target, path).strip())


def write_knob(target, path: str, value: str) -> str:
    """Write ``value`` and return what the file reads back afterwards.

    An empty value is written as a lone newline: a zero-byte write never reaches a sysfs
    attribute's store() (kernfs returns before calling it), so the old value would stay
    (e.g. /sys/module/idle_gating/parameters/comm could not be cleared)."""
    fmt = "%s" if value else "%s\\n"
    quoted = shlex.quote(path)
    try:
        # write and read back in one command: one round trip per knob
        text = target.execute(f"printf '{fmt}' {shlex.quote(value)} > {quoted} && cat {quoted}", as_root=True)
    except Exception as exc:
        raise KnobError(f"could not write {value!r} to {path}: {exc}".strip()) from exc
    return active_value(text, value)


def check_knobs(target, knobs: Mapping[str, str]) -> list[str]:
    """Problems that would stop ``knobs`` from being applied, found without writing."""
    try:
        knobs = expand_knobs(target, knobs)
    except KnobError as exc:
        return [str(exc)]
    problems = []
    for path, value in knobs.items():
        if not _file_exists(target, path):
            problems.append(f"{path} does not exist on the target")
            continue
        text = _read_value(target, path).strip()  # one read: on a board, each is an SSH round trip
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
    Yields ``{path: {"original", "requested", "read_back"}}``, globs expanded.
    """
    knobs = expand_knobs(target, knobs)
    originals = read_knobs(target, knobs)
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


def apply_knobs(target, knobs: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> dict[str, str]:
    """Write each knob for good (a kernel variant's, kept for the boot) and read it
    back; returns ``{path: value read back}``, globs expanded.

    :raises KnobError: a glob matches nothing, or a knob does not read back as written.
    """
    applied = {}
    for path, value in expand_knobs(target, knobs).items():
        applied[path] = write_knob(target, path, value)
        if applied[path] != value:
            raise KnobError(f"knob {path}: wrote {value!r}, reads back {applied[path]!r}")
    return applied
