"""Host paths in specs and target configs are data for the target, never for this machine.

Each test reproduces a harm a colleague's file could do as root on this machine (the local
target) and checks it is refused in one line naming the file and the key, exit status 2, with
the victim untouched:

* a fio ``filename`` or ``directory`` outside the run's scratch area (``{filename: /some/file}``
  replaced the file with random data), a ``..`` escape, a symbolic link out of the area, a
  device the target config does not declare as scratch;
* a target config's ``tools:`` naming a file (LISA pushed ``/root/.ssh/id_rsa`` to the target);
* a knob on a file whose value the kernel runs as a program (a cgroup v1 ``release_agent``);
* the local target's working or executables directory made by another user, or writable by
  all, under /tmp (root ran ``/tmp/devlib-target/bin/*`` first on its PATH).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from campaign_helpers import LISA_EXT, LOCAL_TARGET, REPO, require_live
from lisa_ext.cli import main
from lisa_ext.knobs import knob_problem

SPEC = """\
name: t
target: {target}
iterations: 1
variants:
  - name: a
workloads:
  - name: randread
    kind: fio
    options: {options}
"""
VICTIM_TEXT = "a file this user owns: nothing may overwrite it\n"
NOBODY = 65534


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _spec(tmp_path: Path, options: str, target: Path = LOCAL_TARGET) -> Path:
    return _write(tmp_path / "spec.yml", SPEC.format(target=target, options=options))


def _refused(capsys, *argv: str) -> str:
    """``lisa-ext ARGV`` ends with exit status 2 and one line; that line."""
    status = main(list(argv))
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _local_config(tmp_path: Path, workdir: Path, extra: str = "", conf: str = "") -> Path:
    """This machine as a target, its files in ``workdir``; ``conf``: more target-conf lines,
    ``extra``: more top-level ones."""
    return _write(tmp_path / "local.yml", f"target-conf:\n  kind: host\n  workdir: {workdir}\n{conf}"
                  "  lazy-platinfo: true\n  devlib:\n    excluded-modules: [cgroups]\n" + extra)


def _run(spec: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(LISA_EXT + ["campaign", "run", str(spec), "-o", str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=600)


# -- fio writes only in the scratch area or on a declared scratch device ---------------------

@pytest.mark.parametrize("options, key, why", [
    ("{{rw: write, size: 1M, filename: {victim}}}", "filename", "is outside the run's scratch area"),
    ("{{rw: write, size: 1M, filename: 'data:{victim}'}}", "filename", "is outside the run's scratch area"),
    ("{{rw: write, size: 1M, filename: ../../../../../../..{victim}}}", "filename", "'..' would leave"),
    ("{{rw: write, size: 1M, directory: {victim.parent}}}", "directory", "is outside the run's scratch area"),
    ("{{rw: write, size: 1M, filename_format: {victim}}}", "filename_format", "is outside"),
    ("{{rw: write, size: 1M, mem: 'mmap:{victim}'}}", "mem", "is outside the run's scratch area"),
    ("{{rw: write, size: 1M, write_bw_log: {victim}}}", "write_bw_log", "is outside"),
    ("{{rw: write, size: 1M, opendir: {victim.parent}}}", "opendir", "every file below that directory"),
])
def test_fio_path_outside_the_scratch_area_is_refused(capsys, tmp_path, options, key, why):
    victim = _write(tmp_path / "victim", VICTIM_TEXT)
    spec = _spec(tmp_path, options.format(victim=victim))
    line = _refused(capsys, "campaign", "check", str(spec))
    assert line.startswith(f"lisa-ext campaign: error: {spec}: workloads[0].options.{key}: "), line
    assert why in line, line
    out = tmp_path / "campaign"
    line = _refused(capsys, "campaign", "run", str(spec), "-o", str(out), "--no-progress")
    assert f"workloads[0].options.{key}: " in line and not out.exists()
    assert victim.read_text() == VICTIM_TEXT


def test_fio_device_must_be_a_scratch_device_of_the_target(capsys, tmp_path):
    """The virtual board declares its scratch disk /dev/vdc; this machine declares none."""
    spec = _spec(tmp_path, "{rw: write, size: 1M, filename: /dev/vdc}")
    line = _refused(capsys, "campaign", "check", str(spec))
    assert line == (f"lisa-ext campaign: error: {spec}: workloads[0].options.filename: /dev/vdc is not a "
                    f"scratch device of {LOCAL_TARGET} (its lisa-ext: scratch-devices lists none): a workload "
                    "destroys the data of a device, so it may write only a device the target config declares "
                    "as scratch")
    backing = _write(tmp_path / "backing.yml", SPEC.format(target=LOCAL_TARGET, options="{rw: write}")
                     + "    dm-crypt: {backing: /dev/sda}\n")
    line = _refused(capsys, "campaign", "check", str(backing))
    assert f"{backing}: workloads[0].dm-crypt.backing: /dev/sda is not a scratch device" in line
    declared = _local_config(tmp_path, tmp_path / "work", "lisa-ext: {scratch-devices: [/dev/vdc]}\n")
    assert main(["campaign", "check", str(_spec(tmp_path, "{rw: read, filename: /dev/vdc}", declared))]) == 0
    # how pages name the platform: one printable line
    named = _local_config(tmp_path, tmp_path / "work", "lisa-ext: {description: 'my lab board, 6.12'}\n")
    assert main(["campaign", "check", str(_spec(tmp_path, "{rw: read}", named))]) == 0
    two_lines = _local_config(tmp_path, tmp_path / "work", "lisa-ext: {description: \"a\\nb\"}\n")
    line = _refused(capsys, "campaign", "check", str(_spec(tmp_path, "{rw: read}", two_lines)))
    assert line == (f"lisa-ext campaign: error: {two_lines}: lisa-ext.description (line 7): expected one "
                    "printable line of 1 to 120 characters"), line
    bad = _local_config(tmp_path, tmp_path / "work", "lisa-ext: {scratch-devices: [/dev/../etc/passwd]}\n")
    line = _refused(capsys, "campaign", "check", str(_spec(tmp_path, "{rw: read}", bad)))
    assert line.startswith(f"lisa-ext campaign: error: {bad}: lisa-ext.scratch-devices"), line
    # the iowait-boost study reads the board's scratch disk; wq-affinity runs on its own dm-crypt
    for study in ("notebooks/iowait-boost.yml", "campaigns/vboard-iowait-boost.yml", "notebooks/wq-affinity.yml"):
        assert main(["campaign", "check", str(REPO / study)]) == 0, study


@pytest.mark.live
def test_relative_fio_names_land_in_the_scratch_area(tmp_path):
    """``filename: sub/data`` is written under <workdir>/lisa-ext-fio/, not where fio happens to run."""
    require_live()
    workdir = tmp_path / "work"
    spec = _spec(tmp_path, "{rw: write, bs: 4k, size: 1M, filename: sub/data}", _local_config(tmp_path, workdir))
    proc = _run(spec, tmp_path / "campaign")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (workdir / "lisa-ext-fio" / "sub" / "data").stat().st_size == 1 << 20
    result = json.loads((tmp_path / "campaign/runs/a/randread/0/result.json").read_text())
    assert result["status"] == "ok"


@pytest.mark.live
def test_a_link_out_of_the_scratch_area_is_not_followed(tmp_path):
    """A symbolic link in the scratch area (``link -> elsewhere``) does not take fio out of it."""
    require_live()
    workdir = tmp_path / "work"
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = _write(outside / "data", VICTIM_TEXT)
    (workdir / "lisa-ext-fio").mkdir(parents=True)
    (workdir / "lisa-ext-fio" / "link").symlink_to(outside)
    spec = _spec(tmp_path, "{rw: write, bs: 4k, size: 1M, filename: link/data}", _local_config(tmp_path, workdir))
    proc = _run(spec, tmp_path / "campaign")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "campaign/runs/a/randread/0/result.json").read_text())
    assert f"{workdir}/lisa-ext-fio/link/data leads outside the scratch area" in result["error"]
    assert victim.read_text() == VICTIM_TEXT


# -- tools are names of tools, not files ----------------------------------------------------

def test_target_config_tools_name_no_file(capsys, tmp_path):
    """LISA joins each entry to its assets directory, which keeps an absolute path: the key went
    to the target's executables directory."""
    key = _write(tmp_path / "ssh" / "id_rsa", "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    workdir = tmp_path / "work"
    target = _local_config(tmp_path, workdir, conf=f"  tools: [trace-cmd, {key}]\n")
    spec = _spec(tmp_path, "{rw: read, size: 1M}", target)
    line = _refused(capsys, "campaign", "check", str(spec))
    assert line.startswith(f"lisa-ext campaign: error: {target}: target-conf.tools[1]: '/"), line
    assert "is not a tool LISA ships; name one of: " in line
    assert "rt-app" in line and "trace-cmd" in line
    line = _refused(capsys, "campaign", "run", str(spec), "-o", str(tmp_path / "campaign"), "--no-progress")
    assert "target-conf.tools[1]" in line
    assert not workdir.exists() and not Path("/tmp/devlib-target/bin/id_rsa").exists()


# -- knobs never name a program the kernel runs ----------------------------------------------

def test_knobs_that_run_programs_are_refused():
    """Every file of docs/campaigns.md's list, and globs that could match one."""
    for path in ("/sys/fs/cgroup/cpu/release_agent", "/sys/fs/cgroup/release_agent",
                 "/sys/fs/cgroup/*/release_agent", "/sys/fs/cgroup/cpu,cpuacct/release_*",
                 "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/kernel/hotplug",
                 "/sys/kernel/uevent_helper", "/proc/sys/kernel/poweroff_cmd", "/proc/sys/fs/binfmt_misc/register",
                 "/sys/module/drbd/parameters/usermode_helper", "/sys/module/nfsd/parameters/cltrack_prog"):
        assert "the kernel runs the program such a file names" in (knob_problem(path, "/tmp/x") or ""), path


def test_release_agent_knob_is_refused_by_campaign_check(capsys, tmp_path):
    spec = _write(tmp_path / "spec.yml", SPEC.format(target=LOCAL_TARGET, options="{rw: read, size: 1M}").replace(
        "  - name: a\n", "  - name: a\n    knobs: {/sys/fs/cgroup/cpuset/release_agent: /tmp/evil}\n"))
    line = _refused(capsys, "campaign", "check", str(spec))
    assert line.startswith(f"lisa-ext campaign: error: {spec}: variants[0].knobs"), line
    assert "release_agent: the kernel runs the program such a file names" in line
    assert knob_problem("/sys/fs/cgroup/cpu/cpu.shares", 1024) is None


# -- the local target's directories are private ------------------------------------------------

@pytest.fixture
def tmp_dir_of_another_user():
    """A directory under /tmp, as another user could make it first: removed afterwards."""
    path = Path("/tmp") / f"lisa-ext-trust-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    yield path
    subprocess.run(["rm", "-rf", "--", str(path)], check=True)


@pytest.mark.parametrize("where, how", [("workdir", "nobody"), ("workdir", "0777"), ("bin", "0777"),
                                        ("bin", "nobody")])
def test_local_target_refuses_a_directory_others_control(capsys, tmp_path, tmp_dir_of_another_user, where, how):
    if os.geteuid() != 0:
        pytest.skip("making a directory of another user needs root")
    workdir = tmp_dir_of_another_user / "work" if where == "bin" else tmp_dir_of_another_user
    victim = workdir / "bin" if where == "bin" else workdir
    victim.mkdir(parents=True, exist_ok=True)
    planted = _write(victim / "trace-cmd", "#!/bin/sh\ntouch \"$0.ran\"\n")
    if how == "nobody":
        os.chown(victim, NOBODY, NOBODY)
    else:
        victim.chmod(0o777)
    before = sorted(p.name for p in victim.iterdir())
    spec = _spec(tmp_path, "{rw: read, size: 1M}", _local_config(tmp_path, workdir))
    line = _refused(capsys, "campaign", "run", str(spec), "-o", str(tmp_path / "campaign"), "--no-progress")
    assert line.startswith(f"lisa-ext campaign: error: {victim}: refusing it as the "), line
    assert ("belongs to user 65534" if how == "nobody" else "is writable by other users (mode 0777)") in line
    assert sorted(p.name for p in victim.iterdir()) == before  # neither used nor removed
    assert planted.read_text().startswith("#!/bin/sh")


def test_local_target_makes_its_directories_private(tmp_path):
    """Absent directories are made 0700, the executables directory inside the working directory
    (not devlib's /tmp/devlib-target/bin)."""
    from lisa_ext.target import TargetConfig
    from lisa_ext.target.devlib_target import connect_lisa

    workdir = tmp_path / "fresh" / "work"
    lisa = connect_lisa(TargetConfig.load(_local_config(tmp_path, workdir)))
    assert lisa.target.executables_directory == str(workdir / "bin")
    for path in (workdir.parent, workdir, workdir / "bin"):
        st = path.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (os.geteuid(), 0o700), path
    assert lisa.execute("echo $PATH").split(":")[0] == str(workdir / "bin")
