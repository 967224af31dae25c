"""The arm64 board boots with energy-aware scheduling running, and is reached as a user's board.

Builds kernels/eas/baseline.yml for arm64 (cross-compiled, cached), boots the arm64 board (QEMU
``virt``, TCG) with its RK3399 clusters, and reads from inside the guest, over plain ssh built
here: the sched domain flags (SD_ASYM_CPUCAPACITY), ``sched_energy_aware``, the Energy Model of
each perf domain (its powers against the formula of drivers/opp/of.c over the RK3399 device tree's
OPPs and coefficients, read from the kernel tree here, not from the board code), the CPU capacities
arch_topology computes, the cpuidle-psci states and the cpufreq policies. Then, through
target-configs/vboard-arm64.yml as a campaign would: LISA connects with the pinned host key,
pushes its own arm64 trace-cmd and rt-app and runs them, and a variant of another study
(teo-util's teo, built for arm64) is deployed by kexec over SSH, as on a real arm64 board.
"""

from __future__ import annotations

import re
import struct

import pytest
from vboard_helpers import REPO, debugfs_records, guest, require_board_capabilities

pytestmark = [pytest.mark.vboard, pytest.mark.arm64]

EAS_BASELINE = REPO / "kernels" / "eas" / "baseline.yml"
TEO = REPO / "kernels" / "teo-util" / "teo.yml"
ARM64_CONF = REPO / "target-configs" / "vboard-arm64.yml"
CPU = "/sys/devices/system/cpu"
#: the board's shape in these tests: two CPUs of each RK3399 cluster (little 0-1, big 2-3)
SHAPE = (2, 2)


@pytest.fixture(scope="module")
def artefacts():
    require_board_capabilities(arch="arm64")
    from lisa_ext.kernel.build import build_variant

    return build_variant(EAS_BASELINE, arch="arm64")


@pytest.fixture(scope="module")
def board(artefacts):
    from lisa_ext.kernel.deploy import deploy_artefacts
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard.board import BoardSettings, VirtualBoard

    board = VirtualBoard(BoardSettings(arch="arm64", cpus_per_cluster=SHAPE))
    board.down()
    provenance = deploy_artefacts(BoardTarget(board), artefacts, method="boot", label="baseline")
    assert provenance["method"] == "boot"
    yield board
    board.down()


def _rk3399(artefacts) -> list[dict]:
    """Per cluster of the RK3399 device tree compiled from the kernel tree: coefficient and OPPs
    (kHz -> uW as dev_pm_opp_calc_power() computes them: uW = coef * mV^2 * MHz / 10^6)."""
    dtb = (artefacts.dtbs / "rk3399.dtb").read_bytes()
    # an independent reading of the tree: phandle -> node properties, via dtc's own decompiler
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".dtb") as f:
        f.write(dtb)
        f.flush()
        dts = subprocess.run(["dtc", "-q", "-I", "dtb", "-O", "dts", f.name], capture_output=True,
                             text=True, check=True).stdout
    clusters = []
    for cpu in ("cpu@0", "cpu@100"):
        node = dts[dts.index(f"\t\t{cpu} {{"):]
        node = node[:node.index("\t\t};")]
        coef = int(re.search(r"dynamic-power-coefficient = <(0x[0-9a-f]+)>", node).group(1), 16)
        table_ph = re.search(r"operating-points-v2 = <(0x[0-9a-f]+)>", node).group(1)
        dmips = int(re.search(r"capacity-dmips-mhz = <(0x[0-9a-f]+)>", node).group(1), 16)
        # the table node holding that phandle: dtc prints a node's properties (the phandle among
        # them) before its subnodes (the OPPs), so the node runs from its name to its closing brace
        at = dts.index(f"phandle = <{table_ph}>;")
        table = dts[dts.rindex("opp-table", 0, at):dts.index("\n\t};", at)]
        hz = [int(a, 16) << 32 | int(b, 16) for a, b in re.findall(r"opp-hz = <(0x[0-9a-f]+) (0x[0-9a-f]+)>", table)]
        uv = [int(v, 16) for v in re.findall(r"opp-microvolt = <(0x[0-9a-f]+)", table)]
        power = {h // 1000: coef * (u // 1000) ** 2 * (h // 1_000_000) // 1_000_000 for h, u in zip(hz, uv)}
        clusters.append({"dmips": dmips, "power_uw": power})
    return clusters


def test_eas_is_running(board):
    assert guest(board, "cat /proc/sys/kernel/sched_energy_aware").strip() == "1"
    # the scheduler saw asymmetric capacities: the domain spanning both clusters says so
    # the domains' debugfs files appear with the scheduler's verbose debug on
    flags = guest(board, "echo Y > /sys/kernel/debug/sched/verbose; "
                         "for d in /sys/kernel/debug/sched/domains/cpu0/domain*; do "
                         "echo $(cat $d/name) $(cat $d/flags); done").splitlines()
    assert [line.split()[0] for line in flags] == ["MC", "PKG"], flags
    top = flags[-1].split()
    assert "SD_ASYM_CPUCAPACITY" in top and "SD_ASYM_CPUCAPACITY_FULL" in top, flags
    assert all("SD_ASYM_CPUCAPACITY" not in line.split() for line in flags[:-1]), flags
    dmesg = guest(board, "dmesg")
    assert "no energy model" not in dmesg.lower()


def test_energy_model_per_cluster_is_the_device_tree(board, artefacts):
    dump = guest(board, "cd /sys/kernel/debug/energy_model && for d in cpu*; do "
                        "echo $d cpus $(cat $d/cpus); for p in $d/ps:*; do "
                        "echo $d $(cat $p/frequency) $(cat $p/power); done; done")
    domains: dict[str, dict] = {}
    for line in dump.splitlines():
        name, first, second = line.split(maxsplit=2)
        entry = domains.setdefault(name, {"power_uw": {}})
        if first == "cpus":
            entry["cpus"] = second
        else:
            entry["power_uw"][int(first)] = int(second)
    assert {d: v["cpus"] for d, v in domains.items()} == {"cpu0": "0-1", "cpu2": "2-3"}
    little, big = _rk3399(artefacts)
    assert domains["cpu0"]["power_uw"] == little["power_uw"]
    assert domains["cpu2"]["power_uw"] == big["power_uw"]


def test_capacities_clusters_idle_states_and_opps(board, artefacts):
    little, big = _rk3399(artefacts)
    caps = [int(v) for v in guest(board, f"cat {CPU}/cpu[0-3]/cpu_capacity").split()]
    # drivers/base/arch_topology.c: dmips x the cluster's top OPP, scaled so the largest is 1024
    scale = max(little["dmips"] * max(little["power_uw"]), big["dmips"] * max(big["power_uw"]))
    want = [little["dmips"] * max(little["power_uw"]) * 1024 // scale] * 2 + [1024] * 2
    assert caps == want and want[0] == 381
    assert guest(board, f"cat {CPU}/cpu0/topology/cluster_cpus_list {CPU}/cpu3/topology/cluster_cpus_list"
                 ).split() == ["0-1", "2-3"]
    # the device tree's states, as dt_init_idle_driver() builds them (not cpuidle-psci: docs/vboard.md)
    assert guest(board, f"cat {CPU}/cpuidle/current_driver").strip() == "lisa_emu_cpuidle"
    states = guest(board, f"for s in {CPU}/cpu2/cpuidle/state*; do echo $(cat $s/name) $(cat $s/latency) "
                          f"$(cat $s/residency); done").splitlines()
    # rk3399-base.dtsi: cpu-sleep 120+250 us / 900 us, cluster-sleep 400+500 us / 2000 us
    assert states == ["WFI 1 1", "cpu-sleep 370 900", "cluster-sleep 900 2000"]
    deep = guest(board, f"cat {CPU}/cpu*/cpuidle/state[12]/usage").split()
    assert sum(map(int, deep)) > 0, "no CPU ever entered a deep state"
    for policy, cpus, table in (("policy0", "0 1", little), ("policy2", "2 3", big)):
        out = guest(board, f"cd {CPU}/cpufreq/{policy} && cat scaling_driver scaling_governor related_cpus "
                           "scaling_available_frequencies").splitlines()
        assert out[:3] == ["lisa-emu", "schedutil", cpus]
        assert [int(f) for f in out[3].split()] == sorted(table["power_uw"])


def test_lisa_pushes_and_runs_its_arm64_binaries(board):
    from lisa_ext.target import connect

    target = connect(ARM64_CONF)
    assert target.abi == "arm64" and target.number_of_cpus == 4
    assert guest(board, "command -v trace-cmd rt-app || true").strip() == ""  # not in the rootfs
    target.install_tools(["trace-cmd", "rt-app"])
    for tool, version in (("trace-cmd", "trace-cmd version"), ("rt-app", "rt-app")):
        path = target.which(tool)
        assert path and path.startswith(target.executables_directory)
        header = bytes.fromhex("".join(target.execute(f"od -An -tx1 -N20 {path}").split()))
        magic, machine = struct.unpack_from("<4s14xH", header)
        assert magic == b"\x7fELF" and machine == 183  # EM_AARCH64
        assert version in target.execute(f"{tool} --version 2>&1 || true", check_exit_code=False)


def test_faithful_timing_pays_exit_latency_and_opp_speed(board):
    """With timing=faithful (what a campaign sets unless it asks for decisions) the arm64 board pays
    as the x86 one does: a CPU woken from a deep state stays halted for that state's exit latency
    (the module's holds: time held less time held beyond = holds x latency), and a CPU-bound loop
    at the big cluster's lowest OPP owes f_max / f - 1 times its useful time as halted stall."""
    timing = "/sys/module/lisa_emu_{}/parameters/timing"
    holds_file, speed_file = "/sys/kernel/debug/lisa_emu_cpuidle/holds", "/sys/kernel/debug/lisa_emu_energy/speed"
    policy = f"{CPU}/cpufreq/policy2"
    khz = sorted(int(f) for f in guest(board, f"cat {policy}/scaling_available_frequencies").split())
    latency_us = dict(zip(guest(board, f"cat {CPU}/cpu2/cpuidle/state*/name").split(),
                          map(int, guest(board, f"cat {CPU}/cpu2/cpuidle/state*/latency").split())))
    before = debugfs_records(guest(board, f"cat {holds_file}"), 4)
    try:
        guest(board, f"echo faithful > {timing.format('cpuidle')}; echo faithful > {timing.format('cpufreq')}; "
                     f"echo userspace > {policy}/scaling_governor; echo {khz[0]} > {policy}/scaling_setspeed")
        speed = debugfs_records(guest(board, f"cat {speed_file}"), 7)["cpu3"]
        # sleeps long enough for the governor to pick the deep states, then a 1 s busy loop on CPU 3
        guest(board, "for i in $(seq 20); do sleep 0.05; done; "
                     "taskset -c 3 timeout 1 sh -c 'while :; do :; done' || true")
        after_speed = debugfs_records(guest(board, f"cat {speed_file}"), 7)["cpu3"]
        after = debugfs_records(guest(board, f"cat {holds_file}"), 4)
    finally:
        guest(board, f"echo decisions > {timing.format('cpuidle')}; echo decisions > {timing.format('cpufreq')}; "
                     f"echo schedutil > {policy}/scaling_governor")
    held = {name: [a - b for a, b in zip(after[name], before[name])] for name in after}
    assert held["WFI"][0] == 0, held  # 1 us: not paid
    for name in ("cpu-sleep", "cluster-sleep"):
        count, held_ns, beyond_ns = held[name]
        assert held_ns - beyond_ns == count * latency_us[name] * 1000
    assert held["cpu-sleep"][0] + held["cluster-sleep"][0] > 0, held
    useful, stalled, owed, dropped = (a - b for a, b in zip(after_speed[:4], speed[:4]))
    print(f"arm64, {khz[0] // 1000} MHz: stalled / useful {stalled / useful:.2f} "
          f"({khz[-1] / khz[0] - 1:.2f} owed per unit of useful time); holds {held}")
    assert (stalled + dropped + owed) / useful == pytest.approx(khz[-1] / khz[0] - 1, rel=0.1)
    assert stalled > 0.5 * (stalled + dropped + owed)


def test_a_variant_of_another_study_is_kexeced_over_ssh(board):
    from lisa_ext.kernel.build import build_variant
    from lisa_ext.kernel.deploy import deploy_variant

    teo = build_variant(TEO, arch="arm64")
    qemu_pid = board.status()["pid"]
    provenance = deploy_variant(ARM64_CONF, TEO)
    assert provenance["method"] == "kexec" and provenance["arch"] == "arm64"
    assert board.status()["pid"] == qemu_pid  # the guest switched kernels itself
    assert guest(board, "uname -r").strip() == teo.release
    assert guest(board, "cat /proc/cmdline").split()[-2:] == ["cpuidle.governor=teo", "teo.util_awareness=1"]
    # same board, same device tree: EAS starts again under the new kernel
    assert guest(board, "cat /proc/sys/kernel/sched_energy_aware").strip() == "1"
