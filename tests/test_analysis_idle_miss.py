"""idle_miss against the reference, on LISA's Juno trace (derived mode)."""

import math

import pytest

import analysis_reference as ref
from analysis_loaders import JUNO, JUNO_YAML, lisa_trace, reference_events, require_shared
from lisa_ext.analysis.platform import load_platform_yaml
from lisa_ext.errors import SpecError


@pytest.fixture(scope="module")
def juno():
    require_shared(JUNO)
    return lisa_trace(str(JUNO))


@pytest.fixture(scope="module")
def expected():
    return ref.idle_misses(reference_events(str(JUNO)), states=ref.JUNO_STATES)


def test_juno_yaml_matches_the_kernel_tables():
    platform = load_platform_yaml(JUNO_YAML)
    table = [(s.exit_latency_ns, s.target_residency_ns) for s in platform.default_idle_states]
    assert table == ref.JUNO_STATES
    assert platform.cluster_of() == ref.JUNO_CLUSTERS


@pytest.mark.parametrize("by", ["cpu", "state"])
def test_derived_counts_match_reference(juno, expected, by):
    platform = load_platform_yaml(JUNO_YAML)
    ana = juno.ana.idle_miss
    assert ana.resolve_mode() == "derived"
    got = ana.df_idle_miss_counts(mode="derived", by=by, platform=platform)
    want = expected["cpus" if by == "cpu" else "states"]
    assert sorted(got.index) == sorted(want)
    assert sum(w["too_deep"] + w["too_shallow"] for w in want.values()) > 0
    for key, w in want.items():
        row = got.loc[key]
        assert (row["wakeups"], row["too_deep"], row["too_shallow"]) == (w["wakeups"], w["too_deep"], w["too_shallow"])
        assert math.isclose(row["too_deep_pct"], 100 * w["too_deep"] / w["wakeups"])
        assert math.isclose(row["too_shallow_pct"], 100 * w["too_shallow"] / w["wakeups"])


def test_cluster_counts_sum_their_cpus(juno, expected):
    platform = load_platform_yaml(JUNO_YAML)
    got = juno.ana.idle_miss.df_idle_miss_counts(mode="derived", by="cluster", platform=platform)
    for cluster in (0, 1):
        cpus = [c for c, k in ref.JUNO_CLUSTERS.items() if k == cluster]
        for col in ("wakeups", "too_deep", "too_shallow"):
            assert got.loc[cluster, col] == sum(expected["cpus"].get(c, {}).get(col, 0) for c in cpus)


def test_event_mode_without_the_event_is_lisas_error(juno):
    from lisa_ext import compat

    with pytest.raises(compat.import_lisa("lisa.trace").MissingTraceEventError, match="cpu_idle_miss"):
        juno.ana.idle_miss.df_idle_miss_counts(mode="event")


def test_yaml_errors_name_file_and_key(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("idle-states:\n  - {name: WFI, exit-latency-us: 1}\n")
    with pytest.raises(SpecError, match=r"p\.yaml: idle-states\[0\]\.target-residency-us"):
        load_platform_yaml(bad)
    bad.write_text("clusters: [[0, 1], 2]\n")
    with pytest.raises(SpecError, match="clusters"):
        load_platform_yaml(bad)


@pytest.fixture(scope="module")
def juno_with_misses(tmp_path_factory):
    require_shared(JUNO)
    out = tmp_path_factory.mktemp("idle") / "juno_idle_misses.txt"
    return out, ref.juno_text_with_idle_misses(JUNO, out)


def test_event_mode_and_agreement_on_text_trace(juno_with_misses, expected):
    """Event mode on cpu_idle_miss lines placed by the kernel rule (see
    analysis_reference.juno_text_with_idle_misses): counts match the lines, and
    the derived mode agrees with them on every idle period."""
    from analysis_loaders import fast_trace

    path, counted = juno_with_misses
    assert sum(w["too_deep"] + w["too_shallow"] for w in counted["cpus"].values()) > 0
    trace = fast_trace(str(path))
    ana = trace.ana.idle_miss
    assert ana.resolve_mode() == "event"
    got = ana.df_idle_miss_counts()
    for cpu, w in counted["cpus"].items():
        assert (got.loc[cpu, "too_deep"], got.loc[cpu, "too_shallow"]) == (w["too_deep"], w["too_shallow"])
        assert got.loc[cpu, "wakeups"] == expected["cpus"][cpu]["wakeups"]
    agreement = ana.df_idle_miss_agreement(load_platform_yaml(JUNO_YAML))
    assert (agreement["agree_frac"] == 1.0).all()
    assert (agreement["event_too_deep"] == agreement["derived_too_deep"]).all()
