"""Per-trace work in this process, or as Dask tasks on a local or remote cluster.

Each run of a campaign is analysed on its own (one ``trace.dat``, one
result), so runs are independent tasks. :func:`map_traces` runs a function
over trace paths either one after another in this process (the serial path)
or as ``dask.distributed`` tasks:

* on a local cluster of processes, one single-threaded worker per core
  (``LocalCluster(processes=True, threads_per_worker=1)``), or
* on an existing cluster given by its scheduler address (``tcp://HOST:PORT``),
  whose workers read the traces from a path they all share with this machine.

Tasks carry only paths and a few options; each worker loads the trace itself
(:func:`lisa_ext.trace.load_trace`, so its parquet cache too) and sends back
small frames and dicts. Results come back in the order of the paths and are
the same objects, bit for bit, as the serial path gives: the same code runs
on the same bytes, and pandas frames pickle exactly.

Which path runs is :func:`choose_scheduler`'s decision: ``--scheduler`` /
:data:`SCHEDULER_ENV` when given, else serial below :data:`MIN_LOCAL_TASKS`
traces, else a local cluster. Users: ``lisa-ext analyse NAME --data DIR``
(:mod:`lisa_ext.analysis.campaign`) and the report
(:mod:`lisa_ext.report.build`). Importing this module is cheap (dask is
imported when a cluster is used), so commands that only register
``--scheduler`` stay fast.
"""

from __future__ import annotations

import logging
import os
from functools import partial
from typing import Callable, Sequence, TypeVar

from lisa_ext.errors import UserError

__all__ = [
    "LOCAL",
    "MIN_LOCAL_TASKS",
    "SCHEDULER_ENV",
    "SERIAL",
    "add_scheduler_argument",
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
