"""The study notebooks: specs valid, notebook code wired to real APIs, one notebook executed for real."""

import ast
import re
from pathlib import Path

import nbformat
import pytest

from lisa_ext import study
from lisa_ext.campaign.spec import load_spec

import page_check

STUDIES = [s for s in study.list_studies() if s.name != "quickstart"]
RFC_STUDIES = {"iowait-boost", "wq-affinity", "teo-util", "ondemand-bursty", "idle-gating"}
#: studies of our own, written with `lisa-ext study new` (docs/your-own-study.md): checked here
#: like the others, not run by test_studies_smoke (no RFC to reproduce, no room in CI's budget)
OWN_STUDIES = {"migration-cost", "run-to-parity", "scx-vs-eevdf", "sugov-rate-limit"}
#: studies of no RFC: what only a platform here can show (eas: the arm64 board)
PLATFORM_STUDIES = {"eas"}


def test_one_study_per_rfc_ours_and_the_platforms():
    assert {s.name for s in STUDIES} == RFC_STUDIES | OWN_STUDIES | PLATFORM_STUDIES


@pytest.mark.parametrize("s", STUDIES, ids=lambda s: s.name)
def test_spec_and_kernel_variants_validate(s):
    from lisa_ext.kernel.spec import load_variant_spec

    spec = load_spec(s.spec)
    for variant in spec.variants:
        if variant.kernel:
            load_variant_spec(variant.kernel)


def _code(notebook: Path) -> str:
    nb = nbformat.read(notebook, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("s", STUDIES, ids=lambda s: s.name)
def test_notebook_calls_exist(s):
    import lisa_ext.analysis.registry  # noqa: F401  registers the analyses
    from lisa_ext.compat import import_lisa

    base = import_lisa("lisa.analysis.base").TraceAnalysisBase
    analyses = {cls.name: cls for cls in _subclasses(base) if getattr(cls, "name", None)}
    tree = ast.parse(_code(s.notebook))
    attrs = {n.attr for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "study"}
    assert attrs, "the notebook does not use lisa_ext.study"
    assert not attrs - set(study.__all__), f"unknown lisa_ext.study names: {attrs - set(study.__all__)}"
    for analysis, method in re.findall(r'per_run_analysis\(\s*campaign_dir,\s*"(\w+)",\s*"(\w+)"', _code(s.notebook)):
        assert analysis in analyses, f"no analysis trace.ana.{analysis}"
        assert hasattr(analyses[analysis], method), f"trace.ana.{analysis} has no {method}"
    params = nbformat.read(s.notebook, as_version=4).cells
    tagged = [c for c in params if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1 and "campaign_dir" in tagged[0].source


@pytest.mark.parametrize("s", STUDIES, ids=lambda s: s.name)
def test_notebook_names_are_all_bound(s):
    """Every name a cell reads is bound by some cell (or is a builtin): a branch that only runs on
    another platform (the arm64 board's placement figure) must not end in a NameError there."""
    import builtins

    tree = ast.parse(_code(s.notebook))
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert not read - bound, f"{s.notebook.name} reads names no cell binds: {sorted(read - bound)}"


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_wq_affinity_notebook_runs_on_the_board_sample_campaign(tmp_path):
    """The notebook executed on a real smoke campaign from the virtual board (two LLC domains):
    the RFC's three tables beside ours, the kcryptd placement table and figure, no warning."""
    sample = Path(__file__).resolve().parent.parent / "data" / "samples" / "wq-affinity-board"
    html = study.execute_notebook(study.find_study("wq-affinity").notebook, tmp_path / "wq.html",
                                  {"campaign_dir": str(sample), "report_dir": str(tmp_path / "report"),
                                   "smoke": True})
    text = html.read_text()
    for title in ("HIGH", "MED", "LOW", "CACHE+STRICT", "SYSTEM+LOCAL", "Ryzen 9 3900x"):
        assert title in text, title
    assert "queueing CPU&#x27;s LLC" in text or "queueing CPU's LLC" in text
    executed = nbformat.read(tmp_path / "wq.ipynb", as_version=4)
    streams = [o for c in executed.cells for o in c.get("outputs", []) if o["output_type"] == "stream"]
    assert not [o for o in streams if o["name"] == "stderr"], streams
    assert not [c for c in executed.cells for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert (tmp_path / "report" / "kcryptd-locality.png").is_file()
    assert list((tmp_path / "report").glob("explorer_*.html"))
    check = page_check.check_page(html, smoke=True)
    assert check.seen["svg_figures"] and check.seen["bokeh_plots"] and check.seen["tables"] >= 5, check.seen
    assert not check.findings, f"what a reader trips over on the page:\n{check.report()}"


def test_unknown_study_is_a_clear_error():
    with pytest.raises(study.UserError, match="choose one of"):
        study.find_study("no-such-study")
