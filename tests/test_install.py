"""The package as a new user gets it: ``pip install .`` (regular and editable)
into a fresh environment, then the CLI from another working directory.

The fresh venv reuses the project venv's dependencies through a path file
(``--no-deps``), so the cost is building the wheel and its C extension once
per test (tens of seconds), not resolving LISA and Jupyter again.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TRACE = Path("/work/shared/traces/local/fio_randread_2cpu_v7.dat")
if not TRACE.exists():
    TRACE = REPO / "data/samples/wq-affinity/runs/cache/fio-randread/0/trace.dat"

pytestmark = pytest.mark.install


def _fresh_env(tmp_path: Path, editable: bool) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = next((venv / "lib").glob("python3*/site-packages"))
    # the dependencies (LISA, pandas, ...) come from this venv, on the path after the fresh one
    (purelib / "_deps_from_project_venv.pth").write_text(
        "\n".join(p for p in site.getsitepackages() if Path(p).is_dir()) + "\n")
    # build from a copy of the tracked files: a build writes build/ and
    # *.egg-info into its source tree, and an editable install points at it
    src = tmp_path / "src"
    src.mkdir()
    subprocess.run(f"git ls-files -z | xargs -0 cp --parents -t {src}", shell=True, check=True,
                   cwd=REPO, executable="/bin/bash")
    cmd = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
           "--no-deps", "--no-build-isolation", "--ignore-installed", "--quiet",
           "--no-warn-script-location", *(["-e"] if editable else []), str(src)]
    subprocess.run(cmd, check=True, cwd=tmp_path, env=_clean_env())
    return venv


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "LISA_EXT_WORKBENCH", "LISA_EXT_NO_LISA_HOOK")}


def _run(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, env=_clean_env(),
                          capture_output=True, text=True, timeout=900)


def test_regular_install_runs_from_another_directory(tmp_path):
    venv = _fresh_env(tmp_path, editable=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = _run(venv, elsewhere, "python", "-c", "import lisa_ext; print(lisa_ext.__file__)")
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(venv)), where.stdout  # not the checkout

    studies = _run(venv, elsewhere, "lisa-ext", "study", "list")
    assert studies.returncode == 0, studies.stderr
    assert {line.split()[0] for line in studies.stdout.splitlines()} >= {"quickstart", "wq-affinity"}

    stats = _run(venv, elsewhere, "lisa-ext", "trace", "stats", str(TRACE))
    assert stats.returncode == 0, stats.stderr
    assert "sched_switch" in stats.stdout

    share = venv / "share" / "lisa-ext"
    variant = share / "kernels" / "iowait-boost" / "no-iowait-boost.yml"
    check = _run(venv, elsewhere, "lisa-ext", "kernel", "check", str(variant))
    assert check.returncode == 0, check.stderr
    assert "ok: variant" in check.stdout and "3 patch(es)" in check.stdout  # board support x2 + iowait_boost_cap

    # the kernel build finds the emulation modules' sources in the installed workbench
    emu = _run(venv, elsewhere, "python", "-c",
               "from lisa_ext.kernel.build import platform_emu_dir; print(platform_emu_dir())")
    assert emu.stdout.strip() == str(share / "kernels" / "platform-emu"), emu.stderr
    assert (share / "kernels" / "platform-emu" / "lisa_emu_cpuidle.c").is_file()

    # the LISA import hook came with the wheel: plain LISA works, with our analyses
    plain = _run(venv, elsewhere, "python", "-c",
                 "from lisa.trace import Trace; from lisa.analysis.base import TraceAnalysisBase; "
                 "import lisa.analysis._proxy; "
                 "print(sorted(n for n in TraceAnalysisBase.get_analysis_classes() if n in "
                 "('idle_miss', 'wq_placement')))")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.strip() == "['idle_miss', 'wq_placement']"


def test_editable_install_has_the_lisa_hook_and_uses_the_checkout(tmp_path):
    venv = _fresh_env(tmp_path, editable=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = _run(venv, elsewhere, "python", "-c",
                 "import lisa.analysis.tasks, lisa_ext, lisa_ext.workbench as w; "
                 "print(lisa_ext.__file__); print(w.workbench_dir())")
    assert probe.returncode == 0, probe.stderr
    module, workbench = probe.stdout.split()
    assert module == str(tmp_path / "src" / "lisa_ext" / "__init__.py")
    assert workbench == str(tmp_path / "src")
