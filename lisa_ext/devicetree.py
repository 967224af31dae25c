"""The arm64 board's device tree: a real SoC's CPUs grafted onto QEMU's ``virt`` machine.

QEMU's ``virt`` machine describes its CPUs with nothing the scheduler or the power-management
drivers could use: no capacities, no idle states, no OPPs, no power coefficients. Energy-aware
scheduling starts only when the kernel sees asymmetric CPU capacities, an Energy Model per
performance domain, schedutil and frequency invariance. This module takes what a real SoC
publishes from that SoC's own device tree in the kernel source
(``arch/arm64/boot/dts/<vendor>/<soc>.dtsi``, preprocessed with ``cpp`` and compiled with ``dtc``
as the kernel's own ``make dtbs`` does) and puts it on the tree QEMU generates for the machine
(``-machine virt,dumpdtb=FILE``), which the board then boots with ``-dtb``:

* ``cpu-map`` clusters and ``capacity-dmips-mhz`` (``drivers/base/arch_topology.c`` turns them
  into CPU capacities, scaled by each cluster's top OPP once cpufreq registers);
* the idle states of each cluster (``arm,idle-state`` nodes, turned into cpuidle states by
  ``drivers/cpuidle/dt_idle_states.c`` as cpuidle-psci does; on the board lisa_emu_cpuidle
  registers them, docs/vboard.md says why), whose latencies and residencies are the SoC's;
* the OPP table of each cluster (``operating-points-v2``: frequencies, voltages, clock latency)
  and ``dynamic-power-coefficient``, from which the platform-emulation cpufreq module builds its
  OPPs and the Energy Model, with the formula ``dev_pm_opp_calc_power()`` applies on the SoC;
* one L2 cache node per cluster, so each cluster is a last-level-cache domain (scheduler ``MC``).

What is changed, and why: CPU ``reg`` values are the vCPUs' MPIDRs (0, 1, ...); the
``arm,psci-suspend-param`` of each idle state keeps its state ID but drops the power-down bit and
the power level, because QEMU's PSCI rejects any level above the core and never powers a CPU down
(it enters WFI and returns, which Linux would take for a failed power-down); ``local-timer-stop``
is dropped because QEMU's arch timer keeps running in WFI (its node says ``always-on``). Idle
powers are not in any upstream device tree; the energy meter's come from :data:`SOC_IDLE_POWER_UW`
as ``lisa-ext,idle-power-uw`` (one value per idle-state index, WFI first) in each CPU node.

The flattened device tree format (``Documentation/devicetree/booting-without-of.rst``, the
devicetree specification's chapter 5) is read and written here directly: a few dozen lines, no
dependency, and the tree is edited as data rather than as dts text.

It sits beneath both of its users: an arm64 kernel build compiles the SoCs' trees from its own
source (:func:`compile_soc_dtb`, into the cached artefacts, whatever target they are for) and the
board grafts them; neither imports the other for it.
"""

from __future__ import annotations

import os
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from lisa_ext.errors import UserError

__all__ = [
    "Cluster",
    "FdtNode",
    "IdleState",
    "Opp",
    "SOCS",
    "SOC_IDLE_POWER_UW",
    "Soc",
    "board_tree",
    "compile_soc_dtb",
    "parse_fdt",
    "read_soc",
    "serialize_fdt",
]

#: SoCs the board knows by name: the device-tree source of each, under ``arch/arm64/boot/dts``.
SOCS = {
    "rk3399": "rockchip/rk3399.dtsi",
    "hi3660": "hisilicon/hi3660.dtsi",
}

#: Idle power of one CPU per state index (WFI first, then the cluster's idle states in order), uW,
#: per SoC and cluster. RK3399: the core idle-cost-data of Rockchip's rk3399-sched-energy.dtsi
#: (ChromiumOS chromeos-4.4, arch/arm64/boot/dts/rockchip/; RK3399_CPU_COST_0 <4 4 0 0>,
#: RK3399_CPU_COST_1 <24 24 0 0> for active idle, WFI, cpu-sleep, cluster-sleep), the figures the
#: x86 board's lisa_emu_cpufreq tables also use. Hi3660: no public idle cost was found; ASSUMED the
#: RK3399 Cortex-A53 figures for its A53 cluster and the Cortex-A72 ones for its A73 cluster.
SOC_IDLE_POWER_UW = {
    "rk3399": ((4000, 0, 0), (24000, 0, 0)),
    "hi3660": ((4000, 0, 0), (24000, 0, 0)),
}

_FDT_MAGIC = 0xD00DFEED
_BEGIN_NODE, _END_NODE, _PROP, _NOP, _END = 1, 2, 3, 4, 9
#: psci-suspend-param bits QEMU's PSCI accepts (power_state with bits 17-31 clear): the state ID
_PSCI_STATE_ID_MASK = 0xFFFF


# -- the flattened device tree ---------------------------------------------------------------

@dataclass
class FdtNode:
    """One node: its name (``cpu@0``), properties (raw big-endian bytes) in order, children."""

    name: str
    props: dict[str, bytes] = field(default_factory=dict)
    children: list["FdtNode"] = field(default_factory=list)

    def child(self, name: str) -> "FdtNode | None":
        return next((c for c in self.children if c.name == name), None)

    def find(self, path: str) -> "FdtNode | None":
        node: FdtNode | None = self
        for part in filter(None, path.split("/")):
            node = node.child(part) if node else None
        return node

    def walk(self) -> Iterator["FdtNode"]:
        yield self
        for c in self.children:
            yield from c.walk()

    def u32s(self, prop: str) -> tuple[int, ...]:
        data = self.props.get(prop, b"")
        return struct.unpack(f">{len(data) // 4}I", data[: len(data) // 4 * 4])

    def u32(self, prop: str, default: int | None = None) -> int | None:
        values = self.u32s(prop)
        return values[0] if values else default

    def string(self, prop: str) -> str | None:
        data = self.props.get(prop)
        return data.split(b"\0", 1)[0].decode() if data is not None else None


def _cells(*values: int) -> bytes:
    return struct.pack(f">{len(values)}I", *values)


def _string(text: str) -> bytes:
    return text.encode() + b"\0"


def _pad4(n: int) -> int:
    return (n + 3) & ~3


def parse_fdt(blob: bytes, source: str = "<dtb>") -> tuple[FdtNode, list[tuple[int, int]]]:
    """The root node and memory reservations of a flattened device tree."""
    if len(blob) < 40 or struct.unpack_from(">I", blob)[0] != _FDT_MAGIC:
        raise UserError(f"{source}: not a flattened device tree (bad magic)")
    (_, total, off_struct, off_strings, off_rsv, _version, _, _, size_strings,
     size_struct) = struct.unpack_from(">10I", blob)
    if total > len(blob) or off_struct + size_struct > total or off_strings + size_strings > total:
        raise UserError(f"{source}: truncated device tree ({len(blob)} of {total} bytes)")
    reserved = []
    at = off_rsv
    while True:
        address, size = struct.unpack_from(">QQ", blob, at)
        at += 16
        if address == size == 0:
            break
        reserved.append((address, size))
    strings = blob[off_strings:off_strings + size_strings]
    stack: list[FdtNode] = []
    root: FdtNode | None = None
    at, end = off_struct, off_struct + size_struct
    while at < end:
        token = struct.unpack_from(">I", blob, at)[0]
        at += 4
        if token == _BEGIN_NODE:
            name_end = blob.index(b"\0", at)
            node = FdtNode(blob[at:name_end].decode())
            at = _pad4(name_end + 1)
            if stack:
                stack[-1].children.append(node)
            else:
                root = node
            stack.append(node)
        elif token == _END_NODE:
            stack.pop()
        elif token == _PROP:
            length, name_off = struct.unpack_from(">II", blob, at)
            at += 8
            name = strings[name_off:strings.index(b"\0", name_off)].decode()
            stack[-1].props[name] = blob[at:at + length]
            at = _pad4(at + length)
        elif token == _END:
            break
        elif token != _NOP:
            raise UserError(f"{source}: bad device-tree token {token:#x} at offset {at - 4}")
    if root is None:
        raise UserError(f"{source}: empty device tree")
    return root, reserved


def serialize_fdt(root: FdtNode, reserved: Sequence[tuple[int, int]] = (), boot_cpu: int = 0) -> bytes:
    """``root`` as a version-17 flattened device tree."""
    strings = bytearray()
    offsets: dict[str, int] = {}
    body = bytearray()

    def emit(node: FdtNode) -> None:
        name = node.name.encode() + b"\0"
        body.extend(struct.pack(">I", _BEGIN_NODE) + name + b"\0" * (_pad4(len(name)) - len(name)))
        for prop, value in node.props.items():
            if prop not in offsets:
                offsets[prop] = len(strings)
                strings.extend(prop.encode() + b"\0")
            body.extend(struct.pack(">III", _PROP, len(value), offsets[prop]))
            body.extend(value + b"\0" * (_pad4(len(value)) - len(value)))
        for c in node.children:
            emit(c)
        body.extend(struct.pack(">I", _END_NODE))

    emit(root)
    body.extend(struct.pack(">I", _END))
    rsv = b"".join(struct.pack(">QQ", a, s) for a, s in reserved) + struct.pack(">QQ", 0, 0)
    off_rsv = 40
    off_struct = off_rsv + len(rsv)
    off_strings = off_struct + len(body)
    total = off_strings + len(strings)
    header = struct.pack(">10I", _FDT_MAGIC, total, off_struct, off_strings, off_rsv, 17, 16,
                         boot_cpu, len(strings), len(body))
    return header + rsv + bytes(body) + bytes(strings)


# -- the SoC, from its device-tree source ------------------------------------------------------

@dataclass(frozen=True)
class IdleState:
    """An ``arm,idle-state`` node: the SoC's latencies (us) and PSCI parameter."""

    name: str
    psci_suspend_param: int
    entry_latency_us: int
    exit_latency_us: int
    min_residency_us: int


@dataclass(frozen=True)
class Opp:
    hz: int
    microvolt: int


@dataclass(frozen=True)
class Cluster:
    """One cluster of the SoC as its device tree describes its first CPU."""

    compatible: str
    cpus: int
    capacity_dmips_mhz: int
    dynamic_power_coefficient: int
    idle_states: tuple[IdleState, ...]
    opps: tuple[Opp, ...]
    clock_latency_ns: int


@dataclass(frozen=True)
class Soc:
    name: str
    source: str
    clusters: tuple[Cluster, ...]

    def shape(self) -> tuple[int, ...]:
        return tuple(c.cpus for c in self.clusters)


def compile_soc_dtb(kernel_src: Path, dtsi: str, dest: Path) -> Path:
    """Preprocess and compile ``arch/arm64/boot/dts/<dtsi>`` of ``kernel_src`` into ``dest``.

    A SoC's .dtsi leaves board-level references (pin controllers of a carrier board) undefined;
    ``dtc -f`` writes the tree anyway, and only the CPU, idle-state and OPP nodes are read.
    """
    dts_root = kernel_src / "arch" / "arm64" / "boot" / "dts"
    source = dts_root / dtsi
    if not source.is_file():
        raise UserError(f"{source}: no such device-tree source in the kernel tree")
    with tempfile.TemporaryDirectory(prefix="lisa-ext-dt-") as tmp:
        top, pre = Path(tmp) / "soc.dts", Path(tmp) / "soc.dts.pp"
        top.write_text(f'/dts-v1/;\n#include "{dtsi}"\n')
        includes = [dts_root, kernel_src / "scripts" / "dtc" / "include-prefixes", kernel_src / "include"]
        cpp = ["cpp", "-nostdinc", "-undef", "-D__DTS__", "-x", "assembler-with-cpp",
               *(f"-I{d}" for d in includes), str(top), "-o", str(pre)]
        for cmd, what in ((cpp, "cpp"), (["dtc", "-f", "-q", "-I", "dts", "-O", "dtb", "-o", str(dest), str(pre)], "dtc")):
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            except FileNotFoundError:
                raise UserError(f"{what} not found (run: bash scripts/install-system-packages.sh)") from None
            if proc.returncode != 0 and not dest.is_file():
                raise UserError(f"{source}: {what} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return dest


def _by_phandle(root: FdtNode) -> dict[int, FdtNode]:
    return {n.u32("phandle"): n for n in root.walk() if "phandle" in n.props}


def _cluster_cpus(cpus: FdtNode, source: str) -> list[list[FdtNode]]:
    phandles = _by_phandle(cpus)
    cpu_map = cpus.child("cpu-map")
    if cpu_map is None:
        raise UserError(f"{source}: /cpus has no cpu-map (no clusters to build the board from)")
    clusters = []
    for node in cpu_map.walk():
        if node.name.startswith("cluster") and not any(c.name.startswith("cluster") for c in node.children):
            members = [phandles[core.u32("cpu")] for core in node.children if core.u32("cpu") in phandles]
            if members:
                clusters.append(members)
    if not clusters:
        raise UserError(f"{source}: /cpus/cpu-map names no CPUs")
    return clusters


def _opps(table: FdtNode) -> tuple[tuple[Opp, ...], int]:
    opps, latency = [], 0
    for node in table.children:
        if "opp-hz" not in node.props or "turbo-mode" in node.props:
            continue
        hz = struct.unpack(">Q", node.props["opp-hz"][:8])[0]
        opps.append(Opp(hz, node.u32("opp-microvolt", 0)))
        latency = max(latency, node.u32("clock-latency-ns", 0))
    return tuple(sorted(opps, key=lambda o: o.hz)), latency


def read_soc(dtb: bytes, name: str, source: str) -> Soc:
    """The clusters of a compiled SoC device tree (the first CPU of each speaks for it)."""
    root, _ = parse_fdt(dtb, source)
    phandles = _by_phandle(root)
    cpus = root.child("cpus")
    if cpus is None:
        raise UserError(f"{source}: no /cpus node")
    clusters = []
    for members in _cluster_cpus(cpus, source):
        cpu = members[0]
        table = phandles.get(cpu.u32("operating-points-v2", -1))
        if table is None:
            raise UserError(f"{source}: {cpu.name} has no operating-points-v2 table")
        opps, latency = _opps(table)
        states = []
        for ph in cpu.u32s("cpu-idle-states"):
            st = phandles[ph]
            states.append(IdleState(st.name, st.u32("arm,psci-suspend-param", 0), st.u32("entry-latency-us", 0),
                                    st.u32("exit-latency-us", 0), st.u32("min-residency-us", 0)))
        missing = [p for p in ("capacity-dmips-mhz", "dynamic-power-coefficient") if p not in cpu.props]
        if missing or not opps:
            raise UserError(f"{source}: {cpu.name} lacks {', '.join(missing) or 'OPPs'}: cannot build "
                            "capacities and an Energy Model from it")
        clusters.append(Cluster(cpu.string("compatible") or "arm,armv8", len(members), cpu.u32("capacity-dmips-mhz"),
                                cpu.u32("dynamic-power-coefficient"), tuple(states), opps, latency))
    return Soc(name, source, tuple(clusters))


# -- the board's tree ------------------------------------------------------------------------

class _Phandles:
    def __init__(self, root: FdtNode):
        self.next = max((n.u32("phandle") for n in root.walk() if "phandle" in n.props), default=0) + 1

    def take(self, node: FdtNode) -> int:
        value, self.next = self.next, self.next + 1
        node.props["phandle"] = _cells(value)
        return value


def _idle_state_node(state: IdleState) -> FdtNode:
    return FdtNode(state.name, {
        "compatible": _string("arm,idle-state"),
        "arm,psci-suspend-param": _cells(state.psci_suspend_param & _PSCI_STATE_ID_MASK),
        "entry-latency-us": _cells(state.entry_latency_us),
        "exit-latency-us": _cells(state.exit_latency_us),
        "min-residency-us": _cells(state.min_residency_us),
    })


def _opp_table_node(index: int, cluster: Cluster) -> FdtNode:
    table = FdtNode(f"opp-table-cluster{index}", {"compatible": _string("operating-points-v2"), "opp-shared": b""})
    for i, opp in enumerate(cluster.opps):
        table.children.append(FdtNode(f"opp-{opp.hz}", {
            "opp-hz": struct.pack(">Q", opp.hz),
            "opp-microvolt": _cells(opp.microvolt),
            "clock-latency-ns": _cells(cluster.clock_latency_ns),
        }))
    return table


def board_tree(qemu_dtb: bytes, soc: Soc, cpus_per_cluster: Sequence[int],
               idle_power_uw: Sequence[Sequence[int]] | None = None) -> bytes:
    """QEMU's tree for the machine with its ``/cpus`` replaced by ``soc``'s clusters,
    ``cpus_per_cluster[k]`` CPUs in cluster ``k`` (numbered from 0, cluster by cluster)."""
    if len(cpus_per_cluster) != len(soc.clusters) or min(cpus_per_cluster, default=0) < 1:
        raise UserError(f"{soc.name} has {len(soc.clusters)} clusters ({'+'.join(map(str, soc.shape()))} CPUs): "
                        f"expected as many CPU counts, each at least 1, got {list(cpus_per_cluster)}")
    root, reserved = parse_fdt(qemu_dtb, "QEMU's device tree")
    old = root.child("cpus")
    if old is None:
        raise UserError("QEMU's device tree has no /cpus node")
    phandles = _Phandles(root)
    cpus = FdtNode("cpus", {"#address-cells": _cells(1), "#size-cells": _cells(0)})
    idle = FdtNode("idle-states", {"entry-method": _string("psci")})
    cluster_map = FdtNode("socket0")
    cpu_nodes, caches = [], []
    state_phandles: dict[IdleState, int] = {}
    cpu = 0
    for k, (cluster, count) in enumerate(zip(soc.clusters, cpus_per_cluster)):
        for state in cluster.idle_states:
            if state not in state_phandles:
                node = _idle_state_node(state)
                if idle.child(node.name) is not None:  # same name, other numbers: keep both
                    node.name = f"{node.name}-cluster{k}"
                state_phandles[state] = phandles.take(node)
                idle.children.append(node)
        table = _opp_table_node(k, cluster)
        table_ph = phandles.take(table)
        root.children.append(table)
        cache = FdtNode(f"l2-cache-cluster{k}", {"compatible": _string("cache"), "cache-level": _cells(2),
                                                  "cache-unified": b""})
        cache_ph = phandles.take(cache)
        caches.append(cache)
        powers = tuple(idle_power_uw[k]) if idle_power_uw else ()
        cores = FdtNode(f"cluster{k}")
        for j in range(count):
            node = FdtNode(f"cpu@{cpu}", {
                "device_type": _string("cpu"),
                "compatible": _string(cluster.compatible),
                "reg": _cells(cpu),
                "enable-method": _string("psci"),
                "capacity-dmips-mhz": _cells(cluster.capacity_dmips_mhz),
                "dynamic-power-coefficient": _cells(cluster.dynamic_power_coefficient),
                "operating-points-v2": _cells(table_ph),
                "next-level-cache": _cells(cache_ph),
            })
            if cluster.idle_states:
                node.props["cpu-idle-states"] = _cells(*(state_phandles[s] for s in cluster.idle_states))
            if powers:
                node.props["lisa-ext,idle-power-uw"] = _cells(*powers[:len(cluster.idle_states) + 1])
            cores.children.append(FdtNode(f"core{j}", {"cpu": _cells(phandles.take(node))}))
            cpu_nodes.append(node)
            cpu += 1
        cluster_map.children.append(cores)
    cpus.children = [FdtNode("cpu-map", children=[cluster_map]), *cpu_nodes, idle, *caches]
    root.children[root.children.index(old)] = cpus
    return serialize_fdt(root, reserved)


def write_board_dtb(qemu_dtb: Path, soc: Soc, cpus_per_cluster: Sequence[int], dest: Path,
                    idle_power_uw: Sequence[Sequence[int]] | None = None) -> Path:
    """:func:`board_tree` from and to files (written atomically)."""
    blob = board_tree(qemu_dtb.read_bytes(), soc, cpus_per_cluster, idle_power_uw)
    tmp = dest.with_name(dest.name + ".part")
    tmp.write_bytes(blob)
    os.replace(tmp, dest)
    return dest
