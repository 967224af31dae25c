"""BPF schedulers as variants, on the host: the sched-ext kernel variant, the spec's sched-ext key,
the kernel's disable reason, the clang the scheduler build needs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from campaign_helpers import LISA_EXT, LOCAL_TARGET, REPO, require_live, write_spec
from lisa_ext.campaign import sched_ext
from lisa_ext.campaign.sched_ext import SchedExtSetting, disable_reason, load_failure
from lisa_ext.campaign.spec import load_spec
from lisa_ext.campaign.tools import build_scx_crate, scx_crate_dir
from lisa_ext.errors import SpecError, UserError
from lisa_ext.kernel.build import artefact_hash
from lisa_ext.kernel.spec import load_variant_spec

SCX_KERNEL = REPO / "kernels" / "scx" / "eevdf.yml"
PLAIN_KERNEL = REPO / "kernels" / "iowait-boost" / "baseline.yml"

SPEC = f"""\
name: scx
target: @TARGET@
iterations: 1
variants:
  - name: eevdf
    kernel: {SCX_KERNEL}
  - name: simple
    kernel: {SCX_KERNEL}
    sched-ext: {{scheduler: scx_simple, args: [-f]}}
workloads:
  - name: rt
    kind: rtapp
    duration-s: 1
    tasks: {{small: {{duty-cycle-pct: 10, period-ms: 16}}}}
"""


def spec_error(tmp_path: Path, body: str) -> str:
    path = write_spec(tmp_path / "spec.yml", body)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert msg.startswith(str(path)) and "\n" not in msg, msg
    return msg


def test_only_the_sched_ext_variant_takes_the_bpf_fragment():
    scx, plain = load_variant_spec(SCX_KERNEL), load_variant_spec(PLAIN_KERNEL)
    fragment = REPO / "kernels" / "configs" / "sched-ext.config"
    assert fragment in scx.configs and fragment not in plain.configs
    text = fragment.read_text()
    for option in ("CONFIG_BPF_SYSCALL=y", "CONFIG_BPF_JIT=y", "CONFIG_DEBUG_INFO_BTF=y", "CONFIG_SCHED_CLASS_EXT=y"):
        assert f"\n{option}\n" in text
    # the plain variant's build (and its cache entry) does not depend on the new fragment
    assert artefact_hash(plain, "tree") != artefact_hash(scx, "tree")
    assert all("sched-ext" not in c.name for p in (REPO / "kernels").glob("*/*.yml") if p.parent.name != "scx"
               for c in load_variant_spec(p).configs)


def test_a_scheduler_variant_loads(tmp_path):
    spec = load_spec(write_spec(tmp_path / "spec.yml", SPEC))
    eevdf, simple = spec.variants
    assert eevdf.sched_ext is None
    scx = simple.sched_ext
    assert (scx.scheduler, scx.args, scx.ops) == ("scx_simple", ("-f",), "simple")


@pytest.mark.parametrize("old,new,expected", [
    ("scheduler: scx_simple", "scheduler: scx_rusty",
     "variants[1].sched-ext.scheduler (line 9): unknown scheduler 'scx_rusty'; lisa-ext builds: scx_simple, scx_qmap"),
    ("args: [-f]", "args: ['-f x']", "variants[1].sched-ext.args (line 9): '-f x' holds whitespace"),
    ("args: [-f]", "args: -f", "variants[1].sched-ext.args (line 9): expected list"),
    ("args: [-f]", "bogus: 1",
     "variants[1].sched-ext.bogus (line 9): unknown key; allowed here: scheduler, crate, version, args"),
    ("{scheduler: scx_simple, args: [-f]}", "{args: [-f]}",
     "variants[1].sched-ext: expected exactly one of scheduler (the kernel tree's: scx_simple, scx_qmap) or crate"),
    ("{scheduler: scx_simple, args: [-f]}", "{scheduler: scx_simple, crate: scx_bpfland, version: '1.1.4'}",
     "variants[1].sched-ext: expected exactly one of scheduler"),
    ("{scheduler: scx_simple, args: [-f]}", "{crate: scx_bpfland}",
     "variants[1].sched-ext.version: missing required key with crate 'scx_bpfland'"),
    ("{scheduler: scx_simple, args: [-f]}", "{scheduler: scx_simple, version: '1.1.4'}",
     "variants[1].sched-ext.version: a version goes with a crate of crates.io"),
    # a crate name reaches cargo's argv: an option, a path, a shell word are refused in the spec
    ("{scheduler: scx_simple, args: [-f]}", "{crate: --git, version: '1.1.4'}",
     "variants[1].sched-ext.crate (line 9): '--git' is not a crate name"),
    ("{scheduler: scx_simple, args: [-f]}", "{crate: '../scx', version: '1.1.4'}",
     "variants[1].sched-ext.crate (line 9): '../scx' is not a crate name"),
    ("{scheduler: scx_simple, args: [-f]}", "{crate: 'scx;id', version: '1.1.4'}", "is not a crate name"),
    ("{scheduler: scx_simple, args: [-f]}", "{crate: " + "s" * 65 + ", version: '1.1.4'}", "is not a crate name"),
    # pinned: a requirement or a partial version is not a version
    ("{scheduler: scx_simple, args: [-f]}", "{crate: scx_bpfland, version: '^1.1'}",
     "variants[1].sched-ext.version (line 9): '^1.1' is not an exact version"),
    ("{scheduler: scx_simple, args: [-f]}", "{crate: scx_bpfland, version: '1.1'}", "is not an exact version"),
    ("{scheduler: scx_simple, args: [-f]}", "{crate: scx_bpfland, version: '1.1.4 --git x'}",
     "is not an exact version"),
    ("{scheduler: scx_simple, args: [-f]}", "{crate: scx_bpfland, version: 1.1}",
     "variants[1].sched-ext.version (line 9): expected str"),
])
def test_bad_scheduler_settings_are_one_line(tmp_path, old, new, expected):
    assert expected in spec_error(tmp_path, SPEC.replace(old, new))


def test_a_crate_scheduler_variant_loads(tmp_path):
    body = SPEC.replace("{scheduler: scx_simple, args: [-f]}",
                        "{crate: scx_bpfland, version: 1.1.4, args: [-s, '5000']}")
    scx = load_spec(write_spec(tmp_path / "spec.yml", body)).variants[1].sched_ext
    assert (scx.scheduler, scx.version, scx.args, scx.from_crate) == ("scx_bpfland", "1.1.4", ("-s", "5000"), True)
    # scx_utils registers the ops with the version and build appended to the scheduler's name
    assert scx.ops == "bpfland"
    assert scx.runs_as("bpfland") and scx.runs_as("bpfland_1.1.4_x86_64_unknown_linux_gnu")
    assert not scx.runs_as("bpflandx") and not scx.runs_as("simple") and not scx.runs_as(None)
    simple = SchedExtSetting("scx_simple", ("-f",))
    assert not simple.from_crate and simple.runs_as("simple") and not simple.runs_as("simple_1.0")


def test_a_crate_build_is_cached_by_crate_version_and_toolchain(tmp_path, monkeypatch):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path))
    entry = scx_crate_dir("scx_bpfland", "1.1.4", "rustc 1.95.0")
    assert entry.parent == tmp_path / "tools" and entry.name.startswith("scx-crate-scx_bpfland-1.1.4-")
    assert entry == scx_crate_dir("scx_bpfland", "1.1.4", "rustc 1.95.0")
    others = {scx_crate_dir("scx_bpfland", "1.1.5", "rustc 1.95.0"), scx_crate_dir("scx_lavd", "1.1.4", "rustc 1.95.0"),
              scx_crate_dir("scx_bpfland", "1.1.4", "rustc 1.96.0")}
    assert entry not in others and len(others) == 3


def test_building_a_crate_without_cargo_is_one_line(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    code = "from lisa_ext.campaign.tools import build_scx_crate; build_scx_crate('scx_bpfland', '1.1.4')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PATH=str(empty), HOME=str(tmp_path), CARGO_HOME=str(tmp_path / "cargo")))
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "needs cargo" in last and "rustup" in last, proc.stderr


@pytest.mark.parametrize("crate,version", [("--locked", "1.1.4"), ("scx_bpfland", "1.1.4 --git=x"), ("a/b", "1.0.0")])
def test_build_scx_crate_refuses_what_is_no_crate_or_version_before_cargo(tmp_path, monkeypatch, crate, version):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path))
    with pytest.raises(UserError, match="not a crate name|not an exact version"):
        build_scx_crate(crate, version)
    assert not (tmp_path / "tools").exists()


@pytest.mark.skipif(shutil.which("cargo") is None and not (Path.home() / ".cargo/bin/cargo").is_file(),
                    reason="needs cargo and the crates.io index")
def test_a_crate_version_that_does_not_exist_is_one_line_naming_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path))
    with pytest.raises(UserError) as info:
        build_scx_crate("scx_bpfland", "0.0.999")
    msg = str(info.value)
    assert "\n" not in msg, msg
    assert msg.startswith("sched-ext {crate: scx_bpfland, version: 0.0.999}: cargo install failed: error: "), msg
    assert "0.0.999" in msg.split("failed: ", 1)[1], msg
    assert not list((tmp_path / "tools").glob("scx-crate-*-0.0.999-????????????????")), "a failed build is no entry"


def test_a_kernel_without_sched_ext_names_the_variant_and_what_is_missing(tmp_path):
    msg = spec_error(tmp_path, SPEC.replace(f"    kernel: {SCX_KERNEL}\n    sched-ext",
                                            f"    kernel: {PLAIN_KERNEL}\n    sched-ext"))
    assert "variants[1].sched-ext" in msg and str(PLAIN_KERNEL) in msg and "CONFIG_SCHED_CLASS_EXT=y" in msg


def test_campaign_check_stops_on_a_kernel_without_sched_ext(tmp_path):
    path = write_spec(tmp_path / "spec.yml", SPEC.replace(f"    kernel: {SCX_KERNEL}\n    sched-ext",
                                                          f"    kernel: {PLAIN_KERNEL}\n    sched-ext"))
    proc = subprocess.run(LISA_EXT + ["campaign", "check", str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "CONFIG_SCHED_CLASS_EXT" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


KERNEL_LOG = """\
[   10.000000] sched_ext: BPF scheduler "simple" enabled
[   12.000000] sched_ext: BPF scheduler "simple" disabled (unregistered from user space)
[   20.000000] sched_ext: BPF scheduler "simple" enabled
[   25.000000] sched_ext: BPF scheduler "simple" disabled (runnable task stall)
[   25.000001] sched_ext: simple: kworker/0:1[12] failed to run for 30.2s
[   26.000000] sched_ext: BPF scheduler "qmap" enabled
"""


def test_the_kernel_reason_is_the_last_runs_own():
    assert disable_reason(KERNEL_LOG, "simple") == "runnable task stall: kworker/0:1[12] failed to run for 30.2s"
    # qmap was enabled and not disabled since: no reason yet, not simple's
    assert disable_reason(KERNEL_LOG, "qmap") is None
    assert disable_reason(KERNEL_LOG.splitlines()[0] + "\n" + KERNEL_LOG.splitlines()[1], "simple") == \
        "unregistered from user space"


# libbpf's own lines on a refused program, as a C scheduler prints them to stderr
C_SCHEDULER_OUTPUT = """\
libbpf: prog 'simple_enqueue': BPF program load failed: Permission denied
libbpf: prog 'simple_enqueue': -- BEGIN PROG LOAD LOG --
0: R1=ctx() R10=fp0
; int BPF_STRUCT_OPS(simple_enqueue, struct task_struct *p, u64 enq_flags) @ scx_simple.bpf.c:50
0: (79) r6 = *(u64 *)(r1 +8)
1: (79) r7 = *(u64 *)(r1 +0)
R7 invalid mem access 'scalar'
processed 2 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0
-- END PROG LOAD LOG --
libbpf: prog 'simple_enqueue': failed to load: -13
libbpf: failed to load object 'scx_simple'
scx_simple.c:93 [scx panic]: Permission denied
"""
# scx_lavd 1.1.4 on the arm64 board's kernel without BPF_EVENTS (2026-11-30): libbpf's lines come
# through the crate's logger, on stdout, coloured and a blank line apart; stderr has only the tail
_PREFIX = ("\x1b[2m1970-01-01T00:00:37.781538Z\x1b[0m \x1b[33m WARN\x1b[0m ThreadId(01) "
           "\x1b[2mscx_utils::libbpf_logger\x1b[0m\x1b[2m:\x1b[0m ")
CRATE_OUTPUT = (
    "Error: Failed to load BPF program\n\nCaused by:\n    Invalid argument (os error 22)\n"
    + "".join(f"{_PREFIX}libbpf: {line}\n\n" for line in (
        "map 'lavd_ops': created successfully, fd=25",
        "prog 'scx_lib_init_probe': BPF program load failed: -EINVAL",
        "prog 'scx_lib_init_probe': failed to load: -EINVAL",
        "failed to load BPF skeleton 'bpf_bpf': -EINVAL")))


def test_a_refused_program_is_named_with_the_verifiers_error():
    assert load_failure(C_SCHEDULER_OUTPUT) == (
        "prog 'simple_enqueue': BPF program load failed: Permission denied; verifier: "
        "0: (79) r6 = *(u64 *)(r1 +8) / 1: (79) r7 = *(u64 *)(r1 +0) / R7 invalid mem access 'scalar'")
    assert load_failure(CRATE_OUTPUT) == \
        "prog 'scx_lib_init_probe': BPF program load failed: -EINVAL; no verifier log"
    # the crates' logger puts the log a blank line after the failure
    logged = CRATE_OUTPUT.replace(
        "-EINVAL\n\n", "-EINVAL\n\nlibbpf: prog 'scx_lib_init_probe': -- BEGIN PROG LOAD LOG --\n"
        "attach_btf_id 5 is not a function\n-- END PROG LOAD LOG --\n", 1)
    assert load_failure(logged).endswith("; verifier: attach_btf_id 5 is not a function")
    assert load_failure("Error: no sched_ext support\n") is None


def test_a_refused_programs_lines_from_the_target_stay_one_bounded_line():
    hostile = ("libbpf: prog 'p\x1b]0;x\x07': BPF program load failed: E\rINVAL\n"
               "libbpf: prog 'p\x1b]0;x\x07': -- BEGIN PROG LOAD LOG --\n" + "A" * 100_000 + "\x00\n")
    text = load_failure(hostile)
    assert text is not None and text.isprintable() and len(text) < 1000, text


@pytest.mark.live
def test_a_kernel_without_kprobe_or_uprobe_events_is_named(monkeypatch):
    """Asked on a real shell: this host's kernel has the perf event sources; paths that exist
    nowhere stand for a kernel without them."""
    require_live()
    from lisa_ext.target import open_target

    target = open_target(LOCAL_TARGET)
    assert sched_ext.tracing_programs_missing(target) is None
    monkeypatch.setattr(sched_ext, "_TRACING_PMUS", ("/nonexistent/kprobe dir", "/nonexistent/'uprobe'"))
    assert "CONFIG_BPF_EVENTS" in sched_ext.tracing_programs_missing(target)


def test_building_a_scheduler_without_clang_is_one_line(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    code = "from lisa_ext.campaign.tools import find_bpf_clang; find_bpf_clang()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PATH=str(empty)))
    assert proc.returncode != 0
    assert "needs clang >= 16" in proc.stderr and "clang-19" in proc.stderr


def _fake_rust(bin_dir: Path, sysroot: Path) -> None:
    """A cargo and a rustc whose sysroot is ``sysroot``: what decides whether a target's std is there."""
    bin_dir.mkdir(parents=True)
    for name, body in (("cargo", "echo 'cargo 1.95.0'"), ("rustc", f"echo '{sysroot}'")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)


def test_a_crate_for_another_architecture_needs_that_architectures_std(tmp_path, monkeypatch):
    from lisa_ext.campaign import tools
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "cargo-home"))
    host_only = tmp_path / "host-only"
    _fake_rust(host_only / "bin", host_only / "sysroot")
    (host_only / "sysroot/lib/rustlib/x86_64-unknown-linux-gnu/lib").mkdir(parents=True)
    (host_only / "sysroot/lib/rustlib/x86_64-unknown-linux-gnu/lib/libstd-0123.rlib").write_bytes(b"")
    monkeypatch.setenv("PATH", f"{host_only / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(tools, "_DEBIAN_CARGO", str(tmp_path / "no-debian-cargo"))
    with pytest.raises(UserError) as info:
        build_scx_crate("scx_lavd", "1.1.4", "arm64")
    msg = str(info.value)
    assert "\n" not in msg and "aarch64-unknown-linux-gnu" in msg and "--arm64-crates" in msg, msg
    assert str(host_only / "bin" / "cargo") in msg, msg
    assert not (tmp_path / "cache" / "tools").exists()
    # a second cargo whose rustc has aarch64's std is the one picked, with the cross linker
    cross = tmp_path / "cross"
    _fake_rust(cross / "bin", cross / "sysroot")
    (cross / "sysroot/lib/rustlib/aarch64-unknown-linux-gnu/lib").mkdir(parents=True)
    (cross / "sysroot/lib/rustlib/aarch64-unknown-linux-gnu/lib/libstd-4567.rlib").write_bytes(b"")
    monkeypatch.setattr(tools, "_DEBIAN_CARGO", str(cross / "bin" / "cargo"))
    if shutil.which("aarch64-linux-gnu-gcc"):
        assert tools.find_cross_cargo("arm64") == (str(cross / "bin" / "cargo"), "aarch64-unknown-linux-gnu",
                                                   shutil.which("aarch64-linux-gnu-gcc"))
    with pytest.raises(UserError, match="cannot build crates for a mips target"):
        tools.find_cross_cargo("mips")
