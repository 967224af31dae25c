"""load_trace() on damaged files: a warning naming the damage, everything before it usable."""

from __future__ import annotations


import pandas as pd
import pytest

from lisa_ext.errors import UserError

from shared_traces import shared_trace


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "cache"))


def test_truncated_trace_dat_keeps_the_complete_cpus(tmp_path):
    from lisa_ext.trace import load_trace
    from lisa_ext.trace.lisa_parser import TraceDamageWarning
    from lisa_ext.trace.tracedat import open_tracedat

    full_path = shared_trace("public/lisa/sched_load_trace.dat")
    # cut inside CPU 3's data: CPUs 0-2 are whole, 3 is partial, 4-5 are gone
    streams = {cpu: (offset, size) for cpu, offset, size in open_tracedat(full_path).streams}
    cut = streams[3][0] + streams[3][1] // 3
    damaged = tmp_path / "truncated.dat"
    damaged.write_bytes(full_path.read_bytes()[:cut])

    with pytest.warns(TraceDamageWarning, match=r"truncated\.dat.*cpu 3.*truncated.*offset"):
        trace = load_trace(damaged)
    full = load_trace(full_path)
    for event in ("sched_switch", "cpu_idle", "sched_load_cfs_rq"):
        ours = trace.df_event(event)
        expected = full.df_event(event)
        whole = [0, 1, 2]
        got = ours[ours["__cpu"].isin(whole)].reset_index(drop=True)
        want = expected[expected["__cpu"].isin(whole)].reset_index(drop=True)
        assert len(want) > 0
        pd.testing.assert_frame_equal(got, want, check_categorical=False)
        assert not ours["__cpu"].isin([4, 5]).any()


def test_truncated_text_warns_and_keeps_the_rest(tmp_path):
    from lisa_ext.trace import load_trace
    from lisa_ext.trace.lisa_parser import TraceDamageWarning

    src = shared_trace("public/lisa/lisa_tests_trace.txt").read_bytes()
    cut = src.index(b"sched_switch", len(src) // 2) + 30
    damaged = tmp_path / "truncated.txt"
    damaged.write_bytes(src[:cut])
    complete_lines = src[:cut].count(b"\n")
    with pytest.warns(TraceDamageWarning, match=rf"truncated\.txt: line {complete_lines + 1}: file ends inside"):
        trace = load_trace(damaged)
    kept = src[: src.rindex(b"\n", 0, cut)].decode()
    assert len(trace.df_event("sched_switch")) == kept.count(": sched_switch: ")
    assert len(trace.df_event("sched_wakeup")) == kept.count(": sched_wakeup: ")


def test_absent_event_and_non_trace(tmp_path):
    from lisa_ext.compat import import_lisa
    from lisa_ext.trace import load_trace

    lisa_trace = import_lisa("lisa.trace")
    trace = load_trace(shared_trace("public/lisa/trace_idle.dat"))
    with pytest.raises(lisa_trace.MissingTraceEventError, match="sched_wakeup"):
        trace.df_event("sched_wakeup")
    junk = tmp_path / "junk.dat"
    junk.write_bytes(b"\x17\x08\x44tracing" + b"\xff" * 64)
    with pytest.raises(UserError, match=r"junk\.dat.*offset"):
        load_trace(junk).df_event("sched_switch")
