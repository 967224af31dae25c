"""Boot kernel variants on the virtual board: direct boot, kexec switch, LISA target.

Builds (or takes from the cache) the iowait-boost study's two variants, boots the
baseline, checks the guest's shape from inside (two LLC domains, emulated idle
states and OPPs, tracefs), reaches it through LISA with target-configs/vboard.yml,
switches to the patched variant by kexec and checks that the patched kernel runs.
Expected kernel identities come from the build (lisa_ext.kernel.build's artefacts), the running
ones are read over plain ssh here, not through the deploy code under test.
"""

import re

import pytest
from vboard_helpers import BASELINE, PATCHED, REPO, guest, require_board_capabilities

pytestmark = pytest.mark.vboard


@pytest.fixture(scope="module")
def artefacts():
    require_board_capabilities()
    from lisa_ext.kernel.build import build_variant

    return build_variant(BASELINE), build_variant(PATCHED)


@pytest.fixture(scope="module")
def booted(artefacts):
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard.board import VirtualBoard

    board = VirtualBoard()
    board.down()
    provenance = deploy_variant(BoardTarget(board), BASELINE, method="boot")
    yield board, provenance
    board.down()


def test_direct_boot_runs_the_built_kernel(artefacts, booted):
    board, provenance = booted
    baseline = artefacts[0]
    assert provenance["method"] == "boot"
    assert guest(board, "uname -r").strip() == baseline.release
    assert guest(board, "uname -v").strip() == baseline.version_string
    assert provenance["running"]["build_id"] == baseline.build_id


def test_guest_has_two_llc_domains(booted):
    board, _ = booted
    shared = guest(board, "for c in 0 1 2 3; do cat /sys/devices/system/cpu/cpu$c/cache/index3/shared_cpu_list; done")
    assert shared.split() == ["0-1", "0-1", "2-3", "2-3"]
    # /proc/schedstat lists each CPU's scheduling domains with their CPU masks:
    # a socket (MC, the LLC) under the whole machine
    domains, cpu = {}, None
    for line in guest(board, "cat /proc/schedstat").splitlines():
        fields = line.split()
        if fields and fields[0].startswith("cpu"):
            cpu = fields[0]
        elif fields and fields[0].startswith("domain"):
            domains.setdefault(cpu, []).append(fields[1])
    assert domains["cpu0"] == ["3", "f"] and domains["cpu2"] == ["c", "f"], domains


def test_guest_has_emulated_idle_states_and_opps(booted):
    board, _ = booted
    idle = guest(board, "cat /sys/devices/system/cpu/cpuidle/current_driver; "
                        "ls /sys/devices/system/cpu/cpu0/cpuidle | wc -l").split()
    assert idle[0].startswith("lisa"), idle
    assert int(idle[1]) >= 2
    freq = guest(board, "cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_driver "
                        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_available_frequencies "
                        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").split("\n")
    assert freq[0].startswith("lisa"), freq
    assert len(freq[1].split()) >= 3
    assert freq[2] == "schedutil"
    events = guest(board, "cat /sys/kernel/tracing/available_events")
    for event in ("power:cpu_idle_miss", "power:cpu_frequency", "sched:sched_switch"):
        assert event in events


def test_lisa_reaches_the_board_through_the_target_config(booted):
    from lisa_ext.target import connect

    board, _ = booted
    target = connect(REPO / "target-configs" / "vboard.yml")  # the pinned key, no prompt
    assert target.execute("uname -r").strip() == guest(board, "uname -r").strip()
    assert target.number_of_cpus == 4


def test_kexec_switches_to_the_patched_variant(artefacts, booted):
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target.board import BoardTarget

    board, _ = booted
    patched = artefacts[1]
    boot_id = guest(board, "cat /proc/sys/kernel/random/boot_id").strip()
    qemu_pid = board.status()["pid"]
    provenance = deploy_variant(BoardTarget(board), PATCHED, method="kexec")
    assert provenance["method"] == "kexec"
    assert board.status()["pid"] == qemu_pid  # same QEMU: the guest rebooted itself
    assert guest(board, "cat /proc/sys/kernel/random/boot_id").strip() != boot_id
    assert guest(board, "uname -r").strip() == patched.release
    assert guest(board, "uname -v").strip() == patched.version_string
    # the kexec'd kernel found its own modules (unpacked over SSH) and loaded them
    loaded = guest(board, "cut -d' ' -f1 /proc/modules").split()
    for module in patched.modules:
        assert module.name in loaded


def test_a_kexec_that_hangs_is_followed_by_a_cold_boot_of_the_same_kernel(artefacts, booted):
    """A kernel kexec'd into that never answers: the board is restarted on it, and the provenance
    says so. The hang is made by halting every vCPU (QMP ``stop``) once ``kexec -e`` is on its way."""
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard import qemu

    class HangsAfterKexec(BoardTarget):
        def _wait_back(self, old_boot_id, timeout=600):
            assert qemu.qmp_execute(self.board.qmp_socket, "stop") == {"return": {}}
            super()._wait_back(old_boot_id, timeout=20)

    board, _ = booted
    baseline = artefacts[0]
    qemu_pid = board.status()["pid"]
    guest(board, "touch /root/kept-across-the-restart")
    provenance = deploy_variant(HangsAfterKexec(board), BASELINE, method="kexec")
    assert provenance["method"] == "boot" and provenance["fallback"]["from"] == "kexec"
    assert re.search(r"did not answer within 20 s .*vCPUs at [0-9a-f]{8,}", provenance["fallback"]["reason"])
    assert board.status()["pid"] != qemu_pid
    assert guest(board, "uname -v").strip() == baseline.version_string
    assert guest(board, "ls /root/kept-across-the-restart").strip()  # the disk is the one it had


def test_a_board_presenting_another_key_is_refused_on_every_path(booted, tmp_path):
    """The board's pin replaced by another ed25519 key (as if another machine answered on its
    port): every way lisa-ext reaches it is refused before a command runs there. The wire-level
    proof that nothing is sent (no password, no command) is test_hostkeys.py's."""
    import subprocess
    import threading

    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.ssh import HostKeyError
    from lisa_ext.target import connect, open_target
    from lisa_ext.vboard.rootfs import VBOARD_ALIAS, known_hosts_pin_path

    board, _ = booted
    config = REPO / "target-configs" / "vboard.yml"
    lisa = connect(config)
    target = open_target(config)
    assert target.execute("echo ok").strip() == "ok"
    guest(board, "rm -rf /tmp/lisa-ext-kexec /tmp/lisa-ext-marker-*")
    boot_id = guest(board, "cat /proc/sys/kernel/random/boot_id")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()[:2]
    pin = known_hosts_pin_path()
    saved = pin.read_text()
    pin.write_text(f"{VBOARD_ALIAS} {other[0]} {other[1]}\n")
    refused = []
    try:
        # the OpenSSH client: the board's commands and a kexec deploy
        with pytest.raises(HostKeyError, match="the host key has changed"):
            target.execute("touch /tmp/lisa-ext-marker-ssh")
        with pytest.raises(HostKeyError):
            deploy_variant(open_target(config), PATCHED, method="kexec")
        # paramiko as devlib uses it: a new LISA connection, a reconnect, a per-thread connection
        with pytest.raises(HostKeyError):
            connect(config)
        with pytest.raises(HostKeyError):
            lisa.connect()

        def per_thread():
            try:
                lisa.execute("touch /tmp/lisa-ext-marker-thread")
            except HostKeyError as exc:
                refused.append(exc)

        thread = threading.Thread(target=per_thread)
        thread.start()
        thread.join(120)
    finally:
        pin.write_text(saved)
    assert len(refused) == 1
    assert guest(board, "ls -d /tmp/lisa-ext-marker-* /tmp/lisa-ext-kexec 2>/dev/null; true").strip() == ""
    assert guest(board, "cat /proc/sys/kernel/random/boot_id") == boot_id
