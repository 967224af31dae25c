"""idle_gating on LISA's Juno trace: each idle period attributed to the task switched out last before it."""

import math

import pytest

from analysis_loaders import JUNO, lisa_trace, require_shared
from lisa_ext.analysis.idle_gating import DEFAULT_PREFIXES, parse_prefixes

IDLE_EXIT = 4294967295


@pytest.fixture(scope="module")
def juno():
    require_shared(JUNO)
    return lisa_trace(str(JUNO))


def _reference_periods(trace) -> list[tuple[float, int, int, str]]:
    """(entry time, cpu, state, last comm) by walking the events in time order, one CPU at a time."""
    idle = trace.df_event("cpu_idle")
    switch = trace.df_event("sched_switch")
    events = sorted([(t, 1, int(c), int(s), "") for t, c, s in zip(idle.index, idle["cpu_id"], idle["state"])]
                    + [(t, 0, int(c), -1, str(comm)) for t, c, comm, nxt in
                       zip(switch.index, switch["__cpu"], switch["prev_comm"], switch["next_pid"]) if int(nxt) == 0])
    last: dict[int, str] = {}
    out = []
    for t, kind, cpu, state, comm in events:
        if kind == 0:
            last[cpu] = comm
        elif state != IDLE_EXIT:
            out.append((float(t), cpu, state, last.get(cpu, "")))
    return out


def test_periods_name_the_last_task_switched_to_idle(juno):
    got = juno.ana.idle_gating.df_idle_periods()
    want = _reference_periods(juno)
    assert len(got) == len(want) > 100
    got_rows = sorted((float(t), int(r.cpu), int(r.state), r.last_comm) for t, r in zip(got.index, got.itertuples()))
    assert got_rows == sorted(want)
    assert sum(1 for *_, comm in want if comm) > 0.5 * len(want)


def test_residency_splits_marked_from_other_periods(juno):
    periods = juno.ana.idle_gating.df_idle_periods()
    comm = periods["last_comm"].value_counts().index[0]
    residency = juno.ana.idle_gating.df_state_residency(comm)
    marked = periods[periods["last_comm"].str.startswith(comm)]
    assert residency.loc[True, "periods"].sum() == len(marked)
    assert residency["periods"].sum() == len(periods)
    assert math.isclose(residency.loc[True, "time_s"].sum(), marked["duration"].sum())
    for flag in (True, False):
        assert math.isclose(residency.loc[flag, "time_pct"].sum(), 100.0)


def test_prefixes():
    assert parse_prefixes(None) == DEFAULT_PREFIXES
    assert parse_prefixes(" schbench, ,postgres ") == ("schbench", "postgres")
    assert parse_prefixes(["a"]) == ("a",)
