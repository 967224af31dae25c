"""Direction verdicts from a confidence interval of our change (lisa_ext.stats.verdict, rfc.direction)."""

import math

import pandas as pd
import pytest

from lisa_ext.stats.verdict import AGREES, NO_VERDICT, OPPOSITE, WITHIN_NOISE, direction_verdict, sign_of
from lisa_ext.studies import rfc


@pytest.mark.parametrize("low, high, rfc_sign, verdict", [
    (1.0, 3.0, 1, AGREES), (-3.0, -1.0, -1, AGREES),
    (1.0, 3.0, -1, OPPOSITE), (-3.0, -1.0, 1, OPPOSITE),
    (-1.0, 3.0, 1, WITHIN_NOISE), (-1.0, 3.0, -1, WITHIN_NOISE),
    (-1.0, 3.0, 0, AGREES), (1.0, 3.0, 0, OPPOSITE),
])
def test_verdicts(low, high, rfc_sign, verdict):
    assert direction_verdict(low, high, rfc_sign) == verdict


def test_no_interval_no_verdict():
    assert direction_verdict(math.nan, math.nan, 1) == NO_VERDICT


def test_sign_of_a_published_change():
    assert (sign_of(1.6), sign_of(-0.2), sign_of(0.8, tolerance_pct=1.0)) == (1, -1, 0)


def _ebizzy_table(without: list[float], with_: list[float]) -> pd.DataFrame:
    rows = [("without", without), ("with", with_)]
    metrics = pd.DataFrame([{"variant": v, "workload": "ebizzy-40pct", "metric": "records_per_s", "value": x}
                            for v, values in rows for x in values])
    values = rfc.rows_from_metrics(metrics, {"40%": "records_per_s"})
    return rfc.variant_table("ondemand-bursty", "sleeping-ebizzy", values)


@pytest.mark.parametrize("with_, expected", [
    ([110.0, 111.0, 109.0], "the direction agrees"),       # the RFC: +1.6 % at 40 %
    ([90.0, 91.0, 89.0], "the opposite direction"),
    ([100.0, 103.0, 97.0], "no change within our noise"),  # +0 %: no longer "does not agree"
    ([101.0, 102.0, 103.0], "no change within our noise"),  # same sign as the RFC, inside the noise
])
def test_rfc_direction_reads_the_per_run_values(with_, expected):
    ours = _ebizzy_table([100.0, 101.0, 99.0], with_)
    sentence = rfc.direction("ondemand-bursty", "sleeping-ebizzy", ours, "40%", "Without patch", "With patch",
                             tolerance_pct=0.5)
    assert sentence.startswith("40%, With patch vs Without patch: RFC +1.6 %")
    assert sentence.endswith(f"{expected}."), sentence
    assert "3 and 3 runs" in sentence


def test_rfc_direction_without_two_runs_gives_no_verdict():
    ours = _ebizzy_table([100.0], [120.0])
    sentence = rfc.direction("ondemand-bursty", "sleeping-ebizzy", ours, "40%", "Without patch", "With patch")
    assert "ours +20.0 %" in sentence and "no verdict" in sentence and "1 and 1" in sentence


def test_sentence_when_the_rfc_reports_no_change():
    """wq-affinity's RFC: +0.6 % at HIGH, within the 1 % it calls no change."""
    same = rfc.direction_sentence("HIGH, CACHE vs SYSTEM", 0.6, 2.0, [100.0, 104.0, 96.0], [101.0, 106.0, 99.0])
    assert same.endswith("no change within our noise, as in the RFC.")
    moved = rfc.direction_sentence("HIGH, CACHE vs SYSTEM", 0.6, 20.0, [100.0, 101.0, 99.0], [120.0, 121.0, 119.0])
    assert moved.endswith("the opposite direction.")


def test_change_column_of_a_column_without_variant_stays_empty():
    """RFC 002's "shallow" column has no variant of ours: "shallow (%)" once repeated "teo (%)"."""
    metrics = pd.DataFrame([{"variant": v, "workload": "pcmark-web", "metric": "wakeup_lat", "value": x}
                            for v, x in (("menu", 200.0), ("teo", 150.0), ("teo-util", 100.0))])
    values = rfc.rows_from_metrics(metrics, {"gmean task wakeup latency": "wakeup_lat"})
    table = rfc.variant_table("teo-util", "pcmark-web", values)
    row = table.loc["gmean task wakeup latency"]
    assert (row["teo (%)"], row["teo + util-aware (%)"]) == (-25.0, -50.0)
    assert row[["shallow", "shallow (%)"]].isna().all(), row
