"""The campaign store: where runs live on disk and how they are read back.

Layout (the contract every later stage reads)::

    data/<campaign>/.lisa-ext-campaign                says the store made this directory
    data/<campaign>/campaign.yml                      the spec as run (smoke: overrides applied)
    data/<campaign>/campaign-state.json               values the runner computed once
    data/<campaign>/.runner-journal.json              while a run changes the target: how to undo it
    data/<campaign>/runs/<variant>/<workload>/<i>/    one run, i = 0, 1, ...
        result.json   {campaign, variant, workload, iteration, status, error, metrics}
        meta.json     provenance: kernel, knobs read back, tool versions, timestamps
        trace.dat     when traced
        ...           the workload's raw output
    data/<campaign>/quarantine/<variant>/<workload>/<i>/   a damaged run moved aside
    data/<campaign>/report/                           the report (lisa_ext.report)

This module is the one writer of a campaign directory (:class:`CampaignStore`).
A run's files are gathered in a hidden scratch directory next to its final
place; :meth:`CampaignStore.publish` writes its result and provenance, syncs
every file and directory of it and renames it into place, so a directory named
by its iteration number is always a finished run (status "ok" or "failed"),
also after a crash of the machine.

Nothing removes a directory the store did not make: :func:`campaign_removal_refusal` (what
``--fresh`` asks) accepts only a campaign directory holding nothing but what the store writes,
and :func:`never_removed` names the directories no command removes or replaces whatever
they hold (``/``, the home directory, the current one, the data root).

It is also the one reader of the store: :func:`read_campaign` gives
typed :class:`Run` records (each with its :class:`RunMeta`) in spec order, and
:func:`metrics_table` the validated tidy metrics table. The report, the
studies, the quickstart notebook and ``campaign status`` all read through it,
so they agree on which runs count: failed runs are left out of the metrics
unless asked for (``include_failed=True``) and listed apart.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
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
from lisa_ext.workbench import cache_root, output_dir

__all__ = [
    "CAMPAIGN_MARKER", "JOURNAL_NAME", "METRICS_COLUMNS", "METRIC_DTYPES", "QUARANTINE_DIR", "RUN_META",
    "RUN_STATUSES", "RUN_TRACE", "RUN_TRACE_LOG", "SPEC_COPY", "STATE_NAME", "TMP_PREFIX", "TRACE_FILES",
    "Campaign", "CampaignStore", "DamagedRun", "Journal", "Metric", "Run", "RunKey", "RunMeta",
    "RunResult", "StoreScan",
    "campaign_removal_refusal", "load_result", "metrics_table", "never_removed", "read_campaign",
    "read_json_object", "traced_runs", "validate_metrics", "write_json",
]

TMP_PREFIX = ".tmp-"
#: the spec the campaign runs, as applied (smoke overrides, another target)
SPEC_COPY = "campaign.yml"
#: per-campaign values the runner computes once (rt-app calibration, ...)
STATE_NAME = "campaign-state.json"
#: what the run in progress changed on the target, written before each change (see :class:`Journal`)
JOURNAL_NAME = ".runner-journal.json"
#: where ``campaign status --repair`` moves damaged runs
QUARANTINE_DIR = "quarantine"
#: written when the store makes a campaign directory: what ``--fresh`` may remove
CAMPAIGN_MARKER = ".lisa-ext-campaign"
#: the names the store (and the report, in ``report/``) writes at the top of a campaign directory
STORE_ENTRIES = frozenset({CAMPAIGN_MARKER, SPEC_COPY, STATE_NAME, JOURNAL_NAME, "runs", QUARANTINE_DIR,
                           "report"})
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
#: a run directory's provenance, and its trace-cmd trace and log: the only spelling of these names
#: (every other module asks the store, or takes them from here)
RUN_META = "meta.json"
RUN_TRACE = "trace.dat"
RUN_TRACE_LOG = "trace-cmd.log"
#: trace file names a run directory may hold, in order of preference
#: (Android targets record systrace HTML or text)
TRACE_FILES = (RUN_TRACE, "trace.html", "trace.txt")


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

    @classmethod
    def parse(cls, label: str) -> "RunKey | None":
        """The key ``str(key)`` wrote (``variant/workload/iteration``), None if ``label`` is not one."""
        parts = str(label).split("/")
        if len(parts) != 3 or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]))


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


#: the largest result.json or meta.json read: ours are kilobytes (a campaign directory may come
#: from anyone, and json.loads holds the whole file and more)
MAX_JSON_BYTES = 16 * 1024 * 1024


def read_json_object(path: Path) -> dict:
    """A JSON object from the store (result.json, meta.json): a bad file is a SpecError naming it."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            raise SpecError(path, "<file>", f"larger than {MAX_JSON_BYTES // 2**20} MiB; not one of ours")
        data = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(path, "<file>", f"cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(path, f"line {exc.lineno} column {exc.colno}",
                        f"not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise SpecError(path, "<top>", "nested too deeply to be one of ours") from None
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
    """Write JSON via a synced temporary file and a rename, so a reader never sees half a file
    and a crash leaves the old file or the new one."""
    _write_bytes(path, (json.dumps(data, indent=2, sort_keys=False, default=str) + "\n").encode())


def _write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """fsync every file below ``root`` (subdirectories such as ``wa-output/`` included), then
    every directory from the deepest up to ``root`` itself: what a rename then publishes is on
    disk whatever happens to the machine after it."""
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                continue  # the link is an entry of its directory, synced with it
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _journal_key() -> bytes:
    """This machine's key for journal signatures, made on first use (readable by its owner only)."""
    path = cache_root() / "journal.key"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"journal.key.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(32))
    try:
        os.link(tmp, path)  # atomic, and the first writer wins
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_bytes()


def _sign(data: dict) -> str:
    payload = json.dumps(data, sort_keys=True, default=str).encode()
    return hmac.new(_journal_key(), payload, hashlib.sha256).hexdigest()


def never_removed(path: str | os.PathLike) -> str | None:
    """Why no command removes or replaces ``path`` whatever it holds (``/``, the home
    directory, the current directory, the data root or a directory holding one of them);
    ``None`` for any other path."""
    resolved = Path(path).expanduser().resolve()
    if resolved == Path(resolved.anchor):
        return "is the root directory"
    places = [("the home directory", Path.home()), ("the current directory", Path.cwd())]
    with contextlib.suppress(UserError):  # a bad $LISA_EXT_WORKBENCH: no data root to keep
        places.append(("the data root", output_dir() / "data"))
    for what, place in places:
        place = place.resolve()
        if resolved == place:
            return f"is {what}"
        if resolved in place.parents:
            return f"holds {what} ({place})"
    return None


def _store_entry(name: str) -> bool:
    """Whether ``name``, at the top of a campaign directory, is one the store or the report wrote."""
    if name in STORE_ENTRIES or (name.endswith(".part") and name[:-len(".part")] in STORE_ENTRIES):
        return True  # write_json's temporaries included
    return name.startswith(".report.")  # the report's build and swap temporaries (lisa_ext.report.build)


def campaign_removal_refusal(path: str | os.PathLike) -> str | None:
    """Why the existing directory ``path`` is not a campaign directory lisa-ext may remove
    (``--fresh``), ``None`` when it is one: made by the store (:data:`CAMPAIGN_MARKER`), or
    older than that marker and holding the spec copy with runs or state, and holding nothing
    the store or the report did not write. The one place that decision is made."""
    path = Path(path)
    if path.is_symlink():
        return "is a symbolic link"
    if not path.is_dir():
        return "is not a directory"
    why = never_removed(path)
    if why is not None:
        return why
    foreign = sorted(entry.name for entry in path.iterdir() if not _store_entry(entry.name))
    if foreign:
        more = f" and {len(foreign) - 1} more entries" if len(foreign) > 1 else ""
        return f"holds {foreign[0]!r}{more}, which lisa-ext did not write"
    if (path / CAMPAIGN_MARKER).is_file():
        return None
    if (path / SPEC_COPY).is_file() and ((path / "runs").is_dir() or (path / STATE_NAME).is_file()):
        return None  # a campaign directory written before the marker existed
    return "holds no campaign lisa-ext made"


@dataclass(frozen=True)
class DamagedRun:
    """A directory under ``runs/`` that is not a readable finished run (a truncated or
    hand-edited ``result.json``, a stray directory): listed by ``campaign status``, moved
    aside by :meth:`CampaignStore.quarantine`."""

    path: Path
    #: the run its directory names, when it names one
    key: RunKey | None
    problem: str

    @property
    def label(self) -> str:
        return str(self.key) if self.key is not None else str(self.path)


class Journal:
    """The file where the runner notes, before each change to the target, how to undo it
    (``.runner-journal.json``): what a killed runner left behind. The store owns the file;
    what goes in it is the target session's (:class:`lisa_ext.campaign.session.TargetSession`).

    Undoing a journal runs its commands as root on the target, so it carries a signature
    (``signature``: an HMAC-SHA256 under a key kept in the cache root, ``journal.key``): a
    journal this workbench did not write here (a campaign directory copied from a colleague,
    or edited) is reported as damaged and nothing is undone from it."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, data: dict) -> None:
        write_json(self.path, {**data, "signature": _sign(data)})

    def read(self) -> dict | None:
        """The journal, ``None`` when there is none; a damaged one is ``{"damaged": why}``."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read(MAX_JSON_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return {"damaged": f"cannot read {self.path}: {exc}"}
        if len(raw) > MAX_JSON_BYTES:
            return {"damaged": f"{self.path}: larger than {MAX_JSON_BYTES // 2**20} MiB"}
        try:
            data = json.loads(raw.decode("utf-8") or "{}")
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            return {"damaged": f"{self.path}: not valid JSON ({type(exc).__name__})"}
        if not isinstance(data, dict):
            return {"damaged": f"{self.path}: not a JSON object"}
        if not data:
            return data
        signature = data.pop("signature", None)
        if not isinstance(signature, str) or not hmac.compare_digest(signature, _sign(data)):
            return {"damaged": f"{self.path} was not written by this workbench on this machine (its "
                               "signature does not match): undo what it names on the target by hand"}
        return data

    def clear(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return
        _fsync_dir(self.path.parent)


class CampaignStore:
    """One campaign directory, ``data/<campaign>/``, and the one writer of it.

    A run's files are gathered in a scratch directory (:meth:`scratch`) and become a run only
    through :meth:`publish`; the spec copy, the runner's state and its journal are written here
    too. Readers use :func:`read_campaign` (strict: a damaged run is an error naming it) or
    :meth:`scan` (lenient: damaged runs listed apart, for ``status`` and ``--resume``).
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.journal = Journal(self.root / JOURNAL_NAME)

    @property
    def spec_copy(self) -> Path:
        return self.root / SPEC_COPY

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    @property
    def quarantine_dir(self) -> Path:
        return self.root / QUARANTINE_DIR

    def exists(self) -> bool:
        """Whether this directory holds a campaign (the store's marker, a spec copy or collected runs)."""
        return (self.root / CAMPAIGN_MARKER).is_file() or self.spec_copy.is_file() or self.runs_dir.is_dir()

    def check_removable(self) -> bool:
        """Whether there is a campaign directory to remove (``--fresh``): ``False`` when the path
        is missing or an empty directory.

        :raises UserError: naming the directory and why lisa-ext may not remove it
            (:func:`campaign_removal_refusal`).
        """
        if not self.root.is_symlink() and (not self.root.exists() or
                                           (self.root.is_dir() and not any(self.root.iterdir()))):
            return False
        why = campaign_removal_refusal(self.root)
        if why is not None:
            raise UserError(f"{self.root}: not removed: it {why}; lisa-ext removes only a campaign "
                            "directory it made")
        return True

    def remove(self) -> None:
        """Delete the campaign directory (``--fresh``) when :meth:`check_removable` allows it."""
        if self.check_removable():
            shutil.rmtree(self.root)

    def _make_root(self) -> None:
        """Create the directory; when it is new (or empty) mark it as the store's. A directory
        holding something other than a campaign is refused: the spec copy and the runs would
        be written among the user's files."""
        if self.root.is_dir() and any(self.root.iterdir()):
            if not self.exists():
                raise UserError(f"{self.root}: is not empty and holds no campaign; run the campaign "
                                "into a new directory")
            return
        self.root.mkdir(parents=True, exist_ok=True)
        _write_bytes(self.root / CAMPAIGN_MARKER,
                     b"lisa-ext made this campaign directory: --fresh may remove it\n")

    def has_runs(self) -> bool:
        """Whether any run was published here."""
        return self.runs_dir.is_dir() and any(self.runs_dir.glob("*/*/[0-9]*"))

    def board_timings(self) -> set[str]:
        """The board timings its published runs recorded (``meta.json``'s ``board_timing``); runs on
        targets without the emulation modules record none."""
        timings = set()
        for meta in self.runs_dir.glob("*/*/[0-9]*/meta.json"):
            try:
                timing = read_json_object(meta).get("board_timing")
            except SpecError:
                continue  # a damaged run: the scan quarantines it
            if isinstance(timing, str):
                timings.add(timing)
        return timings

    def last_change(self) -> float:
        """When a run was last published or moved aside here (an mtime; 0 without runs)."""
        return max((d.stat().st_mtime for d in self.runs_dir.glob("*/*") if d.is_dir()), default=0.0)

    def run_dir(self, key: RunKey) -> Path:
        return self.runs_dir / key.variant / key.workload / str(key.iteration)

    def is_published(self, key: RunKey) -> bool:
        return (self.run_dir(key) / "result.json").is_file()

    # -- the campaign's own files ---------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the directory for one runner (an flock on the directory itself: no lock file
        to clean up, released by the kernel even on SIGKILL)."""
        self._make_root()
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UserError(f"another runner is working on {self.root}") from None
            yield
        finally:
            os.close(fd)

    def read_spec_copy(self) -> Any:
        """The spec copy as plain data (``None`` when there is none)."""
        if not self.spec_copy.is_file():
            return None
        return json.loads(json.dumps(load_yaml(self.spec_copy, "campaign spec"), default=str))

    def write_spec_copy(self, text: str) -> None:
        """Store the spec the campaign runs (synced, renamed into place)."""
        self._make_root()
        _write_bytes(self.spec_copy, text.encode("utf-8"))

    def read_state(self) -> dict:
        """Values the runner computed once for the campaign (``campaign-state.json``)."""
        path = self.root / STATE_NAME
        return read_json_object(path) if path.is_file() else {}

    def write_state(self, state: dict) -> None:
        write_json(self.root / STATE_NAME, state)

    # -- runs -------------------------------------------------------------------------------

    def scratch(self, key: RunKey) -> Path:
        """A fresh, empty directory next to where ``key``'s run will live, for its files."""
        parent = self.run_dir(key).parent
        parent.mkdir(parents=True, exist_ok=True)
        tmp = parent / f"{TMP_PREFIX}{key.iteration}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        return tmp

    def publish(self, key: RunKey, meta: Mapping[str, Any], result: RunResult,
                scratch: Path | None = None) -> Path:
        """Make a finished run visible at once: write its ``meta.json`` and ``result.json``
        into ``scratch`` (which holds the run's other files; a fresh one when ``None``), sync
        every file and directory in it, rename it to the run's place, sync the parents, then
        clear the journal (the run has undone its changes to the target by then).

        A kill before the rename leaves a scratch directory the next ``--resume`` removes; a
        kill after it leaves the run published and the journal naming it, and the next
        ``--resume`` keeps the run and says so."""
        if scratch is None:
            scratch = self.scratch(key)
        write_json(scratch / RUN_META, dict(meta))
        write_json(scratch / "result.json", result.to_json())
        _fsync_tree(scratch)
        final = self.run_dir(key)
        os.rename(scratch, final)
        for directory in (final.parent, final.parent.parent, self.runs_dir):
            _fsync_dir(directory)
        self.journal.clear()
        return final

    def remove_partial_runs(self, *, ignore_errors: bool = False) -> list[Path]:
        """Delete the scratch directories an interrupted runner left."""
        removed = []
        if self.runs_dir.is_dir():
            for tmp in sorted(self.runs_dir.glob(f"*/*/{TMP_PREFIX}*")):
                shutil.rmtree(tmp, ignore_errors=ignore_errors)
                removed.append(tmp)
        return removed

    def scan(self) -> "StoreScan":
        """Every finished run, and apart the directories that are not readable runs."""
        if not self.runs_dir.is_dir():
            return StoreScan([], [])
        damaged: list[DamagedRun] = []
        runs = _read_runs(self.root, damaged)
        return StoreScan(sorted(runs, key=lambda r: r.key), damaged)

    def results(self) -> dict[RunKey, RunResult]:
        """The result of every finished run (a damaged run is a SpecError naming it)."""
        if not self.runs_dir.is_dir():
            return {}
        return {r.key: r.result for r in _read_runs(self.root, None)}

    def quarantine(self, damaged: Iterable[DamagedRun]) -> list[tuple[DamagedRun, Path]]:
        """Move damaged runs aside, to ``quarantine/`` under their path below ``runs/``
        (numbered when that place is taken); every other run stays. Returns (run, new place)."""
        moved = []
        for bad in damaged:
            dest = self.quarantine_dir / bad.path.relative_to(self.runs_dir)
            n = 1
            while dest.exists():
                dest = dest.with_name(f"{bad.path.name}-{n}")
                n += 1
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(bad.path, dest)
            _fsync_dir(dest.parent)
            _fsync_dir(bad.path.parent)
            moved.append((bad, dest))
        return moved


@dataclass
class StoreScan:
    """What :meth:`CampaignStore.scan` found."""

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
    def result(self) -> RunResult:
        """The run's ``result.json``."""
        return RunResult(self.campaign, self.variant, self.workload, self.iteration, self.status,
                         self.error, list(self.metrics))

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
        return RunMeta.read(self.path / RUN_META)


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


def _spec_names(root: Path) -> tuple[str | None, list[str], list[str], dict[str, Any]]:
    """Name, variant names, workload names and report settings of the spec copy, leniently:
    the copy is what was run, only its names and their order matter here."""
    spec = root / SPEC_COPY
    if not spec.is_file():
        return None, [], [], {}
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
    return ((str(name) if name else None), names("variants"), names("workloads"),
            dict(report) if isinstance(report, dict) else {})


def _ordered(seen: set[str], spec: list[str]) -> list[str]:
    return [n for n in spec if n in seen] + sorted(seen - set(spec))


def _visible_dirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))


def _read_runs(root: Path, damaged: list[DamagedRun] | None) -> list[Run]:
    """The runs under ``root/runs``. A directory that is not a readable run is a SpecError
    naming it, or, given a ``damaged`` list, added to that list."""
    runs = []
    for vdir in _visible_dirs(root / "runs"):
        for wdir in _visible_dirs(vdir):
            for idir in _visible_dirs(wdir):
                key = RunKey(vdir.name, wdir.name, int(idir.name)) if idir.name.isdigit() else None
                try:
                    if key is None:
                        raise SpecError(idir, "<directory>", "iteration directories are named 0, 1, ...")
                    path = idir / "result.json"
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
    runs_dir = root / "runs"
    if not runs_dir.is_dir():
        raise UserError(f"{root}: not a campaign directory (no runs/ in it)")
    name, spec_variants, spec_workloads, report = _spec_names(root)
    runs = _read_runs(root, None)
    if not runs and not allow_empty:
        raise UserError(f"{root}: the campaign has no finished runs yet")
    variants = _ordered({r.variant for r in runs}, spec_variants)
    workloads = _ordered({r.workload for r in runs}, spec_workloads)
    vpos, wpos = {v: i for i, v in enumerate(variants)}, {w: i for i, w in enumerate(workloads)}
    runs.sort(key=lambda r: (wpos[r.workload], vpos[r.variant], r.iteration))
    return Campaign(name or root.name, root, variants, workloads, runs, report)


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
