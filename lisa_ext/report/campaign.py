"""Gather a campaign directory into a tidy metrics table.

Reads the store the campaign engine writes (``lisa_ext/campaign/store.py``
documents it)::

    <campaign>/campaign.yml
    <campaign>/runs/<variant>/<workload>/<iteration>/result.json [trace.dat]

(a run may hold ``trace.html`` or ``trace.txt`` instead, as Android targets record)

Failed runs are kept aside (they are listed in the report, their partial
metrics are not used); hidden directories are runs still being written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from lisa_ext.campaign.store import RunKey, load_result
from lisa_ext.errors import SpecError, UserError

__all__ = ["Run", "Campaign", "TRACE_FILES", "read_campaign", "metrics_frame"]

#: trace file names a run directory may hold, in order of preference
TRACE_FILES = ("trace.dat", "trace.html", "trace.txt")


@dataclass(frozen=True)
class Run:
    """One finished run of the store."""

    variant: str
    workload: str
    iteration: int
    path: Path
    status: str
    error: str | None
    #: (name, value, unit, lower_is_better)
    metrics: tuple[tuple[str, float, str, bool], ...]

    @property
    def trace(self) -> Path | None:
        """``trace.dat``, or a text / systrace HTML trace (Android targets)."""
        for name in TRACE_FILES:
            path = self.path / name
            if path.is_file():
                return path
        return None

    @property
    def label(self) -> str:
        return f"{self.variant}/{self.workload}/{self.iteration}"


@dataclass
class Campaign:
    name: str
    root: Path
    #: variant and workload names in spec order (campaign.yml), then any others sorted
    variants: list[str]
    workloads: list[str]
    runs: list[Run] = field(default_factory=list)

    @property
    def ok_runs(self) -> list[Run]:
        return [r for r in self.runs if r.status == "ok"]

    @property
    def failed_runs(self) -> list[Run]:
        return [r for r in self.runs if r.status != "ok"]


def _spec_order(root: Path) -> tuple[str | None, list[str], list[str]]:
    spec = root / "campaign.yml"
    if not spec.is_file():
        return None, [], []
    from ruamel.yaml import YAML, YAMLError

    try:
        data = YAML(typ="safe").load(spec.read_text(encoding="utf-8"))
    except YAMLError as exc:
        raise SpecError(spec, "<yaml>", f"not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(spec, "<top>", "expected a mapping")

    def names(key: str) -> list[str]:
        items = data.get(key) or []
        if not isinstance(items, list):
            raise SpecError(spec, key, "expected a list")
        return [str(i["name"]) for i in items if isinstance(i, dict) and "name" in i]

    name = data.get("name")
    return (str(name) if name else None), names("variants"), names("workloads")


def _load_result(path: Path, variant: str, workload: str, iteration: int) -> Run:
    result = load_result(path, RunKey(variant, workload, iteration))
    return Run(variant, workload, iteration, path.parent, result.status, result.error,
               tuple((m.name, m.value, m.unit, m.lower_is_better) for m in result.metrics))


def _ordered(seen: set[str], spec: list[str]) -> list[str]:
    return [n for n in spec if n in seen] + sorted(seen - set(spec))


def read_campaign(root: str | os.PathLike) -> Campaign:
    """Read every finished run of a campaign directory, in a stable order."""
    root = Path(root)
    runs_dir = root / "runs"
    if not runs_dir.is_dir():
        raise UserError(f"{root}: not a campaign directory (no runs/ in it)")
    name, spec_variants, spec_workloads = _spec_order(root)
    runs = []
    for vdir in sorted(p for p in runs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for wdir in sorted(p for p in vdir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            for idir in sorted(p for p in wdir.iterdir() if p.is_dir() and not p.name.startswith(".")):
                if not idir.name.isdigit():
                    raise SpecError(idir, "<directory>", "iteration directories are named 0, 1, ...")
                result = idir / "result.json"
                if not result.is_file():
                    raise SpecError(result, "<file>", "missing: every finished run has a result.json")
                runs.append(_load_result(result, vdir.name, wdir.name, int(idir.name)))
    if not runs:
        raise UserError(f"{root}: the campaign has no finished runs yet")
    variants = _ordered({r.variant for r in runs}, spec_variants)
    workloads = _ordered({r.workload for r in runs}, spec_workloads)
    vpos, wpos = {v: i for i, v in enumerate(variants)}, {w: i for i, w in enumerate(workloads)}
    runs.sort(key=lambda r: (wpos[r.workload], vpos[r.variant], r.iteration))
    return Campaign(name or root.name, root, variants, workloads, runs)


def metrics_frame(campaign: Campaign, extra: pd.DataFrame | None = None) -> pd.DataFrame:
    """The tidy metrics table of the campaign's successful runs, plus ``extra``
    rows (e.g. trace-derived metrics) in the same columns."""
    from lisa_ext.stats.metrics import METRIC_COLUMNS, validate_metrics

    rows = [dict(campaign=campaign.name, variant=r.variant, workload=r.workload, metric=name,
                 unit=unit, lower_is_better=lib, iteration=r.iteration, value=value)
            for r in campaign.ok_runs for name, value, unit, lib in r.metrics]
    frame = pd.DataFrame(rows, columns=list(METRIC_COLUMNS))
    if extra is not None and not extra.empty:
        frame = pd.concat([frame, extra[list(METRIC_COLUMNS)]], ignore_index=True)
    return validate_metrics(frame, campaign.root)
