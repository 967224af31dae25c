"""Host-side pieces of the virtual board: QEMU command line, settings, build-id
parsing, the per-boot modules disk. No guest is booted here (see
test_vboard_boot.py and test_vboard_e2e.py)."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lisa_ext.errors import UserError
from lisa_ext.running_kernel import parse_build_id
from lisa_ext.vboard import qemu, rootfs
from lisa_ext.vboard.board import BoardSettings, default_target_conf_path


def _machine(tmp_path, **kw):
    """On the host's clock: Debian's QEMU, so that no test here builds the patched one (the
    virtual clock's arguments: tests/test_campaign_clock.py)."""
    return qemu.QemuMachine(
        kernel=tmp_path / "bzImage", cmdline="console=ttyS0", rootfs=tmp_path / "root.qcow2",
        modules_disk=tmp_path / "modules.ext4", ssh_port=34567, serial_log=tmp_path / "serial.log",
        pidfile=tmp_path / "pid", qmp_socket=tmp_path / "qmp.sock", **{"clock": "host", **kw})


def test_qemu_command_has_two_llc_sockets_and_loopback_only_ssh(tmp_path):
    cmd = qemu.qemu_command(_machine(tmp_path))
    assert cmd[cmd.index("-smp") + 1] == "4,sockets=2,cores=2,threads=1"
    netdev = cmd[cmd.index("-netdev") + 1]
    assert "restrict=on" in netdev
    assert "hostfwd=tcp:127.0.0.1:34567-:22" in netdev
    drives = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-drive"]
    assert drives[0].startswith(f"file={tmp_path / 'root.qcow2'},") and "format=qcow2" in drives[0]
    assert drives[1].startswith(f"file={tmp_path / 'modules.ext4'},") and "readonly=on" in drives[1]
    assert "-daemonize" in cmd and cmd[cmd.index("-pidfile") + 1] == str(tmp_path / "pid")


def test_qemu_starts_daemonised_and_stops_over_qmp(tmp_path):
    # QEMU parses our whole command line; -S keeps the guest CPU stopped (no kernel is needed).
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 is not installed")
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(tmp_path / "root.qcow2"), "16M"], check=True)
    machine = _machine(tmp_path, memory_mb=64)
    machine = qemu.QemuMachine(**{**machine.__dict__, "modules_disk": None,
                                  "ssh_port": qemu.free_loopback_port()})
    cmd = qemu.qemu_command(machine)
    at = cmd.index("-kernel")
    del cmd[at:at + 4]  # -kernel X -append Y
    subprocess.run(cmd + ["-S"], check=True, timeout=60)
    pid = qemu.running_pid(machine.pidfile)
    assert pid is not None
    assert qemu.qmp_execute(machine.qmp_socket, "query-status")["return"]["status"] == "prelaunch"
    assert qemu.terminate(machine.pidfile, machine.qmp_socket) is True
    assert qemu.running_pid(machine.pidfile) is None
    assert qemu.terminate(machine.pidfile, machine.qmp_socket) is False


def test_arm64_qemu_command_boots_the_board_device_tree(tmp_path):
    machine = _machine(tmp_path, arch="arm64", sockets=1, cores_per_socket=6, cpu="cortex-a72",
                       dtb=tmp_path / "board.dtb")
    cmd = qemu.qemu_command(machine)
    assert cmd[0] == "qemu-system-aarch64"
    assert cmd[cmd.index("-machine") + 1] == "virt,gic-version=3" and cmd[cmd.index("-smp") + 1] == "6"
    assert cmd[cmd.index("-dtb") + 1] == str(tmp_path / "board.dtb")
    assert "virtio-rng-pci" in cmd and "restrict=on" in cmd[cmd.index("-netdev") + 1]
    with pytest.raises(UserError, match="boots with a device tree"):
        qemu.qemu_command(_machine(tmp_path, arch="arm64"))


def test_arm64_settings():
    assert BoardSettings(arch="arm64", sockets=1).qemu_cpu == "cortex-a72"
    with pytest.raises(UserError, match="no SoC 'exynos'"):
        BoardSettings(arch="arm64", soc="exynos")
    with pytest.raises(UserError, match=r"CPUs per cluster \[2, 0\]"):
        BoardSettings(arch="arm64", cpus_per_cluster=(2, 0))
    with pytest.raises(UserError, match="no virtual board for architecture 'riscv'"):
        BoardSettings(arch="riscv")


def test_settings_refuse_a_single_llc():
    with pytest.raises(UserError, match="2 sockets"):
        BoardSettings(sockets=1)


def test_target_config_is_a_plain_lisa_target_conf():
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load(default_target_conf_path().read_text())
    # LISA reads target-conf alone; lisa-ext's own keys (how pages name the board, its scratch
    # disk) sit beside it
    assert list(doc) == ["target-conf", "lisa-ext"]
    assert doc["lisa-ext"] == {"description": "virtual board (QEMU TCG, emulated idle states and OPPs)",
                               "scratch-devices": ["/dev/vdc"]}
    conf = doc["target-conf"]
    assert conf["kind"] == "linux" and conf["host"] == "127.0.0.1" and conf["username"] == "root"
    assert conf["port"] == BoardSettings().ssh_port
    assert conf["keyfile"] == "/root/.cache/lisa-ext/vboard/ssh/id_ed25519"


def test_build_id_parsed_from_a_real_elf_note(tmp_path):
    # Independent reference: binutils' readelf on a host binary.
    binary = "/bin/ls"
    notes = tmp_path / "notes.bin"
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.note.gnu.build-id", binary, str(notes)],
                   check=True)
    readelf = subprocess.run(["readelf", "-n", binary], capture_output=True, text=True, check=True).stdout
    expected = re.search(r"Build ID: ([0-9a-f]+)", readelf).group(1)
    # /sys/kernel/notes holds several notes: put another one in front.
    other = (4).to_bytes(4, "little") + (4).to_bytes(4, "little") + (1).to_bytes(4, "little") + b"Xen\0" + b"abcd"
    assert parse_build_id(other + notes.read_bytes()) == expected
    assert parse_build_id(other) is None


def _debugfs(image: Path, request: str) -> str:
    return subprocess.run(["debugfs", "-R", request, str(image)], capture_output=True, text=True,
                          check=True).stdout


def test_modules_disk_carries_release_tree_and_load_list(tmp_path):
    release = "6.12.99-lisa-test"
    tree = tmp_path / "staged" / "lib" / "modules" / release
    (tree / "extra").mkdir(parents=True)
    (tree / "extra" / "emu_idle.ko").write_bytes(b"\x7fELF-not-really")
    (tree / "modules.dep").write_text("extra/emu_idle.ko:\n")
    (tree / "build").symlink_to("/nonexistent/build/tree")
    disk = rootfs.make_modules_disk(tmp_path / "staged", release, tmp_path / "modules.ext4",
                                    ["emu_idle table=rk3399", "emu_freq"])
    listing = _debugfs(disk, f"ls -l /{release}")
    assert "modules.dep" in listing and "extra" in listing
    assert "build" not in listing.split()  # the host build-tree link is dropped
    assert _debugfs(disk, f"cat /{release}/extra/emu_idle.ko").startswith("\x7fELF-not-really")
    assert _debugfs(disk, f"cat /{release}/{rootfs.MODULES_LOAD_FILE}") == "emu_idle table=rk3399\nemu_freq\n"
    # the staged tree itself is untouched
    assert not (tree / rootfs.MODULES_LOAD_FILE).exists() and (tree / "build").is_symlink()


def test_modules_disk_wrong_release_is_a_clear_error(tmp_path):
    (tmp_path / "staged" / "lib" / "modules" / "6.12.1").mkdir(parents=True)
    with pytest.raises(UserError, match="lib/modules/6.12.2"):
        rootfs.make_modules_disk(tmp_path / "staged", "6.12.2", tmp_path / "m.ext4")


def test_cache_root_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path))
    assert rootfs.vboard_cache_dir() == tmp_path / "vboard"
    assert rootfs.ssh_key_path() == tmp_path / "vboard" / "ssh" / "id_ed25519"


def test_running_kernel_probe_on_this_machine():
    # the one probe deploys, the board and run provenance use, on a real shell
    from lisa_ext.running_kernel import probe_running_kernel

    def run(command):
        return subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout

    running = probe_running_kernel(run)
    assert running.release == os.uname().release
    assert running.version == os.uname().version
    assert running.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert running.cmdline == Path("/proc/cmdline").read_text().strip()
    # a shell where every part fails still gives one (empty) line per part
    broken = probe_running_kernel(lambda c: run(c.replace("uname", "no-such-uname")))
    assert broken.release is None and broken.boot_id == running.boot_id
