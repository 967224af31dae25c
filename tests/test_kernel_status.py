"""``lisa-ext kernel status`` names each row's variant and its spec file: every study has a
``baseline``, and rows that said only that could not be told apart."""

from __future__ import annotations

import re
import subprocess
import sys

from campaign_helpers import REPO

BASELINES = ("kernels/eas/baseline.yml", "kernels/idle-gating/baseline.yml", "kernels/iowait-boost/baseline.yml")


def _status(*specs: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "lisa_ext.cli", "kernel", "status", *specs],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout.splitlines()


def test_variants_of_one_name_are_told_apart_by_their_spec():
    rows = _status(*BASELINES)
    assert len(rows) == 3, rows
    for row, spec in zip(rows, BASELINES):
        assert re.match(rf"baseline \({re.escape(spec)}\)\s+(built|not built|unknown)", row), row


def test_a_campaign_row_names_its_variant_and_kernel_spec():
    rows = _status("notebooks/teo-util.yml")
    labels = [re.match(r"(\S+ \(\S+\))\s", row).group(1) for row in rows]
    assert labels == ["teo-util/menu (kernels/teo-util/menu.yml)", "teo-util/teo (kernels/teo-util/teo-no-util.yml)",
                      "teo-util/teo-util (kernels/teo-util/teo.yml)"], rows
