"""wakeup_latency against the reference: a live fio trace (LISA's loader) and
the shared 1.2 M-event fio trace (fast loader)."""

import math

import pytest

import analysis_reference as ref
from analysis_loaders import FIO, JUNO, fast_trace, lisa_trace, live_fio_ios, live_fio_trace, reference_events, require_shared
from lisa_ext.analysis.wakeup_latency import STAT_COLUMNS


def check_against_reference(trace, path, min_latencies):
    expected = ref.wakeup_latencies(reference_events(path), "sched_waking")
    ana = trace.ana.wakeup_latency
    assert ana.wakeup_event() == "sched_waking"
    got = ana.df_wakeup_latency_stats()
    assert sorted(got.index) == sorted(expected)
    assert sum(len(e["latencies"]) for e in expected.values()) >= min_latencies
    for pid, e in expected.items():
        want = ref.stats(e["latencies"])
        row = got.loc[pid]
        assert row["comm"] == e["comm"]
        assert row["count"] == want["count"]
        for col in STAT_COLUMNS[1:]:
            assert math.isclose(row[col], want[col], rel_tol=1e-6, abs_tol=2e-9), (pid, col)
    per_cpu = ana.df_cpu_wakeup_latency_stats()
    for cpu in per_cpu.index:
        lat = [x for e in expected.values() for x, c in zip(e["latencies"], e["cpus"]) if c == cpu]
        assert per_cpu.loc[cpu, "count"] == len(lat)
        assert math.isclose(per_cpu.loc[cpu, "p90"], ref.percentile(lat, 90), rel_tol=1e-6, abs_tol=2e-9)
    return expected


def test_live_trace_lisa_loader():
    path = live_fio_trace()
    # fio was made to sleep once per read (its think time): each of those is a wake-up of fio
    ios = live_fio_ios(path)
    assert ios == ref.LIVE_FIO_IOS
    wakings = sum(1 for e in reference_events(path) if e.name == "sched_waking" and e.f["comm"] == "fio")
    assert wakings >= ios
    # A latency needs the woken task's switch-in too: fio runs on CPU 0, where this host's
    # kernel traces idle -> task switches (docs/analyses.md), so each think time ends in one.
    expected = check_against_reference(lisa_trace(path), path, min_latencies=ios)
    fio = [pid for pid, e in expected.items() if e["comm"] == "fio"]
    assert max(len(expected[pid]["latencies"]) for pid in fio) >= ios
    ana = lisa_trace(path).ana.wakeup_latency
    assert set(ana.df_wakeup_latency_stats(comm="^fio$").index) == set(fio)
    assert list(ana.df_wakeup_latency_stats(pid=fio[0]).index) == [fio[0]]


def test_shared_fio_trace_fast_loader():
    require_shared(FIO)
    check_against_reference(fast_trace(str(FIO)), str(FIO), min_latencies=100)


def test_trace_without_wakeup_events_is_lisas_error():
    require_shared(JUNO)
    from lisa_ext import compat

    with pytest.raises(compat.import_lisa("lisa.trace").MissingTraceEventError, match="sched_wak"):
        lisa_trace(str(JUNO)).ana.wakeup_latency.df_wakeup_latency_stats()
