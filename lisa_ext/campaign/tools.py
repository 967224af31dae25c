"""Workload binaries Debian does not package: built from a source directory, installed on a target.

schbench and the sleeping ebizzy (RFC 003/004) come as source trees the user
provides (``--src DIR``). :func:`build_tool` copies the tree into the cache
(``$LISA_EXT_CACHE/tools`` or ``~/.cache/lisa-ext/tools``), keyed by a hash of
its files, and runs the tool's build commands there, so the source directory
is never written to and an unchanged tree is built once. :func:`install_tool`
pushes the binary into the target's executables directory (devlib
``Target.install``: local host, SSH board, the virtual board or Android alike),
where every later target command finds it on PATH.

:func:`missing_tool_hint` is how the campaign runner tells the user how to
provide a binary its target lacks.

The kernel tree's example sched_ext schedulers (``tools/sched_ext``: scx_simple,
scx_qmap) are built by :func:`build_scx_scheduler` from a kernel variant's base
tree against the BTF of the kernel they will run on (``/sys/kernel/btf/vmlinux``
of the target): ``tools/sched_ext`` builds its own libbpf and bpftool, the BPF
side with clang >= 16, and the binary is linked statically so that the board's
minimal rootfs needs no libbpf or libelf. Cached in the same tools cache, keyed
by the tree's sources, the BTF and the compilers.

The scx project's schedulers published on crates.io (scx_bpfland, scx_lavd, ...)
are built by :func:`build_scx_crate`: ``cargo install --locked`` of one pinned
version, linked statically (glibc's ``crt-static``) so that the board's rootfs
needs none of the libraries they link (libelf, zlib, zstd); cached keyed by
crate, version and toolchain (rustc, cargo, clang). For a target of another
architecture (the arm64 board on an x86 host) they are cross-built by a cargo
whose rustc has that target's standard library (:func:`find_cross_cargo`:
rustup cannot add one offline; Debian's ``rustc-web`` takes it from multiarch),
linked by the GNU cross toolchain against the multiarch libelf, zlib and zstd.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from lisa_ext.errors import UserError
from lisa_ext.schema import show
from lisa_ext.workbench import cache_root, workbench_dir

__all__ = ["BUILDABLE", "SCX_SCHEDULERS", "Recipe", "build_scx_crate", "build_scx_scheduler", "build_tool",
           "cached_build", "crate_name_problem", "crate_version_problem", "find_bpf_clang", "find_cargo",
           "find_cross_cargo", "install_cached_tools", "install_tool", "missing_tool_hint", "scx_crate_dir",
           "shared_source", "tools_cache_dir"]


@dataclass(frozen=True)
class Recipe:
    """How to build one tool from its source tree."""

    commands: tuple[tuple[str, ...], ...]
    binary: str
    """Path of the built binary inside the tree."""
    marker: str
    """A file every genuine source tree of the tool has, to catch a wrong ``--src``."""
    origin: str
    source: str
    """Its source tree's directory name among the workbench's shared sources (``../shared/src``)."""


BUILDABLE: dict[str, Recipe] = {
    "schbench": Recipe((("make",),), "schbench", "schbench.c", "github masoncl/schbench", "schbench"),
    "ebizzy": Recipe((("sh", "./configure"), ("make",)), "ebizzy", "ebizzy.c",
                     "github pratiksampat/sleeping-ebizzy (the sleeping ebizzy of RFC 003)",
                     "sleeping-ebizzy"),
}


#: the example schedulers of the kernel tree's tools/sched_ext that lisa-ext builds, each with the
#: name it registers under (``/sys/kernel/sched_ext/root/ops`` while it runs)
SCX_SCHEDULERS: dict[str, str] = {"scx_simple": "simple", "scx_qmap": "qmap"}
#: the oldest clang that compiles tools/sched_ext's BPF programs (its README)
_SCX_CLANG_MIN = 16
#: the kernel tree's directories whose sources end up in a scheduler binary
_SCX_SOURCES = ("tools/sched_ext", "tools/lib/bpf", "tools/bpf/bpftool", "tools/include")
#: bump when the way the schedulers are built changes
_SCX_RECIPE = "1"
#: crates.io's rule for a crate name: ASCII letters, digits, '-' and '_', a letter first, 64 at most
_CRATE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
#: one exact version (semver: MAJOR.MINOR.PATCH, optional pre-release and build), never a range
_CRATE_VERSION = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
                            r"(-[0-9A-Za-z.-]{1,64})?(\+[0-9A-Za-z.-]{1,64})?")
#: bump when the way crates are built changes
_SCX_CRATE_RECIPE = "1"
#: statically linked against glibc: the board's rootfs has no libelf, zlib or zstd
_SCX_CRATE_RUSTFLAGS = "-C target-feature=+crt-static"
#: a target's ABI (devlib's name: ``target.abi``) -> the Rust target triple of its crates and the
#: prefix of the GNU toolchain that links them on a host of another architecture
_CRATE_TARGETS = {"x86_64": ("x86_64-unknown-linux-gnu", "x86_64-linux-gnu"),
                  "arm64": ("aarch64-unknown-linux-gnu", "aarch64-linux-gnu")}
#: the host's ABI under devlib's name, from ``platform.machine()``
_HOST_ABI = {"x86_64": "x86_64", "aarch64": "arm64"}
#: Debian's cargo (package cargo-web beside rustc-web: a recent Rust whose foreign standard
#: libraries come as multiarch packages, libstd-rust-web-dev:arm64)
_DEBIAN_CARGO = "/usr/bin/cargo"


def tools_cache_dir() -> Path:
    """``$LISA_EXT_CACHE/tools``, else ``~/.cache/lisa-ext/tools``."""
    return cache_root() / "tools"


def _tree_hash(src: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in src.rglob("*") if p.is_file() and ".git" not in p.parts):
        h.update(str(path.relative_to(src)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_tool(name: str, src: str | os.PathLike) -> Path:
    """Build ``name`` from the source tree ``src`` into the cache; returns the binary's path."""
    recipe = BUILDABLE.get(name)
    if recipe is None:
        raise UserError(f"cannot build {name!r}: lisa-ext builds {', '.join(BUILDABLE)}")
    src = Path(src).resolve()
    if not (src / recipe.marker).is_file():
        raise UserError(f"{src}: not a {name} source tree (no {recipe.marker}; sources: {recipe.origin})")
    build_dir = tools_cache_dir() / f"{name}-{_tree_hash(src)}"
    binary = build_dir / recipe.binary
    if binary.is_file():
        return binary
    # a build of its own beside the entry: two processes building the same tool at once (the
    # board tests and the host tests of `make test`) must not build in, or remove, each other's
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=build_dir.name + ".", suffix=".part", dir=build_dir.parent)) / "tree"
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns(".git"))
    for command in recipe.commands:
        proc = subprocess.run(command, cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise UserError(f"building {name} in {tmp}: {' '.join(command)} failed: {' | '.join(last)}")
    if not (tmp / recipe.binary).is_file():
        raise UserError(f"building {name} in {tmp} produced no {recipe.binary}")
    _publish(tmp, build_dir, binary)
    shutil.rmtree(tmp.parent, ignore_errors=True)
    return binary


def _publish(built: Path, build_dir: Path, binary: Path) -> None:
    """Move the finished build ``built`` into its cache entry ``build_dir``, unless another
    process published that entry first (its ``binary`` is there); a stale entry is replaced."""
    try:
        os.rename(built, build_dir)
    except OSError:
        if not binary.is_file():  # not another process's finished build: a stale entry
            shutil.rmtree(build_dir, ignore_errors=True)
            os.rename(built, build_dir)


def _clang_major(clang: str) -> int | None:
    proc = subprocess.run([clang, "--version"], capture_output=True, text=True)
    match = re.search(r"clang version (\d+)\.", proc.stdout)
    return int(match.group(1)) if proc.returncode == 0 and match else None


def find_bpf_clang() -> tuple[str, str]:
    """``(clang, llvm-strip)`` new enough for tools/sched_ext: the newest ``clang-N`` installed,
    else ``clang`` itself; one line naming the package to install when there is none."""
    for major in range(30, _SCX_CLANG_MIN - 1, -1):
        clang = shutil.which(f"clang-{major}")
        if clang and shutil.which(f"llvm-strip-{major}"):
            return clang, shutil.which(f"llvm-strip-{major}")
    clang, strip = shutil.which("clang"), shutil.which("llvm-strip")
    if clang and strip and (_clang_major(clang) or 0) >= _SCX_CLANG_MIN:
        return clang, strip
    raise UserError(f"building the sched_ext schedulers needs clang >= {_SCX_CLANG_MIN} and its llvm-strip "
                    "(Debian packages clang-19 llvm-19; run: bash scripts/install-system-packages.sh)")


def _scx_key(tree_src: Path, btf: Path, clang: str) -> str:
    version = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout
    h = hashlib.sha256(f"scx recipe {_SCX_RECIPE}\n{version}".encode())
    for sub in _SCX_SOURCES:
        h.update(f"{sub} {_tree_hash(tree_src / sub)}\n".encode())
    h.update(hashlib.sha256(btf.read_bytes()).digest())
    return h.hexdigest()[:16]


def build_scx_scheduler(name: str, tree, btf: str | os.PathLike, arch: str = "x86_64") -> Path:
    """Build the example scheduler ``name`` (:data:`SCX_SCHEDULERS`) from ``tree`` (a
    :class:`~lisa_ext.kernel.tree.KernelTree`) against the kernel BTF ``btf`` (the target's
    ``/sys/kernel/btf/vmlinux``); returns the binary, built once per sources and BTF."""
    if name not in SCX_SCHEDULERS:
        raise UserError(f"cannot build {name!r}: lisa-ext builds the schedulers {', '.join(SCX_SCHEDULERS)}")
    if arch != platform.machine():
        raise UserError(f"building {name} for {arch} on a {platform.machine()} host is not supported yet")
    clang, strip = find_bpf_clang()
    btf = Path(btf)
    with tree.locked():
        if not (tree.src / "tools/sched_ext" / f"{name}.bpf.c").is_file():
            raise UserError(f"{tree.src}: no tools/sched_ext/{name}.bpf.c (a kernel tree before 6.12?)")
        build_dir = tools_cache_dir() / f"sched_ext-{_scx_key(tree.src, btf, clang)}"
        binary = build_dir / "build" / "bin" / name
        if binary.is_file():
            return binary
        build_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=build_dir.name + ".", suffix=".part", dir=build_dir.parent))
        # O= keeps every output out of the shared tree
        make = ["make", "-C", str(tree.src / "tools/sched_ext"), f"O={tmp}", f"CLANG={clang}", f"LLVM_STRIP={strip}",
                f"VMLINUX_BTF={btf.resolve()}", f"-j{os.cpu_count() or 2}", *SCX_SCHEDULERS]
        # relinked statically for the board's minimal rootfs (no libelf, no libzstd there); not with
        # make's LDFLAGS, which its sub-makes would take for libbpf's shared library too
        obj = tmp / "build" / "obj"
        relinks = [["cc", "-static", "-o", str(tmp / "build" / "bin" / scheduler),
                    str(obj / "sched_ext" / f"{scheduler}.o"), str(obj / "libbpf" / "libbpf.a"),
                    "-lelf", "-lz", "-lzstd", "-lpthread"] for scheduler in SCX_SCHEDULERS]
        for command in (make, *relinks):
            proc = subprocess.run(command, capture_output=True, text=True)
            if proc.returncode != 0:
                (tmp / "build.log").write_text(proc.stdout + proc.stderr)
                last = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                raise UserError(f"building {name}: {' '.join(command[:3])} failed (log: {tmp / 'build.log'}): "
                                + " | ".join(last))
        shutil.rmtree(build_dir, ignore_errors=True)
        os.rename(tmp, build_dir)
    return binary


def crate_name_problem(value: str) -> str | None:
    """What makes ``value`` no crate name (crates.io's rule), or None."""
    if _CRATE_NAME.fullmatch(value):
        return None
    return (f"{show(value)} is not a crate name (ASCII letters, digits, '-' and '_', a letter first, "
            "at most 64 characters)")


def crate_version_problem(value: str) -> str | None:
    """What makes ``value`` no exact crate version (``1.1.4``: a pinned version, not a range), or None."""
    if _CRATE_VERSION.fullmatch(value):
        return None
    return f"{show(value)} is not an exact version (MAJOR.MINOR.PATCH, e.g. '1.1.4'; a pinned version, not a range)"


def _rustup_bin() -> Path:
    return Path(os.environ.get("CARGO_HOME") or Path.home() / ".cargo") / "bin"


def _cargos(*more: str) -> list[str]:
    """Every executable ``cargo`` in the order they are tried: on PATH, rustup's, then ``more``."""
    found = [c for c in (shutil.which("cargo"), str(_rustup_bin() / "cargo"), *more)
             if c and os.path.isfile(c) and os.access(c, os.X_OK)]
    return list(dict.fromkeys(found))


def find_cargo() -> str:
    """The ``cargo`` to build crates with: on PATH, else rustup's (``$CARGO_HOME/bin``, ``~/.cargo/bin``);
    one line saying how to install it when there is none."""
    found = _cargos()
    if found:
        return found[0]
    raise UserError("building a sched_ext scheduler from crates.io needs cargo (not on PATH nor in "
                    f"{_rustup_bin()}): install Rust with rustup (https://rustup.rs), >= the crate's rust-version")


def _rustc_beside(cargo: str) -> str:
    return str(Path(cargo).with_name("rustc")) if Path(cargo).with_name("rustc").is_file() else "rustc"


def _has_std(cargo: str, triple: str) -> bool:
    """Whether the rustc beside ``cargo`` has the standard library of ``triple`` to link against."""
    try:
        sysroot = subprocess.run([_rustc_beside(cargo), "--print", "sysroot"], capture_output=True, text=True,
                                 timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return False
    return bool(sysroot) and any((Path(sysroot) / "lib" / "rustlib" / triple / "lib").glob("libstd-*.rlib"))


def find_cross_cargo(abi: str) -> tuple[str, str, str]:
    """The ``cargo`` whose rustc has ``abi``'s standard library (rustup's, else Debian's
    ``rustc-web``, which takes its foreign standard library from multiarch), the Rust triple and
    the GNU linker; one line naming what to install when there is none."""
    if abi not in _CRATE_TARGETS:
        raise UserError(f"cannot build crates for a {abi} target: lisa-ext builds them for "
                        f"{', '.join(_CRATE_TARGETS)}")
    triple, prefix = _CRATE_TARGETS[abi]
    candidates = _cargos(_DEBIAN_CARGO)
    cargo = next((c for c in candidates if _has_std(c, triple)), None)
    if cargo is None:
        tried = ", ".join(candidates) or "none found"
        raise UserError(f"building a sched_ext scheduler for the {abi} target needs Rust's standard library "
                        f"for {triple}, which no cargo here has ({tried}); "
                        "on Debian 12: bash scripts/install-system-packages.sh --arm64-crates")
    linker = shutil.which(f"{prefix}-gcc")
    if linker is None:
        raise UserError(f"building a sched_ext scheduler for the {abi} target needs {prefix}-gcc to link it; "
                        "on Debian 12: bash scripts/install-system-packages.sh --arm64-crates")
    return cargo, triple, linker


def _cross_env(triple: str, linker: str) -> dict[str, str]:
    """cargo's and the crates' build scripts' settings for linking and compiling C for ``triple``:
    the libraries they link (libelf, zlib, zstd) come from the host's multiarch directory."""
    prefix = Path(linker).name.removesuffix("-gcc")
    under = triple.replace("-", "_")
    return {f"CARGO_TARGET_{under.upper()}_LINKER": linker, f"CC_{under}": linker,
            f"AR_{under}": shutil.which(f"{prefix}-ar") or f"{prefix}-ar",
            "PKG_CONFIG_ALLOW_CROSS": "1", "PKG_CONFIG_LIBDIR": f"/usr/lib/{prefix}/pkgconfig:/usr/share/pkgconfig"}


def _toolchain(cargo: str, clang: str) -> tuple[str, str]:
    """The toolchain's description (what the cache key hashes) and the host's target triple."""
    rustc = _rustc_beside(cargo)
    env = {**os.environ, "PATH": f"{Path(cargo).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    rustc_v = subprocess.run([rustc, "-vV"], capture_output=True, text=True, env=env).stdout
    cargo_v = subprocess.run([cargo, "-V"], capture_output=True, text=True, env=env).stdout
    clang_v = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout
    triple = re.search(r"^host: (\S+)$", rustc_v, re.M)
    if not triple:
        raise UserError(f"building a sched_ext scheduler from crates.io: {rustc} -vV names no host triple")
    return f"{rustc_v}\n{cargo_v}\n{clang_v}", triple.group(1)


def scx_crate_dir(crate: str, version: str, toolchain: str) -> Path:
    """The cache entry of ``crate`` ``version`` built by ``toolchain`` (:func:`_toolchain`'s text)."""
    key = hashlib.sha256(f"scx crate recipe {_SCX_CRATE_RECIPE}\n{_SCX_CRATE_RUSTFLAGS}\n{crate}\n{version}\n"
                         f"{toolchain}".encode()).hexdigest()[:16]
    return tools_cache_dir() / f"scx-crate-{crate}-{version}-{key}"


def _cargo_error(output: str) -> str:
    """cargo's error in one line: its ``error:`` line, with the cause that follows it if any."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    first = next((i for i, line in enumerate(lines) if line.startswith("error")), None)
    if first is None:
        return " | ".join(lines[-3:]) or "(no output)"
    detail = lines[first]
    if first + 2 < len(lines) and lines[first + 1] == "Caused by:":
        detail += f": {lines[first + 2]}"
    return detail


def build_scx_crate(crate: str, version: str, arch: str = "x86_64",
                    echo: Callable[[str], None] = lambda _msg: None) -> Path:
    """Build the scheduler of crates.io's ``crate`` ``version`` (``cargo install --locked``, linked
    statically); returns its binary, built once per crate, version and toolchain. ``echo`` is told
    when a build starts: the first one takes minutes."""
    problem = crate_name_problem(crate) or crate_version_problem(version)
    if problem:
        raise UserError(f"cannot build a sched_ext scheduler from crates.io: {problem}")
    native = arch in (platform.machine(), _HOST_ABI.get(platform.machine()))
    cargo, triple, linker = (find_cargo(), "", "") if native else find_cross_cargo(arch)
    clang, _strip = find_bpf_clang()
    toolchain, host_triple = _toolchain(cargo, clang)
    cross: dict[str, str] = {}
    if native:
        triple = host_triple
    else:
        toolchain += f"\ntarget {triple}\n"
        cross = {**_cross_env(triple, linker), "RUSTC": _rustc_beside(cargo)}
    build_dir = scx_crate_dir(crate, version, toolchain)
    binary = build_dir / "bin" / crate
    if binary.is_file():
        return binary
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=build_dir.name + ".", suffix=".part", dir=build_dir.parent))
    echo(f"building {crate} {version} for {triple} from crates.io with cargo into {build_dir} "
         "(once; about 15 min on 2 cores)")
    # an explicit --target: RUSTFLAGS then apply to the scheduler only, not to the build scripts
    # and proc macros, which cannot run linked statically
    command = [cargo, "install", "--locked", "--version", version, "--root", str(tmp / "root"), "--target", triple,
               "--", crate]
    # BPF_CLANG: the scx crates compile their BPF side with plain `clang` otherwise, too old on Debian 12
    env = {**os.environ, "CARGO_TARGET_DIR": str(tmp / "target"), "RUSTFLAGS": _SCX_CRATE_RUSTFLAGS,
           "BPF_CLANG": clang, "PATH": f"{Path(cargo).parent}{os.pathsep}{os.environ.get('PATH', '')}", **cross}
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    (tmp / "build.log").write_text(proc.stdout + proc.stderr)
    shutil.rmtree(tmp / "target", ignore_errors=True)
    if proc.returncode != 0:
        raise UserError(f"sched-ext {{crate: {crate}, version: {version}}}: cargo install failed: "
                        f"{_cargo_error(proc.stderr)} (log: {tmp / 'build.log'})")
    if not (tmp / "root" / "bin" / crate).is_file():
        built = sorted(p.name for p in (tmp / "root" / "bin").glob("*"))
        raise UserError(f"sched-ext {{crate: {crate}, version: {version}}}: the crate installs no binary {crate} "
                        f"(it installs: {', '.join(built) or 'none'}); not a scheduler crate")
    os.rename(tmp / "root", tmp / "done")
    shutil.move(str(tmp / "build.log"), str(tmp / "done" / "build.log"))
    _publish(tmp / "done", build_dir, binary)
    shutil.rmtree(tmp, ignore_errors=True)
    return binary


def install_tool(target, binary: str | os.PathLike) -> str:
    """Push ``binary`` into the target's executables directory; returns its path there."""
    return target.install(str(binary))


def cached_build(name: str) -> Path | None:
    """The most recent build of ``name`` in the cache (:func:`build_tool`), if any."""
    recipe = BUILDABLE.get(name)
    if recipe is None:
        return None
    builds = [d / recipe.binary for d in tools_cache_dir().glob(f"{name}-*") if (d / recipe.binary).is_file()]
    return max(builds, key=lambda p: p.stat().st_mtime, default=None)


def install_cached_tools(target, names: Iterable[str]) -> list[str]:
    """Install on ``target`` each of ``names`` it lacks and the cache has built for its
    architecture; returns those installed. A board that came back on a fresh disk, or a
    new board, gets the binaries the user built once, without a second ``tool install``."""
    host_abi = platform.machine()
    installed = []
    for name in names:
        binary = cached_build(name)
        if binary is None or target.which(name) is not None or getattr(target, "abi", None) != host_abi:
            continue
        install_tool(target, binary)
        installed.append(name)
    return installed


def _shown(path: Path) -> str:
    """``path`` as the user would type it here: relative to the current directory when inside it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return shlex.quote(str(path))
    return shlex.quote(relative if not relative.startswith("../../") else str(path))


def shared_source(name: str) -> Path | None:
    """The source tree of a buildable tool shipped beside the workbench (``../shared/src/<dir>``)."""
    recipe = BUILDABLE.get(name)
    if recipe is None:
        return None
    try:
        tree = workbench_dir().parent / "shared" / "src" / recipe.source
    except UserError:
        return None
    return tree if (tree / recipe.marker).is_file() else None


def missing_tool_hint(tool: str, target_conf: str | os.PathLike) -> str:
    """How to provide ``tool`` on the target of ``target_conf``: the command to paste."""
    if tool in BUILDABLE:
        src = shared_source(tool)
        where = _shown(src) if src is not None else f"<a checkout of {BUILDABLE[tool].origin}>"
        return (f"build and install it from its sources: lisa-ext campaign tool install {tool} "
                f"--src {where} --target {_shown(Path(target_conf))}")
    return "on Debian: bash scripts/install-system-packages.sh"
