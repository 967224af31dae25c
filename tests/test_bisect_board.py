"""lisa-ext bisect on the virtual board: four real patches, one real regression, named.

kernels/bisect-series/bad.yml is the board's baseline (good.yml, the same build as
kernels/iowait-boost/baseline.yml) plus four patches: comments in the performance and powersave
governors and in menu, and, third, a change of schedutil's default request: no dvfs headroom
(``sugov_effective_cpu_perf()`` no longer adds 25 % to the utilization). An rt-app task running
35 % of every 16 ms at the top OPP then gets the OPP its utilization needs with nothing to spare
(600 instead of 816 MHz on the emulated RK3399 little cluster: 83 % of each period instead of
61 %), runs longer each period, and its slack shrinks. The board runs on its virtual clock, so
that host load does not reach the guest's time. ``lisa-ext bisect`` builds each step's kernel (incrementally, with ccache, from the
baseline's tree), boots it, runs the task and must name the third patch.

Cost: the baseline build (7-19 min from nothing, shared with every board test), then four
incremental builds, four boots and 12 or more rt-app runs of 2 s; the wall time is printed
(docs/bisect.md#the-test says what it was here).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from vboard_helpers import REPO, require_board_capabilities

# in `make test` since traced runs and the iowait-boost smoke study got cheaper (docs/bisect.md,
# "The test"); `make test-bisect` runs it alone
pytestmark = pytest.mark.vboard

SERIES = REPO / "kernels" / "bisect-series"
LISA_EXT = Path(sys.executable).with_name("lisa-ext")


@pytest.fixture(scope="module")
def bisection(tmp_path_factory):
    require_board_capabilities()
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard.board import VirtualBoard

    board = VirtualBoard()
    tmp = tmp_path_factory.mktemp("bisect-board")
    spec = tmp / "bisect.yml"
    spec.write_text(f"""\
name: bisect-board
target: {REPO / "target-configs" / "vboard.yml"}
iterations: 3
# QEMU's instruction clock: the guest's time does not stretch when the host is loaded (on the
# host's clock, a loaded CI machine made the same kernel's rt-app slack swing from +2.8 to -6.1 ms)
board-clock: virtual
variants:
  - name: good
    kernel: {SERIES / "good.yml"}
  - name: bad
    kernel: {SERIES / "bad.yml"}
workloads:
  - name: rt
    kind: rtapp
    duration-s: 2
    tasks:
      small: {{duty-cycle-pct: 35, period-ms: 16}}
""")
    out = tmp / "bisection"
    started = time.monotonic()
    # the runner connects to the board before deploying anything: bring it up on the good kernel
    deploy_variant(BoardTarget(board), SERIES / "good.yml")
    proc = subprocess.run([str(LISA_EXT), "bisect", str(spec), "--good", "good", "--bad", "bad",
                           "--metric", "rt:small_slack_mean", "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - started
    serial = board.serial_tail(40)
    board.down()
    print(f"bisection on the board: {wall / 60:.1f} min wall time (baseline build included when it was not cached)")
    print(proc.stderr[-4000:])
    return proc, out, serial


def test_bisect_names_the_patch_that_dropped_the_headroom(bisection):
    proc, out, serial = bisection
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-3000:]}\n{serial}"
    page = (out / "bisect.md").read_text()
    assert "first bad patch: 3 of 4, sched/cpufreq: drop the dvfs headroom" in page, page
    assert "| 2 | good |" in page and "| 3 | bad |" in page, page
