"""Config fragments: requests that do not take effect are reported with file and line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lisa_ext.kernel.config import check_fragments, parse_fragment

REPO = Path(__file__).resolve().parents[1]


def test_parse_fragment_reads_values_and_not_set(tmp_path):
    f = tmp_path / "a.config"
    f.write_text("# comment\nCONFIG_A=y\n\n# CONFIG_B is not set\nCONFIG_C=\"text\"\n")
    assert parse_fragment(f) == {"CONFIG_A": ("y", 2), "CONFIG_B": ("n", 4), "CONFIG_C": ('"text"', 5)}


def test_check_fragments_later_fragment_wins_and_misses_are_located(tmp_path):
    base = tmp_path / "base.config"
    base.write_text("CONFIG_A=y\nCONFIG_B=y\nCONFIG_HZ=250\n")
    extra = tmp_path / "extra.config"
    extra.write_text("# CONFIG_A is not set\nCONFIG_D=m\n")
    final = tmp_path / ".config"
    final.write_text("CONFIG_A=y\nCONFIG_B=y\nCONFIG_HZ=100\n# CONFIG_D is not set\n")
    misses = check_fragments([base, extra], final)
    assert [(m.fragment.name, m.line, m.symbol, m.requested, m.actual) for m in misses] == [
        ("base.config", 3, "CONFIG_HZ", "250", "100"),
        ("extra.config", 1, "CONFIG_A", "n", "y"),
        ("extra.config", 2, "CONFIG_D", "m", "n"),
    ]
    assert str(misses[0]) == f"{base}:3: CONFIG_HZ=250 requested, final .config has CONFIG_HZ=100"


@pytest.mark.skipif(
    not Path("/usr/src/linux-source-6.12.tar.xz").exists() and os.environ.get("CI") != "true",
    reason="Debian's linux-source-6.12 is not installed",
)
def test_kconfig_reports_options_that_did_not_take_effect(tmp_path):
    """Real kconfig run: a symbol with an unmet dependency and a symbol that does not exist.

    Only the extra fragment's two bad lines are reported: every request of the
    shipped vboard fragment is honoured.
    """
    assert shutil.which("make") and shutil.which("gcc"), "kernel build tools missing"
    frag = tmp_path / "extra.config"
    # HALTPOLL_CPUIDLE depends on KVM_GUEST, which the vboard fragment leaves off
    frag.write_text("CONFIG_HALTPOLL_CPUIDLE=y\nCONFIG_LISA_EXT_NO_SUCH_OPTION=y\nCONFIG_PRINTK=y\n")
    spec = tmp_path / "v.yml"
    spec.write_text(f"name: v\nconfigs: [{REPO}/kernels/configs/vboard.config, {frag}]\n")
    r = subprocess.run([sys.executable, "-m", "lisa_ext.cli", "kernel", "check", "--kconfig", str(spec)],
                       capture_output=True, text=True, cwd=REPO, timeout=900)
    assert r.returncode == 1, r.stdout + r.stderr
    reported = [line.strip() for line in r.stdout.splitlines() if "did not take effect" in line]
    assert reported == [
        f"config option did not take effect: {frag}:1: CONFIG_HALTPOLL_CPUIDLE=y requested, final .config has CONFIG_HALTPOLL_CPUIDLE=n",
        f"config option did not take effect: {frag}:2: CONFIG_LISA_EXT_NO_SUCH_OPTION=y requested, final .config has CONFIG_LISA_EXT_NO_SUCH_OPTION=n",
    ]
