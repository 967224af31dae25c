"""`lisa-ext campaign check SPEC` and `lisa-ext kernel status SPEC`, offline: what a spec would
run and whether its kernels are built, without a target or a build; bad input is one line
naming the file and key, exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lisa_ext.campaign.spec import load_spec
from lisa_ext.kernel.build import build_status
from lisa_ext.study import list_studies

REPO = Path(__file__).resolve().parents[1]
LISA_EXT = Path(sys.executable).with_name("lisa-ext")


def _run(*args: str, cwd: Path = REPO, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, **({"LISA_EXT_CACHE": str(cache)} if cache else {}))
    return subprocess.run([str(LISA_EXT), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def test_every_study_spec_checks_and_says_what_it_runs():
    studies = list_studies()
    proc = _run("campaign", "check", *(str(s.spec.relative_to(REPO)) for s in studies))
    assert proc.returncode == 0, proc.stderr
    blocks = proc.stdout.split("\nnotebooks/")
    assert len(blocks) == len(studies)
    for study, block in zip(studies, blocks):
        spec = load_spec(study.spec)
        runs = len(spec.variants) * len(spec.workloads) * spec.iterations
        assert block.splitlines()[0].endswith(f"= {runs} runs"), block
        for variant in spec.variants:
            assert f"  variant {variant.name}: " in block
        if "smoke" in spec.raw:
            smoke = load_spec(study.spec, smoke=True)
            assert f"= {len(smoke.variants) * len(smoke.workloads) * smoke.iterations} runs" in block


def test_a_bad_spec_is_one_line_naming_file_and_key(tmp_path):
    spec = tmp_path / "bad.yml"
    spec.write_text((REPO / "notebooks" / "quickstart.yml").read_text().replace(
        "target: ../target-configs/local.yml", f"target: {REPO}/target-configs/local.yml")
        .replace("iterations: 3", "iterations: three"))
    proc = _run("campaign", "check", str(spec))
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and str(spec) in proc.stderr and "iterations" in proc.stderr


def test_a_missing_kernel_variant_is_named(tmp_path):
    text = (REPO / "notebooks" / "teo-util.yml").read_text().replace("../", f"{REPO}/")
    spec = tmp_path / "teo.yml"
    spec.write_text(text.replace(f"{REPO}/kernels/teo-util/menu.yml", str(tmp_path / "nope.yml")))
    proc = _run("campaign", "check", str(spec))
    assert proc.returncode == 2 and "variants[0].kernel" in proc.stderr and "nope.yml" in proc.stderr


def test_kernel_status_in_an_empty_cache_says_not_built_and_what_to_run(tmp_path):
    proc = _run("kernel", "status", "notebooks/teo-util.yml", "notebooks/wq-affinity.yml", cache=tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert "notebooks/wq-affinity.yml: no variant names a kernel" in lines[0]
    status = {line.split()[0]: line for line in lines[1:]}
    assert set(status) == {"teo-util/menu", "teo-util/teo", "teo-util/teo-util"}
    hashes = {line.split()[4] for line in status.values()}  # "NAME (SPEC) not built HASH; ..."
    assert len(hashes) == 1  # one build: the three differ by cmdline only
    assert "not built" in status["teo-util/teo"] and "one build with teo-util/menu (kernels/teo-util/menu.yml), " \
        "teo-util/teo-util (kernels/teo-util/teo.yml)" in status["teo-util/teo"]
    assert status["teo-util/menu"].endswith("lisa-ext kernel build kernels/teo-util/menu.yml")


def test_kernel_status_names_the_spec_a_shared_build_was_made_for(tmp_path, monkeypatch):
    # another study's "baseline": idle-gating's, its files by absolute path, so the same build
    other = tmp_path / "other-study" / "baseline.yml"
    other.parent.mkdir()
    other.write_text((REPO / "kernels" / "idle-gating" / "baseline.yml").read_text()
                     .replace("../", f"{REPO}/kernels/"))
    cache = tmp_path / "cache"
    monkeypatch.setenv("LISA_EXT_CACHE", str(cache))
    ours = build_status(REPO / "kernels" / "idle-gating" / "baseline.yml")
    assert ours.hash == build_status(other).hash and not ours.built
    # the other study's build in the cache, recorded as build_variant records one
    ours.directory.mkdir(parents=True)
    (ours.directory / "artefacts.json").write_text(json.dumps({"hash": ours.hash, "variant": "baseline",
                                                               "spec": str(other)}))
    proc = _run("kernel", "status", "kernels/idle-gating/baseline.yml", str(other), cache=cache)
    assert proc.returncode == 0, proc.stderr
    mine, theirs = proc.stdout.splitlines()
    assert mine.startswith("baseline (kernels/idle-gating/baseline.yml) ")
    assert f"built {ours.hash[:12]} for baseline ({other}); one build with baseline ({other})" in mine
    assert theirs.startswith(f"baseline ({other}) ") and " for " not in theirs
