"""Facts read on a target for provenance and checks: its kernel, caches, tracefs, tool versions.

Each function takes anything with devlib's ``execute`` (a
:class:`~lisa_ext.target.protocol.Target`, or a LISA target), except where it
says it needs LISA's own (platform info, the binaries LISA installed).
"""

from __future__ import annotations

import platform
import re
from importlib.metadata import version
from typing import Any

from lisa_ext.compat import import_lisa
from lisa_ext.running_kernel import PROBE_COMMAND, parse_probe
from lisa_ext.target.timing import EMULATION_PARAMS_COMMAND, parse_emulation_params

__all__ = ["idle_state_names", "kernel_provenance", "lisa_platform_info", "llc_domains", "parse_platform_facts",
           "platform_provenance", "tool_versions", "tracefs_root"]


def tracefs_root(target) -> str | None:
    """The tracefs mount point on ``target`` (with instances support), or None."""
    for root in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if _read(target, f"[ -d {root}/instances ] && echo yes") == "yes":
            return root
    return None


def _read(target, command: str) -> str | None:
    out = target.execute(f"{command} 2>/dev/null || true", as_root=True, check_exit_code=False)
    out = out.strip()
    return out or None


#: what ends each part of :func:`kernel_provenance`'s command in its output
_PART_END = "--lisa-ext-provenance-part--"
#: what the config's part prints when the target still runs the boot of the previous provenance
_SAME_BOOT = "same-boot"
#: /proc/sys/kernel/random/boot_id: a UUID (drivers/char/random.c), so it can go into a command as is
_BOOT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: a hash of the running kernel's config, when readable (no line when neither file is)
_CONFIG_HASH = ('{ zcat /proc/config.gz || cat "/boot/config-$(uname -r)"; } 2>/dev/null'
                " | sha256sum | cut -d' ' -f1 | grep -v '^e3b0c442'")


def kernel_provenance(target, previous: dict | None = None) -> dict:
    """Kernel release, version, command line and boot id (:mod:`lisa_ext.running_kernel`'s
    probe), machine, a hash of its config when readable, and the parameters of the
    board's emulation modules (``emulation``: ``{module: {parameter: value}}``, empty
    on other targets; :mod:`lisa_ext.target.timing`).

    One target command: it runs before every run, and on the board each command is an SSH
    round trip paid in the guest's time. ``previous``, what this returned for an earlier run on
    the same target: while the boot id is the same, the config's hash is taken from it instead of
    decompressing and hashing the config again (a kernel's config cannot change without a boot)."""
    known = (previous or {}).get("boot_id")
    config = _CONFIG_HASH
    if isinstance(known, str) and _BOOT_ID.fullmatch(known):
        config = (f'if [ "$(cat /proc/sys/kernel/random/boot_id)" = {known} ]; then echo {_SAME_BOOT}; '
                  f"else {_CONFIG_HASH}; fi")
    parts = (PROBE_COMMAND, config, "uname -m", EMULATION_PARAMS_COMMAND)
    out = target.execute("; ".join(f"{{ {part}; }} 2>/dev/null; echo {_PART_END}" for part in parts),
                         as_root=True, check_exit_code=False)
    texts = out.replace("\r\n", "\n").split(_PART_END + "\n")
    probe, config_hash, machine, emulation = (texts + [""] * len(parts))[:len(parts)]
    running = parse_probe(probe)
    config_hash = config_hash.strip()
    if config_hash == _SAME_BOOT:
        config_hash = (previous or {}).get("config_sha256")
    return {
        "release": running.release,
        "version": running.version,
        "boot_id": running.boot_id,
        "machine": machine.strip() or None,
        "cmdline": running.cmdline,
        "config_sha256": config_hash or None,
        "emulation": parse_emulation_params(emulation),
    }


def platform_provenance(target) -> dict:
    """The parts of LISA's platform info that are cheap and safe to compute (``target``: a LISA target).

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
    info["idle-states"] = idle_state_names(target)
    return info


#: "<index> <name>" of each cpuidle state of CPU 0 (drivers/cpuidle/sysfs.c)
_IDLE_STATES = ("for d in /sys/devices/system/cpu/cpu0/cpuidle/state[0-9]*; do "
                "echo \"${d##*/state} $(cat $d/name)\"; done")


def idle_state_names(target) -> list[str]:
    """The names of CPU 0's idle states by index (``["WFI", "cpu-sleep", "cluster-sleep"]`` on
    the board's RK3399 table), so a page names states as the kernel does; empty without cpuidle."""
    states = {}
    for line in (_read(target, _IDLE_STATES) or "").splitlines():
        index, _, name = line.strip().partition(" ")
        if index.isdigit() and name:
            states[int(index)] = name
    return [states[i] for i in sorted(states)]


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


#: per CPU cache: "<cpu dir> <level> <type> <shared_cpu_list>" (drivers/base/cacheinfo.c sysfs)
_CACHES = ("for d in /sys/devices/system/cpu/cpu[0-9]*/cache/index[0-9]*; do "
           "echo \"${d%%/cache/*} $(cat $d/level) $(cat $d/type) $(cat $d/shared_cpu_list)\"; done")


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
    """Versions of the target binaries used (``target``: a LISA target, which finds the ones it
    installed), plus the host-side Python stack."""
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
