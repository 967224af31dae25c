"""Nothing a user names is deleted or overwritten unless lisa-ext made it.

Each command that writes or removes a path the user names (``report -o``, ``quickstart
--fresh``, ``trace convert -o``, ``trace export -o``, ``trace shrink -o``) is run through the
real CLI onto what it did not make: it must exit 2 with one line naming the path, and leave
every file as it was, byte for byte. The good paths next to them: what lisa-ext made is
replaced or removed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from campaign_helpers import REPO
from lisa_ext.campaign.runner import CampaignRunner
from lisa_ext.campaign.spec import load_spec
from lisa_ext.campaign.store.layout import CAMPAIGN_MARKER
from lisa_ext.campaign.store.writer import CampaignStore
from lisa_ext.cli import main
from lisa_ext.errors import UserError
from lisa_ext.report.build import REPORT_MARKER
from lisa_ext.study import check_page_outputs, execute_notebook

SAMPLE = REPO / "data" / "samples" / "wq-affinity"
SAMPLE_TRACE = SAMPLE / "runs" / "cache" / "fio-randread" / "0" / "trace.dat"


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every entry below ``root``: a file's bytes, ``None`` for a directory."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def _refused(capsys, argv: list[str], path: Path) -> str:
    """Run ``lisa-ext argv``: it must exit 2 with one line naming ``path``; that line."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(path) in err, err
    return err


@pytest.fixture
def campaign(tmp_path) -> Path:
    """A copy of the committed sample campaign (written before the store's marker existed)."""
    return Path(shutil.copytree(SAMPLE, tmp_path / "campaign"))


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "cache"))


def _foreign(path: Path) -> Path:
    """A directory of the user's own: files and a subdirectory lisa-ext never wrote."""
    (path / "sub").mkdir(parents=True)
    (path / "notes.txt").write_text("my notes\n")
    (path / "sub" / "data.bin").write_bytes(bytes(range(256)))
    return path


# -- report -o ------------------------------------------------------------------------------

def test_report_out_refuses_the_campaign_directory(capsys, campaign):
    before = _snapshot(campaign)
    err = _refused(capsys, ["report", str(campaign), "-o", str(campaign), "--no-traces"], campaign)
    assert "campaign directory" in err
    assert _snapshot(campaign) == before


def test_report_out_refuses_a_foreign_directory(capsys, campaign, tmp_path):
    foreign = _foreign(tmp_path / "mine")
    before = _snapshot(foreign)
    err = _refused(capsys, ["report", str(campaign), "-o", str(foreign), "--no-traces"], foreign)
    assert "not empty" in err
    assert _snapshot(foreign) == before


def test_report_out_refuses_home_and_the_current_directory(capsys, campaign, tmp_path, monkeypatch):
    home = _foreign(tmp_path / "home")
    (home / ".profile").write_text("export EDITOR=vi\n")
    monkeypatch.setenv("HOME", str(home))
    before = _snapshot(home)
    assert "home directory" in _refused(capsys, ["report", str(campaign), "-o", str(home), "--no-traces"],
                                        home)
    assert _snapshot(home) == before
    # ~ itself, even empty of anything but a report's files: it is never replaced
    (home / "README.md").write_text("x")
    (home / "metrics.csv").write_text("x")
    (home / "comparison.csv").write_text("x")
    before = _snapshot(home)
    _refused(capsys, ["report", str(campaign), "-o", str(home), "--no-traces"], home)
    assert _snapshot(home) == before
    work = _foreign(tmp_path / "work")
    monkeypatch.chdir(work)
    before = _snapshot(work)
    assert "current directory" in _refused(capsys, ["report", str(campaign), "-o", ".", "--no-traces"],
                                           Path("."))
    assert _snapshot(work) == before


def test_report_out_refuses_a_file(capsys, campaign, tmp_path):
    mine = tmp_path / "table.csv"
    mine.write_text("a,b\n1,2\n")
    _refused(capsys, ["report", str(campaign), "-o", str(mine), "--no-traces"], mine)
    assert mine.read_text() == "a,b\n1,2\n"


def test_report_out_replaces_an_earlier_report(capsys, campaign, tmp_path):
    out = tmp_path / "report"
    argv = ["report", str(campaign), "-o", str(out), "--no-traces", "--no-html", "--jobs", "1"]
    assert main(argv) == 0
    assert (out / REPORT_MARKER).is_file() and (out / "comparison.csv").is_file()
    readme = (out / "README.md").read_bytes()
    (out / "stale.txt").write_text("from an earlier report")
    assert main(argv) == 0
    assert not (out / "stale.txt").exists() and (out / "README.md").read_bytes() == readme
    # a report written before the marker existed is known by its files
    (out / REPORT_MARKER).unlink()
    (out / "stale.txt").write_text("from an earlier report")
    assert main(argv) == 0
    assert not (out / "stale.txt").exists() and (out / REPORT_MARKER).is_file()
    # so is the report in its default place, inside the campaign directory
    assert main(["report", str(campaign), "--no-traces", "--no-html", "--jobs", "1"]) == 0
    assert main(["report", str(campaign), "--no-traces", "--no-html", "--jobs", "1"]) == 0
    assert (campaign / "report" / REPORT_MARKER).is_file()


# -- --fresh --------------------------------------------------------------------------------

@pytest.fixture
def no_tools(tmp_path, monkeypatch):
    """No trace-cmd, fio nor rt-app on PATH: whatever ``--fresh`` does, the quickstart's
    preflight stops it before it runs a campaign on this machine."""
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))


def _quickstart_fresh(data: Path | str, tmp_path: Path) -> list[str]:
    return ["quickstart", "--data", str(data), "--fresh", "--no-progress", "-o", str(tmp_path / "q.html")]


def test_fresh_refuses_a_foreign_directory(capsys, no_tools, tmp_path):
    foreign = _foreign(tmp_path / "mine")
    before = _snapshot(foreign)
    err = _refused(capsys, _quickstart_fresh(foreign, tmp_path), foreign)
    assert "'notes.txt'" in err
    assert _snapshot(foreign) == before


def test_fresh_refuses_a_campaign_holding_the_users_files(capsys, no_tools, campaign, tmp_path):
    (campaign / "analysis.ipynb").write_text("{}")
    before = _snapshot(campaign)
    err = _refused(capsys, _quickstart_fresh(campaign, tmp_path), campaign)
    assert "'analysis.ipynb'" in err
    assert _snapshot(campaign) == before


def test_fresh_refuses_home_cwd_and_the_data_root(capsys, no_tools, tmp_path, monkeypatch):
    home = _foreign(tmp_path / "home")
    monkeypatch.setenv("HOME", str(home))
    workbench = tmp_path / "workbench"
    shutil.copytree(REPO / "notebooks", workbench / "notebooks")
    shutil.copytree(SAMPLE, workbench / "data" / "quickstart")
    monkeypatch.setenv("LISA_EXT_WORKBENCH", str(workbench))
    monkeypatch.chdir(_foreign(tmp_path / "work"))
    for data, shown in ((home, home), (".", Path(".")), (workbench / "data", workbench / "data"),
                        (tmp_path, tmp_path)):
        before = _snapshot(tmp_path)
        _refused(capsys, _quickstart_fresh(data, tmp_path), shown)
        assert _snapshot(tmp_path) == before


def test_fresh_removes_the_campaign_directories_lisa_ext_made(tmp_path):
    # what `--fresh` calls (run_campaign -> CampaignStore.remove) on a campaign the store made ...
    made = tmp_path / "made"
    CampaignRunner(load_spec(REPO / "notebooks" / "quickstart.yml"), made)._open_store()
    assert (made / CAMPAIGN_MARKER).is_file()
    CampaignStore(made).remove()
    assert not made.exists()
    # ... and on one written before the marker existed, with its report
    old = Path(shutil.copytree(SAMPLE, tmp_path / "old"))
    (old / "report").mkdir()
    (old / "report" / "README.md").write_text("a report")
    CampaignStore(old).remove()
    assert not old.exists()


def test_the_store_marks_only_directories_it_makes(tmp_path, campaign):
    CampaignStore(tmp_path / "new").write_spec_copy("name: x\n")
    assert (tmp_path / "new" / CAMPAIGN_MARKER).is_file()
    # a campaign from before the marker is resumed as it is, and stays recognised by its files
    CampaignStore(campaign).write_spec_copy((campaign / "campaign.yml").read_text())
    assert not (campaign / CAMPAIGN_MARKER).exists()
    # a campaign run into the user's own directory would write among their files
    mine = _foreign(tmp_path / "mine")
    before = _snapshot(mine)
    with pytest.raises(UserError, match=f"^{mine}: is not empty and holds no campaign"):
        CampaignRunner(load_spec(REPO / "notebooks" / "quickstart.yml"), mine)._open_store()
    assert _snapshot(mine) == before


# -- quickstart / study run -o PAGE ------------------------------------------------------------

def test_page_out_refuses_a_foreign_file_and_a_source_notebook(capsys, no_tools, tmp_path):
    mine = tmp_path / "notes.html"
    mine.write_text("<html><body>my page</body></html>\n")
    _refused(capsys, ["quickstart", "--data", str(tmp_path / "d"), "-o", str(mine)], mine)
    assert mine.read_text() == "<html><body>my page</body></html>\n"
    # the executed notebook goes beside the page, as PAGE.ipynb: a study's own notebook there stays
    source = Path(shutil.copy(REPO / "notebooks" / "quickstart.ipynb", tmp_path / "quickstart.ipynb"))
    before = source.read_bytes()
    _refused(capsys, ["quickstart", "--data", str(tmp_path / "d"), "-o", str(tmp_path / "quickstart.html")],
             source)
    assert source.read_bytes() == before and not (tmp_path / "quickstart.html").exists()
    # and so does a file of the name the notebook kernel's log takes beside the page
    log = tmp_path / "page.kernel.log"
    log.write_text("my log\n")
    _refused(capsys, ["quickstart", "--data", str(tmp_path / "d"), "-o", str(tmp_path / "page.html")], log)
    assert log.read_text() == "my log\n" and not (tmp_path / "page.html").exists()


def test_page_out_replaces_an_earlier_page(tmp_path):
    page = execute_notebook(REPO / "notebooks" / "quickstart.ipynb", tmp_path / "quickstart.html",
                            {"campaign_dir": str(SAMPLE)})
    check_page_outputs(page)  # what quickstart and study run ask before writing over it


# -- compare -o FILE -------------------------------------------------------------------------

def test_compare_out_overwrites_only_its_own_table(capsys, tmp_path):
    metrics = tmp_path / "metrics.csv"
    metrics.write_text("campaign,variant,workload,metric,unit,lower_is_better,iteration,value\n" + "".join(
        f"c,{v},w,lat,us,True,{i},{10 + i + (v == 'b')}\n" for v in "ab" for i in range(3)))
    before = metrics.read_bytes()
    _refused(capsys, ["compare", str(metrics), "--baseline", "a", "-o", str(metrics)], metrics)
    assert metrics.read_bytes() == before
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    _refused(capsys, ["compare", str(metrics), "--baseline", "a", "-o", str(notes)], notes)
    assert notes.read_text() == "my notes\n"
    table = tmp_path / "table.txt"
    assert main(["compare", str(metrics), "--baseline", "a", "-o", str(table)]) == 0
    first = table.read_bytes()
    assert main(["compare", str(metrics), "--baseline", "a", "-o", str(table)]) == 0
    assert table.read_bytes() == first


# -- trace convert / export / shrink -o -------------------------------------------------------

def test_trace_convert_refuses_a_run_directory(capsys, campaign):
    run = campaign / "runs" / "cache" / "fio-randread" / "0"  # its meta.json is the run's provenance
    before = _snapshot(campaign)
    _refused(capsys, ["trace", "convert", str(run / "trace.dat"), "-o", str(run)], run)
    assert _snapshot(campaign) == before


def test_trace_export_overwrites_only_a_perfetto_trace(capsys, campaign, tmp_path):
    run = campaign / "runs" / "cache" / "fio-randread" / "0"
    meta = run / "meta.json"
    before = meta.read_bytes()
    _refused(capsys, ["trace", "export", "--perfetto", str(run), "--no-findings", "-o", str(meta)], meta)
    assert meta.read_bytes() == before
    out = tmp_path / "run.pftrace"
    assert main(["trace", "export", "--perfetto", str(run), "--no-findings", "-o", str(out)]) == 0
    first = out.read_bytes()
    out.write_bytes(first[:len(first) // 2])  # an earlier export, cut short: still ours
    assert main(["trace", "export", "--perfetto", str(run), "--no-findings", "-o", str(out)]) == 0
    assert out.read_bytes() == first


def test_trace_shrink_refuses_a_file_that_is_no_trace(capsys, tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("my notes\n")
    _refused(capsys, ["trace", "shrink", str(SAMPLE_TRACE), "-o", str(mine)], mine)
    assert mine.read_text() == "my notes\n"
