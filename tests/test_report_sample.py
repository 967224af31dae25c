"""``lisa-ext report`` on the sample campaign the campaign engine committed.

data/samples/wq-affinity: real fio and rt-app runs, workqueue affinity scope
``cache`` vs ``system``, iteration 0 of fio traced. The report goes to a
temporary directory (``--out``), the sample is only read; expected figures come
from reading the result.json files here with the json module.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pandas as pd
import pytest

from lisa_ext.cli import main

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wq-affinity"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sample") / "report"
    before = sorted(p for p in SAMPLE.rglob("*"))
    assert main(["report", str(SAMPLE), "--baseline", "system", "--no-html", "--out", str(out)]) == 0
    # the committed sample is only read
    assert sorted(p for p in SAMPLE.rglob("*")) == before
    return out


def _results() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(SAMPLE.glob("runs/*/*/*/result.json"))]


def test_metrics_table_is_every_result_json_metric(report):
    metrics = pd.read_csv(report / "metrics.csv")
    expected = {(r["variant"], r["workload"], r["iteration"], m["name"]): m["value"]
                for r in _results() if r["status"] == "ok" for m in r["metrics"]}
    ours = metrics[~metrics["metric"].str.startswith("trace ")]
    assert len(ours) == len(expected)
    for row in ours.itertuples():
        assert row.value == pytest.approx(
            expected[(row.variant, row.workload, row.iteration, row.metric)], rel=1e-11)


def test_every_table_covers_both_workloads_and_variants(report):
    for name in ("comparison.mmtests.txt", "comparison.md", "comparison.lkp.txt",
                 "comparison.sd.txt", "comparison.csv"):
        text = (report / name).read_text()
        for word in ("fio-randread", "rtapp-periodic", "system", "cache", "read_iops"):
            assert word in text, (name, word)


def test_iops_hmean_and_change(report):
    values = {v: [m["value"] for r in _results() if r["variant"] == v
                  and r["workload"] == "fio-randread" for m in r["metrics"]
                  if m["name"] == "read_iops"] for v in ("system", "cache")}
    base, new = (statistics.harmonic_mean(values[v]) for v in ("system", "cache"))
    mmtests = (report / "comparison.mmtests.txt").read_text().splitlines()
    line = next(x for x in mmtests if x.startswith("Hmean     read_iops"))
    assert line.split()[2] == f"{base:.2f}" and line.split()[5] == f"{new:.2f}"
    assert f"{(new / base - 1) * 100:.2f}%" in line


def test_traced_runs_give_trace_metrics_and_figures(report):
    metrics = pd.read_csv(report / "metrics.csv")
    traced = sorted(p.parent for p in SAMPLE.glob("runs/*/*/*/trace.dat"))
    lat = metrics[metrics["metric"] == "trace wakeup latency mean"]
    assert len(lat) == len(traced) > 0
    figures = {p.name for p in (report / "figures").iterdir()}
    assert "fio-randread_wakeup_latency_cdf.svg" in figures
    assert {"fio-randread_system_timeline.png", "fio-randread_cache_timeline.png"} <= figures
    assert "fio-randread_read_iops.png" in figures and "rtapp-periodic_small_slack_p5.svg" in figures
    readme = (report / "README.md").read_text()
    assert "Runs: 12 ok, 0 failed." in readme


def test_bars_of_a_p99_over_10_ms_are_drawn_in_ms(report):
    # the sample's rt-app p99 wake-up latency reaches 11259 µs: ticks of 10000 µs would be 5 digits
    svg = (report / "figures" / "rtapp-periodic_medium_wu_lat_p99.svg").read_text()
    texts = re.findall(r"<!-- (.*?) -->", svg)  # matplotlib writes each text as a comment
    assert "medium wake-up latency p99 (ms)" in texts
    ticks = [float(t) for t in texts if re.fullmatch(r"\d+(\.\d+)?", t)]
    values = [m["value"] for r in _results() if r["workload"] == "rtapp-periodic"
              for m in r["metrics"] if m["name"] == "medium_wu_lat_p99"]
    assert max(values) >= 10_000
    assert max(values) / 1000 <= max(ticks) < 100
