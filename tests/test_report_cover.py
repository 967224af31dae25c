"""The cover-letter table: its numbers checked against the statistics computed here
independently, and its three renderings (Markdown, HTML, mmtests-style text) read back."""

from __future__ import annotations

import html.parser
import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats as sps

from lisa_ext import stats
from lisa_ext.campaign.store.metrics import validate_metrics
from lisa_ext.errors import UserError
from lisa_ext.report.cover import CoverLetterTable, render_cover
from lisa_ext.report.readable import format_number, metric_label
from lisa_ext.stats.cover import cover_table

#: RFC 000's RK3399 fio IOPS runs (../shared/rfcs/000_58751f302850aa96.txt) and a latency made from them
RUNS = {"menu+boost": [2584, 2622, 2629], "menu-boost": [2068, 2097, 2647],
        "teo+boost": [4476, 4478, 4492], "teo-boost": [3728, 3733, 3737]}
LISA_EXT = Path(sys.executable).with_name("lisa-ext")


def _metrics(runs=RUNS) -> pd.DataFrame:
    rows = [dict(campaign="rfc", variant=v, workload="fio-randread", metric="read_iops", unit="IO/s",
                 lower_is_better=False, iteration=i, value=x)
            for v, values in runs.items() for i, x in enumerate(values)]
    rows += [dict(campaign="rfc", variant=v, workload="fio-randread", metric="wakeup_lat_p99", unit="us",
                  lower_is_better=True, iteration=i, value=1e6 / x)
             for v, values in runs.items() for i, x in enumerate(values)]
    return validate_metrics(pd.DataFrame(rows))


def test_each_row_is_the_statistics_of_its_runs():
    table = cover_table(_metrics(), "menu+boost", mean="amean").set_index(["metric", "variant"])
    base, new = RUNS["menu+boost"], RUNS["teo-boost"]
    row = table.loc[("read_iops", "teo-boost")]
    assert row["mean"] == pytest.approx(np.mean(new))
    assert row["stddev"] == pytest.approx(np.std(new, ddof=1))
    assert row["pct_change"] == pytest.approx(100 * (np.mean(new) / np.mean(base) - 1))
    assert row["p_value"] == pytest.approx(sps.ttest_ind(base, new, equal_var=False).pvalue)
    assert (row["pct_ci_low"], row["pct_ci_high"]) == pytest.approx(stats.pct_change_ci(base, new))
    assert row["verdict"] == "better"
    # lower is better: fewer microseconds is better, a significant rise worse
    assert table.loc[("wakeup_lat_p99", "teo-boost"), "verdict"] == "better"
    assert table.loc[("read_iops", "menu-boost"), "verdict"] == "no significant change"
    assert table.loc[("read_iops", "menu+boost"), "verdict"] == "baseline"


def test_worse_and_too_few_runs():
    runs = {"a": [10.0, 10.1, 9.9], "b": [8.0, 8.1, 7.9], "c": [5.0, 6.0]}
    table = cover_table(_metrics(runs), "a", metric_names=["read_iops"]).set_index("variant")
    assert table.loc["b", "verdict"] == "worse"
    assert table.loc["c", "verdict"] == "too few runs to test"


def test_metric_names_pick_and_order_the_rows():
    table = cover_table(_metrics(), "menu+boost", metric_names=["wakeup_lat_p99", "read_iops"])
    assert list(dict.fromkeys(table["metric"])) == ["wakeup_lat_p99", "read_iops"]
    with pytest.raises(UserError, match="no metric 'nope'"):
        cover_table(_metrics(), "menu+boost", metric_names=["nope"])


class _Cells(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.headers, self._cell = [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            (self.headers if tag == "th" else self.rows[-1]).append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def test_markdown_html_and_text_say_the_same():
    table = cover_table(_metrics(), "menu+boost", mean="amean")
    row = table[(table["metric"] == "read_iops") & (table["variant"] == "teo-boost")].iloc[0]
    change = f"{row['pct_change']:+.1f} %"
    interval = f"{row['pct_ci_low']:+.1f} … {row['pct_ci_high']:+.1f} %"

    markdown = render_cover(table, "cover")
    line = next(line for line in markdown.splitlines() if "| teo-boost |" in line and "3,733" in line)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3:] == ["3,733 ± 5", f"**{change}**", f"**{interval}**", "< 0.001", "better", "3"]
    assert "Change vs menu+boost" in markdown.splitlines()[0]

    parser = _Cells()
    parser.feed(CoverLetterTable(table)._repr_html_())
    assert parser.headers[:4] == ["Workload", "Metric", "Variant", "Mean ± sd"]
    assert ["teo-boost", "3,733 ± 5", change, interval, "< 0.001", "better", "3"] in parser.rows
    assert any(r[:2] == ["fio-randread", "read IOPS (IO/s)"] for r in parser.rows)

    text = render_cover(table, "cover-text")
    amean = next(line for line in text.splitlines() if line.startswith("Amean   read IOPS"))
    # mmtests: the sign-normalised % change, starred when significant
    assert f"{row['mean']:.2f} *{row['pct_change_better']:>7.2f}%*" in amean
    ci = next(line for line in text.splitlines() if line.startswith("CI95    read IOPS"))
    assert f"[{row['pct_ci_low']:.2f}%, {row['pct_ci_high']:.2f}%]" in ci


def test_lower_is_better_intervals_are_flipped_in_the_mmtests_text():
    table = cover_table(_metrics(), "menu+boost", metric_names=["wakeup_lat_p99"])
    row = table[table["variant"] == "teo-boost"].iloc[0]
    ci = next(line for line in render_cover(table, "cover-text").splitlines() if line.startswith("CI95"))
    assert f"[{-row['pct_ci_high']:.2f}%, {-row['pct_ci_low']:.2f}%]" in ci


def test_names_and_numbers_for_a_reader():
    assert metric_label("wakeup_lat_p99", "us") == "wake-up latency p99 (µs)"
    assert metric_label("trace too deep", "%") == "too deep (trace, %)"
    assert metric_label("power_mw", "mW") == "power (mW)"
    assert metric_label("records_per_s", "records/s") == "records/s"
    assert metric_label("read_clat_p99_9", "us") == "read clat p99.9 (µs)"
    assert metric_label("x_y", "ms", {"x_y": "my metric"}) == "my metric (ms)"
    assert [format_number(x) for x in (1416000.0, 2622.4, 924.2, 12.34, 1.5, 0.01234, math.nan)] == \
        ["1,416,000", "2,622", "924", "12.3", "1.50", "0.0123", "–"]
    # counts (a status table's runs ok / traced) are integers: 2, not 2.00
    assert [format_number(x) for x in (2, np.int64(1), 0, 12345)] == ["2", "1", "0", "12,345"]


def test_nearly_identical_samples_give_no_scipy_warning():
    # the t-test of runs equal up to rounding printed scipy's "catastrophic cancellation"
    # RuntimeWarning in a study page
    runs = {"a": [0.1 + 0.2, 0.3, 0.3], "b": [0.3, 0.3, 0.1 + 0.2]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = cover_table(_metrics(runs), "a", metric_names=["read_iops"]).set_index("variant")
    assert table.loc["b", "p_value"] == 1.0 and table.loc["b", "verdict"] == "no significant change"


def test_equal_runs_show_no_spread_and_a_small_spread_its_digits():
    # three equal runs of ebizzy's achieved utilisation gave an sd of 1.8e-15 through the harmonic
    # mean's arithmetic; a page printed "15.7 ± 0.00000000000000178"
    runs = {"a": [15.7 * 3 / 3, 15.7, 0.1 * 157], "b": [10.0, 10.0, 10.003]}
    table = cover_table(_metrics(runs), "a", metric_names=["read_iops"], mean="amean")
    assert table.set_index("variant").loc["a", "stddev"] == 0
    means = {cells[2]: cells[3] for line in render_cover(table, "cover").splitlines()
             if len(cells := [c.strip() for c in line.strip("|").split("|")]) > 3}
    assert means["a"] == "15.7 ± 0"
    assert means["b"] == "10.0 ± 0.00173"  # below the mean's last digit, but a spread: its own digits


@pytest.mark.parametrize("fmt", ["cover", "cover-html", "cover-text"])
def test_compare_writes_the_cover_letter_table(tmp_path, fmt):
    path = tmp_path / "metrics.csv"
    _metrics().to_csv(path, index=False)
    proc = subprocess.run([str(LISA_EXT), "compare", str(path), "--baseline", "menu+boost", "--format", fmt,
                           "--mean", "amean", "--confidence", "0.9"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == render_cover(cover_table(_metrics(), "menu+boost", mean="amean", confidence=0.9), fmt)
    assert ("90 % CI" in proc.stdout) or ("CI90" in proc.stdout)
