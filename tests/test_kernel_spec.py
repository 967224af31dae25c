"""Variant spec validation: shipped specs load, bad ones fail naming file and key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lisa_ext.errors import SpecError
from lisa_ext.kernel.spec import load_variant_spec

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "kernels"
SHIPPED = sorted(KERNELS.glob("*/*.yml"))


def write_spec(tmp_path: Path, text: str, name: str = "v.yml") -> Path:
    (tmp_path / "frag.config").write_text("CONFIG_SMP=y\n")
    (tmp_path / "fix.patch").write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    p = tmp_path / name
    p.write_text(text)
    return p


def test_every_shipped_variant_is_valid():
    assert len(SHIPPED) >= 7
    names = set()
    for path in SHIPPED:
        spec = load_variant_spec(path)
        assert spec.configs and all(c.is_file() for c in spec.configs)
        assert all(p.is_file() for p in spec.patches)
        names.add((path.parent.name, spec.name))
    assert ("iowait-boost", "baseline") in names and ("iowait-boost", "no-iowait-boost") in names
    assert {("teo-util", n) for n in ("teo", "teo-no-util", "menu")} <= names


def test_shipped_variants_differ_as_the_studies_need():
    nob = load_variant_spec(KERNELS / "iowait-boost/no-iowait-boost.yml")
    assert dict(nob.knobs)["/sys/devices/system/cpu/cpufreq/policy*/schedutil/iowait_boost_cap"] == "0"
    assert "cpuidle.governor=menu" in load_variant_spec(KERNELS / "teo-util/menu.yml").cmdline
    assert "teo.util_awareness=0" in load_variant_spec(KERNELS / "teo-util/teo-no-util.yml").cmdline
    # the three teo-util variants share their build inputs, hence one kernel build
    inputs = {(load_variant_spec(p).patches, load_variant_spec(p).configs) for p in KERNELS.glob("teo-util/*.yml")}
    assert len(inputs) == 1


def test_ondemand_and_idle_gating_variants_share_one_kernel_and_differ_by_knobs():
    paths = sorted(KERNELS.glob("ondemand-bursty/*.yml")) + sorted(KERNELS.glob("idle-gating/*.yml"))
    specs = {f"{p.parent.name}/{p.stem}": load_variant_spec(p) for p in paths}
    assert set(specs) == {"ondemand-bursty/with", "ondemand-bursty/without", "idle-gating/baseline",
                          "idle-gating/idle-set-d10", "idle-gating/gating"}
    assert len({(s.patches, s.configs) for s in specs.values()}) == 1
    series = next(iter(specs.values())).patches
    assert [p.name[:4] for p in series if p.parent.name != "board"] == ["0003", "0004"]
    knobs = {name: dict(s.knobs) for name, s in specs.items()}
    copy = "/sys/module/cpufreq_governor/parameters/copy_prev_load"
    assert knobs["ondemand-bursty/with"][copy] == "Y" and knobs["ondemand-bursty/without"][copy] == "N"
    comm = "/sys/module/idle_gating/parameters/comm"
    assert knobs["idle-gating/baseline"][comm] == knobs["idle-gating/idle-set-d10"][comm] == ""
    assert "schbench" in knobs["idle-gating/gating"][comm].split(",")
    assert knobs["idle-gating/idle-set-d10"]["/sys/devices/system/cpu/cpu*/cpuidle/state[1-9]*/disable"] == "1"
    assert knobs["idle-gating/gating"]["/sys/devices/system/cpu/cpu*/cpuidle/state[1-9]*/disable"] == "0"
    # the variants switch on one boot without a reboot: each must write every knob any of them writes
    assert len({frozenset(k) for k in knobs.values()}) == 1


def test_every_board_variant_starts_with_every_board_support_patch():
    board_patches = sorted((KERNELS / "patches/board").glob("*.patch"))
    assert len(board_patches) == 2
    variants = sorted(KERNELS.glob("*/*.yml"))
    assert len(variants) == 18  # the studies', the two bisect series' and kernels/scx's (x86, arm64)
    for path in variants:
        for arch in load_variant_spec(path).arches:
            spec = load_variant_spec(path, arch=arch)
            assert list(spec.patches[:len(board_patches)]) == board_patches, (path, arch)


def test_full_spec_resolves_paths_and_defaults(tmp_path):
    p = write_spec(tmp_path, """
name: my-variant
patches: [fix.patch]
configs: [frag.config]
cmdline: "  cpuidle.governor=teo   quiet "
modules:
  - lisa_emu_cpufreq
  - name: lisa_emu_cpuidle
    params: {table: rk3399, poll_state: 1}
knobs:
  /sys/module/teo/parameters/util_awareness: 0
""")
    spec = load_variant_spec(p)
    assert spec.base.kind == "debian" and spec.base.location == "linux-source-6.12"
    assert spec.patches == ((tmp_path / "fix.patch").resolve(),)
    assert spec.cmdline == "cpuidle.governor=teo quiet"
    assert spec.modules[1].modprobe_args() == ["lisa_emu_cpuidle", "table=rk3399", "poll_state=1"]
    assert spec.knobs == (("/sys/module/teo/parameters/util_awareness", "0"),)


@pytest.mark.parametrize(
    "body, key, words",
    [
        ("configs: [frag.config]\n", "name", "missing"),
        ("name: Bad Name\nconfigs: [frag.config]\n", "name (line 1)", "lowercase"),
        ("name: v\nconfigs: [frag.config]\npatchez: []\n", "patchez (line 3)", "unknown key"),
        ("name: v\nconfigs: [frag.config]\npatches: [nope.patch]\n", "patches[0] (line 3)", "not found"),
        ("name: v\nconfigs: [frag.config]\npatches: [frag.config]\n", "patches[0] (line 3)", ".patch"),
        ("name: v\n", "configs", "at least one"),
        ("name: v\nconfigs: [frag.config]\nbase: {git: /x}\n", "base (line 3)", "needs a ref"),
        ("name: v\nconfigs: [frag.config]\nbase: {dir: ., git: /x}\n", "base (line 3)", "exactly one"),
        ("name: v\nconfigs: [frag.config]\nbase: {dir: .}\n", "base.dir (line 3)", "not a kernel source tree"),
        ("name: v\nconfigs: [frag.config]\nbase: {debian: linux-image}\n", "base.debian (line 3)", "Debian package"),
        ("name: v\nconfigs: [frag.config]\nknobs:\n  /etc/passwd: 1\n", "knobs./etc/passwd (line 4)", "/sys/"),
        ("name: v\nconfigs: [frag.config]\nmodules:\n  - {name: m, params: {a: 'x y'}}\n", "modules[0] (line 4).params.a", "spaces"),
        ("name: v\nconfigs: [frag.config]\narm64: maybe\n", "arm64 (line 3)", "expected a mapping"),
        ("name: v\nconfigs: [frag.config]\narch: riscv\n", "arch (line 3)", "expected one of x86_64, arm64"),
        ("name: v\nconfigs: [frag.config]\narch: arm64\narm64: {}\n", "arm64 (line 4)", "for arm64 already"),
        ("name: v\nconfigs: [frag.config]\narm64: {base: debian}\n", "arm64.base (line 3)", "cannot be replaced"),
        ("name: v\nconfigs: [frag.config]\narm64: {configs: [nope.config]}\n", "arm64.configs[0] (line 3)", "not found"),
        ("name: v\nconfigs: [frag.config\n", "line 3", "not valid YAML"),
    ],
)
def test_bad_spec_names_file_and_key(tmp_path, body, key, words):
    p = write_spec(tmp_path, body)
    with pytest.raises(SpecError) as exc:
        load_variant_spec(p)
    assert exc.value.path == str(p)
    assert exc.value.key == key, str(exc.value)
    assert words in exc.value.problem
    assert str(exc.value).startswith(f"{p}: {key}: ")


def test_missing_file_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_variant_spec(tmp_path / "absent.yml")


def test_cli_check_reports_ok_and_errors(tmp_path):
    good = KERNELS / "iowait-boost/no-iowait-boost.yml"
    r = subprocess.run([sys.executable, "-m", "lisa_ext.cli", "kernel", "check", str(good)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert "ok: variant 'no-iowait-boost'" in r.stdout and "3 patch(es)" in r.stdout  # board support x2 + iowait_boost_cap
    bad = write_spec(tmp_path, "name: v\nconfigs: [frag.config]\npatches: [missing.patch]\n")
    r = subprocess.run([sys.executable, "-m", "lisa_ext.cli", "kernel", "check", str(bad)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2
    assert f"{bad}: patches[0] (line 3): file 'missing.patch' not found" in r.stderr


def test_arch_sections_resolve_per_architecture():
    teo = KERNELS / "teo-util/teo.yml"
    x86, arm64 = load_variant_spec(teo), load_variant_spec(teo, arch="arm64")
    assert (x86.arch, arm64.arch) == ("x86_64", "arm64") and x86.arches == ("x86_64", "arm64")
    # the same patches and cmdline on both boards; the board's config and emulation modules differ
    assert x86.patches == arm64.patches and x86.cmdline == arm64.cmdline
    assert [c.name for c in arm64.configs] == ["vboard-arm64.config"]
    assert [m.name for m in arm64.modules] == ["lisa_emu_cpuidle", "lisa_emu_cpufreq", "lisa_sched_tp"]
    assert dict(x86.modules[0].params) == {"table": "hi3660-little"}
    # the three teo-util variants still share one build on arm64
    assert len({(load_variant_spec(p, arch="arm64").patches, load_variant_spec(p, arch="arm64").configs)
                for p in KERNELS.glob("teo-util/*.yml")}) == 1
    eas = load_variant_spec(KERNELS / "eas/baseline.yml")
    assert eas.arch == "arm64" and eas.arches == ("arm64",)
    with pytest.raises(SpecError, match=r"baseline.yml: x86_64: the variant is for arm64"):
        load_variant_spec(KERNELS / "eas/baseline.yml", arch="x86_64")


def test_the_arm64_studies_share_one_kernel_build():
    eas = load_variant_spec(KERNELS / "eas/baseline.yml")
    teo = load_variant_spec(KERNELS / "teo-util/teo.yml", arch="arm64")
    assert (eas.patches, eas.configs) == (teo.patches, teo.configs)
