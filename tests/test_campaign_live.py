"""Live campaigns on this machine: real fio / rt-app runs, real tracing, real SIGKILL.

Needs root, tracefs, trace-cmd, fio and rt-app (CI has them; elsewhere the tests
skip with the reason). Each test restores the workqueue knob it varies.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from campaign_helpers import (LISA_EXT, WQ_KNOB, other_scope, read_knob, require_live,
                              trace_event_counts, write_spec)
from lisa_ext.schema import load_yaml

pytestmark = pytest.mark.live


@pytest.fixture(autouse=True)
def live_and_restore_knob():
    require_live()
    original = read_knob()
    yield original
    if read_knob() != original:
        Path(WQ_KNOB).write_text(original)
        pytest.fail(f"{WQ_KNOB} was left at {read_knob()!r}, not restored to {original!r}")


def _spec(tmp_path: Path, name: str, original: str, workloads: str, iterations: int,
          trace: str = "") -> Path:
    return write_spec(tmp_path / f"{name}.yml", f"""\
name: {name}
target: @TARGET@
iterations: {iterations}
{trace}
variants:
  - name: base
    knobs: {{{WQ_KNOB}: {original}}}
  - name: other
    knobs: {{{WQ_KNOB}: {other_scope(original)}}}
workloads:
{workloads}
""")


def _lisa_ext(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(LISA_EXT + list(args), capture_output=True, text=True, cwd=cwd, timeout=600)


def _live_process_groups() -> set[int]:
    groups = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            groups.add(int(fields[2]))  # field 5 of /proc/<pid>/stat: process group id
    return groups


def _instances() -> set[str]:
    return set(os.listdir("/sys/kernel/tracing/instances"))


def test_two_variant_campaign(tmp_path, live_and_restore_knob):
    original = live_and_restore_knob
    spec = _spec(tmp_path, "live2v", original, iterations=2, trace="""\
trace:
  events: [sched:sched_switch, sched:sched_wakeup, block:block_rq_issue, workqueue]
""", workloads="""\
  - name: io-live2v
    kind: fio
    options: {rw: randread, bs: 4k, ioengine: psync, direct: 1, size: 16M, runtime: 1, time_based: 1}
  - name: rt
    kind: rtapp
    duration-s: 1
    tasks: {busy: {duty-cycle-pct: 20, period-ms: 10}}
""")
    instances_before = _instances()
    out = tmp_path / "data"
    proc = _lisa_ext("campaign", "run", str(spec), "--out", str(out), "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "8 runs done, 0 failed" in proc.stdout
    assert read_knob() == original
    assert _instances() == instances_before  # the private ftrace instances are gone

    metas = {}
    for run in sorted(out.glob("runs/*/*/*")):
        result = json.loads((run / "result.json").read_text())
        meta = json.loads((run / "meta.json").read_text())
        metas[meta["order_index"]] = (result["variant"], result["workload"], result["iteration"])
        assert result["status"] == "ok", result["error"]
        expected = original if result["variant"] == "base" else other_scope(original)
        assert meta["knobs"][WQ_KNOB] == {"original": original, "requested": expected, "read_back": expected}
        # how pages name the platform: the target config's lisa-ext: description, as run
        assert meta["platform"]["name"] == "local-host" and meta["platform"]["description"] == "this host"
        counts = trace_event_counts(run / "trace.dat")
        metrics = {m["name"]: m["value"] for m in result["metrics"]}
        if result["workload"] == "io-live2v":
            fio = json.loads((run / "fio.json").read_text())["jobs"][0]["read"]
            assert metrics["read_iops"] == pytest.approx(fio["iops"])
            # every O_DIRECT read is one block request issued while tracing
            assert counts["block_rq_issue"] >= fio["total_ios"] > 100
        else:
            assert 90 <= metrics["busy_activations"] <= 101  # 1 s at a 10 ms period
            report = subprocess.run(["trace-cmd", "report", "-N", str(run / "trace.dat")],
                                    capture_output=True, text=True).stdout
            assert "busy-0" in report  # rt-app's task, seen by the scheduler events
        assert counts["sched_switch"] > 0
    # interleaved: base and other alternate within each iteration
    assert [metas[i] for i in sorted(metas)] == [
        ("base", "io-live2v", 0), ("other", "io-live2v", 0), ("base", "rt", 0), ("other", "rt", 0),
        ("base", "io-live2v", 1), ("other", "io-live2v", 1), ("base", "rt", 1), ("other", "rt", 1)]
    assert (out / "campaign.yml").read_text() == spec.read_text()

    status = _lisa_ext("campaign", "status", str(out), cwd=tmp_path)
    assert status.returncode == 0
    assert status.stdout.splitlines()[0] == "campaign live2v: 8 done, 0 failed, 0 missing (of 8)"

    again = _lisa_ext("campaign", "run", str(spec), "--out", str(out), cwd=tmp_path)
    assert again.returncode == 2 and "pass --resume" in again.stderr


def test_resume_after_sigkill(tmp_path, live_and_restore_knob):
    original = live_and_restore_knob
    spec = _spec(tmp_path, "livekill", original, iterations=2, trace="""\
trace:
  events: [sched:sched_switch, block:block_rq_issue]
""", workloads="""\
  - name: io-livekill
    kind: fio
    options: {rw: randread, bs: 4k, ioengine: psync, direct: 1, size: 16M, runtime: 4, time_based: 1}
""")
    out = tmp_path / "data"
    journal = out / ".runner-journal.json"
    runner = subprocess.Popen(LISA_EXT + ["campaign", "run", str(spec), "--out", str(out), "--no-progress"],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # kill it while the 'other' variant's fio runs: its knob is written, trace-cmd and fio are live
    deadline = time.monotonic() + 240
    state = {}
    while time.monotonic() < deadline:
        try:
            state = json.loads(journal.read_text())
        except (FileNotFoundError, ValueError):
            state = {}
        if state.get("run") == "other/io-livekill/0" and len(state.get("processes", [])) >= 2:
            break
        assert runner.poll() is None, runner.communicate()
        time.sleep(0.05)
    else:
        pytest.fail("the runner never reached other/io-livekill/0")
    time.sleep(1)
    runner.send_signal(signal.SIGKILL)
    runner.wait(timeout=30)
    assert runner.returncode == -signal.SIGKILL

    finished = out / "runs/base/io-livekill/0"
    before = (finished.stat().st_ino, (finished / "result.json").read_text(), (finished / "trace.dat").stat().st_size)
    assert read_knob() == other_scope(original)  # left behind by the killed runner
    assert {proc["pid"] for proc in state["processes"]} <= _live_process_groups()  # trace-cmd, fio
    assert state["instance"] in _instances()
    assert not (out / "runs/other/io-livekill/0").exists()
    assert list(out.glob("runs/other/io-livekill/.tmp-0"))  # the partial run
    status = _lisa_ext("campaign", "status", str(out), cwd=tmp_path)
    assert "interrupted during other/io-livekill/0" in status.stdout
    assert "1 done, 0 failed, 3 missing" in status.stdout

    resumed = _lisa_ext("campaign", "run", str(spec), "--out", str(out), "--resume", "--no-progress", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resume: restored {WQ_KNOB}={original}" in resumed.stderr
    assert "resume: discarded the partial run other/io-livekill/0" in resumed.stderr
    assert "killed leftover process group" in resumed.stderr
    assert "3 runs done, 0 failed, 1 already done" in resumed.stdout
    # nothing the killed runner started survives: not its process groups, not its ftrace instance
    groups = {proc["pid"] for proc in state["processes"]}
    assert len(groups) >= 2 and not groups & _live_process_groups()
    assert state["instance"] not in _instances()
    after = (finished.stat().st_ino, (finished / "result.json").read_text(), (finished / "trace.dat").stat().st_size)
    assert after == before  # the finished run was not touched
    redone = json.loads((out / "runs/other/io-livekill/0/result.json").read_text())
    assert redone["status"] == "ok"
    assert not journal.exists() and not list(out.glob("runs/*/*/.tmp-*"))
    assert read_knob() == original


def test_knob_reverted_after_workload_failure(tmp_path, live_and_restore_knob):
    original = live_and_restore_knob
    spec = _spec(tmp_path, "livefail", original, iterations=1, workloads="""\
  - name: broken
    kind: fio
    options: {rw: randread, bs: 4k, size: 4M, runtime: 1, ioengine: lisa_ext_missing}
  - name: rt
    kind: rtapp
    duration-s: 0.5
    tasks: {busy: {duty-cycle-pct: 20, period-ms: 10}}
""")
    out = tmp_path / "data"
    proc = _lisa_ext("campaign", "run", str(spec), "--out", str(out), "--no-progress", cwd=tmp_path)
    assert proc.returncode == 1  # some runs failed
    assert "2 runs done, 2 failed" in proc.stdout
    for variant in ("base", "other"):
        result = json.loads((out / f"runs/{variant}/broken/0/result.json").read_text())
        meta = json.loads((out / f"runs/{variant}/broken/0/meta.json").read_text())
        assert result["status"] == "failed" and result["metrics"] == []
        assert "WorkloadError: fio could not lay out its data file" in result["error"]
        assert "fio: engine lisa_ext_missing not loadable" in result["error"]
        # the knob was really applied during the failing run ...
        expected = original if variant == "base" else other_scope(original)
        assert meta["knobs"][WQ_KNOB]["read_back"] == expected
        # ... and the campaign went on
        ok = json.loads((out / f"runs/{variant}/rt/0/result.json").read_text())
        assert ok["status"] == "ok"
    # ... and reverted afterwards
    assert read_knob() == original
    status = _lisa_ext("campaign", "status", str(out), cwd=tmp_path)
    assert "2 done, 2 failed, 0 missing" in status.stdout


#: the CLI, with the store's journal clear turned into a SIGKILL of the runner: the moment right
#: after a run is published (renamed into place) and before its journal is cleared
_KILLED_AFTER_PUBLISH = """\
import os, signal, sys
from lisa_ext.campaign.store.journal import Journal
from lisa_ext.cli import main
Journal.clear = lambda self: os.kill(os.getpid(), signal.SIGKILL)
sys.exit(main(sys.argv[1:]))
"""


def test_kill_after_publish_keeps_the_run_and_says_so(tmp_path, live_and_restore_knob):
    original = live_and_restore_knob
    spec = _spec(tmp_path, "livepub", original, iterations=1, workloads="""\
  - name: rt
    kind: rtapp
    duration-s: 0.3
    tasks: {busy: {duty-cycle-pct: 20, period-ms: 10}}
""")
    out = tmp_path / "data"
    killed = subprocess.run([LISA_EXT[0], "-c", _KILLED_AFTER_PUBLISH, "campaign", "run", str(spec),
                             "--out", str(out), "--no-progress"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    first = out / "runs/base/rt/0"
    kept = (first.stat().st_ino, (first / "result.json").read_text())
    assert json.loads(kept[1])["status"] == "ok"
    assert json.loads((out / ".runner-journal.json").read_text())["run"] == "base/rt/0"

    resumed = _lisa_ext("campaign", "run", str(spec), "--out", str(out), "--resume", "--no-progress", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resume: kept the run base/rt/0: it was complete and published" in resumed.stderr
    assert "discarded" not in resumed.stderr
    assert "1 runs done, 0 failed, 1 already done" in resumed.stdout
    assert (first.stat().st_ino, (first / "result.json").read_text()) == kept
    assert read_knob() == original

    # a truncated result.json stops neither status nor resume: the run is moved aside and redone
    damaged = out / "runs/other/rt/0/result.json"
    truncated = damaged.read_text()[:30]
    damaged.write_text(truncated)
    status = _lisa_ext("campaign", "status", str(out), cwd=tmp_path)
    assert status.returncode == 1
    assert "1 done, 0 failed, 0 missing (of 2), 1 damaged" in status.stdout
    again = _lisa_ext("campaign", "run", str(spec), "--out", str(out), "--resume", "--no-progress", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (f"resume: moved the damaged run other/rt/0 aside to {out / 'quarantine/other/rt/0'}"
            in again.stderr)
    assert "1 runs done, 0 failed, 1 already done" in again.stdout
    assert (out / "quarantine/other/rt/0/result.json").read_text() == truncated
    assert json.loads(damaged.read_text())["status"] == "ok"
    assert _lisa_ext("campaign", "status", str(out), cwd=tmp_path).returncode == 0


def _study_workbench(root: Path, original: str) -> Path:
    """A workbench holding one study, ``mini``: a local smoke campaign and a notebook that
    prints what it was given."""
    import nbformat

    notebooks = root / "notebooks"
    notebooks.mkdir(parents=True)
    _spec(notebooks, "mini", original, iterations=3, workloads="""\
  - name: rt
    kind: rtapp
    duration-s: 2
    tasks: {busy: {duty-cycle-pct: 20, period-ms: 10}}
smoke:
  iterations: 2
  workloads:
    rt: {duration-s: 0.5}
""")
    params = nbformat.v4.new_code_cell('campaign_dir = "data/mini"\nreport_dir = "data/mini/report"\nsmoke = False')
    params.metadata["tags"] = ["parameters"]
    shown = nbformat.v4.new_code_cell("from lisa_ext import study\n"
                                      "print(study.comparison_table(report_dir, 'markdown'))")
    nb = nbformat.v4.new_notebook(cells=[params, shown], metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}})
    nbformat.write(nb, notebooks / "mini.ipynb")
    return root


def test_interrupted_smoke_study_resumes_with_nothing_lost(tmp_path, live_and_restore_knob):
    original = live_and_restore_knob
    workbench = _study_workbench(tmp_path / "bench", original)
    env = {**os.environ, "LISA_EXT_WORKBENCH": str(workbench)}
    data = workbench / "data" / "mini-smoke"
    journal = data / ".runner-journal.json"
    runner = subprocess.Popen(LISA_EXT + ["study", "run", "mini", "--smoke", "--no-progress"], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # kill it during its second run, the first one published
        try:
            if json.loads(journal.read_text()).get("run") == "other/rt/0":
                break
        except (FileNotFoundError, ValueError):
            pass
        assert runner.poll() is None, runner.communicate()
        time.sleep(0.05)
    else:
        pytest.fail("the study never reached its second run")
    runner.send_signal(signal.SIGKILL)
    runner.wait(timeout=30)
    first = data / "runs/base/rt/0"
    kept = (first.stat().st_ino, (first / "result.json").read_text())
    copy = load_yaml(data / "campaign.yml", "spec copy")
    assert copy["iterations"] == 2 and "smoke" not in copy  # the spec as applied

    # the same command again: it resumes (it used to say the spec differs), keeps the first run
    resumed = subprocess.run(LISA_EXT + ["study", "run", "mini", "--smoke", "--no-progress"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    assert "resume: discarded the partial run other/rt/0" in resumed.stderr
    assert "campaign mini: 3 runs done, 0 failed, 1 already done" in resumed.stdout
    assert (first.stat().st_ino, (first / "result.json").read_text()) == kept
    assert read_knob() == original
    # the report is where the docs say, and the notebook read it
    assert "busy_activations" in (data / "report" / "comparison.md").read_text()
    assert "busy_activations" in (workbench / "out" / "mini-smoke.html").read_text()
    status = _lisa_ext("campaign", "status", str(data), cwd=tmp_path)
    assert "4 done, 0 failed, 0 missing (of 4)" in status.stdout  # smoke size, not the spec's 3 iterations

    # --no-run without --smoke: no full runs, and the message names the smoke ones
    no_run = subprocess.run(LISA_EXT + ["study", "run", "mini", "--no-run"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert no_run.returncode == 2
    assert f"{data} holds the study's smoke runs: render them with lisa-ext study run mini --smoke --no-run" \
        in no_run.stderr
