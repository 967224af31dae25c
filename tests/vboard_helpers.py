"""Shared by the virtual-board tests: variant paths, capability check, plain ssh."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BASELINE = REPO / "kernels" / "iowait-boost" / "baseline.yml"
PATCHED = REPO / "kernels" / "iowait-boost" / "no-iowait-boost.yml"


def require_board_capabilities(arch: str = "x86_64"):
    """Skip with a reason where the board cannot run; never in CI, which must run it."""
    tools = ("qemu-system-x86_64",) if arch == "x86_64" else ("qemu-system-aarch64", "aarch64-linux-gnu-gcc",
                                                             "dtc", "dpkg-deb")
    missing = [tool for tool in (*tools, "qemu-img", "debootstrap", "mkfs.ext4") if shutil.which(tool) is None]
    problem = None
    if os.geteuid() != 0:
        problem = "needs root (debootstrap)"
    elif missing:
        problem = f"missing tools: {', '.join(missing)}"
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the virtual board cannot run in CI: {problem}")
        pytest.skip(problem)


def guest(board, command: str) -> str:
    """Run a command on the guest with a plain ssh call built here."""
    status = board.status()
    from lisa_ext.vboard.rootfs import VBOARD_ALIAS, known_hosts_pin_path, ssh_key_path

    argv = ["ssh", "-F", "none", "-i", str(ssh_key_path()), "-p", str(status["ssh_port"]), "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts_pin_path()}",
            "-o", f"HostKeyAlias={VBOARD_ALIAS}", "-o", "LogLevel=ERROR", "root@127.0.0.1", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout


def debugfs_records(text: str, width: int) -> dict[str, list[int]]:
    """An emulation module's debugfs table (``lisa_emu_cpuidle/holds``: 4 fields a line,
    ``lisa_emu_energy/speed``: 7), as printed or flattened to one line by a dump: {first field: the
    other fields}."""
    fields = text.split()
    return {fields[i]: [int(x) for x in fields[i + 1:i + width]] for i in range(0, len(fields), width)}
