"""The quickstart's report (notebook -> offline HTML) and its preflight message."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from campaign_helpers import REPO
import page_check
from lisa_ext import quickstart
from lisa_ext.report.readable import format_number
from lisa_ext.study import execute_notebook
from lisa_ext.workbench import workbench_path

SAMPLE = REPO / "data" / "samples" / "wq-affinity"


def test_notebook_report_from_sample(tmp_path):
    html = execute_notebook(workbench_path("notebooks", "quickstart.ipynb"), tmp_path / "quickstart.html",
                            {"campaign_dir": str(SAMPLE)})
    text = html.read_text()
    # the figure is inline SVG, and nothing is fetched from the network
    assert re.search(r'<svg[^>]+xmlns="http://www.w3.org/2000/svg"', text)
    assert not re.search(r'<script[^>]+src="http', text)
    assert "Traceback" not in text  # papermill also raises on any failing cell
    # the per-run tables hold every run's value, as stored in result.json (as a reader reads it)
    for result_path in SAMPLE.glob("runs/*/*/*/result.json"):
        result = json.loads(result_path.read_text())
        metric = {"fio-randread": "read_iops", "rtapp-periodic": "medium_wu_lat_mean"}[result["workload"]]
        value = next(m["value"] for m in result["metrics"] if m["name"] == metric)
        assert f">{format_number(value)}<" in text, (result_path, format_number(value))
    executed = json.loads((tmp_path / "quickstart.ipynb").read_text())
    assert executed["cells"][1]["metadata"]["tags"] == ["parameters"]
    check = page_check.check_page(html)
    assert check.seen["svg_figures"] and check.seen["tables"] >= 4, check.seen
    assert not check.findings, f"what a reader trips over on the page:\n{check.report()}"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run the command as an unprivileged user")
def test_quickstart_without_root_says_what_to_do(tmp_path):
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         sys.executable, "-m", "lisa_ext.cli", "quickstart", "--data", str(tmp_path / "d"),
         "--out", str(tmp_path / "q.html")],
        capture_output=True, text=True, cwd="/", env={**os.environ, "HOME": str(tmp_path)})
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "lisa-ext quickstart: error: the quickstart needs root, because it writes sysfs knobs and "
        "records kernel traces: run it again as root (e.g. `sudo make run`)")
    assert not (tmp_path / "d").exists()
