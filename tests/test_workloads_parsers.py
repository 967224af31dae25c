"""Workload output parsers, on outputs captured from the real binaries (tests/fixtures/workloads).

The fixtures were produced on this machine: schbench and sleeping ebizzy built
from ../shared/src, pgbench 15 against a throw-away cluster, hackbench and
cyclictest from Debian's rt-tests. Expected figures are read off the files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lisa_ext.campaign.cpu_util import parse_proc_stat, utilisation
from lisa_ext.campaign.workloads import WorkloadError
from lisa_ext.campaign.workloads.cyclictest import parse_cyclictest_histogram
from lisa_ext.campaign.workloads.ebizzy import achieved_util_pct, parse_ebizzy
from lisa_ext.campaign.workloads.fio import read_fio_json
from lisa_ext.campaign.workloads.hackbench import parse_hackbench
from lisa_ext.campaign.workloads.pgbench import parse_pgbench
from lisa_ext.campaign.workloads.schbench import parse_schbench, parse_schbench_text

FIXTURES = Path(__file__).parent / "fixtures" / "workloads"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


def _by_name(metrics) -> dict:
    return {m.name: m for m in metrics}


def test_schbench_json_and_text_agree_on_the_final_report():
    text = _text("schbench-r3-m2-t1.txt")
    data = json.loads(_text("schbench-r3-m2-t1.json"))
    from_json = _by_name(parse_schbench(text, data))
    from_text = parse_schbench_text(text)
    # the text holds an interim report (runtime 2 s) then the final one (3 s): the final wins
    assert from_text["Wakeup Latencies"]["p50"] == 7
    assert from_text["Request Latencies"]["p99_9"] == 50240
    for stat in ("p50", "p90", "p99", "p99_9", "min", "max"):
        assert from_json[f"wakeup_lat_{stat}"].value == from_text["Wakeup Latencies"][stat]
        assert from_json[f"request_lat_{stat}"].value == from_text["Request Latencies"][stat]
    assert from_json["wakeup_lat_p99"].unit == "us" and from_json["wakeup_lat_p99"].lower_is_better
    assert from_json["rps_avg"].value == 67.0 and not from_json["rps_avg"].lower_is_better
    assert from_json["rps_p50"].value == 62


def test_schbench_text_only():
    metrics = _by_name(parse_schbench(_text("schbench-r3-m2-t1.txt")))
    assert metrics["wakeup_lat_max"].value == 8885
    assert metrics["rps_max"].value == 71


def test_schbench_without_report_is_an_error():
    with pytest.raises(WorkloadError, match="no wake-up latency"):
        parse_schbench("schbench: invalid option -- 'x'\n")


def test_ebizzy():
    values = parse_ebizzy(_text("ebizzy-S2-t1-a50-i1000.txt"))
    assert values == {"records_per_s": 16000, "real_s": 2.0, "user_s": 0.57, "sys_s": 0.01}
    assert achieved_util_pct(values, 1) == pytest.approx(29.0)
    with pytest.raises(WorkloadError, match="records_per_s"):
        parse_ebizzy("real 1.00 s\nuser 0.1 s\nsys 0.0 s\n")


@pytest.mark.parametrize("name, expected", [
    ("pgbench-S-R10-c4.txt", {"transactions": 18, "failed": 0, "latency_avg": 1.407, "latency_stddev": 1.412,
                              "tps": 6.589366, "lag_avg": 0.233, "lag_max": 0.702}),
    ("pgbench-R200-L5-c2.txt", {"transactions": 381, "failed": 0, "skipped": 25, "late": 206,
                                "latency_avg": 5.985, "latency_stddev": 5.315, "tps": 190.892858}),
])
def test_pgbench(name, expected):
    metrics = _by_name(parse_pgbench(_text(name)))
    assert {k: metrics[k].value for k in expected} == expected
    assert not metrics["tps"].lower_is_better and metrics["latency_avg"].lower_is_better


def test_pgbench_failure_output_is_an_error():
    with pytest.raises(WorkloadError, match="tps"):
        parse_pgbench('pgbench: error: connection to server on socket "/x/.s.PGSQL.5432" failed\n')


def test_pgbench_without_a_transaction_says_why():
    # pgbench 15's report when -T ends before any transaction (it then prints no latency or tps)
    text = ("pgbench (15.18 (Debian 15.18-0+deb12u1))\ntransaction type: <builtin: select only>\n"
            "number of clients: 44\nduration: 3 s\nnumber of transactions actually processed: 0\n"
            "number of failed transactions: 0 (NaN%)\n")
    with pytest.raises(WorkloadError, match="no transaction within duration-s"):
        parse_pgbench(text)


def test_hackbench():
    assert [(m.name, m.value, m.unit) for m in parse_hackbench(_text("hackbench-g2-l200.txt"))] == [
        ("time", 0.797, "s")]


def test_cyclictest_histogram():
    metrics = _by_name(parse_cyclictest_histogram(_text("cyclictest-t2-h200.txt")))
    # "# Total: 1965 1940" in the histogram + "# Histogram Overflows: 28 34"
    assert metrics["samples"].value == 1965 + 1940 + 28 + 34
    assert metrics["overflows"].value == 62
    assert metrics["lat_min"].value == 28 and metrics["lat_max"].value == 5335
    assert 100 <= metrics["lat_avg"].value <= 101
    assert metrics["lat_p50"].value <= metrics["lat_p90"].value < 200
    # 62 of 3967 samples (1.6 %) are above the 200 us range: p99 is not known, so not reported
    assert "lat_p99" not in metrics and "lat_p99_9" not in metrics


def test_cpu_util_from_proc_stat():
    before = parse_proc_stat("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n"
                             "cpu1 50 0 25 400 25 0 0 0 0 0\nintr 1 2 3\n")
    after = parse_proc_stat("cpu  250 0 100 900 50 0 0 0 0 0\ncpu0 200 0 50 400 25 0 0 0 0 0\n"
                            "cpu1 50 0 50 500 25 0 0 0 0 0\n")
    util = utilisation(before, after)
    assert util["cpu0"]["busy_pct"] == 100.0
    assert util["cpu1"]["busy_pct"] == pytest.approx(100 * 25 / 125, abs=1e-3)
    assert util["cpu"]["busy_pct"] == pytest.approx(100 * 200 / 300, abs=1e-3)


def test_fio_json_after_fio_notes():
    # fio writes notes such as "fio: multiple writers may overwrite blocks ..." into --output first
    path = FIXTURES / "fio-note-then-json.json"
    assert path.read_text().startswith("fio: multiple writers")
    data = read_fio_json(path)
    assert data["fio version"].startswith("fio-3")
    assert data["jobs"][0]["jobname"] == "t"


def test_fio_json_garbage_is_an_error(tmp_path):
    bad = tmp_path / "fio.json"
    bad.write_text("fio: pid=0, err=22/file:filesetup.c:1, func=open, error=Invalid argument\n")
    with pytest.raises(WorkloadError, match="not fio JSON output"):
        read_fio_json(bad)
