"""The campaign store: where runs live on disk and how they are read back.

Layout (the contract every later stage reads)::

    data/<campaign>/campaign.yml                      the spec as run
    data/<campaign>/runs/<variant>/<workload>/<i>/    one run, i = 0, 1, ...
        result.json   {campaign, variant, workload, iteration, status, error, metrics}
        meta.json     provenance: kernel, knobs read back, tool versions, timestamps
        trace.dat     when traced
        ...           the workload's raw output

A run directory is written under a hidden temporary name next to its final
place and renamed when complete, so a directory named by its iteration number
is always a finished run (status "ok" or "failed").

This module is also the one reader of the store: :func:`read_campaign` gives
typed :class:`Run` records (each with its :class:`RunMeta`) in spec order, and
:func:`metrics_table` the validated tidy metrics table. The report, the
studies, the quickstart notebook and ``campaign status`` all read through it,
so they agree on which runs count: failed runs are left out of the metrics
unless asked for (``include_failed=True``) and listed apart.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import pandas as pd

from lisa_ext.schema import load_yaml
from lisa_ext.errors import SpecError, UserError

__all__ = [
    "JOURNAL_NAME", "METRICS_COLUMNS", "METRIC_DTYPES", "RUN_STATUSES", "TMP_PREFIX", "TRACE_FILES",
    "Campaign", "CampaignStore", "Metric", "Run", "RunKey", "RunMeta", "RunResult",
    "load_result", "metrics_table", "read_campaign", "read_json_object", "validate_metrics",
]

TMP_PREFIX = ".tmp-"
#: the runner's journal in a campaign directory: what a killed run left behind (the runner
#: writes it, status and recovery read it)
JOURNAL_NAME = ".runner-journal.json"
RUN_STATUSES = ("ok", "failed")
#: column -> pandas dtype of the tidy metrics table (one row per run and metric)
METRIC_DTYPES: dict[str, str] = {
    "campaign": "string",
    "variant": "string",
    "workload": "string",
    "metric": "string",
    "unit": "string",
    "lower_is_better": "bool",
    "iteration": "int64",
    "value": "float64",
}
METRICS_COLUMNS = list(METRIC_DTYPES)
#: trace file names a run directory may hold, in order of preference
#: (Android targets record systrace HTML or text)
TRACE_FILES = ("trace.dat", "trace.html", "trace.txt")


@dataclass(frozen=True)
class Metric:
    """One figure a workload reports for one run."""

    name: str
    value: float
    unit: str
    lower_is_better: bool

    def to_json(self) -> dict:
        return {"name": self.name, "value": float(self.value), "unit": self.unit,
                "lower_is_better": bool(self.lower_is_better)}

    def __iter__(self) -> Iterator[Any]:
        """``name, value, unit, lower_is_better = metric`` (the report's tuples)."""
        return iter((self.name, self.value, self.unit, self.lower_is_better))


@dataclass(frozen=True, order=True)
class RunKey:
    variant: str
    workload: str
    iteration: int

    def __str__(self) -> str:
        return f"{self.variant}/{self.workload}/{self.iteration}"


@dataclass
class RunResult:
    campaign: str
    variant: str
    workload: str
    iteration: int
    status: str
    error: str | None
    metrics: list[Metric]

    @property
    def key(self) -> RunKey:
        return RunKey(self.variant, self.workload, self.iteration)

    def to_json(self) -> dict:
        d = asdict(self)
        d["metrics"] = [m.to_json() for m in self.metrics]
        return d


def read_json_object(path: Path) -> dict:
    """A JSON object from the store (result.json, meta.json): a bad file is a SpecError naming it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(path, "<file>", f"cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(path, f"line {exc.lineno} column {exc.colno}",
                        f"not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise SpecError(path, "<top>", "expected a JSON object")
    return data


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


def write_json(path: Path, data: Any) -> None:
    """Write JSON via a temporary file and rename, so a reader never sees half a file."""
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CampaignStore:
    """One campaign directory: ``data/<campaign>/``."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    @property
    def spec_copy(self) -> Path:
        return self.root / "campaign.yml"

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def run_dir(self, key: RunKey) -> Path:
        return self.runs_dir / key.variant / key.workload / str(key.iteration)

    def new_tmp_run_dir(self, key: RunKey) -> Path:
        """A fresh, empty temporary directory next to where ``key``'s run will live."""
        parent = self.run_dir(key).parent
        parent.mkdir(parents=True, exist_ok=True)
        tmp = parent / f"{TMP_PREFIX}{key.iteration}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        return tmp

    def commit_run(self, tmp: Path, key: RunKey) -> Path:
        """Atomically publish a finished run: rename its temporary directory."""
        final = self.run_dir(key)
        for f in tmp.iterdir():
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        _fsync_dir(tmp)
        os.rename(tmp, final)
        _fsync_dir(final.parent)
        return final

    def remove_partial_runs(self, *, ignore_errors: bool = False) -> list[Path]:
        """Delete temporary run directories left by an interrupted runner."""
        removed = []
        if self.runs_dir.is_dir():
            for tmp in sorted(self.runs_dir.glob(f"*/*/{TMP_PREFIX}*")):
                shutil.rmtree(tmp, ignore_errors=ignore_errors)
                removed.append(tmp)
        return removed

    def iter_results(self) -> Iterator[tuple[Path, RunResult]]:
        """Every finished run, in (variant, workload, iteration) order (read by
        :func:`read_campaign`, the one walker of the store)."""
        if not self.runs_dir.is_dir():
            return
        runs = read_campaign(self.root, allow_empty=True).runs
        for run in sorted(runs, key=lambda r: r.key):
            yield run.path, RunResult(run.campaign, run.variant, run.workload, run.iteration,
                                      run.status, run.error, list(run.metrics))

    def results(self) -> dict[RunKey, RunResult]:
        return {r.key: r for _path, r in self.iter_results()}


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
    def read(cls, path: Path) -> "RunMeta":
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
    def trace(self) -> Path | None:
        """``trace.dat``, or a text / systrace HTML trace (Android targets)."""
        for name in TRACE_FILES:
            path = self.path / name
            if path.is_file():
                return path
        return None

    @cached_property
    def meta(self) -> RunMeta:
        """The run's ``meta.json`` (read on first use)."""
        return RunMeta.read(self.path / "meta.json")


@dataclass
class Campaign:
    """Every finished run of a campaign directory, in spec order."""

    name: str
    root: Path
    #: variant and workload names in spec order (campaign.yml), then any others sorted
    variants: list[str]
    workloads: list[str]
    runs: list[Run] = field(default_factory=list)

    @property
    def ok_runs(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

    @property
    def failed_runs(self) -> list[Run]:
        return [r for r in self.runs if not r.ok]

    def metrics_table(self, include_failed: bool = False) -> pd.DataFrame:
        """The validated tidy metrics table of these runs (see :func:`metrics_table`)."""
        rows = [(self.name, r.variant, r.workload, m.name, m.unit, m.lower_is_better,
                 r.iteration, m.value)
                for r in (self.runs if include_failed else self.ok_runs) for m in r.metrics]
        return validate_metrics(pd.DataFrame(rows, columns=METRICS_COLUMNS), self.root)


def _spec_names(root: Path) -> tuple[str | None, list[str], list[str]]:
    """Name, variant names and workload names of the spec copy, leniently:
    the copy is what was run, only its names and their order matter here."""
    spec = root / "campaign.yml"
    if not spec.is_file():
        return None, [], []
    data = load_yaml(spec, "campaign spec")
    if not isinstance(data, dict):
        raise SpecError(spec, "<top>", "expected a mapping")

    def names(key: str) -> list[str]:
        items = data.get(key) or []
        if not isinstance(items, list):
            raise SpecError(spec, key, "expected a list")
        return [str(i["name"]) for i in items if isinstance(i, dict) and "name" in i]

    name = data.get("name")
    return (str(name) if name else None), names("variants"), names("workloads")


def _ordered(seen: set[str], spec: list[str]) -> list[str]:
    return [n for n in spec if n in seen] + sorted(seen - set(spec))


def _visible_dirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))


def read_campaign(root: str | os.PathLike, *, allow_empty: bool = False) -> Campaign:
    """Read every finished run of a campaign directory, in a stable order:
    workloads, then variants, in spec order, then iterations.

    :raises UserError: ``root`` has no ``runs/`` (or, unless ``allow_empty``, no run yet).
    :raises SpecError: a stray directory or a bad ``result.json``, named.
    """
    root = Path(root)
    runs_dir = root / "runs"
    if not runs_dir.is_dir():
        raise UserError(f"{root}: not a campaign directory (no runs/ in it)")
    name, spec_variants, spec_workloads = _spec_names(root)
    runs = []
    for vdir in _visible_dirs(runs_dir):
        for wdir in _visible_dirs(vdir):
            for idir in _visible_dirs(wdir):
                if not idir.name.isdigit():
                    raise SpecError(idir, "<directory>", "iteration directories are named 0, 1, ...")
                path = idir / "result.json"
                if not path.is_file():
                    raise SpecError(path, "<file>", "missing: every finished run has a result.json")
                result = load_result(path, RunKey(vdir.name, wdir.name, int(idir.name)))
                runs.append(Run(vdir.name, wdir.name, int(idir.name), idir, result.status,
                                result.error, tuple(result.metrics), result.campaign))
    if not runs and not allow_empty:
        raise UserError(f"{root}: the campaign has no finished runs yet")
    variants = _ordered({r.variant for r in runs}, spec_variants)
    workloads = _ordered({r.workload for r in runs}, spec_workloads)
    vpos, wpos = {v: i for i, v in enumerate(variants)}, {w: i for i, w in enumerate(workloads)}
    runs.sort(key=lambda r: (wpos[r.workload], vpos[r.variant], r.iteration))
    return Campaign(name or root.name, root, variants, workloads, runs)


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


_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}


def _as_bool(series: pd.Series, source: str) -> pd.Series:
    if series.dtype == bool:
        return series
    text = series.astype("string").str.strip().str.lower()
    bad = ~(text.isin(_TRUE) | text.isin(_FALSE))
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        raise SpecError(source, f"row {row + 1}: lower_is_better",
                        f"expected true/false, got {series.iloc[row]!r}")
    return text.isin(_TRUE)


def validate_metrics(df: pd.DataFrame, source: str | os.PathLike = "<metrics>") -> pd.DataFrame:
    """Check and normalise a tidy metrics table; returns a new frame with exact dtypes.

    Raises :class:`~lisa_ext.errors.SpecError` naming the first missing column
    or the first row whose value cannot be read.
    """
    source = os.fspath(source)
    missing = [c for c in METRIC_DTYPES if c not in df.columns]
    if missing:
        raise SpecError(source, "columns",
                        f"missing {', '.join(missing)}; a metrics table needs "
                        f"{', '.join(METRIC_DTYPES)}")
    out = df.loc[:, list(METRIC_DTYPES)].copy()
    out["lower_is_better"] = _as_bool(out["lower_is_better"], source)
    for col in ("iteration", "value"):
        num = pd.to_numeric(out[col], errors="coerce")
        bad = num.isna() & out[col].notna() if col == "value" else num.isna()
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise SpecError(source, f"row {row + 1}: {col}",
                            f"expected a number, got {out[col].iloc[row]!r}")
        out[col] = num
    out["iteration"] = out["iteration"].astype("int64")
    out["value"] = out["value"].astype("float64")
    for col in ("campaign", "variant", "workload", "metric", "unit"):
        out[col] = out[col].astype("string").fillna("")
    for col in ("variant", "workload", "metric"):
        empty = out[col] == ""
        if empty.any():
            row = int(empty.to_numpy().nonzero()[0][0])
            raise SpecError(source, f"row {row + 1}: {col}", "must not be empty")
    # one metric has one unit and one direction, or its comparison means nothing
    for col in ("unit", "lower_is_better"):
        per_metric = out.groupby(["workload", "metric"], sort=False)[col].nunique()
        clash = per_metric[per_metric > 1]
        if not clash.empty:
            workload, metric = clash.index[0]
            raise SpecError(source, f"{workload}/{metric}: {col}",
                            f"differs between rows; one metric needs one {col}")
    return out.reset_index(drop=True)
