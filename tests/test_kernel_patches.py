"""Patch application on a small git tree: order, both formats, failures naming the hunk,
and the shipped patches applying to the real Debian 6.12 base."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lisa_ext.kernel.patches import PatchError, apply_series, hunk_header
from lisa_ext.kernel.tree import BASE_TAG, git

REPO = Path(__file__).resolve().parents[1]

ORIGINAL = "".join(f"line {i}\n" for i in range(1, 41))


@pytest.fixture
def tree(tmp_path):
    src = tmp_path / "src"
    (src / "kernel").mkdir(parents=True)
    (src / "kernel" / "sched.c").write_text(ORIGINAL)
    (src / "README").write_text("base\n")
    git(src, "init", "--quiet")
    git(src, "add", "--all")
    git(src, "commit", "--quiet", "-m", "base")
    git(src, "tag", BASE_TAG)
    return src


def make_diff(tree: Path, edit, out: Path, mail: bool) -> Path:
    """A real patch produced by git from an edit of the base tree."""
    path = tree / "kernel" / "sched.c"
    path.write_text(edit(path.read_text()))
    if mail:
        git(tree, "commit", "--quiet", "-am", "edit sched.c")
        text = git(tree, "format-patch", "--stdout", "-1").stdout
        git(tree, "reset", "--quiet", "--hard", "HEAD~1")
    else:
        text = git(tree, "diff").stdout
        git(tree, "checkout", "--quiet", "--", ".")
    out.write_text(text)
    return out


def test_series_applies_in_order_and_each_patch_is_a_commit(tree, tmp_path):
    p1 = make_diff(tree, lambda s: s.replace("line 5\n", "line five\n"), tmp_path / "0001.patch", mail=True)
    git(tree, "am", "--quiet", str(p1))
    p2 = make_diff(tree, lambda s: s.replace("line five\n", "line FIVE\n"), tmp_path / "0002.diff", mail=False)
    git(tree, "reset", "--quiet", "--hard", BASE_TAG)
    applied = []
    head = apply_series(tree, [p1, p2], log=applied.append)
    assert (tree / "kernel" / "sched.c").read_text() == ORIGINAL.replace("line 5\n", "line FIVE\n")
    subjects = git(tree, "log", "--format=%s", f"{BASE_TAG}..{head}").stdout.split("\n")[:2]
    assert subjects == ["apply 0002.diff", "edit sched.c"]
    assert applied == ["  applied 0001.patch", "  applied 0002.diff"]
    # applying an empty series goes back to the pristine base
    apply_series(tree, [], log=lambda *_: None)
    assert (tree / "kernel" / "sched.c").read_text() == ORIGINAL
    assert git(tree, "rev-parse", "HEAD").stdout == git(tree, "rev-parse", BASE_TAG + "^{commit}").stdout


def test_reapplying_keeps_untouched_files_timestamps(tree, tmp_path):
    p1 = make_diff(tree, lambda s: s.replace("line 5\n", "line five\n"), tmp_path / "0001.patch", mail=True)
    readme = tree / "README"
    os.utime(readme, ns=(1_000_000_000, 1_000_000_000))
    apply_series(tree, [p1], log=lambda *_: None)
    apply_series(tree, [], log=lambda *_: None)
    apply_series(tree, [p1], log=lambda *_: None)
    assert readme.stat().st_mtime_ns == 1_000_000_000


@pytest.mark.parametrize("mail", [True, False], ids=["git-am", "patch-p1"])
def test_failure_names_patch_file_and_hunk(tree, tmp_path, mail):
    def edit(s):
        return s.replace("line 3\n", "line three\n").replace("line 30\n", "line thirty\n")

    bad = make_diff(tree, edit, tmp_path / ("0001-two-hunks.patch" if mail else "0001-two-hunks.diff"), mail=mail)
    # the tree moves on under the second hunk only
    (tree / "kernel" / "sched.c").write_text(ORIGINAL.replace("line 29\n", "line 29 changed upstream\n")
                                             .replace("line 30\n", "line 30 changed upstream\n"))
    git(tree, "commit", "--quiet", "-am", "upstream change")
    git(tree, "tag", "-f", BASE_TAG)
    expected_header = next(line for line in bad.read_text().splitlines() if line.startswith("@@ -27"))
    with pytest.raises(PatchError) as exc:
        apply_series(tree, [bad], log=lambda *_: None)
    msg = str(exc.value)
    assert msg.startswith(f"patch {bad}: ")
    assert "hunk #2 of kernel/sched.c" in msg
    assert repr(expected_header) in msg
    assert "hunk #1" not in msg
    # nothing half-applied is left behind
    assert not (tree / "kernel" / "sched.c.rej").exists()
    assert git(tree, "status", "--porcelain").stdout == ""


def test_failure_for_missing_file(tree, tmp_path):
    patch = tmp_path / "new.diff"
    patch.write_text("--- a/drivers/absent.c\n+++ b/drivers/absent.c\n@@ -1 +1 @@\n-x\n+y\n")
    with pytest.raises(PatchError, match="does not exist in the tree"):
        apply_series(tree, [patch], log=lambda *_: None)


def test_hunk_header_counts_per_file(tmp_path):
    p = tmp_path / "x.patch"
    p.write_text("--- a/a.c\n+++ b/a.c\n@@ -1 +1 @@ one\n-a\n+b\n@@ -9 +9 @@ two\n-a\n+b\n"
                 "--- a/b.c\n+++ b/b.c\n@@ -5 +5 @@ three\n-a\n+b\n")
    assert hunk_header(p, "a.c", 2) == "@@ -9 +9 @@ two"
    assert hunk_header(p, "b.c", 1) == "@@ -5 +5 @@ three"
    assert hunk_header(p, "b.c", 2) is None


@pytest.mark.skipif(not Path("/usr/src/linux-source-6.12.tar.xz").exists() and os.environ.get("CI") != "true",
                    reason="Debian's linux-source-6.12 is not installed")
def test_shipped_patches_apply_to_debian_6_12(tmp_path):
    """Each patch under kernels/patches applies to the pristine files of the base tarball."""
    patches = sorted((REPO / "kernels" / "patches").glob("*.patch"))
    assert patches
    touched = {p: [line[6:].strip() for line in p.read_text().splitlines() if line.startswith("+++ b/")]
               for p in patches}
    files = sorted({f for fs in touched.values() for f in fs})
    # one pass over the tarball for all files (xz cannot seek)
    subprocess.run(["tar", "xf", "/usr/src/linux-source-6.12.tar.xz", "-C", str(tmp_path),
                    "--strip-components=1", *[f"linux-source-6.12/{f}" for f in files]], check=True)
    for patch in patches:
        r = subprocess.run(["patch", "-p1", "--dry-run", "--batch", "--forward", "-i", str(patch)],
                           cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, f"{patch.name}: {r.stdout}{r.stderr}"
        assert r.stdout.count("checking file") == len(touched[patch])
