"""A real kernel build: the baseline variant, a cache hit, and an incremental rebuild; and the
board's QEMU.

The baseline build (~20 min on 2 cores from scratch) lands in the shared cache
(``~/.cache/lisa-ext`` or ``$LISA_EXT_CACHE``); the virtual-board end-to-end
test reuses it. Everything else here is incremental and takes a few minutes.
Results are checked with tools independent of the build code: the tree's own
``scripts/extract-vmlinux`` + ``readelf`` for the build id, ``modinfo`` for the
modules, a plain grep of ``.config`` and ``System.map``. Every board boots on the virtual
clock's patched QEMU (about 10 min from an empty cache on 2 idle cores): it is built here too,
where `make test` gives the build both cores before any board starts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from lisa_ext.kernel.build import build_variant
from lisa_ext.vboard import qemu_build

REPO = Path(__file__).resolve().parents[1]
BASELINE = REPO / "kernels" / "iowait-boost" / "baseline.yml"

pytestmark = pytest.mark.vboard


def _missing_tools() -> list[str]:
    missing = [t for t in ("make", "gcc", "flex", "bison", "bc", "git", "patch", "readelf", "depmod", "modinfo")
               if not shutil.which(t) and not Path(f"/sbin/{t}").exists()]
    if not Path("/usr/src/linux-source-6.12.tar.xz").exists():
        missing.append("/usr/src/linux-source-6.12.tar.xz")
    return missing


@pytest.fixture(scope="module")
def baseline():
    missing = _missing_tools()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"kernel build tools missing in CI: {missing}")
        pytest.skip(f"kernel build tools missing: {missing} (run scripts/install-system-packages.sh)")
    # as a board's first deploy does (BoardTarget.prepare_boot): QEMU's build fills the core the
    # kernel's single-threaded steps leave idle; test_the_boards_qemu_... waits for it
    if not qemu_build.build_dependencies_missing():
        qemu_build.build_in_background("x86_64")
    return build_variant(BASELINE, log=print)


def _config(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.startswith("CONFIG_"):
            k, _, v = line.partition("=")
            out[k] = v
    return out


def test_baseline_artefacts_are_complete(baseline):
    art = baseline
    for p in (art.image, art.config, art.system_map, art.build_log):
        assert p.is_file() and p.stat().st_size > 0, p
    assert re.fullmatch(r"6\.12\.\d+-lx[0-9a-f]{8}", art.release)
    assert art.release.endswith(art.hash[:8])
    assert art.version_string.startswith(f"#lx{art.hash[:8]} SMP")
    assert art.cmdline == "cpuidle.governor=menu"
    assert [m.name for m in art.modules] == ["lisa_emu_cpuidle", "lisa_emu_cpufreq"]
    # what the virtual board needs from the guest kernel
    cfg = _config(art.config)
    for sym in ("SMP", "SCHED_MC", "MODULES", "MODULE_UNLOAD", "KEXEC", "KEXEC_FILE", "CPU_IDLE",
                "CPU_IDLE_GOV_MENU", "CPU_IDLE_GOV_TEO", "CPU_FREQ", "CPU_FREQ_GOV_SCHEDUTIL",
                "CPU_FREQ_GOV_ONDEMAND", "CPU_FREQ_STAT", "SCHEDSTATS", "FTRACE", "KALLSYMS", "VIRTIO_BLK",
                "VIRTIO_NET", "EXT4_FS", "SERIAL_8250_CONSOLE", "DEVTMPFS", "UNIX", "INET", "UNIX98_PTYS"):
        assert cfg.get(f"CONFIG_{sym}") == "y", sym
    for sym in ("ACPI_PROCESSOR", "INTEL_IDLE", "X86_INTEL_PSTATE", "HALTPOLL_CPUIDLE"):
        assert f"CONFIG_{sym}" not in cfg, sym
    assert art.config_not_taken == ()


def test_build_id_matches_the_image(baseline, tmp_path):
    src = next(Path(baseline.directory).parents[1].glob("trees/*/src"))
    vmlinux = tmp_path / "vmlinux"
    with open(vmlinux, "wb") as fh:
        subprocess.run([str(src / "scripts/extract-vmlinux"), str(baseline.image)], stdout=fh, check=True)
    notes = subprocess.run(["readelf", "-n", str(vmlinux)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"Build ID:\s*([0-9a-f]+)", notes).group(1) == baseline.build_id


def test_emulation_modules_are_staged_for_this_release(baseline):
    release_dir = baseline.modules_dir / "lib" / "modules" / baseline.release
    assert (release_dir / "modules.dep").is_file()
    for name, param in (("lisa_emu_cpuidle", "table"), ("lisa_emu_cpufreq", "opps")):
        ko = next(release_dir.rglob(f"{name}.ko"))
        info = subprocess.run(["modinfo", str(ko)], capture_output=True, text=True, check=True).stdout
        assert re.search(rf"^vermagic:\s+{re.escape(baseline.release)} SMP", info, re.M), info
        assert re.search(rf"^parm:\s+{param}:", info, re.M), info
        assert f"{name}.ko" in (release_dir / "modules.dep").read_text()


def test_second_build_is_a_cache_hit(baseline):
    build_dir = next(Path(baseline.directory).parents[1].glob("trees/*/build-x86_64"))
    vmlinux_mtime = (build_dir / "vmlinux").stat().st_mtime_ns
    again = build_variant(BASELINE, log=lambda *a: pytest.fail(f"cache hit should not log: {a}"))
    assert again.cached and again.directory == baseline.directory and again.build_id == baseline.build_id
    assert (build_dir / "vmlinux").stat().st_mtime_ns == vmlinux_mtime
    r = subprocess.run([sys.executable, "-m", "lisa_ext.cli", "kernel", "build", str(BASELINE)],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"bzImage        {baseline.image} (x86_64)" in r.stdout
    assert f"uname -v       {baseline.version_string}" in r.stdout
    assert "variant baseline: cached" in r.stdout


def test_status_says_which_variants_share_the_baseline_build(baseline, tmp_path):
    """`kernel status` of the iowait-boost campaign: menu-boost and teo-boost are one build
    (their specs differ by cmdline only), found in the cache without building; a variant with
    a patch no build has seen is not built."""
    r = subprocess.run([sys.executable, "-m", "lisa_ext.cli", "kernel", "status", "notebooks/iowait-boost.yml"],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    lines = {line.split()[0]: line for line in r.stdout.splitlines()}
    for variant in ("iowait-boost/menu-boost", "iowait-boost/teo-boost"):
        assert re.match(rf"{variant} \(kernels/iowait-boost/[\w.-]+\.yml\)\s+built {baseline.hash[:12]}\b",
                        lines[variant]), lines[variant]
    assert "one build with iowait-boost/menu-boost" in lines["iowait-boost/teo-boost"]
    patch = tmp_path / "0001-unseen.diff"
    patch.write_text(f"# {uuid.uuid4().hex}\n")
    spec = tmp_path / "unseen.yml"
    spec.write_text(f"name: unseen\nbase: debian\npatches: [{patch}]\nconfigs: [{REPO}/kernels/configs/vboard.config]\n")
    r = subprocess.run([sys.executable, "-m", "lisa_ext.cli", "kernel", "status", str(spec)],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 1 and r.stdout.split()[:3] == ["unseen", f"({spec})", "not"], r.stdout + r.stderr
    assert f"lisa-ext kernel build {spec}" in r.stdout


def _one_file_variant(tmp_path: Path, src: Path, name: str) -> tuple[str, Path]:
    """A variant spec: the baseline plus one function appended to menu.c."""
    symbol = f"lisa_ext_probe_{uuid.uuid4().hex[:12]}"
    menu = "drivers/cpuidle/governors/menu.c"
    original = subprocess.run(["git", "show", f"lisa-ext-base:{menu}"], cwd=src, capture_output=True,
                              text=True, check=True).stdout
    last = original.splitlines()[-1]
    n = len(original.splitlines())
    patch = tmp_path / f"0001-{name}.diff"
    patch.write_text(
        f"--- a/{menu}\n+++ b/{menu}\n@@ -{n},1 +{n},4 @@\n {last}\n+\n"
        f"+int {symbol}(void);\n+int {symbol}(void) {{ return 42; }}\n"
    )
    spec = tmp_path / f"{name}.yml"
    spec.write_text(
        f"name: {name}\nbase: debian\npatches: [{patch}]\nconfigs: [{REPO}/kernels/configs/vboard.config]\n"
    )
    return symbol, spec


def test_one_file_patch_rebuilds_incrementally(baseline, tmp_path):
    """A variant differing by a one-file patch recompiles that file, not the kernel."""
    src = next(Path(baseline.directory).parents[1].glob("trees/*/src"))
    # The tree is shared by every variant in the cache: its objects are whatever was built last,
    # perhaps another config (a sched-ext kernel). A first probe brings it to this config; the
    # second, differing from the first by one file, is the one measured.
    _, first_spec = _one_file_variant(tmp_path, src, "probe-a")
    symbol, spec = _one_file_variant(tmp_path, src, "probe-b")
    first = build_variant(first_spec, log=print)
    art = None
    try:
        objects = sum(1 for _ in next(Path(baseline.directory).parents[1].glob("trees/*/build-x86_64")).rglob("*.o"))
        art = build_variant(spec, log=print)
        assert not art.cached and art.hash not in (baseline.hash, first.hash)
        assert art.release != baseline.release
        assert re.search(rf" T {symbol}$", art.system_map.read_text(), re.M)
        assert symbol not in baseline.system_map.read_text()
        compiled = re.findall(r"^\s+CC\s+(\S+\.o)$", art.build_log.read_text(), re.M)
        assert "drivers/cpuidle/governors/menu.o" in compiled
        # the file itself, what depends on the release string and the emulation modules
        assert len(compiled) < min(60, objects // 10), compiled
    finally:
        for built in (first, art):
            if built is not None:
                shutil.rmtree(built.directory, ignore_errors=True)


def test_the_boards_qemu_is_built_for_both_architectures():
    missing = qemu_build.build_dependencies_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"QEMU build dependencies missing in CI: {missing}")
        pytest.skip(f"QEMU build dependencies missing: {missing} (run scripts/install-system-packages.sh)")
    for arch, name in (("x86_64", "qemu-system-x86_64"), ("arm64", "qemu-system-aarch64")):
        binary = qemu_build.virtual_clock_qemu(arch)
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
        assert binary.name == name and version.returncode == 0 and "QEMU emulator version 7.2" in version.stdout
    # each binary was built when asked for; the tree both came from is gone once both are built
    record = json.loads((binary.parent.parent / "build.json").read_text())
    if "binaries" in record:  # not a build of both at once, from before each was built on its own
        assert set(record["binaries"]) == {"qemu-system-x86_64", "qemu-system-aarch64"}
    assert not (binary.parent.parent / "tree").exists()
