"""The layering lisa_ext's docstring states is the one its imports follow.

`.importlinter` lists the layers (command modules on top, errors at the bottom); import-linter
builds the import graph of the package - function-level imports included - and fails on any
import that runs back up, naming the chain. A new module directly under ``lisa_ext`` or
``lisa_ext.campaign`` fails too until it is given its layer there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import lisa_ext

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _exists(container: str, name: str) -> bool:
    base = ROOT.joinpath(*container.split("."), name)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _layers(contract: str, container: str) -> list[str]:
    """The layers of one contract in .importlinter, optional ones only when their module exists."""
    config = (ROOT / ".importlinter").read_text()
    section = config.split(f"[importlinter:contract:{contract}]", 1)[1].split("[importlinter:", 1)[0]
    lines = section.split("layers =", 1)[1].split("ignore_imports", 1)[0].splitlines()
    layers = []
    for line in filter(None, (line.strip() for line in lines)):
        names = [n.strip() for n in line.split("|")]
        names = [n.strip("()") for n in names if not n.startswith("(") or _exists(container, n.strip("()"))]
        if names:
            layers.append(" | ".join(names))
    return layers


def test_imports_follow_the_layers():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / ".importlinter"), "--no-cache"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_package_docstring_states_the_contract():
    """The layers in lisa_ext/__init__.py's docstring are the contract's, in its order."""
    contract = _layers("packages", "lisa_ext")
    doc = lisa_ext.__doc__ or ""
    diagram = re.search(r"::\n\n(.*?)\n\n", doc, re.S)
    assert diagram, "lisa_ext.__doc__ has no layer diagram (a literal block after '::')"
    stated = [re.sub(r"\s+#.*$", "", line).strip() for line in diagram.group(1).splitlines()]
    assert [s for s in stated if s] == contract


def test_package_docstring_states_the_campaign_layers():
    contract = " > ".join(_layers("campaign", "lisa_ext.campaign"))
    assert contract in " ".join((lisa_ext.__doc__ or "").split())
