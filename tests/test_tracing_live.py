"""lisa_ext.campaign.tracing on this machine: trace-cmd for real, into a private instance.

The wait for trace-cmd to turn its instance on is one shell loop on the target; these check
its three ends: recording started, trace-cmd exited first (its status said), and the instance
gone afterwards either way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from campaign_helpers import require_live
from lisa_ext.campaign import tracing

pytestmark = pytest.mark.live

TRACEFS = "/sys/kernel/tracing"


@pytest.fixture(scope="module")
def target():
    require_live()
    devlib = pytest.importorskip("devlib")
    return devlib.LocalLinuxTarget(connection_settings={"unrooted": True})


def test_recording_starts_records_and_removes_its_instance(target, tmp_path):
    instance = f"{tracing.INSTANCE_PREFIX}test{os.getpid()}"
    output = tmp_path / "trace.dat"
    with tracing.recording(target, tracefs=TRACEFS, instance=instance, events=("sched:sched_switch",),
                           output=str(output), buffer_size_kb=256):
        assert Path(f"{TRACEFS}/instances/{instance}/tracing_on").read_text().strip() == "1"
        os.sched_yield()
    assert output.read_bytes()[:10] == b"\x17\x08\x44tracing"
    assert not Path(f"{TRACEFS}/instances/{instance}").exists()


def test_trace_cmd_exiting_before_it_records_is_said_with_its_status(target, tmp_path):
    instance = f"{tracing.INSTANCE_PREFIX}test{os.getpid()}"
    # a trace-cmd that exits at once, before it makes the instance (false(1): status 1)
    with pytest.raises(tracing.TraceError, match=r"trace-cmd exited with status 1 before recording started"):
        with tracing.recording(target, tracefs=TRACEFS, instance=instance, events=("sched:sched_switch",),
                               output=str(tmp_path / "trace.dat"), trace_cmd="false"):
            pytest.fail("the block ran without a recording")
    assert not Path(f"{TRACEFS}/instances/{instance}").exists()


def test_grace_periods_are_expedited_only_while_trace_cmd_starts_and_stops(target, tmp_path):
    """trace-cmd clears every subsystem's filter as it starts and stops, a grace period each:
    expedited then (seen by trace-cmd itself, through a wrapper), the kernel's own setting while
    the block runs and afterwards, and the command putting it back handed to the runner's journal."""
    switch = Path(tracing.RCU_EXPEDITED)
    if switch.read_text().strip() != "0" or not os.access(switch, os.W_OK):
        pytest.skip(f"{switch} is not a writable 0 on this machine")
    wrapper = tmp_path / "trace-cmd"
    wrapper.write_text(f"#!/bin/sh\ncat {switch} >{tmp_path}/at-start\n"
                       f"trap 'cat {switch} >{tmp_path}/at-stop' INT\ntrace-cmd \"$@\"\n")
    wrapper.chmod(0o755)
    cleanups: list[str] = []
    instance = f"{tracing.INSTANCE_PREFIX}test{os.getpid()}"
    with tracing.recording(target, tracefs=TRACEFS, instance=instance, events=("sched:sched_switch",),
                           output=str(tmp_path / "trace.dat"), trace_cmd=str(wrapper),
                           on_cleanup=cleanups.append):
        assert switch.read_text().strip() == "0"  # the workload runs with the kernel's own setting
    assert switch.read_text().strip() == "0"
    assert (tmp_path / "at-start").read_text().strip() == "1"
    assert (tmp_path / "at-stop").read_text().strip() == "1"
    assert cleanups == [f"echo 0 >{switch}"]
