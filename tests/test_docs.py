"""The README and docs/ stay true to the repository they describe.

README.md is the entry point (CI's `.ci/run` runs the test command it states) and docs/ holds the
reference. These tests catch the usual rot: a link or anchor that no longer resolves, a documented
`lisa-ext` command or option that the CLI does not have, a repository path that was moved.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from lisa_ext.campaign.spec import load_spec as load_campaign_spec
from lisa_ext.cli import build_parser
from lisa_ext.kernel.spec import load_variant_spec

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: pages written on other branches of the same change; linked before they are merged
PENDING_PAGES: set[str] = set()

#: repository folders whose paths the docs quote in backticks (not scripts/: the kernel tree has one)
REPO_DIRS = ("lisa_ext", "tests", "bench", "notebooks", "campaigns", "kernels", "target-configs")

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def _page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def _prose(page: Path) -> str:
    return re.sub(r"```.*?```", "", page.read_text(), flags=re.S)


def _shell_lines(page: Path) -> list[str]:
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", page.read_text(), flags=re.S):
        lines += [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return lines


def _documented_commands(page: Path) -> list[str]:
    commands = [line for line in _shell_lines(page) if line.startswith("lisa-ext")]
    commands += [span for span in _CODE_SPAN.findall(_prose(page)) if span.startswith("lisa-ext ")]
    return commands


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_readme_states_the_ci_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test:", makefile, flags=re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_readme_is_an_entry_point():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for heading in ("How it fits together", "Repository layout", "The five studies", "Documentation"):
        assert f"## {heading}" in readme


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_links_resolve(page: Path):
    problems = []
    for target in _LINK.findall(_prose(page)):
        if re.match(r"^[a-z]+:", target):
            continue  # external
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
        if not dest.exists():
            if rel not in PENDING_PAGES:
                problems.append(f"{target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            problems.append(f"{target}: no heading with anchor #{anchor} in {rel}")
    assert not problems, f"{_page_id(page)}: " + "; ".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_quoted_repository_paths_exist(page: Path):
    pattern = re.compile(rf"^(?:{'|'.join(map(re.escape, REPO_DIRS))})/[\w./-]*$")
    missing = [span for span in _CODE_SPAN.findall(page.read_text())
               if pattern.match(span) and not (ROOT / span).exists()]
    assert not missing, f"{_page_id(page)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_documented_commands_exist(page: Path):
    problems = []
    for command in _documented_commands(page):
        words = command.split()[1:]
        parser = build_parser(words)
        chain = ["lisa-ext"]
        while words and words[0] in _subparsers(parser):
            chain.append(words[0])
            parser = _subparsers(parser)[words.pop(0)]
        takes_rest = any(a.nargs == argparse.REMAINDER for a in parser._actions)
        known = {opt for action in parser._actions for opt in action.option_strings}
        for word in words:
            if takes_rest and not word.startswith("-"):
                break  # e.g. `vboard ssh uname -a`: the rest is the remote command
            for option in _OPTION.findall(word.split("=", 1)[0]):
                if option not in known:
                    problems.append(f"`{command}`: {' '.join(chain)} has no option {option}")
    assert not problems, f"{_page_id(page)}: " + "; ".join(problems)


def _yaml_blocks(page: Path) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", page.read_text(), flags=re.S)


def test_campaign_spec_example_is_valid(tmp_path: Path):
    blocks = _yaml_blocks(ROOT / "docs" / "campaigns.md")
    assert len(blocks) == 1
    (tmp_path / "target-configs").symlink_to(ROOT / "target-configs")
    spec_path = tmp_path / "campaigns" / "example.yml"
    spec_path.parent.mkdir()
    spec_path.write_text(blocks[0])
    spec = load_campaign_spec(spec_path)
    assert [v.name for v in spec.variants] == ["cache", "system"]


def test_kernel_variant_examples_are_valid(tmp_path: Path):
    blocks = _yaml_blocks(ROOT / "docs" / "kernels.md")
    assert len(blocks) == 2
    for shared in ("patches", "configs"):
        (tmp_path / shared).symlink_to(ROOT / "kernels" / shared)
    spec_path = tmp_path / "study" / "example.yml"
    spec_path.parent.mkdir()
    spec_path.write_text(blocks[0])
    assert load_variant_spec(spec_path).name == "no-iowait-boost"
    spec_path.write_text(blocks[1])
    assert load_variant_spec(spec_path, arch="arm64").configs[0].name == "vboard-arm64.config"
