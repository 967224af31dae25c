"""CPU power models for the energy analysis: the model file and a live target's Energy Model.

A model prices the two things the ``power:cpu_frequency`` and
``power:cpu_idle`` events (include/trace/events/power.h) say about a CPU: the
power of one busy CPU at each OPP, and of one CPU in each idle state. The file
format (JSON)::

    {"clusters": {"<name>": {"cpus": [0, 1],
                             "opp_mw": {"<freq_khz>": mW},
                             "idle_mw": {"<state>": mW}}}}

Frequencies are in kHz as ``cpu_frequency`` reports them, states are the
indices ``cpu_idle`` reports (``/sys/devices/system/cpu/cpuN/cpuidle/stateK``).

On a live target the busy powers come from the kernel's Energy Model
(kernel/power/energy_model.c debugfs: ``/sys/kernel/debug/energy_model/cpuN/
ps:<kHz>/power`` in uW, ``cpus`` the perf domain's span), which the
platform-emulation cpufreq module registers on the virtual board
(kernels/platform-emu/lisa_emu_cpufreq.c). The Energy Model has no idle
powers: on the virtual board the same module publishes them
(``/sys/kernel/debug/lisa_emu_energy/idle_mw``, one ``cpuN <state name> mW``
line per CPU and state); elsewhere they come from a model file.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from typing import Any

from lisa_ext.errors import SpecError, UserError
from lisa_ext.schema import read_text

__all__ = ["ClusterModel", "EnergyModel", "load_model", "model_from_dict", "model_from_target",
           "parse_target_dump", "target_dump_command"]

EM_DEBUGFS = "/sys/kernel/debug/energy_model"
EMU_IDLE_POWER = "/sys/kernel/debug/lisa_emu_energy/idle_mw"


@dataclass(frozen=True)
class ClusterModel:
    """One group of CPUs sharing a table: busy power per OPP, idle power per state (mW, per CPU)."""

    cpus: tuple[int, ...]
    opp_mw: dict[int, float]
    idle_mw: dict[int, float]


@dataclass(frozen=True)
class EnergyModel:
    """Clusters by name, and where the model came from (a file path or a target)."""

    clusters: dict[str, ClusterModel]
    source: str = "<model>"
    _cluster_of: dict[int, str] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, cluster in self.clusters.items():
            for cpu in cluster.cpus:
                if cpu in self._cluster_of:
                    raise SpecError(self.source, f"clusters.{name}.cpus",
                                    f"CPU{cpu} is already in cluster {self._cluster_of[cpu]!r}")
                self._cluster_of[cpu] = name

    def cluster_of(self, cpu: int) -> str:
        """Name of the cluster holding ``cpu``; an error naming the model when none does."""
        try:
            return self._cluster_of[cpu]
        except KeyError:
            raise UserError(f"{self.source}: CPU{cpu} is in no cluster of the energy model "
                            f"(clusters: {self.describe_cpus()})") from None

    def describe_cpus(self) -> str:
        return ", ".join(f"{n} {list(c.cpus)}" for n, c in self.clusters.items())

    def to_dict(self) -> dict[str, Any]:
        """The model in the file format (what the analysis' JSON carries)."""
        return {"clusters": {
            name: {"cpus": list(c.cpus),
                   "opp_mw": {str(k): c.opp_mw[k] for k in sorted(c.opp_mw)},
                   "idle_mw": {str(k): c.idle_mw[k] for k in sorted(c.idle_mw)}}
            for name, c in self.clusters.items()}}


def _number_table(source: str, key: str, node: Any) -> dict[int, float]:
    if not isinstance(node, dict):
        raise SpecError(source, key, "expected a mapping of integer keys to powers in mW")
    table = {}
    for k, v in node.items():
        try:
            ik = int(k)
        except (TypeError, ValueError):
            raise SpecError(source, f"{key}.{k}", "expected an integer key") from None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise SpecError(source, f"{key}.{k}", f"expected a power in mW (number >= 0), got {v!r}")
        table[ik] = float(v)
    return table


def model_from_dict(data: Any, source: str = "<model>") -> EnergyModel:
    """Check ``data`` against the file format; errors name ``source`` and the key."""
    if not isinstance(data, dict) or not isinstance(data.get("clusters"), dict) or not data["clusters"]:
        raise SpecError(source, "clusters", "expected a non-empty mapping of cluster names")
    clusters = {}
    for name, node in data["clusters"].items():
        key = f"clusters.{name}"
        if not isinstance(node, dict):
            raise SpecError(source, key, "expected a mapping with cpus, opp_mw, idle_mw")
        unknown = set(node) - {"cpus", "opp_mw", "idle_mw"}
        if unknown:
            raise SpecError(source, f"{key}.{sorted(unknown)[0]}", "unknown key; allowed: cpus, opp_mw, idle_mw")
        cpus = node.get("cpus")
        if (not isinstance(cpus, list) or not cpus
                or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cpus)):
            raise SpecError(source, f"{key}.cpus", "expected a non-empty list of CPU numbers")
        clusters[str(name)] = ClusterModel(tuple(cpus), _number_table(source, f"{key}.opp_mw", node.get("opp_mw")),
                                           _number_table(source, f"{key}.idle_mw", node.get("idle_mw", {})))
    return EnergyModel(clusters, source)


def load_model(path: str | os.PathLike) -> EnergyModel:
    """An :class:`EnergyModel` from a JSON model file."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise UserError(f"{path}: no such energy model file")
    text = read_text(path, "energy model")  # bounded, UTF-8
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(path, f"line {exc.lineno}", f"not JSON: {exc.msg}") from None
    except RecursionError:
        raise SpecError(path, "top level", "not an energy model: lists and objects nested thousands "
                        "deep") from None
    return model_from_dict(data, path)


def target_dump_command() -> str:
    """One shell command printing everything :func:`parse_target_dump` reads
    (one round trip to the target): ``path=value`` lines of the Energy Model's
    debugfs, the cpuidle state names, and the emulation's idle powers."""
    em = shlex.quote(EM_DEBUGFS)
    return (
        f"for f in {em}/cpu*/cpus {em}/cpu*/ps:*/frequency {em}/cpu*/ps:*/power "
        "/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*/name; do "
        '[ -r "$f" ] && printf "%s=%s\\n" "$f" "$(cat "$f")"; done; '
        f"[ -r {EMU_IDLE_POWER} ] && sed 's/^/idle_mw=/' {EMU_IDLE_POWER}; true"
    )


def _cpulist(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-")
            cpus.extend(range(int(lo), int(hi) + 1))
        elif part:
            cpus.append(int(part))
    return cpus


def parse_target_dump(text: str, source: str, idle: EnergyModel | None = None) -> EnergyModel:
    """The model printed by :func:`target_dump_command` on ``source``.

    Idle powers come from the emulation's ``idle_mw`` lines, matched to the
    state indices by name, or else from ``idle`` (a model file's ``idle_mw``
    for the cluster holding the same CPUs)."""
    domains: dict[str, dict[str, Any]] = {}
    state_names: dict[tuple[int, str], int] = {}
    emu_idle: dict[tuple[int, str], float] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "idle_mw":
            cpu, name, mw = value.split()
            emu_idle[(int(cpu.removeprefix("cpu")), name)] = float(mw)
            continue
        parts = key.split("/")
        if key.startswith(EM_DEBUGFS + "/"):
            dom = domains.setdefault(parts[5], {"opps": {}})
            if parts[6] == "cpus":
                dom["cpus"] = _cpulist(value)
            else:
                dom["opps"].setdefault(parts[6], {})[parts[7]] = int(value)
        elif key.endswith("/name") and "/cpuidle/" in key:
            cpu = int(parts[5].removeprefix("cpu"))
            state_names[(cpu, value.strip())] = int(parts[7].removeprefix("state"))
    if not domains:
        raise UserError(f"{source}: no Energy Model in {EM_DEBUGFS} (kernel without CONFIG_ENERGY_MODEL, "
                        "debugfs not mounted, or no driver registered a perf domain)")
    clusters = {}
    for name in sorted(domains, key=lambda d: int(d.removeprefix("cpu")) if d[3:].isdigit() else 0):
        dom = domains[name]
        cpus = tuple(dom.get("cpus") or [int(name.removeprefix("cpu"))])
        opp_mw = {ps["frequency"]: ps["power"] / 1000.0 for ps in dom["opps"].values()
                  if "frequency" in ps and "power" in ps}
        idle_mw = {state_names[(cpu, st)]: mw for (cpu, st), mw in emu_idle.items()
                   if cpu == cpus[0] and (cpu, st) in state_names}
        if not idle_mw and idle is not None:
            twin = next((c for c in idle.clusters.values() if cpus[0] in c.cpus), None)
            idle_mw = dict(twin.idle_mw) if twin else {}
        clusters[f"pd{cpus[0]}"] = ClusterModel(cpus, opp_mw, idle_mw)
    return EnergyModel(clusters, source)


def model_from_target(target: Any, idle: EnergyModel | None = None, name: str | None = None) -> EnergyModel:
    """Read the Energy Model of a connected LISA/devlib ``target`` (root needed for debugfs)."""
    source = name or f"target {getattr(target, 'name', None) or getattr(target, 'conn', None) or 'target'}"
    text = target.execute(target_dump_command(), as_root=True, check_exit_code=False)
    return parse_target_dump(text, source, idle)

