"""Reading the spec copy (``campaign.yml``, the spec as run) back: whole, for the runner to compare
with the spec it is given, or leniently for its names (the order of variants and workloads, the
``report:`` settings), which is all the store's reader needs of it. The full spec parser is
:mod:`lisa_ext.campaign.spec`, a layer above the store."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lisa_ext.campaign.store.layout import SPEC_COPY
from lisa_ext.errors import SpecError
from lisa_ext.schema import load_yaml

__all__ = ["SpecNames", "read_spec_copy", "spec_names"]


def read_spec_copy(root: Path) -> Any:
    """The spec copy of the campaign directory ``root`` as plain data (``None`` when there is none)."""
    path = root / SPEC_COPY
    if not path.is_file():
        return None
    return json.loads(json.dumps(load_yaml(path, "campaign spec"), default=str))


@dataclass(frozen=True)
class SpecNames:
    """What the store's reader takes from the spec copy."""

    name: str | None = None
    variants: list[str] = field(default_factory=list)
    workloads: list[str] = field(default_factory=list)
    #: the spec's ``report:`` settings (baseline, test, mean, alpha), as stored
    report: dict[str, Any] = field(default_factory=dict)


def spec_names(root: Path) -> SpecNames:
    """Name, variant names, workload names and report settings of the spec copy, leniently:
    the copy is what was run, only its names and their order matter here."""
    spec = root / SPEC_COPY
    if not spec.is_file():
        return SpecNames()
    data = load_yaml(spec, "campaign spec")
    if not isinstance(data, dict):
        raise SpecError(spec, "<top>", "expected a mapping")

    def names(key: str) -> list[str]:
        items = data.get(key) or []
        if not isinstance(items, list):
            raise SpecError(spec, key, "expected a list")
        return [str(i["name"]) for i in items if isinstance(i, dict) and "name" in i]

    name = data.get("name")
    report = data.get("report")
    return SpecNames(str(name) if name else None, names("variants"), names("workloads"),
                     dict(report) if isinstance(report, dict) else {})
