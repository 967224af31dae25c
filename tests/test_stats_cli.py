"""``lisa-ext compare`` end to end, through the installed console script."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from lisa_ext import stats
from lisa_ext.cli import main
from lisa_ext.errors import SpecError

REPO = Path(__file__).resolve().parents[1]
LISA_EXT = Path(sys.executable).with_name("lisa-ext")

RK3399 = {  # fio IOPS, ../shared/rfcs/000_58751f302850aa96.txt
    "menu+boost": [2584, 2622, 2629],
    "menu-boost": [2068, 2097, 2647],
    "teo+boost": [4476, 4478, 4492],
    "teo-boost": [3728, 3733, 3737],
}


@pytest.fixture()
def metrics_csv(tmp_path) -> Path:
    rows = [dict(campaign="iowait", variant=v, workload="fio", metric="iops", unit="IO/s",
                 lower_is_better=False, iteration=i, value=x)
            for v, values in RK3399.items() for i, x in enumerate(values)]
    path = tmp_path / "metrics.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _run(*args: str) -> subprocess.CompletedProcess:
    """In-process ``lisa-ext`` (importing pandas/scipy per subprocess is slow)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_console_script(metrics_csv):
    res = subprocess.run([str(LISA_EXT), "compare", str(metrics_csv), "--baseline", "menu+boost",
                          "--format", "markdown"], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert "| hmean iops [IO/s] | 2611.52 (0.0%)" in res.stdout


@pytest.mark.parametrize("fmt", ["mmtests", "markdown", "lkp", "sd", "csv"])
def test_every_format(metrics_csv, fmt):
    first = _run("compare", str(metrics_csv), "--baseline", "menu+boost", "--format", fmt)
    assert first.returncode == 0, first.stderr
    second = _run("compare", str(metrics_csv), "--baseline", "menu+boost", "--format", fmt)
    assert first.stdout == second.stdout
    assert "teo+boost" in first.stdout


def test_mmtests_output_stars_teo(metrics_csv):
    out = _run("compare", str(metrics_csv), "--baseline", "menu+boost").stdout
    hmean = next(line for line in out.splitlines() if line.startswith("Hmean"))
    # hmean 4481.99 vs 2611.52: +71.62%, starred by Welch; menu-boost is not
    assert hmean == ("Hmean     iops     2611.52 (   0.00%)     2241.79 ( -14.16%)"
                     "     4481.99 *  71.62%*     3732.66 *  42.93%*")


def test_parquet_test_and_mean_options(metrics_csv, tmp_path):
    parquet = tmp_path / "metrics.parquet"
    pd.read_csv(metrics_csv).to_parquet(parquet)
    res = _run("compare", str(parquet), "--baseline", "menu+boost", "--format", "csv",
               "--test", "mwu", "--mean", "gmean")
    assert res.returncode == 0, res.stderr
    table = pd.read_csv(pd.io.common.StringIO(res.stdout))
    assert set(table["test"]) == {"mwu"} and set(table["mean_kind"]) == {"gmean"}
    assert table["p_value"].min() == pytest.approx(0.1)


def _latency_csv(path: Path, runs: dict[str, list[float]]) -> Path:
    pd.DataFrame([dict(campaign="c", variant=v, workload="fio", metric="latency", unit="us", lower_is_better=True,
                       iteration=i, value=x) for v, values in runs.items() for i, x in enumerate(values)]
                 ).to_csv(path, index=False)
    return path


def test_rerun_says_which_rows_a_second_run_repeats(tmp_path):
    # means: menu 100 both times; teo 80 both times (-20 %); teo-util 100 then 90 (0 %, then -10 %)
    first = _latency_csv(tmp_path / "first.csv", {"menu": [99, 100, 101], "teo": [79, 80, 81],
                                                  "teo-util": [99, 101, 100]})
    second = _latency_csv(tmp_path / "second.csv", {"menu": [98, 100, 102], "teo": [78, 80, 82],
                                                    "teo-util": [89, 90, 91], "only-here": [50, 50, 51]})
    res = _run("compare", str(first), "--rerun", str(second), "--baseline", "menu", "--format", "csv")
    assert res.returncode == 0, res.stderr
    table = pd.read_csv(io.StringIO(res.stdout)).set_index("variant")
    assert table.loc["teo", "pct_change_first"] == pytest.approx(-20) == table.loc["teo", "pct_change_second"]
    assert table.loc["teo", ["verdict_first", "verdict_second"]].tolist() == ["better", "better"]
    assert table.loc["teo", ["same_verdict", "first_in_second", "second_in_first"]].all()
    assert table.loc["teo-util", "difference_points"] == pytest.approx(-10)
    assert table.loc["teo-util", ["verdict_first", "verdict_second"]].tolist() == ["no significant change", "better"]
    assert not table.loc["teo-util", ["same_verdict", "first_in_second", "second_in_first"]].any()
    assert table.loc["only-here", "in_runs"] == "second only" and not table.loc["only-here", "same_verdict"]
    text = _run("compare", str(first), "--rerun", str(second), "--baseline", "menu").stdout
    assert text.splitlines()[-1] == ("2 rows in both runs: the same verdict in 1, each estimate inside the other "
                                     "run's interval in 1; the estimates differ by at most 10.0 points "
                                     "(fio/latency/teo-util); rows in one run only: 1")
    assert "-20.0 [" in text and "] better" in text
    missing = _run("compare", str(first), "--rerun", str(_latency_csv(tmp_path / "no-menu.csv", {"teo": [1, 2]})),
                   "--baseline", "menu")
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "no-menu.csv: baseline variant 'menu' is not in the table; variants are: teo" in missing.stderr


def test_unknown_baseline_is_one_clear_error(metrics_csv):
    res = _run("compare", str(metrics_csv), "--baseline", "schedutil")
    assert res.returncode == 2
    assert "baseline variant 'schedutil' is not in the table" in res.stderr
    assert "menu+boost" in res.stderr and "Traceback" not in res.stderr


def test_bad_metrics_files(tmp_path, metrics_csv):
    table = pd.read_csv(metrics_csv)
    table.drop(columns=["unit"]).to_csv(tmp_path / "nounit.csv", index=False)
    with pytest.raises(SpecError, match=r"nounit.csv: columns: missing unit"):
        stats.read_metrics(tmp_path / "nounit.csv")
    bad = table.copy()
    bad["value"] = bad["value"].astype(object)
    bad.loc[4, "value"] = "fast"
    bad.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(SpecError, match=r"bad.csv: row 5: value: expected a number, got 'fast'"):
        stats.read_metrics(tmp_path / "bad.csv")
    mixed = table.copy()
    mixed.loc[0, "unit"] = "MiB/s"
    mixed.to_csv(tmp_path / "mixed.csv", index=False)
    with pytest.raises(SpecError, match=r"fio/iops: unit: differs between rows"):
        stats.read_metrics(tmp_path / "mixed.csv")
    res = _run("compare", str(tmp_path / "bad.csv"), "--baseline", "menu+boost")
    assert res.returncode == 2 and "row 5: value" in res.stderr


def test_a_campaign_repeats_itself_even_where_its_runs_are_equal(tmp_path):
    # the board's own clock repeats runs exactly: ebizzy's records/s were 1386 in all three runs
    # without the patch and 1486 with it, an interval [+7.2, +7.2] % that the estimate fell a few
    # ulps outside; a CPU the workload never used reads 0 in every run, so has no ratio at all
    rows = [dict(campaign="c", variant=v, workload="ebizzy", metric=m, unit="", lower_is_better=False,
                 iteration=i, value=x)
            for m, runs in {"records": {"without": 1386.0, "with": 1486.0},
                            "cpu2": {"without": 0.0, "with": 0.0}}.items()
            for v, x in runs.items() for i in range(3)]
    path = tmp_path / "equal.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    table = pd.read_csv(io.StringIO(_run("compare", str(path), "--rerun", str(path), "--baseline", "without",
                                         "--format", "csv").stdout)).set_index("metric")
    assert table.loc["records", "pct_change_first"] == pytest.approx(100 * (1486 / 1386 - 1))
    assert table.loc["records", ["same_verdict", "first_in_second", "second_in_first"]].all()
    assert not table.loc["cpu2", ["first_in_second", "second_in_first"]].any()
    assert _run("compare", str(path), "--rerun", str(path), "--baseline", "without").stdout.splitlines()[-1] == (
        "2 rows in both runs: the same verdict in 2, each estimate inside the other run's interval in 1 of the 1 "
        "with an interval in both; the estimates differ by at most 0.0 points (ebizzy/cpu2/with)")
