"""Build the board's QEMU with a virtual clock per vCPU (``-icount ...,percpu=on``).

Stock QEMU's instruction counting (``-icount shift=0``) gives the board a clock
of its own, but one instruction counter for the whole machine: the single TCG
thread runs the vCPUs in turn and adds every vCPU's instructions to it, so a
board with N busy CPUs gives each 1/N of its guest time. The patch in
``qemu_patches/`` gives each vCPU its own instruction clock (the machine's clock
is the slowest busy one's, a vCPU runs at most one quantum ahead of it), so
virtual time advances as if the vCPUs ran in parallel; docs/vboard.md, "The
virtual clock", says why and what it makes exact.

:func:`virtual_clock_qemu` returns the patched ``qemu-system-x86_64`` or
``qemu-system-aarch64``, built once into ``$LISA_EXT_CACHE/qemu/<key>/bin``
(key: the patches and the Debian source version) from Debian's QEMU source
package, the version of the installed ``qemu-system-x86``, with its patches
applied, then ours; only the two system emulators and their boards' machines (q35,
virt), with what the boards do not use left out. Firmware comes from the Debian packages' directories.
Each binary is built when a board of its architecture first needs it: the x86 board's first run
does not wait for the Arm target (a fifth of the build). The configured tree (``tree/``, about
400 MB with one binary built) is kept until the other binary is built from it, then deleted.
:func:`icount_args` are the arguments that switch the clock on.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from lisa_ext.errors import UserError
from lisa_ext.vboard import background
from lisa_ext.workbench import cache_root, ccache_env

__all__ = ["BUILD_PACKAGES", "QUANTUM_NS", "build_dependencies_missing", "build_in_background", "build_key",
           "debian_source_version", "icount_args", "is_built", "patches", "virtual_clock_qemu"]


PATCH_DIR = Path(__file__).with_name("qemu_patches")
#: how far (guest ns) a vCPU may run ahead of the slowest busy one: docs/vboard.md says why 100 us
QUANTUM_NS = 100_000
#: the Debian binary package whose source version is built
_REFERENCE_PACKAGE = "qemu-system-x86"
#: board architecture -> (meson target, the binary it builds); lisa_ext.vboard.qemu, which runs these
#: binaries, imports this module, so the names are not taken from it
_TARGETS = {"x86_64": ("x86_64-softmmu", "qemu-system-x86_64"),
            "arm64": ("aarch64-softmmu", "qemu-system-aarch64")}
#: where Debian's qemu-system-data, seabios and ipxe-qemu put the firmware the board loads
_FIRMWARE_PATH = "/usr/share/qemu:/usr/share/seabios:/usr/lib/ipxe/qemu"
#: only what the board uses: TCG, user networking (slirp), libfdt (arm64 device trees)
_CONFIGURE_ARGS = (
    f"--target-list={','.join(target for target, _ in _TARGETS.values())}",
    "--without-default-features", "--enable-tcg", "--enable-slirp", "--enable-fdt=system",
    "--disable-docs", "--disable-tools", "--disable-debug-info", "--disable-werror", "--audio-drv-list=",
    f"--firmwarepath={_FIRMWARE_PATH}",
)
#: what the build needs besides apt-get (scripts/install-system-packages.sh installs them)
BUILD_PACKAGES = ("build-essential", "dpkg-dev", "libfdt-dev", "libglib2.0-dev", "libpixman-1-dev",
                  "libslirp-dev", "meson", "ninja-build", "patch", "pkg-config", "zlib1g-dev")


def icount_args() -> list[str]:
    """The arguments the patched binary runs the board with: its per-vCPU virtual clock (one
    instruction per guest ns, shift=0; when every vCPU idles QEMU waits in real time for the next
    timer and the clock lands on it, patch 0003), the RTC on that clock too, and Debian's firmware
    directories (the binary runs from the cache, where QEMU's relocatable search path finds none)."""
    firmware = [arg for directory in _FIRMWARE_PATH.split(":") for arg in ("-L", directory)]
    return ["-icount", f"shift=0,sleep=on,align=off,percpu=on,quantum={QUANTUM_NS}", "-rtc", "clock=vm",
            *firmware]


def patches() -> list[Path]:
    """Our patches to Debian's QEMU source, in the order they apply."""
    return sorted(PATCH_DIR.glob("*.patch"))


def debian_source_version() -> str:
    """The Debian source version of the installed QEMU (what is built, so the patched binary
    matches the stock one it stands in for)."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${source:Version}", _REFERENCE_PACKAGE],
                             capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise UserError("dpkg-query not found: the patched QEMU is built from a Debian source package") from None
    if out.returncode != 0 or not out.stdout.strip():
        raise UserError(f"{_REFERENCE_PACKAGE} is not installed (run: bash scripts/install-system-packages.sh)")
    return out.stdout.strip()


def build_key(version: str) -> str:
    """What the built binaries depend on: the source version, our patches, the configure flags."""
    h = hashlib.sha256(f"qemu {version}\n{' '.join(_CONFIGURE_ARGS)}\n".encode())
    for patch in patches():
        h.update(f"patch {patch.name}\n".encode())
        h.update(patch.read_bytes())
    return h.hexdigest()[:16]


def build_dependencies_missing() -> list[str]:
    """The Debian packages the build needs that are not installed (empty when it can run)."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\n", *BUILD_PACKAGES],
                             capture_output=True, text=True, timeout=30).stdout
    except FileNotFoundError:
        return list(BUILD_PACKAGES)
    installed = {line.split()[0] for line in out.splitlines() if line.split()[1:2] == ["ii"]}
    return [pkg for pkg in BUILD_PACKAGES if pkg not in installed]


def _build_root(version: str) -> Path:
    """The cache directory of the build from Debian's QEMU ``version`` (built or not)."""
    return cache_root() / "qemu" / build_key(version)


def _binary(arch: str, version: str) -> Path:
    """Where that build's ``qemu-system-*`` of ``arch`` is."""
    return _build_root(version) / "bin" / _TARGETS[arch][1]


def is_built(arch: str) -> bool:
    """Whether the patched ``qemu-system-*`` of ``arch`` is in the cache (nothing is built)."""
    return arch in _TARGETS and _binary(arch, debian_source_version()).is_file()


def virtual_clock_qemu(arch: str) -> Path:
    """The patched ``qemu-system-*`` of board architecture ``arch`` ("x86_64" or "arm64"), built
    once into the cache; other processes wait for a running build."""
    if arch not in _TARGETS:
        raise UserError(f"board architecture {arch!r}: expected one of {', '.join(_TARGETS)}")
    version = debian_source_version()
    binary = _binary(arch, version)
    if binary.is_file():
        return binary
    root = _build_root(version)
    with _locked(root):
        if not binary.is_file():
            _build(version, root, arch)
    return binary


def build_in_background(arch: str) -> threading.Thread | None:
    """Start building the patched QEMU in a thread of this process, unless it is built
    (:mod:`lisa_ext.vboard.background`): :func:`virtual_clock_qemu` waits for that build."""
    try:
        if is_built(arch):
            return None
    except UserError:
        return None  # no Debian QEMU to build from: the boot says so
    return background.start("QEMU build", lambda: virtual_clock_qemu(arch))


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _build(version: str, root: Path, arch: str) -> None:
    """Build ``arch``'s binary in ``root/tree``: fetched, patched and configured (both targets,
    what :func:`build_key` covers) unless an earlier build left it so; ninja resumes what an
    interrupted one compiled."""
    missing = build_dependencies_missing()
    if missing:
        raise UserError(f"building the virtual-clock QEMU needs: {' '.join(missing)} "
                        "(run: bash scripts/install-system-packages.sh)")
    root.mkdir(parents=True, exist_ok=True)
    target, name = _TARGETS[arch]
    log_path = root / f"build-{target}.log"
    started, load = time.monotonic(), os.getloadavg()[0]
    for stale in root.glob("src-*"):  # an older layout's scratch tree
        shutil.rmtree(stale, ignore_errors=True)
    tree = root / "tree"
    configured = tree / "configured"  # written once configure succeeded
    with open(log_path, "w") as log:
        if not configured.is_file():
            shutil.rmtree(tree, ignore_errors=True)
            tree.mkdir()
            src = _fetch_source(version, tree, log, log_path)
            for patch in patches():
                _run(["patch", "-p1", "--forward", "--batch", "-i", str(patch)], src, log, log_path,
                     f"applying {patch.name}")
            (src / "build-lisa-ext").mkdir()
            _run(_configure_command(src), src / "build-lisa-ext", log, log_path, "configure", _env(src),
                 attempts=2)
            configured.write_text(src.name + "\n")
        src = tree / configured.read_text().strip()
        build = src / "build-lisa-ext"
        jobs = str(max(1, os.cpu_count() or 1))
        _run(["nice", "-n", "5", "ninja", "-j", jobs, name], build, log, log_path, "ninja", _env(src))
        bin_dir = root / "bin"
        bin_dir.mkdir(exist_ok=True)
        shutil.copy2(build / name, bin_dir / f"{name}.tmp")
        os.replace(bin_dir / f"{name}.tmp", bin_dir / name)
    record = root / "build.json"
    built = json.loads(record.read_text()).get("binaries", {}) if record.is_file() else {}
    built[name] = {"seconds": round(time.monotonic() - started, 1), "load_at_start": round(load, 2)}
    record.write_text(json.dumps({
        "debian_source_version": version, "patches": [p.name for p in patches()],
        "configure": list(_CONFIGURE_ARGS), "cpus": os.cpu_count(), "binaries": built}, indent=1) + "\n")
    if all((bin_dir / other).is_file() for _, other in _TARGETS.values()):
        shutil.rmtree(tree, ignore_errors=True)


def _configure_command(src: Path) -> list[str]:
    command = [str(src / "configure"), *_CONFIGURE_ARGS]
    if shutil.which("ccache"):
        command.append("--cc=ccache cc")
    return command


def _env(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    if shutil.which("ccache"):
        # meson compiles through ccache wherever it finds one
        env = ccache_env(env)
        # paths relative to the source tree: a rebuild after a patch changes then recompiles only
        # what the patch touched
        env.setdefault("CCACHE_BASEDIR", str(src))
    return env


def _fetch_source(version: str, into: Path, log, log_path: Path) -> Path:
    """Debian's QEMU source package at ``version``, unpacked with Debian's patches applied."""
    _run(["apt-get", "source", "--only-source", f"qemu={version}"], into, log, log_path,
         "apt-get source (needs a deb-src entry: bash scripts/install-system-packages.sh)")
    trees = [p for p in into.iterdir() if p.is_dir() and p.name.startswith("qemu-")]
    if len(trees) != 1:
        raise UserError(f"apt-get source qemu={version} unpacked no single source tree; see {log_path}")
    return trees[0]


def _run(cmd: list[str], cwd: Path, log, log_path: Path, step: str, env: dict[str, str] | None = None,
         attempts: int = 1) -> None:
    """Run one build step into the log. A step that fails having printed nothing is run again, up
    to ``attempts`` times: configure once ended so from an empty cache (exit status unrecorded, its
    tree deleted with the scratch) and passed on every rerun, by hand and under pytest."""
    for attempt in range(1, attempts + 1):
        log.write(f"\n$ {' '.join(cmd)}\n")
        log.flush()
        printed_from = log_path.stat().st_size
        try:
            proc = subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env)
        except FileNotFoundError:
            raise UserError(f"building the virtual-clock QEMU needs {cmd[0]} "
                            "(run: bash scripts/install-system-packages.sh)") from None
        if proc.returncode == 0:
            return
        status = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        silent = log_path.stat().st_size == printed_from
        # configure writes what went wrong to its config.log, inside the scratch tree deleted next
        config_log = cwd / "config.log"
        if config_log.is_file():
            log.write(f"# {step}: the last lines of {config_log.name}\n")
            log.writelines(config_log.read_text(errors="replace").splitlines(keepends=True)[-40:])
        if silent and attempt < attempts:
            log.write(f"# {step} ended with {status} and printed nothing: running it again\n")
            continue
        log.flush()
        raise UserError(f"building the virtual-clock QEMU failed at {step} ({status}); see {log_path}")
