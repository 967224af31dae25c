"""``lisa-ext analyse NAME TRACE [--json]`` end to end, figures against the reference."""

import json
import math

import pytest

import analysis_reference as ref
from analysis_loaders import FIO, JUNO, JUNO_YAML, SURFACEFLINGER, reference_events, require_shared
from lisa_ext.cli import main


def run(capsys, *argv):
    code = main(["analyse", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("loader", ["lisa", "fast"])
def test_idle_miss_json(capsys, loader):
    require_shared(JUNO)
    code, out, err = run(capsys, "idle-miss", JUNO, "--json", "--loader", loader, "--platform", JUNO_YAML)
    assert code == 0, err
    figures = json.loads(out)
    want = ref.idle_misses(reference_events(str(JUNO)), states=ref.JUNO_STATES)
    assert figures["mode"] == "derived"
    assert set(figures["cpus"]) == {str(c) for c in want["cpus"]}
    for cpu, w in want["cpus"].items():
        got = figures["cpus"][str(cpu)]
        assert (got["wakeups"], got["too_deep"], got["too_shallow"]) == (w["wakeups"], w["too_deep"], w["too_shallow"])
        assert math.isclose(got["too_deep_pct"], 100 * w["too_deep"] / w["wakeups"])
    total = figures["total"]
    assert total["wakeups"] == sum(w["wakeups"] for w in want["cpus"].values())
    assert math.isclose(total["too_shallow_pct"], 100 * total["too_shallow"] / total["wakeups"])
    assert set(figures["clusters"]) == {"0", "1"}


def test_missing_event_is_one_clear_line(capsys):
    require_shared(JUNO)
    code, out, err = run(capsys, "wakeup-latency", JUNO, "--loader", "lisa")
    assert code == 2
    assert "sched_waking" in err and "sched_wakeup" in err and str(JUNO) in err
    assert "Traceback" not in err


def test_derived_mode_without_table_is_a_user_error(capsys):
    require_shared(JUNO)
    code, out, err = run(capsys, "idle-miss", JUNO)
    assert code == 2 and "idle-state table" in err


def test_wq_placement_and_iowait_json_on_shared_fio(capsys):
    require_shared(FIO)
    events = reference_events(str(FIO))
    code, out, err = run(capsys, "wq-placement", FIO, "--json")
    assert code == 0, err
    figures = json.loads(out)
    want = ref.placement(ref.work_items(events), "workqueue")
    assert set(figures["workqueues"]) == set(want)
    for name, w in want.items():
        got = figures["workqueues"][name]
        assert got["count"] == w["count"] and got["same_llc_frac"] is None
        assert math.isclose(got["lat_p99"], w["lat_p99"], rel_tol=1e-6, abs_tol=2e-9)
    # per-function figures are keyed by the names trace-cmd report prints (%ps), not addresses
    by_function = ref.placement(ref.work_items(events), "function")
    assert set(figures["functions"]) == set(by_function) and "blk_mq_run_work_fn" in by_function
    for name, w in by_function.items():
        assert figures["functions"][name]["count"] == w["count"]
    code, out, err = run(capsys, "iowait-boost", FIO, "--json")
    assert code == 0, err
    figures = json.loads(out)
    tasks = ref.task_io(events)
    assert set(figures["tasks"]) == {str(p) for p in tasks}
    fio = max(tasks, key=lambda p: tasks[p]["iowait_count"])
    assert figures["tasks"][str(fio)]["iowait_count"] == tasks[fio]["iowait_count"]
    assert figures["tasks"][str(fio)]["mean_freq_running_khz"] is None  # no cpufreq on the host
    devices = ref.block_devices(events)
    assert {d: v["requests"] for d, v in figures["devices"].items()} == {d: v["requests"] for d, v in devices.items()}


def test_iowait_boost_text_output_on_systrace(capsys):
    require_shared(SURFACEFLINGER)
    code, out, err = run(capsys, "iowait-boost", SURFACEFLINGER)
    assert code == 0, err
    assert "== sugov_set_iowait_boost timeline" in out
    assert "== mean frequency in the 4 ms after wakeups (kHz)" in out


@pytest.mark.parametrize("name, option, value", [
    ("iowait-boost", "--window-ms", "-5"), ("iowait-boost", "--window-ms", "nan"),
    ("wakeup-frequency", "--burst-window-ms", "0"), ("wakeup-frequency", "--burst-window-ms", "inf")])
def test_a_window_that_is_not_a_positive_duration_is_one_line(capsys, name, option, value):
    require_shared(JUNO)
    code, out, err = run(capsys, name, JUNO, option, value)
    assert code == 2 and out == ""
    assert option in err and "positive" in err and len(err.strip().splitlines()) == 1, err
