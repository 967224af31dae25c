"""Under CI=true a skip fails unless it declares an external reason (tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXTERNAL

CONFTEST = Path(__file__).with_name("conftest.py")

SKIPPING = '''
import pytest

def test_missing_tool():
    pytest.skip("trace-cmd is not installed")

@pytest.mark.skipif(True, reason="needs a tool")
def test_marked():
    pass

def test_phone():
    pytest.skip("{external}no Android device attached")

def test_runs():
    assert True
'''


def _pytest(directory: Path, ci: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", str(directory)],
                          capture_output=True, text=True, env=env, cwd=directory, timeout=120)


@pytest.fixture
def suite(tmp_path):
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(SKIPPING.format(external=EXTERNAL))
    return tmp_path


def test_skips_fail_under_ci_unless_external(suite):
    proc = _pytest(suite, ci=True)
    assert proc.returncode == 1, proc.stdout
    assert "FAILED test_sample.py::test_missing_tool" in proc.stdout
    assert "ERROR test_sample.py::test_marked" in proc.stdout  # a skipif mark skips at setup
    assert "test_sample.py::test_phone" not in proc.stdout.replace("SKIPPED [1] test_sample.py", "")
    assert "1 failed, 1 passed, 1 skipped, 1 error" in proc.stdout  # the external one stays a skip
    assert "trace-cmd is not installed" in proc.stdout


def test_module_level_skip_fails_under_ci(suite):
    (suite / "test_sample.py").unlink()
    (suite / "test_module_skip.py").write_text(
        'import pytest\npytest.skip("shared traces not found", allow_module_level=True)\n')
    assert "shared traces not found" in _pytest(suite, ci=True).stdout
    assert _pytest(suite, ci=True).returncode != 0
    assert "1 skipped" in _pytest(suite, ci=False).stdout


def test_skips_stay_skips_outside_ci(suite):
    proc = _pytest(suite, ci=False)
    assert proc.returncode == 0, proc.stdout
    assert "1 passed, 3 skipped" in proc.stdout
