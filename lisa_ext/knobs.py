"""Runtime knobs: the sysfs/procfs files a variant writes, for campaigns and kernel deploys.

The one implementation of knobs (spec check, glob expansion, write, read-back,
revert), at the target layer: the campaign runner applies a variant's knobs
around each run and reverts them (:func:`applied_knobs`); a kernel deploy
applies its variant's knobs for the whole boot (:func:`apply_knobs`). Both
need only devlib's ``execute`` of the target (:class:`lisa_ext.target.Target`
or a LISA target). Reads, writes and reverts go in batches, one shell command run as root for
all of a variant's files: on the virtual board each command is an SSH round trip paid in the
guest's time.

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
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple

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

#: between two files' contents, or two globs' matches, in one command's output (no sysfs value holds it)
_SEPARATOR = "--lisa-ext-knob-end--"
#: what :func:`check_knobs` reads for a file that does not exist, and after one it cannot read
_MISSING, _UNREADABLE = "--lisa-ext-knob-missing--", "--lisa-ext-knob-unreadable--"

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


def _blocks(out: str) -> list[str]:
    """One command's output cut at each :data:`_SEPARATOR` line (an adb shell may end lines
    with CR LF)."""
    return out.replace("\r\n", "\n").split(_SEPARATOR + "\n")


def _read_value(target, path: str) -> str:
    return target.execute(f"cat {shlex.quote(path)}", as_root=True)


def _matches(target, patterns: list[str]) -> dict[str, list[str]]:
    """The files each glob matches on the target, every glob in one command."""
    # the glob is expanded by the target's shell; each match is quoted from then on
    for pattern in patterns:
        if not _PATH_RE.match(pattern):
            raise KnobError(f"knob {pattern!r}: not a plain sysfs/procfs path or glob; refusing to hand "
                            "it to the target's shell")
    if not patterns:
        return {}
    listing = target.execute("; ".join(f"for f in {pattern}; do [ -e \"$f\" ] && echo \"$f\"; done; "
                                       f"echo {_SEPARATOR}" for pattern in patterns), as_root=True)
    found = _blocks(listing)
    return {pattern: [line for line in (found[i] if i < len(found) else "").splitlines() if line]
            for i, pattern in enumerate(patterns)}


def expand_knobs(target, knobs: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> dict[str, str]:
    """``{path: value}`` with every glob replaced by the files it matches on the target.

    :raises KnobError: a glob matches nothing.
    """
    items = [(str(p), str(v)) for p, v in (knobs.items() if isinstance(knobs, Mapping) else knobs)]
    matches = _matches(target, [p for p, _ in items if any(c in p for c in _GLOB_CHARS)])
    out: dict[str, str] = {}
    for pattern, value in items:
        paths = matches.get(pattern, [pattern])
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


def _read_files(target, paths: Iterable[str]) -> dict[str, tuple[str, str | None]]:
    """Every file's ``(text, problem)`` in one target command (on a board each command is an SSH
    round trip, and a variant sets a dozen files): ``problem`` says why a file has no text."""
    paths = list(paths)
    if not paths:
        return {}
    quoted = " ".join(shlex.quote(p) for p in paths)
    out = target.execute(f"for f in {quoted}; do if [ -e \"$f\" ]; then cat \"$f\" 2>&1 || echo {_UNREADABLE}; "
                         f"else echo {_MISSING}; fi; echo {_SEPARATOR}; done", as_root=True)
    read: dict[str, tuple[str, str | None]] = {}
    for path, text in zip(paths, _blocks(out) + [_MISSING] * len(paths)):
        if text.strip() == _MISSING:
            read[path] = ("", "does not exist on the target")
        elif text.strip().endswith(_UNREADABLE):
            read[path] = ("", "cannot be read: " + text.strip().removesuffix(_UNREADABLE).strip()[-200:])
        else:
            read[path] = (text, None)
    return read


def read_knobs(target, knobs: Mapping[str, str]) -> dict[str, str]:
    """:func:`read_knob` of every path of ``{path: value}``, in one target command.

    :raises KnobError: a file does not exist or cannot be read.
    """
    values = {}
    for path, (text, problem) in _read_files(target, knobs).items():
        if problem is not None:
            raise KnobError(f"knob {path} {problem}")
        values[path] = active_value(text, knobs[path])
    return values


def _offered(text: str) -> list[str] | None:
    if not _BRACKETED.search(text):
        return None
    return [c.strip("[]") for c in text.split()]


def choices(target, path: str) -> list[str] | None:
    """The values a bracket-style knob offers, or None for plain-value knobs."""
    return _offered(_read_value(target, path).strip())


#: what ends each knob's block in the output of a batch of writes (no sysfs value holds them):
#: written and read back; not written; written but not read back
_WRITTEN, _FAILED, _UNREAD = "--lisa-ext-knob-written--", "--lisa-ext-knob-failed--", "--lisa-ext-knob-unread--"
_BLOCK_END = re.compile(r"\n(--lisa-ext-knob-(?:written|failed|unread)--)\n")
#: characters of shell per target command in a batch of writes: adb's and some SSH servers'
#: command lines are short, and a value may take a page
_COMMAND_MAX = 8192


class _Write(NamedTuple):
    """One knob of a batch: what it read back, or why not, and whether the file may have changed."""

    path: str
    text: str
    error: str | None
    changed: bool


def _write_command(path: str, value: str, keep_going: bool) -> str:
    """Shell that writes ``value`` to ``path``, then prints what the file reads back (or the
    error) and a block end; without ``keep_going`` a failure ends the batch.

    An empty value is written as a lone newline: a zero-byte write never reaches a sysfs
    attribute's store() (kernfs returns before calling it), so the old value would stay
    (e.g. /sys/module/idle_gating/parameters/comm could not be cleared)."""
    fmt = "%s" if value else "%s\\n"
    quoted = shlex.quote(path)
    stop = "; exit 0" if not keep_going else ""
    # 2>&1 before the > : the shell's own "cannot create" goes to $r, the value to the file
    return (f"if r=$(printf '{fmt}' {shlex.quote(value)} 2>&1 > {quoted}); then"
            f" if r=$(cat {quoted} 2>&1); then printf '%s\\n{_WRITTEN}\\n' \"$r\";"
            f" else printf '%s\\n{_UNREAD}\\n' \"$r\"{stop}; fi;"
            f" else printf '%s\\n{_FAILED}\\n' \"$r\"{stop}; fi")


def _write_many(target, knobs: Mapping[str, str], *, keep_going: bool) -> list[_Write]:
    """Write each knob in order, as many per target command as fit (on a board each command is
    an SSH round trip that costs the guest's time); a :class:`_Write` for every knob tried.
    Without ``keep_going`` the first failure ends it: the knobs after it are not written."""
    pending = list(knobs.items())
    results: list[_Write] = []
    while pending:
        chunk, commands = [], []
        while pending and (not commands or sum(map(len, commands)) + len(
                _write_command(*pending[0], keep_going)) <= _COMMAND_MAX):
            chunk.append(pending.pop(0))
            commands.append(_write_command(*chunk[-1], keep_going))
        try:
            out = target.execute("; ".join(commands), as_root=True)
        except Exception as exc:  # the target did not answer: any knob of the chunk may be written
            results += [_Write(path, "", f"{exc}".strip(), True) for path, _ in chunk]
        else:
            parts = _BLOCK_END.split(out.replace("\r\n", "\n"))
            blocks = list(zip(parts[0::2], parts[1::2]))
            for (path, _), (text, end) in zip(chunk, blocks):
                error = None if end == _WRITTEN else text.strip() or "no message"
                results.append(_Write(path, text, error, end != _FAILED))
            if len(blocks) < len(chunk) and (keep_going or all(end == _WRITTEN for _, end in blocks)):
                missing = chunk[len(blocks):] if keep_going else chunk[len(blocks):len(blocks) + 1]
                results += [_Write(path, "", f"no answer from the target: {out.strip()[-200:]!r}", True)
                            for path, _ in missing]
        if not keep_going and any(r.error for r in results):
            break
    return results


def _failure(path: str, value: str, error: str) -> str:
    return f"could not write {value!r} to {path}: {error}"


def write_knob(target, path: str, value: str) -> str:
    """Write ``value`` and return what the file reads back afterwards (one target command)."""
    [write] = _write_many(target, {path: value}, keep_going=False)
    if write.error is not None:
        raise KnobError(_failure(path, value, write.error))
    return active_value(write.text, value)


def check_knobs(target, knobs: Mapping[str, str]) -> list[str]:
    """Problems that would stop ``knobs`` from being applied, found without writing."""
    try:
        knobs = expand_knobs(target, knobs)
    except KnobError as exc:
        return [str(exc)]
    problems = []
    read = _read_files(target, knobs)
    for path, value in knobs.items():
        text, problem = read[path]
        if problem is not None:
            problems.append(f"{path} {problem}")
            continue
        text = text.strip()
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
    backwards = dict(reversed(list(originals.items())))
    for write in _write_many(target, backwards, keep_going=True):
        path, value = write.path, backwards[write.path]
        if write.error is not None:
            failures.append(f"{path}: {_failure(path, value, write.error)}")
        elif active_value(write.text, value) != value:
            failures.append(f"{path} reads {active_value(write.text, value)!r} after reverting to {value!r}")
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
        results = _write_many(target, knobs, keep_going=False)
        # a file the shell could not open or write keeps its value: only the others are reverted
        written.update((r.path, originals[r.path]) for r in results if r.changed)
        for path, text, error, _ in results:
            if error is not None:
                raise KnobError(_failure(path, knobs[path], error))
            state[path]["read_back"] = active_value(text, knobs[path])
            if state[path]["read_back"] != knobs[path]:
                raise KnobError(f"{path} reads {state[path]['read_back']!r} after writing {knobs[path]!r}")
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
    knobs = expand_knobs(target, knobs)
    applied = {}
    for path, text, error, _ in _write_many(target, knobs, keep_going=False):
        if error is not None:
            raise KnobError(_failure(path, knobs[path], error))
        applied[path] = active_value(text, knobs[path])
        if applied[path] != knobs[path]:
            raise KnobError(f"knob {path}: wrote {knobs[path]!r}, reads back {applied[path]!r}")
    return applied
