"""Kernel variant specs: one YAML file per variant under ``kernels/<study>/``.

A spec names a base tree, the patches and config fragments applied to it (the
build inputs, hashed for the artefact cache) and what the board needs at run
time (cmdline, modules to load, sysfs knobs). Example::

    name: no-iowait-boost
    description: schedutil with the IO boost capped to 0
    base: debian                  # or {dir: PATH} or {git: URL, ref: REF}
    patches:                      # applied in order with `git am` or `patch -p1`
      - ../patches/0001-cpufreq-schedutil-iowait_boost_cap-tunable.patch
    configs:                      # merged on top of `make tinyconfig`
      - ../configs/vboard.config
    cmdline: cpuidle.governor=teo
    modules:                      # loaded at boot, in order
      - name: lisa_emu_cpuidle
        params: {table: rk3399}
    knobs:                        # written after boot, in order; globs allowed
      /sys/devices/system/cpu/cpufreq/policy*/schedutil/iowait_boost_cap: 0
    arm64:                        # the same variant on the arm64 board: keys replacing the above
      configs: [../configs/vboard-arm64.config]
      modules: [lisa_emu_cpufreq]

The top-level keys describe the variant for ``arch`` (``x86_64`` unless the spec says
``arch: arm64``); a section named after another architecture replaces some of them (patches,
configs, cmdline, modules, knobs) when the variant is built for that one, so one spec serves both
boards with the same patches. :func:`load_variant_spec` resolves the spec for the architecture asked for;
a spec without a section for it cannot be built for it.

Knob paths may contain shell globs (``policy*``: policy numbers depend on the
board's topology); the deployer expands them on the target and writes every
match. Relative paths are relative to the spec file.

Specs travel between colleagues, so nothing in one may reach beyond what it
names: patches and config fragments must lie in the spec's tree (the directory
above the spec's own, ``kernels/`` for ``kernels/<study>/<variant>.yml``) or in
the workbench's ``kernels/`` (symlinks followed), and a git base's URL and ref
are refused when a program could read them as an option (a leading ``-``), when
they hold whitespace or control characters, or when the URL names a transport
that runs a command (``ext::``). Every problem is reported as a
:class:`~lisa_ext.errors.SpecError` naming the file, the key (with its line)
and what was expected.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lisa_ext.errors import SpecError, UserError
from lisa_ext.knobs import knob_problem
from lisa_ext.schema import argument_problem, load_yaml, text_problem
from lisa_ext.workbench import workbench_path

__all__ = ["ARCHES", "BaseTree", "DEFAULT_DEBIAN_PACKAGE", "GIT_PROTOCOLS", "ModuleLoad", "VariantSpec", "allowed_dirs",
           "load_variant_spec", "ref_problem"]

#: the default base tree: Debian's kernel source package, as a tarball in /usr/src
DEFAULT_DEBIAN_PACKAGE = "linux-source-6.12"

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,39}\Z")
_PARAM_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
#: the architectures a variant is built for (kernel ARCH names)
ARCHES = ("x86_64", "arm64")
#: what a per-architecture section may replace
_ARCH_KEYS = ("patches", "configs", "cmdline", "modules", "knobs")
_TOP_KEYS = {"name", "description", "base", "arch", *_ARCH_KEYS, *ARCHES}
#: a tag, branch or commit (``git check-ref-format`` names, ``HEAD~1``), never an option
_REF_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./+~^-]{0,199}")
#: git transports that do not run a command of the URL's choosing (``ext::`` does)
GIT_PROTOCOLS = ("file", "git", "http", "https", "ssh")
#: the kernel's command line holds 2048 bytes on x86 and arm64 (COMMAND_LINE_SIZE)
_CMDLINE_MAX = 2048


@dataclass(frozen=True)
class BaseTree:
    """Where the kernel source comes from: exactly one of the three kinds."""

    kind: str  # "debian", "dir" or "git"
    location: str  # package name, directory path, or git URL/path
    ref: str | None = None  # git only


@dataclass(frozen=True)
class ModuleLoad:
    """A module the board loads at boot (``modprobe NAME k=v ...``)."""

    name: str
    params: dict[str, str] = field(default_factory=dict)

    def modprobe_args(self) -> list[str]:
        return [self.name] + [f"{k}={v}" for k, v in self.params.items()]


@dataclass(frozen=True)
class VariantSpec:
    """A validated variant spec; paths are absolute."""

    path: Path
    name: str
    description: str
    base: BaseTree
    patches: tuple[Path, ...]
    configs: tuple[Path, ...]
    cmdline: str
    modules: tuple[ModuleLoad, ...]
    knobs: tuple[tuple[str, str], ...]
    arch: str
    """The architecture this spec was resolved for."""
    arches: tuple[str, ...]
    """Every architecture the spec can be built for."""


def _line(node: Any, key: Any) -> str:
    """`` (line N)`` for a key of a ruamel mapping/sequence, when known."""
    try:
        if isinstance(key, int):
            return f" (line {node.lc.item(key)[0] + 1})"
        return f" (line {node.lc.key(key)[0] + 1})"
    except Exception:
        return ""


def _read_yaml(path: Path) -> Any:
    if not path.is_file():
        raise SpecError(path, "(file)", "no such file")
    return load_yaml(path, "kernel variant spec")


def _scalar_str(path: Path, key: str, value: Any) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
        raise SpecError(path, key, f"expected a string or number, got {value!r}")
    return str(value)


def allowed_dirs(path: Path) -> tuple[Path, ...]:
    """Where the patches and config fragments of the spec at ``path`` may lie: its tree (the
    directory above its own) and the workbench's ``kernels/`` (shared board patches, configs)."""
    dirs = [path.resolve().parent.parent]
    try:
        dirs.append(workbench_path("kernels").resolve())
    except UserError:  # no workbench: the spec's tree only
        pass
    return tuple(dict.fromkeys(dirs))


def _existing_file(path: Path, key: str, value: Any) -> Path:
    if not isinstance(value, str) or not value:
        raise SpecError(path, key, f"expected a file path, got {value!r}")
    p = Path(os.path.expanduser(value))
    p = p if p.is_absolute() else (path.parent / p)
    if not p.is_file():
        raise SpecError(path, key, f"file {value!r} not found (looked for {p})")
    resolved = p.resolve()
    allowed = allowed_dirs(path)
    if not any(resolved.is_relative_to(d) for d in allowed):
        raise SpecError(path, key, f"{value!r} is {resolved}, outside the spec's tree: a patch or config "
                        f"fragment must lie in {' or '.join(map(str, allowed))}")
    return resolved


def _git_url(path: Path, key: str, url: str) -> str:
    problem = argument_problem(url, "a git URL or path")
    if problem:
        raise SpecError(path, key, problem)
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)(://|::)", url)
    if scheme and (scheme.group(2) == "::" or scheme.group(1).lower() not in GIT_PROTOCOLS):
        raise SpecError(path, key, f"transport {scheme.group(1)!r} is not allowed; use a path or a "
                        f"{', '.join(GIT_PROTOCOLS)} URL")
    host = re.match(r"(?:[a-z]+://)?(?:[^@/]*@)?([^/:]*)", url).group(1)
    if host.startswith("-"):
        raise SpecError(path, key, f"host {host!r} starts with '-', which ssh would read as an option")
    return url


def ref_problem(ref: str) -> str | None:
    """What is wrong with ``ref`` as a git tag, branch or commit that will reach git's command
    line, or None: never an option, whitespace or a range (``..``)."""
    problem = argument_problem(ref, "a git ref")
    if problem is None and (not _REF_RE.fullmatch(ref) or ".." in ref):
        problem = (f"{ref!r} is not a tag, branch or commit: use letters, digits and _ . / + ~ ^ -, "
                   "starting with a letter, digit or _ (no '..')")
    return problem


def _parse_base(path: Path, doc: Any) -> BaseTree:
    raw = doc.get("base", "debian")
    key = "base" + _line(doc, "base")
    if raw == "debian":
        return BaseTree("debian", DEFAULT_DEBIAN_PACKAGE)
    if not isinstance(raw, dict):
        raise SpecError(path, key, f"expected 'debian' or a mapping with one of debian/dir/git, got {raw!r}")
    kinds = [k for k in ("debian", "dir", "git") if k in raw]
    unknown = sorted(set(raw) - {"debian", "dir", "git", "ref"})
    if unknown:
        raise SpecError(path, f"base.{unknown[0]}" + _line(raw, unknown[0]), "unknown key (allowed: debian, dir, git, ref)")
    if len(kinds) != 1:
        raise SpecError(path, key, "expected exactly one of debian, dir, git")
    kind = kinds[0]
    sub = f"base.{kind}" + _line(raw, kind)
    value = raw[kind]
    if kind == "debian":
        name = _scalar_str(path, sub, value)
        if not re.fullmatch(r"linux-source-[0-9.]+", name):
            raise SpecError(path, sub, f"expected a Debian package like {DEFAULT_DEBIAN_PACKAGE}, got {name!r}")
        if "ref" in raw:
            raise SpecError(path, "base.ref" + _line(raw, "ref"), "only allowed with base.git")
        return BaseTree("debian", name)
    if kind == "dir":
        if "ref" in raw:
            raise SpecError(path, "base.ref" + _line(raw, "ref"), "only allowed with base.git")
        d = Path(os.path.expanduser(_scalar_str(path, sub, value)))
        d = d if d.is_absolute() else path.parent / d
        if not (d / "Makefile").is_file() or not (d / "Kconfig").is_file():
            raise SpecError(path, sub, f"{d} is not a kernel source tree (no Makefile/Kconfig)")
        return BaseTree("dir", str(d.resolve()))
    url = _git_url(path, sub, _scalar_str(path, sub, value))
    if "ref" not in raw:
        raise SpecError(path, key, "base.git needs a ref (tag, branch or commit)")
    ref_key = "base.ref" + _line(raw, "ref")
    ref = _scalar_str(path, ref_key, raw["ref"])
    problem = ref_problem(ref)
    if problem:
        raise SpecError(path, ref_key, problem)
    local = Path(os.path.expanduser(url))
    if not local.is_absolute() and "://" not in url and ":" not in url:
        local = path.parent / local
        url = str(local.resolve()) if local.exists() else url
    return BaseTree("git", url, ref)


def _parse_paths(path: Path, doc: Any, key: str, suffixes: tuple[str, ...]) -> tuple[Path, ...]:
    raw = doc.get(key, [])
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SpecError(path, key + _line(doc, key), f"expected a list of files, got {raw!r}")
    out = []
    for i, item in enumerate(raw):
        p = _existing_file(path, f"{key}[{i}]" + _line(raw, i), item)
        if suffixes and not p.name.endswith(suffixes):
            raise SpecError(path, f"{key}[{i}]" + _line(raw, i), f"expected a {' or '.join(suffixes)} file, got {p.name!r}")
        out.append(p)
    return tuple(out)


def _parse_modules(path: Path, doc: Any) -> tuple[ModuleLoad, ...]:
    raw = doc.get("modules", [])
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SpecError(path, "modules" + _line(doc, "modules"), "expected a list of {name, params}")
    out = []
    for i, item in enumerate(raw):
        key = f"modules[{i}]" + _line(raw, i)
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict) or "name" not in item:
            raise SpecError(path, key, f"expected a module name or {{name: ..., params: {{...}}}}, got {item!r}")
        extra = sorted(set(item) - {"name", "params"})
        if extra:
            raise SpecError(path, f"{key}.{extra[0]}", "unknown key (allowed: name, params)")
        name = _scalar_str(path, f"{key}.name", item["name"])
        if not _PARAM_RE.match(name):
            raise SpecError(path, f"{key}.name", f"not a module name: {name!r}")
        params = item.get("params") or {}
        if not isinstance(params, dict):
            raise SpecError(path, f"{key}.params", f"expected a mapping of parameter: value, got {params!r}")
        clean = {}
        for k, v in params.items():
            if not isinstance(k, str) or not _PARAM_RE.match(k):
                raise SpecError(path, f"{key}.params.{k}", "not a module parameter name")
            value = _scalar_str(path, f"{key}.params.{k}", v)
            if any(c.isspace() for c in value):
                raise SpecError(path, f"{key}.params.{k}", f"value must not contain spaces: {value!r}")
            if not value.isprintable():
                raise SpecError(path, f"{key}.params.{k}", f"value must be printable: {value!r}")
            clean[k] = value
        out.append(ModuleLoad(name, clean))
    return tuple(out)


def _parse_knobs(path: Path, doc: Any) -> tuple[tuple[str, str], ...]:
    raw = doc.get("knobs", {})
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise SpecError(path, "knobs" + _line(doc, "knobs"), "expected a mapping of /sys or /proc path: value")
    out = []
    for k, v in raw.items():
        key = f"knobs.{k}" + _line(raw, k)
        problem = knob_problem(k, v)
        if problem:
            raise SpecError(path, key, problem)
        out.append((k, _scalar_str(path, key, v)))
    return tuple(out)


def _arch_sections(p: Path, doc: Any) -> tuple[str, dict[str, Any]]:
    """The spec's own architecture and its per-architecture sections, checked."""
    own = doc.get("arch", "x86_64")
    if own not in ARCHES:
        raise SpecError(p, "arch" + _line(doc, "arch"), f"expected one of {', '.join(ARCHES)}, got {own!r}")
    sections = {}
    for arch in ARCHES:
        if arch not in doc:
            continue
        key = arch + _line(doc, arch)
        if arch == own:
            raise SpecError(p, key, f"the spec is for {own} already (arch: {own}); a section names another architecture")
        section = doc[arch]
        if not isinstance(section, dict):
            raise SpecError(p, key, f"expected a mapping of keys replacing the spec's on {arch} "
                            f"({', '.join(_ARCH_KEYS)}), got {section!r}")
        unknown = sorted(set(section) - set(_ARCH_KEYS))
        if unknown:
            raise SpecError(p, f"{arch}.{unknown[0]}" + _line(section, unknown[0]),
                            f"cannot be replaced per architecture (allowed: {', '.join(_ARCH_KEYS)})")
        sections[arch] = section
    return own, sections


def load_variant_spec(path: str | os.PathLike, arch: str | None = None) -> VariantSpec:
    """Load and validate a variant spec, resolved for ``arch`` (default: the spec's own);
    raise SpecError on the first problem."""
    p = Path(path).absolute()
    doc = _read_yaml(p)
    if not isinstance(doc, dict):
        raise SpecError(p, "(top level)", "expected a mapping with at least 'name'")
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise SpecError(p, unknown[0] + _line(doc, unknown[0]), f"unknown key (allowed: {', '.join(sorted(_TOP_KEYS))})")
    own, sections = _arch_sections(p, doc)
    arch = arch or own
    if arch not in ARCHES:
        raise SpecError(p, "arch", f"cannot build for {arch!r}: expected one of {', '.join(ARCHES)}")
    if arch != own and arch not in sections:
        raise SpecError(p, arch, f"the variant is for {own}; to build it for the {arch} board, add an "
                        f"'{arch}:' section (e.g. its configs and modules)")
    for other, section in sections.items():
        # every section is checked, whichever architecture is asked for
        try:
            _parse_paths(p, section, "configs", (".config", ".cfg", ".fragment"))
            _parse_paths(p, section, "patches", (".patch", ".mbox", ".diff", ".eml"))
            _parse_modules(p, section)
            _parse_knobs(p, section)
        except SpecError as exc:
            raise SpecError(p, f"{other}.{exc.key}", exc.problem) from None
    if arch != own:
        doc = {**doc, **sections[arch]}
    if "name" not in doc:
        raise SpecError(p, "name", "missing: every variant needs a name")
    name = _scalar_str(p, "name" + _line(doc, "name"), doc["name"])
    if not _NAME_RE.match(name):
        raise SpecError(p, "name" + _line(doc, "name"), f"expected lowercase letters, digits, '.', '_' or '-' (max 40), got {name!r}")
    description = doc.get("description") or ""
    problem = text_problem(description)
    if problem is not None:
        raise SpecError(p, "description" + _line(doc, "description"), problem)
    cmdline = doc.get("cmdline") or ""
    if (not isinstance(cmdline, str) or len(cmdline) > _CMDLINE_MAX
            or not all(c.isprintable() for c in cmdline.strip())):
        raise SpecError(p, "cmdline" + _line(doc, "cmdline"), "expected a one-line string of kernel "
                        f"parameters (printable characters, at most {_CMDLINE_MAX})")
    configs = _parse_paths(p, doc, "configs", (".config", ".cfg", ".fragment"))
    if not configs:
        raise SpecError(p, "configs", "at least one config fragment is needed (e.g. ../configs/vboard.config)")
    return VariantSpec(
        path=p,
        name=name,
        description=str(description),
        base=_parse_base(p, doc),
        patches=_parse_paths(p, doc, "patches", (".patch", ".mbox", ".diff", ".eml")),
        configs=configs,
        cmdline=" ".join(cmdline.split()),
        modules=_parse_modules(p, doc),
        knobs=_parse_knobs(p, doc),
        arch=arch,
        arches=(own, *sections),
    )
