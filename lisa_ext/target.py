"""Target configs: load and check a LISA ``target_conf`` YAML, connect, read provenance.

The files in ``target-configs/`` are LISA target_conf files (``lisa/target.py``,
``TargetConf.STRUCTURE``): a top-level ``target-conf`` mapping and an optional
``platform-info`` mapping. They are checked here against LISA's own key
descriptors so that a typo stops before anything runs, with the file, the key
and the allowed keys in one message. Connection goes through LISA's
:class:`lisa.target.Target` (devlib underneath), so the host (kind ``host``), an
SSH board (kind ``linux``) and an Android device (kind ``android``) are driven
the same way.
"""

from __future__ import annotations

import os
import platform
import shlex
from importlib.metadata import version
from pathlib import Path
from typing import Any

from lisa_ext import hostkeys
from lisa_ext.compat import import_lisa
from lisa_ext.errors import SpecError
from lisa_ext.running_kernel import probe_running_kernel
from lisa_ext.schema import Field, check_mapping, load_yaml, positive, type_names
from lisa_ext.vboard.board import TARGET_CONF_NAMES, target_conf_overrides
from lisa_ext.vboard.rootfs import known_hosts_pin_path

__all__ = ["check_target_conf", "connect", "is_virtual_board", "kernel_provenance", "lisa_platform_info",
           "llc_domains", "parse_platform_facts", "platform_provenance", "target_extras", "tool_versions",
           "tracefs_root"]

_TOP_KEYS = ("target-conf", "platform-info", "lisa-ext")
#: our own settings in a target config, under ``lisa-ext:`` (LISA reads only its own keys)
_EXTRA_SCHEMA = {
    "reset-command": Field((str,), "host shell command that power-cycles or resets the board "
                           "(a lab's PDU or relay), run when the board is lost mid-run"),
    "reset-timeout-s": Field((int, float), "seconds to wait for the board after a reset (default 600)",
                             check=positive),
    "probe-interval-s": Field((int, float), "seconds between health probes during a run (default 5)",
                              check=positive),
    "probe-misses": Field((int,), "failed probes in a row that mean the board is lost (default 3)",
                          check=lambda v: None if v >= 1 else "must be at least 1"),
}


def _check_level(path: Path, node: Any, level: Any, prefix: str) -> None:
    from lisa.conf import LevelKeyDesc  # deferred: LISA takes seconds; only config checks need it

    if not isinstance(node, dict):
        raise SpecError(path, prefix, f"expected a mapping ({level.help})")
    allowed = {kd.name: kd for kd in level.children}
    for key, value in node.items():
        dotted = f"{prefix}.{key}"
        kd = allowed.get(key)
        if kd is None:
            raise SpecError(path, dotted, f"unknown key; allowed here: {', '.join(allowed)}")
        if isinstance(kd, LevelKeyDesc):
            _check_level(path, value, kd, dotted)
            continue
        try:
            kd.validate_val(value)
        except (TypeError, ValueError):
            types = tuple(t if t is not None else type(None) for t in kd.classinfo
                          if t is None or isinstance(t, type))
            raise SpecError(path, dotted, f"expected {type_names(types) or 'another type'} "
                            f"({kd.help}), got {value!r}") from None


def check_target_conf(path: str | os.PathLike) -> dict:
    """Validate a target config file against LISA's structure; return it as plain data."""
    path = Path(path).resolve()
    doc = load_yaml(path, "target config")
    if not isinstance(doc, dict) or "target-conf" not in doc:
        raise SpecError(path, "target-conf", "missing: a LISA target config has a top-level "
                        "'target-conf' mapping (and optionally 'platform-info')")
    for key in doc:
        if key not in _TOP_KEYS:
            raise SpecError(path, str(key), f"unknown key; allowed here: {', '.join(_TOP_KEYS)}")
    lisa_target = import_lisa("lisa.target")
    _check_level(path, doc["target-conf"], lisa_target.TargetConf.STRUCTURE, "target-conf")
    if "platform-info" in doc:
        platinfo = import_lisa("lisa.platforms.platinfo")
        _check_level(path, doc["platform-info"], platinfo.PlatformInfo.STRUCTURE, "platform-info")
    if "lisa-ext" in doc:
        check_mapping(path, doc["lisa-ext"], "lisa-ext", _EXTRA_SCHEMA)
    kind = doc["target-conf"].get("kind")
    if kind not in ("host", "linux", "android"):
        raise SpecError(path, "target-conf.kind", f"{kind!r} is not one of: host, linux, android")
    return doc


def target_extras(path: str | os.PathLike) -> dict:
    """The ``lisa-ext:`` settings of a target config (reset command, probe timing), checked."""
    return dict(check_target_conf(path).get("lisa-ext") or {})


def is_virtual_board(path: str | os.PathLike) -> bool:
    """Whether a target config is a virtual board's (its target-conf is named ``vboard`` or
    ``vboard-arm64``)."""
    return check_target_conf(path)["target-conf"].get("name") in TARGET_CONF_NAMES


def _host_key_pin(doc: dict) -> tuple[Path | None, str | None]:
    """The virtual board's pinned key for its target configs; others trust on first use."""
    if doc["target-conf"].get("name") in TARGET_CONF_NAMES:
        return known_hosts_pin_path(), hostkeys.VBOARD_ALIAS
    return None, None


def connect(path: str | os.PathLike):
    """Check a target config and connect to it through LISA; return a :class:`lisa.target.Target`.

    An SSH target's host key is checked before LISA connects (devlib itself only
    consults ``~/.ssh/known_hosts``) and again on the connection it opened:
    see :mod:`lisa_ext.hostkeys`.
    """
    doc = check_target_conf(path)
    lisa_target = import_lisa("lisa.target")
    conf = lisa_target.TargetConf.from_yaml_map(os.fspath(path))
    pinned, alias = _host_key_pin(doc)
    if pinned is not None:
        conf.add_src("vboard of this cache", target_conf_overrides())
    if conf.get("kind") == "linux":
        hostkeys.check_host_key(conf.get("host"), conf.get("port") or 22, pinned=pinned, alias=alias)
    target = lisa_target.Target.from_conf(conf)
    hostkeys.check_connection(target, pinned=pinned, alias=alias)
    return target


def tracefs_root(target) -> str | None:
    """The tracefs mount point on ``target`` (with instances support), or None."""
    for root in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if target.file_exists(f"{root}/instances"):
            return root
    return None


def _read(target, command: str) -> str | None:
    out = target.execute(f"{command} 2>/dev/null || true", as_root=True, check_exit_code=False)
    out = out.strip()
    return out or None


def kernel_provenance(target) -> dict:
    """Kernel release, version, command line (:mod:`lisa_ext.running_kernel`'s
    probe), machine and a hash of its config when readable."""
    running = probe_running_kernel(
        lambda command: target.execute(command, as_root=True, check_exit_code=False))
    release = running.release
    config_hash = _read(
        target,
        "{ zcat /proc/config.gz || cat /boot/config-" + shlex.quote(release or "") + "; }"
        " 2>/dev/null | sha256sum | cut -d' ' -f1 | grep -v '^e3b0c442'")
    return {
        "release": release,
        "version": running.version,
        "machine": _read(target, "uname -m"),
        "cmdline": running.cmdline,
        "config_sha256": config_hash,
    }


def platform_provenance(target) -> dict:
    """The parts of LISA's platform info that are cheap and safe to compute.

    Keys such as ``rtapp/calib`` are left out on purpose: computing them runs a
    calibration that freezes userspace on the target.
    """
    info: dict[str, Any] = {"name": target.name, "kind": type(target.target).__name__}
    plat_info = target.plat_info
    for key in (["abi"], ["cpus-count"], ["os"], ["numa-nodes-count"], ["kernel", "version"]):
        try:
            info["/".join(key)] = str(plat_info.get_nested_key(key, quiet=True))
        except Exception as exc:  # a key LISA cannot compute on this target
            info["/".join(key)] = f"unavailable: {type(exc).__name__}"
    info["llc"] = llc_domains(target)
    return info


#: per CPU cache: "<cpu dir> <level> <type> <shared_cpu_list>" (drivers/base/cacheinfo.c sysfs)
_CACHES = ("for d in /sys/devices/system/cpu/cpu[0-9]*/cache/index[0-9]*; do "
           "echo \"${d%%/cache/*} $(cat $d/level) $(cat $d/type) $(cat $d/shared_cpu_list)\"; done")


#: per CPU its capacity, per cpufreq policy its CPUs and OPPs (drivers/base/arch_topology.c,
#: drivers/cpufreq/cpufreq.c sysfs), one line each
_PLATFORM_FACTS = (
    "for c in /sys/devices/system/cpu/cpu[0-9]*; do "
    "echo \"capacity ${c##*/cpu} $(cat $c/cpu_capacity 2>/dev/null)\"; done; "
    "for p in /sys/devices/system/cpu/cpufreq/policy[0-9]*; do "
    "echo \"policy $(cat $p/related_cpus) : $(cat $p/scaling_available_frequencies 2>/dev/null)\"; done")


def parse_platform_facts(text: str) -> dict:
    """The ``platform-info`` mapping (LISA's PlatformInfo keys) of :data:`_PLATFORM_FACTS`'s output:
    ``cpus-count``, ``cpu-capacities`` (``orig``; when every CPU has one), ``freq-domains`` and
    ``freqs`` (when cpufreq has policies)."""
    capacities: dict[int, int | None] = {}
    domains, freqs = [], {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "capacity" and fields[1].isdigit():
            capacities[int(fields[1])] = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else None
        elif fields[:1] == ["policy"] and ":" in fields:
            at = fields.index(":")
            cpus = [int(c) for c in fields[1:at] if c.isdigit()]
            opps = sorted(int(f) for f in fields[at + 1:] if f.isdigit())
            if cpus:
                domains.append(cpus)
                freqs.update({cpu: opps for cpu in cpus if opps})
    info: dict[str, Any] = {"cpus-count": len(capacities)}
    if capacities and all(v is not None for v in capacities.values()):
        info["cpu-capacities"] = {"orig": dict(sorted(capacities.items())), "writeable": False}
    if domains:
        info["freq-domains"] = sorted(domains)
    if freqs:
        info["freqs"] = dict(sorted(freqs.items()))
    return info


def lisa_platform_info(target):
    """A LISA ``PlatformInfo`` of ``target``'s CPUs, read from its sysfs in one command (LISA's own
    probing of these keys needs its kernel module or sched_domain files): see
    :func:`parse_platform_facts`. Campaign runs store it beside their trace (platform.yml)."""
    platinfo = import_lisa("lisa.platforms.platinfo")
    return platinfo.PlatformInfo(parse_platform_facts(_read(target, _PLATFORM_FACTS) or ""), src="target sysfs")


def llc_domains(target) -> list[str]:
    """The target's last-level-cache domains as kernel CPU lists (``["0-1", "2-3"]``): per CPU
    the ``shared_cpu_list`` of its highest-level data or unified cache; empty when sysfs has none."""
    best: dict[str, tuple[int, str]] = {}
    for line in (_read(target, _CACHES) or "").splitlines():
        fields = line.split()
        if len(fields) != 4 or fields[2] == "Instruction" or not fields[1].isdigit():
            continue
        if fields[0] not in best or int(fields[1]) > best[fields[0]][0]:
            best[fields[0]] = (int(fields[1]), fields[3])
    return sorted({shared for _, shared in best.values()})


def tool_versions(target, tools: list[str]) -> dict:
    """Versions of the target binaries used, plus the host-side Python stack."""
    versions: dict[str, Any] = {"python": platform.python_version()}
    for dist in ("lisa-linux", "devlib", "lisa-ext"):
        try:
            versions[dist] = version(dist)
        except Exception:
            versions[dist] = None
    commands = {"trace-cmd": "trace-cmd --version 2>&1 | head -n 2",
                "fio": "fio --version", "rt-app": "rt-app --version 2>&1 | head -n 1"}
    for tool in tools:
        path = target.which(tool)
        entry = {"path": path}
        if path and tool in commands:
            entry["version"] = _read(target, commands[tool])
        versions[tool] = entry
    return versions
