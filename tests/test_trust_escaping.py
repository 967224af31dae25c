"""Text from runs, targets and specs is text on every page, never markup (docs/faults.md, Trust).

Whoever controls a target (its ``uname -r``, a knob's sysfs file, its platform's name) or a
campaign directory (a colleague's, with its ``result.json`` metric names, units and error
texts) writes what the pages quote. A copy of the committed sample campaign gets such text,
and every page made of it is read back as a browser or a Markdown renderer would: no element
of the hostile text's own, every table row as many cells as its header, no line of a text
table that a name started.
"""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from markdown_it import MarkdownIt

from lisa_ext.cli import main
from lisa_ext.report import escape
from lisa_ext.report.cover import CoverLetterTable
from lisa_ext.report.explore import ExplorerTables, explore
from lisa_ext.report.figures import metric_bars_figure
from lisa_ext.report.readable import readable_table
from lisa_ext.studies import rfc
from lisa_ext.studies.template import StudyPage

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wq-affinity-board"
SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
#: what the brief of the trust sweep names: elements, a cell boundary, code, an entity, math
HOSTILE = [SCRIPT, IMG, "a|b", "`code` and ``more``", "x & y &amp;", "$x$", "[link](javascript:alert(1))",
           "back\\|slash", "two\nlines", " edges ", "{braces}", "%#_~^\\{}"]
#: metric names and units a colleague's result.json holds (one unit per metric, as the store wants)
METRICS = {"read_iops": (f"{SCRIPT} a|b `c` & $x$", f"{IMG}|u"),
           "read_bw": (f"{IMG} $\\alert{{x}}$", "KiB/s"),
           "write_iops": ("write\nINJECTED row", "IOPS")}
KERNEL = f"6.12{SCRIPT}"
KNOB = f"cache{IMG}"
PLATFORM = f"board{SCRIPT}"
ERROR = f"{IMG} went wrong | badly\nINJECTED line"
#: what a renderer makes of the pages: CommonMark with GitHub's tables, HTML passed through
MARKDOWN = MarkdownIt("commonmark", {"html": True}).enable("table")


class _Page(HTMLParser):
    """An HTML page as a browser parses it: its elements and their attributes, its text, and
    the cells of each row of each table."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str | None]] = []
        self.tables: list[list[list[str]]] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    @property
    def rows(self) -> list[list[str]]:
        return [row for table in self.tables for row in table]

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes.extend(attrs)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


#: the elements of figures.html: bokeh's scripts and styles, one div per figure
_FIGURES_PAGE = {"html", "head", "meta", "title", "script", "style", "body", "div"}


def _assert_inert(html_text: str, where: str, *, scripts: bool = False) -> _Page:
    """No element or attribute of the hostile text's own: no event handler, no script (but
    the page's own ``scripts``), no ``javascript:`` link."""
    page = _Page(html_text)
    handlers = [name for name, _value in page.attributes if name.startswith("on")]
    assert not handlers, (where, handlers)
    links = [value for name, value in page.attributes if name in ("href", "src") and "javascript:" in (value or "")]
    assert not links, (where, links)
    if scripts:
        assert set(page.tags) <= _FIGURES_PAGE, (where, set(page.tags) - _FIGURES_PAGE)
    else:
        assert "script" not in page.tags, where
    return page


def _assert_markdown_inert(text: str, where: str) -> _Page:
    """``text`` rendered as Markdown is inert (:func:`_assert_inert`) and holds no math (a
    ``$`` without its backslash: GitHub and Jupyter render ``$x$`` as a formula); every row
    of each of its tables has as many cells as the table's header."""
    assert not re.search(r"(?<!\\)\$", text), (where, re.findall(r".{0,20}(?<!\\)\$.{0,20}", text))
    page = _assert_inert(MARKDOWN.render(text), where)
    for table in page.tables:
        assert len({len(row) for row in table}) == 1, (where, table)
    return page


def _rewrite(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    """The sample campaign as a hostile target and a careless colleague leave it."""
    campaign = tmp_path_factory.mktemp("trust") / "campaign"
    shutil.copytree(SAMPLE, campaign)

    def metrics(data):
        for metric in data["metrics"]:
            if metric["name"] in METRICS:
                metric["name"], metric["unit"] = METRICS[metric["name"]]

    for result in campaign.glob("runs/*/*/*/result.json"):
        _rewrite(result, metrics)
    for meta in campaign.glob("runs/*/*/*/meta.json"):
        _rewrite(meta, lambda data: data["platform"].update(name=PLATFORM, description=PLATFORM))
    first = campaign / "runs" / "cache" / "high" / "0" / "meta.json"

    def target(data):
        data["kernel"]["release"] = KERNEL
        for knob in data["knobs"].values():
            knob["read_back"] = KNOB

    _rewrite(first, target)
    _rewrite(campaign / "runs" / "system" / "med" / "1" / "result.json",
             lambda data: data.update(status="failed", error=ERROR))
    return campaign


@pytest.fixture(scope="module")
def report(hostile, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trust-report") / "report"
    assert main(["report", str(hostile), "--out", str(out), "--no-cache", "--jobs", "1"]) == 0
    return out


def test_report_pages_show_run_text_as_text(report):
    for name in ("README.md", "comparison.md", "cover-letter.md"):
        text = (report / name).read_text()
        page = _assert_markdown_inert(text, name)
        shown = " ".join(page.text)
        assert "alert(1)" in shown and "INJECTED" in shown, name  # escaped, not dropped
    _assert_inert((report / "cover-letter.html").read_text(), "cover-letter.html")
    _assert_inert((report / "figures.html").read_text(), "figures.html", scripts=True)
    for name in ("comparison.mmtests.txt", "comparison.lkp.txt", "comparison.sd.txt", "cover-letter.txt"):
        lines = (report / name).read_text().splitlines()
        assert not [line for line in lines if line.startswith("INJECTED")], name
        assert any("INJECTED" in line for line in lines), name
    readme = (report / "README.md").read_text()
    assert "INJECTED line" not in readme  # an error text's first line only
    assert (report / "figures").is_dir() and any((report / "figures").glob("*.png"))


def test_study_page_tables_show_run_text_as_text(hostile, tmp_path):
    # the campaign directory's own name is the user's, and may hold anything but a slash
    named = tmp_path / f"{IMG}`x`|"
    named.symlink_to(hostile)
    metric = METRICS["read_iops"][0]
    page = StudyPage(named, metrics={metric: f"{IMG} label|x"})
    banner = _assert_markdown_inert(page.banner(), "banner")
    assert str(named) in " ".join(banner.text)

    status = _assert_inert(page.status().to_html(), "status")
    assert KERNEL in [cell for row in status.rows for cell in row]
    knobs = _assert_inert(page.knobs().to_html(), "knobs")
    assert any(KNOB in cell for row in knobs.rows for cell in row)

    table = page.cover_table()
    _assert_inert(table.html(), "cover table html")
    _assert_markdown_inert(table.markdown(), "cover table markdown")

    ours = pd.DataFrame({f"{IMG} col": [1.5, None]}, index=[SCRIPT, "b"]).rename_axis(f"{IMG} rows")
    styled = _assert_inert(rfc.styled(ours, f"{IMG}: {rfc.campaign_platform(hostile)}").to_html(), "rfc table")
    assert any(PLATFORM in text for text in styled.text)
    named_columns = ours.reset_index().rename(columns={f"{IMG} col": f"{SCRIPT}_ms"})
    _assert_inert(readable_table(named_columns, labels={f"{IMG} rows": f"{SCRIPT} label"}).to_html(), "readable")


@pytest.mark.parametrize("text", HOSTILE)
def test_each_format_shows_the_text_itself(text):
    flat = text.replace("\n", " ")
    cell = _Page(f"<table><tr><td>{escape.html(text)}</td></tr></table>").rows[0]
    assert cell == [text]
    rendered = _Page(MARKDOWN.render(f"| h | k |\n|---|---|\n| {escape.markdown(text)} | z |\n"))
    assert rendered.rows[1] == [flat.strip(), "z"]
    assert set(rendered.tags) == {"table", "thead", "tbody", "tr", "th", "td"}
    assert not re.search(r"(?<!\\)\$", escape.markdown(text))
    code = _Page(MARKDOWN.render(f"run {escape.code_span(text)} here"))
    assert code.tags == ["p", "code"] and code.text[1] == flat
    latex = escape.latex(text)
    # every special character escaped: a backslash before it, or a command of its own
    bare = re.sub(r"\\(textbackslash|textasciitilde|textasciicircum)\{\}|\\[&%$#_{}]", "", latex)
    assert not re.search(r"[&%$#_{}~^\\\n]", bare), latex
    assert "\n" not in escape.one_line(text) and escape.one_line(text).isprintable()


def test_figures_and_explorer_titles_are_text(tmp_path):
    # holoviews formats titles ({label}) and shows a layout's as HTML
    import holoviews as hv
    from bokeh.embed import json_item

    block = pd.DataFrame({"variant": ["a", "b"], "mean": [1.0, 2.0], "ci_low": [0.9, 1.8], "ci_high": [1.1, 2.2],
                          "is_baseline": [True, False], "significant": [False, True], "too_few": [False, False]})
    figure = metric_bars_figure(block, f"{{metric}} {IMG}", "value")
    assert hv.render(figure, backend="bokeh").title.text == f"{{metric}} {IMG}"

    trace = tmp_path / "runs" / f"{IMG}{{x}}" / "w" / "0" / "trace.dat"
    empty = pd.DataFrame({"time": [0.0, 1.0], "cpu": [0, 0], "pid": [1, 1], "comm": ["a", "a"]})
    tables = ExplorerTables(str(trace), 1, 1.0, pd.DataFrame(columns=["time", "cpu", "frequency"]),
                            pd.DataFrame(columns=["start", "end", "cpu", "state"]),
                            pd.DataFrame(columns=["start", "end", "cpu", "pid", "comm"]), empty,
                            pd.DataFrame(columns=["time", "finding", "cpu", "detail"]))
    item = json.dumps(json_item(hv.render(explore(tables), backend="bokeh")))
    assert "<img" not in item and "&lt;img src=x onerror=alert(1)&gt;{x}/w/0/trace.dat" in item
