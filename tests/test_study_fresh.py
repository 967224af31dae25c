"""``lisa-ext study run NAME --fresh``: the study's earlier runs are discarded and its campaign
runs from the start (a plain rerun resumes and runs nothing); a directory lisa-ext did not make
is refused before anything runs; ``--fresh`` with ``--no-run`` is a usage error."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import nbformat
import pytest

from campaign_helpers import LISA_EXT, LOCAL_TARGET, require_live


@pytest.fixture
def workbench(tmp_path) -> Path:
    """A workbench holding one small study: hackbench on this machine, one run, no tracing."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "tiny.yml").write_text(f"""\
name: tiny
target: {LOCAL_TARGET}
iterations: 1
variants:
  - name: base
workloads:
  - name: hb
    kind: hackbench
    groups: 1
    loops: 10
""")
    parameters = nbformat.v4.new_code_cell('campaign_dir = "data/tiny"\nreport_dir = None\nsmoke = False')
    parameters.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook()
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.language_info = {"name": "python"}
    nb.cells = [parameters, nbformat.v4.new_code_cell("print(campaign_dir)")]
    nbformat.write(nb, notebooks / "tiny.ipynb")
    return tmp_path


def _study_run(workbench: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, LISA_EXT_WORKBENCH=str(workbench))
    return subprocess.run(LISA_EXT + ["study", "run", "tiny", "--no-progress", *args], capture_output=True,
                          text=True, cwd=workbench, env=env, timeout=900)


def _run_started(workbench: Path) -> str:
    meta = json.loads((workbench / "data" / "tiny" / "runs" / "base" / "hb" / "0" / "meta.json").read_text())
    return json.dumps(meta, sort_keys=True)


@pytest.mark.live
def test_fresh_discards_the_earlier_runs(workbench):
    require_live()
    first = _study_run(workbench)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "campaign tiny: 1 runs done, 0 failed" in first.stdout
    earlier = _run_started(workbench)
    again = _study_run(workbench)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 runs done, 0 failed, 1 already done" in again.stdout  # a plain rerun resumes
    assert _run_started(workbench) == earlier
    fresh = _study_run(workbench, "--fresh")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert "campaign tiny: 1 runs done, 0 failed ->" in fresh.stdout and "already done" not in fresh.stdout
    assert _run_started(workbench) != earlier
    assert (workbench / "out" / "tiny.html").is_file()


def test_fresh_refuses_a_directory_lisa_ext_did_not_make(workbench):
    mine = workbench / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    proc = _study_run(workbench, "--fresh", "--data", str(mine))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert str(mine) in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert (mine / "notes.txt").read_text() == "keep me"
    assert not (workbench / "out" / "tiny.html").exists()


def test_fresh_with_no_run_is_a_usage_error(workbench):
    proc = _study_run(workbench, "--fresh", "--no-run")
    assert proc.returncode == 2
    assert "error: argument --no-run: not allowed with argument --fresh" in proc.stderr, proc.stderr


@pytest.mark.live
def test_a_study_edited_after_its_runs_says_how_to_start_over(workbench):
    require_live()
    first = _study_run(workbench)
    assert first.returncode == 0, first.stdout + first.stderr
    spec = workbench / "notebooks" / "tiny.yml"
    spec.write_text(spec.read_text().replace("loops: 10", "loops: 20"))
    again = _study_run(workbench)
    assert again.returncode == 2, again.stdout + again.stderr
    line, = again.stderr.strip().splitlines()
    assert "differs from the spec this campaign was started with" in line
    assert line.endswith("or start it over: lisa-ext study run tiny --fresh (its runs are discarded)"), line
    assert _study_run(workbench, "--fresh").returncode == 0
