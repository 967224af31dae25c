"""The store layout and the workload parsers, checked on the committed sample campaign."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from campaign_helpers import REPO
from lisa_ext.campaign.status import campaign_status
from lisa_ext.campaign.store import (
    METRICS_COLUMNS,
    CampaignStore,
    Metric,
    RunKey,
    RunResult,
    metrics_table,
    read_campaign,
)
from lisa_ext.errors import SpecError
from lisa_ext.campaign.workloads.fio import parse_fio_json
from lisa_ext.campaign.workloads.rtapp import parse_rtapp_log, task_metrics

SAMPLE = REPO / "data" / "samples" / "wq-affinity"


def test_sample_is_complete_and_small():
    status = campaign_status(SAMPLE)
    assert len(status.done) == 12 and not status.failed and not status.missing
    size = sum(f.stat().st_size for f in SAMPLE.rglob("*") if f.is_file())
    assert size < 3_000_000
    for run in (SAMPLE / "runs").glob("*/*/*"):
        meta = json.loads((run / "meta.json").read_text())
        result = json.loads((run / "result.json").read_text())
        assert set(result) == {"campaign", "variant", "workload", "iteration", "status", "error", "metrics"}
        assert (result["variant"], result["workload"], str(result["iteration"])) == run.parts[-3:]
        knob = meta["knobs"]["/sys/module/workqueue/parameters/default_affinity_scope"]
        assert knob["read_back"] == knob["requested"] == result["variant"]
        assert meta["kernel"]["release"] and meta["tools"]["trace-cmd"]["version"]
        traced = (run / "trace.dat").exists()
        assert traced == (result["workload"] == "fio-randread" and result["iteration"] == 0)


def test_fio_metrics_match_fio_json():
    raw = json.loads((SAMPLE / "runs/cache/fio-randread/1/fio.json").read_text())
    metrics = {m.name: m for m in parse_fio_json(raw)}
    read = raw["jobs"][0]["read"]
    assert metrics["read_iops"].value == pytest.approx(read["iops"])
    assert metrics["read_bw"].value == read["bw"] and metrics["read_bw"].unit == "KiB/s"
    assert metrics["read_clat_p99"].value == pytest.approx(read["clat_ns"]["percentile"]["99.000000"] / 1000)
    assert metrics["read_clat_mean"].lower_is_better and not metrics["read_iops"].lower_is_better
    assert "write_iops" not in metrics  # a read-only job reports no write figures


def _independent_rtapp(path: Path) -> dict:
    """slack, perf index and wake-up latency straight from the log text."""
    slack, perf, wu = [], [], []
    for line in path.read_text().splitlines():
        f = line.split()
        if not f or f[0].startswith("#"):
            continue
        s, c_duration, c_period, w = int(f[7]), int(f[8]), int(f[9]), int(f[10])
        slack.append(s)
        perf.append(s / (c_period - c_duration))
        wu.append(w)
    return {"slack_mean": sum(slack) / len(slack), "perf_index_mean": sum(perf) / len(perf),
            "missed_pct": 100 * sum(s < 0 for s in slack) / len(slack),
            "wu_lat_mean": sum(wu) / len(wu), "activations": len(slack)}


def test_rtapp_metrics_match_log():
    run = SAMPLE / "runs/system/rtapp-periodic/2"
    result = {m["name"]: m["value"] for m in json.loads((run / "result.json").read_text())["metrics"]}
    for task in ("small", "medium"):
        log = next(run.glob(f"rt-app-{task}-*.log"))
        expected = _independent_rtapp(log)
        got = {m.name.removeprefix(f"{task}_"): m.value for m in task_metrics(task, parse_rtapp_log(log))}
        for key, value in expected.items():
            assert got[key] == pytest.approx(value), (task, key)
            assert result[f"{task}_{key}"] == pytest.approx(value), (task, key)


def test_metrics_table_is_tidy():
    df = metrics_table(SAMPLE)
    assert list(df.columns) == METRICS_COLUMNS
    n_expected = sum(len(json.loads(p.read_text())["metrics"]) for p in SAMPLE.glob("runs/*/*/*/result.json"))
    assert len(df) == n_expected
    assert not df.duplicated(["variant", "workload", "metric", "iteration"]).any()
    assert set(df["iteration"]) == {0, 1, 2}


def test_atomic_commit_and_partial_cleanup(tmp_path):
    store = CampaignStore(tmp_path)
    key = RunKey("v", "w", 0)
    tmp = store.new_tmp_run_dir(key)
    result = RunResult("c", "v", "w", 0, "ok", None, [Metric("x", 1.5, "us", True)])
    (tmp / "result.json").write_text(json.dumps(result.to_json()))
    assert store.results() == {}  # not visible before the rename
    store.commit_run(tmp, key)
    assert store.results()[key].metrics == [Metric("x", 1.5, "us", True)]
    partial = store.new_tmp_run_dir(RunKey("v", "w", 1))
    (partial / "trace.dat").write_bytes(b"half")
    assert store.remove_partial_runs() == [partial]
    assert sorted(os.listdir(tmp_path / "runs/v/w")) == ["0"]


def _write_run(root, variant, iteration, status, value, meta):
    run = root / "runs" / variant / "w" / str(iteration)
    run.mkdir(parents=True)
    result = RunResult("c", variant, "w", iteration, status, None if status == "ok" else "boom",
                       [Metric("lat", value, "us", True)])
    (run / "result.json").write_text(json.dumps(result.to_json()))
    (run / "meta.json").write_text(json.dumps(meta))


def test_run_meta_keeps_keys_it_does_not_know(tmp_path):
    meta = {"kernel": {"release": "6.12.0"}, "duration_s": 1.5,
            "energy": {"joules": 3.25}, "trace_lost_events": 0}
    _write_run(tmp_path, "v", 0, "ok", 1.0, meta)
    run = read_campaign(tmp_path).runs[0]
    assert run.meta.kernel_release == "6.12.0" and run.meta.duration_s == 1.5
    assert run.meta["energy"] == {"joules": 3.25} and run.meta.get("trace_lost_events") == 0
    assert dict(run.meta) == meta


def test_failed_runs_are_out_of_every_metrics_reader_by_default(tmp_path):
    (tmp_path / "campaign.yml").write_text("name: c\nvariants:\n  - name: v\n  - name: a\n"
                                           "workloads:\n  - name: w\n")
    _write_run(tmp_path, "v", 0, "ok", 1.0, {})
    _write_run(tmp_path, "v", 1, "failed", 99.0, {})
    _write_run(tmp_path, "a", 0, "ok", 2.0, {})
    df = metrics_table(tmp_path)
    # spec order (v before a), the failed run's partial metric left out
    assert list(df["variant"]) == ["v", "a"] and list(df["value"]) == [1.0, 2.0]
    assert list(metrics_table(tmp_path, include_failed=True)["value"]) == [1.0, 99.0, 2.0]
    from lisa_ext.quickstart import per_run_table
    from lisa_ext.report.campaign import metrics_frame

    report = metrics_frame(read_campaign(tmp_path))
    pd.testing.assert_frame_equal(report, df)
    assert sorted(per_run_table(tmp_path, "w")["lat [us]"]) == [1.0, 2.0]


def test_bad_meta_json_is_named(tmp_path):
    _write_run(tmp_path, "v", 0, "ok", 1.0, {})
    (tmp_path / "runs/v/w/0/meta.json").write_text("{not json")
    with pytest.raises(SpecError, match=r"runs/v/w/0/meta.json"):
        read_campaign(tmp_path).runs[0].meta
