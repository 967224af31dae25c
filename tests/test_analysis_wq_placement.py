"""wq_placement against the reference: live fio trace (LISA's loader, function
names resolved) and the shared fio trace (fast loader)."""

import math

import pytest

import analysis_reference as ref
from analysis_loaders import FIO, fast_trace, lisa_trace, live_fio_trace, reference_events, require_shared
from lisa_ext.analysis.platform import Platform


def check(trace, path, by_function=True):
    items = ref.work_items(reference_events(path))
    assert len(items) > 20
    ana = trace.ana.wq_placement
    df = ana.df_work_items()
    assert len(df) == len(items)
    assert sorted(df["latency"].round(9)) == sorted(round(i["latency"], 9) for i in items)
    ends = sorted(round(i["duration"], 9) for i in items if i["duration"] is not None)
    assert sorted(df["duration"].dropna().round(9)) == ends
    keys = ["workqueue", "function"] if by_function else ["workqueue"]
    for key in keys:
        want = ref.placement(items, key)
        got = ana.df_placement_stats(by=key)
        assert sorted(got.index) == sorted(want)
        for name, w in want.items():
            row = got.loc[name]
            assert row["count"] == w["count"]
            assert math.isclose(row["same_cpu_frac"], w["same_cpu_frac"])
            assert math.isnan(row["same_llc_frac"])
            for col in ("lat_p50", "lat_p99"):
                assert math.isclose(row[col], w[col], rel_tol=1e-6, abs_tol=2e-9)
    matrix = ana.df_placement_matrix()
    for q in matrix.index:
        for e in matrix.columns:
            assert matrix.loc[q, e] == sum(1 for i in items if i["queue_cpu"] == q and i["exec_cpu"] == e)
    # With LLC domains: one domain per CPU makes same-LLC equal same-CPU.
    ncpu = len(matrix.index)
    per_cpu_llc = Platform(llc=tuple((c,) for c in range(ncpu)))
    want = ref.placement(items, "workqueue", llc={c: c for c in range(ncpu)})
    got = ana.df_placement_stats(by="workqueue", platform=per_cpu_llc)
    for name, w in want.items():
        assert math.isclose(got.loc[name, "same_llc_frac"], w["same_llc_frac"])
    return df


def test_live_trace_lisa_loader():
    path = live_fio_trace()
    df = check(lisa_trace(path), path)
    assert "blk_mq_run_work_fn" in set(df["function"]) or "kblockd" in set(df["workqueue"])


def test_shared_fio_trace_fast_loader():
    require_shared(FIO)
    trace = fast_trace(str(FIO))
    df = check(trace, str(FIO))
    # %ps fields come resolved through the trace's kallsyms, as trace-cmd prints them
    assert "blk_mq_run_work_fn" in set(df["function"])
    assert not any(n.startswith("0x") for n in df["function"])


def test_missing_events_are_lisas_error():
    from analysis_loaders import JUNO, require_shared
    from lisa_ext import compat

    require_shared(JUNO)
    with pytest.raises(compat.import_lisa("lisa.trace").MissingTraceEventError, match="workqueue"):
        lisa_trace(str(JUNO)).ana.wq_placement.df_work_items()
