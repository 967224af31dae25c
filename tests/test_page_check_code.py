"""A study page shows its narrative, tables and figures, not its code: ``export_notebook`` hides the
code cells unless asked (``--show-code``), a figure cell stays known as one, and the page check
fails a page that shows code it was meant to hide."""

from __future__ import annotations

from pathlib import Path

import nbformat

import page_check
from lisa_ext import study

_SECRET = "the_answer = 6 * 7"


def _notebook():
    nb = nbformat.v4.new_notebook()
    table = nbformat.v4.new_output("execute_result", {"text/html": "<table><thead><tr><th>Variant</th>"
                                                                   "<th>answer</th></tr></thead><tbody><tr>"
                                                                   "<th>base</th><td>42</td></tr></tbody></table>"},
                                   execution_count=1)
    code = nbformat.v4.new_code_cell(f"{_SECRET}\nshow(the_answer)")
    code.outputs = [table]
    figure = nbformat.v4.new_code_cell("study.show_figure(fig)")  # a figure that rendered nothing
    nb.cells = [nbformat.v4.new_markdown_cell("## What ran\n\nThe narrative stays."), code, figure]
    return nb


def test_code_is_hidden_by_default_and_shown_on_request(tmp_path):
    hidden = study.export_notebook(_notebook(), tmp_path / "hidden.html")
    text = Path(hidden).read_text(encoding="utf-8")
    assert "The narrative stays." in text and "<td>42</td>" in text
    assert "the_answer" not in text
    found = page_check.check_page(hidden)
    assert found.seen["tables"] == 1
    kinds = [f["check"] for f in found.findings]
    # the figure cell is still known as one with its code hidden
    assert kinds == ["missing figure"], found.report()
    assert "a cell tagged figure" in found.findings[0]["detail"]

    shown = study.export_notebook(_notebook(), tmp_path / "shown.html", show_code=True)
    assert "the_answer" in Path(shown).read_text(encoding="utf-8")
    assert [f["check"] for f in page_check.check_page(shown, show_code=True).findings] == ["missing figure"]
    unexpected = page_check.check_page(shown)
    assert {f["check"] for f in unexpected.findings} == {"code shown", "missing figure"}, unexpected.report()
    assert any("the_answer = 6 * 7" in f["detail"] for f in unexpected.findings), unexpected.report()


def test_study_run_and_new_take_show_code():
    import argparse

    parser = argparse.ArgumentParser()
    study.register(parser.add_subparsers())
    assert parser.parse_args(["study", "run", "x", "--show-code"]).show_code
    assert not parser.parse_args(["study", "run", "x"]).show_code
    assert parser.parse_args(["study", "new", "x", "--show-code"]).show_code


def test_an_output_text_table_wraps_only_between_words(tmp_path):
    """JupyterLab's output text breaks anywhere (word-break: break-all): a text table's variant
    names were split mid-word on a narrow page. The exported page wraps at spaces, and the page
    check finds a name broken mid-word."""
    line = " ".join(["no-run-to-parity-with-a-long-variant-name"] * 12)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(text_table)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=line + "\n")]
    nb.cells = [cell]
    page = study.export_notebook(nb, tmp_path / "text.html")
    found = page_check.check_page(page, width=800)
    assert not found.findings, found.report()
    broken = tmp_path / "broken.html"
    broken.write_text(Path(page).read_text(encoding="utf-8").replace(study._PAGE_CSS, ""), encoding="utf-8")
    found = page_check.check_page(broken, width=800)
    assert [f["check"] for f in found.findings] == ["broken word"], found.report()
