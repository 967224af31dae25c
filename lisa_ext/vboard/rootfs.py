"""Disks of the virtual board: the cached Debian rootfs and a per-boot modules disk.

The rootfs is built once per cache and architecture with ``debootstrap`` (Debian
bookworm, minbase plus the tools a study runs), then packed into an ext4 image
with ``mkfs.ext4 -d``, which needs no loop mount. Every boot runs on a throw-away
qcow2 overlay of that image, so the cached image never changes and a crashed
guest leaves nothing behind.

* x86_64: sshd, trace-cmd, rt-app, fio, PostgreSQL, kexec-tools, ... installed by
  a plain ``debootstrap``.
* arm64: only what a user's freshly installed arm64 board has (sshd, kexec-tools,
  kmod, iproute2, procps, tini): LISA pushes its own arm64 trace-cmd and rt-app
  when a campaign first needs them, as on any board. The packages are resolved and
  fetched by ``debootstrap --foreign`` (which runs nothing of the foreign
  architecture), unpacked with ``dpkg-deb -x``, and the few things their
  maintainer scripts would do on the board (accounts, sshd's configuration) are
  done here, on the host: no binfmt_misc, no emulated ``dpkg --configure``.

A kernel variant's modules travel on a second, small ext4 disk made per boot
from the variant's staged ``lib/modules/<release>`` tree; the guest's init
(``init.sh`` beside this module) links it into ``/lib/modules`` and loads the
modules named in ``<release>/lisa-ext.load`` (the platform-emulation drivers).

Cache layout, under ``$LISA_EXT_CACHE/vboard`` (default ``~/.cache/lisa-ext``)::

    debootstrap-<key>/    the unpacked Debian system (reused when only our files change)
    rootfs-<key>.ext4     the packed image booted by QEMU
    arm64/debootstrap-<key>/, arm64/rootfs-<key>.ext4
                          the same for the arm64 board
    ssh/id_ed25519[.pub]  the key pair authorised for root in the guest
    ssh/host_ed25519_key[.pub], ssh/known_hosts
                          the guest's only host key, and the pin the host checks it against
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterator, Sequence

from lisa_ext.errors import UserError
from lisa_ext.staged_modules import MODULES_LOAD_FILE, find_release_dir
from lisa_ext.vboard import background
from lisa_ext.workbench import cache_root

__all__ = [
    "ARCHES",
    "ARM64_ROOTFS_PACKAGES",
    "ROOTFS_PACKAGES",
    "Rootfs",
    "VBOARD_ALIAS",
    "build_in_background",
    "cache_root",
    "ensure_host_key",
    "ensure_rootfs",
    "ensure_ssh_key",
    "host_key_path",
    "known_hosts_pin_path",
    "make_empty_disk",
    "make_modules_disk",
    "make_overlay",
    "make_scratch_disk",
    "ssh_key_path",
    "vboard_cache_dir",
]

log = logging.getLogger(__name__)

#: the name the board's host key is pinned under (``HostKeyAlias``), whatever port QEMU forwards
VBOARD_ALIAS = "lisa-ext-vboard"

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"

#: Debian packages added to minbase. tini reaps orphans as PID 1 (there is no systemd).
#: postgresql-15 (initdb, postgres, pgbench), dmsetup/cryptsetup-bin (fio on dm-crypt) and
#: rt-tests (hackbench, cyclictest) serve the workload kinds; schbench and ebizzy are not
#: packaged and are pushed by ``lisa-ext campaign tool install``.
ROOTFS_PACKAGES: tuple[str, ...] = (
    "openssh-server",
    "trace-cmd",
    "fio",
    "rt-app",
    "rt-tests",
    "postgresql-15",
    "dmsetup",
    "cryptsetup-bin",
    "kexec-tools",
    "kmod",
    "iproute2",
    "procps",
    "tini",
)

#: What a freshly installed arm64 board has: sshd, kexec for kernel switches, modprobe, ip, ps, and
#: tini as PID 1's reaper. trace-cmd and rt-app are LISA's, pushed by the campaign runner.
ARM64_ROOTFS_PACKAGES: tuple[str, ...] = (
    "openssh-server",
    "kexec-tools",
    "kmod",
    "iproute2",
    "procps",
    "tini",
)

#: The boards' architectures (kernel ARCH names) and their Debian ones.
ARCHES = {"x86_64": "amd64", "arm64": "arm64"}

#: Free space left in the image for traces and workload files, on top of the system.
_IMAGE_HEADROOM = 768 * 1024 * 1024

_SSHD_CONFIG = """\
# lisa-ext virtual board: root logs in with the cache's key only; one host key, pinned by the host
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
# no PAM session per command (Debian's runs pam_motd's run-parts, pam_env, pam_limits...): a
# campaign sends dozens of commands per run, and each took a median 230-276 ms of host time with
# it on the emulated CPU against 128-176 without (three alternating measurements at load 2)
UsePAM no
PrintLastLog no
MaxSessions 64
MaxStartups 64
"""

#: The arm64 board's whole sshd_config: openssh-server's postinst, which writes Debian's (with
#: PAM) on an installed system, is not run there.
_ARM64_SSHD_MAIN = """\
Include /etc/ssh/sshd_config.d/*.conf
UsePAM no
PrintMotd no
Subsystem sftp /usr/lib/openssh/sftp-server
"""



def vboard_cache_dir() -> Path:
    return cache_root() / "vboard"


def _arch_cache_dir(arch: str) -> Path:
    """Where one architecture's rootfs lives: the x86 board's at the top, as always."""
    return vboard_cache_dir() if arch == "x86_64" else vboard_cache_dir() / arch


def ssh_key_path() -> Path:
    """Private key authorised for root on the board (LISA's ``keyfile``)."""
    return vboard_cache_dir() / "ssh" / "id_ed25519"


@dataclass(frozen=True)
class Rootfs:
    """A packed rootfs image ready to boot, and the key that logs into it."""

    image: Path
    ssh_key: Path
    key: str


def _run(cmd: Sequence[str], *, what: str, log_file: Path | None = None, **kwargs) -> None:
    """Run a host tool; on failure raise a UserError quoting the end of its output."""
    if shutil.which(cmd[0]) is None:
        raise UserError(f"{what}: {cmd[0]} not found (run: bash scripts/install-system-packages.sh)")
    if log_file is None:
        proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
        output = proc.stdout + proc.stderr
    else:
        with open(log_file, "w") as out:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, **kwargs)
        output = log_file.read_text(errors="replace")
    if proc.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-15:])
        where = f" (full log: {log_file})" if log_file else ""
        raise UserError(f"{what} failed with exit code {proc.returncode}{where}:\n{tail}")


@contextlib.contextmanager
def _cache_lock(directory: Path) -> Iterator[None]:
    """Serialise builders sharing one cache (a test run and a CLI call, say)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def host_key_path() -> Path:
    """The board's own SSH host key (private half), installed into the rootfs image."""
    return vboard_cache_dir() / "ssh" / "host_ed25519_key"


def known_hosts_pin_path() -> Path:
    """known_hosts pinning the board's host key under :data:`VBOARD_ALIAS`."""
    return vboard_cache_dir() / "ssh" / "known_hosts"


def _keygen(key: Path, comment: str) -> None:
    """An ed25519 key pair at ``key`` / ``key.pub``, made once."""
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        tmp = key.with_name(key.name + ".tmp")
        for stale in (tmp, tmp.with_name(tmp.name + ".pub")):
            stale.unlink(missing_ok=True)
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(tmp)], what="ssh-keygen")
        os.replace(tmp.with_name(tmp.name + ".pub"), key.with_name(key.name + ".pub"))
        os.replace(tmp, key)
    key.chmod(0o600)


def ensure_ssh_key() -> Path:
    """Create the cache's SSH key pair once; return the private key path."""
    key = ssh_key_path()
    _keygen(key, "lisa-ext-vboard")
    return key


def ensure_host_key() -> Path:
    """Create the board's host key once and pin it; return the pin file (a known_hosts)."""
    key = host_key_path()
    _keygen(key, "lisa-ext-vboard-host")
    kind, blob = key.with_name(key.name + ".pub").read_text().split()[:2]
    pin = known_hosts_pin_path()
    pin.write_text(f"{VBOARD_ALIAS} {kind} {blob}\n")
    return pin


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:12]


def _init_script() -> bytes:
    return resources.files("lisa_ext.vboard").joinpath("init.sh").read_bytes()


def _unmount_below(path: Path) -> None:
    """Undo mounts a failed debootstrap left inside its target (proc, sys)."""
    prefix = str(path.resolve()) + "/"
    with open("/proc/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False)


def _debootstrap(stage: Path, mirror: str) -> None:
    if os.geteuid() != 0:
        raise UserError("building the virtual board's rootfs needs root (debootstrap, file ownership)")
    tmp = stage.with_name(stage.name + ".partial")
    if tmp.exists():
        _unmount_below(tmp)
        shutil.rmtree(tmp)
    log_file = stage.parent / "debootstrap.log"
    log.info("debootstrap %s into %s (a few minutes, once per cache; log: %s)", SUITE, stage, log_file)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        _run(["debootstrap", "--variant=minbase", "--include=" + ",".join(ROOTFS_PACKAGES),
              SUITE, str(tmp), mirror], what="debootstrap", log_file=log_file, env=env)
    finally:
        _unmount_below(tmp)
    _strip(tmp)
    os.replace(tmp, stage)


def _strip(tree: Path) -> None:
    """Package archives, indices and documentation are not needed on the board:
    a smaller image packs and boots faster."""
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (tree / junk).glob("*"):
            if entry.is_file():
                entry.unlink()
    for docs in ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale"):
        shutil.rmtree(tree / docs, ignore_errors=True)


def _install_host_key(stage: Path) -> None:
    """The pinned host key is the board's only one: the keys debootstrap generated are dropped."""
    ssh_etc = stage / "etc" / "ssh"
    for old in ssh_etc.glob("ssh_host_*"):
        old.unlink()
    for suffix in ("", ".pub"):
        dest = ssh_etc / f"ssh_host_ed25519_key{suffix}"
        shutil.copyfile(host_key_path().with_name(host_key_path().name + suffix), dest)
        dest.chmod(0o600 if not suffix else 0o644)


def _extract_foreign(stage: Path) -> None:
    """Unpack what ``debootstrap --foreign`` fetched but left packed (all but the ``required`` set).

    Into the merged-/usr layout debootstrap made: ``tar --keep-directory-symlink``, since a plain
    ``dpkg-deb -x`` would replace the ``/bin``, ``/lib`` and ``/sbin`` links with directories."""
    boot = stage / "debootstrap"
    paths = dict(line.split(" ", 1) for line in (boot / "debpaths").read_text().splitlines() if " " in line)
    for package in (boot / "base").read_text().split():
        deb = stage / paths[package].lstrip("/")
        with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as unpack:
            _run(["tar", "-x", "--keep-directory-symlink", "-C", str(stage)], what=f"unpacking {deb.name}",
                 stdin=unpack.stdout)
        if unpack.returncode:
            raise UserError(f"dpkg-deb --fsys-tarfile {deb} failed with exit code {unpack.returncode}")
    # debootstrap links /proc to the host's when it cannot mount it (in a container): the
    # board mounts its own there
    for mount_point in ("proc", "sys", "dev"):
        path = stage / mount_point
        if path.is_symlink():
            path.unlink()
        path.mkdir(exist_ok=True)


def _write_accounts(stage: Path) -> None:
    """passwd, group and their shadows from base-passwd's masters, plus sshd's privilege-separation
    user (base-passwd's and openssh-server's maintainer scripts do this on an installed system)."""
    masters = stage / "usr" / "share" / "base-passwd"
    passwd = (masters / "passwd.master").read_text() + "sshd:x:100:65534::/run/sshd:/usr/sbin/nologin\n"
    group = (masters / "group.master").read_text()
    etc = stage / "etc"
    (etc / "passwd").write_text(passwd)
    (etc / "group").write_text(group)
    # "*": no password, but not a locked account (sshd refuses key logins to locked ones)
    (etc / "shadow").write_text("".join(f"{line.split(':')[0]}:*:19000:0:99999:7:::\n"
                                        for line in passwd.splitlines() if line))
    (etc / "gshadow").write_text("".join(f"{line.split(':')[0]}:*::\n" for line in group.splitlines() if line))
    for name in ("shadow", "gshadow"):
        (etc / name).chmod(0o640)


def _debootstrap_foreign(stage: Path, mirror: str, debian_arch: str, packages: Sequence[str]) -> None:
    """A Debian system of another architecture, unpacked and configured without running any of it."""
    if os.geteuid() != 0:
        raise UserError("building the virtual board's rootfs needs root (debootstrap, file ownership)")
    tmp = stage.with_name(stage.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    log_file = stage.parent / "debootstrap.log"
    log.info("debootstrap --foreign %s %s into %s (a few minutes, once per cache; log: %s)",
             debian_arch, SUITE, stage, log_file)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    _run(["debootstrap", "--foreign", f"--arch={debian_arch}", "--variant=minbase",
          "--include=" + ",".join(packages), SUITE, str(tmp), mirror],
         what="debootstrap --foreign", log_file=log_file, env=env)
    _extract_foreign(tmp)
    _write_accounts(tmp)
    (tmp / "etc" / "ssh" / "sshd_config").write_text(_ARM64_SSHD_MAIN)
    shutil.rmtree(tmp / "debootstrap")
    _strip(tmp)
    os.replace(tmp, stage)


def _configure(stage: Path, public_key: bytes) -> None:
    """Write lisa-ext's own files into the unpacked system (idempotent)."""
    _install_host_key(stage)
    init = stage / "sbin" / "lisa-ext-init"
    init.write_bytes(_init_script())
    init.chmod(0o755)
    ssh_dir = stage / "root" / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "authorized_keys").write_bytes(public_key)
    (ssh_dir / "authorized_keys").chmod(0o600)
    sshd_conf = stage / "etc" / "ssh" / "sshd_config.d" / "lisa-ext.conf"
    sshd_conf.parent.mkdir(parents=True, exist_ok=True)
    sshd_conf.write_text(_SSHD_CONFIG)
    (stage / "etc" / "hostname").write_text("vboard\n")
    (stage / "etc" / "hosts").write_text("127.0.0.1 localhost\n127.0.1.1 vboard\n")
    (stage / "etc" / "fstab").write_text("/dev/vda / ext4 rw,relatime 0 1\n")


def _tree_size(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def _mkfs_from_dir(source: Path, image: Path, *, label: str, headroom: int) -> None:
    """Pack a directory into a fresh sparse ext4 image with ``mkfs.ext4 -d``."""
    size = int(_tree_size(source) * 1.3) + headroom
    size = (size // (1024 * 1024) + 1) * 1024 * 1024
    image.unlink(missing_ok=True)
    with open(image, "wb") as f:
        f.truncate(size)
    _run(["mkfs.ext4", "-q", "-F", "-L", label, "-E", "root_owner=0:0", "-d", str(source), str(image)],
         what=f"mkfs.ext4 -d {source}")


def build_in_background(arch: str = "x86_64") -> threading.Thread | None:
    """Start :func:`ensure_rootfs` in a thread of this process (:mod:`lisa_ext.vboard.background`),
    beside a board's first kernel build; None where the cache has an image of ``arch`` already, or
    where it could not build (not root: the boot says so).

    Only a cache without any image: :func:`ensure_rootfs` also writes the host key's pin, and a
    deploy to a running board must find a changed pin refused, not rewritten (test_vboard_boot.py);
    a repack for a changed init script is the boot's, as before."""
    if arch not in ARCHES or os.geteuid() != 0 or any(_arch_cache_dir(arch).glob("rootfs-*.ext4")):
        return None
    return background.start("rootfs build", lambda: ensure_rootfs(arch=arch))


def ensure_rootfs(*, arch: str = "x86_64", mirror: str | None = None) -> Rootfs:
    """Return the cached rootfs image of the ``arch`` board, building what is missing.

    The debootstrap tree is keyed by the suite, architecture and package list, the
    image by that plus lisa-ext's own files (init, sshd config, authorised key), so
    changing the init script repacks the image in seconds without a new
    debootstrap.
    """
    if arch not in ARCHES:
        raise UserError(f"no virtual board for architecture {arch!r}: choose one of {', '.join(ARCHES)}")
    mirror = mirror or os.environ.get("LISA_EXT_DEBIAN_MIRROR") or DEFAULT_MIRROR
    cache = _arch_cache_dir(arch)
    with _cache_lock(vboard_cache_dir()):
        key_path = ensure_ssh_key()
        public_key = key_path.with_name(key_path.name + ".pub").read_bytes()
        pin = ensure_host_key()
        if arch == "x86_64":
            stage_key = _digest(SUITE, "minbase", *ROOTFS_PACKAGES)
        else:
            stage_key = _digest(SUITE, "minbase", "foreign-2", ARCHES[arch], *ARM64_ROOTFS_PACKAGES,
                                _ARM64_SSHD_MAIN)
        stage = cache / f"debootstrap-{stage_key}"
        image_key = _digest(stage_key, _init_script(), _SSHD_CONFIG, public_key, pin.read_bytes())
        image = cache / f"rootfs-{image_key}.ext4"
        if image.exists():
            return Rootfs(image=image, ssh_key=key_path, key=image_key)
        cache.mkdir(parents=True, exist_ok=True)
        if not stage.exists():
            if arch == "x86_64":
                _debootstrap(stage, mirror)
            else:
                _debootstrap_foreign(stage, mirror, ARCHES[arch], ARM64_ROOTFS_PACKAGES)
        _configure(stage, public_key)
        tmp = image.with_name(image.name + ".partial")
        log.info("packing %s", image)
        _mkfs_from_dir(stage, tmp, label="lisa-rootfs", headroom=_IMAGE_HEADROOM)
        os.replace(tmp, image)
        for old in cache.glob("rootfs-*.ext4"):
            if old != image:
                old.unlink()
        for old in cache.glob("debootstrap-*"):
            if old != stage and not old.name.endswith(".partial"):
                shutil.rmtree(old, ignore_errors=True)
        return Rootfs(image=image, ssh_key=key_path, key=image_key)


def make_overlay(base: Path, dest: Path) -> Path:
    """A qcow2 copy-on-write overlay of ``base``: the guest writes there, never to the cache."""
    dest.unlink(missing_ok=True)
    _run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(base.resolve()), str(dest)],
         what="qemu-img create")
    return dest


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def make_modules_disk(modules_dir: Path, release: str, dest: Path, load: Sequence[str] = ()) -> Path:
    """Pack a variant's ``lib/modules/<release>`` into a small ext4 disk for one boot.

    ``load`` names the modules the guest's init loads at boot, in order; each
    entry may carry module parameters (``"name param=value"``).
    """
    release_dir = find_release_dir(modules_dir, release)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".modules-") as tmp:
        staged = Path(tmp) / release
        # Hard links: the staging copy costs nothing and never alters the build cache.
        shutil.copytree(release_dir, staged, symlinks=True, copy_function=_link_or_copy)
        for link in ("build", "source"):
            if (staged / link).is_symlink():
                (staged / link).unlink()
        load_file = staged / MODULES_LOAD_FILE
        load_file.unlink(missing_ok=True)
        load_file.write_text("".join(f"{entry}\n" for entry in load))
        _mkfs_from_dir(Path(tmp), dest, label="lisa-modules", headroom=8 * 1024 * 1024)
    return dest


def make_empty_disk(dest: Path) -> Path:
    """An ext4 disk with nothing on it (a boot without modules keeps the disk order)."""
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".empty-") as tmp:
        _mkfs_from_dir(Path(tmp), dest, label="lisa-modules", headroom=1024 * 1024)
    return dest


def make_scratch_disk(dest: Path, size_mb: int = 64) -> Path:
    """A sparse raw disk for I/O workloads (``/dev/vdc`` in the guest); reads return zeros."""
    dest.unlink(missing_ok=True)
    with open(dest, "wb") as f:
        f.truncate(size_mb * 1024 * 1024)
    return dest
