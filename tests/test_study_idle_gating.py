"""lisa_ext.studies.idle_gating.rfc_tables: the RFC's four table shapes from a campaign's stored results."""

import math

import numpy as np
import pytest

from lisa_ext.campaign.store.files import write_json
from lisa_ext.campaign.store.records import Metric, RunResult
from lisa_ext.rfc_numbers import load_rfc_numbers
from lisa_ext.studies import idle_gating

VARIANTS = ("baseline", "idle-set-d10", "gating")
SCHBENCH = {"wakeup_lat_p50": 100.0, "wakeup_lat_p90": 200.0, "wakeup_lat_p99": 400.0,
            "wakeup_lat_max": 900.0, "power_mw": 250.0}
PGBENCH = {"latency_avg": 2.0, "latency_stddev": 1.0, "transactions": 300.0, "power_mw": 200.0}


def _metrics(values: dict[str, float], scale: float) -> list[Metric]:
    return [Metric(name, value * scale, "x", True) for name, value in values.items()]


@pytest.fixture()
def campaign(tmp_path):
    """Two iterations per run; variant k scales every metric by (1 + k / 2), iteration i by (1 + i / 10)."""
    workloads = [t.id for t in load_rfc_numbers("idle-gating").tables]
    (tmp_path / "campaign.yml").write_text(
        "name: idle-gating\nvariants:\n" + "".join(f"  - name: {v}\n" for v in VARIANTS)
        + "workloads:\n" + "".join(f"  - name: {w}\n" for w in workloads))
    for k, variant in enumerate(VARIANTS):
        for workload in workloads:
            values = SCHBENCH if workload.startswith("schbench") else PGBENCH
            for i in range(2):
                if variant == "gating" and workload == "pgbench-c1" and i == 1:
                    continue  # a missing run still leaves its cell filled by the other iteration
                result = RunResult("idle-gating", variant, workload, i, "ok", None,
                                   _metrics(values, (1 + k / 2) * (1 + i / 10)))
                run_dir = tmp_path / "runs" / variant / workload / str(i)
                run_dir.mkdir(parents=True)
                write_json(run_dir / "result.json", result.to_json())
    return tmp_path


def test_tables_have_the_rfc_shapes(campaign):
    ours = idle_gating.rfc_tables(campaign)
    rfc = load_rfc_numbers("idle-gating")
    assert list(ours) == [t.id for t in rfc.tables]
    for table in rfc.tables:
        theirs = table.frame()
        assert list(ours[table.id].index) == list(theirs.index)
        assert list(ours[table.id].columns) == list(theirs.columns)
        assert ours[table.id].index.name == theirs.index.name
        assert not ours[table.id].isna().any().any()


def test_cells_are_iteration_means_and_percentages_against_baseline(campaign):
    table = idle_gating.rfc_tables(campaign)["schbench-r30"]
    mean_scale = (1.0 + 1.1) / 2
    assert math.isclose(table.loc["99", "Baseline"], 400.0 * mean_scale)
    assert math.isclose(table.loc["99", "w/ patch"], 400.0 * 2.0 * mean_scale)
    assert math.isclose(table.loc[idle_gating.ENERGY_ROW, "cpupower idle-set -D 10"], 0.25 * 1.5 * mean_scale)
    assert np.allclose(table["cpupower idle-set -D 10 vs Baseline (%)"], 50.0)
    assert np.allclose(table["w/ patch vs Baseline (%)"], 100.0)
    single = idle_gating.rfc_tables(campaign)["pgbench-c1"]
    assert math.isclose(single.loc["trans. completed", "w/ patch"], 300.0 * 2.0)


def test_a_variant_without_runs_leaves_its_columns_empty(campaign):
    import shutil

    shutil.rmtree(campaign / "runs" / "gating")
    table = idle_gating.rfc_tables(campaign)["pgbench-c44"]
    assert table["w/ patch"].isna().all() and table["w/ patch vs Baseline (%)"].isna().all()
    assert not table["Baseline"].isna().any()
