"""A new study's mechanism figures by name (``template.MECHANISMS``), each built from the committed
sample campaign over one task selector, and a page showing them passes the page check."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import nbformat
import pytest

import page_check
from lisa_ext import study
from lisa_ext.campaign.store.records import RunKey
from lisa_ext.campaign.store.writer import CampaignStore
from lisa_ext.errors import UserError
from lisa_ext.studies.template import MECHANISMS, SAMPLE, StudyPage

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def page() -> StudyPage:
    # no runs of its own: the page shows the sample, fio's tasks by name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return StudyPage(REPO / "data" / "no-such-study")


def test_the_sample_page_selects_fio(page):
    assert page.sample and page.campaign == REPO / SAMPLE and page.tasks == "comm:^fio$"
    runs = page.df_runs()
    # the tasks named fio, also while they ran before their exec (as sh)
    named = runs.groupby(["variant", "pid"])["comm"].agg(set)
    assert all("fio" in names for names in named) and "fio" in set(runs["comm"])
    traced = {p.parts[-4] for p in (REPO / SAMPLE).glob("runs/*/*/*/trace.dat")}
    assert set(runs["variant"]) == traced


def test_an_interrupted_first_run_still_shows_the_sample(tmp_path):
    # the runner was stopped before it published any run: only its scratch directory is there
    wanted = tmp_path / "my-study"
    CampaignStore(wanted).scratch(RunKey("baseline", "schbench", 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        page = StudyPage(wanted)
    assert page.sample and page.campaign == REPO / SAMPLE
    assert "has no runs yet" in page.banner()


def test_cpu_time_shares_add_up_per_variant(page):
    shares = page.df_cpu_time()
    assert shares.groupby("variant")["pct"].sum().round(6).eq(100).all()
    # the board has 4 vCPUs (the sample's spec: 2 LLC domains of 2); fio ran on each in some variant
    assert set(shares["cpu"]) == {0, 1, 2, 3}


def test_migrations_count_moves_among_switch_ins(page):
    moves = page.df_migrations()
    runs = page.df_runs()
    # one switch-in fewer than stretches per task: its first is no move
    assert moves["switch_ins"].sum() == len(runs) - runs.groupby(["variant", "workload", "iteration", "pid"]).ngroups
    assert (moves["moved"] <= moves["switch_ins"]).all() and moves["moved"].sum() > 0
    assert list(moves["variant"]) == list(dict.fromkeys(runs["variant"]))  # the campaign's order


def test_every_named_figure_builds_and_reads(page, tmp_path):
    nb = nbformat.v4.new_notebook()
    for name in MECHANISMS:
        svg = page.mechanism_figure(name, tmp_path).read_text()
        assert re.search(r"<!-- (latency|% of runtime|% of switch-ins on another CPU).* -->", svg), name
        cell = nbformat.v4.new_code_cell("")
        cell.outputs = [nbformat.v4.new_output("display_data", {"text/html": svg[svg.index("<svg"):]})]
        nb.cells.append(cell)
    found = page_check.check_page(study.export_notebook(nb, tmp_path / "mechanisms.html"))
    assert found.seen["svg_figures"] == len(MECHANISMS), found.seen
    assert not found.findings, found.report()


def test_an_unknown_figure_names_the_choices(page, tmp_path):
    with pytest.raises(UserError, match="choose one of wakeup-latency, cpu-time, migrations"):
        page.mechanism_figure("idle", tmp_path)
