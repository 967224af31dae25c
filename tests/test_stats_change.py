"""The confidence interval of a % change (lisa_ext.stats.change), against independent oracles:
Fieller's quadratic solved by numpy, scipy's own Welch interval on the logs, and the coverage
of simulated samples whose true ratio is known."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
import scipy.stats as sps

from lisa_ext import stats
from lisa_ext.stats.change import pct_change_ci, pct_change_ci_from_stats
from lisa_ext.stats.summary import sample_sd

#: RFC 000's RK3399 fio IOPS runs (../shared/rfcs/000_58751f302850aa96.txt)
MENU_BOOST = [2584, 2622, 2629]
MENU_NO_BOOST = [2068, 2097, 2647]
TEO_BOOST = [4476, 4478, 4492]


def _fieller_by_hand(base, new, confidence=0.95):
    """The ratios R where (b - R a)^2 = t^2 (vb + R^2 va), solved as a polynomial by numpy."""
    a, b = np.mean(base), np.mean(new)
    va, vb = np.var(base, ddof=1) / len(base), np.var(new, ddof=1) / len(new)
    r = b / a
    df = (vb + r * r * va) ** 2 / (vb ** 2 / (len(new) - 1) + (r * r * va) ** 2 / (len(base) - 1))
    t2 = sps.t.ppf(0.5 + confidence / 2, df) ** 2
    roots = np.sort(np.roots([a * a - t2 * va, -2 * a * b, b * b - t2 * vb]).real)
    return tuple(100 * (roots - 1))


@pytest.mark.parametrize("new", [MENU_NO_BOOST, TEO_BOOST])
def test_amean_interval_is_fiellers(new):
    low, high = pct_change_ci(MENU_BOOST, new, "amean")
    assert (low, high) == pytest.approx(_fieller_by_hand(MENU_BOOST, new), rel=1e-9)
    point = stats.pct_change(np.mean(new), np.mean(MENU_BOOST))
    assert low < point < high


def test_from_stats_matches_the_runs():
    by_runs = pct_change_ci(MENU_BOOST, TEO_BOOST)
    by_stats = pct_change_ci_from_stats(np.mean(MENU_BOOST), np.std(MENU_BOOST, ddof=1), 3,
                                        np.mean(TEO_BOOST), np.std(TEO_BOOST, ddof=1), 3)
    assert by_stats == pytest.approx(by_runs, rel=1e-12)


def test_gmean_interval_is_welchs_on_the_logs():
    logs = sps.ttest_ind(np.log(TEO_BOOST), np.log(MENU_BOOST), equal_var=False).confidence_interval(0.9)
    expected = (100 * (math.exp(logs.low) - 1), 100 * (math.exp(logs.high) - 1))
    assert pct_change_ci(MENU_BOOST, TEO_BOOST, "gmean", confidence=0.9) == pytest.approx(expected, rel=1e-9)


def test_hmean_interval_brackets_the_change_of_hmeans():
    low, high = pct_change_ci(MENU_BOOST, MENU_NO_BOOST, "hmean")
    point = stats.pct_change(stats.mean_of(MENU_NO_BOOST, "hmean"), stats.mean_of(MENU_BOOST, "hmean"))
    assert low < point < high
    # the hmean ratio is mean(1/base) / mean(1/new): Fieller on the reciprocals, by hand
    inv = _fieller_by_hand(1 / np.array(MENU_NO_BOOST), 1 / np.array(MENU_BOOST))
    assert (low, high) == pytest.approx(inv, rel=1e-9)


@pytest.mark.parametrize("kind", ["amean", "hmean", "gmean"])
def test_intervals_cover_the_true_change_95_percent_of_the_time(kind):
    rng = np.random.default_rng(23)
    trials, n, covered = 2000, 4, 0
    base = rng.lognormal(math.log(100), 0.1, size=(trials, n))
    new = rng.lognormal(math.log(120), 0.15, size=(trials, n))
    # the true ratio of the two population means of that kind
    true_ratio = {"gmean": 1.2, "amean": 1.2 * math.exp((0.15 ** 2 - 0.1 ** 2) / 2),
                  "hmean": 1.2 * math.exp(-(0.15 ** 2 - 0.1 ** 2) / 2)}[kind]
    for a, b in zip(base, new):
        low, high = pct_change_ci(a, b, kind)
        covered += low <= 100 * (true_ratio - 1) <= high
    assert 0.93 <= covered / trials <= 0.97


def test_no_interval_without_two_runs_on_each_side():
    assert all(math.isnan(x) for x in pct_change_ci([1.0], [1.0, 2.0]))
    assert all(math.isnan(x) for x in pct_change_ci([1.0, 2.0], [3.0, float("nan")]))
    assert all(math.isnan(x) for x in pct_change_ci([1.0, 2.0], [-1.0, 2.0], "gmean"))


def test_no_spread_gives_the_point_and_a_baseline_near_zero_no_bound():
    assert pct_change_ci([10.0, 10.0], [12.0, 12.0]) == pytest.approx((20.0, 20.0))
    assert pct_change_ci([10.0, 10.0], [12.0, 12.0], "gmean") == pytest.approx((20.0, 20.0))
    assert pct_change_ci([-1.0, 1.2, 0.1], [5.0, 6.0, 7.0]) == (-math.inf, math.inf)


def test_runs_equal_but_for_rounding_give_a_point_interval():
    # the same 15.7 reached by three computations: numpy's sd is 1.8e-15, and the interval was
    # [x - tiny, x + tiny] around an estimate the rerun check then found outside it
    equal = [15.7 * 3 / 3, 15.7, 0.1 * 157]
    assert np.std(equal, ddof=1) > 0
    assert sample_sd(equal) == 0.0 and sample_sd([15.7, 15.7]) == 0.0
    for kind in ("amean", "hmean", "gmean"):
        low, high = pct_change_ci(equal, [20.0, 20.0, 20.0], kind)
        assert low == high == pytest.approx((20.0 / 15.7 - 1) * 100)
    # a real spread, however small against the mean, stays one
    assert sample_sd([10.0, 10.0, 10.003]) == pytest.approx(statistics.stdev([10.0, 10.0, 10.003]))
    assert sample_sd([1e6, 1e6 + 1e-4]) > 0 and math.isnan(sample_sd([1.0]))


def test_compare_gives_each_change_its_interval():
    import pandas as pd

    from lisa_ext.campaign.store.metrics import validate_metrics

    rows = [dict(campaign="c", variant=v, workload="fio", metric="iops", unit="IO/s", lower_is_better=False,
                 iteration=i, value=x)
            for v, values in (("menu+boost", MENU_BOOST), ("teo+boost", TEO_BOOST)) for i, x in enumerate(values)]
    cmp = stats.compare(validate_metrics(pd.DataFrame(rows)), "menu+boost", mean="amean").set_index("variant")
    assert cmp.loc["teo+boost", ["pct_ci_low", "pct_ci_high"]].tolist() == pytest.approx(
        list(pct_change_ci(MENU_BOOST, TEO_BOOST)))
    assert cmp.loc["menu+boost", ["pct_ci_low", "pct_ci_high"]].isna().all()
