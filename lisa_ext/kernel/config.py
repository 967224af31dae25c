"""Kconfig fragments: what a fragment asks for and whether the final .config has it.

``scripts/kconfig/merge_config.sh`` warns about every symbol whose value
changed, including the ones tinyconfig set and the fragment never mentioned.
Only the fragment's own requests matter to a variant author, so they are
checked here against the final ``.config`` after ``olddefconfig``: a request
that did not take effect (a dependency is missing, another symbol selects it,
the symbol does not exist in this tree) is reported with the fragment's file
and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

__all__ = ["ConfigMiss", "parse_fragment", "read_config", "check_fragments"]

_SET_RE = re.compile(r"^(CONFIG_[A-Za-z0-9_]+)=(.*)$")
_UNSET_RE = re.compile(r"^# (CONFIG_[A-Za-z0-9_]+) is not set$")


@dataclass(frozen=True)
class ConfigMiss:
    """A fragment request the final .config does not satisfy."""

    fragment: Path
    line: int
    symbol: str
    requested: str  # "n" for "is not set"
    actual: str  # "n" when absent or not set

    def __str__(self) -> str:
        return f"{self.fragment}:{self.line}: {self.symbol}={self.requested} requested, final .config has {self.symbol}={self.actual}"


def parse_fragment(path: Path) -> dict[str, tuple[str, int]]:
    """symbol -> (requested value, line); "is not set" is the value "n"."""
    out: dict[str, tuple[str, int]] = {}
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        m = _SET_RE.match(line)
        if m:
            out[m.group(1)] = (m.group(2), lineno)
            continue
        m = _UNSET_RE.match(line)
        if m:
            out[m.group(1)] = ("n", lineno)
    return out


def read_config(path: Path) -> dict[str, str]:
    """symbol -> value of a .config; symbols "not set" map to "n"."""
    return {sym: value for sym, (value, _) in parse_fragment(path).items()}


def check_fragments(fragments: Iterable[Path], final_config: Path) -> list[ConfigMiss]:
    """The last request for each symbol (later fragments win) that did not take effect."""
    wanted: dict[str, tuple[str, Path, int]] = {}
    for frag in fragments:
        for sym, (value, line) in parse_fragment(frag).items():
            wanted[sym] = (value, frag, line)
    final = read_config(final_config)
    misses = []
    for sym, (value, frag, line) in wanted.items():
        actual = final.get(sym, "n")
        if actual != value:
            misses.append(ConfigMiss(frag, line, sym, value, actual))
    return sorted(misses, key=lambda m: (str(m.fragment), m.line))
