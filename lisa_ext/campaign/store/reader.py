"""The one reader of a campaign directory.

:func:`read_campaign` gives typed :class:`Run` records (each with its :class:`RunMeta`) in spec
order, and :func:`metrics_table` the validated tidy metrics table; :func:`traced_runs` the
successful traced runs every per-trace loop goes over. The report, the studies, the quickstart
notebook and ``campaign status`` all read through it, so they agree on which runs count: failed
runs are left out of the metrics unless asked for (``include_failed=True``) and listed apart.
These readers are strict (a damaged run is an error naming its file); :func:`scan_campaign` is
the lenient one (``campaign status``, ``--resume``): damaged runs are listed apart.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import pandas as pd

from lisa_ext.campaign.store.files import read_json_object
from lisa_ext.campaign.store.layout import RUN_META, RUN_RESULT, RUNS_DIR, TRACE_FILES
from lisa_ext.campaign.store.metrics import METRICS_COLUMNS, validate_metrics
from lisa_ext.campaign.store.records import RUN_STATUSES, Metric, RunKey, RunResult
from lisa_ext.campaign.store.spec_copy import spec_names
from lisa_ext.errors import SpecError, UserError

__all__ = [
    "Campaign", "DamagedRun", "Run", "RunMeta", "StoreScan", "board_timings", "has_runs", "load_result",
    "metrics_table", "read_campaign", "read_results", "run_trace", "scan_campaign", "traced_runs",
]


def load_result(path: Path, expected: RunKey | None = None) -> RunResult:
    """Read and check one ``result.json``: a bad file is a SpecError naming it and the key.

    ``expected`` is the run its directory names; the file must agree with it.
    """
    data = read_json_object(path)
    if expected is not None:
        for key in ("variant", "workload", "iteration"):
            if data.get(key) != getattr(expected, key):
                raise SpecError(path, key, f"is {data.get(key)!r} but the directory says "
                                f"{getattr(expected, key)!r}")
    status = data.get("status")
    if status not in RUN_STATUSES:
        raise SpecError(path, "status", f"expected one of {', '.join(RUN_STATUSES)}, got {status!r}")
    raw = data.get("metrics") or []
    if not isinstance(raw, list):
        raise SpecError(path, "metrics", "expected a list")
    metrics = []
    for i, m in enumerate(raw):
        where = f"metrics[{i}]"
        if not isinstance(m, dict):
            raise SpecError(path, where, "expected an object with name, value, unit, lower_is_better")
        for key, kind in (("name", str), ("unit", str), ("lower_is_better", bool)):
            if not isinstance(m.get(key), kind):
                raise SpecError(path, f"{where}.{key}", f"expected a {kind.__name__}, got {m.get(key)!r}")
        value = m.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                (isinstance(value, float) and math.isinf(value)):
            raise SpecError(path, f"{where}.value", f"expected a finite number, got {value!r}")
        metrics.append(Metric(m["name"], float(value), m["unit"], m["lower_is_better"]))
    error = data.get("error")
    return RunResult(str(data.get("campaign", "")), str(data.get("variant")), str(data.get("workload")),
                     int(data.get("iteration", -1)), status, None if error is None else str(error),
                     metrics)


@dataclass(frozen=True)
class DamagedRun:
    """A directory under ``runs/`` that is not a readable finished run (a truncated or
    hand-edited ``result.json``, a stray directory): listed by ``campaign status``, moved
    aside by :meth:`~lisa_ext.campaign.store.writer.CampaignStore.quarantine`."""

    path: Path
    #: the run its directory names, when it names one
    key: RunKey | None
    problem: str

    @property
    def label(self) -> str:
        return str(self.key) if self.key is not None else str(self.path)


@dataclass
class StoreScan:
    """What :func:`scan_campaign` found."""

    #: readable finished runs, by key
    runs: list["Run"]
    damaged: list[DamagedRun]

    def results(self) -> dict[RunKey, RunResult]:
        return {r.key: r.result for r in self.runs}


class RunMeta(Mapping[str, Any]):
    """A run's ``meta.json``: provenance the runner recorded.

    A read-only mapping of the whole file, so keys this class does not know
    (``"energy"``, ``"cpu_util"``, ``"trace_lost_events"``, ... added by later
    stages) are kept and reachable as ``meta["energy"]`` / ``meta.get(...)``;
    the properties type the keys every reader uses. A run without
    ``meta.json`` (older stores) has an empty one.
    """

    def __init__(self, data: Mapping[str, Any], path: Path | None = None):
        self._data = dict(data)
        self.path = path

    @classmethod
    def read(cls, run_dir: Path) -> "RunMeta":
        """The ``meta.json`` of the run directory ``run_dir`` (a bad file is a SpecError naming it)."""
        path = Path(run_dir) / RUN_META
        if not path.is_file():
            return cls({}, path)
        return cls(read_json_object(path), path)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def _mapping(self, key: str) -> dict[str, Any]:
        value = self._data.get(key)
        return value if isinstance(value, dict) else {}

    @property
    def kernel_release(self) -> str | None:
        """``uname -r`` of the target during the run."""
        return self._mapping("kernel").get("release")

    @property
    def knobs(self) -> dict[str, dict[str, Any]]:
        """knob path -> what was written and read back (``read_back``)."""
        return self._mapping("knobs")

    @property
    def duration_s(self) -> float | None:
        return self._data.get("duration_s")

    @property
    def idle_states(self) -> dict[int, str]:
        """Idle state index -> the kernel's name (``platform.idle-states``); empty when the
        run did not record them."""
        return {i: str(name) for i, name in enumerate(self._mapping("platform").get("idle-states") or [])}


def run_trace(run_dir: Path) -> Path | None:
    """The trace a run directory holds: ``trace.dat``, or a text / systrace HTML trace (Android
    targets); ``None`` when the run was not traced."""
    for name in TRACE_FILES:
        path = Path(run_dir) / name
        if path.is_file():
            return path
    return None


@dataclass(frozen=True)
class Run:
    """One finished run of the store."""

    variant: str
    workload: str
    iteration: int
    path: Path
    status: str
    error: str | None
    metrics: tuple[Metric, ...]
    campaign: str = ""

    @property
    def key(self) -> RunKey:
        return RunKey(self.variant, self.workload, self.iteration)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def label(self) -> str:
        return f"{self.variant}/{self.workload}/{self.iteration}"

    @property
    def result(self) -> RunResult:
        """The run's ``result.json``."""
        return RunResult(self.campaign, self.variant, self.workload, self.iteration, self.status,
                         self.error, list(self.metrics))

    @property
    def trace(self) -> Path | None:
        """``trace.dat``, or a text / systrace HTML trace (Android targets)."""
        return run_trace(self.path)

    @cached_property
    def meta(self) -> RunMeta:
        """The run's ``meta.json`` (read on first use)."""
        return RunMeta.read(self.path)


@dataclass
class Campaign:
    """Every finished run of a campaign directory, in spec order."""

    name: str
    root: Path
    #: variant and workload names in spec order (campaign.yml), then any others sorted
    variants: list[str]
    workloads: list[str]
    runs: list[Run] = field(default_factory=list)
    #: the spec's ``report:`` settings (baseline, test, mean, alpha), as stored
    report_settings: dict[str, Any] = field(default_factory=dict)

    @property
    def ok_runs(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

    @property
    def failed_runs(self) -> list[Run]:
        return [r for r in self.runs if not r.ok]

    def traced_runs(self, variant: str | None = None, workload: str | None = None,
                    iteration: int | None = None) -> list[Run]:
        """The successful runs with a trace, in the campaign's order, optionally only those of
        one variant, workload or iteration: the runs every per-trace loop (analyses, report,
        studies) goes over."""
        return [r for r in self.ok_runs if r.trace is not None
                and variant in (None, r.variant) and workload in (None, r.workload)
                and iteration in (None, r.iteration)]

    def metrics_table(self, include_failed: bool = False) -> pd.DataFrame:
        """The validated tidy metrics table of these runs (see :func:`metrics_table`)."""
        rows = [(self.name, r.variant, r.workload, m.name, m.unit, m.lower_is_better,
                 r.iteration, m.value)
                for r in (self.runs if include_failed else self.ok_runs) for m in r.metrics]
        return validate_metrics(pd.DataFrame(rows, columns=METRICS_COLUMNS), self.root)


def _ordered(seen: set[str], spec: list[str]) -> list[str]:
    return [n for n in spec if n in seen] + sorted(seen - set(spec))


def _visible_dirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))


def scan_campaign(root: Path) -> StoreScan:
    """Every finished run of the campaign directory ``root``, and apart the directories that are
    not readable runs (lenient: for ``campaign status`` and ``--resume``)."""
    if not (root / RUNS_DIR).is_dir():
        return StoreScan([], [])
    damaged: list[DamagedRun] = []
    runs = _read_runs(root, damaged)
    return StoreScan(sorted(runs, key=lambda r: r.key), damaged)


def read_results(root: Path) -> dict[RunKey, RunResult]:
    """The result of every finished run (a damaged run is a SpecError naming it)."""
    if not (root / RUNS_DIR).is_dir():
        return {}
    return {r.key: r.result for r in _read_runs(root, None)}


def has_runs(root: Path) -> bool:
    """Whether any run was published in the campaign directory ``root`` (a run's scratch
    directory, left by an interrupted runner, is not one; a damaged run is)."""
    return (root / RUNS_DIR).is_dir() and any((root / RUNS_DIR).glob("*/*/[0-9]*"))


def board_timings(root: Path) -> set[str]:
    """The board timings the published runs of ``root`` recorded (``meta.json``'s
    ``board_timing``); runs on targets without the emulation modules record none."""
    timings = set()
    for meta in (root / RUNS_DIR).glob(f"*/*/[0-9]*/{RUN_META}"):
        try:
            timing = read_json_object(meta).get("board_timing")
        except SpecError:
            continue  # a damaged run: the scan quarantines it
        if isinstance(timing, str):
            timings.add(timing)
    return timings


def _read_runs(root: Path, damaged: list[DamagedRun] | None) -> list[Run]:
    """The runs under ``root/runs``. A directory that is not a readable run is a SpecError
    naming it, or, given a ``damaged`` list, added to that list."""
    runs = []
    for vdir in _visible_dirs(root / RUNS_DIR):
        for wdir in _visible_dirs(vdir):
            for idir in _visible_dirs(wdir):
                key = RunKey(vdir.name, wdir.name, int(idir.name)) if idir.name.isdigit() else None
                try:
                    if key is None:
                        raise SpecError(idir, "<directory>", "iteration directories are named 0, 1, ...")
                    path = idir / RUN_RESULT
                    if not path.is_file():
                        raise SpecError(path, "<file>", "missing: every finished run has a result.json")
                    result = load_result(path, key)
                except SpecError as exc:
                    if damaged is None:
                        raise SpecError(exc.path, exc.key, f"{exc.problem} (`lisa-ext campaign status "
                                        f"--repair {root}` moves the damaged run aside)") from None
                    damaged.append(DamagedRun(idir, key, str(exc)))
                    continue
                runs.append(Run(key.variant, key.workload, key.iteration, idir, result.status,
                                result.error, tuple(result.metrics), result.campaign))
    return runs


def read_campaign(root: str | os.PathLike, *, allow_empty: bool = False) -> Campaign:
    """Read every finished run of a campaign directory, in a stable order:
    workloads, then variants, in spec order, then iterations.

    :raises UserError: ``root`` has no ``runs/`` (or, unless ``allow_empty``, no run yet).
    :raises SpecError: a stray directory or a bad ``result.json``, named.
    """
    root = Path(root)
    if not (root / RUNS_DIR).is_dir():
        raise UserError(f"{root}: not a campaign directory (no runs/ in it)")
    spec = spec_names(root)
    runs = _read_runs(root, None)
    if not runs and not allow_empty:
        raise UserError(f"{root}: the campaign has no finished runs yet")
    variants = _ordered({r.variant for r in runs}, spec.variants)
    workloads = _ordered({r.workload for r in runs}, spec.workloads)
    vpos, wpos = {v: i for i, v in enumerate(variants)}, {w: i for i, w in enumerate(workloads)}
    runs.sort(key=lambda r: (wpos[r.workload], vpos[r.variant], r.iteration))
    return Campaign(spec.name or root.name, root, variants, workloads, runs, spec.report)


def traced_runs(campaign_dir: str | os.PathLike, variant: str | None = None,
                workload: str | None = None, iteration: int | None = None) -> tuple[Campaign, list[Run]]:
    """The campaign and its traced runs (:meth:`Campaign.traced_runs`), the one way every
    per-trace loop (``lisa-ext analyse``, the report, the studies) picks its runs.

    :raises UserError: no successful run (matching the filters) has a trace.
    """
    campaign = read_campaign(campaign_dir)
    runs = campaign.traced_runs(variant, workload, iteration)
    if not runs:
        filters = ", ".join(f"{k}={v}" for k, v in (("variant", variant), ("workload", workload),
                                                      ("iteration", iteration)) if v is not None)
        raise UserError(f"{campaign.root}: no successful run" + (f" matching {filters}" if filters else "")
                        + " has a trace")
    return campaign, runs


def metrics_table(campaign_dirs: str | os.PathLike | Iterable[str | os.PathLike],
                  include_failed: bool = False) -> pd.DataFrame:
    """The tidy metrics table of one or more campaign directories, validated
    (:func:`validate_metrics`: exact dtypes, one unit and direction per metric).

    Columns :data:`METRICS_COLUMNS`, one row per (run, metric), runs in the
    order of :func:`read_campaign`. Failed runs are left out unless
    ``include_failed`` (their partial metrics then count like any other).
    """
    if isinstance(campaign_dirs, (str, os.PathLike)):
        campaign_dirs = [campaign_dirs]
    frames = [read_campaign(d, allow_empty=True).metrics_table(include_failed) for d in campaign_dirs]
    if not frames:
        return validate_metrics(pd.DataFrame(columns=METRICS_COLUMNS))
    return validate_metrics(pd.concat(frames, ignore_index=True),
                            ", ".join(os.fspath(d) for d in campaign_dirs))
