"""LISA analyses give the same frames on load_trace() as on LISA's own parser.

Traces (from ../shared/traces, see MANIFEST.md): sched_load_trace.dat has
cpu_idle, cpu_frequency and the sched_load_* PELT events; tests_trace_2014.dat
has sched_switch + sched_wakeup for task states and wakeup latency;
example_rtapp_trace.dat has userspace markers written through trace_marker
(``print`` events), parsed by LISA into ``userspace@...`` meta events — it
holds no rt-app markers despite its name, so ``ana.rta`` is exercised on the
meta-event path it relies on (``userspace@cpu_frequency``) rather than on
``rtapp_*`` events.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from shared_traces import shared_trace as _existing_shared_trace


def shared_trace(rel: str) -> Path:
    path = _existing_shared_trace(rel)
    if shutil.which("trace-cmd") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("trace-cmd missing in CI (LISA's parser needs it)")
        pytest.skip("trace-cmd not installed: LISA's own parser cannot read trace.dat")
    return path


@pytest.fixture(scope="module")
def trace_pair(tmp_path_factory):
    """(ours, LISA's) Trace objects per shared trace, built once per module."""
    from lisa_ext.compat import import_lisa
    from lisa_ext.trace import load_trace

    lisa = import_lisa("lisa.trace")
    pairs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LISA_EXT_CACHE", str(tmp_path_factory.mktemp("trace-cache")))

        def get(rel):
            if rel not in pairs:
                path = shared_trace(rel)
                pairs[rel] = (load_trace(path), lisa.Trace(str(path), enable_swap=False))
            return pairs[rel]

        yield get


def same(ours, theirs):
    assert len(theirs), "the oracle frame is empty: the comparison would prove nothing"
    if isinstance(theirs, pd.Series):
        pd.testing.assert_series_equal(ours, theirs, check_exact=True)
    else:
        # LISA's own column order follows a set and changes between runs
        pd.testing.assert_frame_equal(ours, theirs, check_exact=True, check_like=True)


SCHED_LOAD = "public/lisa/sched_load_trace.dat"
TRACE_2014 = "public/lisa/tests_trace_2014.dat"
RTAPP = "public/lisa/example_rtapp_trace.dat"


@pytest.mark.parametrize("cpu", range(6))
def test_idle_and_frequency_per_cpu(trace_pair, cpu):
    ours, theirs = trace_pair(SCHED_LOAD)
    same(ours.ana.idle.df_cpu_idle(cpu), theirs.ana.idle.df_cpu_idle(cpu))
    same(ours.ana.frequency.df_cpu_frequency(cpu), theirs.ana.frequency.df_cpu_frequency(cpu))


def test_idle_and_frequency_all_cpus(trace_pair):
    ours, theirs = trace_pair(SCHED_LOAD)
    same(ours.ana.idle.df_cpus_idle(), theirs.ana.idle.df_cpus_idle())
    same(ours.ana.frequency.df_cpus_frequency(), theirs.ana.frequency.df_cpus_frequency())


@pytest.mark.parametrize("signal", ["util", "load"])
def test_load_tracking(trace_pair, signal):
    ours, theirs = trace_pair(SCHED_LOAD)
    same(ours.ana.load_tracking.df_cpus_signal(signal), theirs.ana.load_tracking.df_cpus_signal(signal))
    same(ours.ana.load_tracking.df_tasks_signal(signal), theirs.ana.load_tracking.df_tasks_signal(signal))


def test_tasks_states_and_runtime(trace_pair):
    ours, theirs = trace_pair(TRACE_2014)
    same(ours.ana.tasks.df_tasks_states(), theirs.ana.tasks.df_tasks_states())
    same(ours.ana.tasks.df_tasks_runtime(), theirs.ana.tasks.df_tasks_runtime())


def test_task_states_and_wakeup_latency_of_busiest_tasks(trace_pair):
    ours, theirs = trace_pair(TRACE_2014)
    runtime = theirs.ana.tasks.df_tasks_runtime().sort_values("runtime")
    for pid in runtime.index[-3:]:
        same(ours.ana.tasks.df_task_states(pid), theirs.ana.tasks.df_task_states(pid))
    woken = theirs.df_event("sched_wakeup")["pid"].value_counts().index[:3]
    for pid in woken:
        same(ours.ana.latency.df_latency_wakeup(pid), theirs.ana.latency.df_latency_wakeup(pid))


def test_userspace_markers_from_print(trace_pair):
    ours, theirs = trace_pair(RTAPP)
    same(ours.df_event("userspace@cpu_frequency"), theirs.df_event("userspace@cpu_frequency"))
    # the rt-app analysis finds no rt-app marker the same way on both
    rtapp_events = ["userspace@rtapp_main", "userspace@rtapp_task", "userspace@rtapp_loop"]
    assert not ours.has_events(rtapp_events) and not theirs.has_events(rtapp_events)
