"""End to end on the virtual board: patch -> build -> deploy -> trace -> check the effect.

Runs campaigns/vboard-iowait-boost.yml with the ``lisa-ext`` command a user types:
the iowait-boost study's baseline kernel and the patched one (schedutil's IO boost
capped to 0) are built (cached under ~/.cache/lisa-ext), each booted on the board
by the campaign runner, and a traced fio + rt-app campaign runs on each.

The traces are then read with ``trace-cmd report`` and the tests' own parser
(tests/analysis_reference.py, not lisa_ext's ingestion), once per trace: the campaign's traces carry ``cpu_frequency``,
``cpu_idle`` and ``cpu_idle_miss``, fio's runs are full of I/O wake-ups, and each
variant's runs ran that variant's kernel with its knobs read back (the patched
one with ``iowait_boost_cap`` = 0 on every policy, both with util_est off).

The patch's effect: schedutil applies the IO boost in the update made when a task
that waited for I/O is enqueued (``sugov_iowait_boost()`` with
``SCHED_CPUFREQ_IOWAIT``), i.e. between fio's switch-out into the I/O wait and the
``sched_wakeup`` that ends it. So, per fio wake-up, the test looks for a frequency
*raise* of the woken CPU inside that window, and takes the woken CPU's frequency
at the wake-up: with the boost, a good share of wake-ups come with a raise and
the frequency at wake-up is well above the lowest OPP; with the boost capped to 0,
raises inside the window are rare and the CPU stays near the lowest OPP.
Measured while writing this test (4 runs each, 3 s, ~1700 wake-ups per run):
raises at 29-52 % of wake-ups and 647-907 MHz with the boost, 0-0.2 % and
408-415 MHz capped. On the host's clock a loaded CI run fell to 11.8 % and
500 MHz (1.16x the capped 431 MHz) and failed; the campaign now runs on the
board's own clock, where the first run gave 39.5 % and 1148 MHz, 0.2 % and
426 MHz capped (~3100 wake-ups a run).
"""

import functools
import json
import math
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean

import pytest

import analysis_reference as ref
from analysis_loaders import fast_trace
from vboard_helpers import BASELINE, REPO, require_board_capabilities

pytestmark = pytest.mark.vboard

CAMPAIGN = REPO / "campaigns" / "vboard-iowait-boost.yml"
LISA_EXT = Path(sys.executable).with_name("lisa-ext")


@functools.cache
def trace_events(trace_dat: Path) -> list[ref.Event]:
    """Every event of a campaign trace, parsed once for all the tests below."""
    return ref.report_events(trace_dat)


@dataclass
class FioWakeups:
    """fio's wake-ups after it slept, as schedutil saw them."""

    freq_khz: list[int] = field(default_factory=list)  # woken CPU's frequency at each wake-up
    raised: int = 0  # wake-ups whose CPU was raised to a higher OPP since fio slept

    @property
    def raised_frac(self) -> float:
        return self.raised / len(self.freq_khz)


def fio_wakeups(events: list[ref.Event]) -> FioWakeups:
    """Per fio wake-up that follows a switch-out of the same task (its I/O wait)."""
    freq: dict[int, int] = {}
    last_raise: dict[int, int] = {}
    slept_at: dict[str, int] = {}
    out = FioWakeups()
    # trace-cmd report sorts by time; schedutil's switch for an enqueue is emitted
    # before that enqueue's sched_wakeup, at an earlier or equal timestamp
    for e in events:
        ts, name, fields = e.ns, e.name, e.f
        if name == "cpu_frequency":
            cpu, khz = int(fields["cpu_id"]), int(fields["state"])
            if cpu in freq and khz > freq[cpu]:
                last_raise[cpu] = ts
            freq[cpu] = khz
        elif name == "sched_switch" and fields.get("prev_comm") == "fio":
            slept_at[fields["prev_pid"]] = ts
        elif name == "sched_wakeup" and fields.get("comm") == "fio" and fields.get("pid") in slept_at:
            cpu = int(fields["target_cpu"])
            if cpu not in freq:
                continue
            out.freq_khz.append(freq[cpu])
            if last_raise.get(cpu, -1) > slept_at[fields["pid"]]:
                out.raised += 1
    return out


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    require_board_capabilities()
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard.board import VirtualBoard

    board = VirtualBoard()
    # the runner connects to the board before deploying anything: bring it up first
    deploy_variant(BoardTarget(board), BASELINE)
    out = tmp_path_factory.mktemp("vboard-e2e") / "campaign"
    proc = subprocess.run([str(LISA_EXT), "campaign", "run", str(CAMPAIGN), "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, cwd=REPO, timeout=3600)
    serial = board.serial_tail(40)
    board.down()
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\nserial console:\n{serial}"
    return out


def _runs(campaign: Path, variant: str, workload: str) -> list[Path]:
    runs = sorted((campaign / "runs" / variant / workload).iterdir())
    assert runs, f"no {variant}/{workload} run"
    return runs


def test_each_variant_ran_its_own_kernel_and_knobs(campaign):
    from lisa_ext.kernel.build import build_variant

    for variant, spec in (("baseline", "baseline.yml"), ("no-iowait-boost", "no-iowait-boost.yml")):
        built = build_variant(REPO / "kernels" / "iowait-boost" / spec)
        for run in _runs(campaign, variant, "fio-iowait") + _runs(campaign, variant, "rtapp-periodic"):
            meta = json.loads((run / "meta.json").read_text())
            result = json.loads((run / "result.json").read_text())
            assert result["status"] == "ok", result["error"]
            assert meta["kernel"]["release"] == built.release
            assert meta["kernel"]["version"] == built.version_string
            knobs = meta["kernel_variant"]["deploy"]["knobs"]
            caps = {path: value for path, value in knobs.items() if path.endswith("/iowait_boost_cap")}
            if variant == "no-iowait-boost":
                assert sorted(caps) == [f"/sys/devices/system/cpu/cpufreq/policy{p}/schedutil/iowait_boost_cap"
                                        for p in (0, 2)]
                assert set(caps.values()) == {"0"}
            else:
                assert caps == {}
            features = meta["knobs"]["/sys/kernel/debug/sched/features"]
            assert (features["original"], features["read_back"]) == ("UTIL_EST", "NO_UTIL_EST")


def test_traces_carry_idle_misses_and_frequency_changes(campaign):
    seen = Counter(e.name for trace in campaign.glob("runs/*/*/*/trace.dat") for e in trace_events(trace))
    assert seen["cpu_frequency"] > 0, dict(seen)
    assert seen["cpu_idle_miss"] > 0, dict(seen)
    assert seen["cpu_idle"] > 0, dict(seen)


@pytest.fixture(scope="module")
def fio_wakeups_by_variant(campaign) -> dict[str, dict[Path, FioWakeups]]:
    found = {}
    for variant in ("baseline", "no-iowait-boost"):
        found[variant] = {run: fio_wakeups(trace_events(run / "trace.dat"))
                          for run in _runs(campaign, variant, "fio-iowait")}
        for w in found[variant].values():
            print(f"{variant}: {len(w.freq_khz)} fio wake-ups, frequency raised at "
                  f"{100 * w.raised_frac:.1f} %, mean {mean(w.freq_khz) / 1000:.0f} MHz at wake-up")
    return found


def test_fio_runs_are_io_wakeup_bound(fio_wakeups_by_variant):
    for runs in fio_wakeups_by_variant.values():
        for run, w in runs.items():
            # ~500 IOPS for 3 s on the throttled disk, one wake-up per read
            assert len(w.freq_khz) >= 300, f"{run}: {len(w.freq_khz)} fio wake-ups"


def test_capped_boost_leaves_frequency_low_after_io_wakeups(fio_wakeups_by_variant):
    """The patch's effect, in the kernel's own decisions: no boost, no raise at I/O wake-ups."""
    boosted = list(fio_wakeups_by_variant["baseline"].values())
    capped = list(fio_wakeups_by_variant["no-iowait-boost"].values())
    for w in boosted:
        assert w.raised_frac >= 0.10, f"boost on: frequency raised at only {100 * w.raised_frac:.1f} % of wake-ups"
    for w in capped:
        assert w.raised_frac <= 0.05, f"boost capped to 0: frequency raised at {100 * w.raised_frac:.1f} % of wake-ups"
    mean_boosted = mean(mean(w.freq_khz) for w in boosted)
    mean_capped = mean(mean(w.freq_khz) for w in capped)
    assert mean_boosted >= 1.2 * mean_capped, (mean_boosted, mean_capped)


def check_analyses_against_reference(trace_dat: Path) -> dict:
    """idle_miss and iowait_boost (fast loader) vs analysis_reference on one board trace."""
    events = trace_events(trace_dat)
    trace = fast_trace(str(trace_dat))

    idle = trace.ana.idle_miss
    assert idle.resolve_mode() == "event"  # the board's kernel emits cpu_idle_miss
    want_idle = ref.idle_misses(events)["cpus"]
    got_idle = idle.df_idle_miss_counts()
    assert sorted(got_idle.index) == sorted(want_idle)
    for cpu, w in want_idle.items():
        assert [got_idle.loc[cpu, k] for k in ("wakeups", "too_deep", "too_shallow")] == \
            [w["wakeups"], w["too_deep"], w["too_shallow"]], (trace_dat, cpu)

    want_tasks = ref.task_io(events)
    stat_iowait = [e for e in events if e.name == "sched_stat_iowait"]
    if stat_iowait:  # the analysis then counts the kernel's iowait stats, not D-state sleeps
        for w in want_tasks.values():
            w["iowait_count"], w["iowait_delay_s"] = 0, 0.0
        for e in stat_iowait:
            w = want_tasks[int(e.f["pid"])]
            w["iowait_count"] += 1
            w["iowait_delay_s"] += int(e.f["delay"]) / 1e9
    got_tasks = trace.ana.iowait_boost.df_task_iowait()
    assert sorted(got_tasks.index) == sorted(want_tasks)
    for pid, w in want_tasks.items():
        row = got_tasks.loc[pid]
        assert row["iowait_count"] == w["iowait_count"], (trace_dat, pid)
        for col in ("iowait_delay_s", "runtime_s", "mean_freq_running_khz"):
            if w[col] is None:
                assert math.isnan(row[col]), (trace_dat, pid, col)
            else:
                assert math.isclose(row[col], w[col], rel_tol=1e-6, abs_tol=1e-8), (trace_dat, pid, col)
    return {"idle": want_idle, "tasks": want_tasks}


def test_analyses_match_the_reference_on_board_traces(campaign):
    """The idle-miss and iowait-boost analyses on traces with real cpu_idle_miss and
    cpu_frequency events, against the reference parser of trace-cmd's text."""
    for trace_dat in sorted(campaign.glob("runs/*/fio-iowait/*/trace.dat")):
        found = check_analyses_against_reference(trace_dat)
        assert sum(w["too_deep"] + w["too_shallow"] for w in found["idle"].values()) > 0
        assert any(t["comm"] == "fio" and t["iowait_count"] > 300 for t in found["tasks"].values())

