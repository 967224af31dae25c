"""Per-run trace work over a campaign: in this process, or as Dask tasks.

Every run of a campaign is analysed on its own (one ``trace.dat``, one
result), so the runs are independent tasks. :func:`map_traces` runs a
function over trace paths either one after another in this process (the
serial path) or as ``dask.distributed`` tasks:

* on a local cluster of processes, one single-threaded worker per core
  (``LocalCluster(processes=True, threads_per_worker=1)``), or
* on an existing cluster given by its scheduler address
  (``tcp://HOST:PORT``), whose workers read the runs from a path they all
  share with this machine.

Tasks carry only paths and a few options; each worker loads the trace itself
(:func:`lisa_ext.trace.load_trace`, so its parquet cache too) and sends back
small frames and dicts. Results come back in the order of the paths and are
the same objects, bit for bit, as the serial path gives: the same code runs
on the same bytes, and pandas frames pickle exactly.

Which path runs is :func:`choose_scheduler`'s decision: ``--scheduler`` /
:data:`SCHEDULER_ENV` when given, else serial for fewer than
:data:`MIN_LOCAL_TASKS` traces (starting a local cluster and importing LISA
in each worker costs more than it saves), else a local cluster.

:func:`analyse_campaign` is ``lisa-ext analyse NAME --campaign DIR``: one
analysis's ``summary()`` and ``summary_tables()`` for every run. The report
(:mod:`lisa_ext.report.build`) maps its own per-run work through
:func:`map_traces`. Modules of the ingest and store layers never import this one.
"""

from __future__ import annotations

import inspect
import logging
import os
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import pandas as pd

from lisa_ext.analysis import by_cli_name
from lisa_ext.analysis import platform as plat
from lisa_ext.campaign.store import read_campaign
from lisa_ext.compat import import_lisa
from lisa_ext.errors import UserError
from lisa_ext.trace import load_trace

__all__ = [
    "LOCAL",
    "MIN_LOCAL_TASKS",
    "SCHEDULER_ENV",
    "SERIAL",
    "RunAnalysis",
    "add_scheduler_argument",
    "analyse_campaign",
    "analyse_run",
    "choose_scheduler",
    "map_traces",
]

#: environment variable naming the scheduler when ``--scheduler`` is not given
SCHEDULER_ENV = "LISA_EXT_DASK_SCHEDULER"
#: ``--scheduler`` values: run in this process / on a local cluster of processes
SERIAL = "none"
LOCAL = "local"
#: below this many traces the default is serial. Measured on the loaded 2-core
#: development machine (docs/dask.md, bench/dask_campaign.py): a local cluster
#: costs ~20 s to start and import LISA in its workers, and two workers save
#: 0.5-1.1 s of the ~2.9 s a 1.24 M-event trace costs the first time (and
#: nothing on a warm cache), so they pay back from ~20-40 runs.
MIN_LOCAL_TASKS = 24

T = TypeVar("T")


def add_scheduler_argument(parser) -> None:
    """``--scheduler`` and ``--serial`` for a command that maps runs."""
    parser.add_argument(
        "--scheduler", metavar="ADDRESS",
        help=f"run the per-run trace work as Dask tasks on the cluster at ADDRESS "
             f"(tcp://HOST:PORT; workers must see the campaign at the same path), "
             f"'{LOCAL}' for a local cluster of one process per core, or '{SERIAL}' for "
             f"this process only (default: ${SCHEDULER_ENV}, else serial below "
             f"{MIN_LOCAL_TASKS} traces and a local cluster from there)")
    parser.add_argument("--serial", dest="scheduler", action="store_const", const=SERIAL,
                        help=f"same as --scheduler {SERIAL}")


def choose_scheduler(scheduler: str | None, n_tasks: int) -> str:
    """:data:`SERIAL`, :data:`LOCAL` or a scheduler address, from ``--scheduler``
    (``None`` when not given), then :data:`SCHEDULER_ENV`, then the task count."""
    chosen = scheduler or os.environ.get(SCHEDULER_ENV, "").strip() or None
    if chosen is None:
        return LOCAL if n_tasks >= MIN_LOCAL_TASKS and (os.cpu_count() or 1) > 1 else SERIAL
    if chosen.lower() in (SERIAL, "serial"):
        return SERIAL
    if chosen.lower() == LOCAL:
        return LOCAL
    if "://" not in chosen:
        source = "--scheduler" if scheduler else f"${SCHEDULER_ENV}"
        raise UserError(f"{source}: expected a Dask scheduler address such as "
                        f"tcp://HOST:8786, '{LOCAL}' or '{SERIAL}', not {chosen!r}")
    return chosen


def _on_worker(func: Callable[[str], T], path: str) -> T:
    # a worker that does not see the campaign must fail loudly: a missing trace
    # would otherwise become an ordinary "trace not read" note in the results
    if not os.path.exists(path):
        import socket

        raise FileNotFoundError(f"{path}: not visible on Dask worker {socket.gethostname()} "
                                f"(runs must be on a path every worker shares)")
    return func(path)


def _client(scheduler: str):
    # deferred: dask.distributed costs ~1 s to import and the serial path never needs it
    from distributed import Client, LocalCluster

    if scheduler == LOCAL:
        # ERROR: the nanny's "still alive, killing" warnings at close are routine
        # (a worker holding LISA's frames takes a few seconds to exit)
        cluster = LocalCluster(n_workers=os.cpu_count() or 1, processes=True,
                               threads_per_worker=1, dashboard_address=None,
                               silence_logs=logging.ERROR)
        return Client(cluster), cluster
    try:
        return Client(scheduler, timeout="20s"), None
    except (OSError, TimeoutError) as exc:
        raise UserError(f"Dask scheduler {scheduler}: cannot connect ({exc})") from None


def map_traces(func: Callable[[str], T], paths: Sequence[str | os.PathLike], *,
               scheduler: str | None = None) -> list[T]:
    """``[func(path) for path in paths]``, serial or as one Dask task per path.

    :param func: a picklable callable (a module-level function or a
        :func:`functools.partial` of one); it runs on the workers, so it must
        take a path and return something small.
    :param scheduler: as ``--scheduler`` (see :func:`choose_scheduler`).
    :raises UserError: when the scheduler cannot be reached or a worker cannot
        see a path; an exception raised by ``func`` itself is raised here.
    """
    chosen = choose_scheduler(scheduler, len(paths))
    if chosen == SERIAL or not paths:
        return [func(str(p)) for p in paths]
    paths = [os.path.abspath(p) for p in paths]  # workers do not share our cwd
    client, cluster = _client(chosen)
    try:
        futures = client.map(partial(_on_worker, func), paths, pure=False)
        try:
            return client.gather(futures)
        except FileNotFoundError as exc:
            raise UserError(str(exc)) from None
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


@dataclass
class RunAnalysis:
    """One run's result of :func:`analyse_campaign`."""

    label: str
    trace: str
    #: :meth:`~lisa_ext.analysis.base.StudyAnalysis.summary`
    summary: dict[str, Any]
    #: :meth:`~lisa_ext.analysis.base.StudyAnalysis.summary_tables`
    tables: list[tuple[str, pd.DataFrame]]


def analyse_run(path: str, cli_name: str, options: dict[str, Any],
                platform: plat.Platform | None = None) -> tuple[dict, list]:
    """``(summary, summary_tables)`` of analysis ``cli_name`` on one trace: the
    task of :func:`analyse_campaign`. ``platform`` (the user's, from
    ``--platform`` / ``--sysfs``) is completed by the trace's own, as
    ``lisa-ext analyse NAME TRACE`` does."""
    cls = by_cli_name(cli_name)
    trace = load_trace(path)
    options = dict(options)
    if "platform" in inspect.signature(cls.summary).parameters:
        options["platform"] = plat.merge(platform or plat.Platform(),
                                         plat.platform_from_plat_info(trace.plat_info))
    ana = getattr(trace.ana, cls.name)
    try:
        with warnings.catch_warnings():
            # LISA 3.1's analyses trip pandas 2.3 FutureWarnings on every call
            warnings.simplefilter("ignore", FutureWarning)
            return ana.summary(**options), ana.summary_tables(**options)
    except import_lisa("lisa.trace").MissingTraceEventError as exc:
        raise UserError(f"{path}: {cli_name}: {exc}") from None


def analyse_campaign(cli_name: str, campaign_dir: str | os.PathLike,
                     options: dict[str, Any] | None = None, *,
                     platform: plat.Platform | None = None,
                     scheduler: str | None = None) -> list[RunAnalysis]:
    """Analysis ``cli_name`` on every successful traced run of a campaign, in
    the store's run order (runs without a trace are left out)."""
    by_cli_name(cli_name)  # a bad name fails here, not on every worker
    campaign = read_campaign(campaign_dir)
    runs = [r for r in campaign.ok_runs if r.trace is not None]
    if not runs:
        raise UserError(f"{campaign.root}: no successful run has a trace")
    task = partial(analyse_run, cli_name=cli_name, options=dict(options or {}),
                   platform=platform)
    results = map_traces(task, [str(r.trace) for r in runs], scheduler=scheduler)
    return [RunAnalysis(r.label, str(Path(r.trace).relative_to(campaign.root)), summary, tables)
            for r, (summary, tables) in zip(runs, results)]
