"""Which scheduler ran each run (lisa_ext.studies.schedulers): read from the runs' sched_ext records
as the runner writes them (lisa_ext.campaign.sched_ext), on a campaign store written for real."""

from __future__ import annotations

import re
from pathlib import Path

from lisa_ext.campaign.store.records import Metric, RunKey, RunResult
from lisa_ext.campaign.store.writer import CampaignStore
from lisa_ext.studies.schedulers import KERNEL_SCHEDULER, df_schedulers, schedulers_table

BPFLAND = {"scheduler": "scx_bpfland", "args": ["-s", "5000"], "sha256": "ab" * 32, "ops": "bpfland_1.1.4_x86_64",
           "crate": "scx_bpfland", "version": "1.1.4", "state": "enabled", "state_after": "enabled",
           "exit_status": 0, "exit_reason": "unregistered from user space", "exit_message": None}
#: a run whose scheduler the kernel kicked out during the workload (the runner fails it)
KICKED = {"scheduler": "scx_simple", "args": [], "sha256": "cd" * 32, "ops": "simple", "state": "enabled",
          "state_after": "disabled", "exit_status": -9, "exit_reason": "runnable task stall (kworker/0:1[12] failed "
          "to run for 30.1s)", "exit_message": None}
SIMPLE = dict(KICKED, state_after="enabled", exit_status=0, exit_reason="unregistered from user space")


def _campaign(root: Path, runs: list[tuple[str, int, dict, bool]]) -> Path:
    root.mkdir(parents=True)
    (root / "campaign.yml").write_text("name: c\ntarget: t.yml\niterations: 2\nvariants:\n  - name: eevdf\n"
                                       "  - name: simple\n  - name: bpfland\nworkloads:\n  - name: w\n"
                                       "    kind: hackbench\n")
    store = CampaignStore(root)
    for variant, iteration, record, ok in runs:
        status, error = ("ok", None) if ok else ("failed", "scx_simple did not run to the end of the workload")
        store.publish(RunKey(variant, "w", iteration), {"sched_ext": record},
                      RunResult("c", variant, "w", iteration, status, error, [Metric("time", 1.0, "s", True)]))
    return root


def test_each_variant_names_its_scheduler_and_the_runs_it_scheduled_to_the_end(tmp_path):
    root = _campaign(tmp_path / "c", [
        ("eevdf", 0, {"state": "disabled"}, True), ("eevdf", 1, {"state": "disabled"}, True),
        ("simple", 0, SIMPLE, True), ("simple", 1, KICKED, False),
        ("bpfland", 0, BPFLAND, True), ("bpfland", 1, BPFLAND, True)])
    df = df_schedulers(root).set_index("variant")
    assert list(df.index) == ["eevdf", "simple", "bpfland"]
    assert df.loc["eevdf", "scheduler"] == KERNEL_SCHEDULER and df.loc["eevdf", "ops"] is None
    assert df.loc["bpfland", "scheduler"] == "scx_bpfland 1.1.4 -s 5000"
    assert df.loc["bpfland", "ops"] == "bpfland_1.1.4_x86_64"
    assert df.loc["simple", "scheduler"] == "scx_simple"
    assert df["runs"].tolist() == [2, 2, 2] and df["to_the_end"].tolist() == [2, 1, 2]
    # both reasons the kernel gave, each once
    assert df.loc["simple", "exit_reason"] == ("unregistered from user space; runnable task stall "
                                               "(kworker/0:1[12] failed to run for 30.1s)")
    html = schedulers_table(root).to_html()
    assert "Scheduled by it to the end" in html and "scx_bpfland 1.1.4 -s 5000" in html
    assert re.search(r"row0_col1\" [^>]*>–</td>", html)  # EEVDF's ops: shown empty, not blank


def test_a_baseline_run_with_a_bpf_scheduler_still_loaded_is_not_counted(tmp_path):
    # a baseline run that recorded no sched_ext state (an older runner) is the kernel's own;
    # one that found a scheduler enabled was not
    root = _campaign(tmp_path / "c", [("eevdf", 0, {}, True), ("eevdf", 1, {"state": "enabled"}, True)])
    df = df_schedulers(root)
    assert df["scheduler"].tolist() == [KERNEL_SCHEDULER] and df["to_the_end"].tolist() == [1]
