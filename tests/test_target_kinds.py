"""What differs between kinds of target is a question to the target (the campaign and kernel
layers never test its kind): the architecture a kernel for it is built for (``kernel_arch``: the
virtual board answers from its own settings, up or not; a Linux machine from ``uname -m``, run
here in this machine's shell) and whether it is this machine (``this_machine``: campaigns on it
are serialised).
"""

from __future__ import annotations

import platform
import subprocess

import pytest

from campaign_helpers import LOCAL_TARGET, require_live
from lisa_ext.errors import UserError
from lisa_ext.target import open_target
from lisa_ext.target.board import BoardTarget
from lisa_ext.target.protocol import TargetCommandError, machine_arch
from lisa_ext.target.ssh_target import SshTarget
from lisa_ext.vboard.board import BoardSettings, VirtualBoard


class ShellTarget:
    """A target whose commands run in this machine's shell, ``bin`` first on its PATH."""

    description = "the test shell"

    def __init__(self, bin_dir=None):
        self.bin_dir = bin_dir

    def execute(self, command: str, *, as_root: bool = False, timeout: float | None = None,
                check_exit_code: bool = True) -> str:
        path = f"{self.bin_dir}:/usr/bin:/bin" if self.bin_dir else "/usr/bin:/bin"
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout,
                              env={"PATH": path})
        if check_exit_code and proc.returncode != 0:
            raise TargetCommandError(proc.stderr.strip() or f"exit {proc.returncode}")
        return proc.stdout


def _uname(tmp_path, script: str):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    uname = bin_dir / "uname"
    uname.write_text(f"#!/bin/sh\n{script}\n")
    uname.chmod(0o755)
    return bin_dir


def test_a_linux_machine_names_its_architecture_by_uname():
    expected = {"x86_64": "x86_64", "aarch64": "arm64"}[platform.machine()]
    assert machine_arch(ShellTarget()) == expected


def test_a_machine_lisa_ext_builds_no_kernel_for_is_refused_in_one_line(tmp_path):
    with pytest.raises(UserError) as err:
        machine_arch(ShellTarget(_uname(tmp_path, "echo riscv64")))
    assert str(err.value) == "the test shell is a 'riscv64' machine: lisa-ext builds kernels for arm64, x86_64"


def test_an_unreadable_architecture_names_the_target(tmp_path):
    with pytest.raises(UserError, match=r"^the test shell: cannot read its architecture \(uname -m\): no uname"):
        machine_arch(ShellTarget(_uname(tmp_path, "echo 'no uname' >&2; exit 1")))


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_the_board_names_its_own_architecture_without_a_running_guest(arch, tmp_path, monkeypatch):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path))
    board = VirtualBoard(BoardSettings(arch=arch), run_dir=tmp_path / "run")
    assert not board.is_up()
    assert BoardTarget(board=board).kernel_arch() == arch


def test_the_board_and_a_linux_board_over_ssh_are_other_machines(tmp_path, monkeypatch):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path))
    board = VirtualBoard(BoardSettings(), run_dir=tmp_path / "run")
    assert BoardTarget(board=board).this_machine is False
    assert SshTarget(None, None).this_machine is False


@pytest.mark.live
def test_this_machine_is_this_machine():
    require_live()
    target = open_target(LOCAL_TARGET)
    assert target.this_machine is True
    assert target.kernel_arch() == machine_arch(ShellTarget())
