"""The three kinds of knob files, read through devlib on this machine.

Plain values and bracketed choices are also exercised by the live campaign
tests on a real workqueue knob; the flag-list kind (``sched/features``) is
written and reverted for real on the virtual board (test_vboard_e2e.py). Here
each kind's parsing runs on files with the kernel's formats, read by devlib's
local target as a campaign would.
"""

from __future__ import annotations

import pytest

from lisa_ext.knobs import applied_knobs, check_knobs, choices, read_knob

# kernel/sched/debug.c:sched_feat_show, as printed by Debian's 6.12 on the board
FEATURES = ("PLACE_LAG PLACE_DEADLINE_INITIAL PLACE_REL_DEADLINE RUN_TO_PARITY PREEMPT_SHORT "
            "NO_NEXT_BUDDY PICK_BUDDY CACHE_HOT_BUDDY DELAY_DEQUEUE DELAY_ZERO WAKEUP_PREEMPTION "
            "NO_HRTICK NO_HRTICK_DL NO_DOUBLE_TICK NONTASK_CAPACITY TTWU_QUEUE SIS_UTIL "
            "NO_WARN_DOUBLE_CLOCK NO_RT_PUSH_IPI NO_RT_RUNTIME_SHARE NO_LB_MIN ATTACH_AGE_LOAD "
            "WA_IDLE WA_WEIGHT WA_BIAS UTIL_EST NO_LATENCY_WARN NI_RANDOM \n")


@pytest.fixture(scope="module")
def target():
    devlib = pytest.importorskip("devlib")
    return devlib.LocalLinuxTarget(connection_settings={"unrooted": True})


def test_plain_and_bracketed_values(target, tmp_path):
    plain, bracketed = tmp_path / "plain", tmp_path / "scheduler"
    plain.write_text("cache\n")
    bracketed.write_text("none [mq-deadline] kyber bfq\n")
    assert read_knob(target, str(plain)) == "cache"
    assert read_knob(target, str(bracketed)) == "mq-deadline"
    assert choices(target, str(bracketed)) == ["none", "mq-deadline", "kyber", "bfq"]
    assert check_knobs(target, {str(bracketed): "bfq"}) == []
    assert check_knobs(target, {str(bracketed): "cfq"}) == [
        f"{bracketed}: 'cfq' is not offered (choices: none, mq-deadline, kyber, bfq)"]


def test_flag_list_reads_the_named_flag(target, tmp_path):
    features = tmp_path / "features"
    features.write_text(FEATURES)
    # either spelling of the knob's value names the same flag; the file says which state it is in
    assert read_knob(target, str(features), "NO_UTIL_EST") == "UTIL_EST"
    assert read_knob(target, str(features), "UTIL_EST") == "UTIL_EST"
    assert read_knob(target, str(features), "HRTICK") == "NO_HRTICK"
    # NO_HRTICK_DL is its own flag, not HRTICK's
    assert read_knob(target, str(features), "NO_HRTICK_DL") == "NO_HRTICK_DL"
    assert check_knobs(target, {str(features): "NO_UTIL_EST"}) == []


def test_flag_list_unknown_flag_is_reported(target, tmp_path):
    features = tmp_path / "features"
    features.write_text(FEATURES)
    problems = check_knobs(target, {str(features): "NO_UTIL_EST_FASTUP"})
    assert len(problems) == 1
    assert problems[0].startswith(f"{features}: no flag 'UTIL_EST_FASTUP' (expected NAME or NO_NAME of one of: ")


def test_upper_case_plain_value_is_not_a_flag_list(target, tmp_path):
    # a one-token file (e.g. a Y/N module parameter) keeps its plain reading
    knob = tmp_path / "enabled"
    knob.write_text("N\n")
    assert read_knob(target, str(knob), "Y") == "N"
    assert check_knobs(target, {str(knob): "Y"}) == []


def test_campaign_glob_knob_is_written_on_every_match_and_reverted(target, tmp_path):
    # globs used to work only for kernel deploys; one implementation serves both
    for policy in ("policy0", "policy2"):
        (tmp_path / policy).mkdir()
        (tmp_path / policy / "scaling_governor").write_text("performance\n")
    pattern = f"{tmp_path}/policy*/scaling_governor"
    assert check_knobs(target, {pattern: "schedutil"}) == []
    assert check_knobs(target, {f"{tmp_path}/nothing*/x": "1"}) == [
        f"knob {tmp_path}/nothing*/x: no file matches on the target"]
    with applied_knobs(target, {pattern: "schedutil"}) as state:
        assert sorted(state) == [f"{tmp_path}/policy0/scaling_governor",
                                 f"{tmp_path}/policy2/scaling_governor"]
        assert (tmp_path / "policy2" / "scaling_governor").read_text() == "schedutil"
    assert (tmp_path / "policy0" / "scaling_governor").read_text() == "performance"
