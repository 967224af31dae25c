"""Which kernel a target runs: the one probe for deploys, the virtual board and run provenance.

One shell command gives the release and version (``uname -r`` / ``uname -v``,
the latter carrying our build's ``#lx<hash>`` tag, see
:mod:`lisa_ext.kernel.build`), the boot id (``/proc/sys/kernel/random/boot_id``,
new on every boot, so a reboot is told from the kernel before), the command
line and the GNU build id of the running image, read from the ELF notes the
kernel exports in ``/sys/kernel/notes`` (kernel/ksysfs.c ``notes_read``).
Anything unreadable (an Android shell without ``od``) is ``None``, not an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["PROBE_COMMAND", "RunningKernel", "parse_build_id", "parse_probe", "probe_running_kernel"]

_PARTS = (
    "uname -r",
    "uname -v",
    "cat /proc/sys/kernel/random/boot_id",
    "cat /proc/cmdline",
    "od -An -v -tx1 /sys/kernel/notes | tr -d ' \\n'",
)
#: one line per part, empty when the part failed (``$(...)`` drops trailing newlines)
PROBE_COMMAND = "; ".join(f'printf "%s\\n" "$({part} 2>/dev/null)"' for part in _PARTS)

#: ELF note type of the GNU build id (include/uapi/linux/elf.h NT_GNU_BUILD_ID)
_NT_GNU_BUILD_ID = 3


@dataclass(frozen=True)
class RunningKernel:
    """What the target reports about the kernel it runs."""

    release: str | None  # uname -r
    version: str | None  # uname -v
    boot_id: str | None
    build_id: str | None  # GNU build id from /sys/kernel/notes
    cmdline: str | None


def parse_build_id(notes: bytes) -> str | None:
    """The NT_GNU_BUILD_ID note of a raw ELF notes section (``/sys/kernel/notes``)."""
    offset = 0
    while offset + 12 <= len(notes):
        namesz, descsz, ntype = (int.from_bytes(notes[offset + i:offset + i + 4], "little") for i in (0, 4, 8))
        name_start = offset + 12
        desc_start = name_start + ((namesz + 3) & ~3)
        name = notes[name_start:name_start + namesz].rstrip(b"\0")
        if name == b"GNU" and ntype == _NT_GNU_BUILD_ID:
            return notes[desc_start:desc_start + descsz].hex()
        offset = desc_start + ((descsz + 3) & ~3)
    return None


def parse_probe(output: str) -> RunningKernel:
    """The :class:`RunningKernel` in the output of :data:`PROBE_COMMAND`."""
    lines = [line.strip() for line in output.split("\n")]
    values = [(lines[i] if i < len(lines) else "") or None for i in range(len(_PARTS))]
    release, version, boot_id, cmdline, notes_hex = values
    try:
        build_id = parse_build_id(bytes.fromhex(notes_hex)) if notes_hex else None
    except ValueError:  # od missing or printing something else
        build_id = None
    return RunningKernel(release=release, version=version, boot_id=boot_id, build_id=build_id,
                         cmdline=cmdline)


def probe_running_kernel(run: Callable[[str], str]) -> RunningKernel:
    """Probe with ``run(command) -> stdout``, a shell on the target (as root)."""
    return parse_probe(run(PROBE_COMMAND))
