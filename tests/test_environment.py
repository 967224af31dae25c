"""The pinned environment: conda users get the same pins as the virtualenv."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _pins(lines):
    return {m.group(1).lower(): m.group(2) for m in map(re.compile(r"^\s*(?:- )?([A-Za-z0-9_.\-]+)==(\S+)\s*$").match, lines) if m}


def test_environment_yml_matches_constraints():
    constraints = _pins((ROOT / "constraints.txt").read_text().splitlines())
    environment = _pins((ROOT / "environment.yml").read_text().splitlines())
    assert constraints, "constraints.txt has no pins"
    assert environment == constraints


def test_lisa_is_pinned_to_3_1_0():
    assert _pins((ROOT / "constraints.txt").read_text().splitlines())["lisa-linux"] == "3.1.0"
