"""Campaign specs and target configs: valid files load, bad ones stop with one precise message."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from campaign_helpers import LISA_EXT, LOCAL_TARGET, REPO, write_spec
from lisa_ext.campaign.runner import plan_runs
from lisa_ext.campaign.spec import load_spec
from lisa_ext.errors import SpecError
from lisa_ext.schema import load_yaml
from lisa_ext.target import TargetConfig

GOOD = """\
name: t
target: @TARGET@
iterations: 2
trace:
  events: [sched:sched_switch, workqueue]
variants:
  - name: a
    knobs: {/sys/module/workqueue/parameters/default_affinity_scope: cache}
  - name: b
    knobs: {/sys/module/workqueue/parameters/default_affinity_scope: system}
workloads:
  - name: io
    kind: fio
    options: {rw: randread, bs: 4k, runtime: 1, time_based: 1, size: 8M}
  - name: rt
    kind: rtapp
    duration-s: 1
    tasks: {small: {duty-cycle-pct: 10, period-ms: 16}}
"""


def bad(tmp_path: Path, old: str, new: str) -> str:
    path = write_spec(tmp_path / "spec.yml", GOOD.replace(old, new, 1))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert msg.startswith(str(path)), msg
    assert "\n" not in msg
    return msg


def test_committed_specs_load():
    for path in (REPO / "notebooks" / "quickstart.yml", REPO / "campaigns" / "sample-wq-affinity.yml"):
        spec = load_spec(path)
        assert spec.target == LOCAL_TARGET
        assert len(spec.variants) == 2 and spec.iterations >= 3
        assert {w.kind for w in spec.workloads} == {"fio", "rtapp"}


def test_good_spec_and_interleaved_plan(tmp_path):
    spec = load_spec(write_spec(tmp_path / "spec.yml", GOOD))
    assert spec.variants[0].knobs == {"/sys/module/workqueue/parameters/default_affinity_scope": "cache"}
    assert spec.trace.traces("io", 5)
    order = [str(k) for k in plan_runs(spec)]
    assert order == ["a/io/0", "b/io/0", "a/rt/0", "b/rt/0", "a/io/1", "b/io/1", "a/rt/1", "b/rt/1"]


def test_group_by_variant_plan(tmp_path):
    spec = load_spec(write_spec(tmp_path / "spec.yml", "order: group-by-variant\n" + GOOD))
    order = [str(k) for k in plan_runs(spec)]
    assert order == ["a/io/0", "a/rt/0", "a/io/1", "a/rt/1", "b/io/0", "b/rt/0", "b/io/1", "b/rt/1"]


def test_unknown_key_names_key_line_and_allowed(tmp_path):
    msg = bad(tmp_path, "iterations: 2", "iterations: 2\nrepeat: 3")
    assert "repeat (line 4)" in msg and "unknown key" in msg
    assert "allowed here: name, description, target, iterations, order" in msg


def test_unknown_nested_key(tmp_path):
    msg = bad(tmp_path, "    duration-s: 1", "    duration-s: 1\n    durations: 2")
    assert "workloads[1].durations" in msg and "allowed here:" in msg and "tasks" in msg


def test_wrong_type(tmp_path):
    msg = bad(tmp_path, "iterations: 2", "iterations: two")
    assert ": iterations (line 3): expected integer" in msg and "got string 'two'" in msg
    msg = bad(tmp_path, "iterations: 2", "iterations: true")
    assert "expected integer" in msg


def test_missing_target_file(tmp_path):
    msg = bad(tmp_path, "target: @TARGET@", "target: nowhere/local.yml")
    assert ": target: target config" in msg and "nowhere/local.yml not found" in msg


def test_missing_spec_file(tmp_path):
    with pytest.raises(SpecError, match="campaign spec: file not found"):
        load_spec(tmp_path / "absent.yml")


def test_missing_required_key(tmp_path):
    msg = bad(tmp_path, "iterations: 2\n", "")
    assert ": iterations: missing required key" in msg


@pytest.mark.parametrize("old,new,expected", [
    ("kind: fio", "kind: iozone", "unknown workload kind 'iozone'; allowed: cyclictest, ebizzy, fio, hackbench, pgbench, rtapp, schbench, wa"),
    ("rw: randread", "output: x", "set by lisa-ext itself"),
    ("small: {", "toolongname: {", "task names are 1-7 letters"),
    ("duty-cycle-pct: 10", "duty-cycle-pct: 150", "expected a number from 0.01 to 100"),
    ("name: b\n", "name: a\n", "name 'a' is used twice"),
    ("iterations: 2", "iterations: 2\norder: random", "is not one of: interleave, group-by-variant"),
    ("iterations: 2", "iterations: 2\nboard-timing: fast", "board-timing (line 4): 'fast' is not one of: faithful, decisions"),
])
def test_bad_values(tmp_path, old, new, expected):
    assert expected in bad(tmp_path, old, new)


def test_board_timing_defaults_to_faithful_and_can_be_overridden(tmp_path):
    path = write_spec(tmp_path / "spec.yml", GOOD)
    assert load_spec(path).board_timing == "faithful"
    assert load_spec(path, board_timing="decisions").board_timing == "decisions"
    path = write_spec(tmp_path / "fast.yml", GOOD.replace("iterations: 2", "iterations: 2\nboard-timing: decisions"))
    assert load_spec(path).board_timing == "decisions"
    assert load_spec(path, board_timing="faithful").board_timing == "faithful"
    with pytest.raises(SpecError, match="board-timing: 'slow' is not one of: faithful, decisions"):
        load_spec(path, board_timing="slow")


def test_bad_knob_and_events(tmp_path):
    assert "must be an absolute path under /sys or /proc" in bad(
        tmp_path, "{/sys/module/workqueue/parameters/default_affinity_scope: cache}", "{/etc/passwd: x}")
    assert "is not a trace event" in bad(tmp_path, "workqueue]", "'work queue']")
    assert "'nope' is not a workload of this spec" in bad(
        tmp_path, "events: [sched:sched_switch, workqueue]",
        "events: [sched:sched_switch]\n  workloads: [nope]")


def test_kernel_variant_file_must_exist(tmp_path):
    msg = bad(tmp_path, "  - name: b\n", "  - name: b\n    kernel: kernels/none/variant.yml\n")
    assert "variants[1].kernel" in msg and "not found" in msg


@pytest.mark.parametrize("body,expected", [
    ("target-conf:\n  kind: host\n  bogus: 1\n", "target-conf.bogus: unknown key; allowed here: name, kind"),
    ("target-conf:\n  kind: linux\n  port: abc\n", "target-conf.port: expected integer or null"),
    ("target-conf:\n  kind: host\n  devlib:\n    nope: 1\n", "target-conf.devlib.nope: unknown key"),
    ("target-conf:\n  kind: phone\n", "target-conf.kind: 'phone' is not one of: host, linux, android"),
    ("kind: host\n", "target-conf: missing"),
    ("target-conf:\n  kind: linux\n", "target-conf.host: missing"),
    ("target-conf:\n  kind: linux\n  host: b\n  username: -oProxyCommand=x\n",
     "target-conf.username: '-oProxyCommand=x' starts with '-'"),
    ("target-conf:\n  kind: linux\n  host: -b\n", "target-conf.host: '-b'"),
    ("target-conf:\n  kind: linux\n  host: b\n  devlib:\n    platform: {class: devlib.platform.Platform}\n",
     "target-conf.devlib.platform: lisa-ext sets devlib's platform"),
])
def test_bad_target_config(tmp_path, body, expected):
    path = tmp_path / "target.yml"
    path.write_text(body)
    with pytest.raises(SpecError) as info:
        TargetConfig.load(path)
    assert str(info.value).startswith(f"{path}: ")
    assert expected in str(info.value)


def test_committed_target_configs_are_valid():
    kinds = {path.name: TargetConfig.load(path).kind for path in sorted((REPO / "target-configs").glob("*.yml"))}
    assert kinds == {"android-phone.example.yml": "android", "local.yml": "host",
                     "ssh-board.example.yml": "linux", "vboard-arm64.yml": "linux", "vboard.yml": "linux"}


def test_cli_bad_spec_stops_before_running(tmp_path):
    spec = write_spec(tmp_path / "spec.yml", GOOD.replace("iterations: 2", "iterations: 2\nrepeat: 1"))
    out = tmp_path / "out"
    proc = subprocess.run(LISA_EXT + ["campaign", "run", str(spec), "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"lisa-ext campaign: error: {spec}: repeat (line 4): unknown key; allowed here: "
        "name, description, target, iterations, order, trace, energy, variants, workloads, retries, requires, board-timing, board-clock, smoke, report, android"]
    assert not out.exists()


def test_report_settings_are_checked(tmp_path):
    spec = load_spec(write_spec(tmp_path / "ok.yml", GOOD + "report: {baseline: b, mean: gmean}\n"))
    assert spec.report == {"baseline": "b", "mean": "gmean"}
    with pytest.raises(SpecError, match=r"report.baseline: 'c' is not a variant of this spec"):
        load_spec(write_spec(tmp_path / "bad.yml", GOOD + "report: {baseline: c}\n"))
    with pytest.raises(SpecError, match=r"report.alpha.*must be between 0 and 1"):
        load_spec(write_spec(tmp_path / "bad.yml", GOOD + "report: {alpha: 5}\n"))


def test_stored_copy_matches_the_runs_not_the_report_settings(tmp_path):
    from lisa_ext.campaign.spec import stored_spec_matches

    spec = load_spec(write_spec(tmp_path / "s.yml", GOOD + "report: {mean: gmean}\n"))
    assert stored_spec_matches(spec, {**spec.raw, "report": {"baseline": "b"}})  # reporting only
    assert stored_spec_matches(spec, {**spec.raw, "description": "before the TODO was filled in"})
    assert not stored_spec_matches(spec, {**spec.raw, "iterations": 3})           # other runs
    smoke = load_spec(write_spec(tmp_path / "m.yml", GOOD + "smoke: {iterations: 1}\n"), smoke=True)
    assert smoke.raw["iterations"] == 1 and "smoke" not in smoke.raw
    # what older versions stored for a smoke campaign: the file as written
    assert stored_spec_matches(smoke, load_yaml(tmp_path / "m.yml", "spec"))
    assert not stored_spec_matches(smoke, load_yaml(tmp_path / "m.yml", "spec"), legacy=False)


def test_a_smoke_override_of_null_removes_the_option(tmp_path):
    """pgbench's smoke run by its transactions instead of its seconds: duration-s: null leaves the
    full run's -T out, so the two lengths never meet (they exclude each other)."""
    pg = GOOD + "  - {name: pg, kind: pgbench, duration-s: 10, clients: 4}\n"
    smoke = load_spec(write_spec(tmp_path / "s.yml", pg + "smoke: {workloads: {pg: {duration-s: null, "
                                 "transactions: 20}}}\n"), smoke=True)
    assert smoke.workloads[-1].options == {"clients": 4, "transactions": 20}
    assert load_spec(tmp_path / "s.yml").workloads[-1].options == {"duration-s": 10, "clients": 4}
    with pytest.raises(SpecError, match=r"workloads\[2\]\.duration-s: expected exactly one of duration-s"):
        load_spec(write_spec(tmp_path / "both.yml", pg + "smoke: {workloads: {pg: {transactions: 20}}}\n"),
                  smoke=True)


def test_resuming_with_another_board_timing_is_one_error(tmp_path):
    """A campaign's runs are never a mix of timings: resuming with another is refused, naming it."""
    from lisa_ext.campaign.runner import CampaignRunner
    from lisa_ext.errors import UserError

    path = write_spec(tmp_path / "spec.yml", GOOD)
    out = tmp_path / "out"
    first = CampaignRunner(load_spec(path, board_timing="decisions"), out)
    first._open_store()
    first._save_state()  # as after its first run, on the board:
    _published_run(out, board_timing="decisions")
    CampaignRunner(load_spec(path, board_timing="decisions"), out, resume=True)._open_store()
    with pytest.raises(UserError, match=f"{out} was run with board timing decisions; resume it with "
                                        "--board-timing decisions"):
        CampaignRunner(load_spec(path), out, resume=True)._open_store()


def _published_run(campaign: Path, board_timing: str | None) -> None:
    """A finished run's meta.json as the runner writes it: ``board_timing`` None off the board."""
    run = campaign / "runs" / "v1" / "w1" / "0"
    run.mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"board_timing": board_timing}))


def test_runs_off_the_board_resume_under_any_board_timing(tmp_path):
    """A campaign on a target without the emulation modules (the quickstart on this machine) paid
    for nothing: a new default timing does not stop it from resuming, and its state follows."""
    from lisa_ext.campaign.runner import CampaignRunner
    from lisa_ext.campaign.store.writer import CampaignStore

    path = write_spec(tmp_path / "spec.yml", GOOD)
    out = tmp_path / "out"
    first = CampaignRunner(load_spec(path, board_timing="decisions"), out)
    first._open_store()
    first._save_state()
    _published_run(out, board_timing=None)
    resumed = CampaignRunner(load_spec(path), out, resume=True)
    resumed._open_store()
    assert resumed.state["board_timing"] == "faithful"
    assert CampaignStore(out).board_timings() == set()
