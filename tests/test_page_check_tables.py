"""The tables a study page shows pass the page check's table rules: the knobs read back as one
row per variant and path (two modules' ``timing`` and two policies' governor apart, each once), the
cover-letter table one kind of mean per table with its reason and every unbounded interval saying
why, a label with its own parentheses taking the unit inside them."""

from __future__ import annotations

from pathlib import Path

import nbformat

import page_check
from lisa_ext import study
from lisa_ext.report.build import campaign_metrics
from lisa_ext.report.readable import knobs_table, metric_label
from lisa_ext.report.tables import render_markdown
from lisa_ext.stats import compare

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wq-affinity-board"
_KNOBS = {"/sys/module/lisa_emu_cpuidle/parameters/timing": "faithful",
          "/sys/module/lisa_emu_cpufreq/parameters/timing": "faithful",
          "/sys/devices/system/cpu/cpufreq/policy0/scaling_governor": "schedutil",
          "/sys/devices/system/cpu/cpufreq/policy4/scaling_governor": "schedutil"}


def _page(tmp_path: Path, *tables: str) -> Path:
    nb = nbformat.v4.new_notebook()
    for i, table in enumerate(tables):
        cell = nbformat.v4.new_code_cell("")
        cell.outputs = [nbformat.v4.new_output("execute_result", {"text/html": table}, execution_count=i + 1)]
        nb.cells.append(cell)
    return study.export_notebook(nb, tmp_path / "tables.html")


def test_knobs_read_back_once_per_path(tmp_path):
    runs = [(variant, path, value) for variant in ("base", "patched") for _ in range(3)
            for path, value in _KNOBS.items()]
    html = knobs_table(runs).to_html()
    for path in _KNOBS:
        assert html.count(path) == 2  # once per variant
    found = page_check.check_page(_page(tmp_path, html))
    assert found.seen["tables"] == 1 and not found.findings, found.report()


def test_the_cover_table_quotes_one_mean_per_table_and_says_why_unbounded(tmp_path):
    table = study.cover_table(SAMPLE)
    kinds = set(table.frame["mean_kind"])
    assert kinds == {"amean", "hmean"}  # the sample's rates and latencies: both kinds
    html = table._repr_html_()
    assert html.count("<table") == 2 and "Hmean ± sd" in html and "Hmean: the harmonic mean" in html
    assert "unbounded: too few runs" in html and ">unbounded<" not in html
    found = page_check.check_page(_page(tmp_path, html))
    assert found.seen["tables"] == 2 and not found.findings, found.report()


def test_a_comparison_naming_two_means_in_its_rows_is_found(tmp_path):
    # the report's Markdown comparison tags each row with its mean: "hmean read_iops", "amean ..."
    cmp = compare(campaign_metrics(SAMPLE, traces=False), baseline="system")
    assert set(cmp["mean_kind"]) == {"amean", "hmean"}
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [nbformat.v4.new_output("display_data", {"text/markdown": render_markdown(cmp)})]
    nb.cells.append(cell)
    found = page_check.check_page(study.export_notebook(nb, tmp_path / "comparison.html"))
    assert found.seen["tables"] >= 1
    assert "mixed means" in {f["check"] for f in found.findings}, found.report()


def test_a_label_with_its_own_parentheses_takes_the_unit_inside():
    assert metric_label("energy", "J", {"energy": "energy (board model)"}) == "energy (board model, J)"
    assert metric_label("sleep_ms_median") == "sleep median (ms)"
