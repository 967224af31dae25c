"""Base trees: a directory and a git repository at a ref become cached git work trees.

Tiny stand-in trees (a Makefile, a Kconfig, one source file) keep this fast;
the Debian tarball path is the same import with ``tar`` in front and is
exercised by the real build in test_kernel_build.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lisa_ext.kernel.patches import apply_series
from lisa_ext.kernel.spec import BaseTree, load_variant_spec
from lisa_ext.kernel.tree import BASE_TAG, git, prepare_tree, tree_key


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_tree(path: Path, version: str) -> Path:
    (path / "kernel").mkdir(parents=True)
    (path / "Makefile").write_text(f"VERSION = {version}\n")
    (path / "Kconfig").write_text("mainmenu \"fake\"\n")
    (path / "kernel" / "sched.c").write_text("int x;\n")
    (path / ".gitignore").write_text("*.c\n")  # imported anyway: the tree is the tree
    return path


def test_dir_base_is_imported_once_and_keyed_by_content(cache, tmp_path):
    src = fake_tree(tmp_path / "linux", "6")
    base = BaseTree("dir", str(src))
    tree = prepare_tree(base, log=lambda *_: None)
    assert tree.src.parent.parent == cache / "kernels" / "trees"
    assert (tree.src / "kernel" / "sched.c").read_text() == "int x;\n"
    assert git(tree.src, "ls-files").stdout.split() == [".gitignore", "Kconfig", "Makefile", "kernel/sched.c"]
    assert git(tree.src, "rev-parse", BASE_TAG).returncode == 0
    logged = []
    assert prepare_tree(base, log=logged.append) == tree and logged == []
    (src / "kernel" / "sched.c").write_text("int y;\n")
    assert tree_key(base) != tree.key


def test_git_base_resolves_ref_and_checks_it_out(cache, tmp_path):
    repo = fake_tree(tmp_path / "repo", "6")
    git(repo, "init", "--quiet")
    git(repo, "add", "--all", "--force")
    git(repo, "commit", "--quiet", "-m", "v6.12")
    git(repo, "tag", "v6.12")
    (repo / "Makefile").write_text("VERSION = 7\n")
    git(repo, "commit", "--quiet", "-am", "later")
    spec_file = tmp_path / "v.yml"
    (tmp_path / "f.config").write_text("CONFIG_SMP=y\n")
    spec_file.write_text(f"name: v\nbase: {{git: {repo}, ref: v6.12}}\nconfigs: [f.config]\n")
    spec = load_variant_spec(spec_file)
    tree = prepare_tree(spec.base, log=lambda *_: None)
    tagged = git(repo, "rev-parse", "v6.12^{commit}").stdout.strip()
    assert tree.key == f"git-{tagged[:16]}"
    assert (tree.src / "Makefile").read_text() == "VERSION = 6\n"
    patch = tmp_path / "p.diff"
    patch.write_text("--- a/kernel/sched.c\n+++ b/kernel/sched.c\n@@ -1 +1 @@\n-int x;\n+int z;\n")
    apply_series(tree.src, [patch], log=lambda *_: None)
    assert (tree.src / "kernel" / "sched.c").read_text() == "int z;\n"


def test_unknown_git_ref_is_a_user_error(cache, tmp_path):
    from lisa_ext.errors import UserError

    repo = fake_tree(tmp_path / "repo", "6")
    subprocess.run(["git", "init", "--quiet", str(repo)], check=True)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "c")
    with pytest.raises(UserError, match="ref 'v9.9' not found"):
        prepare_tree(BaseTree("git", str(repo), "v9.9"), log=lambda *_: None)
