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


def test_imports_follow_the_layers():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / ".importlinter"), "--no-cache"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_package_docstring_states_the_contract():
    """The layers in lisa_ext/__init__.py's docstring are the contract's, in its order."""
    config = (ROOT / ".importlinter").read_text()
    section = config.split("[importlinter:contract:packages]", 1)[1].split("[importlinter:", 1)[0]
    layers = section.split("layers =", 1)[1].split("ignore_imports", 1)[0]
    contract = [line.strip() for line in layers.splitlines() if line.strip()]
    doc = lisa_ext.__doc__ or ""
    diagram = re.search(r"::\n\n(.*?)\n\n", doc, re.S)
    assert diagram, "lisa_ext.__doc__ has no layer diagram (a literal block after '::')"
    stated = [re.sub(r"\s+#.*$", "", line).strip() for line in diagram.group(1).splitlines()]
    assert [s for s in stated if s] == contract


def test_package_docstring_states_the_campaign_layers():
    config = (ROOT / ".importlinter").read_text()
    section = config.split("[importlinter:contract:campaign]", 1)[1].split("[importlinter:", 1)[0]
    layers = section.split("layers =", 1)[1].split("ignore_imports", 1)[0]
    contract = " > ".join(line.strip() for line in layers.splitlines() if line.strip())
    assert contract in " ".join((lisa_ext.__doc__ or "").split())
