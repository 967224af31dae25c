"""A new study's mechanism figures by name (``template.MECHANISMS``), each built from the committed
sample campaign (a smoke run of notebooks/sugov-rate-limit.yml on the board) over one task selector,
the trace metrics a page computes for its tasks, and a page showing the figures passes the page check."""

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
from lisa_ext.campaign.store.metrics import METRICS_COLUMNS
from lisa_ext.studies.runs import per_run_analysis
from lisa_ext.studies.template import MECHANISMS, SAMPLE, StudyPage
from lisa_ext.trace import load_trace

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def page() -> StudyPage:
    # no runs of its own: the page shows the sample, fio's tasks by name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return StudyPage(REPO / "data" / "no-such-study")


def test_the_sample_page_selects_the_rtapp_thread(page):
    assert page.sample and page.campaign == REPO / SAMPLE and page.tasks == "comm:^bursty-"
    runs = page.df_runs()
    # rt-app names its threads <task>-<index>, after they start (as rt-app): the sample's one task
    named = runs.groupby(["variant", "pid"])["comm"].agg(set)
    assert all(names <= {"rt-app", "bursty-0"} and "bursty-0" in names for names in named)
    traced = {p.parts[-4] for p in (REPO / SAMPLE).glob("runs/*/*/*/trace.dat")}
    assert set(runs["variant"]) == traced == {"rate-limit-60us", "rate-limit-10ms"}


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
    # the board has 4 vCPUs; the one rt-app thread ran on some of them
    assert set(shares["cpu"]) <= {0, 1, 2, 3} and (shares["pct"] > 0).all()


def test_migrations_count_moves_among_switch_ins(page):
    moves = page.df_migrations()
    runs = page.df_runs()
    # one switch-in fewer than stretches per task: its first is no move
    assert moves["switch_ins"].sum() == len(runs) - runs.groupby(["variant", "workload", "iteration", "pid"]).ngroups
    assert (moves["moved"] <= moves["switch_ins"]).all() and moves["switch_ins"].sum() > 0
    assert list(moves["variant"]) == list(dict.fromkeys(runs["variant"]))  # the campaign's order


def test_the_frequency_after_a_wakeup_averages_every_wakeup(page):
    after = page.df_frequency_after_wakeup()
    wakeups = per_run_analysis(page.campaign, "wakeup_frequency", "df_wakeups", tasks=page.tasks)
    # one point per 0.5 ms to 30 ms, each over the wake-ups whose CPU's frequency was known
    assert list(after.groupby("variant", sort=False).size()) == [61] * after["variant"].nunique()
    assert after.groupby("variant", sort=False)["wakeups"].max().to_dict() == \
        wakeups.groupby("variant", sort=False).size().to_dict()
    # the board's OPPs: every mean lies in the RK3399 little cluster's 408-1416 MHz
    assert after["freq_mhz"].between(408, 1416).all()


def test_idle_state_shares_add_up_per_variant_and_workload(page):
    shares = page.df_idle_states()
    assert shares.groupby(["variant", "workload"])["pct"].sum().round(6).eq(100).all()
    # the board's RK3399 states, by the names the runs recorded
    assert set(shares["state"]) <= {"WFI", "cpu-sleep", "cluster-sleep"} and (shares["time_s"] >= 0).all()


def test_cpu_busy_is_a_share_of_the_traced_time(page):
    busy = page.df_cpu_busy()
    assert set(busy["cpu"]) == {0, 1, 2, 3} and busy["pct"].between(0, 100).all()
    # the tasks' own runtime is part of what kept their CPUs busy
    runs = page.df_runs()
    assert (busy.groupby("variant")["pct"].max() > 0).all() and not runs.empty


def test_the_task_metrics_are_one_row_per_traced_run(page):
    metrics = page.df_task_metrics()
    assert list(metrics.columns) == METRICS_COLUMNS
    traced = sorted(REPO.joinpath(SAMPLE).glob("runs/*/*/*/trace.dat"))
    for name, unit in (("tasks_freq_after_wakeup_10ms", "MHz"), ("tasks_wakeup_lat_p99", "us")):
        rows = metrics[metrics["metric"] == name]
        assert len(rows) == len(traced) == 4 and set(rows["unit"]) == {unit}, rows
    # the oracle: one run's figures from its own trace, outside the page's cache
    trace = load_trace(REPO / SAMPLE / "runs" / "rate-limit-10ms" / "rtapp" / "1" / "trace.dat")
    after = trace.ana.wakeup_frequency.df_frequency_after_wakeup(tasks="comm:^bursty-", horizon_ms=10)
    latency = trace.ana.wakeup_latency.df_wakeup_latencies(tasks="comm:^bursty-")["latency"]
    one = metrics[(metrics["variant"] == "rate-limit-10ms") & (metrics["iteration"] == 1)].set_index("metric")["value"]
    assert one["tasks_freq_after_wakeup_10ms"] == pytest.approx(after["freq_khz"].mean() / 1e3)
    assert one["tasks_wakeup_lat_p99"] == pytest.approx(latency.quantile(0.99) * 1e6)
    assert metrics.loc[metrics["metric"] == "tasks_freq_after_wakeup_10ms", "value"].between(408, 1416).all()


def test_settings_that_name_a_task_metric_put_it_in_the_cover_letter_table():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        page = StudyPage(REPO / SAMPLE, baseline="rate-limit-60us", tasks="comm:^bursty-",
                         metrics={"bursty_perf_index_mean": "rt-app bursty performance index",
                                  "tasks_freq_after_wakeup_10ms": "frequency after a wake-up"})
    frame = page.cover_table().frame
    assert list(dict.fromkeys(frame["metric"])) == ["bursty_perf_index_mean", "tasks_freq_after_wakeup_10ms"]
    assert set(frame["n"]) == {2}  # two traced runs a side


def test_every_named_figure_builds_and_reads(page, tmp_path):
    nb = nbformat.v4.new_notebook()
    for name in MECHANISMS:
        svg = page.mechanism_figure(name, tmp_path).read_text()
        assert re.search(r"<!-- (latency|% of runtime|% of switch-ins on another CPU|mean frequency \(MHz\)"
                         r"|% of time|% of the traced time busy).* -->", svg), name
        cell = nbformat.v4.new_code_cell("")
        cell.outputs = [nbformat.v4.new_output("display_data", {"text/html": svg[svg.index("<svg"):]})]
        nb.cells.append(cell)
    found = page_check.check_page(study.export_notebook(nb, tmp_path / "mechanisms.html"))
    assert found.seen["svg_figures"] == len(MECHANISMS), found.seen
    assert not found.findings, found.report()


def test_an_unknown_figure_names_the_choices(page, tmp_path):
    with pytest.raises(UserError, match="choose one of wakeup-latency, cpu-time, migrations, frequency-after-wakeup"):
        page.mechanism_figure("idle", tmp_path)
