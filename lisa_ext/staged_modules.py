"""A kernel build's staged modules, as every boot path carries them.

A build installs its modules under ``<dir>/lib/modules/<release>/``
(:mod:`lisa_ext.kernel.build`); a boot takes them with the list of modules to
load at boot (:data:`MODULES_LOAD_FILE`, one ``modprobe`` line each, read by the
virtual board's init): on the board's modules disk
(:func:`lisa_ext.vboard.rootfs.make_modules_disk`) or as a tarball unpacked by a
kexec deploy (:func:`modules_tarball`).
"""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path
from typing import Iterable

from lisa_ext.errors import UserError

__all__ = ["MODULES_LOAD_FILE", "find_release_dir", "modules_tarball"]

#: File inside ``lib/modules/<release>/`` listing the modules init loads, one per line.
MODULES_LOAD_FILE = "lisa-ext.load"


def find_release_dir(modules_dir: Path, release: str) -> Path:
    """Locate ``<release>/`` in a staged modules tree, whichever level it is given at."""
    modules_dir = Path(modules_dir)
    for candidate in (
        modules_dir / "lib" / "modules" / release,
        modules_dir / "modules" / release,
        modules_dir / release,
        modules_dir,
    ):
        if candidate.name == release and candidate.is_dir():
            return candidate
    raise UserError(f"{modules_dir}: no lib/modules/{release} directory in the staged modules")


def modules_tarball(modules_dir: Path, release: str, load: Iterable[str], dest: Path) -> Path:
    """The release's modules (without the build/source links) plus the boot load list, as a .tar.gz."""
    release_dir = find_release_dir(modules_dir, release)
    with tarfile.open(dest, "w:gz", compresslevel=3) as tar:
        for entry in sorted(release_dir.iterdir()):
            if entry.name in ("build", "source", MODULES_LOAD_FILE):
                continue
            tar.add(entry, arcname=entry.name)
        data = "".join(f"{m}\n" for m in load).encode()
        info = tarfile.TarInfo(MODULES_LOAD_FILE)
        info.size, info.mtime = len(data), int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return dest
