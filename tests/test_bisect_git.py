"""lisa-ext bisect over a git range (``--variant V --good REF --bad REF``) on this machine.

The repository is made here: its base holds the files the shipped test series
(kernels/bisect-series/000*.patch) touches, as their pre-images, and its commits are those
patches applied with ``git am`` (the third drops schedutil's dvfs headroom). The step kernels are
applied with the build's own :func:`apply_series` and compared with the commits' trees; the bad
input goes through the command; the live test runs a whole bisection over the range through the
real campaign runner, each step's campaign on this machine as in tests/test_bisect.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from campaign_helpers import LOCAL_TARGET, REPO, require_live
from lisa_ext.bisect import steps as st
from lisa_ext.bisect.run import open_bisection
from lisa_ext.bisect.spec import write_step_kernel
from lisa_ext.kernel.build import artefact_hash
from lisa_ext.kernel.patches import apply_series
from lisa_ext.kernel.spec import load_variant_spec
from lisa_ext.kernel.tree import BASE_TAG, git_mirror, tree_key
from test_bisect import CULPRIT, SERIES, run_bisect, run_local

KERNELS = REPO / "kernels"
SHIPPED = sorted(SERIES.glob("000*.patch"))
CULPRIT_SUBJECT = "sched/cpufreq: drop the dvfs headroom from schedutil's default request"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def _pre_images(patch: Path) -> dict[str, list[str]]:
    """Each file the patch changes, as the lines its hunks expect (context and removed lines)."""
    files: dict[str, list[str]] = {}
    current = None
    for line in patch.read_text().splitlines():
        if line.startswith("--- a/"):
            current = files.setdefault(line[len("--- a/"):], [])
        elif line.startswith("+++ ") or line.startswith("@@") or current is None:
            continue
        elif line.startswith((" ", "-")):
            current.append(line[1:])
        elif line.startswith("diff --git"):
            current = None
    return files


def make_repo(path: Path) -> Path:
    """The test repository: tag ``base`` holds the pre-images, ``main`` is base plus the four
    shipped patches as commits."""
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    for patch in SHIPPED:
        for name, lines in _pre_images(patch).items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text("\n".join(lines) + "\n")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "base")
    _git(path, "tag", "base")
    _git(path, "am", "-q", *map(str, SHIPPED))
    return path


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "cache"))
    return make_repo(tmp_path / "linux")


def _kernel_spec(tmp_path: Path, repo: Path, ref: str = "main", own_patch: bool = True) -> Path:
    spec = tmp_path / "kernels" / "git" / f"at-{ref}.yml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    patches = ""
    if own_patch:  # the variant's own patch: applied after the range's commits
        extra = tmp_path / "kernels" / "own.patch"
        extra.write_text("--- a/kernel/sched/cpufreq_schedutil.c\n+++ b/kernel/sched/cpufreq_schedutil.c\n"
                         "@@ -1,1 +1,2 @@\n // SPDX-License-Identifier: GPL-2.0\n+/* the variant's own line */\n")
        patches = "patches: [../own.patch]\n"
    spec.write_text(f"name: git-{ref}\nbase: {{git: {repo}, ref: {ref}}}\n{patches}"
                    f"configs: [{KERNELS / 'configs/vboard.config'}]\n")
    return spec


def _campaign(tmp_path: Path, kernel: Path) -> Path:
    spec = tmp_path / "spec.yml"
    spec.write_text(f"""\
name: bisect-git
target: {LOCAL_TARGET}
iterations: 2
variants:
  - name: v
    kernel: {kernel}
  - name: debian
    kernel: {SERIES / "good.yml"}
workloads:
  - name: rt
    kind: rtapp
    duration-s: 1
    tasks:
      small: {{duty-cycle-pct: 10, period-ms: 10}}
""")
    return spec


def _tree_after(repo: Path, at: str, patches, where: Path) -> str:
    """The tree the build's apply_series makes of ``repo`` at ``at`` plus ``patches``."""
    subprocess.run(["git", "clone", "-q", "--shared", str(repo), str(where)], check=True)
    _git(where, "checkout", "-q", "--detach", at)
    _git(where, "tag", BASE_TAG)
    apply_series(where, patches, log=lambda line: None)
    return _git(where, "rev-parse", "HEAD^{tree}")


def test_steps_are_the_commits_trees_with_the_variants_patches(tmp_path, repo):
    kernel = _kernel_spec(tmp_path, repo)
    out = tmp_path / "bisection"
    bisector = open_bisection(_campaign(tmp_path, kernel), "base", "main", "rt:small_activations", out,
                              variant="v", progress=False)
    series = bisector.series
    commits = _git(repo, "rev-list", "--reverse", "base..main").split()
    assert list(series.commits) == commits and series.n == 4
    assert series.labels[CULPRIT - 1] == f"{commits[CULPRIT - 1][:12]} {CULPRIT_SUBJECT}"
    own = load_variant_spec(kernel).patches
    specs = {k: load_variant_spec(write_step_kernel(series, k, out)) for k in range(series.n + 1)}
    for k, spec in specs.items():
        assert spec.base.ref == _git(repo, "rev-parse", "base")
        assert [p.read_bytes() for p in spec.patches] == [p.read_bytes() for p in (*series.added[:k], *own)]
        # step k is the variant at commit k: that commit's tree with the variant's own patch
        at_commit = _tree_after(repo, commits[k - 1] if k else "base", own, tmp_path / f"at{k}")
        assert _tree_after(repo, "base", spec.patches, tmp_path / f"step{k}") == at_commit
    # one base tree for every step (one checkout, one incremental build dir); step 0 is the
    # variant at good itself, the same build
    keys = {tree_key(s.base) for s in specs.values()}
    assert len(keys) == 1
    at_good = load_variant_spec(_kernel_spec(tmp_path, repo, "base"))
    key = keys.pop()
    assert artefact_hash(specs[0], key) == artefact_hash(at_good, tree_key(at_good.base))
    assert len({artefact_hash(s, key) for s in specs.values()}) == 5


def test_a_merge_is_its_diff_against_its_first_parent(tmp_path, repo):
    _git(repo, "checkout", "-q", "-b", "side", "base")
    (repo / "drivers" / "side.c").write_text("/* from a side branch */\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "side: a new file")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "merge", "-q", "--no-ff", "-m", "Merge branch 'side'", "side")
    kernel = _kernel_spec(tmp_path, repo, own_patch=False)
    bisector = open_bisection(_campaign(tmp_path, kernel), "base", "main", "rt:small_activations",
                              tmp_path / "bisection", variant="v", progress=False)
    series = bisector.series
    assert series.n == 5 and series.labels[-1].endswith(" Merge branch 'side'")
    step = load_variant_spec(write_step_kernel(series, 5, tmp_path / "bisection"))
    assert _tree_after(repo, "base", step.patches, tmp_path / "step") == _git(repo, "rev-parse", "main^{tree}")


@pytest.mark.parametrize("variant, good, bad, expected", [
    ("v", "nope", "main", "--good 'nope': no such commit in"),
    ("v", "base", "no-such-branch", "--bad 'no-such-branch': no such commit in"),
    ("v", "--output=@PWNED@", "main", "starts with '-'"),
    ("v", "base", "-main", "starts with '-'"),
    ("v", "main", "base", "is not an ancestor of --bad 'base'"),
    ("v", "main", "main", "the range is empty"),
    ("v", "main~2", "main~2", "the range is empty"),
    ("debian", "base", "main", "not a git repository; --variant needs a kernel spec with base: {git"),
    ("nope", "base", "main", "--variant 'nope' is not a variant of the spec"),
])
def test_bad_range_is_one_line_and_leaves_nothing(tmp_path, repo, variant, good, bad, expected):
    pwned = tmp_path / "pwned"
    good = good.replace("@PWNED@", str(pwned))
    out = tmp_path / "out"
    proc = run_bisect(str(_campaign(tmp_path, _kernel_spec(tmp_path, repo))), "--variant", variant,
                      f"--good={good}", f"--bad={bad}", "--metric", "rt:small_activations", "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], proc.stderr
    assert not out.exists() and not pwned.exists()


def test_good_off_the_first_parent_line_is_refused(tmp_path, repo):
    _git(repo, "checkout", "-q", "-b", "side", "base")
    (repo / "side.c").write_text("/* side */\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "side")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    out = tmp_path / "out"
    proc = run_bisect(str(_campaign(tmp_path, _kernel_spec(tmp_path, repo))), "--variant", "v",
                      "--good", "side", "--bad", "main", "--metric", "rt:small_activations", "--out", str(out))
    assert proc.returncode == 2 and "not on the first-parent line" in proc.stderr, proc.stderr
    assert not out.exists()


def test_a_resumed_range_that_moved_is_refused_and_kept(tmp_path, repo):
    spec = _campaign(tmp_path, _kernel_spec(tmp_path, repo))
    out = tmp_path / "bisection"
    open_bisection(spec, "base", "main", "rt:small_activations", out, variant="v", progress=False)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # main moves, and the cache's mirror learns it: the same refs name another range
    (repo / "later.c").write_text("/* later */\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "later")
    _git(git_mirror(str(repo)), "fetch", "-q", "origin", "+refs/heads/*:refs/heads/*")
    proc = run_bisect(str(spec), "--variant", "v", "--good", "base", "--bad", "main", "--metric",
                      "rt:small_activations", "--out", str(out), "--resume")
    assert proc.returncode == 2 and "commits differs" in proc.stderr, proc.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


# -- live: the whole bisection over the range, on this machine ----------------------------------

@pytest.mark.live
def test_bisection_over_a_git_range_names_the_culprit_commit(tmp_path, repo):
    require_live()
    spec = _campaign(tmp_path, _kernel_spec(tmp_path, repo))
    out = tmp_path / "bisection"
    lines: list[str] = []
    bisector = open_bisection(spec, "base", "main", "rt:small_activations", out, variant="v", progress=False,
                              bounds=st.Bounds(initial=2, batch=1, maximum=3), echo=lines.append,
                              run_batch=run_local)
    outcome = bisector.run()
    culprit = _git(repo, "rev-parse", f"main~{4 - CULPRIT}")
    assert outcome.culprit == CULPRIT
    assert outcome.verdict == f"first bad commit: 3 of 4, {culprit[:12]} {CULPRIT_SUBJECT}"
    page = (out / "bisect.md").read_text()
    assert f"first bad commit: 3 of 4, {culprit[:12]} sched/cpufreq: drop the dvfs headroom" in page
    assert "## Commits" in page and "v at base" in page
    assert any(f"({culprit[:12]} {CULPRIT_SUBJECT})" in line for line in lines)
