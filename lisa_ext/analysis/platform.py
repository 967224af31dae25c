"""What the analyses need to know about the platform a trace came from.

Idle-state tables (``struct cpuidle_state`` in include/linux/cpuidle.h: name,
exit latency, target residency, and the per-CPU ``disable`` knob of
drivers/cpuidle/sysfs.c), clusters, last-level-cache domains and CPU capacities
(``cpu_capacity``, drivers/base/arch_topology.c). They come
from, in order of preference, a YAML file given by the user, LISA's
``PlatformInfo`` of the trace, or the sysfs of the machine the trace was
recorded on (only meaningful when that is this machine).

YAML layout (every key optional)::

    idle-states:            # one table for every CPU ...
      - {name: WFI, exit-latency-us: 1, target-residency-us: 1}
      - {name: cpu-sleep-0, exit-latency-us: 1500, target-residency-us: 2000, disabled: false}
    idle-states-per-cpu:    # ... or one per CPU, overriding the above
      "4": [...]
    clusters: [[0, 3, 4, 5], [1, 2]]
    llc: [[0, 1, 2, 3, 4, 5]]
    capacities: {0: 381, 1: 381, 2: 1024, 3: 1024}
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from lisa_ext.errors import SpecError
from lisa_ext.schema import load_yaml

__all__ = [
    "IdleState",
    "Platform",
    "load_platform_yaml",
    "platform_from_sysfs",
    "platform_from_plat_info",
    "parse_cpu_list",
    "merge",
]


@dataclass(frozen=True)
class IdleState:
    """One entry of a cpuidle driver's state table, times in nanoseconds."""

    name: str
    exit_latency_ns: int
    target_residency_ns: int
    disabled: bool = False


@dataclass
class Platform:
    """Idle states, clusters and LLC domains; any of them may be unknown (empty)."""

    idle_states: dict[int, tuple[IdleState, ...]] = field(default_factory=dict)
    default_idle_states: tuple[IdleState, ...] = ()
    clusters: tuple[tuple[int, ...], ...] = ()
    llc: tuple[tuple[int, ...], ...] = ()
    source: str = "unknown"
    #: CPU -> original capacity (1024 for the biggest CPU)
    capacities: dict[int, int] = field(default_factory=dict)

    def idle_states_of(self, cpu: int) -> tuple[IdleState, ...]:
        return self.idle_states.get(cpu, self.default_idle_states)

    @property
    def has_idle_states(self) -> bool:
        return bool(self.default_idle_states or self.idle_states)

    def cluster_of(self) -> dict[int, int]:
        """CPU -> index of its cluster in :attr:`clusters`."""
        return {cpu: i for i, cpus in enumerate(self.clusters) for cpu in cpus}

    def llc_of(self) -> dict[int, int]:
        """CPU -> index of its LLC domain in :attr:`llc`."""
        return {cpu: i for i, cpus in enumerate(self.llc) for cpu in cpus}


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Parse the kernel's CPU list format (``"0-3,8"``, as in ``shared_cpu_list``)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(cpus)


#: an idle state's exit latency or target residency, in us: cpuidle drivers declare up to tens of ms
_MAX_US = 10_000_000
#: CPU numbers a platform description may name
_MAX_CPU = 4095


def _time_ns(entry: Mapping, key: str) -> int:
    us = float(entry[key])  # KeyError, TypeError, ValueError: the caller's messages
    if not 0 <= us <= _MAX_US:  # also false for nan
        raise ValueError(key)
    return round(us * 1000)


def _idle_table(path: Path, key: str, entries: Any) -> tuple[IdleState, ...]:
    if not isinstance(entries, list) or not entries:
        raise SpecError(path, key, "expected a non-empty list of idle states")
    table = []
    for i, entry in enumerate(entries):
        where = f"{key}[{i}]"
        if not isinstance(entry, Mapping):
            raise SpecError(path, where, "expected a mapping with name, exit-latency-us, target-residency-us")
        try:
            table.append(
                IdleState(
                    name=str(entry.get("name", f"state{i}")),
                    exit_latency_ns=_time_ns(entry, "exit-latency-us"),
                    target_residency_ns=_time_ns(entry, "target-residency-us"),
                    disabled=bool(entry.get("disabled", False)),
                )
            )
        except KeyError as exc:
            raise SpecError(path, f"{where}.{exc.args[0]}", "missing (a number of microseconds)") from None
        except (TypeError, ValueError):
            raise SpecError(path, where, "exit-latency-us and target-residency-us must be numbers from 0 "
                            f"to {_MAX_US} (us)") from None
    return tuple(table)


def _cpu_groups(path: Path, key: str, value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list) or not all(
        isinstance(g, list) and all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= _MAX_CPU
                                    for c in g) for g in value
    ):
        raise SpecError(path, key, f"expected a list of CPU lists (CPUs 0 to {_MAX_CPU}), e.g. [[0, 1], [2, 3]]")
    return tuple(tuple(g) for g in value)


def load_platform_yaml(path: str | os.PathLike) -> Platform:
    """Read a platform description (layout in the module docstring)."""
    path = Path(path)
    data = load_yaml(path, "platform description") or {}
    if not isinstance(data, Mapping):
        raise SpecError(path, "<top>", "expected a mapping")
    known = {"idle-states", "idle-states-per-cpu", "clusters", "llc", "capacities", "source"}
    for key in data:
        if key not in known:
            raise SpecError(path, str(key), f"unknown key, expected one of {sorted(known)}")
    platform = Platform(source=str(data.get("source", path)))
    if "idle-states" in data:
        platform.default_idle_states = _idle_table(path, "idle-states", data["idle-states"])
    per_cpu = data.get("idle-states-per-cpu") or {}
    if not isinstance(per_cpu, Mapping):
        raise SpecError(path, "idle-states-per-cpu", "expected a mapping CPU -> list of idle states")
    for cpu, table in per_cpu.items():
        try:
            cpu_nr = int(cpu)
            if not 0 <= cpu_nr <= _MAX_CPU:
                raise ValueError(cpu)
        except (TypeError, ValueError):
            raise SpecError(path, f"idle-states-per-cpu.{cpu}", f"expected a CPU number from 0 to {_MAX_CPU}") from None
        platform.idle_states[cpu_nr] = _idle_table(path, f"idle-states-per-cpu.{cpu}", table)
    if "clusters" in data:
        platform.clusters = _cpu_groups(path, "clusters", data["clusters"])
    if "llc" in data:
        platform.llc = _cpu_groups(path, "llc", data["llc"])
    if "capacities" in data:
        caps = data["capacities"]
        if not isinstance(caps, Mapping) or not all(
                isinstance(c, int) and isinstance(v, int) and c >= 0 and v > 0 for c, v in caps.items()):
            raise SpecError(path, "capacities", "expected a mapping CPU -> capacity, e.g. {0: 381, 2: 1024}")
        platform.capacities = dict(caps)
    return platform


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def platform_from_sysfs(root: str | os.PathLike = "/sys") -> Platform:
    """Idle states (``cpuidle/stateN``), clusters (``topology/cluster_cpus_list``)
    and LLC domains (the highest ``cache/indexN`` level) of the running machine."""
    cpu_root = Path(root) / "devices/system/cpu"
    platform = Platform(source=f"sysfs:{root}")
    clusters: set[tuple[int, ...]] = set()
    llcs: set[tuple[int, ...]] = set()
    for cpu_dir in sorted(cpu_root.glob("cpu[0-9]*"), key=lambda p: int(p.name[3:])):
        cpu = int(cpu_dir.name[3:])
        capacity = _read(cpu_dir / "cpu_capacity")
        if capacity and capacity.isdigit():
            platform.capacities[cpu] = int(capacity)
        states = []
        for state_dir in sorted(cpu_dir.glob("cpuidle/state[0-9]*"), key=lambda p: int(p.name[5:])):
            latency, residency = _read(state_dir / "latency"), _read(state_dir / "residency")
            if latency is None or residency is None:
                continue
            states.append(
                IdleState(
                    name=_read(state_dir / "name") or state_dir.name,
                    exit_latency_ns=int(latency) * 1000,
                    target_residency_ns=int(residency) * 1000,
                    disabled=_read(state_dir / "disable") == "1",
                )
            )
        if states:
            platform.idle_states[cpu] = tuple(states)
        cluster = _read(cpu_dir / "topology/cluster_cpus_list")
        if cluster:
            clusters.add(parse_cpu_list(cluster))
        levels = []
        for index in cpu_dir.glob("cache/index[0-9]*"):
            level, shared = _read(index / "level"), _read(index / "shared_cpu_list")
            if level and shared and _read(index / "type") in ("Unified", "Data"):
                levels.append((int(level), parse_cpu_list(shared)))
        if levels:
            llcs.add(max(levels)[1])
    platform.clusters = tuple(sorted(clusters))
    platform.llc = tuple(sorted(llcs))
    return platform


def platform_from_plat_info(plat_info: Any) -> Platform:
    """Clusters and capacities from LISA's ``PlatformInfo`` (its ``freq-domains``, which
    are the clusters on the Arm big.LITTLE boards LISA targets, and ``cpu-capacities``/
    ``orig``). LISA records no idle states or caches, so those stay unknown."""
    platform = Platform(source="lisa-plat-info")
    if plat_info is None:
        return platform
    try:
        domains = plat_info["freq-domains"]
    except Exception:  # PlatformInfo raises its own KeyError flavours
        domains = None
    if domains:
        platform.clusters = tuple(tuple(int(c) for c in d) for d in domains)
    try:
        capacities = plat_info["cpu-capacities"]["orig"]
    except Exception:
        capacities = None
    if capacities:
        platform.capacities = {int(c): int(v) for c, v in capacities.items()}
    return platform


def merge(preferred: Platform, fallback: Platform) -> Platform:
    """Fill what ``preferred`` leaves unknown from ``fallback``."""
    return Platform(
        idle_states=preferred.idle_states or fallback.idle_states,
        default_idle_states=preferred.default_idle_states or fallback.default_idle_states,
        clusters=preferred.clusters or fallback.clusters,
        llc=preferred.llc or fallback.llc,
        source=preferred.source if preferred.source != "unknown" else fallback.source,
        capacities=preferred.capacities or fallback.capacities,
    )

