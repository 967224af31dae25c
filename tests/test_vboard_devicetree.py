"""The arm64 board's device tree: FDT read/write, a SoC's clusters read from its dts, grafted on QEMU's.

No boot: QEMU only dumps the tree it generates for the machine (-machine dumpdtb, ~0.1 s); dtc
compiles a small SoC description written here, shaped like the kernel's rk3399/hi3660 .dtsi
(cpu-map, idle states shared or per cluster, one OPP table per cluster). The real SoCs'
numbers are checked on a booted board (tests/test_vboard_arm64.py).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from lisa_ext import devicetree as dt
from lisa_ext.errors import UserError
from lisa_ext.vboard import qemu

SOC_DTS = """/dts-v1/;
/ {
    #address-cells = <2>; #size-cells = <2>;
    cpus {
        #address-cells = <2>; #size-cells = <0>;
        cpu-map {
            cluster0 { core0 { cpu = <&l0>; }; core1 { cpu = <&l1>; }; core2 { cpu = <&l2>; }; };
            cluster1 { core0 { cpu = <&b0>; }; };
        };
        l0: cpu@0 { device_type = "cpu"; compatible = "arm,cortex-a53"; reg = <0 0>;
            capacity-dmips-mhz = <485>; dynamic-power-coefficient = <100>;
            cpu-idle-states = <&CPU_SLEEP &CLUSTER_SLEEP>; operating-points-v2 = <&opp_l>; clocks = <&nope>; };
        l1: cpu@1 { device_type = "cpu"; compatible = "arm,cortex-a53"; reg = <0 1>;
            capacity-dmips-mhz = <485>; dynamic-power-coefficient = <100>;
            cpu-idle-states = <&CPU_SLEEP &CLUSTER_SLEEP>; operating-points-v2 = <&opp_l>; };
        l2: cpu@2 { device_type = "cpu"; compatible = "arm,cortex-a53"; reg = <0 2>;
            capacity-dmips-mhz = <485>; dynamic-power-coefficient = <100>;
            cpu-idle-states = <&CPU_SLEEP &CLUSTER_SLEEP>; operating-points-v2 = <&opp_l>; };
        b0: cpu@100 { device_type = "cpu"; compatible = "arm,cortex-a72"; reg = <0 0x100>;
            capacity-dmips-mhz = <1024>; dynamic-power-coefficient = <436>;
            cpu-idle-states = <&CPU_SLEEP &BIG_SLEEP>; operating-points-v2 = <&opp_b>; };
        idle-states {
            entry-method = "psci";
            CPU_SLEEP: cpu-sleep { compatible = "arm,idle-state"; local-timer-stop;
                arm,psci-suspend-param = <0x0010000>; entry-latency-us = <120>; exit-latency-us = <250>;
                min-residency-us = <900>; };
            CLUSTER_SLEEP: cluster-sleep { compatible = "arm,idle-state"; local-timer-stop;
                arm,psci-suspend-param = <0x1010000>; entry-latency-us = <400>; exit-latency-us = <500>;
                min-residency-us = <2000>; };
            BIG_SLEEP: cluster-sleep-big { compatible = "arm,idle-state";
                arm,psci-suspend-param = <0x1010001>; entry-latency-us = <800>; exit-latency-us = <2900>;
                min-residency-us = <3500>; };
        };
    };
    opp_l: opp-table-0 { compatible = "operating-points-v2"; opp-shared;
        opp00 { opp-hz = /bits/ 64 <408000000>; opp-microvolt = <825000 825000 1250000>; clock-latency-ns = <40000>; };
        opp01 { opp-hz = /bits/ 64 <1416000000>; opp-microvolt = <1125000>; clock-latency-ns = <40000>; };
        opp02 { opp-hz = /bits/ 64 <1600000000>; opp-microvolt = <1200000>; turbo-mode; };
    };
    opp_b: opp-table-1 { compatible = "operating-points-v2"; opp-shared;
        opp00 { opp-hz = /bits/ 64 <408000000>; opp-microvolt = <825000>; clock-latency-ns = <40000>; };
        opp01 { opp-hz = /bits/ 64 <1800000000>; opp-microvolt = <1200000>; clock-latency-ns = <60000>; };
    };
};
"""


def _dtc(source: str, tmp_path: Path) -> bytes:
    if shutil.which("dtc") is None:
        pytest.skip("dtc (device-tree-compiler) not installed")
    (tmp_path / "soc.dts").write_text(source)
    subprocess.run(["dtc", "-q", "-f", "-I", "dts", "-O", "dtb", "-o", str(tmp_path / "soc.dtb"),
                    str(tmp_path / "soc.dts")], check=True)
    return (tmp_path / "soc.dtb").read_bytes()


def _decompile(blob: bytes, tmp_path: Path) -> str:
    (tmp_path / "x.dtb").write_bytes(blob)
    return subprocess.run(["dtc", "-q", "-I", "dtb", "-O", "dts", str(tmp_path / "x.dtb")],
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def qemu_dtb(tmp_path_factory) -> Path:
    if shutil.which("qemu-system-aarch64") is None:
        pytest.skip("qemu-system-aarch64 not installed")
    machine = qemu.QemuMachine(kernel=Path("/dev/null"), cmdline="", rootfs=Path("/dev/null"), modules_disk=None,
                               ssh_port=0, serial_log=Path("/dev/null"), pidfile=Path("/dev/null"),
                               qmp_socket=Path("/dev/null"), sockets=1, cores_per_socket=4, arch="arm64",
                               cpu="cortex-a72", clock="host")  # Debian's QEMU: the same virt tree
    return qemu.dump_dtb(machine, tmp_path_factory.mktemp("dtb") / "qemu.dtb")


@pytest.mark.arm64  # QEMU's virt tree needs qemu-system-aarch64 (make test: the arm64 process)
def test_fdt_round_trip_is_exact_for_dtc(qemu_dtb, tmp_path):
    root, reserved = dt.parse_fdt(qemu_dtb.read_bytes())
    again = dt.serialize_fdt(root, reserved)
    assert _decompile(again, tmp_path) == _decompile(qemu_dtb.read_bytes(), tmp_path)
    assert dt.parse_fdt(again)[0] == root


def test_read_soc(tmp_path):
    soc = dt.read_soc(_dtc(SOC_DTS, tmp_path), "toy", "toy.dts")
    little, big = soc.clusters
    assert soc.shape() == (3, 1)
    assert (little.compatible, little.capacity_dmips_mhz, little.dynamic_power_coefficient) == ("arm,cortex-a53", 485, 100)
    assert [(o.hz, o.microvolt) for o in little.opps] == [(408_000_000, 825000), (1_416_000_000, 1125000)]  # no turbo
    assert [s.name for s in little.idle_states] == ["cpu-sleep", "cluster-sleep"]
    assert [s.name for s in big.idle_states] == ["cpu-sleep", "cluster-sleep-big"]
    assert big.clock_latency_ns == 60000 and big.idle_states[1].exit_latency_us == 2900


@pytest.mark.arm64  # QEMU's virt tree needs qemu-system-aarch64 (make test: the arm64 process)
def test_board_tree(qemu_dtb, tmp_path):
    soc = dt.read_soc(_dtc(SOC_DTS, tmp_path), "toy", "toy.dts")
    blob = dt.board_tree(qemu_dtb.read_bytes(), soc, (2, 2), ((4000, 0, 0), (24000, 0, 0)))
    root, _ = dt.parse_fdt(blob)
    cpus = root.child("cpus")
    nodes = [c for c in cpus.children if c.name.startswith("cpu@")]
    assert [n.u32("reg") for n in nodes] == [0, 1, 2, 3]  # the vCPUs' MPIDRs, not the SoC's
    assert [n.u32("capacity-dmips-mhz") for n in nodes] == [485, 485, 1024, 1024]
    assert [n.string("compatible") for n in nodes] == ["arm,cortex-a53"] * 2 + ["arm,cortex-a72"] * 2
    assert [n.u32s("lisa-ext,idle-power-uw") for n in nodes] == [(4000, 0, 0)] * 2 + [(24000, 0, 0)] * 2
    by_ph = {n.u32("phandle"): n for n in root.walk() if "phandle" in n.props}
    clusters = cpus.find("cpu-map/socket0").children
    assert [[by_ph[core.u32("cpu")].name for core in c.children] for c in clusters] == \
        [["cpu@0", "cpu@1"], ["cpu@2", "cpu@3"]]
    # each cluster its own OPP table and L2, idle states shared when the SoC shares them
    assert len({n.u32("operating-points-v2") for n in nodes}) == 2
    assert len({n.u32("next-level-cache") for n in nodes}) == 2
    states = {name: by_ph[ph] for n in nodes for ph in n.u32s("cpu-idle-states") for name in [by_ph[ph].name]}
    assert sorted(states) == ["cluster-sleep", "cluster-sleep-big", "cpu-sleep"]
    for st in states.values():
        # QEMU's PSCI takes only a state id: no power-down bit, no power level; the timer keeps running
        assert st.u32("arm,psci-suspend-param") & ~0xFFFF == 0 and "local-timer-stop" not in st.props
    assert states["cluster-sleep-big"].u32("arm,psci-suspend-param") == 1
    table = by_ph[nodes[2].u32("operating-points-v2")]
    assert [struct.unpack(">Q", o.props["opp-hz"])[0] for o in table.children] == [408_000_000, 1_800_000_000]
    assert "opp-shared" in table.props
    # dtc reads it back: a valid tree
    assert "capacity-dmips-mhz = <0x400>" in _decompile(blob, tmp_path)


@pytest.mark.arm64  # QEMU's virt tree needs qemu-system-aarch64 (make test: the arm64 process)
def test_board_tree_errors(qemu_dtb, tmp_path):
    soc = dt.read_soc(_dtc(SOC_DTS, tmp_path), "toy", "toy.dts")
    with pytest.raises(UserError, match=r"toy has 2 clusters \(3\+1 CPUs\): expected as many CPU counts"):
        dt.board_tree(qemu_dtb.read_bytes(), soc, (4,))
    with pytest.raises(UserError, match="not a flattened device tree"):
        dt.parse_fdt(b"\0" * 64, "junk.dtb")
    no_map = SOC_DTS.replace("cpu-map {", "not-a-map {")
    with pytest.raises(UserError, match="toy.dts: /cpus has no cpu-map"):
        dt.read_soc(_dtc(no_map, tmp_path), "toy", "toy.dts")
