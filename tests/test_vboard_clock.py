"""The x86 board on the virtual clock: a campaign asks for it, the board restarts on it, each run
records it, and its timer wake-ups carry nothing of the host's.

The board is booted on the host's clock with the iowait-boost baseline (menu governor, RK3399
idle states: the deepest, cluster-sleep, exits in 900 us); a campaign whose spec names no clock
has the board restart on its default, the virtual clock, then runs cyclictest
(``-p 80 -i 5000``, 200 wake-ups, pinned to CPU 0) twice each with CPU 0's deep states disabled and
with all of them, once holding ``/dev/cpu_dma_latency`` at 0 (cyclictest's default: no deep state
is entered) and once letting the CPU idle (``idle-states: true``). In guest time 99 % of the
wake-ups without a deep state take under 50 us (measured: 6-8 us), and 99 % of those from
cluster-sleep cost its exit latency, 900 us, within 5 % (measured: median 906 us, p99 908-909 us in
both runs; tens of ms on the host's clock). The bounds are on p99, not on the maximum: work of the
guest's own still runs when it runs and delays one wake-up now and then, whatever the clock (CI
runs saw single wake-ups of 95 and 577 us with every deep state disabled).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from vboard_helpers import BASELINE, REPO, require_board_capabilities

pytestmark = pytest.mark.vboard

SPEC = f"""\
name: clock
target: {REPO / "target-configs" / "vboard.yml"}
iterations: 2
variants:
  - name: shallow
    knobs:
      /sys/devices/system/cpu/cpu0/cpuidle/state1/disable: 1
      /sys/devices/system/cpu/cpu0/cpuidle/state2/disable: 1
  - name: deep
workloads:
  - name: wakeups
    kind: cyclictest
    duration-s: 1
    interval-us: 5000
    priority: 80
    affinity: true
  - name: idle-wakeups
    kind: cyclictest
    duration-s: 1
    interval-us: 5000
    priority: 80
    affinity: true
    idle-states: true
"""


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    require_board_capabilities()
    from lisa_ext.campaign.runner import run_campaign
    from lisa_ext.campaign.spec import load_spec
    from lisa_ext.campaign.store.reader import read_campaign
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard.board import VirtualBoard

    board = VirtualBoard()
    board.down()
    board.use_clock("host")  # the next boot's clock, whatever the cache's last board ran on
    deploy_variant(BoardTarget(board), BASELINE, method="boot")
    assert board.status()["clock"] == "host"
    tmp = tmp_path_factory.mktemp("clock")
    spec = tmp / "clock.yml"
    spec.write_text(SPEC)
    try:
        summary = run_campaign(load_spec(spec), tmp / "campaign", progress=False)
        yield board, summary, read_campaign(tmp / "campaign")
    finally:
        board.down()


def test_the_campaign_restarts_the_board_on_the_virtual_clock(campaign):
    board, summary, _ = campaign
    assert summary.failed == 0 and summary.done == 8
    status = subprocess.run([str(REPO / ".venv" / "bin" / "lisa-ext"), "vboard", "status"], capture_output=True,
                            text=True, timeout=60, check=True).stdout
    assert status.rstrip().endswith("virtual clock") and "restart on the virtual clock" in status
    assert "-icount" in Path(f"/proc/{board.status()['pid']}/cmdline").read_text().split("\0")


def test_each_run_records_the_clock_and_the_hosts_load(campaign):
    _, _, runs = campaign
    for run in runs.ok_runs:
        assert run.meta["board_clock"] == "virtual" and run.meta["board_timing"] == "faithful"
        load = run.meta["host_load"]
        assert load["clock"] == "virtual" and load["board_share"] == 1.0
        assert load["host_s"] > 0 and load["guest_s"] > 0 and load["guest_per_host"] > 0
        assert isinstance(load["load_start"], float) and isinstance(load["load_end"], float)
    assert json.loads((runs.runs[0].path / "meta.json").read_text())["board_clock"] == "virtual"


def _latency(runs, variant: str, metric: str = "lat_p99", workload: str = "wakeups") -> list[float]:
    return [next(m.value for m in run.result.metrics if m.name == metric)
            for run in sorted(runs.ok_runs, key=lambda r: r.key)
            if run.key.variant == variant and run.key.workload == workload]


def test_wakeups_without_deep_states_are_the_kernels_own_path(campaign):
    _, _, runs = campaign
    # the campaign's cyclictest holds /dev/cpu_dma_latency at 0 (its default): no deep state is
    # entered in either variant, and the wake-ups are the kernel's own path, in guest time
    shallow, deep = _latency(runs, "shallow"), _latency(runs, "deep")
    assert len(shallow) == len(deep) == 2
    assert max(shallow + deep) < 50, (shallow, deep)


def test_a_wakeup_from_cluster_sleep_costs_its_exit_latency(campaign):
    _, _, runs = campaign
    # CPU 0 idles between wake-ups 5 ms apart: menu picks cluster-sleep (2 ms target residency),
    # whose 900 us exit the faithful board pays, exact in guest time whatever the host's load
    p50 = _latency(runs, "deep", "lat_p50", "idle-wakeups")
    p99 = _latency(runs, "deep", "lat_p99", "idle-wakeups")
    assert len(p50) == len(p99) == 2
    assert all(900 <= value <= 945 for value in p50 + p99), (p50, p99)
    assert abs(p50[0] - p50[1]) <= 5, p50  # the same run twice: the same figure
    # with the deep states disabled the same idle wake-ups are the kernel's own path again
    assert max(_latency(runs, "shallow", "lat_p99", "idle-wakeups")) < 50
