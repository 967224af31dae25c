"""idle_gating on LISA's Juno trace against a plain walk of the events (the patch's rule, in time order)."""

import math

import pytest

from analysis_loaders import JUNO, lisa_trace, require_shared
from lisa_ext.analysis.idle_gating import DEFAULT_PREFIXES, parse_prefixes

IDLE_EXIT = 4294967295


@pytest.fixture(scope="module")
def juno():
    require_shared(JUNO)
    return lisa_trace(str(JUNO))


def _reference_periods(trace, prefix: str) -> list[tuple[float, int, int, int, bool]]:
    """(entry time, cpu, state, noted pid, gated) per idle period: a CPU notes the last marked task
    it switches to idle from; a period is gated while that task was last seen on that CPU, alive."""
    idle = trace.df_event("cpu_idle")
    switch = trace.df_event("sched_switch")
    events = sorted([(t, 1, int(c), int(s), None) for t, c, s in zip(idle.index, idle["cpu_id"], idle["state"])]
                    + [(t, 0, int(c), -1, (int(pp), str(pc), int(np_), str(nc), int(ps)))
                       for t, c, pp, pc, np_, nc, ps in
                       zip(switch.index, switch["__cpu"], switch["prev_pid"], switch["prev_comm"],
                           switch["next_pid"], switch["next_comm"], switch["prev_state"])], key=lambda e: e[:2])
    noted: dict[int, int] = {}
    seen_on: dict[int, int] = {}
    out = []
    for t, kind, cpu, state, sw in events:
        if kind == 0:
            prev_pid, prev_comm, next_pid, next_comm, prev_state = sw
            if prev_comm.startswith(prefix):
                seen_on[prev_pid] = -1 if prev_state & 0x30 else cpu  # exited: on no CPU
                if next_pid == 0:
                    noted[cpu] = prev_pid
            if next_comm.startswith(prefix):
                seen_on[next_pid] = cpu
        elif state != IDLE_EXIT:
            pid = noted.get(cpu, -1)
            out.append((float(t), cpu, state, pid, pid >= 0 and seen_on.get(pid) == cpu))
    return out


@pytest.fixture(scope="module")
def busiest(juno):
    switch = juno.df_event("sched_switch")
    to_idle = switch[switch["next_pid"] == 0]
    return str(to_idle["prev_comm"].value_counts().index[0])


def test_periods_follow_the_patch_rule(juno, busiest):
    got = juno.ana.idle_gating.df_idle_periods(busiest)
    want = _reference_periods(juno, busiest)
    assert len(got) == len(want) > 100
    rows = sorted((float(t), int(r.cpu), int(r.state), int(r.marked_pid), bool(r.marked))
                  for t, r in zip(got.index, got.itertuples()))
    assert rows == sorted(want)
    gated = sum(g for *_, g in want)
    noted = sum(pid >= 0 for *_, pid, _ in want)
    assert 0 < gated < noted  # the marked task moved away from some CPUs that had noted it


def test_residency_splits_marked_from_other_periods(juno, busiest):
    ana = juno.ana.idle_gating
    periods = ana.df_idle_periods(busiest)
    residency = ana.df_state_residency(busiest)
    marked = periods[periods["marked"]]
    assert residency.loc[True, "periods"].sum() == len(marked)
    assert residency["periods"].sum() == len(periods)
    assert math.isclose(residency.loc[True, "time_s"].sum(), marked["duration"].sum())
    for flag in (True, False):
        assert math.isclose(residency.loc[flag, "time_pct"].sum(), 100.0)
    assert ana.summary(marked=busiest)["marked"] == [busiest]


def test_prefixes():
    assert parse_prefixes(None) == DEFAULT_PREFIXES
    assert parse_prefixes(" schbench, ,postgres ") == ("schbench", "postgres")
    assert parse_prefixes(["a"]) == ("a",)
