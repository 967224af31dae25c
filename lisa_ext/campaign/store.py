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
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

__all__ = [
    "Metric", "RunKey", "RunResult", "CampaignStore", "TMP_PREFIX", "RUN_STATUSES",
    "load_result", "metrics_table", "METRICS_COLUMNS",
]

TMP_PREFIX = ".tmp-"
RUN_STATUSES = ("ok", "failed")
METRICS_COLUMNS = ["campaign", "variant", "workload", "metric", "unit", "lower_is_better",
                   "iteration", "value"]


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


def load_result(path: Path, expected: RunKey | None = None) -> RunResult:
    """Read and check one ``result.json``: a bad file is a SpecError naming it and the key.

    ``expected`` is the run its directory names; the file must agree with it.
    """
    from lisa_ext.errors import SpecError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(path, "<file>", f"cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(path, f"line {exc.lineno} column {exc.colno}",
                        f"not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise SpecError(path, "<top>", "expected a JSON object")
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
        """Every finished run, in (variant, workload, iteration) order."""
        if not self.runs_dir.is_dir():
            return
        found = []
        for result in self.runs_dir.glob("*/*/*/result.json"):
            if not result.parent.name.isdigit():
                continue
            wdir, vdir = result.parent.parent, result.parent.parent.parent
            key = RunKey(vdir.name, wdir.name, int(result.parent.name))
            found.append((result.parent, load_result(result, key)))
        yield from sorted(found, key=lambda pr: pr[1].key)

    def results(self) -> dict[RunKey, RunResult]:
        return {r.key: r for _path, r in self.iter_results()}


def metrics_table(campaign_dirs: str | os.PathLike | Iterable[str | os.PathLike]):
    """The tidy metrics table of one or more campaign directories, as a pandas DataFrame.

    Columns: campaign, variant, workload, metric, unit, lower_is_better, iteration,
    value — one row per (run, metric); failed runs contribute the metrics they have.
    """
    import pandas as pd

    if isinstance(campaign_dirs, (str, os.PathLike)):
        campaign_dirs = [campaign_dirs]
    rows = []
    for d in campaign_dirs:
        for _path, r in CampaignStore(d).iter_results():
            for m in r.metrics:
                rows.append((r.campaign, r.variant, r.workload, m.name, m.unit,
                             m.lower_is_better, r.iteration, m.value))
    df = pd.DataFrame(rows, columns=METRICS_COLUMNS)
    return df.astype({"iteration": "int64", "value": "float64", "lower_is_better": "bool"})
