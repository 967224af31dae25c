"""Task selectors (lisa_ext.analysis.tasks) on a trace recorded here of a program whose pids we know.

A private ftrace instance records the scheduler's switch / wake-up events and the fork, exec and
new-task events while a probe runs: a program started under its own name (a symlink to the
Python interpreter) that starts threads and forks a child process, each sleeping a few times,
and writes its pids and thread ids to a file. The selectors must name exactly those tasks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lisa_ext.analysis.tasks import TaskSelector, select_pids
from lisa_ext.errors import UserError

TRACEFS = Path("/sys/kernel/tracing")
EVENTS = ("sched/sched_switch", "sched/sched_waking", "sched/sched_wakeup", "sched/sched_process_fork",
          "sched/sched_process_exec", "task/task_newtask")
PROBE = """
import json, os, sys, threading, time
def nap():
    for _ in range(10):
        time.sleep(0.005)
def threads(n):
    ts = [threading.Thread(target=lambda out: (out.append(threading.get_native_id()), nap()), args=(ids,))
          for _ in range(n)]
    for t in ts: t.start()
    for t in ts: t.join()
ids = []
child = os.fork()
if child == 0:
    threads(1)
    with open(sys.argv[1] + ".child", "w") as f:
        json.dump({"pid": os.getpid(), "threads": ids}, f)
    os._exit(0)
threads(3)
os.waitpid(child, 0)
with open(sys.argv[1], "w") as f:
    json.dump({"pid": os.getpid(), "threads": ids}, f)
"""

pytestmark = pytest.mark.live


def _need(condition: bool, reason: str):
    if not condition:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (required in CI)")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    _need(os.geteuid() == 0, "needs root to create an ftrace instance")
    _need((TRACEFS / "instances").is_dir(), f"tracefs not mounted at {TRACEFS}")
    _need(shutil.which("trace-cmd") is not None, "trace-cmd not installed")
    tmp = tmp_path_factory.mktemp("tasks")
    name = f"lisa-probe-{os.getpid() % 10000}"
    (tmp / name).symlink_to(sys.executable)
    (tmp / "probe.py").write_text(PROBE)
    instance = TRACEFS / "instances" / f"lisa_ext_tasks_{os.getpid()}"
    instance.mkdir()
    try:
        (instance / "buffer_size_kb").write_text("4096")
        for event in EVENTS:
            (instance / "events" / event / "enable").write_text("1")
        (instance / "tracing_on").write_text("1")
        # On CPU 0: this host's kernel does not trace a switch from idle to a task on its other
        # CPU, so a thread that slept there would show wake-ups that never end (measured: no
        # swapper->task sched_switch on CPU 1 in any run, one on every wake-up on CPU 0).
        subprocess.run([str(tmp / name), str(tmp / "probe.py"), str(tmp / "ids.json")], check=True, timeout=60,
                       preexec_fn=lambda: os.sched_setaffinity(0, {0}))
        (instance / "tracing_on").write_text("0")
        # trace-cmd may exit 1 on cleanup with complete data: the file is checked instead
        subprocess.run(["trace-cmd", "extract", "-B", instance.name, "-o", str(tmp / "trace.dat")],
                       capture_output=True, timeout=120)
    finally:
        if instance.is_dir():
            (instance / "tracing_on").write_text("0")
            for event in EVENTS:
                (instance / "events" / event / "enable").write_text("0")
            instance.rmdir()
    assert (tmp / "trace.dat").stat().st_size > 0
    parent = json.loads((tmp / "ids.json").read_text())
    child = json.loads((tmp / "ids.json.child").read_text())
    os.environ.setdefault("LISA_EXT_CACHE", str(tmp / "cache"))
    from lisa_ext.trace import load_trace

    return load_trace(tmp / "trace.dat"), name, parent, child


def test_exec_and_tree_name_the_program_its_threads_and_its_child(recorded):
    trace, name, parent, child = recorded
    everything = {parent["pid"], *parent["threads"], child["pid"], *child["threads"]}
    assert select_pids(trace, f"exec:{name}") == everything
    assert select_pids(trace, f"tree:{parent['pid']}") == everything
    assert select_pids(trace, f"tree:{child['pid']}") == {child["pid"], *child["threads"]}


def test_tgid_is_the_thread_group_only(recorded):
    trace, _name, parent, child = recorded
    assert select_pids(trace, f"tgid:{parent['pid']}") == {parent["pid"], *parent["threads"]}
    assert select_pids(trace, f"tgid:{child['pid']}") == {child["pid"], *child["threads"]}


def test_comm_regex_and_pids(recorded):
    trace, name, parent, child = recorded
    # a task's comm is its executable's name, cut to 15 characters (TASK_COMM_LEN)
    assert {parent["pid"], child["pid"]} <= select_pids(trace, f"comm:^{name[:15]}$")
    assert select_pids(trace, f"pid:{parent['pid']},{child['pid']}") == {parent["pid"], child["pid"]}


def test_wakeup_latency_of_the_workload_only(recorded):
    trace, name, parent, child = recorded
    everything = {parent["pid"], *parent["threads"], child["pid"], *child["threads"]}
    df = trace.ana.wakeup_latency.df_wakeup_latencies(tasks=f"exec:{name}")
    every = trace.ana.wakeup_latency.df_all_wakeup_latencies()
    assert df.equals(every[every["pid"].isin(everything)])
    # every thread slept 10 times; a sleep is one latency (more when it also waited for the GIL) unless
    # the thread was preempted before it blocked and its timer woke it while still runnable (seen once
    # on a busy host: 4 of 5): at least half of them
    counts = df["pid"].value_counts()
    slept = {t: int(counts.get(t, 0)) for t in [*parent["threads"], *child["threads"]]}
    assert min(slept.values()) >= 5, slept
    stats = trace.ana.wakeup_latency.df_wakeup_latency_stats(tasks=f"exec:{name}")
    assert set(stats.index) == set(df["pid"])


def test_bad_selectors_say_what_is_expected():
    with pytest.raises(UserError, match="expected tgid:N"):
        TaskSelector.parse("tgid:abc")
    with pytest.raises(UserError, match="bad regular expression"):
        TaskSelector.parse("comm:(")
    assert TaskSelector.parse("schbench-.*") == TaskSelector("comm", "schbench-.*")
