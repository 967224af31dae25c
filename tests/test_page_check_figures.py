"""A figure cannot go missing from a study page: ``study.show_figure`` shows the figure where it
is called (inside an ``if`` or a loop, not only as a cell's last expression) and exactly once,
and the page check fails a figure cell (tagged ``figure`` or calling ``show_figure``) that
rendered nothing."""

from __future__ import annotations

from pathlib import Path

import nbformat

import page_check
from lisa_ext import study

_MAKE_FIGURE = """\
from matplotlib.figure import Figure
from lisa_ext import study


def make():
    fig = Figure(figsize=(4, 3))
    ax = fig.subplots()
    ax.plot([1, 2, 3], [10, 30, 20])
    ax.set_xlabel("iteration")
    ax.set_ylabel("latency (us)")
    return fig
"""


def _code(source: str, tags: tuple[str, ...] = (), outputs: list | None = None):
    cell = nbformat.v4.new_code_cell(source)
    if tags:
        cell.metadata["tags"] = list(tags)
    cell.outputs = outputs or []
    return cell


def test_a_figure_cell_that_rendered_nothing_is_found(tmp_path):
    """A notebook's exported cells: a show_figure call inside an if, and a cell tagged figure,
    both without output, are found; a show_figure cell with its SVG is not."""
    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"><rect width="40" height="20"/></svg>'
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _code("if ok:\n    study.show_figure(fig)"),
        _code("fig", tags=("figure",)),
        _code("study.show_figure(fig)", outputs=[nbformat.v4.new_output("display_data", {"text/html": svg})]),
    ]
    # the code shown: the check finds show_figure in the source (hidden, by the tag export adds)
    page = study.export_notebook(nb, tmp_path / "page.html", show_code=True)
    found = page_check.check_page(page, show_code=True)
    assert found.seen["figure_cells"] == 3, found.seen
    missing = [f for f in found.findings if f["check"] == "missing figure"]
    assert [f["where"].split()[:2] for f in missing] == [["cell", "0"], ["cell", "1"]], found.report()
    assert "a show_figure cell rendered no image, SVG or frame: study.show_figure(fig)" in missing[0]["detail"]
    assert "a cell tagged figure" in missing[1]["detail"]


def test_show_figure_shows_wherever_it_is_called_and_once(tmp_path):
    """Executed for real: show_figure inside an if, in a loop, wrapped in display() and as the
    last expression puts one SVG on the page per call, and the page check passes."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _code(_MAKE_FIGURE),
        _code("if True:\n    study.show_figure(make())"),
        _code("for _ in range(2):\n    study.show_figure(make())"),
        _code("display(study.show_figure(make()))"),
        _code("study.show_figure(make())"),
    ]
    notebook = tmp_path / "figures.ipynb"
    nbformat.write(nb, notebook)
    page = study.execute_notebook(notebook, tmp_path / "out" / "figures.html", {})
    found = page_check.check_page(page)
    assert found.seen["figure_cells"] == 4 and found.seen["svg_figures"] == 5, found.seen
    assert not found.findings, found.report()
    assert "figure shown above" not in Path(page).read_text(encoding="utf-8")
