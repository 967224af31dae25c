"""rt-app's task grammar in a campaign spec: phases with their own load, loops and an initial
delay, checked like every other key, and the JSON they become run for real by the rt-app binary
LISA ships (its x86_64 build), whose debug log and per-task logs show each phase."""

from __future__ import annotations

import importlib.util
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import pytest

from campaign_helpers import LISA_EXT, REPO, require_live, write_spec
from lisa_ext.campaign.spec import load_spec
from lisa_ext.campaign.workloads.rtapp import parse_rtapp_log, rtapp_conf
from lisa_ext.errors import SpecError

#: a task alternating a light and a heavy phase, the classic schedutil and EAS test, after a delay
ALTERNATING = """\
    kind: rtapp
    duration-s: 2
    tasks:
      alt:
        delay-ms: 50
        loop: 2
        phases:
          - {duty-cycle-pct: 10, period-ms: 16, loop: 4}
          - {duty-cycle-pct: 80, period-ms: 16, duration-s: 0.048}
      bg:
        phases:
          - {run-ms: 1, sleep-ms: 5, loop: 3}
          - {sleep-ms: 2}
          - {run-ms: 2, period-ms: 10, loop: 5, cpus: [0]}
"""


def _spec(tmp_path: Path, workload: str) -> Path:
    return write_spec(tmp_path / "spec.yml", f"""\
name: rt
target: @TARGET@
iterations: 1
variants:
  - name: base
workloads:
  - name: w
{workload}""")


def _options(tmp_path: Path, workload: str = ALTERNATING) -> dict:
    return load_spec(_spec(tmp_path, workload)).workloads[0].options


def _lisa_rt_app() -> Path:
    """The rt-app binary LISA 3.1 ships for this machine's architecture."""
    arch = {"x86_64": "x86_64", "aarch64": "arm64"}.get(platform.machine())
    lisa = Path(importlib.util.find_spec("lisa").submodule_search_locations[0])
    binary = lisa / "_assets" / "binaries" / str(arch) / "rt-app"
    if not binary.is_file():
        pytest.skip(f"LISA ships no rt-app for {platform.machine()}")
    return binary


@pytest.mark.parametrize("task, key, message", [
    ("alt: {phases: [{duty-cycle-pct: 10}]}", "tasks.alt.phases[0].period-ms", "duty-cycle-pct is a share of period-ms"),
    ("alt: {phases: [{period-ms: 10}]}", "tasks.alt.phases[0]", "needs duty-cycle-pct and period-ms, run-ms or sleep-ms"),
    ("alt: {phases: [{run-ms: 20, period-ms: 10}]}", "tasks.alt.phases[0].run-ms", "longer than period-ms 10"),
    ("alt: {phases: [{run-ms: 2, sleep-ms: 3, period-ms: 10}]}", "tasks.alt.phases[0].sleep-ms", "not with period-ms"),
    ("alt: {phases: [{duty-cycle-pct: 5, period-ms: 10, run-ms: 1}]}", "tasks.alt.phases[0].run-ms",
     "not with duty-cycle-pct"),
    ("alt: {phases: [{run-ms: 2, sleep-ms: 3, duration-s: 1}]}", "tasks.alt.phases[0].duration-s", "needs period-ms"),
    ("alt: {phases: [{duty-cycle-pct: 5, period-ms: 10, duration-s: 1, loop: 3}]}", "tasks.alt.phases[0].loop",
     "not with duration-s"),
    ("alt: {phases: [{duty-cycle-pct: 5, period-ms: 100, duration-s: 0.05}]}", "tasks.alt.phases[0].duration-s",
     "shorter than one period"),
    ("alt: {phases: [{run-ms: 2, loop: 0}]}", "tasks.alt.phases[0].loop", "expected an integer from 1 to 1000000"),
    ("alt: {phases: [{run-ms: 2, util: 30}]}", "tasks.alt.phases[0].util", "unknown key; allowed here: duty-cycle-pct"),
    ("alt: {phases: []}", "tasks.alt.phases", "needs 1 to 1000 phases"),
    ("alt: {phases: [{run-ms: 2}], loop: 0}", "tasks.alt.loop", "0 is not allowed"),
    ("alt: {phases: [{run-ms: 2}], duty-cycle-pct: 5}", "tasks.alt.duty-cycle-pct", "not with phases"),
    ("alt: {duty-cycle-pct: 5}", "tasks.alt.period-ms", "missing: a task needs duty-cycle-pct and period-ms"),
    ("alt: {duty-cycle-pct: 5, period-ms: 10, loop: 2}", "tasks.alt.loop", "only with phases"),
    ("alt: {duty-cycle-pct: 5, period-ms: 10, delay-ms: 3000}", "tasks.alt.delay-ms", "leaves nothing of duration-s"),
])
def test_bad_task_grammar_names_the_file_and_key(tmp_path, task, key, message):
    with pytest.raises(SpecError) as err:
        _options(tmp_path, f"    kind: rtapp\n    duration-s: 2\n    tasks:\n      {task}\n")
    assert err.value.key.startswith(f"workloads[0].{key}"), str(err.value)
    assert message in err.value.problem, str(err.value)
    assert str(tmp_path / "spec.yml") in str(err.value)


def test_phases_need_a_whole_number_of_seconds(tmp_path):
    with pytest.raises(SpecError) as err:
        _options(tmp_path, ALTERNATING.replace("duration-s: 2\n", "duration-s: 2.5\n"))
    assert err.value.key == "workloads[0].duration-s" and "whole number of seconds" in err.value.problem


def test_campaign_check_says_one_line_and_exits_2(tmp_path):
    spec = _spec(tmp_path, "    kind: rtapp\n    duration-s: 2\n    tasks:\n      alt: {phases: [{util: 30}]}\n")
    proc = subprocess.run(LISA_EXT + ["campaign", "check", str(spec)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"lisa-ext campaign: error: {spec}: workloads[0].tasks.alt.phases[0].util: unknown key; allowed here: duty-cycle-pct, "
        "period-ms, run-ms, sleep-ms, duration-s, loop, cpus"], proc.stderr


def test_phases_become_rtapp_phases(tmp_path):
    conf = rtapp_conf(_options(tmp_path), 1000, "/logs")
    assert conf["global"] == {"duration": 2, "calibration": 1000, "lock_pages": False, "log_size": "file",
                              "ftrace": "", "logdir": "/logs"}
    assert conf["tasks"]["alt"] == {"loop": 2, "delay": 50000, "phases": {
        "0": {"loop": 4, "run": 1600, "timer": {"ref": "unique", "period": 16000}},
        "1": {"loop": 3, "run": 12800, "timer": {"ref": "unique", "period": 16000}}}}
    assert conf["tasks"]["bg"] == {"loop": 1, "phases": {
        "0": {"loop": 3, "run": 1000, "sleep": 5000},
        "1": {"loop": 1, "sleep": 2000},
        "2": {"loop": 5, "run": 2000, "timer": {"ref": "unique", "period": 10000}, "cpus": [0]}}}


def test_one_periodic_phase_keeps_rtapp_unlimited(tmp_path):
    """A task without phases is the periodic task it always was: rt-app's duration stays -1."""
    options = _options(tmp_path, "    kind: rtapp\n    duration-s: 0.5\n    tasks:\n"
                                 "      t: {duty-cycle-pct: 25, period-ms: 16, policy: SCHED_OTHER, priority: 5}\n")
    conf = rtapp_conf(options, 1000, "/logs")
    assert conf["global"]["duration"] == -1
    assert conf["tasks"]["t"] == {"loop": 1, "policy": "SCHED_OTHER", "priority": 5, "phases": {
        "0": {"loop": 31, "run": 4000, "timer": {"ref": "unique", "period": 16000}}}}


def _thread_names(pid: int) -> set[str]:
    names = set()
    for comm in Path(f"/proc/{pid}/task").glob("*/comm"):
        try:
            names.add(comm.read_text().strip())
        except OSError:
            pass  # the thread ended
    return names


def test_rt_app_runs_the_phases(tmp_path):
    """LISA's rt-app binary accepts the JSON; its debug log shows each task loop go through each
    phase, the threads are named <task>-<index> (index in task-name order), each task's log has
    one line per activation with the phase's own run and period, and the delay is waited."""
    # a fixed ns per loop: rt-app's own calibration takes half a minute on a busy machine, and
    # the checks below read the phases' configured run and period, not the time it took
    conf = rtapp_conf(_options(tmp_path), 100, str(tmp_path))
    (tmp_path / "rtapp.json").write_text(json.dumps(conf))
    proc = subprocess.Popen([str(_lisa_rt_app()), "-l", "100", str(tmp_path / "rtapp.json")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    names: set[str] = set()
    while proc.poll() is None:
        names |= _thread_names(proc.pid)
        time.sleep(0.005)
    out = proc.stdout.read()
    assert proc.returncode == 0, out[-3000:]
    assert {"alt-0", "bg-1"} <= names, names
    for task_loop in (0, 1):
        for phase in (0, 1):
            assert f"begins thread_loop {task_loop} phase {phase} phase_loop 0" in out, out[-3000:]
    assert "begins thread_loop 0 phase 2 phase_loop 4" in out
    assert sorted(p.name for p in tmp_path.glob("*.log")) == ["rt-app-alt-0.log", "rt-app-bg-1.log"]

    alt = parse_rtapp_log(tmp_path / "rt-app-alt-0.log")
    light, heavy = [(1600, 16000)] * 4, [(12800, 16000)] * 3
    assert list(zip(alt["c_duration"], alt["c_period"])) == (light + heavy) * 2
    assert alt["rel_st"].iloc[0] >= 50000  # us after rt-app started: the delay
    bg = parse_rtapp_log(tmp_path / "rt-app-bg-1.log")
    assert list(bg["c_duration"]) == [1000] * 3 + [0] + [2000] * 5
    assert list(bg["c_period"].iloc[-5:]) == [10000] * 5


@pytest.mark.live
def test_a_campaign_runs_phased_tasks_on_this_machine(tmp_path):
    """The workload as a campaign runs it: LISA pushes the JSON, runs its rt-app, pulls the logs."""
    require_live()
    spec = _spec(tmp_path, ALTERNATING)
    out = tmp_path / "data"
    proc = subprocess.run(LISA_EXT + ["campaign", "run", str(spec), "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = out / "runs" / "base" / "w" / "0"
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "ok", result["error"]
    metrics = {m["name"]: m["value"] for m in result["metrics"]}
    assert metrics["alt_activations"] == 14 and metrics["bg_activations"] == 9
    pushed = json.loads((run / "rtapp.json").read_text())
    assert list(pushed["tasks"]["alt"]["phases"]) == ["0", "1"] and pushed["tasks"]["alt"]["delay"] == 50000
