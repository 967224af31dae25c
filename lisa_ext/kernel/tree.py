"""Base kernel trees, unpacked once into the cache as git work trees.

Every base (Debian's ``linux-source-6.12`` tarball, a directory, or a git
repository at a ref) becomes ``<cache>/kernels/trees/<key>/src``: a git work
tree whose tag ``lisa-ext-base`` is the pristine base. Builds reset the work
tree to that tag and apply a variant's patches on top; git rewrites only the
files that differ, so unchanged sources keep their timestamps and the shared
out-of-tree build directory (``build-<arch>``) stays incremental.

The cache root is ``$LISA_EXT_CACHE`` or ``~/.cache/lisa-ext``.

A git base's URL and ref come from a spec, maybe a colleague's: every git command
gets them after ``--`` (or ``--end-of-options``), so that none is read as an option
(``--upload-pack=...`` would run a command), and git may use only the transports of
:data:`~lisa_ext.kernel.spec.GIT_PROTOCOLS` (``GIT_ALLOW_PROTOCOL``). The spec check
refuses such values first (:func:`lisa_ext.kernel.spec.load_variant_spec`); this is the second wall.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from lisa_ext.errors import UserError
from lisa_ext.kernel.spec import GIT_PROTOCOLS, BaseTree
from lisa_ext.workbench import cache_root

__all__ = ["KernelTree", "cache_root", "kernels_cache", "prepare_tree", "tree_key", "BASE_TAG", "git", "git_mirror",
           "resolve_ref"]

BASE_TAG = "lisa-ext-base"
_GIT_ID = ["-c", "user.name=lisa-ext", "-c", "user.email=lisa-ext@localhost", "-c", "advice.detachedHead=false"]



def kernels_cache() -> Path:
    return cache_root() / "kernels"


#: git's environment: only the transports a spec may name, never a prompt for credentials
_GIT_ENV = {"GIT_ALLOW_PROTOCOL": ":".join(GIT_PROTOCOLS), "GIT_TERMINAL_PROMPT": "0"}


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run git with a fixed identity, capturing text output."""
    return subprocess.run(["git", *_GIT_ID, *args], cwd=cwd, text=True, capture_output=True, check=check,
                          env={**os.environ, **_GIT_ENV})


@dataclass(frozen=True)
class KernelTree:
    """A base tree in the cache: ``src`` (git work tree) and per-arch build dirs."""

    key: str
    root: Path

    @property
    def src(self) -> Path:
        return self.root / "src"

    def build_dir(self, arch: str) -> Path:
        return self.root / f"build-{arch}"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive use of the work tree and build dirs (other processes wait)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root.parent / f"{self.key}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


def _sanitize(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def _debian_tarball(package: str) -> Path:
    for ext in ("tar.xz", "tar.bz2", "tar.gz"):
        p = Path("/usr/src") / f"{package}.{ext}"
        if p.is_file():
            return p
    raise UserError(
        f"base tree {package}: /usr/src/{package}.tar.xz not found; install it with "
        f"'apt-get install {package}' (scripts/install-system-packages.sh does)"
    )


def _debian_version(package: str) -> str | None:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package], text=True, capture_output=True, check=False
        )
    except FileNotFoundError:
        return None
    return out.stdout.strip() or None


def _dir_fingerprint(path: Path) -> str:
    """Hash of (relative path, size, mtime) of every file: cheap change detection."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                continue
            h.update(f"{os.path.relpath(full, path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _git_resolve(url: str, ref: str, mirror: Path) -> str:
    if not (mirror / "HEAD").exists():
        mirror.parent.mkdir(parents=True, exist_ok=True)
        tmp = mirror.with_name(mirror.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        r = subprocess.run(["git", "clone", "--bare", "--quiet", "--", url, str(tmp)], text=True,
                           capture_output=True, env={**os.environ, **_GIT_ENV})
        if r.returncode:
            raise UserError(f"base tree git {url}: clone failed: {r.stderr.strip()}")
        tmp.rename(mirror)
    r = git(mirror, "rev-parse", "--verify", "-q", "--end-of-options", f"{ref}^{{commit}}", check=False)
    if r.returncode:
        git(mirror, "fetch", "--quiet", "--tags", "--", "origin", ref, check=False)
        r = git(mirror, "rev-parse", "--verify", "-q", "--end-of-options", f"{ref}^{{commit}}", check=False)
        if r.returncode:
            r = git(mirror, "rev-parse", "--verify", "-q", "FETCH_HEAD^{commit}", check=False)
    if r.returncode:
        raise UserError(f"base tree git {url}: ref {ref!r} not found")
    return r.stdout.strip()


def git_mirror(location: str) -> Path:
    """The cache's bare mirror of the git repository at ``location`` (cloned by :func:`resolve_ref`)."""
    return kernels_cache() / "git-mirrors" / hashlib.sha256(location.encode()).hexdigest()[:16]


def resolve_ref(location: str, ref: str) -> str:
    """The commit ``ref`` names in the repository at ``location``, through its mirror (cloned
    once, fetched from when the ref is unknown there); UserError when there is none."""
    return _git_resolve(location, ref, git_mirror(location))


def tree_key(base: BaseTree) -> str:
    """A stable name for the base tree's content (used in cache paths and hashes)."""
    if base.kind == "debian":
        version = _debian_version(base.location)
        if version is None:
            tarball = _debian_tarball(base.location)
            st = tarball.stat()
            version = hashlib.sha256(f"{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
        return _sanitize(f"debian-{base.location}-{version}")
    if base.kind == "dir":
        fp = _dir_fingerprint(Path(base.location))
        return f"dir-{_sanitize(Path(base.location).name)}-{fp[:16]}"
    return f"git-{resolve_ref(base.location, base.ref or 'HEAD')[:16]}"


def _import_base(base: BaseTree, key: str, dest: Path) -> None:
    """Fill ``dest`` with the base sources and commit them as BASE_TAG."""
    dest.mkdir(parents=True)
    if base.kind == "debian":
        tarball = _debian_tarball(base.location)
        subprocess.run(["tar", "xf", str(tarball), "-C", str(dest), "--strip-components=1"], check=True)
    elif base.kind == "dir":
        subprocess.run(["cp", "-a", f"{base.location}/.", str(dest)], check=True)
        shutil.rmtree(dest / ".git", ignore_errors=True)
    else:
        mirror = git_mirror(base.location)
        commit = key.split("-", 1)[1]
        subprocess.run(["git", "clone", "--quiet", "--shared", "--no-checkout", "--", str(mirror), str(dest)],
                       check=True)
        git(dest, "checkout", "--quiet", "--detach", commit)
        git(dest, "tag", "-f", BASE_TAG)
        return
    git(dest, "init", "--quiet")
    # zlib level 1: the import compresses ~1.4 GB once; level 1 is several times faster than the default
    git(dest, "config", "core.looseCompression", "1")
    git(dest, "add", "--all", "--force")
    git(dest, "commit", "--quiet", "--no-verify", "-m", f"base: {base.kind} {base.location}")
    git(dest, "tag", BASE_TAG)


def prepare_tree(base: BaseTree, log=print) -> KernelTree:
    """Return the cached tree for ``base``, importing it on first use."""
    key = tree_key(base)
    tree = KernelTree(key, kernels_cache() / "trees" / key)
    if tree.src.is_dir():
        return tree
    with tree.locked():
        if tree.src.is_dir():
            return tree
        log(f"importing base tree {base.kind}:{base.location} into {tree.src} (once)")
        tmp = tree.root / "src.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        _import_base(base, key, tmp)
        tmp.rename(tree.src)
    return tree
