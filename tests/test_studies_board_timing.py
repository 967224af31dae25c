"""A study page says what its directions can show from the board timing its runs had.

On the committed board sample (runs from before the timing switch, their meta.json completed with
the ``decisions`` they ran in) and on a copy whose runs say ``faithful`` (what ``--board-timing
faithful`` records in each run's meta.json). The timing is what the runs recorded, never the target's name.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from lisa_ext.studies import idle_gating, iowait_boost, ondemand_bursty
from lisa_ext.studies.rfc import campaign_platform, campaign_timing

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wq-affinity-board"


def _with_timing(tmp_path: Path, timings: list[str | None], clock: str | None = None) -> Path:
    """A copy of the sample whose runs recorded ``timings`` in turn (None: none, as off the modules),
    and the board's ``clock`` when given."""
    campaign = tmp_path / "campaign"
    shutil.copytree(SAMPLE, campaign)
    metas = sorted(campaign.glob("runs/**/meta.json"))
    for i, path in enumerate(metas):
        meta = json.loads(path.read_text())
        meta["board_timing"] = timings[i % len(timings)]
        if clock:
            meta["board_clock"] = clock
        path.write_text(json.dumps(meta))
    return campaign


def test_runs_before_the_switch_were_decisions_and_the_page_says_the_direction_cannot_be_read():
    assert campaign_timing(SAMPLE) == "decisions"
    assert campaign_platform(SAMPLE) == ("virtual board (QEMU TCG, emulated idle states and OPPs), "
                                         "decisions timing, host clock")
    note = ondemand_bursty.direction_note(SAMPLE)
    assert note.startswith("**Why the direction cannot be read here:**") and "--board-timing faithful" in note
    assert "does not change the vCPU's speed" in ondemand_bursty.what_is_real(SAMPLE)
    assert "not paid" in idle_gating.why_on_this_board(SAMPLE)
    assert "not paid on wake-up" in idle_gating.what_is_real(SAMPLE)
    assert "does not change the vCPU's speed" in iowait_boost.fio_direction_note(SAMPLE)


def test_faithful_runs_read_the_direction_from_the_confidence_interval(tmp_path):
    campaign = _with_timing(tmp_path, ["faithful"])
    assert campaign_timing(campaign) == "faithful"
    note = ondemand_bursty.direction_note(campaign)
    assert note.startswith("**How to read the direction here:**") and "records/s follows the frequency" in note
    assert "cannot appear" not in note
    pages = [ondemand_bursty.what_is_real(campaign), idle_gating.why_on_this_board(campaign),
             idle_gating.what_is_real(campaign)]
    assert not any("not paid" in text or "does not change the vCPU's speed" in text for text in pages)
    assert "held for that state's exit latency" in pages[1] and "each paid at its speed" in pages[2]
    fio = iowait_boost.fio_direction_note(campaign)
    assert "does not change the vCPU's speed" not in fio and "makes a low OPP slow the vCPU" in fio
    assert "throttled to 500 IOPS" in fio


def test_faithful_runs_on_the_boards_own_clock_are_not_called_milliseconds_of_noise(tmp_path):
    # idle-gating runs on the virtual clock: its exits are exact there and a poller is at most
    # 10 us late, so the host clock's "milliseconds, tens of % noise" would mislead a reader
    host = [idle_gating.why_on_this_board(_with_timing(tmp_path / "host", ["faithful"], "host")),
            idle_gating.what_is_real(_with_timing(tmp_path / "host2", ["faithful"], "host"))]
    assert "milliseconds" in host[0] and "late by tenths of a millisecond" in host[1]
    virtual = _with_timing(tmp_path / "virtual", ["faithful"], "virtual")
    why, real = idle_gating.why_on_this_board(virtual), idle_gating.what_is_real(virtual)
    assert "milliseconds" not in why and "noise" not in why.split("The energy row")[0]
    assert "board's own clock" in why and "10 µs" in why and "The energy row" in why
    assert "late by" not in real and "exact on the board's own clock" in real
    # decisions timing on the virtual clock still says the exits are not paid
    assert "not paid" in idle_gating.why_on_this_board(_with_timing(tmp_path / "d", ["decisions"], "virtual"))


def test_mixed_timings_are_said_not_compared(tmp_path):
    campaign = _with_timing(tmp_path, ["faithful", "decisions"])
    assert campaign_timing(campaign) == "decisions + faithful"
    assert "rerun the campaign in one timing" in ondemand_bursty.direction_note(campaign)


def test_a_target_named_vboard_without_the_modules_has_no_timing(tmp_path):
    # the sample's target config is named vboard; its runs now record no timing, as a kernel
    # without the emulation modules leaves them: the name alone says nothing of the kernel
    campaign = _with_timing(tmp_path, [None])
    assert campaign_timing(campaign) is None
    assert "timing" not in campaign_platform(campaign)


def test_a_platform_is_named_by_the_description_its_runs_recorded_else_by_its_name(tmp_path):
    campaign = tmp_path / "campaign"
    shutil.copytree(SAMPLE, campaign)
    for path in campaign.glob("runs/**/meta.json"):
        meta = json.loads(path.read_text())
        del meta["platform"]["description"]  # a run from before target configs carried one
        path.write_text(json.dumps(meta))
    assert campaign_platform(campaign).startswith("vboard, decisions timing")
