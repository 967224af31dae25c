"""lisa_ext.kernel.deploy pieces that need no guest: knobs, module lists, the kexec
modules tarball, the provenance checks. Knobs are written by a real shell on real
files (a local stand-in for the target's ``execute``)."""

import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from lisa_ext import knobs
from lisa_ext.kernel import deploy
from lisa_ext.kernel.spec import ModuleLoad
from lisa_ext.staged_modules import MODULES_LOAD_FILE, modules_tarball
from lisa_ext.target import TargetCommandError
from lisa_ext.target.ssh_target import merge_cmdline


class LocalShell:
    def execute(self, command, *, as_root=False, timeout=600, check_exit_code=True):
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout)
        if proc.returncode and check_exit_code:
            raise TargetCommandError(proc.stderr)
        return proc.stdout


@dataclass
class Artefacts:
    modules_dir: Path
    release: str
    modules: tuple = ()


def test_glob_knobs_write_every_match_and_read_back(tmp_path):
    for policy in ("policy0", "policy2"):
        (tmp_path / policy).mkdir()
        (tmp_path / policy / "scaling_governor").write_text("performance\n")
    applied = deploy._apply_knobs(LocalShell(), ((f"{tmp_path}/policy*/scaling_governor", "schedutil"),))
    assert applied == {f"{tmp_path}/policy0/scaling_governor": "schedutil",
                       f"{tmp_path}/policy2/scaling_governor": "schedutil"}
    assert (tmp_path / "policy2" / "scaling_governor").read_text() == "schedutil"


def test_glob_knob_matching_nothing_is_an_error(tmp_path):
    with pytest.raises(deploy.DeployError, match="no file matches"):
        deploy._apply_knobs(LocalShell(), {f"{tmp_path}/policy*/x": "1"})


def test_knob_that_does_not_take_is_an_error(tmp_path):
    knob = tmp_path / "knob"
    knob.write_text("")
    with pytest.raises(deploy.DeployError, match="reads back '7'"):
        deploy._apply_knobs(_Readback(LocalShell(), "7"), {str(knob): "0"})


class _Readback:
    """Reads answer a fixed value: a kernel clamping what is written."""

    def __init__(self, shell, value):
        self.shell, self.value = shell, value

    def execute(self, command, **kwargs):
        out = self.shell.execute(command, **kwargs)
        # a read, alone or after each write of a batch, answers the clamped value
        if command.startswith("cat "):
            return self.value + "\n"
        parts = knobs._BLOCK_END.split(out)  # text, end, text, end, ..., what follows the last end
        for i in range(0, len(parts) - 1, 2):
            if parts[i + 1] == knobs._WRITTEN:
                parts[i] = self.value
        return "".join(part if i % 2 == 0 else f"\n{part}\n" for i, part in enumerate(parts))


def test_empty_knob_value_reaches_the_file_as_a_newline(tmp_path):
    # sysfs ignores a zero-byte write (store() is never called): "" must arrive as "\n"
    knob = tmp_path / "comm"
    knob.write_text("schbench,postgres\n")
    assert deploy._apply_knobs(LocalShell(), {str(knob): ""}) == {str(knob): ""}
    assert knob.read_bytes() == b"\n"
    assert deploy._apply_knobs(LocalShell(), {str(knob): "pgbench"}) == {str(knob): "pgbench"}
    assert knob.read_bytes() == b"pgbench"


def test_bracketed_sysfs_choice_counts_as_taken(tmp_path):
    knob = tmp_path / "current_governor"
    knob.write_text("")
    # read back as the active choice, as campaign knobs are (one implementation)
    assert deploy._apply_knobs(_Readback(LocalShell(), "menu [teo]"), {str(knob): "teo"}) == {
        str(knob): "teo"}


def test_flag_list_knob_reads_back_its_flag(tmp_path):
    knob = tmp_path / "features"
    knob.write_text("")
    shell = _Readback(LocalShell(), "GENTLE_FAIR_SLEEPERS NO_UTIL_EST TTWU_QUEUE")
    assert deploy._apply_knobs(shell, {str(knob): "NO_UTIL_EST"}) == {str(knob): "NO_UTIL_EST"}


def _staged(tmp_path, release="6.12.9-lxabc"):
    tree = tmp_path / "modules" / "lib" / "modules" / release
    (tree / "extra").mkdir(parents=True)
    (tree / "extra" / "lisa_emu_cpuidle.ko").write_bytes(b"idle")
    (tree / "extra" / "lisa_emu_cpufreq.ko").write_bytes(b"freq")
    (tree / "modules.dep").write_text("extra/lisa_emu_cpuidle.ko:\n")
    (tree / "build").symlink_to("/somewhere/on/the/host")
    return tmp_path / "modules", release


def test_modules_to_load_follow_the_spec(tmp_path):
    modules_dir, release = _staged(tmp_path)
    named = Artefacts(modules_dir, release, (ModuleLoad("lisa_emu_cpuidle", {"table": "rk3399"}),))
    assert deploy.modules_to_load(named) == ["lisa_emu_cpuidle table=rk3399"]
    # artefacts that name nothing get the out-of-tree modules
    unnamed = type("A", (), {"modules_dir": modules_dir, "release": release})()
    assert deploy.modules_to_load(unnamed) == ["lisa_emu_cpufreq", "lisa_emu_cpuidle"]


def test_kexec_modules_tarball(tmp_path):
    modules_dir, release = _staged(tmp_path)
    tarball = modules_tarball(modules_dir, release, ["lisa_emu_cpuidle table=rk3399"], tmp_path / "m.tar.gz")
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
        assert {"modules.dep", "extra/lisa_emu_cpuidle.ko", MODULES_LOAD_FILE} <= names
        assert "build" not in names
        assert tar.extractfile(MODULES_LOAD_FILE).read() == b"lisa_emu_cpuidle table=rk3399\n"


def test_verify_names_each_mismatch():
    expected = {"release": "6.12.9-lxa", "version": "#lxa SMP", "build_id": "ab12"}
    deploy._verify(expected, dict(expected), "the board")
    with pytest.raises(deploy.DeployError) as err:
        deploy._verify(expected, {**expected, "version": "#lxb SMP", "build_id": "cd34"}, "the board")
    assert "version: expected '#lxa SMP', running '#lxb SMP'" in str(err.value)
    assert "build_id" in str(err.value) and "release" not in str(err.value)


def test_unknown_method_is_refused():
    with pytest.raises(deploy.UserError, match="not one of"):
        deploy.deploy_artefacts(object(), object(), method="flash")


def test_kexec_command_line_replaces_what_the_variant_sets_again():
    base = "console=ttyS0 root=/dev/vda cpuidle.governor=teo quiet"
    assert merge_cmdline(base, "cpuidle.governor=menu") == "console=ttyS0 root=/dev/vda quiet cpuidle.governor=menu"
    assert merge_cmdline(base, "") == base
    assert merge_cmdline("a=1 b", "b c=2") == "a=1 b c=2"


def test_auto_deploy_boots_a_target_that_does_not_answer(tmp_path):
    """A board whose last run left it marked up but gone: the probe fails, and auto boots."""

    class Gone:
        description = "a board that does not answer"
        boot_methods = ("boot", "kexec")

        def __init__(self):
            self.booted = []

        def execute(self, command, **kwargs):
            if not self.booted:
                raise TargetCommandError("connection refused")
            return ""

        def boot(self, image, method):
            self.booted.append(method)

    target = Gone()
    provenance = deploy.deploy_artefacts(target, Artefacts(tmp_path, "6.12.9-lxa"), label="v")
    assert target.booted == ["boot"] and provenance["method"] == "boot"
