"""Study 001 (workqueue affinity scopes): the variant's kcryptd options, the target's LLC domains,
and the RFC-shaped tables and mechanism on the committed board campaign."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from campaign_helpers import write_spec
from lisa_ext.campaign.spec import load_spec, merge_options
from lisa_ext.errors import SpecError
from lisa_ext.studies import wq_affinity
from lisa_ext.target import llc_domains

REPO = Path(__file__).resolve().parents[1]
BOARD_SAMPLE = REPO / "data" / "samples" / "wq-affinity-board"

SPEC = """\
name: t
target: @TARGET@
iterations: 1
variants:
  - name: cache
    knobs: {/sys/module/workqueue/parameters/default_affinity_scope: cache}
  - name: cache-strict
    knobs: {/sys/module/workqueue/parameters/default_affinity_scope: cache}
    workload-options:
      fio: {dm-crypt: {workqueue: {affinity_strict: 1}}}
workloads:
  - name: io
    kind: fio
    options: {rw: randrw, bs: 32k, runtime: 1, time_based: 1, size: 8M}
    dm-crypt: {backing: loop, size-mb: 16}
"""


def test_merge_options_merges_mappings_and_replaces_values():
    assert merge_options({"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"y": 3}, "b": 2, "c": 4}) == \
        {"a": {"x": 1, "y": 3}, "b": 2, "c": 4}


def test_variant_lays_its_workload_options_over_the_workload(tmp_path):
    spec = load_spec(write_spec(tmp_path / "spec.yml", SPEC))
    cache, strict = spec.variants
    io = spec.workloads[0]
    assert cache.workload(io) is io
    assert strict.workload(io).options["dm-crypt"] == {"backing": "loop", "size-mb": 16,
                                                        "workqueue": {"affinity_strict": 1}}
    assert "workqueue" not in io.options["dm-crypt"]


@pytest.mark.parametrize("old, new, problem", [
    ("fio: {dm-crypt", "nosuchkind: {dm-crypt", "keys must be workload kinds"),
    ("affinity_strict: 1", "affinity_strictest: 1", "unknown kcryptd workqueue attribute"),
    ("affinity_strict: 1", "affinity_strict: [1]", "string or an integer"),
])
def test_bad_workload_options_name_the_field(tmp_path, old, new, problem):
    path = write_spec(tmp_path / "spec.yml", SPEC.replace(old, new))
    with pytest.raises(SpecError, match=problem) as info:
        load_spec(path)
    assert str(info.value).startswith(str(path)) and "variants[1]" in str(info.value)


class _Shell:
    def __init__(self, out: str):
        self.out = out

    def execute(self, command: str, **kwargs) -> str:
        assert "shared_cpu_list" in command
        return self.out


def test_llc_domains_take_each_cpus_highest_data_cache():
    out = "\n".join([
        "/sys/devices/system/cpu/cpu0 1 Data 0", "/sys/devices/system/cpu/cpu0 1 Instruction 0",
        "/sys/devices/system/cpu/cpu0 2 Unified 0", "/sys/devices/system/cpu/cpu0 3 Unified 0-1",
        "/sys/devices/system/cpu/cpu1 3 Unified 0-1", "/sys/devices/system/cpu/cpu2 3 Unified 2-3",
        "/sys/devices/system/cpu/cpu3 2 Unified 3", "/sys/devices/system/cpu/cpu3 3 Unified 2-3"])
    assert llc_domains(_Shell(out)) == ["0-1", "2-3"]
    assert llc_domains(_Shell("")) == []


def test_rfc_tables_have_the_rfcs_shape_and_our_runs():
    tables = wq_affinity.rfc_tables(BOARD_SAMPLE)
    assert list(tables) == ["high", "med", "low"]
    for table in tables.values():
        assert list(table.index) == ["SYSTEM", "CACHE", "CACHE+STRICT", "SYSTEM+LOCAL", "CACHE+LOCAL"]
        assert table.loc[["SYSTEM+LOCAL", "CACHE+LOCAL"]].isna().all().all()
        ran = table.loc[["SYSTEM", "CACHE", "CACHE+STRICT"]]
        assert ran.notna().all().all(), ran  # two iterations: every sd cell filled
        assert (ran["Bandwidth (MiBps)"] > 0).all() and (ran["CPU util (%)"] <= 100).all()
        assert table.loc["SYSTEM", "vs. SYSTEM BW (%)"] == 0
        cache = table.loc["CACHE"]
        assert np.isclose(cache["vs. SYSTEM BW (%)"],
                          100 * (cache["Bandwidth (MiBps)"] / table.loc["SYSTEM", "Bandwidth (MiBps)"] - 1))


def test_kcryptd_locality_separates_the_scopes():
    """On two LLC domains, cache scope keeps kcryptd work in the queueing CPU's LLC far more
    often than system scope, which sprays it over both domains."""
    locality = wq_affinity.df_kcryptd_locality(BOARD_SAMPLE)
    assert list(locality.columns) == ["HIGH", "MED", "LOW"]
    traced = locality.dropna(axis=1, how="all")
    assert not traced.empty
    for load in traced.columns:
        assert traced.loc["CACHE+STRICT", load] > traced.loc["SYSTEM", load] + 20, locality
