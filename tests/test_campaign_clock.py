"""The board clock without a board: the spec key and its overrides, the resume refusal, the host
load recorded with each run and the runs it flags, waits counted in the target's time, and the
QEMU arguments of each clock."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from campaign_helpers import LISA_EXT, LOCAL_TARGET, write_spec
from lisa_ext.campaign import host_load, remote
from lisa_ext.campaign.runner import run_campaign
from lisa_ext.campaign.spec import load_spec
from lisa_ext.campaign.status import campaign_status
from lisa_ext.campaign.store.records import Metric, RunKey, RunResult
from lisa_ext.campaign.store.writer import CampaignStore
from lisa_ext.errors import SpecError, UserError
from lisa_ext.report.build import build_report
from lisa_ext.studies.rfc import campaign_platform
from lisa_ext.target.board import _GuestPace
from lisa_ext.target.protocol import MAX_TIME_SCALE
from lisa_ext.vboard import qemu, qemu_build
from lisa_ext.vboard.board import BoardSettings

SPEC = """\
name: clocked
target: @TARGET@
iterations: 1
variants:
  - name: only
workloads:
  - name: nap
    kind: hackbench
    groups: 1
    loops: 10
"""
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wq-affinity-board"


def _spec(tmp_path: Path, extra: str = "") -> Path:
    return write_spec(tmp_path / "clocked.yml", SPEC.replace("iterations: 1\n", f"iterations: 1\n{extra}"))


def test_board_clock_comes_from_the_spec_or_the_override(tmp_path):
    assert load_spec(_spec(tmp_path)).board_clock is None  # the target's: the board's is virtual
    assert qemu.DEFAULT_CLOCK == "virtual" and BoardSettings().clock == "virtual"
    spec = _spec(tmp_path, "board-clock: virtual\n")
    assert load_spec(spec).board_clock == "virtual"
    assert load_spec(spec, board_clock="host").board_clock == "host"
    with pytest.raises(SpecError, match="board-clock"):
        load_spec(_spec(tmp_path, "board-clock: tsc\n"))
    with pytest.raises(SpecError, match="board-clock"):
        load_spec(spec, board_clock="wall")
    for command in (["campaign", "run", str(spec)], ["study", "run", "wq-affinity"], ["vboard", "up", "--clock"]):
        proc = subprocess.run(LISA_EXT + command + (["--board-clock"] if command[0] != "vboard" else []) + ["tsc"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "invalid choice: 'tsc'" in proc.stderr, (command, proc.stderr)


def _publish(store: CampaignStore, key: RunKey, meta: dict) -> None:
    store.publish(key, {"variant": key.variant, "workload": key.workload, "iteration": key.iteration, **meta},
                  RunResult("clocked", key.variant, key.workload, key.iteration, "ok", None,
                            [Metric("time", 1.0 + key.iteration / 10, "s", True)]))


def test_resume_on_the_other_clock_is_refused(tmp_path):
    spec_path = _spec(tmp_path)
    out = tmp_path / "campaign"
    store = CampaignStore(out)
    store.write_spec_copy(spec_path.read_text())
    _publish(store, RunKey("only", "nap", 0), {"board_clock": "host"})
    # a campaign from before the clock was recorded: its runs ran on the host's clock
    with pytest.raises(UserError, match="run on the host board clock; resume it with --board-clock host"):
        run_campaign(load_spec(spec_path, board_clock="virtual"), out, resume=True, progress=False)
    store.write_state({"board_clock": "virtual"})
    with pytest.raises(UserError, match="run on the virtual board clock; resume it with --board-clock virtual"):
        run_campaign(load_spec(spec_path, board_clock="host"), out, resume=True, progress=False)
    assert store.read_state()["board_clock"] == "virtual"
    # a spec that names no clock resumes on the runs' clock, which this machine (its own clock) refuses
    with pytest.raises(UserError, match="runs on its own clock: board-clock virtual"):
        run_campaign(load_spec(spec_path), out, resume=True, progress=False)


def test_a_spec_without_a_clock_runs_on_the_targets_own(tmp_path):
    """The board's default is virtual; this machine (and a phone, an SSH board) runs on its own."""
    out = tmp_path / "campaign"
    summary = run_campaign(load_spec(_spec(tmp_path)), out, progress=False)
    assert (summary.done, summary.failed) == (1, 0)
    assert CampaignStore(out).read_state()["board_clock"] == "host"
    with pytest.raises(UserError, match="runs on its own clock: board-clock virtual"):
        run_campaign(load_spec(_spec(tmp_path), board_clock="virtual"), tmp_path / "other", progress=False)


class _Shell:
    """This machine's shell, as the runner's target (``execute``): a real /proc/uptime."""

    def execute(self, command: str, **_kwargs) -> str:
        return subprocess.run(command, shell=True, capture_output=True, text=True, check=False).stdout


def test_host_load_is_measured_around_the_block():
    meta: dict = {}
    with host_load.measured(_Shell(), meta, clock="host", board_share=1.0):
        time.sleep(0.3)
    record = meta["host_load"]
    assert record["clock"] == "host" and record["board_share"] == 1.0 and record["cores"] == os.cpu_count()
    assert record["host_s"] >= 0.3 and record["guest_s"] >= 0.29
    assert record["guest_per_host"] == pytest.approx(1.0, abs=0.1)
    assert record["load_start"] >= 0 and record["load_end"] >= 0


def _load(clock: str, ratio: float, load: float, share: float | None = 1.0) -> dict:
    return {"host_load": {"clock": clock, "cores": 2, "board_share": share, "load_start": 0.5, "load_end": load,
                          "host_s": 10.0, "guest_s": 10.0 * ratio, "guest_per_host": ratio}}


def test_status_and_report_name_the_runs_host_load_disturbed(tmp_path):
    spec_path = write_spec(tmp_path / "clocked.yml", SPEC.replace("iterations: 1", "iterations: 6"))
    store = CampaignStore(tmp_path / "campaign")
    store.write_spec_copy(spec_path.read_text())
    records = [_load("host", 1.0, 1.2), _load("host", 0.999, 1.9), _load("host", 1.0, 3.5),
               _load("host", 0.8, 1.0), _load("virtual", 40.0, 6.0), _load("host", 0.5, 9.0, share=None)]
    for i, meta in enumerate(records):
        _publish(store, RunKey("only", "nap", i), meta)
    status = campaign_status(store.root)
    assert status.disturbed == {"only/nap/2": "load 3.5 on 2 cores",
                                "only/nap/3": "guest/host time 0.8, campaign median 1"}
    text = status.render()
    assert "only/nap/2  [host load: load 3.5 on 2 cores]" in text
    assert "warning: 2 runs on the host's clock ran on a loaded host" in text
    report = build_report(store.root)
    readme = (report / "README.md").read_text()
    assert "## Runs disturbed by host load" in readme and "- `only/nap/3`: guest/host time 0.8" in readme


def test_page_captions_name_the_clock_beside_the_timing(tmp_path):
    assert campaign_platform(SAMPLE).endswith(", decisions timing, host clock")
    campaign = tmp_path / "campaign"
    shutil.copytree(SAMPLE, campaign)
    for path in campaign.glob("runs/**/meta.json"):
        path.write_text(json.dumps({**json.loads(path.read_text()), "board_clock": "virtual"}))
    assert campaign_platform(campaign).endswith(", decisions timing, virtual clock")


class _SlowGuest:
    """A target whose uptime runs ``slowdown`` times slower than the host's clock (the virtual
    clock's busy guest)."""

    def __init__(self, slowdown: float):
        self.slowdown = slowdown
        self.reads = 0

    def execute(self, command: str, **_kwargs) -> str:
        assert command == "cat /proc/uptime"
        self.reads += 1
        return f"{time.monotonic() / self.slowdown:.3f} 0.00\n"


def _wait_out(target, seconds: float) -> None:
    deadline = remote.TargetDeadline(target, seconds)
    while not deadline.passed():
        time.sleep(min(seconds, 0.05))


def test_waits_count_the_targets_time():
    start = time.monotonic()
    deadline = remote.TargetDeadline(_Shell(), 0.2)
    while not deadline.passed():
        time.sleep(0.01)
    assert 0.2 <= time.monotonic() - start < 1.0
    slow = _SlowGuest(4.0)
    start = time.monotonic()
    _wait_out(slow, 0.2)
    # 0.2 s of a guest 4x slower than the host: 0.8 s of the host's, its uptime read as it went
    assert 0.75 <= time.monotonic() - start < 1.5 and slow.reads > 2
    hung = _SlowGuest(1e9)
    start = time.monotonic()
    _wait_out(hung, 0.01)
    assert time.monotonic() - start < 0.01 * MAX_TIME_SCALE + 0.5


def test_guest_pace_bounds_the_time_scale():
    pace = _GuestPace()
    assert pace.time_scale() == 25.0  # nothing measured: the slowest busy guest seen
    pace.sample(100.0, 1000.0)
    pace.sample(105.0, 1001.0)  # 5 host seconds for 1 guest second
    assert pace.time_scale() == 10.0
    pace.sample(110.0, 9000.0)  # idle: far ahead of the host, the slow window still counts
    assert pace.time_scale() == 10.0
    pace.sample(200.0, 9001.0)
    assert pace.time_scale() == MAX_TIME_SCALE
    pace.sample(201.0, 3.0)  # rebooted: no interval across it
    assert pace.time_scale() == MAX_TIME_SCALE


def _machine(clock: str, arch: str = "x86_64") -> qemu.QemuMachine:
    return qemu.QemuMachine(kernel=Path("/k"), cmdline="", rootfs=Path("/r"), modules_disk=None, ssh_port=1,
                            serial_log=Path("/s"), pidfile=Path("/p"), qmp_socket=Path("/q"), clock=clock,
                            arch=arch, dtb=Path("/d"))


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_the_virtual_clock_is_qemus_icount(arch):
    virtual = qemu._machine_args(_machine("virtual", arch))
    at = virtual.index("-accel")
    assert virtual[at + 2:at + 6] == ["-icount", qemu_build.icount_args()[1], "-rtc", "clock=vm"]
    assert "shift=0,sleep=on,align=off" in virtual[at + 3]
    assert "-icount" not in qemu.qemu_command(_machine("host", arch))
    with pytest.raises(UserError, match="no board clock 'tsc'"):
        BoardSettings(clock="tsc")
