"""A git range as a bisection's patch series: ``--variant V --good REF --bad REF``.

V's kernel spec has a git base (``base: {git: URL, ref: ...}``). The range is the first-parent
line of commits from ``good`` (excluded) to ``bad``: c1..cn. Step k's kernel is V's spec with its
base at ``good`` plus c1..ck exported as patches (each commit's diff against its first parent,
a merge included), then V's own patches: the tree of commit k with V's patches, built in the
one cached tree of ``good`` (incremental, ccache), where a base per commit would check out and
build a whole tree per step. Step 0 is V at ``good`` itself (the same build).

Refs reach git only after ``--end-of-options`` or resolved to full hashes, and are first
checked as a kernel spec's ref is (:func:`lisa_ext.kernel.spec.ref_problem`); git runs in the
cache's mirror of the repository (:func:`lisa_ext.kernel.tree.resolve_ref`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from lisa_ext.bisect.spec import Series
from lisa_ext.errors import UserError
from lisa_ext.kernel.spec import BaseTree, VariantSpec, ref_problem
from lisa_ext.kernel.tree import git, git_mirror, resolve_ref
from lisa_ext.schema import show

__all__ = ["COMMITS_DIR", "Commit", "GitRange", "export_range", "read_range"]

#: where the exported commits lie in the bisection's directory
COMMITS_DIR = "commits"
#: a subject as the page and progress show it
_SUBJECT_MAX = 120
#: git log's options for one commit as a mail ``git am`` applies: none of the user's git config
#: (colour, prefixes, external diffs, text conversion, signatures) may change what is applied
_EXPORT = ("log", "-1", "--format=email", "--diff-merges=first-parent", "--patch", "--stat", "--full-index",
           "--binary", "--no-color", "--no-ext-diff", "--no-textconv", "--no-notes", "--no-mailmap",
           "--no-show-signature", "--src-prefix=a/", "--dst-prefix=b/", "--no-relative")


@dataclass(frozen=True)
class Commit:
    """A commit of the range: its full hash, its first parent, and its subject (one line, bounded)."""

    sha: str
    parent: str
    subject: str
    merge: bool

    @property
    def label(self) -> str:
        return f"{self.sha[:12]} {self.subject}"


@dataclass(frozen=True)
class GitRange:
    """The variant's kernel, the two ends as full hashes, and c1..cn, oldest first."""

    kernel: VariantSpec
    good: str
    bad: str
    commits: tuple[Commit, ...]


def _resolve(kernel: VariantSpec, which: str, ref: str) -> str:
    problem = ref_problem(ref)
    if problem:
        raise UserError(f"--{which}: {problem}")
    try:
        return resolve_ref(kernel.base.location, ref)
    except UserError as exc:
        raise UserError(f"--{which} {show(ref)}: no such commit in {kernel.base.location} ({exc})") from None


def read_range(kernel: VariantSpec, good: str, bad: str) -> GitRange:
    """The first-parent commits good..bad of ``kernel``'s git base; one line when a ref names no
    commit, ``good`` is not an ancestor of ``bad`` on its first-parent line, the range is empty,
    or a commit changes nothing (its step would be its parent's kernel)."""
    if kernel.base.kind != "git":
        raise UserError(f"{kernel.path} ({kernel.name}): its base is {kernel.base.kind} {kernel.base.location}, "
                        "not a git repository; --variant needs a kernel spec with base: {git: URL, ref: REF}")
    good_sha, bad_sha = _resolve(kernel, "good", good), _resolve(kernel, "bad", bad)
    mirror = git_mirror(kernel.base.location)
    if good_sha == bad_sha:
        raise UserError(f"--good {show(good)} and --bad {show(bad)} are the same commit {good_sha[:12]}: "
                        "the range is empty, nothing to bisect")
    if git(mirror, "merge-base", "--is-ancestor", good_sha, bad_sha, check=False).returncode:
        raise UserError(f"--good {show(good)} ({good_sha[:12]}) is not an ancestor of --bad {show(bad)} "
                        f"({bad_sha[:12]}) in {kernel.base.location}: bisect needs good..bad to be a range")
    log = git(mirror, "log", "--first-parent", "--reverse", "--no-color", "--format=%H %P%x09%s",
              "--end-of-options", f"{good_sha}..{bad_sha}").stdout
    commits = []
    for line in log.splitlines():
        hashes, _, subject = line.partition("\t")
        sha, *parents = hashes.split()
        commits.append(Commit(sha, parents[0], " ".join(subject.split())[:_SUBJECT_MAX] or sha[:12],
                              len(parents) > 1))
    if commits[0].parent != good_sha:
        raise UserError(f"--good {show(good)} ({good_sha[:12]}) is not on the first-parent line of --bad "
                        f"{show(bad)}: it was merged in from a side branch; give --good a commit of that line "
                        "(the merge's first parent)")
    changed = git(mirror, "log", "--first-parent", "--diff-merges=first-parent", "--no-color", "--name-only",
                  "--format=%x00%H", "--end-of-options", f"{good_sha}..{bad_sha}").stdout
    empty = [entry.split("\n", 1)[0] for entry in changed.split("\0")[1:] if not entry.strip().count("\n")]
    if empty:
        commit = next(c for c in commits if c.sha == empty[-1].strip())
        raise UserError(f"commit {commit.label} changes nothing against its first parent: its step would build "
                        "its parent's kernel again; bisect a range without it")
    return GitRange(kernel, good_sha, bad_sha, tuple(commits))


def _file_name(k: int, commit: Commit) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", commit.subject).strip("-")[:40].rstrip("-")
    return f"{k:04d}-{commit.sha[:12]}-{slug or 'commit'}.patch"


def export_range(rng: GitRange, directory: Path) -> Series:
    """Export c1..cn as mails into ``directory``/commits (each commit's diff against its first
    parent), and return the series whose step k is the base at good plus the first k of them."""
    out = directory / COMMITS_DIR
    out.mkdir(parents=True, exist_ok=True)
    mirror = git_mirror(rng.kernel.base.location)
    patches = []
    for k, commit in enumerate(rng.commits, 1):
        path = out / _file_name(k, commit)
        tmp = path.with_name(f".{path.name}.tmp")
        git(mirror, *_EXPORT, f"--output={tmp}", "--end-of-options", commit.sha)
        tmp.replace(path)
        patches.append(path)
    at_good = dataclasses.replace(rng.kernel, base=BaseTree("git", rng.kernel.base.location, rng.good), patches=())
    at_bad = dataclasses.replace(at_good, base=BaseTree("git", rng.kernel.base.location, rng.bad))
    return Series(at_good, at_bad, tuple(patches), tuple(c.label for c in rng.commits),
                  after=rng.kernel.patches, commits=tuple(c.sha for c in rng.commits))
