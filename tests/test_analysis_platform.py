"""Idle-state tables and topology from sysfs (this machine, and a sysfs-shaped tree)."""

from pathlib import Path

from lisa_ext.analysis.platform import parse_cpu_list, platform_from_sysfs


def test_cpu_list():
    assert parse_cpu_list("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)


def test_this_machine_llc_matches_sysfs():
    cpu0 = Path("/sys/devices/system/cpu/cpu0/cache")
    levels = []
    for index in cpu0.glob("index*"):
        if (index / "type").read_text().strip() in ("Unified", "Data"):
            levels.append((int((index / "level").read_text()), (index / "shared_cpu_list").read_text().strip()))
    platform = platform_from_sysfs()
    if levels:
        want = parse_cpu_list(max(levels)[1])
        assert want in platform.llc
    else:
        assert platform.llc == ()


def test_idle_states_from_a_sysfs_tree(tmp_path):
    for cpu in (0, 1):
        for i, (name, latency, residency, disable) in enumerate([("POLL", 0, 0, 0), ("C1", 2, 2, cpu)]):
            d = tmp_path / f"devices/system/cpu/cpu{cpu}/cpuidle/state{i}"
            d.mkdir(parents=True)
            for key, value in (("name", name), ("latency", latency), ("residency", residency), ("disable", disable)):
                (d / key).write_text(f"{value}\n")
        topo = tmp_path / f"devices/system/cpu/cpu{cpu}/topology"
        topo.mkdir()
        (topo / "cluster_cpus_list").write_text("0-1\n")
    platform = platform_from_sysfs(tmp_path)
    assert [s.name for s in platform.idle_states_of(0)] == ["POLL", "C1"]
    assert platform.idle_states_of(0)[1].exit_latency_ns == 2000
    assert platform.idle_states_of(1)[1].disabled and not platform.idle_states_of(0)[1].disabled
    assert platform.clusters == ((0, 1),)
