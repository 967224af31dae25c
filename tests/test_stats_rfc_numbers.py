"""Statistics checked against the fio IOPS runs published in the iowait RFC.

RFC: ../shared/rfcs/000_58751f302850aa96.txt ("Remove iowait behaviour"),
three runs per variant on RK3399 and M1 Pro. Every expected figure is computed
here independently: means with the statistics module, p-values with scipy called
directly and by hand (exact enumeration for the rank tests, numerical
integration of Student's t density for Welch).
"""

from __future__ import annotations

import itertools
import math
import statistics
from pathlib import Path

import pandas as pd
import pytest
import scipy.stats as sps

from lisa_ext import stats
from lisa_ext.campaign.store.metrics import validate_metrics
from lisa_ext.stats.tests import mmtests_halfwidth

REPO = Path(__file__).resolve().parents[1]
RFC = REPO.parent / "shared" / "rfcs" / "000_58751f302850aa96.txt"

RUNS = {
    "RK3399": {
        "menu+boost": [2584, 2622, 2629],
        "menu-boost": [2068, 2097, 2647],
        "teo+boost": [4476, 4478, 4492],
        "teo-boost": [3728, 3733, 3737],
    },
    "M1 Pro": {
        "menu+boost": [12780, 12788, 12790],
        "menu-boost": [8354, 8359, 8389],
        "teo+boost": [12680, 12708, 12728],
        "teo-boost": [7981, 8005, 8093],
    },
}
BASELINE = "menu+boost"
QNORM_975 = 1.959963984540054  # qnorm(0.975), from any table


def _table(platform: str) -> pd.DataFrame:
    rows = [dict(campaign="iowait-rfc", variant=v, workload="fio-randread", metric="iops",
                 unit="IO/s", lower_is_better=False, iteration=i, value=x)
            for v, values in RUNS[platform].items() for i, x in enumerate(values)]
    return validate_metrics(pd.DataFrame(rows))


def test_rfc_file_has_these_runs():
    text = RFC.read_text()
    for platform in RUNS.values():
        for values in platform.values():
            assert "[" + ", ".join(map(str, values)) + "]" in text


def _t_two_sided_p(t: float, df: float, steps: int = 20000) -> float:
    """2 * P(T > |t|) by Simpson integration of Student's t density over [0, |t|]."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    f = lambda x: c * (1 + x * x / df) ** (-(df + 1) / 2)  # noqa: E731
    a, b = 0.0, abs(t)
    h = (b - a) / steps
    s = f(a) + f(b) + sum((4 if k % 2 else 2) * f(a + k * h) for k in range(1, steps))
    return 1.0 - 2.0 * s * h / 3.0


def _welch_by_hand(a, b) -> float:
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    t = (statistics.fmean(a) - statistics.fmean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return _t_two_sided_p(t, df)


def _exact_rank_p(a, b, statistic) -> float:
    """Permutation p-value over every split of the pooled runs (no ties here)."""
    pooled = list(a) + list(b)
    observed = statistic(a, b)
    splits = list(itertools.combinations(range(len(pooled)), len(a)))
    hits = 0
    for idx in splits:
        x = [pooled[i] for i in idx]
        y = [pooled[i] for i in range(len(pooled)) if i not in idx]
        hits += statistic(x, y) >= observed - 1e-12
    return hits / len(splits)


def _u_distance(a, b) -> float:
    u = sum((x > y) + 0.5 * (x == y) for x in a for y in b)
    return abs(u - len(a) * len(b) / 2)


def _ks_distance(a, b) -> float:
    points = sorted(set(a) | set(b))
    return max(abs(sum(x <= p for x in a) / len(a) - sum(y <= p for y in b) / len(b))
               for p in points)


@pytest.mark.parametrize("platform", list(RUNS))
def test_means_and_spread(platform):
    summary = stats.summarise(_table(platform)).set_index("variant")
    for variant, values in RUNS[platform].items():
        row = summary.loc[variant]
        assert row["n"] == 3
        assert row["amean"] == pytest.approx(statistics.fmean(values), rel=1e-12)
        assert row["hmean"] == pytest.approx(statistics.harmonic_mean(values), rel=1e-12)
        assert row["gmean"] == pytest.approx(statistics.geometric_mean(values), rel=1e-12)
        assert row["stddev"] == pytest.approx(statistics.stdev(values), rel=1e-12)
        assert row["cv_pct"] == pytest.approx(
            100 * statistics.stdev(values) / statistics.fmean(values), rel=1e-12)
        assert (row["min"], row["max"]) == (min(values), max(values))
        # t interval of the mean: t(0.975, 2) = 4.302652729911275
        half = 4.302652729911275 * statistics.stdev(values) / math.sqrt(3)
        assert row["ci_low"] == pytest.approx(statistics.fmean(values) - half, rel=1e-9)
        assert row["ci_high"] == pytest.approx(statistics.fmean(values) + half, rel=1e-9)


@pytest.mark.parametrize("platform", list(RUNS))
def test_default_mean_is_hmean_and_pct_change(platform):
    cmp = stats.compare(_table(platform), BASELINE).set_index("variant")
    base = statistics.harmonic_mean(RUNS[platform][BASELINE])
    assert list(cmp.index) == list(RUNS[platform])
    for variant, values in RUNS[platform].items():
        hmean = statistics.harmonic_mean(values)
        assert cmp.loc[variant, "mean_kind"] == "hmean"
        assert cmp.loc[variant, "mean"] == pytest.approx(hmean, rel=1e-12)
        assert cmp.loc[variant, "pct_change"] == pytest.approx((hmean / base - 1) * 100, rel=1e-9)
        # higher is better: the sign-normalised change is the raw one
        assert cmp.loc[variant, "pct_change_better"] == cmp.loc[variant, "pct_change"]


def test_rk3399_pct_changes_read_as_the_rfc_argues():
    cmp = stats.compare(_table("RK3399"), BASELINE, mean="amean").set_index("variant")
    # teo with boost recovers far more than menu loses without it
    assert round(cmp.loc["teo+boost", "pct_change"], 2) == 71.61
    assert round(cmp.loc["menu-boost", "pct_change"], 2) == -13.06
    assert round(cmp.loc["teo-boost", "pct_change"], 2) == 42.92


@pytest.mark.parametrize("platform", list(RUNS))
@pytest.mark.parametrize("test", ["welch", "mwu", "ks"])
def test_p_values_match_scipy_and_hand(platform, test):
    cmp = stats.compare(_table(platform), BASELINE, test=test).set_index("variant")
    base = RUNS[platform][BASELINE]
    for variant, values in RUNS[platform].items():
        p = cmp.loc[variant, "p_value"]
        if variant == BASELINE:
            assert math.isnan(p)
            continue
        if test == "welch":
            expected = sps.ttest_ind(base, values, equal_var=False).pvalue
            by_hand = _welch_by_hand(base, values)
        elif test == "mwu":
            expected = sps.mannwhitneyu(base, values, alternative="two-sided").pvalue
            by_hand = _exact_rank_p(base, values, _u_distance)
        else:
            expected = sps.ks_2samp(base, values).pvalue
            by_hand = _exact_rank_p(base, values, _ks_distance)
        assert p == pytest.approx(expected, rel=1e-9)
        assert p == pytest.approx(by_hand, rel=1e-6, abs=1e-9)
        assert cmp.loc[variant, "significant"] == (p < 0.05)


def test_rank_tests_cannot_flag_three_runs():
    for platform in RUNS:
        for test in ("mwu", "ks"):
            cmp = stats.compare(_table(platform), BASELINE, test=test)
            assert cmp["p_value"].min() == pytest.approx(0.1)
            assert not cmp["significant"].any()


@pytest.mark.parametrize("platform", list(RUNS))
def test_mmtests_rule(platform):
    cmp = stats.compare(_table(platform), BASELINE, test="mmtests").set_index("variant")
    base = RUNS[platform][BASELINE]
    hb, sb = statistics.harmonic_mean(base), statistics.stdev(base)
    for variant, values in RUNS[platform].items():
        if variant == BASELINE:
            continue
        h, s = statistics.harmonic_mean(values), statistics.stdev(values)
        starred = abs(h - hb) > QNORM_975 * sb + QNORM_975 * s
        assert cmp.loc[variant, "significant"] == starred
        assert (cmp.loc[variant, "p_value"] < 0.05) == starred
    assert mmtests_halfwidth(10.0, 0.05) == pytest.approx(QNORM_975 * 10.0)


def test_mmtests_rule_verdicts_on_rk3399():
    cmp = stats.compare(_table("RK3399"), BASELINE, test="mmtests").set_index("variant")
    # menu without boost: one run at 2647 makes its spread swallow the drop
    assert not cmp.loc["menu-boost", "significant"]
    assert cmp.loc["teo+boost", "significant"] and cmp.loc["teo-boost", "significant"]


def test_mmtests_rule_ignores_n_but_welch_does_not():
    # same means and spreads, ten times the runs: Welch gets sharper, mmtests does not
    few = {"a": [100.0, 104.0, 96.0], "b": [103.0, 107.0, 99.0]}
    rows = []
    for repeat in (1, 10):
        for v, values in few.items():
            for i, x in enumerate(values * repeat):
                rows.append(dict(campaign="c", variant=v, workload=f"w{repeat}", metric="m",
                                 unit="", lower_is_better=False, iteration=i, value=x))
    df = validate_metrics(pd.DataFrame(rows))
    welch = stats.compare(df, "a", mean="amean").set_index(["workload", "variant"])
    rule = stats.compare(df, "a", mean="amean", test="mmtests").set_index(["workload", "variant"])
    assert welch.loc[("w10", "b"), "p_value"] < welch.loc[("w1", "b"), "p_value"]
    assert welch.loc[("w10", "b"), "significant"] and not welch.loc[("w1", "b"), "significant"]
    # stdev of the repeated list differs slightly (n-1), so compare verdicts, not p
    assert not rule.loc[("w1", "b"), "significant"] and not rule.loc[("w10", "b"), "significant"]


def test_too_few_iterations_are_flagged_not_starred():
    df = _table("RK3399")
    two = df[df["iteration"] < 2]
    cmp = stats.compare(two, BASELINE).set_index("variant")
    assert cmp["too_few"].all()
    assert not cmp["significant"].any()
    # the p-value is still reported: teo+boost vs menu+boost is far below 0.05
    assert cmp.loc["teo+boost", "p_value"] < 0.05


def test_auto_mean_falls_back_to_amean_when_hmean_is_undefined():
    # rt-app slack can go negative when a deadline is missed: no harmonic mean then
    rows = [dict(campaign="c", variant=v, workload="rtapp", metric="slack", unit="us",
                 lower_is_better=False, iteration=i, value=x)
            for v, values in {"a": [120.0, -30.0, 80.0], "b": [150.0, 90.0, 110.0]}.items()
            for i, x in enumerate(values)]
    cmp = stats.compare(validate_metrics(pd.DataFrame(rows)), "a").set_index("variant")
    assert set(cmp["mean_kind"]) == {"amean"}
    assert cmp.loc["a", "mean"] == pytest.approx(statistics.fmean([120.0, -30.0, 80.0]))
    assert cmp.loc["b", "pct_change"] == pytest.approx((350 / 3) / (170 / 3) * 100 - 100)
    # an explicit choice is kept, and is undefined here
    forced = stats.compare(validate_metrics(pd.DataFrame(rows)), "a", mean="hmean")
    assert math.isnan(forced.set_index("variant").loc["a", "mean"])
