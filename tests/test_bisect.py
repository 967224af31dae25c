"""lisa-ext bisect on this machine: the sequential decision on the committed samples' real
metrics, the bisection order, the series and metric checks with the shipped kernel specs, the
bad input lines, and (live) a whole bisection driven through the real campaign runner on this
machine, killed with SIGKILL in the middle of a step and resumed.

This machine boots no other kernel, so the live tests give each step's campaign (the one the
bisection writes) to :func:`run_local`, which runs it on this machine without its kernel and
with the load the step's kernel would have caused: an rt-app task whose activation period
doubles from patch 3 on (the regression, 100 -> 50 activations in 1 s). Everything else is the
bisection's own: its step kernels and campaign specs, run_campaign, the store, the decisions,
the page. The board test (tests/test_bisect_board.py) builds and boots the real kernels.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from campaign_helpers import LOCAL_TARGET, REPO, require_live
from lisa_ext.bisect import steps as st
from lisa_ext.bisect.page import FIGURE, PageStep, StepPage, bisection_figure, render_page
from lisa_ext.bisect.run import STATE, Bisector, batch_done, open_bisection
from lisa_ext.bisect.spec import (MetricChoice, metric_matches, parse_metric, patch_subject, series_between,
                                  write_step_kernel)
from lisa_ext.campaign.runner import run_campaign
from lisa_ext.campaign.spec import load_spec as load_campaign_spec
from lisa_ext.campaign.store.reader import metrics_table
from lisa_ext.campaign.store.writer import CampaignStore
from lisa_ext.errors import UserError
from lisa_ext.kernel.build import artefact_hash
from lisa_ext.kernel.spec import load_variant_spec
from lisa_ext.schema import load_yaml

KERNELS = REPO / "kernels"
SERIES = KERNELS / "bisect-series"
SAMPLES = REPO / "data" / "samples"
LISA_EXT = [sys.executable, "-m", "lisa_ext.cli"]
#: the patch of kernels/bisect-series/bad.yml that changes behaviour (1-based)
CULPRIT = 3


def _values(campaign: str, variant: str, workload: str, metric: str) -> list[float]:
    table = metrics_table(SAMPLES / campaign)
    rows = table[(table["variant"] == variant) & (table["workload"] == workload) & (table["metric"] == metric)]
    return rows.sort_values("iteration")["value"].tolist()


# -- the sequential decision, on real samples ---------------------------------------------------

def test_bounds_split_alpha_over_the_looks():
    bounds = st.Bounds(initial=3, batch=2, maximum=9, alpha=0.05)
    assert bounds.sizes() == [3, 2, 2, 2]
    assert bounds.looks == 4
    assert st.look_alpha(bounds) == pytest.approx(0.0125)
    assert st.Bounds(initial=2, batch=4, maximum=7).sizes() == [2, 4, 1]
    with pytest.raises(ValueError):
        st.Bounds(initial=1)


def test_ends_that_differ_and_a_step_drawn_from_either():
    # the board sample's write latency, 'cache' vs 'system' on the 'low' load: Welch p ~ 0.003
    good = _values("wq-affinity-board", "cache", "low", "write_clat_mean")
    bad = _values("wq-affinity-board", "system", "low", "write_clat_mean")
    bounds = st.Bounds(initial=2, batch=1, maximum=4)
    ends = st.check_ends(good, bad, bounds)
    assert ends.significant and ends.p_value < 0.01
    assert st.classify(good, good, bad, bounds).call == st.GOOD
    assert st.classify(bad, good, bad, bounds).call == st.BAD
    # one run of each: as far from one end as from the other, more runs are needed
    mixed = st.classify([good[0], bad[0]], good, bad, bounds)
    assert mixed.call is None and mixed.n == 2
    # a single run cannot be tested yet
    assert st.classify([bad[0]], good, bad, bounds).call is None


def test_a_step_beyond_the_bad_end_is_not_called_good():
    good = _values("wq-affinity-board", "cache", "low", "write_clat_mean")
    bad = _values("wq-affinity-board", "system", "low", "write_clat_mean")
    far = [v * 3 for v in bad]  # differs from both ends: neither call is justified
    assert st.classify(far, good, bad, st.Bounds(initial=2, batch=1, maximum=4)).call is None


def test_ends_within_each_others_noise_are_refused():
    # rt-app's slack on the host sample: 3 runs each, p ~ 0.06, not below the look's level
    good = _values("wq-affinity", "cache", "rtapp-periodic", "medium_slack_mean")
    bad = _values("wq-affinity", "system", "rtapp-periodic", "medium_slack_mean")
    assert len(good) == len(bad) == 3
    check = st.check_ends(good, bad, st.Bounds())
    assert not check.significant and check.p_value > st.look_alpha(st.Bounds())


# -- the bisection order ------------------------------------------------------------------------

@pytest.mark.parametrize("n", range(1, 10))
def test_bisection_finds_every_culprit_in_log2_steps(n):
    for culprit in range(1, n + 1):
        verdicts: dict[int, str] = {}
        while not (where := st.bisection(n, verdicts)).done:
            verdicts[where.next_step] = st.BAD if where.next_step >= culprit else st.GOOD
        assert where.found == culprit
        assert len(verdicts) <= int(np.ceil(np.log2(n))) if n > 1 else not verdicts


def test_bisection_steps_around_skipped_and_undecided_steps():
    assert st.bisection(4, {}).next_step == 2
    assert st.bisection(4, {2: st.SKIP}).next_step == 1  # nearest the middle, lower first
    assert st.bisection(4, {2: st.SKIP, 1: st.GOOD}).next_step == 3
    where = st.bisection(4, {2: st.SKIP, 1: st.GOOD, 3: st.BAD})
    assert where.done and where.found is None and (where.lo, where.hi) == (1, 3)
    where = st.bisection(4, {2: st.UNDECIDED, 1: st.GOOD, 3: st.BAD})
    assert where.found is None and (where.lo, where.hi) == (1, 3)


def test_a_good_step_above_a_bad_one_is_inconsistent():
    where = st.bisection(4, {1: st.BAD, 3: st.GOOD})
    assert where.done and where.inconsistent and where.found is None


# -- the series, the metric --------------------------------------------------------------------

def test_series_of_the_shipped_test_kernels():
    series = series_between(load_variant_spec(SERIES / "good.yml"), load_variant_spec(SERIES / "bad.yml"))
    assert [p.name[:4] for p in series.added] == ["0001", "0002", "0003", "0004"]
    assert patch_subject(series.added[CULPRIT - 1]) == (
        "sched/cpufreq: drop the dvfs headroom from schedutil's default request")


def test_series_that_share_no_prefix_are_one_line():
    # teo-util's series carries 0002, idle-gating's 0003 and 0004 after the board patches
    with pytest.raises(UserError) as err:
        series_between(load_variant_spec(KERNELS / "teo-util/teo.yml"),
                       load_variant_spec(KERNELS / "idle-gating/baseline.yml"))
    line = str(err.value)
    assert "\n" not in line and "patches[2]" in line and "share no prefix" in line
    with pytest.raises(UserError, match="adds no patch"):
        series_between(load_variant_spec(SERIES / "bad.yml"), load_variant_spec(SERIES / "bad.yml"))
    with pytest.raises(UserError, match="share no prefix"):
        series_between(load_variant_spec(SERIES / "bad.yml"), load_variant_spec(SERIES / "good.yml"))


def test_series_with_other_fragments_is_refused(tmp_path):
    tree = tmp_path / "kernels"
    (tree / "x").mkdir(parents=True)
    fragment = tree / "other.config"
    fragment.write_text((KERNELS / "configs/vboard.config").read_text() + "CONFIG_PRINTK_TIME=y\n")
    spec = tree / "x" / "bad.yml"
    spec.write_text((SERIES / "bad.yml").read_text()
                    .replace("../patches/board/", f"{KERNELS}/patches/board/")
                    .replace("  - 000", f"  - {SERIES}/000")
                    .replace("../configs/vboard.config", "../other.config"))
    with pytest.raises(UserError, match="config fragments differs"):
        series_between(load_variant_spec(SERIES / "good.yml"), load_variant_spec(spec))


def test_step_kernels_are_the_ends_builds(tmp_path):
    """Step 0 and step n hash as the good and bad variants (their builds are reused); step k
    carries the good series plus the first k patches, copied into the bisection's directory."""
    good, bad = load_variant_spec(SERIES / "good.yml"), load_variant_spec(SERIES / "bad.yml")
    series = series_between(good, bad)
    specs = {k: load_variant_spec(write_step_kernel(series, k, tmp_path)) for k in range(series.n + 1)}
    tree = "a-tree-key"
    assert artefact_hash(specs[0], tree) == artefact_hash(good, tree)
    assert artefact_hash(specs[4], tree) == artefact_hash(bad, tree)
    assert len({artefact_hash(s, tree) for s in specs.values()}) == 5
    assert [p.read_bytes() for p in specs[2].patches] == [p.read_bytes() for p in bad.patches[:4]]
    assert all(tmp_path in p.parents for s in specs.values() for p in (*s.patches, *s.configs))
    assert (specs[2].cmdline, specs[2].modules, specs[2].knobs) == (good.cmdline, good.modules, good.knobs)


def test_metric_names():
    assert parse_metric("rt:small_slack_mean", ["rt"], []) == ("rt", "small_slack_mean", False)
    assert parse_metric("rt:trace too deep", ["rt"], []) == ("rt", "trace too deep", True)
    assert parse_metric("idle_miss:too_deep_pct", ["rt"], ["idle_miss"]) == ("rt", "too_deep_pct", True)
    assert metric_matches("too_deep_pct", "trace too deep", "%")
    assert metric_matches("trace too deep", "trace too deep", "%")
    assert not metric_matches("too_shallow_pct", "trace too deep", "%")
    assert not metric_matches("small_slack", "small_slack_mean", "us")
    for bad, problem in (("rt", "expected WORKLOAD:METRIC"), ("nope:x", "neither a workload"),
                         (":x", "expected WORKLOAD:METRIC")):
        with pytest.raises(UserError, match=problem):
            parse_metric(bad, ["rt"], ["idle_miss"])
    with pytest.raises(UserError, match="names the workload"):
        parse_metric("idle_miss:too_deep_pct", ["a", "b"], ["idle_miss"])


# -- the command's bad input -------------------------------------------------------------------

def _spec(path: Path, good: str = "good.yml", bad: str = "bad.yml", target: Path = LOCAL_TARGET,
          extra: str = "") -> Path:
    path.write_text(f"""\
name: bisect-local
target: {target}
iterations: 2
variants:
  - name: good
    kernel: {SERIES / good}
  - name: bad
    kernel: {SERIES / bad}
  - name: other
    kernel: {KERNELS / "teo-util/teo.yml"}
  - name: knobbed
    kernel: {SERIES / bad}
    knobs: {{/proc/sys/kernel/sched_schedstats: 1}}
workloads:
  - name: rt
    kind: rtapp
    duration-s: 1
    tasks:
      small: {{duty-cycle-pct: 10, period-ms: 10}}
{extra}""")
    return path


def run_bisect(*args: str) -> subprocess.CompletedProcess:
    """``lisa-ext bisect ARGS`` from the checkout, in this process's environment."""
    return subprocess.run([*LISA_EXT, "bisect", *args], capture_output=True, text=True, cwd=REPO, timeout=300)


@pytest.mark.parametrize("good, bad, metric, expected", [
    ("bad", "other", "rt:small_slack_mean", "share no prefix"),
    ("good", "nope", "rt:small_slack_mean", "--bad 'nope' is not a variant of the spec"),
    ("good", "knobbed", "rt:small_slack_mean", "differ in knobs"),
    ("good", "bad", "fio:read_iops", "neither a workload of the spec"),
    ("good", "bad", "idle_miss:too_deep_pct", "the spec traces nothing"),
    ("--upload-pack=touch /tmp/x", "bad", "rt:x", "is not a variant of the spec"),
])
def test_bad_input_is_one_line_and_leaves_nothing(tmp_path, good, bad, metric, expected):
    spec = _spec(tmp_path / "spec.yml")
    out = tmp_path / "out"
    proc = run_bisect(str(spec), f"--good={good}", "--bad", bad, "--metric", metric, "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], proc.stderr
    assert not out.exists()


def test_a_directory_that_is_not_a_bisection_is_refused(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    proc = run_bisect(str(_spec(tmp_path / "spec.yml")), "--good", "good", "--bad", "bad", "--metric",
                   "rt:small_activations", "--out", str(out))
    assert proc.returncode == 2 and "not a bisection" in proc.stderr
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


# -- the page and its figure --------------------------------------------------------------------

def _page(steps: list[PageStep]) -> StepPage:
    return StepPage("spec.yml", "good", "bad", "rt:small_slack_mean", "us", False,
                    ["a", "b", "c $x$", "d"], ["1.patch", "2.patch", "3.patch", "4.patch"], steps,
                    verdict="first bad patch: 3 of 4, c $x$ (3.patch)")


def test_the_figure_draws_every_run_at_its_step_over_the_ends_bands():
    page = _page([PageStep(0, [5.1, 5.2, 5.3], "good"), PageStep(4, [2.0, 2.2, 2.1], "bad"),
                  PageStep(2, [5.0, 5.2, 7.0, 5.1, 5.2], "good"), PageStep(3, [2.1, 2.3, 2.2], "bad")])
    ax = bisection_figure(page).axes[0]
    dots = {int(c.get_offsets()[0][0]): (len(c.get_offsets()), c.get_facecolor()[0].tolist())
            for c in ax.collections if len(c.get_offsets())}
    assert {k: n for k, (n, _) in dots.items()} == {0: 3, 4: 3, 2: 5, 3: 3}  # every run, at its step
    assert dots[2][1] == dots[0][1] and dots[3][1] == dots[4][1] != dots[0][1]  # coloured by the call
    bands = sorted((round(p.get_y(), 6), round(p.get_y() + p.get_height(), 6)) for p in ax.patches)
    assert bands == [(2.0, 2.2), (5.1, 5.3)]  # each end's mean ± sd
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0 (good)", "1", "2", "3", "4 (bad)"]
    assert r"c \$x\$" in ax.get_title()  # a subject's $ is text, not math


def test_the_page_shows_the_figure_once_a_step_is_measured():
    assert FIGURE not in render_page(_page([]))
    assert f"]({FIGURE})" in render_page(_page([PageStep(0, [5.1, 5.2], "good")]))


# -- live: the whole bisection on this machine -------------------------------------------------

#: steps whose campaign :func:`run_local` makes fail (as a kernel that does not boot would)
FAILING = "LISA_EXT_TEST_BISECT_FAILING"


def run_local(spec_path: Path, out: Path) -> None:
    """Run the step's campaign on this machine, as its kernel would load it (see the module
    docstring): its kernel left out, the rt-app period doubled from the culprit on."""
    doc = load_yaml(spec_path, "campaign spec")
    variant = doc["variants"][0]
    k = int(variant["name"][1:])
    variant.pop("kernel")
    task = {"duty-cycle-pct": 10, "period-ms": 20 if k >= CULPRIT else 10}
    if str(k) in os.environ.get(FAILING, "").split(","):
        task["cpus"] = [4095]  # rt-app cannot place its task: every run fails
    variant["workload-options"] = {"rtapp": {"tasks": {"small": task}}}
    local = spec_path.with_name(f"{spec_path.stem}.local.yml")
    from lisa_ext.bisect.spec import write_yaml

    write_yaml(local, doc)
    run_campaign(load_campaign_spec(local), out, resume=True, progress=False)


def run_local_then_die(spec_path: Path, out: Path) -> None:
    """:func:`run_local`, SIGKILLed once the first run of step 2 is published."""
    if not out.parent.name == "k2":
        return run_local(spec_path, out)
    threading.Thread(target=run_local, args=(spec_path, out), daemon=True).start()
    while not (CampaignStore(out).exists() and CampaignStore(out).scan().results()):
        time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)


BOUNDS = st.Bounds(initial=2, batch=1, maximum=3)


def _open(spec: Path, out: Path, run_batch, resume: bool) -> Bisector:
    return open_bisection(spec, "good", "bad", "rt:small_activations", out, bounds=BOUNDS, resume=resume,
                          progress=False, run_batch=run_batch)


def _published(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.glob("steps/*/*/runs/*/*/*/meta.json")}


@pytest.mark.live
def test_bisection_names_the_culprit_after_a_sigkill(tmp_path):
    require_live()
    spec, out = _spec(tmp_path / "spec.yml"), tmp_path / "bisection"
    script = (f"import sys; sys.path.insert(0, {str(REPO / 'tests')!r}); import test_bisect as t; "
              f"from pathlib import Path; "
              f"t._open(Path({str(spec)!r}), Path({str(out)!r}), t.run_local_then_die, False).run()")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    before = _published(out)
    assert any(name.startswith("steps/k2/") for name in before)  # one run of step 2 was kept
    assert batch_done(out / "steps/k0/b0", 2) and batch_done(out / "steps/k4/b0", 2)

    ran: list[str] = []

    def counted(spec_path: Path, batch: Path) -> None:
        ran.append(str(batch.relative_to(out)))
        run_local(spec_path, batch)

    outcome = _open(spec, out, counted, True).run()
    assert outcome.culprit == CULPRIT
    assert ran == ["steps/k2/b0", "steps/k3/b0"]  # the ends were not run again
    after = _published(out)
    assert all(after[name] == data for name, data in before.items())  # nothing lost or rerun
    page = (out / "bisect.md").read_text()
    assert "first bad patch: 3 of 4, sched/cpufreq: drop the dvfs headroom" in page
    assert (out / FIGURE).read_text().lstrip().startswith("<?xml")
    assert json.loads((out / STATE).read_text())["elapsed_s"] > 0

    # a metric no run produces: one line naming the workload's metrics, the runs kept
    bisector = Bisector(load_campaign_spec(spec), outcome_series(), "good", "bad",
                        MetricChoice("rt", "no_such_metric", False), out, BOUNDS, print, False)
    with pytest.raises(UserError) as err:
        bisector.samples(0)
    assert "no run of step 0 produces it" in str(err.value) and "small_activations" in str(err.value)
    assert _published(out) == after

    # a step whose runs all fail is skipped and stepped around; the answer is then a range
    skipped = tmp_path / "skipped"
    (skipped / "steps").mkdir(parents=True)
    for name in (STATE, "steps/k0", "steps/k3", "steps/k4"):
        subprocess.run(["cp", "-a", str(out / name), str(skipped / name)], check=True)
    os.environ[FAILING] = "2"
    try:
        outcome = _open(spec, skipped, run_local, True).run()
    finally:
        del os.environ[FAILING]
    assert (outcome.culprit, outcome.lo, outcome.hi) == (None, 1, 3)
    page = (skipped / "bisect.md").read_text()
    assert "| 2 | skip |" in page and "one of 2..3" in page


def outcome_series():
    return series_between(load_variant_spec(SERIES / "good.yml"), load_variant_spec(SERIES / "bad.yml"))
