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
