"""`lisa-ext study new NAME`: a study's spec, kernel variants or knob values, and a notebook whose page
renders on the committed sample before any run, and passes the page check."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import pytest

import page_check
from lisa_ext.campaign.spec import load_spec
from lisa_ext.errors import UserError
from lisa_ext.kernel.spec import load_variant_spec
from lisa_ext.studies.runs import per_run_analysis
from lisa_ext.study import execute_notebook
from lisa_ext.studies.template import CONCLUSION_PLACEHOLDER, CONCLUSION_TAG, SAMPLE, write_study

REPO = Path(__file__).resolve().parents[1]
LISA_EXT = Path(sys.executable).with_name("lisa-ext")
FEATURES = "/sys/kernel/debug/sched/features"


@pytest.fixture
def workbench(tmp_path):
    """A copy of the workbench's inputs, as a user's own checkout would have them."""
    for name in ("notebooks", "kernels", "target-configs"):
        shutil.copytree(REPO / name, tmp_path / name)
    sample = tmp_path / SAMPLE
    shutil.copytree(REPO / SAMPLE, sample)
    return tmp_path


def test_a_knob_study_is_a_valid_spec_and_a_notebook(workbench):
    written = write_study("my-feature", knob=FEATURES, values=["RUN_TO_PARITY", "NO_RUN_TO_PARITY"],
                          root=workbench)
    assert [p.relative_to(workbench).as_posix() for p in written] == [
        "notebooks/my-feature.yml", "notebooks/my-feature.ipynb"]
    spec = load_spec(written[0])
    assert [(v.name, v.knobs) for v in spec.variants] == [
        ("run-to-parity", {FEATURES: "RUN_TO_PARITY"}), ("no-run-to-parity", {FEATURES: "NO_RUN_TO_PARITY"})]
    assert [w.kind for w in spec.workloads] == ["schbench", "hackbench"]
    assert {"sched:sched_process_exec", "task:task_newtask"} <= set(spec.trace.events)
    smoke = load_spec(written[0], smoke=True)
    assert smoke.iterations == 2 and smoke.workloads[0].options["runtime-s"] == 3
    nb = nbformat.read(written[1], as_version=4)
    nbformat.validate(nb)
    assert [c.metadata.get("tags") for c in nb.cells if c.metadata.get("tags")] == [["parameters"], ["conclusion"]]
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for call in ("page.status()", "page.knobs()", "page.cover_table()", "page.mechanism_figure(", "study.explore_run("):
        assert call in code
    assert "BASELINE = 'run-to-parity'" in code and "TASKS = 'exec:schbench'" in code


def test_numeric_values_are_named_after_their_knob(workbench):
    knob = "/sys/devices/system/cpu/cpufreq/schedutil/rate_limit_us"
    write_study("rate-limit", knob=knob, values=["0", "10000"], workloads=["rtapp"], root=workbench)
    spec = load_spec(workbench / "notebooks" / "rate-limit.yml")
    assert [(v.name, v.knobs) for v in spec.variants] == [
        ("rate-limit-us-0", {knob: "0"}), ("rate-limit-us-10000", {knob: "10000"})]
    code = "\n".join(c.source for c in nbformat.read(workbench / "notebooks" / "rate-limit.ipynb", as_version=4).cells)
    assert "BASELINE = 'rate-limit-us-0'" in code and "bursty_perf_index_mean" in code


def test_a_kernel_study_writes_its_variants(workbench):
    written = write_study("my-patch", kernel=True, workloads=["rtapp"], root=workbench)
    names = [p.relative_to(workbench).as_posix() for p in written]
    assert names == ["kernels/my-patch/baseline.yml", "kernels/my-patch/patched.yml", "notebooks/my-patch.yml",
                     "notebooks/my-patch.ipynb"]
    spec = load_spec(written[2])
    assert [v.kernel.name for v in spec.variants] == ["baseline.yml", "patched.yml"]
    assert all(load_variant_spec(v.kernel).base.kind == "debian" for v in spec.variants)


@pytest.mark.parametrize("kwargs, problem", [
    ({"name": "My Study", "knob": FEATURES, "values": ["A", "B"]}, "lower-case letters"),
    ({"name": "x", "knob": FEATURES, "values": ["A"]}, "at least two values"),
    ({"name": "x", "knob": FEATURES, "values": ["A", "B"], "kernel": True}, "either kernel variants"),
    ({"name": "x", "knob": FEATURES, "values": ["A", "B"], "workloads": ["geekbench"]}, "a new study starts from"),
    ({"name": "x", "knob": "/etc/passwd", "values": ["A", "B"]}, "knob"),
])
def test_bad_requests_say_what_is_expected(workbench, kwargs, problem):
    name = kwargs.pop("name")
    with pytest.raises(UserError, match=problem):
        write_study(name, root=workbench, **kwargs)
    assert not (workbench / "notebooks" / f"{name}.yml").exists()


def test_nothing_is_overwritten(workbench):
    write_study("twice", knob=FEATURES, values=["A", "NO_A"], root=workbench)
    with pytest.raises(UserError, match="already there"):
        write_study("twice", knob=FEATURES, values=["A", "NO_A"], root=workbench)


def test_the_page_renders_on_the_sample_before_any_run(workbench, monkeypatch):
    env = dict(os.environ, LISA_EXT_WORKBENCH=str(workbench))
    proc = subprocess.run([str(LISA_EXT), "study", "new", "my-feature", "--knob", FEATURES,
                           "--values", "RUN_TO_PARITY,NO_RUN_TO_PARITY"], capture_output=True, text=True,
                          cwd=workbench, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    page = workbench / "out" / "my-feature.html"
    assert f"page, on the committed sample campaign until the study has runs: {page}" in proc.stdout
    text = page.read_text()
    assert "Sample data:" in text and "check the pipeline" in text
    assert "page.status()" not in text  # the code is hidden
    check = page_check.check_page(page)
    assert check.seen["svg_figures"] and check.seen["bokeh_plots"] and check.seen["tables"] >= 3, check.seen
    # the one thing left to the author: the conclusion
    assert [f["check"] for f in check.findings] == ["conclusion placeholder"], check.report()

    notebook = workbench / "notebooks" / "my-feature.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    conclusion, = [c for c in nb.cells if CONCLUSION_TAG in c.metadata.get("tags", [])]
    assert CONCLUSION_PLACEHOLDER in conclusion.source
    conclusion.source = "## Conclusion\n\nThe sample's three scopes are within their noise of each other."
    nbformat.write(nb, notebook)
    monkeypatch.setenv("LISA_EXT_WORKBENCH", str(workbench))
    page = execute_notebook(notebook, workbench / "out" / "my-feature.html",
                            {"campaign_dir": "data/my-feature", "report_dir": "out/my-feature-report"})
    check = page_check.check_page(page)
    assert not check.findings, check.report()


def test_a_figure_with_nothing_to_show_says_why():
    """The sample traced no sched_process_exec: the error says so, not only "nothing found" (a
    decoder to rebuild after an update was hidden the same way, in warnings below the error)."""
    sample = Path(__file__).resolve().parents[1] / "data" / "samples" / "wq-affinity-board"
    with warnings.catch_warnings(), pytest.raises(UserError) as error:
        warnings.simplefilter("ignore")
        per_run_analysis(sample, "wakeup_latency", "df_wakeup_latencies", tasks="exec:schbench")
    assert "sched:sched_process_exec" in str(error.value) and "system/low/0" in str(error.value)


def test_a_new_study_says_what_its_first_board_run_builds(tmp_path, monkeypatch):
    from lisa_ext.study import first_board_note

    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "empty-cache"))
    repo = Path(__file__).resolve().parents[1]
    note = first_board_note(load_spec(repo / "notebooks" / "run-to-parity.yml"))
    assert note.startswith("the x86_64 board: its kernel (kernels/iowait-boost/baseline.yml) and its QEMU not built")
    assert "about 9 min on 2 idle cores" in note
    assert note.endswith("start `lisa-ext vboard up` now in another terminal, and write the study meanwhile")
    # a study on this machine boots no board
    assert first_board_note(load_spec(repo / "notebooks" / "quickstart.yml")) is None


def test_vboard_up_says_what_it_builds_before_it_starts(tmp_path, monkeypatch):
    from lisa_ext.study import first_board_note
    from lisa_ext.vboard.board import VirtualBoard
    from lisa_ext.vboard.cli import _first_build_note

    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "empty-cache"))
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)
    baseline = repo / "kernels" / "iowait-boost" / "baseline.yml"
    note = _first_build_note(VirtualBoard(), baseline)
    assert note.startswith("the x86_64 board: its kernel (kernels/iowait-boost/baseline.yml) and its QEMU not built "
                           "in this cache yet, built now, once"), note
    # the cost is the one `study new` quotes
    study_note = first_board_note(load_spec(repo / "notebooks" / "run-to-parity.yml"))
    cost = note.split("(both from an empty cache: ")[1].split(")")[0]
    assert "about 9 min on 2 idle cores" in cost and f"(both: {cost})" in study_note
    # a spec that is refused gets no note: the deploy names the file and key
    broken = tmp_path / "broken.yml"
    broken.write_text("name: broken\npatches: 3\n")
    assert _first_build_note(VirtualBoard(), broken) is None
