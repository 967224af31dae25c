"""A spec's smoke: size, --target replacing its platform, and requires: checked on a real target."""

from __future__ import annotations

import pytest

from campaign_helpers import LOCAL_TARGET, write_spec
from lisa_ext.campaign.requirements import platform_facts, unmet_requirements
from lisa_ext.campaign.spec import load_spec
from lisa_ext.errors import SpecError
from lisa_ext.target import connect

SPEC = """\
name: t
target: @TARGET@
iterations: 5
trace:
  events: [sched:sched_switch]
  iterations: [0, 3]
variants:
  - name: a
workloads:
  - name: io
    kind: fio
    options: {rw: randread, bs: 4k, runtime: 30, time_based: 1, size: 8M}
  - name: rt
    kind: rtapp
    duration-s: 20
    tasks: {small: {duty-cycle-pct: 10, period-ms: 16}}
requires: {llc-domains: 1}
smoke:
  iterations: 2
  workloads:
    io: {options: {rw: randread, bs: 4k, runtime: 1, time_based: 1, size: 8M}}
    rt: {duration-s: 1}
"""


def test_smoke_overrides_apply_only_when_asked(tmp_path):
    path = write_spec(tmp_path / "spec.yml", SPEC)
    full, smoke = load_spec(path), load_spec(path, smoke=True)
    assert (full.iterations, smoke.iterations) == (5, 2)
    assert full.workloads[1].options["duration-s"] == 20 and smoke.workloads[1].options["duration-s"] == 1
    assert smoke.workloads[0].options["options"]["runtime"] == 1
    # traced iterations beyond the smoke size are dropped, the others kept
    assert smoke.trace.iterations == (0,)
    # the stored copy is what ran
    assert "smoke" not in smoke.raw and smoke.raw["iterations"] == 2
    assert smoke.smoke and not full.smoke


def test_smoke_errors_name_the_field(tmp_path):
    path = write_spec(tmp_path / "spec.yml", SPEC.replace("    rt: {duration-s: 1}", "    nope: {duration-s: 1}"))
    with pytest.raises(SpecError, match=r"smoke\.workloads\.nope.*not a workload of this spec; allowed: io, rt"):
        load_spec(path, smoke=True)
    bad = write_spec(tmp_path / "bad.yml", SPEC.replace("    rt: {duration-s: 1}", "    rt: {duration-s: -1}"))
    with pytest.raises(SpecError, match=r"workloads\[1\]\.duration-s"):
        load_spec(bad, smoke=True)
    none = write_spec(tmp_path / "none.yml", SPEC.split("smoke:")[0])
    with pytest.raises(SpecError, match="--smoke needs a smoke: section"):
        load_spec(none, smoke=True)


def test_target_override_replaces_the_platform(tmp_path):
    other = tmp_path / "board.yml"
    other.write_text(LOCAL_TARGET.read_text())
    spec = load_spec(write_spec(tmp_path / "spec.yml", SPEC), target=other)
    assert spec.target == other.resolve() and spec.raw["target"] == str(other.resolve())
    with pytest.raises(SpecError, match="target config .*missing.yml not found"):
        load_spec(write_spec(tmp_path / "spec.yml", SPEC), target=tmp_path / "missing.yml")


def test_requires_is_validated(tmp_path):
    with pytest.raises(SpecError, match=r"requires\.llc-domain.*unknown key"):
        load_spec(write_spec(tmp_path / "s.yml", SPEC.replace("llc-domains: 1", "llc-domain: 1")))
    with pytest.raises(SpecError, match=r"requires\.cpufreq-governors.*non-empty list"):
        load_spec(write_spec(tmp_path / "s.yml", SPEC.replace("llc-domains: 1", "cpufreq-governors: []")))


def test_requirements_read_from_this_machine():
    facts = platform_facts(connect(LOCAL_TARGET))
    # this host: one L3 shared by its CPUs, no cpuidle driver with states beyond none, no cpufreq
    with open("/sys/devices/system/cpu/cpu0/cache/index3/shared_cpu_list") as f:
        assert f.read().strip() and facts["llc-domains"] == 1
    assert unmet_requirements({"llc-domains": 1}, facts) == []
    problems = unmet_requirements({"llc-domains": 2, "cpufreq-governors": ["ondemand"]}, facts)
    assert problems[0].startswith("needs at least 2 last-level caches, the target has 1")
    assert "needs cpufreq governor(s) ondemand; policy0 offers: none (no cpufreq driver)" in problems[1]


def test_campaign_refuses_a_platform_lacking_what_it_requires(tmp_path):
    import subprocess

    from campaign_helpers import LISA_EXT

    spec = write_spec(tmp_path / "spec.yml", SPEC.replace("llc-domains: 1", "llc-domains: 2"))
    out = tmp_path / "out"
    proc = subprocess.run(LISA_EXT + ["campaign", "run", str(spec), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "cannot run on local.yml: needs at least 2 last-level caches, the target has 1" in proc.stderr
    assert not list(out.glob("runs/*/*"))


def test_android_section_replaces_the_study_on_a_phone(tmp_path):
    from campaign_helpers import REPO

    phone = REPO / "target-configs" / "android-phone.example.yml"
    spec = load_spec(REPO / "notebooks" / "teo-util.yml", target=phone, check_files=False)
    assert spec.energy == "pixel6" and {w.kind for w in spec.workloads} == {"wa"}
    assert [v.name for v in spec.variants] == ["menu", "teo", "teo-util"]
    assert all(v.kernel is None for v in spec.variants)
    board = load_spec(REPO / "notebooks" / "teo-util.yml")
    assert board.energy == "hwmon" and all(v.kernel is not None for v in board.variants)
    bad = write_spec(tmp_path / "s.yml", SPEC + "android: {name: other}\n")
    with pytest.raises(SpecError, match=r"android\.name.*cannot be replaced for Android"):
        load_spec(bad, target=phone)
