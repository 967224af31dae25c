"""The compiler cache every build shares (``lisa_ext.workbench.ccache_env``), through the real ccache
and gcc: on an empty cache an object is compiled once, with no second preprocessor run (what made
the board's first kernel build take half as long again), and a rebuild still finds it.

The kernel's and QEMU's builds take their environment from it; ``bench/kernel_cold_build.py``
times a whole kernel in each mode.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lisa_ext.kernel.build import build_env
from lisa_ext.vboard import qemu_build
from lisa_ext.workbench import ccache_env

pytestmark = pytest.mark.skipif(not shutil.which("ccache") or not shutil.which("gcc"), reason="needs ccache and gcc")

GCC = shutil.which("gcc")


def _compile(tmp_path: Path, env: dict[str, str], out: str) -> None:
    # the kernel's own way of asking for a dependency file
    subprocess.run(["ccache", "gcc", "-c", "-O2", f"-Wp,-MMD,{tmp_path / (out + '.d')}", "-o", str(tmp_path / out),
                    str(tmp_path / "probe.c")], env=env, cwd=tmp_path, check=True)


@pytest.fixture
def logged_gcc_env(tmp_path: Path, monkeypatch) -> dict[str, str]:
    """ccache_env in a cache of the test's own, with a gcc on PATH that logs each call's arguments."""
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "cache"))
    for name in [k for k in os.environ if k.startswith("CCACHE_")]:
        monkeypatch.delenv(name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcc").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "gcc-calls"}\nexec {GCC} "$@"\n')
    (bin_dir / "gcc").chmod(0o755)
    (tmp_path / "probe.c").write_text('#include <stdio.h>\nint probe(void) { return printf("x"); }\n')
    env = ccache_env(os.environ)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return env


def test_an_empty_cache_compiles_once_and_a_rebuild_hits(tmp_path, logged_gcc_env):
    _compile(tmp_path, logged_gcc_env, "first.o")
    calls = (tmp_path / "gcc-calls").read_text().splitlines()
    assert len(calls) == 1 and " -E " not in f" {calls[0]} ", calls
    (tmp_path / "first.o").unlink()
    _compile(tmp_path, logged_gcc_env, "first.o")
    assert len((tmp_path / "gcc-calls").read_text().splitlines()) == 1, "the rebuild ran the compiler"
    assert (tmp_path / "first.o").stat().st_size > 0
    stats = subprocess.run(["ccache", "--print-stats"], env=logged_gcc_env, capture_output=True, text=True,
                           check=True).stdout
    counters = dict(line.split("\t") for line in stats.splitlines() if "\t" in line)
    assert int(counters["direct_cache_hit"]) == 1 and int(counters["cache_miss"]) == 1, counters
    assert Path(logged_gcc_env["CCACHE_DIR"]) == tmp_path / "cache" / "ccache"


def test_the_kernel_and_qemu_builds_share_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path))
    monkeypatch.delenv("CCACHE_DEPEND", raising=False)
    for env in (build_env(), qemu_build._env(tmp_path / "qemu-src")):
        assert env["CCACHE_DIR"] == str(tmp_path / "ccache") and env["CCACHE_DEPEND"] == "1"


def test_a_setting_of_the_callers_is_kept(monkeypatch):
    monkeypatch.setenv("CCACHE_DEPEND", "0")
    monkeypatch.setenv("CCACHE_DIR", "/elsewhere")
    env = ccache_env(os.environ)
    assert env["CCACHE_DEPEND"] == "0" and env["CCACHE_DIR"] == "/elsewhere"
