"""The arm64 board's studies at smoke size, as a user runs them: ``lisa-ext study run NAME --smoke``.

* ``teo-util --target target-configs/vboard-arm64.yml``: the RFC 002 study rerun on the arm64 board
  (its variants built for arm64 from the same specs, deployed by kexec over SSH); its page shows the
  RFC's table with ours, the runtime of its tasks per capacity class and the energy per cluster.
* ``eas``: EAS on vs off; its table, the placement figure, and the check that the kernel's
  decisions used the Energy Model: with EAS on the overutilized state is traced and wake-ups were
  placed while not overutilized, with EAS off the kernel never updates that state.

The board runs 2 + 2 CPUs of the RK3399's clusters (the shape the CI budget allows).
"""

from __future__ import annotations

import subprocess

import pandas as pd
import pytest

from lisa_ext.campaign.store.reader import read_campaign
from lisa_ext.report.readable import metric_label
from lisa_ext.studies import eas, placement, teo_util
from test_studies_smoke import LISA_EXT, NOISE, _outputs
from vboard_helpers import REPO, require_board_capabilities

pytestmark = [pytest.mark.vboard, pytest.mark.arm64]

ARM64_CONF = REPO / "target-configs" / "vboard-arm64.yml"


@pytest.fixture(scope="module")
def board():
    require_board_capabilities(arch="arm64")
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard.board import BoardSettings, VirtualBoard

    board = VirtualBoard(BoardSettings(arch="arm64", cpus_per_cluster=(2, 2)))
    deploy_variant(BoardTarget(board), REPO / "kernels" / "eas" / "baseline.yml")
    yield board
    board.down()


def _run(name: str, tmp_path, board, *extra: str):
    data, html = tmp_path / "data", tmp_path / f"{name}.html"
    proc = subprocess.run([str(LISA_EXT), "study", "run", name, "--smoke", "--no-progress", "--data", str(data),
                           "--out", str(html), *extra], capture_output=True, text=True, cwd=REPO, timeout=2400)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\nserial console:\n{board.serial_tail(30)}"
    noise = NOISE.findall(_outputs(html.with_suffix(".ipynb")))
    assert not noise, f"{name}: the executed notebook shows {sorted(set(noise))}"
    return data, html.read_text()


def test_teo_util_reruns_on_the_arm64_board(board, tmp_path):
    data, page = _run("teo-util", tmp_path, board, "--target", str(ARM64_CONF))
    runs = read_campaign(data).ok_runs
    assert {r.variant for r in runs} == {"menu", "teo", "teo-util"}
    for run in runs:
        deploy = run.meta["kernel_variant"]["deploy"]
        # a kexec that hung is followed by a cold boot of the same kernel, which the provenance says
        assert deploy["arch"] == "arm64" and (deploy["method"] in ("kexec", "already-running")
                                              or deploy["fallback"]["from"] == "kexec"), deploy
        assert run.meta["kernel"]["machine"] == "aarch64"
    assert "PCMark Web Browsing" in page
    ours = teo_util.rfc_tables(data)["pcmark-web"]
    assert isinstance(ours, pd.DataFrame) and ours.notna().any().any()
    share = placement.df_class_share(data, ["burst", "render", "bg"])
    assert set(share["class"]) == {"little", "big"} and set(share["variant"]) == {"menu", "teo", "teo-util"}
    assert "runtime per capacity class" in page or "class-share" in page
    # the meter's energy per cluster (little pd0, big pd2) is in the comparison on the page, under
    # the readable label the page gives it ("energy pd0 j (J)")
    assert all(metric_label(f"energy_{pd}_j", "J") in page for pd in ("pd0", "pd2"))


def test_eas_on_vs_off(board, tmp_path):
    data, page = _run("eas", tmp_path, board)
    table = eas.eas_table(data)
    for row in ("energy [J]", "energy of cluster pd0 [J]", "energy of cluster pd2 [J]",
                "rt-app runtime on little CPUs [%]", "rt-app wake-ups on little CPUs [%]",
                "rt-app wake-up latency mean [us]"):
        assert table.loc[row, ["EAS off", "EAS on"]].notna().all(), row
    # the check that the kernel's decisions used the Energy Model: the overutilized state exists
    # only while EAS runs, and the wake-ups made while not overutilized went to little CPUs
    placed = table.loc["rt-app wake-ups placed by EAS (not overutilized)"]
    assert pd.isna(placed["EAS off"]) and placed["EAS on"] > 0
    # on the board's own clock (the spec's board-clock) 98.6 %: the medium task's first few
    # wake-ups, before its utilisation is known, stay on the big CPU it started on. On the host's
    # clock it was 73-89 % by the host's load (the medium task's utilisation grew past a little CPU's)
    assert table.loc["of which on little CPUs [%]", "EAS on"] >= 95
    share = placement.df_class_share(data, eas.rtapp_tasks(data))
    assert set(share["variant"]) == {"eas-off", "eas-on"} and set(share["class"]) <= {"little", "big"}
    assert "EAS off vs on" in page
