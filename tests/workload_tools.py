"""Shared by the workload tests: schbench and ebizzy built from ../shared/src and installed on a target."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lisa_ext.campaign.tools import build_tool, install_tool

SHARED_SRC = Path(__file__).resolve().parents[1].parent / "shared" / "src"
SOURCES = {"schbench": SHARED_SRC / "schbench", "ebizzy": SHARED_SRC / "sleeping-ebizzy"}


def require_sources() -> None:
    missing = [str(p) for p in SOURCES.values() if not p.is_dir()]
    if missing:
        reason = f"workload sources not found: {', '.join(missing)}"
        pytest.skip(reason)


def install_built_tools(target) -> dict[str, str]:
    """Build each tool from its source tree (cached) and push it to ``target``; name -> path there."""
    require_sources()
    return {name: install_tool(target, build_tool(name, src)) for name, src in SOURCES.items()}
