"""trappy (ARM's older trace parser) as a second oracle on the text and systrace traces.

Counts, timestamps and every field trappy parses must agree with our tables.
trappy's own conventions are undone before comparing, each named where it is:
it renames ``cpu_frequency`` fields, reads ``cpu_idle.state`` as signed
32-bit, prints unknown tasks as ``<pid>`` where
the text says ``<...>``, and keeps numbers it cannot parse (``target_cpu=006``,
or the ``\\n\\`` left by the JavaScript string of old systrace pages) as text.
"""

from __future__ import annotations


import numpy as np
import pytest

from lisa_ext.trace import read_trace

from shared_traces import shared_trace

CASES = [
    ("public/lisa/lisa_tests_trace.txt", "FTrace", ["sched_switch", "sched_wakeup"]),
    ("public/trappy/trace_surfaceflinger.html", "SysTrace", ["sched_switch", "sched_wakeup", "cpu_idle", "cpu_frequency"]),
    ("public/catapult/android_systrace.html", "SysTrace", ["sched_switch", "sched_wakeup"]),
]
TRAPPY_RENAMES = {"cpu_frequency": {"frequency": "state", "cpu": "cpu_id"}}
# trappy reads these as signed 32-bit: cpu_idle's exit state 4294967295 is its -1
TRAPPY_SIGNED32 = {("cpu_idle", "state")}


def _plain(value):
    if isinstance(value, str):
        value = value.removesuffix("\\n\\")
        try:
            return int(value)
        except ValueError:
            return value
    if isinstance(value, (np.integer,)):
        return int(value)
    return value


@pytest.mark.parametrize("rel, kind, events", CASES)
def test_counts_times_and_fields_match_trappy(rel, kind, events, monkeypatch):
    from lisa_ext.compat import apply

    apply()  # trappy imports pandas/numpy APIs the shims restore
    import trappy  # a test dependency (pyproject [test]): never skipped
    path = shared_trace(rel)
    # trappy caches parsed CSVs in a .<name>.cache folder next to the trace: shared/ is read-only input
    parser = getattr(trappy, kind)
    monkeypatch.setattr(parser, "disable_cache", True)
    theirs = parser(str(path), scope="custom", events=events, normalize_time=False)
    ours = read_trace(path, events=events, cache=False)
    for event in events:
        df = getattr(theirs, event).data_frame
        table = ours[event]
        assert len(df) == table.num_rows > 0, event
        # trappy nudges equal timestamps apart by far less than a microsecond
        seconds = np.asarray(table.column("__timestamp").to_pylist()) / 1e9
        assert np.allclose(df.index.values, seconds, rtol=0, atol=1e-7), event
        renames = TRAPPY_RENAMES.get(event, {})
        compared = 0
        for column in df.columns:
            if column == "__line":
                continue
            name = renames.get(column, column)
            assert name in table.column_names, (event, column)
            mine = table.column(name).to_pylist()
            for i, (a, b) in enumerate(zip(mine, df[column].tolist())):
                if column == "__comm" and a == "<...>" and b == f"<{mine_pid(table, i)}>":
                    continue
                if (event, column) in TRAPPY_SIGNED32 and a is not None:
                    a = (a + 2**31) % 2**32 - 2**31
                assert _plain(a) == _plain(b), (event, column, i, a, b)
            compared += 1
        assert compared >= 4, event


def mine_pid(table, i):
    return table.column("__pid")[i].as_py()
