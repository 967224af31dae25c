"""The store layout and the workload parsers, checked on the committed sample campaign."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from campaign_helpers import REPO
from lisa_ext.campaign.status import campaign_status
from lisa_ext.campaign.store.metrics import METRICS_COLUMNS
from lisa_ext.campaign.store.reader import metrics_table, read_campaign
from lisa_ext.campaign.store.records import Metric, RunKey, RunResult
from lisa_ext.campaign.store.writer import CampaignStore
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
    tmp = store.scratch(key)
    result = RunResult("c", "v", "w", 0, "ok", None, [Metric("x", 1.5, "us", True)])
    (tmp / "trace.dat").write_bytes(b"trace")
    assert store.results() == {}  # not visible before the rename
    store.publish(key, {"k": 1}, result, tmp)
    assert store.results()[key].metrics == [Metric("x", 1.5, "us", True)]
    assert (tmp_path / "runs/v/w/0/trace.dat").read_bytes() == b"trace"
    partial = store.scratch(RunKey("v", "w", 1))
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


def _synced_around(monkeypatch, renamed_to: Path, action) -> tuple[set[str], set[str]]:
    """Paths fsynced before and after the rename (os.rename or os.replace) onto
    ``renamed_to`` while ``action()`` runs."""
    before, after, seen = set(), set(), []
    real_fsync, real_rename, real_replace = os.fsync, os.rename, os.replace

    def fsync(fd):
        (after if seen else before).add(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    def renaming(real):
        def rename(src, dst, *args, **kwargs):
            result = real(src, dst, *args, **kwargs)
            if Path(dst) == renamed_to:
                seen.append(src)
            return result
        return rename

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", renaming(real_rename))
    monkeypatch.setattr(os, "replace", renaming(real_replace))
    action()
    monkeypatch.undo()
    assert seen, f"nothing was renamed to {renamed_to}"
    return before, after


def test_publish_syncs_every_file_and_directory_before_the_rename(tmp_path, monkeypatch):
    store = CampaignStore(tmp_path / "c")
    key = RunKey("v", "w", 0)
    scratch = store.scratch(key)
    (scratch / "trace.dat").write_bytes(b"t" * 4096)
    (scratch / "wa-output" / "job" / "logs").mkdir(parents=True)
    (scratch / "wa-output" / "result.json").write_text("{}")
    (scratch / "wa-output" / "job" / "logs" / "run.log").write_text("log")
    (scratch / "wa-output" / "empty").mkdir()
    result = RunResult("c", "v", "w", 0, "ok", None, [])
    expected = {str(p) for p in [scratch, *scratch.rglob("*")]}
    expected |= {str(scratch / "meta.json"), str(scratch / "result.json")}
    final = store.run_dir(key)

    before, after = _synced_around(monkeypatch, final, lambda: store.publish(key, {}, result, scratch))
    assert sorted(expected - before) == []
    # the rename itself is made durable: the directories holding the run are synced after it
    assert {str(final.parent), str(final.parent.parent), str(store.runs_dir)} <= after
    assert (final / "wa-output" / "job" / "logs" / "run.log").read_text() == "log"


def test_spec_copy_is_synced(tmp_path, monkeypatch):
    store = CampaignStore(tmp_path / "c")
    before, after = _synced_around(monkeypatch, store.spec_copy, lambda: store.write_spec_copy("name: c\n"))
    assert str(store.spec_copy) + ".part" in before  # the new copy's bytes, before it replaces the old
    assert str(store.root) in after                  # and the directory entry, after
    assert store.spec_copy.read_text() == "name: c\n"


def _campaign_with_runs(root: Path, n: int = 3) -> CampaignStore:
    (root).mkdir(parents=True)
    (root / "campaign.yml").write_text(f"name: c\ntarget: t.yml\niterations: {n}\nvariants:\n  - name: v\n"
                                       "workloads:\n  - name: w\n    kind: rtapp\n    duration-s: 1\n"
                                       "    tasks: {t: {duty-cycle-pct: 10, period-ms: 10}}\n")
    store = CampaignStore(root)
    for i in range(n):
        store.publish(RunKey("v", "w", i), {}, RunResult("c", "v", "w", i, "ok", None,
                                                         [Metric("lat", float(i), "us", True)]))
    return store


def test_truncated_result_is_listed_and_repaired_not_fatal(tmp_path):
    store = _campaign_with_runs(tmp_path / "c")
    bad = store.run_dir(RunKey("v", "w", 1)) / "result.json"
    bad.write_bytes(bad.read_bytes()[:40])  # a crash mid-write of an older runner, a full disk, ...
    with pytest.raises(SpecError, match=r"runs/v/w/1/result.json.*not valid JSON.*status --repair"):
        read_campaign(store.root)

    status = campaign_status(store.root)
    assert [b.label for b in status.damaged] == ["v/w/1"]
    assert [str(k) for k in status.done] == ["v/w/0", "v/w/2"] and not status.missing
    text = status.render()
    assert "1 damaged" in text and "damaged  v/w/1" in text and "--repair" in text

    repaired = campaign_status(store.root, repair=True)
    moved = store.quarantine_dir / "v" / "w" / "1"
    assert (moved / "result.json").is_file() and not store.run_dir(RunKey("v", "w", 1)).exists()
    assert [str(k) for k in repaired.missing] == ["v/w/1"] and not repaired.damaged
    assert f"moved the damaged run v/w/1 aside to {moved}" in repaired.render()
    assert [r.iteration for r in read_campaign(store.root).runs] == [0, 2]  # the others are kept

    # a second damaged copy of the same run does not overwrite the first one moved aside
    store.scratch(RunKey("v", "w", 1))
    (store.runs_dir / "v" / "w" / ".tmp-1").rename(store.run_dir(RunKey("v", "w", 1)))
    assert campaign_status(store.root, repair=True).repaired[0][1] == moved.with_name("1-1")


def test_journal_of_a_published_run_is_reported_as_kept(tmp_path):
    from lisa_ext.campaign.recovery import undo_stopped_run
    from lisa_ext.campaign.session import TargetSession

    class NoTarget:  # what undo asks a target when the journal lists no process, knob or instance
        def execute(self, command, **kwargs):
            return ""

    store = _campaign_with_runs(tmp_path / "c", n=1)
    session = TargetSession(NoTarget(), store.journal)
    session.begin("/tmp/x", run="v/w/0", tmp=str(store.runs_dir / "v/w/.tmp-0"))
    assert campaign_status(store.root).interrupted == "v/w/0"
    assert undo_stopped_run(session, store) == [
        "kept the run v/w/0: it was complete and published when the runner stopped"]
    assert store.journal.read() is None
    session.begin("/tmp/x", run="v/w/1", tmp=str(store.runs_dir / "v/w/.tmp-1"))
    assert undo_stopped_run(session, store) == ["discarded the partial run v/w/1"]


def test_a_journal_this_machine_did_not_write_runs_nothing(tmp_path, monkeypatch):
    """Resuming a colleague's campaign directory must not run its journal's commands as root."""
    from lisa_ext.campaign.session import TargetSession

    class RecordingTarget:
        def __init__(self):
            self.commands = []

        def execute(self, command, **kwargs):
            self.commands.append(command)
            return ""

    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "mine"))
    store = _campaign_with_runs(tmp_path / "c", n=1)
    target = RecordingTarget()
    session = TargetSession(target, store.journal)
    session.begin("/tmp/x", run="v/w/1", tmp=str(store.runs_dir / "v/w/.tmp-1"))
    session.note_cleanup("echo our own cleanup")
    assert store.journal.read()["cleanups"] == ["echo our own cleanup"]

    # the same journal, written with another machine's key, then one edited by hand
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "colleague"))
    store.journal.write({**store.journal.read(), "cleanups": ["touch /pwned"]})
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "mine"))
    for journal in (store.journal.path.read_text(),
                    store.journal.path.read_text().replace("touch /pwned", "rm -rf /")):
        store.journal.path.write_text(journal)
        done = TargetSession(target, store.journal).undo()
        assert len(done) == 1 and "was not written by this workbench on this machine" in done[0]
        assert target.commands == [] and store.journal.read() is None


@pytest.mark.parametrize("content, expected", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (" " * (17 * 2**20) + "{}", "larger than 16 MiB"),
])
def test_hostile_result_json_is_one_error(tmp_path, content, expected):
    store = _campaign_with_runs(tmp_path / "c", n=1)
    (store.run_dir(RunKey("v", "w", 0)) / "result.json").write_text(content)
    with pytest.raises(SpecError, match=expected):
        read_campaign(store.root)
