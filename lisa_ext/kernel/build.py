"""Building a kernel variant: patches, config, kernel image, modules, emulation modules.

:func:`build_variant` turns a spec into :class:`KernelArtefacts` for one
architecture (``x86_64``: ``bzImage``; ``arm64``: ``Image``, cross-compiled with
``aarch64-linux-gnu-gcc``), cached under ``<cache>/kernels/artefacts/<hash>/``
where the hash covers the architecture, the base tree, the patch series, the
config fragments, the platform-emulation module sources and this recipe. A
cache hit returns at once. A miss takes the tree's lock, resets its git work
tree to the base, applies the patches, regenerates the config (``tinyconfig`` +
``merge_config.sh`` + ``olddefconfig``) and runs ``make <image> modules`` with
ccache in the tree's shared out-of-tree build directory of that architecture
(``build-<arch>``), so a variant differing by one patched file only recompiles
what that file touches. An arm64 build also compiles the device trees of the
SoCs the arm64 board emulates (:data:`lisa_ext.devicetree.SOCS`) from
the same tree, as ``make dtbs`` would, into ``dtbs/<soc>.dtb``.

The kernel release is ``<version>-lx<hash[:8]>`` and the build version
``uname -v`` starts with ``#lx<hash[:8]>``: two variants never share a
``/lib/modules`` directory and the running kernel can be checked against
:attr:`KernelArtefacts.version_string` or :attr:`KernelArtefacts.build_id`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lisa_ext.devicetree import SOCS, compile_soc_dtb
from lisa_ext.errors import UserError
from lisa_ext.kernel.config import ConfigMiss, check_fragments
from lisa_ext.kernel.patches import apply_series
from lisa_ext.kernel.spec import ModuleLoad, VariantSpec, load_variant_spec
from lisa_ext.kernel.tree import KernelTree, git_mirror, kernels_cache, prepare_tree, tree_key
from lisa_ext.workbench import ccache_env, workbench_path

__all__ = [
    "build_env",
    "KernelArtefacts",
    "BuildError",
    "build_variant",
    "build_status",
    "BuildStatus",
    "artefact_hash",
    "platform_emu_dir",
    "resolve_config",
    "cross_compiler",
]

#: bump when the build procedure changes what ends up in the artefacts
RECIPE_VERSION = "1"

_ARCHES = {
    "x86_64": {"ARCH": "x86_64", "image": "arch/x86/boot/bzImage", "target": "bzImage", "cross": ""},
    "arm64": {"ARCH": "arm64", "image": "arch/arm64/boot/Image", "target": "Image", "cross": "aarch64-linux-gnu-"},
}
#: Debian package of each cross compiler (scripts/install-system-packages.sh installs them)
_CROSS_PACKAGES = {"aarch64-linux-gnu-": "gcc-aarch64-linux-gnu"}


class BuildError(UserError):
    """make failed; the message names the step and the log to read."""


@dataclass(frozen=True)
class KernelArtefacts:
    """What a built variant provides to the board (paths are absolute).

    ``modules_dir`` is a staged root: copy its ``lib/`` onto the rootfs, it
    holds ``lib/modules/<release>/`` with the in-tree modules and the
    platform-emulation modules (``updates/lisa_emu_*.ko``) and depmod's files.
    ``cmdline``, ``knobs`` and ``modules`` come from the spec, not the cache:
    variants differing only in those share one build.
    """

    name: str
    spec_path: Path
    hash: str
    arch: str
    directory: Path
    image: Path
    """``bzImage`` (x86_64) or ``Image`` (arm64)"""
    dtbs: Path | None
    """arm64: ``<soc>.dtb`` per SoC the board emulates, compiled from this tree"""
    modules_dir: Path
    config: Path
    system_map: Path
    build_log: Path
    release: str
    build_id: str
    version_string: str
    cmdline: str
    knobs: tuple[tuple[str, str], ...]
    modules: tuple[ModuleLoad, ...]
    config_not_taken: tuple[str, ...]
    cached: bool


def platform_emu_dir() -> Path:
    """``kernels/platform-emu`` of the workbench (the emulation modules' sources)."""
    return workbench_path("kernels", "platform-emu")


def cross_compiler(arch: str) -> str:
    """The compiler prefix for ``arch`` (empty for the host's), checked to be installed."""
    prefix = _ARCHES[arch]["cross"]
    if prefix and shutil.which(f"{prefix}gcc") is None:
        raise UserError(f"building for {arch} needs {prefix}gcc (Debian package {_CROSS_PACKAGES[prefix]}; "
                        "run: bash scripts/install-system-packages.sh)")
    return prefix


def artefact_hash(spec: VariantSpec, tree_key: str) -> str:
    """Hash of everything that determines the artefacts (not cmdline/knobs/modules)."""
    h = hashlib.sha256()
    h.update(f"lisa-ext kernel recipe {RECIPE_VERSION}\ntree {tree_key}\narches {[spec.arch]}\n".encode())
    for kind, paths in (("patch", spec.patches), ("config", spec.configs)):
        for p in paths:
            data = p.read_bytes()
            h.update(f"{kind} {p.name} {len(data)}\n".encode())
            h.update(data)
    emu = platform_emu_dir()
    for p in sorted(emu.iterdir()):
        if p.is_file() and (p.name == "Kbuild" or p.suffix in (".c", ".h")):
            data = p.read_bytes()
            h.update(f"emu {p.name} {len(data)}\n".encode())
            h.update(data)
    return h.hexdigest()


def build_env() -> dict[str, str]:
    """The environment of every kernel ``make``: ccache in our cache, a fixed
    build user and host (reproducible ``uname -v``), no inherited ARCH /
    CROSS_COMPILE / LOCALVERSION."""
    env = ccache_env(os.environ)
    env.setdefault("KBUILD_BUILD_USER", "lisa-ext")
    env.setdefault("KBUILD_BUILD_HOST", "lisa-ext")
    env.pop("LOCALVERSION", None)
    env.pop("ARCH", None)
    env.pop("CROSS_COMPILE", None)
    return env


def _make_args(tree: KernelTree, arch: str) -> list[str]:
    a = _ARCHES[arch]
    cc = f"{a['cross']}gcc"
    args = ["make", "-C", str(tree.src), f"O={tree.build_dir(arch)}", f"ARCH={a['ARCH']}"]
    if a["cross"]:
        args.append(f"CROSS_COMPILE={a['cross']}")
    if shutil.which("ccache"):
        args.append(f"CC=ccache {cc}")
    return args


def _run_logged(cmd: list[str], log_file, env: dict[str, str], step: str, log_path: Path) -> None:
    log_file.write(f"\n$ {' '.join(cmd)}\n")
    log_file.flush()
    t0 = time.monotonic()
    r = subprocess.run(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, text=True)
    log_file.write(f"# step '{step}' took {time.monotonic() - t0:.1f} s\n")
    log_file.flush()
    if r.returncode:
        tail = "".join(log_path.read_text(errors="replace").splitlines(True)[-25:])
        raise BuildError(f"{step} failed (exit {r.returncode}); full log: {log_path}\n{tail}")


def config_key(spec: VariantSpec, tree_key: str, arch: str) -> str:
    """What the resolved .config depends on: base, fragments, and patches touching Kconfig files."""
    h = hashlib.sha256(f"{RECIPE_VERSION} {tree_key} {arch}\n".encode())
    for frag in spec.configs:
        h.update(frag.read_bytes())
    for patch in spec.patches:
        text = patch.read_bytes()
        if re.search(rb"^\+\+\+ \S*Kconfig", text, re.M):
            h.update(text)
    return h.hexdigest()


def resolve_config(spec: VariantSpec, tree: KernelTree, arch: str, log_file, env, log_path: Path) -> list[ConfigMiss]:
    """Write the variant's .config into the tree's build dir; return the requests not honoured.

    Skipped when the build dir's .config was resolved from the same inputs
    (:func:`config_key`) by the previous build: kconfig then has nothing to do.
    """
    build = tree.build_dir(arch)
    build.mkdir(parents=True, exist_ok=True)
    config = build / ".config"
    stamp = build / ".lisa-ext-config-key"
    key = config_key(spec, tree.key, arch)
    if config.exists() and stamp.exists() and stamp.read_text() == f"{key} {config.stat().st_mtime_ns}":
        log_file.write(f"# .config already resolved from these fragments ({key[:12]}), kconfig skipped\n")
        return check_fragments(spec.configs, config)
    stamp.unlink(missing_ok=True)
    old = config.read_bytes() if config.exists() else None
    old_stat = config.stat() if config.exists() else None
    make = _make_args(tree, arch)
    _run_logged([*make, "-s", "tinyconfig"], log_file, env, "make tinyconfig", log_path)
    merge_env = dict(env, ARCH=_ARCHES[arch]["ARCH"])
    if _ARCHES[arch]["cross"]:
        merge_env["CROSS_COMPILE"] = _ARCHES[arch]["cross"]
    log_file.write(f"\n$ merge_config.sh -O {build} {config} {' '.join(map(str, spec.configs))}\n")
    log_file.flush()
    r = subprocess.run(
        [str(tree.src / "scripts/kconfig/merge_config.sh"), "-O", str(build), str(config), *map(str, spec.configs)],
        cwd=tree.src, env=merge_env, stdout=log_file, stderr=subprocess.STDOUT, text=True,
    )
    if r.returncode:
        raise BuildError(f"merge_config.sh failed (exit {r.returncode}); full log: {log_path}")
    _run_logged([*make, "-s", "olddefconfig"], log_file, env, "make olddefconfig", log_path)
    if old is not None and config.read_bytes() == old:
        # same config as the last build in this directory: keep its timestamp
        os.utime(config, ns=(old_stat.st_atime_ns, old_stat.st_mtime_ns))
    stamp.write_text(f"{key} {config.stat().st_mtime_ns}")
    return check_fragments(spec.configs, config)


def _build_id(vmlinux: Path) -> str:
    r = subprocess.run(["readelf", "-n", str(vmlinux)], text=True, capture_output=True)
    m = re.search(r"Build ID:\s*([0-9a-f]+)", r.stdout)
    return m.group(1) if m else ""


def _uts_version(build: Path) -> str:
    for name in ("include/generated/utsversion.h", "include/generated/compile.h"):
        p = build / name
        if p.exists():
            m = re.search(r'#define UTS_VERSION "(.*)"', p.read_text())
            if m:
                return m.group(1)
    return ""


def _build_arch(spec, tree, arch, tag, jobs, stage, out, log_file, env, log_path, log) -> dict:
    a = _ARCHES[arch]
    build = tree.build_dir(arch)
    misses = resolve_config(spec, tree, arch, log_file, env, log_path)
    for m in misses:
        log(f"  warning: config option did not take effect: {m}")
    make = [*_make_args(tree, arch), f"-j{jobs}", f"LOCALVERSION=-{tag}", f"KBUILD_BUILD_VERSION={tag}"]
    t0 = time.monotonic()
    log(f"  make {a['target']} modules ({arch}, -j{jobs}); log: {log_path}")
    _run_logged([*make, a["target"], "modules"], log_file, env, f"make {a['target']} modules ({arch})", log_path)
    log(f"  kernel built in {time.monotonic() - t0:.0f} s")
    release = (build / "include/config/kernel.release").read_text().strip()
    result = {"release": release, "config_not_taken": [str(m) for m in misses], "arch": arch}
    shutil.copy2(build / a["image"], out / a["target"])
    shutil.copy2(build / ".config", out / "config")
    shutil.copy2(build / "System.map", out / "System.map")
    result["build_id"] = _build_id(build / "vmlinux")
    result["version_string"] = _uts_version(build)
    install = [f"INSTALL_MOD_PATH={stage}", "INSTALL_MOD_STRIP=1", "DEPMOD=/bin/true"]
    _run_logged([*make, *install, "modules_install"], log_file, env, "make modules_install", log_path)
    emu = tree.root / "platform-emu"
    shutil.rmtree(emu, ignore_errors=True)
    shutil.copytree(platform_emu_dir(), emu)
    emu_make = [*make, f"M={emu}"]
    _run_logged([*emu_make, "modules"], log_file, env, "build platform-emulation modules", log_path)
    _run_logged([*emu_make, *install, "modules_install"], log_file, env, "install platform-emulation modules", log_path)
    depmod = shutil.which("depmod") or "/sbin/depmod"
    _run_logged([depmod, "-b", str(stage), "-F", str(build / "System.map"), release], log_file, env, "depmod", log_path)
    if arch == "arm64":
        (out / "dtbs").mkdir()
        for soc, dtsi in SOCS.items():
            compile_soc_dtb(tree.src, dtsi, out / "dtbs" / f"{soc}.dtb")
    return result


def _load_cached(spec: VariantSpec, directory: Path, cached: bool) -> KernelArtefacts:
    meta = json.loads((directory / "artefacts.json").read_text())
    arch = meta.get("arch", "x86_64")
    return KernelArtefacts(
        name=spec.name,
        spec_path=spec.path,
        hash=meta["hash"],
        arch=arch,
        directory=directory,
        image=directory / _ARCHES[arch]["target"],
        dtbs=directory / "dtbs" if (directory / "dtbs").is_dir() else None,
        modules_dir=directory / "modules",
        config=directory / "config",
        system_map=directory / "System.map",
        build_log=directory / "build.log",
        release=meta["release"],
        build_id=meta["build_id"],
        version_string=meta["version_string"],
        cmdline=spec.cmdline,
        knobs=spec.knobs,
        modules=spec.modules,
        config_not_taken=tuple(meta.get("config_not_taken", ())),
        cached=cached,
    )


@dataclass(frozen=True)
class BuildStatus:
    """Whether a variant's build is in the cache, without building or fetching anything."""

    name: str
    spec_path: Path
    #: the artefact hash (None when the base tree's key needs a network fetch first)
    hash: str | None
    built: bool
    directory: Path | None
    #: the variant whose build made the cached artefacts (the hash ignores cmdline, knobs,
    #: modules: variants differing only there share one build), and its spec file (every
    #: study has a ``baseline``)
    built_by: str | None = None
    built_by_spec: Path | None = None
    reason: str = ""


def build_status(spec_path: str | os.PathLike, arch: str | None = None) -> BuildStatus:
    """:class:`BuildStatus` of the variant at ``spec_path`` built for ``arch`` (default: the
    spec's own): its hash and whether
    ``<cache>/kernels/artefacts/<hash>`` holds a finished build. Offline: a git base
    tree whose mirror is not cloned yet gives no hash (``reason`` says so)."""
    spec = load_variant_spec(spec_path, arch=arch)
    if spec.base.kind == "git":
        mirror = git_mirror(spec.base.location)
        if not (mirror / "HEAD").exists():
            return BuildStatus(spec.name, spec.path, None, False, None,
                               reason=f"base tree {spec.base.location} not fetched yet: the first "
                                      f"'lisa-ext kernel build' clones it")
    try:
        digest = artefact_hash(spec, tree_key(spec.base))
    except UserError as exc:
        return BuildStatus(spec.name, spec.path, None, False, None, reason=str(exc))
    directory = kernels_cache() / "artefacts" / digest
    meta_path = directory / "artefacts.json"
    if not meta_path.is_file():
        return BuildStatus(spec.name, spec.path, digest, False, directory)
    meta = json.loads(meta_path.read_text())
    return BuildStatus(spec.name, spec.path, digest, True, directory, built_by=meta.get("variant"),
                       built_by_spec=Path(meta["spec"]) if meta.get("spec") else None)


def build_variant(spec_path: str | os.PathLike, jobs: int | None = None, force: bool = False, log=print,
                  arch: str | None = None) -> KernelArtefacts:
    """Build (or fetch from the cache) the artefacts of the variant at ``spec_path`` for
    ``arch`` (default: the spec's own architecture)."""
    spec = load_variant_spec(spec_path, arch=arch)
    cross_compiler(spec.arch)
    tree = prepare_tree(spec.base, log=log)
    digest = artefact_hash(spec, tree.key)
    root = kernels_cache() / "artefacts"
    directory = root / digest
    if (directory / "artefacts.json").exists() and not force:
        return _load_cached(spec, directory, cached=True)
    jobs = jobs or int(os.environ.get("LISA_EXT_KERNEL_JOBS", 0)) or os.cpu_count() or 2
    env = build_env()
    with tree.locked():
        if (directory / "artefacts.json").exists() and not force:
            return _load_cached(spec, directory, cached=True)
        tmp = root / f"{digest}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        log_path = root / f"{digest}.build.log"
        tag = f"lx{digest[:8]}"
        log(f"building variant {spec.name} for {spec.arch} ({digest[:12]}) from {tree.key}")
        t0 = time.monotonic()
        try:
            with open(log_path, "w") as log_file:
                log_file.write(f"variant {spec.name} ({spec.arch}) from {spec.path}\nhash {digest}\ntree {tree.key}\n")
                t_patch = time.monotonic()
                commit = apply_series(tree.src, spec.patches, log=log)
                log_file.write(f"# step 'reset tree and apply patches' took {time.monotonic() - t_patch:.1f} s\n")
                meta: dict = {"hash": digest, "variant": spec.name, "spec": str(spec.path), "tree": tree.key,
                              "commit": commit, "patches": [p.name for p in spec.patches],
                              "configs": [str(c) for c in spec.configs]}
                stage = tmp / "modules"
                meta.update(_build_arch(spec, tree, spec.arch, tag, jobs, stage, tmp, log_file, env, log_path, log))
                meta["build_seconds"] = round(time.monotonic() - t0, 1)
                (tmp / "artefacts.json").write_text(json.dumps(meta, indent=2) + "\n")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log_path.rename(tmp / "build.log")
        shutil.rmtree(directory, ignore_errors=True)
        tmp.rename(directory)
    log(f"variant {spec.name} built in {time.monotonic() - t0:.0f} s")
    return _load_cached(spec, directory, cached=False)
