"""Applying a variant's patches to a cached tree, with failures that name the hunk.

Mail-formatted patches (``git format-patch`` output, mbox files) go through
``git am``; plain diffs through ``patch -p1`` followed by a commit, so every
patch is one commit on top of the ``lisa-ext-base`` tag. When a patch does not
apply, ``patch --dry-run`` is run on the same file to learn which hunk of
which file failed, and the error quotes that hunk's ``@@`` header.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Sequence

from lisa_ext.errors import UserError
from lisa_ext.kernel.tree import BASE_TAG, git

__all__ = ["PatchError", "is_mail_patch", "hunk_header", "describe_failure", "apply_series", "reset_to_base"]


class PatchError(UserError):
    """A patch of the series does not apply; the message names patch, file and hunk."""

    def __init__(self, patch: Path, detail: str):
        self.patch = patch
        self.detail = detail
        super().__init__(f"patch {patch}: {detail}")


def is_mail_patch(path: Path) -> bool:
    """True for git format-patch / mbox files (they carry From/Subject headers)."""
    head = path.read_text(errors="replace")[:4096]
    return head.startswith("From ") or bool(re.search(r"^Subject: ", head, re.M) and re.search(r"^From: ", head, re.M))


def hunk_header(patch: Path, filename: str, number: int) -> str | None:
    """The ``@@ ... @@`` line of hunk ``number`` (1-based) for ``filename`` in ``patch``."""
    current = None
    count = 0
    for line in patch.read_text(errors="replace").splitlines():
        if line.startswith("+++ "):
            target = line[4:].split("\t")[0].strip()
            current = target[2:] if target.startswith(("a/", "b/")) else target
            count = 0
        elif line.startswith("@@") and current == filename:
            count += 1
            if count == number:
                return line
    return None


def describe_failure(src: Path, patch: Path) -> str:
    """Why ``patch`` does not apply to ``src`` as it is now, hunk by hunk."""
    r = subprocess.run(
        ["patch", "-p1", "--dry-run", "--batch", "--forward", "-i", str(patch)],
        cwd=src, text=True, capture_output=True,
    )
    out = r.stdout + r.stderr
    problems = []
    current = None
    for line in out.splitlines():
        m = re.match(r"checking file (.+)$", line) or re.match(r"patching file (.+)$", line)
        if m:
            current = m.group(1).strip()
            continue
        m = re.match(r"Hunk #(\d+) FAILED at (\d+)", line)
        if m and current:
            n, at = int(m.group(1)), m.group(2)
            header = hunk_header(patch, current, n)
            where = f" {header!r}" if header else ""
            problems.append(f"hunk #{n} of {current}{where} does not apply (expected at line {at})")
            continue
        if "can't find file to patch" in line:
            problems.append("a file it changes does not exist in the tree")
        m = re.match(r"Reversed \(or previously applied\) patch detected!.*", line)
        if m and current:
            problems.append(f"{current}: already applied (or reversed)")
    m = re.search(r"The next patch would (create|delete) the file (\S+),\s*which (already exists|does not exist)", out)
    if m:
        problems.append(f"it would {m.group(1)} {m.group(2)}, which {m.group(3)}")
    if not problems:
        if r.returncode == 0:
            return "git am rejected it although patch -p1 would apply it (check the mail headers)"
        tail = "; ".join(out.strip().splitlines()[-3:])
        return f"does not apply: {tail}"
    return "; ".join(problems)


def reset_to_base(src: Path) -> None:
    """Put the work tree back to the pristine base, touching only files that differ."""
    git(src, "am", "--abort", check=False)
    # refresh first: a file whose timestamp changed but whose content did not
    # must not be rewritten, or make would rebuild everything depending on it
    git(src, "update-index", "-q", "--refresh", check=False)
    git(src, "reset", "--quiet", "--hard", BASE_TAG)
    git(src, "clean", "-fdxq")


def apply_series(src: Path, patches: Sequence[Path], log=print) -> str:
    """Reset to the base and apply ``patches`` in order; return the resulting commit."""
    reset_to_base(src)
    for patch in patches:
        if is_mail_patch(patch):
            r = git(src, "am", "--quiet", "--keep-non-patch", str(patch), check=False)
            if r.returncode:
                git(src, "am", "--abort", check=False)
                raise PatchError(patch, describe_failure(src, patch))
        else:
            dry = subprocess.run(
                ["patch", "-p1", "--dry-run", "--batch", "--forward", "-i", str(patch)],
                cwd=src, text=True, capture_output=True,
            )
            if dry.returncode:
                raise PatchError(patch, describe_failure(src, patch))
            subprocess.run(
                ["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "--quiet", "-i", str(patch)],
                cwd=src, text=True, capture_output=True, check=True,
            )
            git(src, "add", "--all", "--force")
            git(src, "commit", "--quiet", "--no-verify", "-m", f"apply {patch.name}")
        log(f"  applied {patch.name}")
    return git(src, "rev-parse", "HEAD").stdout.strip()
